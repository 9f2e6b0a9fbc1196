//! Many replays at once: rayon over policies × request streams. Each replay is independent and
//! deterministic, and results are collected in input order, so any thread count gives the same
//! answer.

use super::engine::{Outcome, replay_on};
use crate::model::RequestStream;
use crate::policy::{BuildContext, Driver, DriverModel, PolicyError, PolicySpec, build};
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
    let jobs: Vec<(usize, usize)> = (0..streams.len())
        .flat_map(|s| (0..specs.len()).map(move |p| (s, p)))
        .collect();
    jobs.par_iter()
        .map(|&(s, p)| {
            let outcome = run(&streams[s], &specs[p], capacities[s])?;
            Ok(RunResult {
                stream: s,
                policy: p,
                outcome,
            })
        })
        .collect()
}

/// One policy on one stream at one capacity. When the trace recorded the real allocator's
/// `cudaMalloc`s (an imported snapshot), the driver returns their addresses while the sizes
/// agree ([`Driver::script_segments`]).
pub fn run(
    stream: &RequestStream,
    spec: &PolicySpec,
    capacity: u64,
) -> Result<Outcome, PolicyError> {
    let ctx = BuildContext { stream, capacity };
    let mut policy = build(spec, &ctx)?;
    let mut driver = Driver::new(DriverModel { capacity });
    driver.script_segments(stream.recorded_segments.iter().copied());
    Ok(replay_on(
        policy.as_mut(),
        stream.requests.iter().copied(),
        driver,
        None,
        &mut (),
    )
    .0)
}

/// The smallest capacity at which a policy serves a stream without OOM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FitResult {
    pub stream: usize,
    pub policy: usize,
    /// `None` when no capacity fits: a request no device can serve.
    pub min_capacity_bytes: Option<u64>,
    /// Replays the bisection took.
    pub replays: u32,
}

/// Bisects the capacity of every (stream, policy) pair, in parallel.
///
/// The bracket starts below the stream's lower bound (nothing fits there) and at the peak
/// reserved of an unlimited replay, doubled until a replay at that capacity verifiably fits.
/// A replay that fits at capacity `c` and peaks at `p < c` suggests `p`, which is then tried
/// too. Every answer is a capacity at which a replay was run and fitted, with the capacity one
/// byte below it run and failed. Policies whose placement depends on the capacity (the address
/// space of expandable segments, a memory fraction) are not monotone in it, so a smaller
/// capacity may exist off the bisection path.
pub fn fit_all(
    streams: &[RequestStream],
    specs: &[PolicySpec],
) -> Result<Vec<FitResult>, PolicyError> {
    let jobs: Vec<(usize, usize)> = (0..streams.len())
        .flat_map(|s| (0..specs.len()).map(move |p| (s, p)))
        .collect();
    jobs.par_iter()
        .map(|&(s, p)| {
            let (min_capacity_bytes, replays) = fit_one(&streams[s], &specs[p])?;
            Ok(FitResult {
                stream: s,
                policy: p,
                min_capacity_bytes,
                replays,
            })
        })
        .collect()
}

/// Bisection for one pair: (smallest capacity without OOM, replays made); `None` when even an
/// unlimited device does not fit.
pub fn fit_one(
    stream: &RequestStream,
    spec: &PolicySpec,
) -> Result<(Option<u64>, u32), PolicyError> {
    let unlimited = run(stream, spec, u64::MAX)?;
    let mut replays = 1;
    if unlimited.oom.is_some() {
        return Ok((None, replays));
    }
    let fits = |c: u64, replays: &mut u32| -> Result<Option<u64>, PolicyError> {
        *replays += 1;
        let o = run(stream, spec, c)?;
        Ok(o.oom.is_none().then_some(o.peak_reserved))
    };
    // Invariant: capacity `lo` fails (below the lower bound it must); `hi` was run and fits.
    let mut lo = stream.lower_bound().saturating_sub(1);
    let mut hi = unlimited.peak_reserved.max(lo + 1);
    while fits(hi, &mut replays)?.is_none() {
        lo = hi;
        hi = hi.saturating_mul(2);
        if lo == u64::MAX {
            return Ok((None, replays));
        }
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match fits(mid, &mut replays)? {
            None => lo = mid,
            Some(peak) => {
                hi = mid;
                if peak > lo && peak < mid {
                    match fits(peak, &mut replays)? {
                        Some(_) => hi = peak,
                        None => lo = peak,
                    }
                }
            }
        }
    }
    Ok((Some(hi), replays))
}
