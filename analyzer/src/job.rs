//! One job, many ranks: a directory of per-rank traces, each rank known from the launcher's
//! variables the recorder copied into its metadata, and how unevenly the ranks use memory.
//!
//! The rank is `RANK` (torchrun and `torch.distributed`), else `SLURM_PROCID`, else
//! `OMPI_COMM_WORLD_RANK`; the job id `TORCHELASTIC_RUN_ID`, else `SLURM_JOB_ID`. Traces that
//! name no rank, and a second trace naming a rank another already has, are numbered after the
//! highest named rank in file-name order: no two traces of a job share a rank, and a named rank
//! keeps its number whatever else the directory holds.

use serde::Serialize;
use std::path::PathBuf;
use vramtrace_format::Metadata;

/// Variables that give the global rank, in order of preference.
const RANK_VARS: [&str; 3] = ["RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"];
const LOCAL_RANK_VARS: [&str; 3] = ["LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"];
const WORLD_SIZE_VARS: [&str; 3] = ["WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"];
const JOB_ID_VARS: [&str; 2] = ["TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"];

fn var<'a>(metadata: &'a Metadata, names: &[&str]) -> Option<&'a str> {
    names.iter().find_map(|n| {
        metadata
            .environment
            .iter()
            .find(|(k, v)| k == n && !v.is_empty())
            .map(|(_, v)| v.as_str())
    })
}

fn number(metadata: &Metadata, names: &[&str]) -> Option<u32> {
    var(metadata, names)?.trim().parse().ok()
}

/// The global rank the launcher gave the traced process, when it gave one.
pub fn rank_of(metadata: &Metadata) -> Option<u32> {
    number(metadata, &RANK_VARS)
}

/// The rank within its node.
pub fn local_rank_of(metadata: &Metadata) -> Option<u32> {
    number(metadata, &LOCAL_RANK_VARS)
}

/// The number of ranks in the job.
pub fn world_size_of(metadata: &Metadata) -> Option<u32> {
    number(metadata, &WORLD_SIZE_VARS)
}

/// The job's id, when the launcher named it.
pub fn job_id_of(metadata: &Metadata) -> Option<String> {
    var(metadata, &JOB_ID_VARS).map(str::to_string)
}

/// One rank's trace and what was loaded from it.
#[derive(Debug)]
pub struct Rank<T> {
    pub rank: u32,
    /// False when the trace named no rank (or one an earlier trace in path order named) and
    /// `rank` follows the named ones in path order.
    pub rank_known: bool,
    pub path: PathBuf,
    pub value: T,
    /// What the rank's trace lacks when it is incomplete (cut short, salvaged, merged in
    /// memory); `None` when complete or not yet known.
    pub incomplete: Option<crate::completeness::Incomplete>,
}

/// Orders the loaded traces of one job by rank: `(path, value, rank_of(metadata))` each, in the
/// order the directory listing gives (file-name order). Traces that name no rank, or a rank an
/// earlier one took, get the numbers after the highest named one, in that order.
pub fn ranks<T>(loaded: Vec<(PathBuf, T, Option<u32>)>) -> Vec<Rank<T>> {
    let mut taken = std::collections::HashSet::new();
    let loaded: Vec<(PathBuf, T, Option<u32>)> = loaded
        .into_iter()
        .map(|(path, value, rank)| {
            let rank = rank.filter(|&r| taken.insert(r));
            (path, value, rank)
        })
        .collect();
    let mut next = taken.iter().max().map_or(0, |&r| u64::from(r) + 1);
    let mut ranks: Vec<Rank<T>> = loaded
        .into_iter()
        .map(|(path, value, rank)| {
            let known = rank.is_some();
            let rank = rank.unwrap_or_else(|| {
                next += 1;
                u32::try_from(next - 1).unwrap_or(u32::MAX)
            });
            Rank {
                rank,
                rank_known: known,
                path,
                value,
                incomplete: None,
            }
        })
        .collect();
    ranks.sort_by_key(|r| r.rank);
    ranks
}

/// How one figure (a peak) spreads over the ranks of a job.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Spread {
    /// The rank with the largest value: the one that sets the job's peak.
    pub max_rank: u32,
    pub max: u64,
    pub min_rank: u32,
    pub min: u64,
    /// The median rank ([`median`]) and its value.
    pub median_rank: u32,
    pub median: u64,
    /// `max / median` (docs/definitions.md, "imbalance"): 1 when every rank is equal, 1.25 when
    /// the largest is 25% above the median rank; `None` when the median rank's value is 0.
    pub imbalance: Option<f64>,
}

/// The median of `(rank, value)` pairs: the middle one by value, the lower middle of an even
/// number, ties ordered by rank; `None` for none. A rank of the job, so that it can be compared
/// with another (docs/definitions.md, "median rank").
pub fn median(values: &[(u32, u64)]) -> Option<(u32, u64)> {
    let mut sorted: Vec<(u64, u32)> = values.iter().map(|&(r, v)| (v, r)).collect();
    sorted.sort_unstable();
    sorted
        .get(values.len().checked_sub(1)? / 2)
        .map(|&(v, r)| (r, v))
}

/// An imbalance as text shows it: `1.52x`, `-` when there is none (the median rank's is 0).
pub fn imbalance_text(imbalance: Option<f64>) -> String {
    imbalance.map_or("-".into(), |i| format!("{i:.2}x"))
}

impl Spread {
    /// The spread of `(rank, value)` pairs; `None` for none. Ties go to the lower rank.
    pub fn of(values: &[(u32, u64)]) -> Option<Spread> {
        let max = values
            .iter()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))?;
        let min = values
            .iter()
            .min_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)))?;
        let (median_rank, median) = median(values)?;
        Some(Spread {
            max_rank: max.0,
            max: max.1,
            min_rank: min.0,
            min: min.1,
            median_rank,
            median,
            imbalance: (median > 0).then(|| max.1 as f64 / median as f64),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(vars: &[(&str, &str)]) -> Metadata {
        Metadata {
            environment: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Metadata::default()
        }
    }

    #[test]
    fn rank_comes_from_torchrun_then_slurm() {
        assert_eq!(
            rank_of(&meta(&[("SLURM_PROCID", "3"), ("RANK", "5")])),
            Some(5)
        );
        assert_eq!(rank_of(&meta(&[("SLURM_PROCID", "3")])), Some(3));
        assert_eq!(rank_of(&meta(&[("RANK", "x")])), None);
        assert_eq!(
            job_id_of(&meta(&[("SLURM_JOB_ID", "77")])).as_deref(),
            Some("77")
        );
    }

    #[test]
    fn spread_names_the_rank_that_sets_the_peak() {
        let s = Spread::of(&[(0, 100), (1, 150), (2, 50)]).unwrap();
        assert_eq!((s.max_rank, s.max, s.min_rank, s.min), (1, 150, 2, 50));
        assert_eq!((s.median_rank, s.median, s.imbalance), (0, 100, Some(1.5)));
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[(0, 0), (1, 5)]).unwrap().imbalance, None);
    }

    #[test]
    fn the_median_rank_of_an_even_number_is_the_lower_middle_one() {
        assert_eq!(median(&[(0, 40), (1, 10), (2, 30), (3, 20)]), Some((3, 20)));
        assert_eq!(median(&[(0, 7), (1, 7), (2, 7)]), Some((1, 7)));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn ranks_are_ordered_and_unnamed_ones_follow() {
        let got: Vec<(u32, bool, &str)> = ranks(vec![
            (PathBuf::from("a"), "a", None),
            (PathBuf::from("b"), "b", None),
            (PathBuf::from("c"), "c", Some(0)),
        ])
        .iter()
        .map(|r| (r.rank, r.rank_known, r.value))
        .collect();
        assert_eq!(got, [(0, true, "c"), (1, false, "a"), (2, false, "b")]);
    }

    #[test]
    fn a_rank_named_twice_or_not_at_all_never_takes_a_named_ranks_number() {
        // rank-1 names no rank and rank-3 repeats rank 2: neither may become rank 1, 2 or 3.
        let got: Vec<(u32, bool, &str)> = ranks(vec![
            (PathBuf::from("rank-0"), "r0", Some(0)),
            (PathBuf::from("rank-1"), "r1", None),
            (PathBuf::from("rank-2"), "r2", Some(2)),
            (PathBuf::from("rank-3"), "r3", Some(2)),
            (PathBuf::from("rank-4"), "r4", Some(3)),
        ])
        .iter()
        .map(|r| (r.rank, r.rank_known, r.value))
        .collect();
        assert_eq!(
            got,
            [
                (0, true, "r0"),
                (2, true, "r2"),
                (3, true, "r4"),
                (4, false, "r1"),
                (5, false, "r3")
            ]
        );
    }
}
