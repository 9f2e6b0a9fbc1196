//! Many replays at once: rayon over policies × request streams. Each replay is independent and
//! deterministic, and results are collected in input order, so any thread count gives the same
//! answer.

use super::engine::{Outcome, replay_on};
use super::prepare::driver;
use crate::model::{Request, RequestStream};
use crate::policy::driver::H200_TOTAL_MEMORY;
use crate::policy::pytorch::{Config, PyTorchCaching, Thresholds, fraction_for_cap};
use crate::policy::{AddressOrder, BOUNDS, BuildContext, PolicyError, PolicySpec, build};
use rayon::prelude::*;

/// One policy on one stream.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    pub stream: usize,
    pub policy: usize,
    pub outcome: Outcome,
}

/// Replays every stream through every policy; results in (stream, policy) order.
/// `capacities[s]` is the device capacity of stream `s`.
pub fn replay_all(
    streams: &[RequestStream],
    specs: &[PolicySpec],
    capacities: &[u64],
) -> Result<Vec<RunResult>, PolicyError> {
    replay_all_with(streams, specs, capacities, AddressOrder::Rising)
}

/// [`replay_all`] with the driver's new addresses in `order` (see [`run_with`]).
pub fn replay_all_with(
    streams: &[RequestStream],
    specs: &[PolicySpec],
    capacities: &[u64],
    order: AddressOrder,
) -> Result<Vec<RunResult>, PolicyError> {
    let jobs: Vec<(usize, usize)> = (0..streams.len())
        .flat_map(|s| (0..specs.len()).map(move |p| (s, p)))
        .collect();
    jobs.par_iter()
        .map(|&(s, p)| {
            let outcome = run_with(&streams[s], &specs[p], capacities[s], order)?;
            Ok(RunResult {
                stream: s,
                policy: p,
                outcome,
            })
        })
        .collect()
}

/// One policy on one stream at one capacity, on the driver [`driver`] prepares (with the real
/// allocator's addresses where the trace recorded them).
pub fn run(
    stream: &RequestStream,
    spec: &PolicySpec,
    capacity: u64,
) -> Result<Outcome, PolicyError> {
    run_with(stream, spec, capacity, AddressOrder::Rising)
}

/// [`run`] with the driver's own addresses (those not scripted) in `order`: replaying with
/// both orders shows whether a prediction depends on the addresses, which no trace of another
/// configuration can know (docs/allocators.md, "Driver addresses").
pub fn run_with(
    stream: &RequestStream,
    spec: &PolicySpec,
    capacity: u64,
    order: AddressOrder,
) -> Result<Outcome, PolicyError> {
    run_requests(
        stream,
        stream.requests.iter().copied(),
        spec,
        capacity,
        order,
    )
}

/// [`run_with`] of `requests` in place of `stream`'s own: `stream` gives only what the policy
/// and the driver are built from (its device's memory, the recorded segments), so the requests
/// may still be coming in as the trace is read ([`super::Beside`]).
pub fn run_requests(
    stream: &RequestStream,
    requests: impl IntoIterator<Item = Request>,
    spec: &PolicySpec,
    capacity: u64,
    order: AddressOrder,
) -> Result<Outcome, PolicyError> {
    let ctx = BuildContext { stream, capacity };
    let mut policy = build(spec, &ctx)?;
    let driver = driver(stream, capacity, order);
    Ok(replay_on(policy.as_mut(), requests, driver, None, &mut ()).0)
}

/// [`run_with`] of PyTorch's caching allocator configured as `cfg` (what
/// [`crate::policy::build`] gives its spec: [`crate::policy::equivalence::caching_config`]),
/// with the values of its size thresholds that take the branches this replay took.
pub fn run_caching(
    stream: &RequestStream,
    cfg: Config,
    capacity: u64,
    order: AddressOrder,
) -> (Outcome, Thresholds) {
    let mut policy = PyTorchCaching::new(cfg);
    let driver = driver(stream, capacity, order);
    let requests = stream.requests.iter().copied();
    let (outcome, _) = replay_on(&mut policy, requests, driver, None, &mut ());
    (outcome, policy.thresholds())
}

/// The smallest capacity at which a policy serves a stream without OOM.
#[derive(Debug, Clone, PartialEq)]
pub struct FitResult {
    pub stream: usize,
    pub policy: usize,
    /// `None` when no capacity fits: a request no device can serve.
    pub min_capacity_bytes: Option<u64>,
    /// Replays the bisection took.
    pub replays: u32,
    /// The replay without a capacity limit.
    pub uncapped: Outcome,
    /// The replay at `min_capacity_bytes`: what running at the smallest capacity costs.
    pub at_min: Option<Outcome>,
}

/// Progress of a long search: called with (pairs done, pairs in all) as each finishes.
pub type Progress<'a> = &'a (dyn Fn(usize, usize) + Sync);

/// Bisects the capacity of every (stream, policy) pair, in parallel.
///
/// The bracket starts below the stream's lower bound (nothing fits there) and at the peak
/// reserved of an unlimited replay, doubled until a replay at that capacity verifiably fits.
/// A replay that fits at capacity `c` and peaks at `p < c` suggests `p`, which is then tried
/// too. Every answer is a capacity at which a replay was run and fitted, with the capacity one
/// byte below it run and failed. Policies whose placement depends on the capacity (the address
/// space of expandable segments, a memory fraction) are not monotone in it, so a smaller
/// capacity may exist off the bisection path. The bounds ([`BOUNDS`]) plan without regard to
/// the capacity: they are checked at their own peak and one byte below, not bisected.
pub fn fit_all(
    streams: &[RequestStream],
    specs: &[PolicySpec],
    progress: Progress,
) -> Result<Vec<FitResult>, PolicyError> {
    let jobs: Vec<(usize, usize)> = (0..streams.len())
        .flat_map(|s| (0..specs.len()).map(move |p| (s, p)))
        .collect();
    let done = std::sync::atomic::AtomicUsize::new(0);
    jobs.par_iter()
        .map(|&(s, p)| {
            let fit = fit_one(&streams[s], &specs[p])?;
            let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            progress(n, jobs.len());
            Ok(FitResult {
                stream: s,
                policy: p,
                ..fit
            })
        })
        .collect()
}

/// Bisection for one pair (`stream` and `policy` of the result are 0); `min_capacity_bytes` is
/// `None` when even an unlimited device does not fit.
///
/// A PyTorch policy is bisected twice, under a device capacity (the driver refuses) and under a
/// memory fraction of that many bytes (`set_per_process_memory_fraction`: the allocator refuses
/// itself before asking the driver, and counts a request's whole `get_allocation_size` where an
/// expandable segment maps only the pages it lacks, so the fraction needs more), and the larger
/// answer is kept: a GPU or a fraction sized by it runs the trace. Measured on the H200, the
/// capacity alone was up to 4% short of what expandable segments needed under a fraction
/// (docs/validation.md, "Under pressure").
pub fn fit_one(stream: &RequestStream, spec: &PolicySpec) -> Result<FitResult, PolicyError> {
    // A cap the program set is a limit like the one being searched: it is left out.
    let stream = &*stream.without_memory_fraction();
    let by_capacity = bisect(stream, spec, &|c| run(stream, spec, c))?;
    if !matches!(spec.name.as_str(), "pytorch" | "pytorch-expandable")
        || spec.options.iter().any(|(k, _)| k == "memory_fraction")
    {
        return Ok(by_capacity);
    }
    let total = stream.device_total.unwrap_or(H200_TOTAL_MEMORY);
    let by_fraction = bisect(stream, spec, &|c| {
        if c >= total {
            return run(stream, spec, u64::MAX);
        }
        let mut capped = spec.clone();
        capped.options.push((
            "memory_fraction".into(),
            fraction_for_cap(c, total).to_string(),
        ));
        run(stream, &capped, u64::MAX)
    })?;
    let need = |f: &FitResult| f.min_capacity_bytes.unwrap_or(u64::MAX);
    Ok(if need(&by_fraction) > need(&by_capacity) {
        by_fraction
    } else {
        by_capacity
    })
}

/// The bisection of [`fit_one`] with `run_at(c)` replaying at limit `c` (`u64::MAX`: none).
fn bisect(
    stream: &RequestStream,
    spec: &PolicySpec,
    run_at: &dyn Fn(u64) -> Result<Outcome, PolicyError>,
) -> Result<FitResult, PolicyError> {
    let unlimited = run_at(u64::MAX)?;
    let mut replays = 1;
    let mut result = FitResult {
        stream: 0,
        policy: 0,
        min_capacity_bytes: None,
        replays,
        uncapped: unlimited.clone(),
        at_min: None,
    };
    if unlimited.oom.is_some() {
        return Ok(result);
    }
    let fits = |c: u64, replays: &mut u32| -> Result<Option<Outcome>, PolicyError> {
        *replays += 1;
        let o = run_at(c)?;
        Ok(o.oom.is_none().then_some(o))
    };
    // Invariant: capacity `lo` fails (below the lower bound it must); `hi` was run and fits,
    // giving `at_hi`.
    let mut lo = stream.lower_bound().saturating_sub(1);
    let mut hi = unlimited.peak_reserved.max(lo + 1);
    if BOUNDS.contains(&spec.name.as_str())
        && let Some(at) = fits(hi, &mut replays)?
        && fits(hi - 1, &mut replays)?.is_none()
    {
        result.min_capacity_bytes = Some(hi);
        result.at_min = Some(at);
        result.replays = replays;
        return Ok(result);
    }
    let mut at_hi = loop {
        if let Some(o) = fits(hi, &mut replays)? {
            break o;
        }
        lo = hi;
        hi = hi.saturating_mul(2);
        if lo == u64::MAX {
            result.replays = replays;
            return Ok(result);
        }
    };
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match fits(mid, &mut replays)? {
            None => lo = mid,
            Some(o) => {
                let peak = o.peak_reserved;
                hi = mid;
                at_hi = o;
                if peak > lo && peak < mid {
                    match fits(peak, &mut replays)? {
                        Some(o) => {
                            hi = peak;
                            at_hi = o;
                        }
                        None => lo = peak,
                    }
                }
            }
        }
    }
    result.min_capacity_bytes = Some(hi);
    result.at_min = Some(at_hi);
    result.replays = replays;
    Ok(result)
}
