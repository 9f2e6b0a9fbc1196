//! `vramtrace fit`: per policy, the smallest capacity with no OOM, by bisection in parallel.

use crate::args::{PolicyList, policies};
use crate::job;
use crate::load::{load_job, load_streams, streams_of};
use anyhow::Result;
use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::path::PathBuf;
use vramtrace::replay::FitReport;
use vramtrace::units::{bytes, count};

/// The smallest device each policy runs the trace on without running out of memory.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  vramtrace fit run.vramtrace
  vramtrace fit run.vramtrace --policy pytorch,pytorch-expandable,lower-bound --json
  vramtrace fit traces/job-42/ --policy pytorch   # the device every rank of the job fits on")]
pub struct Args {
    /// The .vramtrace file, or a directory of one job's per-rank traces.
    trace: PathBuf,
    /// Policies: `all`, or NAME[:KEY=VALUE,...] separated by commas.
    #[arg(long, default_value = "all", value_parser = policies)]
    policy: PolicyList,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

impl Args {
    pub fn run(self) -> Result<()> {
        let specs = &self.policy.0;
        if self.trace.is_dir() {
            return self.run_job(specs);
        }
        let input = load_streams(&self.trace, None)?;
        if std::io::stderr().is_terminal() {
            let requests: usize = input.model.streams.iter().map(|s| s.requests.len()).sum();
            eprintln!(
                "vramtrace: bisecting the capacity of {} policies over {} requests...",
                specs.len(),
                count(requests as u64)
            );
        }
        let report = FitReport::build(&self.trace.display().to_string(), specs, &input)?;
        if let Some(w) = &report.warning
            && !self.json
        {
            eprintln!("vramtrace: warning: {w}");
        }
        crate::output::json_or_text(self.json, &report, render)
    }
}

impl Args {
    /// Every rank bisected on its own (`fit`'s own work); the job needs the largest.
    fn run_job(&self, specs: &[vramtrace::policy::PolicySpec]) -> Result<()> {
        let ranks = load_job(&self.trace, false, |path, trace| {
            let input = streams_of(path, &trace, None)?;
            FitReport::build(&path.display().to_string(), specs, &input)
                .map_err(anyhow::Error::from)
        })?;
        let need: Vec<_> = (0..specs.len())
            .map(|p| move |r: &FitReport| r.policies[p].min_capacity_bytes)
            .collect();
        let columns: Vec<job::Column<FitReport>> = need
            .iter()
            .enumerate()
            .map(|(p, f)| {
                (
                    specs[p].to_string(),
                    f as &dyn Fn(&FitReport) -> Option<u64>,
                )
            })
            .collect();
        let out = if self.json {
            let figures = job::figures(&ranks, &columns);
            serde_json::to_string_pretty(&job::output(&self.trace, ranks, figures))? + "\n"
        } else {
            job::render(
                &self.trace,
                "the smallest device each rank fits on, per policy (the job needs the largest; - \
                 when none fits)",
                &ranks,
                &columns,
            )
        };
        crate::output::print(&out)
    }
}

fn render(r: &FitReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "trace        {}", r.trace);
    let _ = writeln!(
        s,
        "lower bound  {} (no allocator fits in less)\n",
        bytes(r.lower_bound_bytes)
    );
    let width = r
        .policies
        .iter()
        .map(|p| p.name.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let _ = writeln!(
        s,
        "{:<width$}  {:>14}  {:>12}  {:>6}",
        "policy", "min capacity", "", "xLB"
    );
    for p in &r.policies {
        let _ = match (p.min_capacity_bytes, p.ratio_to_lower_bound) {
            (Some(c), Some(x)) => writeln!(
                s,
                "{:<width$}  {:>14}  {:>12}  {:>6.3}",
                p.name,
                bytes(c),
                c,
                x
            ),
            _ => writeln!(
                s,
                "{:<width$}  never fits: a request no device can serve",
                p.name
            ),
        };
    }
    s
}
