//! `tune` of a job: each rank's own search ([`super::tune`]) put together, every setting judged
//! by its worst rank. A job runs with one setting on every rank, so the setting to pick is the
//! one whose largest rank needs least (docs/definitions.md, "Jobs").

use super::grid::select_line;
use super::{Row, Tune};
use crate::job::Spread;
use crate::policy::alloc_conf::parse_policy_list;
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};

/// One setting over the ranks of a job.
#[derive(Debug, Clone, Serialize)]
pub struct JobRow {
    /// The policy spec (`--policy` syntax), the first of its class in the first rank's order.
    pub setting: String,
    /// The line to paste, or the code, that selects it.
    pub select: String,
    /// The other settings that replayed the same as it on every rank.
    pub equivalent: Vec<String>,
    /// True when it is the configuration every rank was recorded with.
    pub recorded: bool,
    /// The ranks' predicted process peaks under it: the job's is the largest (`max`, on rank
    /// `max_rank`), `imbalance` how far that is above the median rank's.
    pub process_peak: Spread,
    /// The ranks that run out of memory under it.
    pub oom_ranks: Vec<u32>,
    /// Whether every rank fits `--gpu`; `null` without one.
    pub fits_gpu: Option<bool>,
}

/// What `tune` answers for a job.
#[derive(Debug, Clone, Serialize)]
pub struct JobTune {
    /// The settings every rank's search judged, best first: those no rank runs out of memory
    /// under, then by the largest rank's process peak, then as the first rank's search ranks
    /// them (its noise bands, cost and simplicity).
    pub ranked: Vec<JobRow>,
    /// The recorded configurations' process peaks over the ranks.
    pub recorded: Option<Spread>,
    /// Settings judged on some ranks only (a rank's search left them out), left out of
    /// `ranked`.
    pub not_on_every_rank: usize,
}

impl JobTune {
    /// The job of `ranks`, each `(rank, its own search)`, in rank order.
    pub fn of(ranks: &[(u32, &Tune)]) -> JobTune {
        let by_setting: Vec<HashMap<&str, &Row>> = ranks
            .iter()
            .map(|(_, t)| {
                t.ranked
                    .iter()
                    .flat_map(|r| names(r).map(move |s| (s, r)))
                    .collect()
            })
            .collect();
        let first: Vec<&str> = ranks.first().map_or(Vec::new(), |(_, t)| {
            t.ranked.iter().flat_map(names).collect()
        });
        // The settings that replay the same on every rank are one row, named by the first in
        // the first rank's order.
        let mut groups: Vec<(Vec<&Row>, Vec<&str>)> = Vec::new();
        for setting in &first {
            let Some(rows) = by_setting
                .iter()
                .map(|m| m.get(setting).copied())
                .collect::<Option<Vec<&Row>>>()
            else {
                continue;
            };
            let same = |g: &&mut (Vec<&Row>, Vec<&str>)| {
                g.0.iter().zip(&rows).all(|(a, b)| std::ptr::eq(*a, *b))
            };
            match groups.iter_mut().find(|g| same(g)) {
                Some(g) => g.1.push(setting),
                None => groups.push((rows, vec![setting])),
            }
        }
        let mut ranked = Vec::new();
        for (order, (rows, names)) in groups.into_iter().enumerate() {
            let peaks: Vec<(u32, u64)> = ranks
                .iter()
                .zip(&rows)
                .map(|((rank, _), r)| (*rank, r.process_peak))
                .collect();
            let fits: Option<Vec<bool>> = rows.iter().map(|r| r.fits_gpu).collect();
            let row = JobRow {
                setting: names[0].to_string(),
                select: select_of(names[0], &rows),
                equivalent: names[1..].iter().map(|s| s.to_string()).collect(),
                recorded: rows.iter().all(|r| r.recorded),
                process_peak: Spread::of(&peaks).expect("a job has ranks"),
                oom_ranks: ranks
                    .iter()
                    .zip(&rows)
                    .filter(|(_, r)| r.oom)
                    .map(|((rank, _), _)| *rank)
                    .collect(),
                fits_gpu: fits.map(|f| f.iter().all(|&x| x)),
            };
            ranked.push((order, row));
        }
        ranked.sort_by_key(|(order, r)| (!r.oom_ranks.is_empty(), r.process_peak.max, *order));
        let judged: BTreeSet<&str> = by_setting.iter().flat_map(|m| m.keys().copied()).collect();
        let recorded: Vec<(u32, u64)> = ranks
            .iter()
            .map(|(rank, t)| (*rank, t.recorded.process_peak))
            .collect();
        JobTune {
            not_on_every_rank: judged.len()
                - ranked
                    .iter()
                    .map(|(_, r)| 1 + r.equivalent.len())
                    .sum::<usize>(),
            ranked: ranked.into_iter().map(|(_, r)| r).collect(),
            recorded: Spread::of(&recorded),
        }
    }

    /// The setting to run the job with: the first ranked.
    pub fn best(&self) -> Option<&JobRow> {
        self.ranked.first()
    }
}

/// The settings a row of a rank's search stands for: its own, then those that replayed the same.
fn names(r: &Row) -> impl Iterator<Item = &str> {
    std::iter::once(r.setting.as_str()).chain(r.equivalent.iter().map(String::as_str))
}

/// The line that selects `setting`, one of the settings of `rows` (a rank's row each): a row's
/// own when it is named by it, else made from the spec.
fn select_of(setting: &str, rows: &[&Row]) -> String {
    if let Some(r) = rows.iter().find(|r| r.setting == setting) {
        return r.select.clone();
    }
    match parse_policy_list(setting).as_deref() {
        Ok([spec]) => select_line(rows[0].framework, spec),
        _ => setting.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::device::CUDA_CONTEXT_BYTES;
    use vramtrace_format::{ReadOptions, Trace};

    fn tune_of(sample: &str) -> Tune {
        let path = format!("{}/../samples/traces/{sample}", env!("CARGO_MANIFEST_DIR"));
        let trace = Trace::open(std::path::Path::new(&path), ReadOptions::default()).unwrap();
        super::super::tune_trace(&trace, None, None, CUDA_CONTEXT_BYTES)
            .unwrap()
            .unwrap()
    }

    #[test]
    fn a_setting_one_rank_runs_out_under_ranks_after_every_setting_that_fits_all() {
        let a = tune_of("torch-mlp-requests.vramtrace");
        let mut b = a.clone();
        // On rank 1, rank 0's best setting runs out of memory (its peak below every other).
        b.ranked[0].oom = true;
        b.ranked[0].process_peak = 1;
        let job = JobTune::of(&[(0, &a), (1, &b)]);
        let (last, fitting) = job.ranked.split_last().unwrap();
        assert_eq!(last.setting, a.ranked[0].setting);
        assert_eq!(last.oom_ranks, [1]);
        assert!(fitting.iter().all(|r| r.oom_ranks.is_empty()));
        let least = a.ranked[1..].iter().map(|r| r.process_peak).min();
        assert_eq!(Some(fitting[0].process_peak.max), least);
        assert!(
            fitting
                .windows(2)
                .all(|w| w[0].process_peak.max <= w[1].process_peak.max)
        );
        assert_eq!(fitting[0].process_peak.imbalance, Some(1.0));
        let settings: usize = job.ranked.iter().map(|r| 1 + r.equivalent.len()).sum();
        assert_eq!((settings, job.not_on_every_rank), (a.tried, 0));
    }
}
