//! The result tables of `vramtrace replay` and `vramtrace fit`: per request stream and summed
//! over streams, one row per policy. Their JSON is a contract (`docs/architecture.md`,
//! "Output contracts"); the insta snapshots of `analyzer/tests` guard it.

use super::input::ReplayInput;
use super::pool_range::{PoolRange, pool_range};
use super::{FitResult, Oom, Outcome, Progress, RunResult, fit_all, replay_all};
use crate::model::RequestStream;
use crate::model::device::{GPU_SIZES_GB, process_peak};
use crate::model::{Capture, CaptureLevel, Outside};
use crate::policy::driver::H200_TOTAL_MEMORY;
use crate::policy::pytorch::fraction_for_cap;
use crate::policy::validated::{Band, band};
use crate::policy::{PolicyError, PolicyRole, PolicySpec, preallocates, role};
use crate::units::gpu_bytes;
use serde::Serialize;

/// What a replay that did not run out of memory says of the recorded run's own refused
/// allocations (docs/definitions.md, "refused as recorded"): `N refused as in the recorded run`
/// when the policy refused `refused_as_recorded` of them too, else that it served all
/// `recorded_failures`; `None` when the run had none. `replay`'s text and the report say it
/// alike.
pub fn recorded_refusals_note(refused_as_recorded: u64, recorded_failures: u64) -> Option<String> {
    use crate::units::count;
    if refused_as_recorded > 0 {
        Some(format!(
            "{} refused as in the recorded run",
            count(refused_as_recorded)
        ))
    } else if recorded_failures > 0 {
        Some(format!(
            "served the {} allocations the recorded run was refused: it had more room",
            count(recorded_failures)
        ))
    } else {
        None
    }
}

/// One policy's figures.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyRow {
    pub name: String,
    pub peak_requested: u64,
    pub peak_allocated: u64,
    pub peak_reserved: u64,
    /// Allocated bytes at the moment reserved peaked: with `peak_reserved`, what
    /// `fragmentation_at_peak` is computed from (docs/definitions.md).
    pub allocated_at_peak_reserved: u64,
    pub fragmentation_at_peak: f64,
    pub ratio_to_lower_bound: f64,
    pub device_allocs: u64,
    pub device_frees: u64,
    pub est_alloc_time_us: f64,
    pub oom: Option<Oom>,
    /// Allocations the recorded run's driver refused that this policy refuses too (it cannot
    /// serve them from its cache): the recorded out-of-memory errors it reproduces.
    pub refused_as_recorded: u64,
    /// `(peak_reserved - recorded) / recorded` for a policy that models the allocator the
    /// program ran under, when the trace holds what that allocator really reserved.
    pub error_vs_recorded: Option<f64>,
    /// The error the policy's model showed on real runs (docs/validation.md); `null` when no
    /// real run checked it: the figures are then unvalidated.
    pub validated: Option<&'static Band>,
    /// `cuda-async` only: the range GPU progress leaves the prediction, and whether the trace
    /// recorded the synchronizations the model follows; absent for other policies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool_range: Option<PoolRange>,
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
    /// Allocations the recorded run's driver refused with `CUDA_ERROR_OUT_OF_MEMORY` (replayed
    /// as refused again).
    pub recorded_oom_failures: u64,
    /// The memory fraction the program itself set (its last `set_per_process_memory_fraction`,
    /// formats/SPEC.md §4.3), replayed as it was set; `null` when the trace records none.
    pub recorded_memory_fraction: Option<f64>,
    /// The device's total bytes as recorded (`device.memory`).
    pub recorded_device_total: Option<u64>,
    /// What the process's allocator really reserved at its peak, from its own segment events
    /// (PyTorch's tracker); `null` when the trace does not say.
    pub recorded_peak_reserved: Option<u64>,
    /// How many segments (or pages) that allocator gave back to the driver (PyTorch's
    /// `num_device_free`); `null` when the trace does not say.
    pub recorded_device_frees: Option<u64>,
    pub policies: Vec<PolicyRow>,
}

/// What `vramtrace replay` reports.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    pub trace: String,
    pub capture_level: CaptureLevel,
    pub capture_level_declared: bool,
    /// How the trace's requests were seen, which picks each model's validated band
    /// (docs/definitions.md, "Capture"); `null` when unknown.
    pub capture: Option<Capture>,
    pub warning: Option<String>,
    /// Summed over streams (one stream per process and device).
    pub lower_bound_bytes: u64,
    /// Per policy, summed over streams; the earliest OOM of any stream.
    pub policies: Vec<PolicyRow>,
    pub streams: Vec<StreamReport>,
}

/// `o`'s row, its OOM's times taken from the trace's start `start_ns`; `capture` picks the model's validated band.
fn row(
    spec: &PolicySpec,
    o: &Outcome,
    lower_bound: u64,
    start_ns: u64,
    capture: Option<Capture>,
) -> PolicyRow {
    let oom = o.oom.clone().map(|mut oom| {
        oom.time_ns = oom.time_ns.saturating_sub(start_ns);
        for l in &mut oom.largest_live {
            l.time_ns = l.time_ns.saturating_sub(start_ns);
        }
        oom
    });
    PolicyRow {
        pool_range: None,
        error_vs_recorded: None,
        validated: band(&spec.name, capture),
        name: spec.to_string(),
        peak_requested: o.peak_requested,
        peak_allocated: o.peak_allocated,
        peak_reserved: o.peak_reserved,
        allocated_at_peak_reserved: o.allocated_at_peak_reserved,
        fragmentation_at_peak: o.fragmentation_at_peak(),
        ratio_to_lower_bound: ratio(o.peak_reserved, lower_bound),
        device_allocs: o.device_allocs,
        device_frees: o.device_frees,
        est_alloc_time_us: o.est_alloc_time_us,
        oom,
        refused_as_recorded: o.refused_attempts,
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
        let capacities: Vec<u64> = input.capacities.iter().map(|c| c.0).collect();
        let results = replay_all(&input.model.streams, specs, &capacities)?;
        Self::of_results(trace, specs, input, &results)
    }

    /// The table of `results`, the replays of every stream of `input` through every policy of
    /// `specs` in (stream, policy) order, as [`replay_all`] returns them.
    pub fn of_results(
        trace: &str,
        specs: &[PolicySpec],
        input: &ReplayInput,
        results: &[RunResult],
    ) -> Result<Self, PolicyError> {
        let streams = &input.model.streams;
        let capacities: Vec<u64> = input.capacities.iter().map(|c| c.0).collect();
        let start = input.model.start_ns;
        let capture = input.model.level.capture;
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
            let tally = stream.tally();
            let lb = tally.lower_bound;
            let key = stream.key.expect("model streams have keys");
            let recorded = stream.recorded_peak_reserved;
            stream_reports.push(StreamReport {
                recorded_peak_reserved: recorded,
                recorded_device_frees: recorded.map(|_| stream.recorded_segment_frees),
                pid: key.pid,
                device: key.device,
                requests: stream.requests.len(),
                allocations: tally.allocations,
                cuda_streams: stream.cuda_streams.len(),
                capacity_bytes: Some(capacities[s]).filter(|&c| c != u64::MAX),
                lower_bound_bytes: lb,
                outside_allocator: stream.outside,
                recorded_oom_failures: tally.attempts,
                recorded_memory_fraction: tally.memory_fraction,
                recorded_device_total: stream.device_total,
                policies: results[s * n..(s + 1) * n]
                    .iter()
                    .map(|r| {
                        let spec = &specs[r.policy];
                        let mut row = row(spec, &r.outcome, lb, start, capture);
                        row.error_vs_recorded = recorded
                            .filter(|&t| t > 0 && models_recorded(spec))
                            .map(|t| (r.outcome.peak_reserved as f64 - t as f64) / t as f64);
                        row.pool_range =
                            pool_range(stream, spec, capacities[s], r.outcome.peak_reserved)?;
                        Ok(row)
                    })
                    .collect::<Result<_, PolicyError>>()?,
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
                let mut row = row(spec, &summed(&outs), lower_bound, start, capture);
                row.pool_range = PoolRange::sum(
                    stream_reports
                        .iter()
                        .filter_map(|s| s.policies[p].pool_range),
                );
                row
            })
            .collect();
        let level = &input.model.level;
        Ok(ReplayReport {
            trace: trace.to_string(),
            capture_level: level.level,
            capture_level_declared: level.declared,
            capture: level.capture,
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
        costs: outs.iter().map(|o| o.costs).sum(),
        oom: outs
            .iter()
            .filter_map(|o| o.oom.clone())
            .min_by_key(|o| o.time_ns),
        refused_attempts: sum(|o| o.refused_attempts),
    }
}

/// What running at the smallest capacity costs (docs/definitions.md, "Costs").
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FitCost {
    pub device_allocs: u64,
    pub device_frees: u64,
    pub sync_frees: u64,
    pub retries: u64,
    pub est_alloc_time_us: f64,
}

impl FitCost {
    fn of(o: &Outcome) -> FitCost {
        FitCost {
            device_allocs: o.device_allocs,
            device_frees: o.device_frees,
            sync_frees: o.costs.sync_frees,
            retries: o.costs.retries,
            est_alloc_time_us: o.est_alloc_time_us,
        }
    }
}

/// Whether a setting runs on a GPU of one of the common sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GpuFit {
    /// The board's size as sold, in GB ([`crate::units::gpu_bytes`]).
    pub gb: u64,
    pub fits: bool,
}

/// One policy's smallest capacity.
#[derive(Debug, Clone, Serialize)]
pub struct FitRow {
    pub name: String,
    /// Whether a user can select it, or it bounds what any allocator could do.
    pub role: PolicyRole,
    pub preallocates: bool,
    /// The largest over streams: every process must fit on its own device. `null` when no
    /// capacity fits (a request larger than any device).
    pub min_capacity_bytes: Option<u64>,
    pub ratio_to_lower_bound: Option<f64>,
    /// `min_capacity_bytes` + memory outside the pool + the CUDA context: the smallest device
    /// (docs/definitions.md, "process peak").
    pub min_gpu_bytes: Option<u64>,
    /// The pool peak without a capacity limit.
    pub uncapped_peak_reserved: u64,
    /// The fit is below the uncapped peak: there the allocator frees its cache under pressure.
    pub below_uncapped: bool,
    /// The replay at the fit (summed over streams).
    pub at_min: Option<FitCost>,
    /// Which common GPUs it runs on.
    pub gpus: Vec<GpuFit>,
    /// The error the policy's model showed on real runs (docs/validation.md); `null`:
    /// unvalidated.
    pub validated: Option<&'static Band>,
    /// For PyTorch's policies: the `torch.cuda.set_per_process_memory_fraction` argument that
    /// caps the allocator at `min_capacity_bytes` on the recorded device (else the H200), the
    /// division rounded up so that PyTorch's cap is not a byte less.
    pub memory_fraction: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StreamFit {
    pub pid: u32,
    pub device: i32,
    pub lower_bound_bytes: u64,
    /// Plain driver allocations beside the pool, held under any policy.
    pub outside_allocator: Outside,
    pub policies: Vec<FitRow>,
}

/// What `vramtrace fit` reports.
#[derive(Debug, Clone, Serialize)]
pub struct FitReport {
    pub trace: String,
    pub warning: Option<String>,
    /// How the trace's requests were seen, which picks each model's validated band.
    pub capture: Option<Capture>,
    pub lower_bound_bytes: u64,
    /// The CUDA context's share counted in `min_gpu_bytes`.
    pub context_bytes: u64,
    pub policies: Vec<FitRow>,
    pub streams: Vec<StreamFit>,
}

fn fit_row<'a>(
    spec: &PolicySpec,
    fits: impl Iterator<Item = (&'a FitResult, &'a RequestStream)> + Clone,
    lower_bound: u64,
    context: u64,
    capture: Option<Capture>,
) -> FitRow {
    let need = largest_need(fits.clone().map(|(f, _)| f));
    let min_gpu = fits
        .clone()
        .map(|(f, s)| {
            f.min_capacity_bytes
                .map(|c| process_peak(c, s.outside.peak_bytes, context))
        })
        .try_fold(0u64, |m, c| c.map(|c| m.max(c)));
    let uncapped = fits
        .clone()
        .map(|(f, _)| f.uncapped.peak_reserved)
        .max()
        .unwrap_or(0);
    let below = fits.clone().any(|(f, _)| {
        f.min_capacity_bytes
            .is_some_and(|c| c < f.uncapped.peak_reserved)
    });
    let at_min: Option<Vec<FitCost>> = fits
        .clone()
        .map(|(f, _)| f.at_min.as_ref().map(FitCost::of))
        .collect();
    let at_min = at_min.map(|v| FitCost {
        device_allocs: v.iter().map(|c| c.device_allocs).sum(),
        device_frees: v.iter().map(|c| c.device_frees).sum(),
        sync_frees: v.iter().map(|c| c.sync_frees).sum(),
        retries: v.iter().map(|c| c.retries).sum(),
        est_alloc_time_us: v.iter().map(|c| c.est_alloc_time_us).sum(),
    });
    let total = fits
        .clone()
        .filter_map(|(_, s)| s.device_total)
        .max()
        .unwrap_or(H200_TOTAL_MEMORY);
    let memory_fraction = need
        .filter(|&c| c < total && matches!(spec.name.as_str(), "pytorch" | "pytorch-expandable"))
        .map(|c| fraction_for_cap(c, total));
    FitRow {
        memory_fraction,
        name: spec.to_string(),
        validated: band(&spec.name, capture),
        role: role(spec),
        preallocates: preallocates(spec),
        min_capacity_bytes: need,
        ratio_to_lower_bound: need.map(|c| ratio(c, lower_bound)),
        min_gpu_bytes: min_gpu,
        uncapped_peak_reserved: uncapped,
        below_uncapped: below,
        at_min,
        gpus: GPU_SIZES_GB
            .iter()
            .map(|&gb| GpuFit {
                gb,
                fits: min_gpu.is_some_and(|m| m <= gpu_bytes(gb)),
            })
            .collect(),
    }
}

impl FitReport {
    /// Bisects the capacity of every stream of `input` under every policy of `specs` (the
    /// capacities of `input` are not used) and assembles the table; `context` is the CUDA
    /// context's share per process, `progress` hears of each finished bisection.
    pub fn build(
        trace: &str,
        specs: &[PolicySpec],
        input: &ReplayInput,
        context: u64,
        progress: Progress,
    ) -> Result<Self, PolicyError> {
        let streams = &input.model.streams;
        let fits = fit_all(streams, specs, progress)?;
        let capture = input.model.level.capture;
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
                    outside_allocator: st.outside,
                    policies: fits[s * n..(s + 1) * n]
                        .iter()
                        .map(|f| {
                            fit_row(
                                &specs[f.policy],
                                std::iter::once((f, st)),
                                lb,
                                context,
                                capture,
                            )
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
                let of_policy = fits
                    .iter()
                    .filter(move |f| f.policy == p)
                    .map(|f| (f, &streams[f.stream]));
                fit_row(spec, of_policy, lower_bound, context, capture)
            })
            .collect();
        Ok(FitReport {
            trace: trace.to_string(),
            warning: input.model.level.warning.clone(),
            capture,
            lower_bound_bytes: lower_bound,
            context_bytes: context,
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
