//! The adapter from the replay engine to the sections' policy data: replays a request stream
//! through each policy, sampling reserved and allocated bytes (and so fragmentation) into the
//! report's time buckets as it goes (no per-request timeline is kept), takes the policy's address map where reserved peaked, and logs
//! its address space request by request over the section's [`EventWindow`]s ([`windows`]): the
//! state before each window and every request's changes ([`StateChange`], the difference of the
//! policy's address maps before and after it), so the page can step through the states event by
//! event. Only the replay engine keeps the accounts: the log is read off the policy through the
//! engine's [`Observer`] hook.

use super::data::{
    AddressLayout, Buckets, EventFacts, EventWindow, OomFacts, Peak, PolicyResult, SegmentLayout,
    Series, SeriesBuilder, StateChange, WindowLog,
};
use crate::model::{Request, RequestKind, RequestStream};
use crate::policy::{
    AddressMap, AddressOrder, BuildContext, Policy, PolicyError, PolicySpec, Span, build,
};
use crate::replay::{Observer, Usage, address_map_at, driver, replay_on};
use rayon::prelude::*;

/// Downsamples a replay's usage into [`Buckets`], keeps the policy's address map from the
/// moment reserved bytes peaked, so no second replay (and, for offline policies, no second plan)
/// is needed, and logs the states over the windows ([`StateLogger`]). Each new peak costs one
/// snapshot; a trace that peaks too often with too many blocks exhausts [`SNAPSHOT_BUDGET`],
/// and then the caller takes the map with [`address_map_at`] instead.
struct Sampler {
    reserved: SeriesBuilder,
    allocated: SeriesBuilder,
    /// Reserved over the focus window's finer buckets.
    reserved_focus: SeriesBuilder,
    map: Option<AddressMap>,
    budget: u64,
    /// Slot → (the allocation it holds, allocations counted in request order; its stack), kept
    /// up to date for the states' owners.
    owners: Vec<(u32, u32)>,
    allocations: u32,
    log: StateLogger,
}

/// Blocks and segments copied in peak snapshots before the [`Sampler`] gives up on them: at
/// most this, and at most two per request of the stream, about what the partial replay that
/// then takes the map costs. (A generate loop's reserved bytes peak anew at almost every cache
/// growth: with a fixed budget alone, copying and sorting maps took four fifths of a report's
/// time on a 215,000-entry snapshot.)
const SNAPSHOT_BUDGET: u64 = 20_000_000;
/// Windows of requests kept one by one besides the one around the peak, at moments spread over
/// where memory moves.
pub const STATE_MOMENTS: usize = 24;
/// Requests whose states are logged, at most, per section: a stream this short is logged
/// whole; a longer one gets half of it around the requested peak and the other half in
/// [`STATE_MOMENTS`] windows.
pub const WINDOW_EVENTS: usize = 12_000;
/// State changes all policies of a section may log together (each policy its share), so the
/// page stays a few MB however many policies are replayed.
pub const STATE_CHANGES: usize = 120_000;
/// Blocks the windows' starting states of all policies of a section may hold together.
const STATE_BLOCKS: usize = 120_000;
/// Address-map entries one policy's log may read (each logged request reads the whole map),
/// so a policy with very many live blocks stops logging early rather than slowing the report.
const STATE_WORK: u64 = 2_000_000;

/// The requests whose states the page shows one by one: the whole stream when it has at most
/// `events` requests; else half of them centred on the request at `peak_ns` (the requested
/// peak) and the rest in [`STATE_MOMENTS`] windows starting at moments spread evenly over
/// `focus` ([`moments`]); overlapping windows merged.
pub fn windows(
    stream: &RequestStream,
    focus: Buckets,
    peak_ns: u64,
    events: usize,
) -> Vec<EventWindow> {
    let r = &stream.requests;
    let n = r.len();
    let mut spans: Vec<(usize, usize)> = if n <= events {
        vec![(0, n)]
    } else {
        let half = events / 2;
        let p = r
            .partition_point(|q| q.time_ns <= peak_ns)
            .saturating_sub(1);
        let a = p.saturating_sub(half / 2).min(n - half);
        let mut v = vec![(a, a + half)];
        let each = (events - half) / STATE_MOMENTS;
        v.extend(
            moments(stream, focus)
                .into_iter()
                .map(|m| (m, (m + each).min(n))),
        );
        v.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::new();
        for (a, b) in v {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        merged
    };
    spans.retain(|(a, b)| b > a);
    // Allocation indices: allocations counted in request order.
    let mut allocation = 0u32;
    let mut by_slot = vec![u32::MAX; stream.slots as usize];
    let mut out = Vec::with_capacity(spans.len());
    let mut next = spans.iter().peekable();
    let mut current: Option<EventWindow> = None;
    for (i, q) in r.iter().enumerate() {
        let Some(&&(a, b)) = next.peek() else { break };
        let slot = q.slot as usize;
        if by_slot.len() <= slot {
            by_slot.resize(slot + 1, u32::MAX);
        }
        let owner = match q.kind {
            RequestKind::Alloc => {
                by_slot[slot] = allocation;
                allocation += 1;
                allocation - 1
            }
            RequestKind::Free => std::mem::replace(&mut by_slot[slot], u32::MAX),
            RequestKind::Attempt
            | RequestKind::EmptyCache
            | RequestKind::MemoryFraction
            | RequestKind::Order(_) => u32::MAX,
        };
        if i < a {
            continue;
        }
        let w = current.get_or_insert_with(|| EventWindow {
            first: a,
            events: Vec::with_capacity(b - a),
        });
        w.events.push(EventFacts {
            time_ns: q.time_ns,
            kind: match q.kind {
                RequestKind::Alloc => b'a',
                RequestKind::Free => b'f',
                RequestKind::Attempt => b't',
                RequestKind::EmptyCache => b'c',
                RequestKind::MemoryFraction => b'l',
                RequestKind::Order(_) => b'o',
            },
            size: q.size,
            stack: q.stack,
            allocation: owner,
        });
        if i + 1 == b {
            out.extend(current.take());
            next.next();
        }
    }
    out
}

/// The address space in the form a layout is drawn from: segments sorted by address (one per
/// address, the largest, as [`layout`] keeps them) and the handed-out blocks sorted by address.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Normal {
    segments: Vec<Span>,
    blocks: Vec<(u64, u64, u32)>,
}

fn normal(map: &AddressMap) -> Normal {
    let mut segments = map.segments.clone();
    normal_segments(&mut segments);
    let mut blocks: Vec<(u64, u64, u32)> = map
        .blocks
        .iter()
        .filter_map(|b| b.slot.map(|slot| (b.address, b.size, slot)))
        .collect();
    blocks.sort_unstable();
    Normal { segments, blocks }
}

/// Sorts `segments` by address and keeps one per address, the largest.
fn normal_segments(segments: &mut Vec<Span>) {
    segments.sort_by_key(|s| (s.address, std::cmp::Reverse(s.size)));
    segments.dedup_by_key(|s| s.address);
}

/// Whether `address` lies in one of `segments` (sorted by address, as [`normal_segments`]
/// leaves them).
fn inside(segments: &[Span], address: u64) -> bool {
    let k = segments.partition_point(|s| s.address <= address);
    k > 0 && address - segments[k - 1].address < segments[k - 1].size
}

/// A slot that holds no block.
const NO_BLOCK: (u64, u64) = (u64::MAX, 0);

/// The address space as the log last read it, kept so that the next read costs little more
/// than the map's length in sequential comparisons: the map itself in the policy's order, the
/// segments as [`normal_segments`] keeps them, and the block each slot holds (a map hands out
/// at most one per slot, [`AddressMap::blocks`]).
///
/// A request changes a few entries of a map that policies write in a stable order (by address
/// or by slot), so the maps before and after it share a long head and tail: only the entries
/// between those are looked up by slot, and segments are sorted again only when they differ.
#[derive(Default)]
struct Held {
    /// The map read last, in the policy's order.
    last: AddressMap,
    /// The map being read, filled by [`Held::fill`]; the buffers of the read before, reused.
    next: AddressMap,
    segments: Vec<Span>,
    /// Slot → (address, size) of the block handed out to it, or [`NO_BLOCK`].
    by_slot: Vec<(u64, u64)>,
    /// Slot → the read that last found a block in it, among the entries that differ.
    seen: Vec<u32>,
    reads: u32,
    /// The buffer of the segments before, reused.
    spare_segments: Vec<Span>,
}

/// How many entries `old` and `new` share at their head, and then at their tail.
fn common_ends<T: PartialEq>(old: &[T], new: &[T]) -> (usize, usize) {
    let head = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let tail = old[head..]
        .iter()
        .rev()
        .zip(new[head..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    (head, tail)
}

impl Held {
    /// Reads `policy`'s map as it is now into [`Held::next`] and returns it.
    fn fill(&mut self, policy: &dyn Policy) -> &AddressMap {
        let map = &mut self.next;
        map.segments.clear();
        map.blocks.clear();
        policy.address_map_into(map);
        map
    }

    /// Moves to the state [`Held::fill`] read last (after this, [`Held::last`]) and says what
    /// changed from the one before: removals first (segments, then blocks), then additions
    /// (segments, then blocks), each by address; added blocks named by `owners` (slot →
    /// allocation, stack). Blocks outside every segment (offline planners place blocks in no
    /// driver memory) are not drawn, so not logged.
    fn read(&mut self, owners: &[(u32, u32)]) -> Vec<StateChange> {
        self.reads += 1;
        let (old, new) = (&self.last.blocks, &self.next.blocks);
        // A slot appears at most once in each map, so one in the shared head or tail holds the
        // same block in both and appears nowhere else: only the entries between can differ.
        let (head, tail) = common_ends(old, new);
        let (mut gone, mut added) = (Vec::new(), Vec::new());
        for b in &new[head..new.len() - tail] {
            let Some(slot) = b.slot else { continue };
            let s = slot as usize;
            if self.by_slot.len() <= s {
                self.by_slot.resize(s + 1, NO_BLOCK);
                self.seen.resize(s + 1, 0);
            }
            debug_assert_ne!(
                self.seen[s], self.reads,
                "two blocks handed out to slot {slot}"
            );
            self.seen[s] = self.reads;
            let was = self.by_slot[s];
            if was != (b.address, b.size) {
                if was != NO_BLOCK {
                    gone.push((was.0, was.1, slot));
                }
                added.push((b.address, b.size, slot));
                self.by_slot[s] = (b.address, b.size);
            }
        }
        for b in &old[head..old.len() - tail] {
            let Some(slot) = b.slot else { continue };
            let s = slot as usize;
            if self.seen[s] != self.reads {
                let was = std::mem::replace(&mut self.by_slot[s], NO_BLOCK);
                gone.push((was.0, was.1, slot));
            }
        }
        // Segments change seldom (when the policy maps or unmaps driver memory): sorted again
        // only then.
        let moved = self.last.segments != self.next.segments;
        let mut segments = std::mem::take(&mut self.spare_segments);
        if moved {
            segments.clear();
            segments.extend_from_slice(&self.next.segments);
            normal_segments(&mut segments);
        }
        let now = if moved { &segments } else { &self.segments };
        gone.retain(|b| inside(&self.segments, b.0));
        added.retain(|b| inside(now, b.0));
        gone.sort_unstable();
        added.sort_unstable();
        let mut out = Vec::with_capacity(gone.len() + added.len());
        let mut new_segments = Vec::new();
        if moved {
            merge(
                &self.segments,
                &segments,
                |s| (s.address, s.size),
                |gone, s| {
                    if gone {
                        out.push(StateChange::RemoveSegment { address: s.address });
                    } else {
                        new_segments.push(StateChange::AddSegment {
                            address: s.address,
                            size: s.size,
                        });
                    }
                },
            );
            std::mem::swap(&mut self.segments, &mut segments);
        }
        self.spare_segments = segments;
        out.extend(
            gone.iter()
                .map(|&(address, ..)| StateChange::RemoveBlock { address }),
        );
        out.extend(new_segments);
        out.extend(added.iter().map(|&(address, size, slot)| {
            let (owner, stack) = owners.get(slot as usize).copied().unwrap_or((u32::MAX, 0));
            StateChange::AddBlock {
                address,
                size,
                owner,
                stack,
            }
        }));
        std::mem::swap(&mut self.last, &mut self.next);
        out
    }
}

/// Walks two lists sorted by `key`, calling `f(true, x)` for what only `old` has and
/// `f(false, x)` for what only `new` has.
fn merge<T, K: Ord>(old: &[T], new: &[T], key: impl Fn(&T) -> K, mut f: impl FnMut(bool, &T)) {
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        match (old.get(i), new.get(j)) {
            (Some(a), Some(b)) => match key(a).cmp(&key(b)) {
                std::cmp::Ordering::Equal => {
                    i += 1;
                    j += 1;
                }
                std::cmp::Ordering::Less => {
                    f(true, a);
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    f(false, b);
                    j += 1;
                }
            },
            (Some(a), None) => {
                f(true, a);
                i += 1;
            }
            (None, Some(b)) => {
                f(false, b);
                j += 1;
            }
            (None, None) => break,
        }
    }
}

/// Logs a policy's address space over the windows: the state before each and each request's
/// changes, within budgets of changes, starting-state blocks and map entries read.
struct StateLogger {
    /// (first, end) request indices of each window, increasing.
    spans: Vec<(usize, usize)>,
    /// The window being logged or next to log.
    at: usize,
    logs: Vec<WindowLog>,
    held: Held,
    changes_left: usize,
    blocks_left: usize,
    work_left: u64,
}

impl StateLogger {
    fn new(windows: &[EventWindow], changes: usize, blocks: usize) -> StateLogger {
        let mut log = StateLogger {
            spans: windows
                .iter()
                .map(|w| (w.first, w.first + w.events.len()))
                .collect(),
            at: 0,
            logs: Vec::new(),
            held: Held::default(),
            changes_left: changes,
            blocks_left: blocks,
            work_left: STATE_WORK,
        };
        // A window from the first request starts from the empty address space.
        if log.spans.first().is_some_and(|s| s.0 == 0) {
            log.logs.push(WindowLog::default());
        }
        log
    }

    /// The next request index after which the policy's state is wanted.
    fn next(&self) -> usize {
        let Some(&(first, end)) = self.spans.get(self.at) else {
            return usize::MAX;
        };
        match self.logs.last() {
            Some(l) if l.window == self.at => {
                let done = first + l.changes.len();
                if done < end { done } else { usize::MAX }
            }
            _ => first - 1,
        }
    }

    fn state(&mut self, index: usize, policy: &dyn Policy, owners: &[(u32, u32)]) {
        let map = self.held.fill(policy);
        let cost = (map.blocks.len() + map.segments.len()) as u64;
        if cost > self.work_left {
            self.spans.truncate(self.at);
            return;
        }
        self.work_left -= cost;
        let c = self.held.read(owners);
        let (first, end) = self.spans[self.at];
        if index + 1 == first {
            let key = layout(&self.held.last, owners);
            let blocks: usize = key.segments.iter().map(|s| s.allocated.len()).sum();
            if blocks > self.blocks_left {
                self.spans.truncate(self.at);
                return;
            }
            self.blocks_left -= blocks;
            self.logs.push(WindowLog {
                window: self.at,
                key,
                changes: Vec::new(),
            });
        } else {
            if c.len() > self.changes_left {
                self.spans.truncate(self.at);
                return;
            }
            self.changes_left -= c.len();
            let log = self
                .logs
                .last_mut()
                .expect("a window's log starts with its state");
            log.changes.push(c);
            // Windows are merged when they touch, so the next one starts after a gap.
            if index + 1 == end {
                self.at += 1;
            }
        }
    }
}

impl Observer for Sampler {
    #[inline]
    fn step(&mut self, _: usize, request: &Request, usage: Usage) {
        self.reserved.step(request.time_ns, usage.reserved);
        self.allocated.step(request.time_ns, usage.allocated);
        self.reserved_focus.step(request.time_ns, usage.reserved);
        let slot = request.slot as usize;
        match request.kind {
            RequestKind::Alloc => {
                if self.owners.len() <= slot {
                    self.owners.resize(slot + 1, (u32::MAX, 0));
                }
                self.owners[slot] = (self.allocations, request.stack);
                self.allocations += 1;
            }
            RequestKind::Free => {
                if let Some(o) = self.owners.get_mut(slot) {
                    *o = (u32::MAX, 0);
                }
            }
            RequestKind::Attempt
            | RequestKind::EmptyCache
            | RequestKind::MemoryFraction
            | RequestKind::Order(_) => {}
        }
    }

    #[inline]
    fn next_state(&self) -> usize {
        self.log.next()
    }

    fn state(&mut self, index: usize, policy: &dyn Policy) {
        self.log.state(index, policy, &self.owners);
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
/// for none), sampled into `buckets` and, finer, into `focus`, logging the states over
/// `windows` ([`windows`]). Results are in `specs` order; a result's `index` is its position
/// there.
pub fn replay_policies(
    stream: &RequestStream,
    specs: &[PolicySpec],
    capacity: u64,
    (buckets, focus): (Buckets, Buckets),
    windows: &[EventWindow],
) -> Result<Vec<PolicyResult>, PolicyError> {
    let colors = colors(specs);
    let n = specs.len().max(1);
    specs
        .par_iter()
        .enumerate()
        .map(|(index, spec)| {
            let log = StateLogger::new(windows, STATE_CHANGES / n, STATE_BLOCKS / n);
            let mut r = replay_one(stream, spec, index, capacity, (buckets, focus), log)?;
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
    log: StateLogger,
) -> Result<PolicyResult, PolicyError> {
    let ctx = BuildContext { stream, capacity };
    // The driver every command replays on (`replay::prepare`): the recorded addresses first.
    let start = || driver(stream, capacity, AddressOrder::Rising);
    let mut sampler = Sampler {
        reserved: SeriesBuilder::new(buckets),
        allocated: SeriesBuilder::new(buckets),
        reserved_focus: SeriesBuilder::new(focus),
        map: None,
        budget: SNAPSHOT_BUDGET.min(2 * stream.requests.len() as u64),
        owners: Vec::new(),
        allocations: 0,
        log,
    };
    let mut policy = build(spec, &ctx)?;
    let (outcome, _) = replay_on(
        policy.as_mut(),
        stream.requests.iter().copied(),
        start(),
        None,
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
                    start(),
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
        fragmentation: fragmentation(&reserved, &allocated),
        reserved,
        allocated,
        reserved_focus,
        log: std::mem::take(&mut sampler.log.logs),
        peak_reserved: Peak {
            time_ns: peak_time,
            bytes: outcome.peak_reserved,
        },
        peak_allocated: outcome.peak_allocated,
        fragmentation_at_peak: outcome.fragmentation_at_peak(),
        device_allocs: outcome.device_allocs,
        device_frees: outcome.device_frees,
        est_alloc_time_us: outcome.est_alloc_time_us,
        refused_as_recorded: outcome.refused_attempts,
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

/// Slot → (the index of the allocation it holds, allocations counted in request order as
/// [`super::trace::Instance::allocations`] are; its stack) right after request `index`.
pub fn owners_at(stream: &RequestStream, index: usize) -> Vec<(u32, u32)> {
    let mut by_slot = vec![(u32::MAX, 0); stream.slots as usize];
    let mut next = 0u32;
    for r in stream.requests.iter().take(index.saturating_add(1)) {
        let slot = r.slot as usize;
        if by_slot.len() <= slot {
            by_slot.resize(slot + 1, (u32::MAX, 0));
        }
        match r.kind {
            RequestKind::Alloc => {
                by_slot[slot] = (next, r.stack);
                next += 1;
            }
            RequestKind::Free => by_slot[slot] = (u32::MAX, 0),
            RequestKind::Attempt
            | RequestKind::EmptyCache
            | RequestKind::MemoryFraction
            | RequestKind::Order(_) => {}
        }
    }
    by_slot
}

/// Each segment with the allocated blocks inside it, as offsets, and the allocation each block
/// holds (`owners`: slot → allocation index and stack, from [`owners_at`]).
pub fn layout(map: &AddressMap, owners: &[(u32, u32)]) -> AddressLayout {
    let n = normal(map);
    let mut next = 0;
    let blocks = &n.blocks;
    AddressLayout {
        segments: n
            .segments
            .iter()
            .map(|s| {
                let end = s.address + s.size;
                while next < blocks.len() && blocks[next].0 < s.address {
                    next += 1;
                }
                let mut seg = SegmentLayout {
                    address: s.address,
                    size: s.size,
                    ..SegmentLayout::default()
                };
                while next < blocks.len() && blocks[next].0 < end {
                    let (address, size, slot) = blocks[next];
                    let (owner, stack) =
                        owners.get(slot as usize).copied().unwrap_or((u32::MAX, 0));
                    seg.allocated
                        .push((address - s.address, size.min(end - address)));
                    seg.owners.push(owner);
                    seg.stacks.push(stack);
                    next += 1;
                }
                seg
            })
            .collect(),
    }
}

/// Per bucket, 1 − allocated / reserved at its end in percent; `None` where nothing was
/// reserved.
pub fn fragmentation(reserved: &Series, allocated: &Series) -> Vec<Option<f64>> {
    reserved
        .last
        .iter()
        .zip(&allocated.last)
        .map(|(&r, &a)| (r > 0).then(|| 100.0 * (1.0 - a.min(r) as f64 / r as f64)))
        .collect()
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
        let l = layout(&map, &[(7, 0), (8, 1), (9, 2)]);
        assert_eq!(l.segments[0].allocated, vec![(0, 500)]);
        assert_eq!(l.segments[1].address, 2000);
        assert_eq!(l.segments[1].allocated, vec![(100, 100)]);
        assert_eq!(
            (l.segments[0].owners.clone(), l.segments[1].owners.clone()),
            (vec![8], vec![9])
        );
    }

    /// Segments (address, size) and blocks (address, size, owner).
    type Flat = (Vec<(u64, u64)>, Vec<(u64, u64, u32)>);

    /// The segments and blocks of a layout.
    fn flat(l: &AddressLayout) -> Flat {
        let segments = l.segments.iter().map(|s| (s.address, s.size)).collect();
        let blocks = l
            .segments
            .iter()
            .flat_map(|s| {
                s.allocated
                    .iter()
                    .zip(&s.owners)
                    .map(move |(&(o, n), &w)| (s.address + o, n, w))
            })
            .collect();
        (segments, blocks)
    }

    /// What the page does: the window's starting state with the changes applied.
    fn apply(state: &mut Flat, changes: &[StateChange]) {
        for c in changes {
            match *c {
                StateChange::AddSegment { address, size } => state.0.push((address, size)),
                StateChange::RemoveSegment { address } => state.0.retain(|s| s.0 != address),
                StateChange::AddBlock {
                    address,
                    size,
                    owner,
                    ..
                } => state.1.push((address, size, owner)),
                StateChange::RemoveBlock { address } => state.1.retain(|b| b.0 != address),
            }
        }
        state.0.sort_unstable();
        state.1.sort_unstable();
        let segments = state.0.clone();
        state
            .1
            .retain(|b| segments.iter().any(|s| b.0 >= s.0 && b.0 < s.0 + s.1));
    }

    #[test]
    fn the_logged_states_are_those_a_replay_stopped_at_each_event_leaves() {
        let s = vramtrace_format::synthetic::pytorch_like(6, 3);
        let model = crate::model::Model::from_events(s.events, &s.metadata);
        let stream = &model.streams[0];
        let n = stream.requests.len();
        let focus = Buckets::new(
            stream.requests[0].time_ns,
            stream.requests[n - 1].time_ns,
            100,
        );
        // Small windows, so the stream is cut into several with starting states.
        let ws = windows(stream, focus, stream.requests[n / 2].time_ns, n / 3);
        assert!(ws.len() > 2, "{}", ws.len());
        let names: Vec<&str> = crate::policy::REGISTRY.iter().map(|p| p.name).collect();
        let specs = crate::policy::parse_specs(&names.join(",")).unwrap();
        let results = replay_policies(stream, &specs, u64::MAX, (focus, focus), &ws).unwrap();
        for (spec, r) in specs.iter().zip(&results) {
            assert_eq!(r.log.len(), ws.len(), "{spec}");
            let ctx = BuildContext {
                stream,
                capacity: u64::MAX,
            };
            for log in &r.log {
                let w = &ws[log.window];
                assert_eq!(log.changes.len(), w.events.len(), "{spec}");
                let mut state = flat(&log.key);
                for (k, c) in log.changes.iter().enumerate() {
                    apply(&mut state, c);
                    let i = w.first + k;
                    let mut fresh = build(spec, &ctx).unwrap();
                    let start = driver(stream, u64::MAX, AddressOrder::Rising);
                    let map = address_map_at(fresh.as_mut(), &stream.requests, i, start);
                    assert_eq!(
                        state,
                        flat(&layout(&map, &owners_at(stream, i))),
                        "{spec} at {i}"
                    );
                }
            }
        }
    }

    /// What changed from `before` to `after`, read off the whole maps: segments by their
    /// normal form, blocks by the slot they are handed out to.
    fn whole_difference(
        before: &AddressMap,
        after: &AddressMap,
        owners: &[(u32, u32)],
    ) -> Vec<StateChange> {
        use std::collections::BTreeMap;
        let normal_of = |m: &AddressMap| {
            let mut v = m.segments.clone();
            normal_segments(&mut v);
            v
        };
        let by_slot = |m: &AddressMap| -> BTreeMap<u32, (u64, u64)> {
            m.blocks
                .iter()
                .filter_map(|b| b.slot.map(|s| (s, (b.address, b.size))))
                .collect()
        };
        let (s0, s1) = (normal_of(before), normal_of(after));
        let (b0, b1) = (by_slot(before), by_slot(after));
        let only = |x: &BTreeMap<u32, (u64, u64)>, y: &BTreeMap<u32, (u64, u64)>, segs: &[Span]| {
            let mut v: Vec<(u64, u64, u32)> = x
                .iter()
                .filter(|(slot, at)| y.get(slot) != Some(at) && inside(segs, at.0))
                .map(|(&slot, &(a, n))| (a, n, slot))
                .collect();
            v.sort_unstable();
            v
        };
        let mut out: Vec<StateChange> = s0
            .iter()
            .filter(|s| !s1.contains(s))
            .map(|s| StateChange::RemoveSegment { address: s.address })
            .collect();
        out.extend(
            only(&b0, &b1, &s0)
                .into_iter()
                .map(|(address, ..)| StateChange::RemoveBlock { address }),
        );
        out.extend(
            s1.iter()
                .filter(|s| !s0.contains(s))
                .map(|s| StateChange::AddSegment {
                    address: s.address,
                    size: s.size,
                }),
        );
        out.extend(
            only(&b1, &b0, &s1)
                .into_iter()
                .map(|(address, size, slot)| {
                    let (owner, stack) =
                        owners.get(slot as usize).copied().unwrap_or((u32::MAX, 0));
                    StateChange::AddBlock {
                        address,
                        size,
                        owner,
                        stack,
                    }
                }),
        );
        out
    }

    proptest::proptest! {
        /// Maps edited a few entries at a time, as requests edit them (a block added, removed,
        /// moved or resized, entries reordered, a free block, a segment mapped or unmapped):
        /// the log reads the same changes as a comparison of the whole maps gives.
        #[test]
        fn the_held_state_reads_what_a_whole_comparison_of_the_maps_gives(
            edits in proptest::collection::vec(
                proptest::collection::vec((0u8..7, 0u64..40, 0u32..12), 1..4),
                1..40,
            ),
        ) {
            let owners: Vec<(u32, u32)> = (0..12).map(|s| (100 + s, 7 * s)).collect();
            let mut held = Held::default();
            let mut map = AddressMap::default();
            for step in edits {
                let before = map.clone();
                for (op, x, slot) in step {
                    let at = (x as usize) % (map.blocks.len() + 1);
                    let taken = map.blocks.iter().any(|b| b.slot == Some(slot));
                    match op {
                        0 | 1 if !taken => map.blocks.insert(at, BlockSpan {
                            address: x * 100,
                            size: 50 + x,
                            slot: Some(slot),
                        }),
                        2 if at < map.blocks.len() => {
                            map.blocks.remove(at);
                        }
                        3 if at < map.blocks.len() => map.blocks[at].address = x * 100 + 10,
                        4 if at + 1 < map.blocks.len() => map.blocks.swap(at, at + 1),
                        5 => map.blocks.insert(at, BlockSpan {
                            address: x * 100 + 60,
                            size: 10,
                            slot: None,
                        }),
                        6 if x % 2 == 0 => map.segments.push(Span {
                            address: x * 100,
                            size: 500 + u64::from(slot),
                        }),
                        6 if !map.segments.is_empty() => {
                            map.segments.remove(x as usize % map.segments.len());
                        }
                        _ => {}
                    }
                }
                held.next = map.clone();
                let expected = whole_difference(&before, &map, &owners);
                proptest::prop_assert_eq!(held.read(&owners), expected);
                proptest::prop_assert_eq!(&held.last, &map);
            }
        }
    }

    #[test]
    fn a_short_stream_is_one_window_and_a_long_one_centres_half_on_the_peak() {
        let s = vramtrace_format::synthetic::pytorch_like(4, 3);
        let model = crate::model::Model::from_events(s.events, &s.metadata);
        let stream = &model.streams[0];
        let n = stream.requests.len();
        let focus = Buckets::new(0, u64::MAX / 2, 10);
        let one = windows(stream, focus, 0, n);
        assert_eq!((one.len(), one[0].first, one[0].events.len()), (1, 0, n));
        // Allocation indices count allocations in request order.
        let allocs = one[0].events.iter().filter(|e| e.kind == b'a');
        assert!(allocs.enumerate().all(|(k, e)| e.allocation == k as u32));
        let peak = stream.requests[n / 2].time_ns;
        let some = windows(stream, focus, peak, 100);
        let total: usize = some.iter().map(|w| w.events.len()).sum();
        assert!(total <= 100, "{total}");
        let around = some
            .iter()
            .find(|w| w.first <= n / 2 && n / 2 < w.first + w.events.len())
            .expect("a window holds the peak");
        assert!(around.events.len() >= 50);
        assert!(
            some.windows(2)
                .all(|p| p[0].first + p[0].events.len() < p[1].first)
        );
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
        let ws = windows(&stream, buckets, 10, 100);
        let results = replay_policies(&stream, &specs, u64::MAX, (buckets, buckets), &ws).unwrap();
        assert_eq!(results.len(), 2);
        for (i, r) in results.iter().enumerate() {
            assert_eq!(r.index, i);
            assert!(r.peak_reserved.bytes >= 8 << 20, "{}", r.name);
            assert_eq!(r.reserved.max.len(), 4);
            assert!(!r.address_map.segments.is_empty());
            assert_eq!(r.log[0].changes.len(), 3);
        }
    }

    #[test]
    fn fragmentation_is_the_unallocated_share_of_reserved() {
        let reserved = Series {
            max: vec![0, 100, 200],
            last: vec![0, 100, 200],
        };
        let allocated = Series {
            max: vec![0, 100, 50],
            last: vec![0, 75, 50],
        };
        assert_eq!(
            fragmentation(&reserved, &allocated),
            vec![None, Some(25.0), Some(75.0)]
        );
    }
}
