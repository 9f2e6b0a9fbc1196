//! Drives one policy through one request stream and measures it.

use crate::model::{Request, RequestKind};
use crate::policy::driver::MAX_REQUEST;
use crate::policy::{AddressMap, Driver, DriverModel, Policy};
use serde::Serialize;

/// What the replay was asked to do.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplayOptions {
    pub driver: DriverModel,
    /// Stop after this many requests (to look at the state at a given moment).
    pub stop_after: Option<usize>,
}

/// The three byte counts after a request (docs/architecture.md, "Definitions").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub requested: u64,
    pub allocated: u64,
    pub reserved: u64,
}

/// Sees a replay as it runs: every step, for timelines, and the policy itself whenever its
/// reserved bytes reach a new peak, for whatever a caller wants of the state there (its address
/// map, say) without replaying again. `()` sees nothing and costs nothing.
pub trait Observer {
    /// Request `index` was served (or refused, for an attempt); `usage` is the state after it.
    #[inline]
    fn step(&mut self, _index: usize, _request: &Request, _usage: Usage) {}

    /// Reserved bytes first reached `usage.reserved` with request `index`, and `policy` is in
    /// the state the request left it in. Called before [`Observer::step`] for that request.
    #[inline]
    fn peak(&mut self, _index: usize, _policy: &dyn Policy, _usage: Usage) {}

    /// The next request index after which [`Observer::state`] wants to see the policy;
    /// `usize::MAX` for none.
    #[inline]
    fn next_state(&self) -> usize {
        usize::MAX
    }

    /// `policy` right after request `index`, which [`Observer::next_state`] asked for. Called
    /// after [`Observer::step`] for that request.
    #[inline]
    fn state(&mut self, _index: usize, _policy: &dyn Policy) {}
}

impl Observer for () {}

/// Every step's usage, with the request's time: the data of a reserved/allocated timeline.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Timeline {
    pub time_ns: Vec<u64>,
    pub usage: Vec<Usage>,
}

impl Observer for Timeline {
    fn step(&mut self, _: usize, request: &Request, usage: Usage) {
        self.time_ns.push(request.time_ns);
        self.usage.push(usage);
    }
}

/// A live object at the moment of an OOM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LiveObject {
    pub size: u64,
    pub time_ns: u64,
    pub stack: u32,
}

/// The request a policy could not serve, and what was live then.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Oom {
    pub request_index: usize,
    pub time_ns: u64,
    pub size: u64,
    /// CUDA stream index of the request.
    pub stream: u32,
    pub stack: u32,
    pub reserved: u64,
    pub allocated: u64,
    pub requested: u64,
    pub live_objects: u64,
    /// The largest live objects, largest first (at most [`OOM_LIVE_SHOWN`]).
    pub largest_live: Vec<LiveObject>,
}

pub const OOM_LIVE_SHOWN: usize = 10;

/// The measured result of one replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub requests: usize,
    pub peak_requested: u64,
    pub peak_allocated: u64,
    pub peak_reserved: u64,
    /// Allocated bytes at the first moment reserved reached its peak.
    pub allocated_at_peak_reserved: u64,
    /// Index of the request after which reserved first reached its peak.
    pub peak_reserved_index: usize,
    pub device_allocs: u64,
    pub device_frees: u64,
    pub est_alloc_time_us: f64,
    /// What running this way costs besides time: synchronizing frees, refusals, retries.
    pub costs: Costs,
    pub oom: Option<Oom>,
    /// Requests the recorded run's driver refused (out of memory there) that this policy could
    /// not serve either, from its cache: the recorded out-of-memory errors it reproduces. The
    /// program survived them, so the replay goes on.
    pub refused_attempts: u64,
}

/// The cost proxy of a replay, beside [`Outcome::est_alloc_time_us`] (docs/definitions.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Costs {
    /// Frees that synchronize the device (`cudaFree`, `cuMemUnmap`).
    pub sync_frees: u64,
    /// Allocating driver calls refused for lack of room.
    pub refusals: u64,
    /// Times the allocator emptied its cache and tried again.
    pub retries: u64,
}

impl std::iter::Sum for Costs {
    fn sum<I: Iterator<Item = Costs>>(iter: I) -> Costs {
        iter.fold(Costs::default(), |a, b| Costs {
            sync_frees: a.sync_frees + b.sync_frees,
            refusals: a.refusals + b.refusals,
            retries: a.retries + b.retries,
        })
    }
}

impl Outcome {
    /// 1 − allocated / reserved at the moment reserved peaks (0 when nothing was reserved).
    pub fn fragmentation_at_peak(&self) -> f64 {
        if self.peak_reserved == 0 {
            0.0
        } else {
            1.0 - self.allocated_at_peak_reserved as f64 / self.peak_reserved as f64
        }
    }
}

#[derive(Clone, Copy)]
struct Live {
    size: u64,
    time_ns: u64,
    stack: u32,
}

/// Replays `requests` through `policy`; stops at the first request the policy cannot serve.
///
/// Memory used here is one small record per live slot.
pub fn replay(
    policy: &mut dyn Policy,
    requests: impl IntoIterator<Item = Request>,
    options: &ReplayOptions,
    observer: &mut impl Observer,
) -> (Outcome, Driver) {
    let driver = Driver::new(options.driver);
    replay_on(policy, requests, driver, options.stop_after, observer)
}

/// [`replay`] on a driver prepared by the caller (for example one given the real driver's
/// addresses with [`Driver::script_segments`]).
pub fn replay_on(
    policy: &mut dyn Policy,
    requests: impl IntoIterator<Item = Request>,
    mut driver: Driver,
    stop_after: Option<usize>,
    observer: &mut impl Observer,
) -> (Outcome, Driver) {
    let mut live: Vec<Option<Live>> = Vec::new();
    let mut usage = Usage::default();
    let mut out = Outcome {
        requests: 0,
        peak_requested: 0,
        peak_allocated: 0,
        peak_reserved: 0,
        allocated_at_peak_reserved: 0,
        peak_reserved_index: 0,
        device_allocs: 0,
        device_frees: 0,
        est_alloc_time_us: 0.0,
        costs: Costs::default(),
        oom: None,
        refused_attempts: 0,
    };
    let limit = stop_after.unwrap_or(usize::MAX);
    for (index, r) in requests.into_iter().enumerate() {
        if index >= limit {
            break;
        }
        let slot = r.slot as usize;
        match r.kind {
            RequestKind::Alloc => {
                if r.size > MAX_REQUEST
                    || policy
                        .malloc(r.slot, r.size, r.stream, &mut driver.device())
                        .is_err()
                {
                    out.oom = Some(oom_report(index, &r, &live, usage, &driver));
                    break;
                }
                if live.len() <= slot {
                    live.resize(slot + 1, None);
                }
                live[slot] = Some(Live {
                    size: r.size,
                    time_ns: r.time_ns,
                    stack: r.stack,
                });
                usage.requested += r.size;
            }
            RequestKind::Free => {
                policy.free(r.slot, &mut driver.device());
                live[slot] = None;
                usage.requested -= r.size;
            }
            RequestKind::EmptyCache => policy.empty_cache(&mut driver.device()),
            RequestKind::MemoryFraction => policy.set_memory_fraction(r.fraction()),
            RequestKind::Order(order) => {
                policy.order(order, r.stream, r.slot, &mut driver.device())
            }
            RequestKind::Attempt => {
                // The real driver refused it: the policy may serve it from its cache, but gets
                // no new memory, so a refusal runs its retry path as it ran in the program.
                driver.set_frozen(true);
                let served = r.size <= MAX_REQUEST
                    && policy.attempt(r.slot, r.size, r.stream, &mut driver.device());
                out.refused_attempts += u64::from(!served);
                driver.set_frozen(false);
            }
        }
        out.requests = index + 1;
        usage.allocated = policy.allocated();
        usage.reserved = driver.reserved();
        out.peak_requested = out.peak_requested.max(usage.requested);
        out.peak_allocated = out.peak_allocated.max(usage.allocated);
        if usage.reserved > out.peak_reserved {
            out.peak_reserved = usage.reserved;
            out.allocated_at_peak_reserved = usage.allocated;
            out.peak_reserved_index = index;
            observer.peak(index, &*policy, usage);
        }
        observer.step(index, &r, usage);
        if index == observer.next_state() {
            observer.state(index, &*policy);
        }
    }
    out.device_allocs = driver.device_allocs();
    out.device_frees = driver.device_frees();
    out.est_alloc_time_us = driver.cost_us();
    out.costs = Costs {
        sync_frees: driver.sync_frees(),
        refusals: driver.refusals(),
        retries: driver.retries(),
    };
    (out, driver)
}

fn oom_report(index: usize, r: &Request, live: &[Option<Live>], usage: Usage, d: &Driver) -> Oom {
    let mut objects: Vec<LiveObject> = live
        .iter()
        .flatten()
        .map(|l| LiveObject {
            size: l.size,
            time_ns: l.time_ns,
            stack: l.stack,
        })
        .collect();
    let live_objects = objects.len() as u64;
    objects.sort_by(|a, b| b.size.cmp(&a.size).then(a.time_ns.cmp(&b.time_ns)));
    objects.truncate(OOM_LIVE_SHOWN);
    Oom {
        request_index: index,
        time_ns: r.time_ns,
        size: r.size,
        stream: r.stream,
        stack: r.stack,
        reserved: d.reserved(),
        allocated: usage.allocated,
        requested: usage.requested,
        live_objects,
        largest_live: objects,
    }
}

/// The policy's address map right after request `index`, replayed on `driver` (replays the
/// prefix again: replays are deterministic, so on the driver the full replay started from this
/// is the state it passed through).
pub fn address_map_at(
    policy: &mut dyn Policy,
    requests: &[Request],
    index: usize,
    driver: Driver,
) -> AddressMap {
    replay_on(
        policy,
        requests.iter().copied(),
        driver,
        Some(index + 1),
        &mut (),
    );
    policy.address_map()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::lower_bound::LowerBound;
    use crate::policy::pytorch::{Config, PyTorchCaching};

    const MIB: u64 = 1 << 20;

    fn requests() -> Vec<Request> {
        let mut r = vec![
            Request::alloc(0, 16 * MIB, 0),
            Request::alloc(1, 4 * MIB, 0),
            Request::free(0, 16 * MIB),
            Request::alloc(0, 8 * MIB, 0),
        ];
        for (i, r) in r.iter_mut().enumerate() {
            r.time_ns = 1000 * i as u64;
        }
        r
    }

    #[test]
    fn peaks_fragmentation_and_the_timeline_come_from_every_step() {
        let mut p = PyTorchCaching::new(Config::default());
        let mut timeline = Timeline::default();
        let (o, _) = replay(&mut p, requests(), &ReplayOptions::default(), &mut timeline);
        // 16 MiB segment, then a 20 MiB segment for the 4 MiB request; 8 MiB reuses the 16.
        assert_eq!(o.peak_reserved, 36 * MIB);
        assert_eq!(o.peak_reserved_index, 1);
        assert_eq!(o.allocated_at_peak_reserved, 20 * MIB);
        assert!((o.fragmentation_at_peak() - (1.0 - 20.0 / 36.0)).abs() < 1e-12);
        assert_eq!(o.peak_requested, 20 * MIB);
        assert_eq!(timeline.time_ns, vec![0, 1000, 2000, 3000]);
        assert_eq!(
            timeline.usage[3],
            Usage {
                requested: 12 * MIB,
                allocated: 12 * MIB,
                reserved: 36 * MIB
            }
        );
    }

    #[test]
    fn an_oom_stops_the_replay_and_names_the_request_and_the_live_objects() {
        let mut p = LowerBound::default();
        let options = ReplayOptions {
            driver: DriverModel { capacity: 24 * MIB },
            stop_after: None,
        };
        let mut r = requests();
        r.push(Request::alloc(2, 16 * MIB, 0));
        r[4].time_ns = 9000;
        r[4].stack = 77;
        let (o, _) = replay(&mut p, r, &options, &mut ());
        let oom = o.oom.unwrap();
        assert_eq!(
            (oom.request_index, oom.time_ns, oom.size, oom.stack),
            (4, 9000, 16 * MIB, 77)
        );
        assert_eq!((oom.requested, oom.live_objects), (12 * MIB, 2));
        assert_eq!(oom.largest_live[0].size, 8 * MIB);
        assert_eq!(o.requests, 4);
    }

    #[test]
    fn the_address_map_at_a_step_is_the_state_the_replay_passed_through() {
        let r = requests();
        let mut p = PyTorchCaching::new(Config::default());
        let map = address_map_at(&mut p, &r, 1, Driver::new(DriverModel::default()));
        assert_eq!(map.segments.len(), 2);
        assert_eq!(map.segments.iter().map(|s| s.size).sum::<u64>(), 36 * MIB);
        let used: Vec<_> = map.blocks.iter().filter_map(|b| b.slot).collect();
        assert_eq!(used, vec![0, 1]);
        // The 4 MiB block split its 20 MiB segment: one free block remains in it.
        assert_eq!(map.blocks.iter().filter(|b| b.slot.is_none()).count(), 1);
    }

    /// Keeps the timeline and the address map at the latest peak.
    #[derive(Default)]
    struct AtPeak {
        timeline: Timeline,
        map: AddressMap,
        peaks: Vec<usize>,
    }

    impl Observer for AtPeak {
        fn step(&mut self, index: usize, request: &Request, usage: Usage) {
            self.timeline.step(index, request, usage);
        }

        fn peak(&mut self, index: usize, policy: &dyn Policy, usage: Usage) {
            assert_eq!(
                usage.reserved,
                policy
                    .address_map()
                    .segments
                    .iter()
                    .map(|s| s.size)
                    .sum::<u64>()
            );
            self.peaks.push(index);
            self.map = policy.address_map();
        }
    }

    #[test]
    fn an_observer_takes_the_address_map_at_the_peak_without_a_second_replay() {
        let requests = vec![
            Request::alloc(0, 30 * MIB, 0),
            Request::alloc(1, 30 * MIB, 0),
            Request::free(0, 30 * MIB),
            Request::free(1, 30 * MIB),
        ];
        let mut p = PyTorchCaching::new(Config::default());
        let mut seen = AtPeak::default();
        let (o, _) = replay(&mut p, requests, &ReplayOptions::default(), &mut seen);
        assert_eq!(o.peak_reserved_index, 1);
        assert_eq!(seen.peaks, [0, 1]);
        assert_eq!(seen.timeline.usage.len(), 4);
        let reserved: u64 = seen.map.segments.iter().map(|s| s.size).sum();
        assert_eq!(reserved, o.peak_reserved);
        assert_eq!(
            seen.map.blocks.iter().filter(|b| b.slot.is_some()).count(),
            2
        );
    }
}
