//! `vramtrace fit`: per policy, the smallest capacity with no OOM, by bisection in parallel.

use crate::cmd_replay::load_streams;
use anyhow::{Result, anyhow};
use serde::Serialize;
use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::path::Path;
use vramtrace::policy::PolicySpec;
use vramtrace::replay::fit_all;
use vramtrace::units::{bytes, count};

#[derive(Debug, Serialize)]
pub struct FitRow {
    pub name: String,
    /// The largest over streams: every process must fit on its own device. `null` when no
    /// capacity fits (a request larger than any device).
    pub min_capacity_bytes: Option<u64>,
    ratio_to_lower_bound: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct StreamFit {
    pid: u32,
    device: i32,
    lower_bound_bytes: u64,
    policies: Vec<FitRow>,
}

#[derive(Debug, Serialize)]
pub struct FitReport {
    trace: String,
    warning: Option<String>,
    lower_bound_bytes: u64,
    pub policies: Vec<FitRow>,
    streams: Vec<StreamFit>,
}

pub fn run(path: &Path, specs: &[PolicySpec], json: bool) -> Result<()> {
    let report = build_report(path, specs)?;
    if let Some(w) = &report.warning
        && !json
    {
        eprintln!("vramtrace: warning: {w}");
    }
    let out = if json {
        serde_json::to_string_pretty(&report)? + "\n"
    } else {
        render(&report)
    };
    crate::output::print(&out)
}

/// Bisects every policy's smallest capacity for the trace at `path`.
pub fn build_report(path: &Path, specs: &[PolicySpec]) -> Result<FitReport> {
    let loaded = load_streams(path, None)?;
    let streams = &loaded.model.streams;
    if std::io::stderr().is_terminal() {
        let requests: usize = streams.iter().map(|s| s.requests.len()).sum();
        eprintln!(
            "vramtrace: bisecting the capacity of {} policies over {} requests...",
            specs.len(),
            count(requests as u64)
        );
    }
    let fits = fit_all(streams, specs).map_err(|e| anyhow!(e))?;
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let per_stream: Vec<StreamFit> = streams
        .iter()
        .enumerate()
        .map(|(s, st)| {
            let lb = st.lower_bound();
            let key = st.key.expect("model streams have keys");
            StreamFit {
                pid: key.pid,
                device: key.device,
                lower_bound_bytes: lb,
                policies: fits
                    .iter()
                    .filter(|f| f.stream == s)
                    .map(|f| FitRow {
                        name: specs[f.policy].to_string(),
                        min_capacity_bytes: f.min_capacity_bytes,
                        ratio_to_lower_bound: f.min_capacity_bytes.map(|c| ratio(c, lb)),
                    })
                    .collect(),
            }
        })
        .collect();
    let lower_bound = per_stream
        .iter()
        .map(|s| s.lower_bound_bytes)
        .max()
        .unwrap_or(0);
    let policies = specs
        .iter()
        .enumerate()
        .map(|(p, spec)| {
            // `None` (never fits) in any stream means never fits at all.
            let need = fits
                .iter()
                .filter(|f| f.policy == p)
                .map(|f| f.min_capacity_bytes)
                .try_fold(0u64, |m, c| c.map(|c| m.max(c)));
            FitRow {
                name: spec.to_string(),
                min_capacity_bytes: need,
                ratio_to_lower_bound: need.map(|c| ratio(c, lower_bound)),
            }
        })
        .collect();
    Ok(FitReport {
        trace: path.display().to_string(),
        warning: loaded.model.level.warning.clone(),
        lower_bound_bytes: lower_bound,
        policies,
        streams: per_stream,
    })
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
