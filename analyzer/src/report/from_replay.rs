//! The adapter from the replay engine to chart data: replays a request stream through each
//! policy, sampling reserved and allocated bytes into the report's time buckets as it goes (no
//! per-request timeline is kept), and takes the policy's address map where reserved peaked and
//! at a few moments spread over where memory moves ([`moments`]), for the page's state view.

use super::data::{
    AddressLayout, Buckets, OomFacts, Peak, PolicyResult, SegmentLayout, SeriesBuilder,
};
use crate::model::{Request, RequestKind, RequestStream};
use crate::policy::{
    AddressMap, BuildContext, DriverModel, Policy, PolicyError, PolicySpec, build,
};
use crate::replay::{Observer, ReplayOptions, Usage, address_map_at, replay};
use rayon::prelude::*;

/// Downsamples a replay's usage into [`Buckets`], and keeps the policy's address map from the
/// moment reserved bytes peaked, so no second replay (and, for offline policies, no second plan)
/// is needed. Each new peak costs one snapshot; a trace that peaks too often with too many
/// blocks exhausts [`SNAPSHOT_BUDGET`], and then the caller takes the map with
/// [`address_map_at`] instead.
struct Sampler {
    reserved: SeriesBuilder,
    allocated: SeriesBuilder,
    /// Reserved over the focus window's finer buckets.
    reserved_focus: SeriesBuilder,
    map: Option<AddressMap>,
    budget: u64,
    /// Request indices, increasing, after which to keep the address map.
    moments: Vec<usize>,
    /// The maps kept so far, with the request's time.
    states: Vec<(u64, AddressLayout)>,
    /// Slot → the allocation it holds (allocations counted in request order), kept up to date
    /// for the states' owners.
    owners: Vec<u32>,
    allocations: u32,
    /// Blocks the states may still copy.
    state_budget: usize,
    last_ns: u64,
}

/// Blocks and segments copied in peak snapshots before the [`Sampler`] gives up on them: at
/// most this, and at most two per request of the stream, about what the partial replay that
/// then takes the map costs. (A generate loop's reserved bytes peak anew at almost every cache
/// growth: with a fixed budget alone, copying and sorting maps took four fifths of a report's
/// time on a 215,000-entry snapshot.)
const SNAPSHOT_BUDGET: u64 = 20_000_000;
/// Moments at which each policy's state is kept besides its peak.
pub const STATE_MOMENTS: usize = 24;
/// Blocks the states of all policies of a section may hold together (each policy its share),
/// so the page stays small however many policies are replayed.
const STATE_BLOCKS: usize = 120_000;

impl Observer for Sampler {
    #[inline]
    fn step(&mut self, _: usize, request: &Request, usage: Usage) {
        self.reserved.step(request.time_ns, usage.reserved);
        self.allocated.step(request.time_ns, usage.allocated);
        self.reserved_focus.step(request.time_ns, usage.reserved);
        self.last_ns = request.time_ns;
        let slot = request.slot as usize;
        match request.kind {
            RequestKind::Alloc => {
                if self.owners.len() <= slot {
                    self.owners.resize(slot + 1, u32::MAX);
                }
                self.owners[slot] = self.allocations;
                self.allocations += 1;
            }
            RequestKind::Free => {
                if let Some(o) = self.owners.get_mut(slot) {
                    *o = u32::MAX;
                }
            }
            RequestKind::Attempt => {}
        }
    }

    #[inline]
    fn next_state(&self) -> usize {
        self.moments.first().copied().unwrap_or(usize::MAX)
    }

    fn state(&mut self, _: usize, policy: &dyn Policy) {
        self.moments.remove(0);
        let map = layout(&policy.address_map(), &self.owners);
        let blocks: usize = map.segments.iter().map(|s| s.allocated.len()).sum();
        if blocks > self.state_budget {
            self.moments.clear();
            return;
        }
        self.state_budget -= blocks;
        self.states.push((self.last_ns, map));
    }

    fn peak(&mut self, _: usize, policy: &dyn Policy, _: Usage) {
        if self.budget == 0 {
            return;
        }
        let map = policy.address_map();
        let cost = (map.blocks.len() + map.segments.len()) as u64;
        if cost > self.budget {
            self.budget = 0;
            self.map = None;
        } else {
            self.budget -= cost;
            self.map = Some(map);
        }
    }
}

/// A colour per spec that stays the same from report to report: a registered policy's place in
/// the registry, and for a second spec of the same policy (other options) the next colour no
/// registered policy uses.
pub fn colors(specs: &[PolicySpec]) -> Vec<usize> {
    let registry = crate::policy::REGISTRY;
    let mut taken = vec![false; registry.len()];
    let mut next = registry.len();
    specs
        .iter()
        .map(|s| match registry.iter().position(|p| p.name == s.name) {
            Some(i) if !taken[i] => {
                taken[i] = true;
                i
            }
            _ => {
                next += 1;
                next - 1
            }
        })
        .collect()
}

/// Replays `stream` through every policy in `specs` (in parallel) under `capacity` (`u64::MAX`
/// for none), sampled into `buckets` and, finer, into `focus`. Results are in `specs` order; a
/// result's `index` is its position there.
pub fn replay_policies(
    stream: &RequestStream,
    specs: &[PolicySpec],
    capacity: u64,
    buckets: Buckets,
    focus: Buckets,
) -> Result<Vec<PolicyResult>, PolicyError> {
    let colors = colors(specs);
    specs
        .par_iter()
        .enumerate()
        .map(|(index, spec)| {
            let budget = STATE_BLOCKS / specs.len().max(1);
            let mut r = replay_one(stream, spec, index, capacity, (buckets, focus), budget)?;
            r.color = colors[index];
            Ok(r)
        })
        .collect()
}

fn replay_one(
    stream: &RequestStream,
    spec: &PolicySpec,
    index: usize,
    capacity: u64,
    (buckets, focus): (Buckets, Buckets),
    state_budget: usize,
) -> Result<PolicyResult, PolicyError> {
    let ctx = BuildContext { stream, capacity };
    let options = ReplayOptions {
        driver: DriverModel { capacity },
        stop_after: None,
    };
    let mut sampler = Sampler {
        reserved: SeriesBuilder::new(buckets),
        allocated: SeriesBuilder::new(buckets),
        reserved_focus: SeriesBuilder::new(focus),
        map: None,
        budget: SNAPSHOT_BUDGET.min(2 * stream.requests.len() as u64),
        moments: moments(stream, focus),
        states: Vec::new(),
        owners: Vec::new(),
        allocations: 0,
        state_budget,
        last_ns: 0,
    };
    let mut policy = build(spec, &ctx)?;
    let (outcome, _) = replay(
        policy.as_mut(),
        stream.requests.iter().copied(),
        &options,
        &mut sampler,
    );
    let owners = owners_at(stream, outcome.peak_reserved_index);
    let address_map = match sampler.map.take() {
        _ if outcome.peak_reserved == 0 => AddressLayout::default(),
        Some(map) => layout(&map, &owners),
        _ => {
            // Replays are deterministic: a fresh policy replayed up to the peak is in the state
            // the full replay passed through.
            let mut fresh = build(spec, &ctx)?;
            layout(
                &address_map_at(
                    fresh.as_mut(),
                    &stream.requests,
                    outcome.peak_reserved_index,
                    &options,
                ),
                &owners,
            )
        }
    };
    let peak_time = stream
        .requests
        .get(outcome.peak_reserved_index)
        .map_or(0, |r| r.time_ns);
    // A replay that ran out of memory stopped there: its lines end there too.
    let (reserved, allocated, reserved_focus) = match &outcome.oom {
        Some(oom) => (
            sampler.reserved.finish_at(oom.time_ns),
            sampler.allocated.finish_at(oom.time_ns),
            sampler.reserved_focus.finish_at(oom.time_ns),
        ),
        None => (
            sampler.reserved.finish(),
            sampler.allocated.finish(),
            sampler.reserved_focus.finish(),
        ),
    };
    Ok(PolicyResult {
        name: spec.to_string(),
        index,
        color: index,
        reserved,
        allocated,
        reserved_focus,
        states: std::mem::take(&mut sampler.states),
        peak_reserved: Peak {
            time_ns: peak_time,
            bytes: outcome.peak_reserved,
        },
        peak_allocated: outcome.peak_allocated,
        fragmentation_at_peak: outcome.fragmentation_at_peak(),
        device_allocs: outcome.device_allocs,
        device_frees: outcome.device_frees,
        est_alloc_time_us: outcome.est_alloc_time_us,
        oom: outcome.oom.map(|o| OomFacts {
            stream: o.stream,
            time_ns: o.time_ns,
            size: o.size,
            reserved: o.reserved,
            stack_id: o.stack,
            stack: Vec::new(),
        }),
        address_map,
    })
}

/// [`STATE_MOMENTS`] request indices spread evenly in time over `focus`: the last request before
/// each of its evenly spaced instants, without repeats.
pub fn moments(stream: &RequestStream, focus: Buckets) -> Vec<usize> {
    let r = &stream.requests;
    let mut v: Vec<usize> = (0..STATE_MOMENTS)
        .filter_map(|k| {
            let t = focus.start_ns
                + ((2 * k as u128 + 1) * focus.span_ns as u128 / (2 * STATE_MOMENTS) as u128)
                    as u64;
            r.partition_point(|q| q.time_ns <= t).checked_sub(1)
        })
        .collect();
    v.dedup();
    v
}

/// Slot → the index of the allocation it holds (allocations counted in request order, as
/// [`super::trace::Instance::allocations`] are) right after request `index`.
pub fn owners_at(stream: &RequestStream, index: usize) -> Vec<u32> {
    let mut by_slot = vec![u32::MAX; stream.slots as usize];
    let mut next = 0u32;
    for r in stream.requests.iter().take(index.saturating_add(1)) {
        let slot = r.slot as usize;
        if by_slot.len() <= slot {
            by_slot.resize(slot + 1, u32::MAX);
        }
        match r.kind {
            RequestKind::Alloc => {
                by_slot[slot] = next;
                next += 1;
            }
            RequestKind::Free => by_slot[slot] = u32::MAX,
            RequestKind::Attempt => {}
        }
    }
    by_slot
}

/// Each segment with the allocated blocks inside it, as offsets, and the allocation each block
/// holds (`owners`: slot → allocation index, from [`owners_at`]).
pub fn layout(map: &AddressMap, owners: &[u32]) -> AddressLayout {
    let mut segments: Vec<_> = map.segments.clone();
    // Policies that pack several blocks in one driver page list the page once per block.
    segments.sort_by_key(|s| (s.address, std::cmp::Reverse(s.size)));
    segments.dedup_by_key(|s| s.address);
    let mut blocks: Vec<_> = map.blocks.iter().filter(|b| b.slot.is_some()).collect();
    blocks.sort_by_key(|b| b.address);
    let mut next = 0;
    AddressLayout {
        segments: segments
            .iter()
            .map(|s| {
                let end = s.address + s.size;
                while next < blocks.len() && blocks[next].address < s.address {
                    next += 1;
                }
                let (mut allocated, mut held_by) = (Vec::new(), Vec::new());
                while next < blocks.len() && blocks[next].address < end {
                    let b = blocks[next];
                    allocated.push((b.address - s.address, b.size.min(end - b.address)));
                    held_by.push(
                        b.slot
                            .and_then(|slot| owners.get(slot as usize).copied())
                            .unwrap_or(u32::MAX),
                    );
                    next += 1;
                }
                SegmentLayout {
                    address: s.address,
                    size: s.size,
                    allocated,
                    owners: held_by,
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Request;
    use crate::policy::parse_specs;
    use crate::policy::{BlockSpan, Span};

    #[test]
    fn a_policy_keeps_its_colour_whatever_else_is_replayed() {
        let all = colors(&parse_specs("cuda-malloc,pytorch,pytorch-expandable").unwrap());
        let some = colors(
            &parse_specs("pytorch-expandable,pytorch,pytorch:max_split_size_mb=64").unwrap(),
        );
        assert_eq!(all, vec![0, 1, 2]);
        let n = crate::policy::REGISTRY.len();
        assert_eq!(some, vec![2, 1, n]);
    }

    #[test]
    fn blocks_are_placed_in_their_segments_and_free_ones_left_out() {
        let map = AddressMap {
            segments: vec![
                Span {
                    address: 2000,
                    size: 1000,
                },
                Span {
                    address: 0,
                    size: 1000,
                },
            ],
            blocks: vec![
                BlockSpan {
                    address: 0,
                    size: 500,
                    slot: Some(1),
                },
                BlockSpan {
                    address: 500,
                    size: 500,
                    slot: None,
                },
                BlockSpan {
                    address: 2100,
                    size: 100,
                    slot: Some(2),
                },
            ],
        };
        let l = layout(&map, &[7, 8, 9]);
        assert_eq!(l.segments[0].allocated, vec![(0, 500)]);
        assert_eq!(l.segments[1].address, 2000);
        assert_eq!(l.segments[1].allocated, vec![(100, 100)]);
        assert_eq!(
            (l.segments[0].owners.clone(), l.segments[1].owners.clone()),
            (vec![8], vec![9])
        );
    }

    #[test]
    fn the_peak_snapshot_is_the_state_a_replay_up_to_the_peak_leaves() {
        let s = vramtrace_format::synthetic::pytorch_like(4, 3);
        let model = crate::model::Model::from_events(s.events, &s.metadata);
        let stream = &model.streams[0];
        let options = ReplayOptions {
            driver: DriverModel { capacity: u64::MAX },
            stop_after: None,
        };
        for info in crate::policy::REGISTRY {
            let spec = parse_specs(info.name).unwrap().remove(0);
            let ctx = BuildContext {
                stream,
                capacity: u64::MAX,
            };
            let mut sampler = Sampler {
                reserved: SeriesBuilder::new(Buckets::new(0, 1, 1)),
                allocated: SeriesBuilder::new(Buckets::new(0, 1, 1)),
                reserved_focus: SeriesBuilder::new(Buckets::new(0, 1, 1)),
                map: None,
                budget: SNAPSHOT_BUDGET,
                moments: vec![3, 7],
                states: Vec::new(),
                owners: Vec::new(),
                allocations: 0,
                state_budget: STATE_BLOCKS,
                last_ns: 0,
            };
            let mut policy = build(&spec, &ctx).unwrap();
            let (outcome, _) = replay(
                policy.as_mut(),
                stream.requests.iter().copied(),
                &options,
                &mut sampler,
            );
            let mut fresh = build(&spec, &ctx).unwrap();
            let again = address_map_at(
                fresh.as_mut(),
                &stream.requests,
                outcome.peak_reserved_index,
                &options,
            );
            assert!(outcome.peak_reserved > 0, "{}", info.name);
            assert_eq!(sampler.map, Some(again), "{}", info.name);
            // The states taken on the way are those a replay stopped there leaves.
            assert_eq!(sampler.states.len(), 2, "{}", info.name);
            let mut fresh = build(&spec, &ctx).unwrap();
            let at_7 = address_map_at(fresh.as_mut(), &stream.requests, 7, &options);
            assert_eq!(
                sampler.states[1].1.segments.len(),
                layout(&at_7, &owners_at(stream, 7)).segments.len(),
                "{}",
                info.name
            );
            assert_eq!(
                sampler.states[1]
                    .1
                    .segments
                    .iter()
                    .map(|s| s.owners.clone())
                    .collect::<Vec<_>>(),
                layout(&at_7, &owners_at(stream, 7))
                    .segments
                    .iter()
                    .map(|s| s.owners.clone())
                    .collect::<Vec<_>>(),
                "{}",
                info.name
            );
        }
    }

    #[test]
    fn every_policy_reserves_at_least_the_lower_bound_and_is_sampled() {
        let mut requests = Vec::new();
        for (i, size) in [(0u32, 3u64 << 20), (1, 5 << 20)] {
            requests.push(Request {
                time_ns: u64::from(i) * 10,
                ..Request::alloc(i, size, 0)
            });
        }
        requests.push(Request {
            time_ns: 30,
            ..Request::free(0, 3 << 20)
        });
        let stream = RequestStream::from_requests(requests);
        let specs = parse_specs("cuda-malloc,pytorch").unwrap();
        let buckets = Buckets::new(0, 40, 4);
        let results = replay_policies(&stream, &specs, u64::MAX, buckets, buckets).unwrap();
        assert_eq!(results.len(), 2);
        for (i, r) in results.iter().enumerate() {
            assert_eq!(r.index, i);
            assert!(r.peak_reserved.bytes >= 8 << 20, "{}", r.name);
            assert_eq!(r.reserved.max.len(), 4);
            assert!(!r.address_map.segments.is_empty());
        }
    }
}
