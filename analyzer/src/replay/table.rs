//! The result tables of `vramtrace replay` and `vramtrace fit`: per request stream and summed
//! over streams, one row per policy. Their JSON is a contract (`docs/architecture.md`,
//! "Output contracts"); the insta snapshots of `analyzer/tests` guard it.

use super::input::ReplayInput;
use super::{FitResult, Oom, Outcome, fit_all, replay_all};
use crate::model::{CaptureLevel, Outside};
use crate::policy::{PolicyError, PolicySpec};
use serde::Serialize;

/// One policy's figures.
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
    /// `(peak_reserved - recorded) / recorded` for a policy that models the allocator the
    /// program ran under, when the trace holds what that allocator really reserved.
    pub error_vs_recorded: Option<f64>,
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
    /// What the process's allocator really reserved at its peak, from its own segment events
    /// (PyTorch's tracker); `null` when the trace does not say.
    pub recorded_peak_reserved: Option<u64>,
    pub policies: Vec<PolicyRow>,
}

/// What `vramtrace replay` reports.
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
        error_vs_recorded: None,
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

impl ReplayReport {
    /// Replays every stream of `input` through every policy of `specs` and assembles the table;
    /// `trace` names the trace in it.
    pub fn build(
        trace: &str,
        specs: &[PolicySpec],
        input: &ReplayInput,
    ) -> Result<Self, PolicyError> {
        let streams = &input.model.streams;
        let capacities: Vec<u64> = input.capacities.iter().map(|c| c.0).collect();
        let results = replay_all(streams, specs, &capacities)?;
        let models_recorded = |spec: &PolicySpec| {
            input
                .recorded_policy
                .as_ref()
                .is_some_and(|r| r.name == spec.name)
        };
        // Results come in (stream, policy) order: stream `s` owns one contiguous run of them.
        let n = specs.len();
        let mut stream_reports = Vec::new();
        for (s, stream) in streams.iter().enumerate() {
            let lb = stream.lower_bound();
            let key = stream.key.expect("model streams have keys");
            let recorded = stream.recorded_peak_reserved;
            stream_reports.push(StreamReport {
                recorded_peak_reserved: recorded,
                pid: key.pid,
                device: key.device,
                requests: stream.requests.len(),
                allocations: stream.allocations(),
                cuda_streams: stream.cuda_streams.len(),
                capacity_bytes: Some(capacities[s]).filter(|&c| c != u64::MAX),
                lower_bound_bytes: lb,
                outside_allocator: stream.outside,
                policies: results[s * n..(s + 1) * n]
                    .iter()
                    .map(|r| {
                        let spec = &specs[r.policy];
                        let mut row = row(spec, &r.outcome, lb);
                        row.error_vs_recorded = recorded
                            .filter(|&t| t > 0 && models_recorded(spec))
                            .map(|t| (r.outcome.peak_reserved as f64 - t as f64) / t as f64);
                        row
                    })
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
                row(spec, &summed(&outs), lower_bound)
            })
            .collect();
        let level = &input.model.level;
        Ok(ReplayReport {
            trace: trace.to_string(),
            capture_level: level.level,
            capture_level_declared: level.declared,
            warning: level.warning.clone(),
            lower_bound_bytes: lower_bound,
            policies,
            streams: stream_reports,
        })
    }
}

/// One policy's outcomes over all streams: peaks and counts summed, the earliest OOM.
fn summed(outs: &[&Outcome]) -> Outcome {
    let sum = |f: fn(&Outcome) -> u64| outs.iter().map(|o| f(o)).sum::<u64>();
    Outcome {
        requests: outs.iter().map(|o| o.requests).sum(),
        peak_requested: sum(|o| o.peak_requested),
        peak_allocated: sum(|o| o.peak_allocated),
        peak_reserved: sum(|o| o.peak_reserved),
        allocated_at_peak_reserved: sum(|o| o.allocated_at_peak_reserved),
        peak_reserved_index: 0,
        device_allocs: sum(|o| o.device_allocs),
        device_frees: sum(|o| o.device_frees),
        est_alloc_time_us: outs.iter().map(|o| o.est_alloc_time_us).sum(),
        oom: outs
            .iter()
            .filter_map(|o| o.oom.clone())
            .min_by_key(|o| o.time_ns),
    }
}

/// One policy's smallest capacity.
#[derive(Debug, Clone, Serialize)]
pub struct FitRow {
    pub name: String,
    /// The largest over streams: every process must fit on its own device. `null` when no
    /// capacity fits (a request larger than any device).
    pub min_capacity_bytes: Option<u64>,
    pub ratio_to_lower_bound: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StreamFit {
    pub pid: u32,
    pub device: i32,
    pub lower_bound_bytes: u64,
    pub policies: Vec<FitRow>,
}

/// What `vramtrace fit` reports.
#[derive(Debug, Clone, Serialize)]
pub struct FitReport {
    pub trace: String,
    pub warning: Option<String>,
    pub lower_bound_bytes: u64,
    pub policies: Vec<FitRow>,
    pub streams: Vec<StreamFit>,
}

impl FitReport {
    /// Bisects the capacity of every stream of `input` under every policy of `specs` (the
    /// capacities of `input` are not used) and assembles the table.
    pub fn build(
        trace: &str,
        specs: &[PolicySpec],
        input: &ReplayInput,
    ) -> Result<Self, PolicyError> {
        let streams = &input.model.streams;
        let fits = fit_all(streams, specs)?;
        // Fits come in (stream, policy) order, as replays do.
        let n = specs.len();
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
                    policies: fits[s * n..(s + 1) * n]
                        .iter()
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
                let need = largest_need(fits.iter().filter(|f| f.policy == p));
                FitRow {
                    name: spec.to_string(),
                    min_capacity_bytes: need,
                    ratio_to_lower_bound: need.map(|c| ratio(c, lower_bound)),
                }
            })
            .collect();
        Ok(FitReport {
            trace: trace.to_string(),
            warning: input.model.level.warning.clone(),
            lower_bound_bytes: lower_bound,
            policies,
            streams: per_stream,
        })
    }
}

/// The capacity every stream fits in; `None` (never fits) in any stream means never fits at all.
fn largest_need<'a>(fits: impl Iterator<Item = &'a FitResult>) -> Option<u64> {
    fits.map(|f| f.min_capacity_bytes)
        .try_fold(0u64, |m, c| c.map(|c| m.max(c)))
}
