//! A directory of one job's per-rank traces given to `summary`, `replay` or `fit`: each rank's
//! own report, and for the job the rank that sets each peak and how unevenly the ranks spread.

use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use vramtrace::completeness::Incomplete;
use vramtrace::job::{Rank, Spread};
use vramtrace::units::bytes;

/// What `--json` prints for a job directory.
#[derive(Debug, Serialize)]
pub struct JobOutput<R: Serialize, J: Serialize> {
    pub job: String,
    pub ranks: Vec<RankOutput<R>>,
    /// The job's figures over its ranks.
    pub job_summary: J,
    /// The incomplete ranks' traces, keyed by file as a single trace's `incomplete` is; left
    /// out when every trace is complete.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub incomplete: BTreeMap<String, Incomplete>,
}

#[derive(Debug, Serialize)]
pub struct RankOutput<R: Serialize> {
    pub rank: u32,
    /// False when the trace named no rank (`RANK`, `SLURM_PROCID`, `OMPI_COMM_WORLD_RANK`) and
    /// `rank` is its place after the named ones in file-name order.
    pub rank_known: bool,
    pub trace: String,
    /// What the rank's trace lacks; left out when it is complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<Incomplete>,
    pub report: R,
}

/// One figure over the ranks, by name.
#[derive(Debug, Serialize)]
pub struct Figure {
    pub name: String,
    /// `null` when no rank has the figure (a policy that fits no capacity).
    pub spread: Option<Spread>,
    /// Ranks without the figure.
    pub missing_ranks: Vec<u32>,
}

impl Figure {
    pub fn of<R>(name: String, ranks: &[Rank<R>], value: &dyn Fn(&R) -> Option<u64>) -> Figure {
        let values: Vec<(u32, u64)> = ranks
            .iter()
            .filter_map(|r| Some((r.rank, value(&r.value)?)))
            .collect();
        Figure {
            name,
            spread: Spread::of(&values),
            missing_ranks: ranks
                .iter()
                .filter(|r| value(&r.value).is_none())
                .map(|r| r.rank)
                .collect(),
        }
    }
}

pub fn output<R: Serialize, J: Serialize>(
    dir: &Path,
    ranks: Vec<Rank<R>>,
    job: J,
) -> JobOutput<R, J> {
    let incomplete = ranks
        .iter()
        .filter_map(|r| Some((r.path.display().to_string(), r.incomplete.clone()?)))
        .collect();
    JobOutput {
        job: dir.display().to_string(),
        ranks: ranks
            .into_iter()
            .map(|r| RankOutput {
                rank: r.rank,
                rank_known: r.rank_known,
                trace: r.path.display().to_string(),
                incomplete: r.incomplete,
                report: r.value,
            })
            .collect(),
        job_summary: job,
        incomplete,
    }
}

/// A figure of each rank: its name and how to read it off a rank's report.
pub type Column<'a, R> = (String, &'a dyn Fn(&R) -> Option<u64>);

/// Every column's [`Figure`].
pub fn figures<R>(ranks: &[Rank<R>], columns: &[Column<R>]) -> Vec<Figure> {
    columns
        .iter()
        .map(|(name, value)| Figure::of(name.clone(), ranks, value))
        .collect()
}

/// A table of ranks × figures, then per figure the rank that sets the job's value and the
/// imbalance; `what` says what the figures are.
pub fn render<R>(dir: &Path, what: &str, ranks: &[Rank<R>], columns: &[Column<R>]) -> String {
    let mut s = String::new();
    let unnamed = ranks.iter().filter(|r| !r.rank_known).count();
    let mut note = if unnamed > 0 {
        format!("; {unnamed} traces name no rank of their own, numbered by file name")
    } else {
        String::new()
    };
    let incomplete: Vec<String> = ranks
        .iter()
        .filter(|r| r.incomplete.is_some())
        .map(|r| r.rank.to_string())
        .collect();
    if !incomplete.is_empty() {
        let _ = write!(
            note,
            "; INCOMPLETE traces: rank {} (their figures come from the events read)",
            incomplete.join(", ")
        );
    }
    let _ = writeln!(
        s,
        "job      {} ({} ranks{note})",
        dir.display(),
        ranks.len()
    );
    let _ = writeln!(s, "figures  {what}\n");
    let width = columns.iter().map(|c| c.0.len()).max().unwrap_or(0).max(12);
    let _ = write!(s, "{:>5}", "rank");
    for (name, _) in columns {
        let _ = write!(s, "  {name:>width$}");
    }
    let _ = writeln!(s, "  trace");
    for r in ranks {
        let _ = write!(s, "{:>5}", r.rank);
        for (_, value) in columns {
            let v = value(&r.value).map_or_else(|| "-".to_string(), bytes);
            let _ = write!(s, "  {v:>width$}");
        }
        let flag = r.incomplete.as_ref().map_or(String::new(), |i| {
            format!(
                "  (INCOMPLETE: {:.1}% of its numbered events)",
                100.0 * i.fraction
            )
        });
        let _ = writeln!(s, "  {}{flag}", r.path.display());
    }
    let _ = writeln!(s);
    let name_width = columns.iter().map(|c| c.0.len()).max().unwrap_or(6).max(6);
    let _ = writeln!(
        s,
        "{:<name_width$}  {:>12}  {:>6}  {:>12}  {:>6}  {:>9}",
        "job", "largest", "rank", "smallest", "rank", "imbalance"
    );
    for f in figures(ranks, columns) {
        let _ = match &f.spread {
            Some(sp) => writeln!(
                s,
                "{:<name_width$}  {:>12}  {:>6}  {:>12}  {:>6}  {:>8.1}%",
                f.name,
                bytes(sp.max),
                sp.max_rank,
                bytes(sp.min),
                sp.min_rank,
                sp.imbalance * 100.0
            ),
            None => writeln!(s, "{:<name_width$}  (no rank)", f.name),
        };
    }
    s.push_str("\nimbalance: the largest rank over the mean of the ranks, minus 1.\n");
    s
}
