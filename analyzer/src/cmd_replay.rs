//! `vramtrace replay`: every request stream of a trace through every chosen policy.

use crate::load::load_trace;
use anyhow::{Result, anyhow};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;
use vramtrace::model::{CaptureLevel, Model, Outside, RequestStream};
use vramtrace::policy::{PolicySpec, REGISTRY};
use vramtrace::replay::{Oom, Outcome, replay_all};
use vramtrace::units::{bytes, count, duration};

/// A trace's request streams with the capacity each replays under.
pub struct Loaded {
    pub model: Model,
    /// Per stream: the capacity, and where it came from.
    pub capacities: Vec<(u64, &'static str)>,
}

/// Reads the trace and builds its request streams; `capacity` overrides the traced devices'.
pub fn load_streams(path: &Path, capacity: Option<u64>) -> Result<Loaded> {
    let trace = load_trace(path, false)?;
    let model = Model::from_events(trace.events(), &trace.metadata);
    if model.streams.is_empty() {
        return Err(anyhow!(
            "{}: no device-memory allocation to replay",
            path.display()
        ));
    }
    let capacities = model
        .streams
        .iter()
        .map(|s| match capacity {
            Some(c) => (c, "--capacity"),
            None => {
                let device = s.key.map(|k| k.device);
                trace
                    .tables
                    .devices
                    .iter()
                    .find(|d| Some(d.ordinal) == device && d.total_memory > 0)
                    .map_or((u64::MAX, "unlimited"), |d| (d.total_memory, "device"))
            }
        })
        .collect();
    Ok(Loaded { model, capacities })
}

/// One policy's figures (DESIGN.md, "replay --json").
#[derive(Debug, Clone, Serialize)]
pub struct PolicyRow {
    pub name: String,
    pub peak_requested: u64,
    pub peak_allocated: u64,
    pub peak_reserved: u64,
    pub fragmentation_at_peak: f64,
    pub ratio_to_lower_bound: f64,
    pub device_allocs: u64,
    pub device_frees: u64,
    pub est_alloc_time_us: f64,
    pub oom: Option<Oom>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StreamReport {
    pub pid: u32,
    pub device: i32,
    pub requests: usize,
    pub allocations: usize,
    pub cuda_streams: usize,
    /// `null` when unlimited.
    pub capacity_bytes: Option<u64>,
    pub lower_bound_bytes: u64,
    /// Plain driver allocations beside a stream-ordered-pool request stream: libraries that
    /// bypass the framework's allocator. Not replayed; the process holds them under any policy.
    pub outside_allocator: Outside,
    pub policies: Vec<PolicyRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    pub trace: String,
    pub capture_level: CaptureLevel,
    pub capture_level_declared: bool,
    pub warning: Option<String>,
    /// Summed over streams (one stream per process and device).
    pub lower_bound_bytes: u64,
    /// Per policy, summed over streams; the earliest OOM of any stream.
    pub policies: Vec<PolicyRow>,
    pub streams: Vec<StreamReport>,
}

fn row(spec: &PolicySpec, o: &Outcome, lower_bound: u64) -> PolicyRow {
    PolicyRow {
        name: spec.to_string(),
        peak_requested: o.peak_requested,
        peak_allocated: o.peak_allocated,
        peak_reserved: o.peak_reserved,
        fragmentation_at_peak: o.fragmentation_at_peak(),
        ratio_to_lower_bound: ratio(o.peak_reserved, lower_bound),
        device_allocs: o.device_allocs,
        device_frees: o.device_frees,
        est_alloc_time_us: o.est_alloc_time_us,
        oom: o.oom.clone(),
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// Replays and assembles the report.
pub fn build_report(path: &Path, specs: &[PolicySpec], loaded: &Loaded) -> Result<ReplayReport> {
    let streams: &[RequestStream] = &loaded.model.streams;
    let capacities: Vec<u64> = loaded.capacities.iter().map(|c| c.0).collect();
    let results = replay_all(streams, specs, &capacities).map_err(|e| anyhow!(e))?;
    let mut stream_reports = Vec::new();
    for (s, stream) in streams.iter().enumerate() {
        let lb = stream.lower_bound();
        let key = stream.key.expect("model streams have keys");
        stream_reports.push(StreamReport {
            pid: key.pid,
            device: key.device,
            requests: stream.requests.len(),
            allocations: stream.allocations(),
            cuda_streams: stream.cuda_streams.len(),
            capacity_bytes: Some(capacities[s]).filter(|&c| c != u64::MAX),
            lower_bound_bytes: lb,
            outside_allocator: stream.outside,
            policies: results
                .iter()
                .filter(|r| r.stream == s)
                .map(|r| row(&specs[r.policy], &r.outcome, lb))
                .collect(),
        });
    }
    let lower_bound: u64 = stream_reports.iter().map(|s| s.lower_bound_bytes).sum();
    let policies = specs
        .iter()
        .enumerate()
        .map(|(p, spec)| {
            let outs: Vec<&Outcome> = results
                .iter()
                .filter(|r| r.policy == p)
                .map(|r| &r.outcome)
                .collect();
            let sum = |f: fn(&Outcome) -> u64| outs.iter().map(|o| f(o)).sum::<u64>();
            let total = Outcome {
                requests: outs.iter().map(|o| o.requests).sum(),
                peak_requested: sum(|o| o.peak_requested),
                peak_allocated: sum(|o| o.peak_allocated),
                peak_reserved: sum(|o| o.peak_reserved),
                allocated_at_peak_reserved: sum(|o| o.allocated_at_peak_reserved),
                peak_reserved_index: 0,
                device_allocs: sum(|o| o.device_allocs),
                device_frees: sum(|o| o.device_frees),
                est_alloc_time_us: outs.iter().map(|o| o.est_alloc_time_us).sum(),
                costs: outs.iter().map(|o| o.costs).sum(),
                oom: outs
                    .iter()
                    .filter_map(|o| o.oom.clone())
                    .min_by_key(|o| o.time_ns),
            };
            row(spec, &total, lower_bound)
        })
        .collect();
    let level = &loaded.model.level;
    Ok(ReplayReport {
        trace: path.display().to_string(),
        capture_level: level.level,
        capture_level_declared: level.declared,
        warning: level.warning.clone(),
        lower_bound_bytes: lower_bound,
        policies,
        streams: stream_reports,
    })
}

pub fn run(
    path: Option<&Path>,
    specs: &[PolicySpec],
    capacity: Option<u64>,
    json: bool,
    csv: bool,
    list_policies: bool,
) -> Result<()> {
    if list_policies {
        return crate::output::print(&render_policy_list());
    }
    let path = path.expect("clap requires TRACE unless --list-policies");
    let loaded = load_streams(path, capacity)?;
    let report = build_report(path, specs, &loaded)?;
    if let Some(w) = &report.warning
        && !json
    {
        eprintln!("vramtrace: warning: {w}");
    }
    let out = if json {
        serde_json::to_string_pretty(&report)? + "\n"
    } else if csv {
        render_csv(&report)
    } else {
        render_text(&report, &loaded)
    };
    crate::output::print(&out)
}

/// `--list-policies`: each policy, what it models, its keys and their defaults.
pub fn render_policy_list() -> String {
    let mut s = String::new();
    for p in REGISTRY {
        let _ = writeln!(s, "{}\n    {}", p.name, p.summary);
        for k in p.keys {
            let _ = writeln!(s, "    {}={}  {}", k.key, k.default, k.about);
        }
    }
    s.push_str("\nSyntax: --policy NAME[:KEY=VALUE,...][,NAME...] or --policy all\n");
    s
}

fn level_name(l: CaptureLevel) -> &'static str {
    match l {
        CaptureLevel::Request => "request",
        CaptureLevel::Segment => "segment",
        CaptureLevel::Unknown => "unknown",
    }
}

fn render_text(r: &ReplayReport, loaded: &Loaded) -> String {
    let mut s = String::new();
    let how = if r.capture_level_declared {
        "declared"
    } else {
        "inferred"
    };
    let _ = writeln!(s, "trace        {}", r.trace);
    let _ = writeln!(s, "level        {} ({how})", level_name(r.capture_level));
    if let Some(w) = &r.warning {
        let _ = writeln!(s, "WARNING      {w}");
    }
    for (i, st) in r.streams.iter().enumerate() {
        let (cap, source) = loaded.capacities[i];
        let cap = if cap == u64::MAX {
            "unlimited".to_string()
        } else {
            format!("{} ({source})", bytes(cap))
        };
        let _ = writeln!(
            s,
            "\nprocess {} device {}: {} requests ({} allocations, CUDA streams: {}), capacity {cap}",
            st.pid,
            st.device,
            count(st.requests as u64),
            count(st.allocations as u64),
            st.cuda_streams
        );
        let _ = writeln!(
            s,
            "lower bound  {} (peak of live requested bytes)",
            bytes(st.lower_bound_bytes)
        );
        if st.outside_allocator.allocations > 0 {
            let _ = writeln!(
                s,
                "outside      {} plain cuMemAlloc calls ({} at most) beside the pool requests: \
                 libraries bypassing the allocator; held under any policy, not replayed",
                count(st.outside_allocator.allocations),
                bytes(st.outside_allocator.peak_bytes)
            );
        }
        s.push('\n');
        render_table(&mut s, &st.policies);
    }
    if r.streams.len() > 1 {
        let _ = writeln!(
            s,
            "\nall streams (peaks summed): lower bound {}\n",
            bytes(r.lower_bound_bytes)
        );
        render_table(&mut s, &r.policies);
    }
    s
}

fn render_table(s: &mut String, rows: &[PolicyRow]) {
    let width = rows.iter().map(|p| p.name.len()).max().unwrap_or(6).max(6);
    let _ = writeln!(
        s,
        "{:<width$}  {:>12}  {:>12}  {:>12}  {:>6}  {:>6}  {:>15}  {:>10}  OOM",
        "policy", "requested", "allocated", "reserved", "frag", "xLB", "driver calls", "est. time"
    );
    for p in rows {
        let oom = match &p.oom {
            None => "-".to_string(),
            Some(o) => format!(
                "at request #{} ({}): {} with {} reserved, {} live objects",
                o.request_index,
                duration(o.time_ns),
                bytes(o.size),
                bytes(o.reserved),
                count(o.live_objects)
            ),
        };
        let _ = writeln!(
            s,
            "{:<width$}  {:>12}  {:>12}  {:>12}  {:>5.1}%  {:>6.3}  {:>15}  {:>10}  {oom}",
            p.name,
            bytes(p.peak_requested),
            bytes(p.peak_allocated),
            bytes(p.peak_reserved),
            100.0 * p.fragmentation_at_peak,
            p.ratio_to_lower_bound,
            format!("{}/{}", count(p.device_allocs), count(p.device_frees)),
            duration((p.est_alloc_time_us * 1000.0) as u64),
        );
    }
}

fn render_csv(r: &ReplayReport) -> String {
    let mut s = String::from(
        "pid,device,policy,lower_bound_bytes,peak_requested,peak_allocated,peak_reserved,\
fragmentation_at_peak,ratio_to_lower_bound,device_allocs,device_frees,est_alloc_time_us,\
oom_time_ns,oom_size,oom_reserved\n",
    );
    for st in &r.streams {
        for p in &st.policies {
            let (t, z, res) =
                p.oom
                    .as_ref()
                    .map_or((String::new(), String::new(), String::new()), |o| {
                        (
                            o.time_ns.to_string(),
                            o.size.to_string(),
                            o.reserved.to_string(),
                        )
                    });
            let _ = writeln!(
                s,
                "{},{},\"{}\",{},{},{},{},{:.6},{:.6},{},{},{:.3},{t},{z},{res}",
                st.pid,
                st.device,
                p.name.replace('"', "\"\""),
                st.lower_bound_bytes,
                p.peak_requested,
                p.peak_allocated,
                p.peak_reserved,
                p.fragmentation_at_peak,
                p.ratio_to_lower_bound,
                p.device_allocs,
                p.device_frees,
                p.est_alloc_time_us
            );
        }
    }
    s
}
