//! A directory of one job's per-rank traces given to `summary`, `replay` or `fit`: each rank's
//! own report, and for the job the rank that sets each peak and how unevenly the ranks spread.

use crate::load::load_trace;
use anyhow::Result;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use vramtrace::completeness::Incomplete;
use vramtrace::diff::{StackDelta, TOP_DELTAS};
use vramtrace::job::{Rank, Spread, imbalance_text};
use vramtrace::units::bytes;

/// What `--json` prints for a job directory.
#[derive(Debug, Serialize)]
pub struct JobOutput<R: Serialize, J: Serialize> {
    pub job: String,
    pub ranks: Vec<RankOutput<R>>,
    /// The job's figures over its ranks.
    pub job_summary: J,
    /// The rank that sets the job's peak against the median rank, and the sites that make the
    /// difference; left out by the commands that do not look (`summary`, `replay`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_rank: Option<PeakRank>,
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
    peak_rank: Option<PeakRank>,
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
        peak_rank,
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
        "{:<name_width$}  {:>12}  {:>6}  {:>12}  {:>6}  {:>12}  {:>6}  {:>9}",
        "job", "largest", "rank", "median", "rank", "smallest", "rank", "imbalance"
    );
    for f in figures(ranks, columns) {
        let _ = match &f.spread {
            Some(sp) => writeln!(
                s,
                "{:<name_width$}  {:>12}  {:>6}  {:>12}  {:>6}  {:>12}  {:>6}  {:>9}",
                f.name,
                bytes(sp.max),
                sp.max_rank,
                bytes(sp.median),
                sp.median_rank,
                bytes(sp.min),
                sp.min_rank,
                imbalance_text(sp.imbalance)
            ),
            None => writeln!(s, "{:<name_width$}  (no rank)", f.name),
        };
    }
    s.push_str(IMBALANCE);
    s
}

/// What the text says imbalance is (docs/definitions.md, "Jobs").
pub const IMBALANCE: &str =
    "\nimbalance: the largest rank over the median rank (1.00x: all equal).\n";

/// The rank that sets a job's figure, against the median rank: by how much, and which sites
/// make the difference.
#[derive(Debug, Serialize)]
pub struct PeakRank {
    /// The figure the ranks are compared by.
    pub figure: String,
    pub rank: u32,
    pub peak: u64,
    pub median_rank: u32,
    pub median: u64,
    /// `peak / median` (docs/definitions.md); `null` when the median rank's is 0.
    pub imbalance: Option<f64>,
    /// The sites whose bytes live at the requested peak grew most from the median rank to the
    /// peak rank, as `vramtrace diff MEDIAN PEAK` lists them (every process and device of the
    /// two, the largest first).
    pub grew: Vec<StackDelta>,
    /// ... and those that shrank most.
    pub shrank: Vec<StackDelta>,
}

/// The [`PeakRank`] of `figure` over `ranks`: the two traces compared are loaded again (one
/// at a time per side); `None` when no rank has the figure.
pub fn peak_rank<R>(figure: &Figure, ranks: &[Rank<R>], salvage: bool) -> Result<Option<PeakRank>> {
    let Some(sp) = &figure.spread else {
        return Ok(None);
    };
    let path = |rank: u32| {
        ranks
            .iter()
            .find(|r| r.rank == rank)
            .map(|r| r.path.as_path())
            .expect("a spread's ranks are the job's")
    };
    let (mut grew, mut shrank) = (Vec::new(), Vec::new());
    if sp.max_rank != sp.median_rank {
        let median = load_trace(path(sp.median_rank), salvage)?;
        let peak = load_trace(path(sp.max_rank), salvage)?;
        for g in crate::diff::compare(&median, &peak).groups {
            grew.extend(g.grew);
            shrank.extend(g.shrank);
        }
    }
    grew.sort_by(|a, b| b.delta.cmp(&a.delta).then(a.frames.cmp(&b.frames)));
    // As `diff` lists them: the shrunk by their fall, ties in reverse frame order.
    shrank.sort_by(|a, b| a.delta.cmp(&b.delta).then(b.frames.cmp(&a.frames)));
    grew.truncate(TOP_DELTAS);
    shrank.truncate(TOP_DELTAS);
    Ok(Some(PeakRank {
        figure: figure.name.clone(),
        rank: sp.max_rank,
        peak: sp.max,
        median_rank: sp.median_rank,
        median: sp.median,
        imbalance: sp.imbalance,
        grew,
        shrank,
    }))
}

/// The text of a [`PeakRank`].
pub fn render_peak_rank(s: &mut String, p: &PeakRank) {
    let _ = writeln!(
        s,
        "\npeak rank  {} sets the job's {}: {}, imbalance {} against the median rank {} ({})",
        p.rank,
        p.figure,
        bytes(p.peak),
        imbalance_text(p.imbalance),
        p.median_rank,
        bytes(p.median)
    );
    if p.rank == p.median_rank {
        return;
    }
    let _ = writeln!(
        s,
        "  why: the sites at the requested peak, rank {} against the median rank {} (`vramtrace \
         diff MEDIAN PEAK`)",
        p.rank, p.median_rank
    );
    if p.grew.is_empty() && p.shrank.is_empty() {
        let _ = writeln!(s, "  (the same bytes at every site)");
    }
    crate::diff::section(s, "grew most at the peak", &p.grew);
    crate::diff::section(s, "shrank most at the peak", &p.shrank);
}
