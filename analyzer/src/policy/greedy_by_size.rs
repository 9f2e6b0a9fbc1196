//! `greedy-by-size`: an offline placement that knows every lifetime in advance, what a memory
//! planner could reach.
//!
//! Follows TensorFlow Lite's `GreedyBySizeAssignment`
//! (`tensorflow/tensorflow` `tensorflow/lite/delegates/gpu/common/memory_management/
//! greedy_by_size_assignment.cc`; Pisarchyk & Lee, arXiv 2001.03288; docs/allocators.md §8):
//! records sorted by size, largest first; each goes into the smallest gap between the
//! already placed records whose lifetimes intersect its own, or after the last of them. Two
//! records conflict when their request-index intervals intersect (inclusive). Reserved memory
//! is the arena's high-water mark so far (offset + size of the records placed), one driver
//! allocation in all.
//!
//! Offline means it needs the whole stream: its memory grows with the trace, unlike the online
//! policies.

use super::driver::{Call, MAX_REQUEST};
use super::{AddressMap, BlockSpan, Device, Policy, Refused, Span};
use super::{BuildContext, KeyInfo, OptionError, Options, PolicyInfo};
use crate::model::{RequestKind, RequestStream};

pub const INFO: PolicyInfo = PolicyInfo {
    name: "greedy-by-size",
    summary: "bound: offline placement with every lifetime known (TFLite greedy by size); one arena",
    keys: &[KeyInfo {
        key: "alignment",
        default: "512",
        about: "bytes every record is rounded up to",
    }],
    build,
};

fn build(o: &Options, ctx: &BuildContext) -> Result<Box<dyn Policy>, OptionError> {
    let alignment = o.size_opt("alignment")?.unwrap_or(512);
    if alignment == 0 || alignment > 1 << 30 {
        return Err("alignment must be between 1 byte and 1 GiB".into());
    }
    Ok(Box::new(GreedyBySize::plan(ctx.stream, alignment)))
}

/// The most placement work [`plan_work`] allows a search to spend on this bound (about 8 s on
/// one core of the project's 2-core machine: 25,000 allocations all live at once, 6.25 x 10^8,
/// took 5 s in the release build).
pub const PLAN_WORK_MAX: u64 = 1 << 30;

/// An upper bound on the placement work of [`GreedyBySize::plan`] for `stream`: each record is
/// placed against the placed records whose lifetimes intersect its own, so the work grows with
/// the allocations times the most of them live at once (all live: quadratic).
pub fn plan_work(stream: &RequestStream) -> u64 {
    let (mut allocs, mut live, mut most) = (0u64, 0u64, 0u64);
    for r in &stream.requests {
        match r.kind {
            RequestKind::Alloc => {
                allocs += 1;
                live += 1;
                most = most.max(live);
            }
            RequestKind::Free => live = live.saturating_sub(1),
            RequestKind::Attempt
            | RequestKind::EmptyCache
            | RequestKind::MemoryFraction
            | RequestKind::Order(_) => {}
        }
    }
    allocs.saturating_mul(most)
}

#[derive(Debug, Clone, Copy)]
struct Record {
    size: u64,
    first: u32,
    last: u32,
}

/// The allocations of a stream in request order, so by birth, as columns: the plan holds
/// them all at once, so they are what its memory grows with (20 bytes each, the sizes kept for
/// the replay).
#[derive(Default)]
struct Records {
    size: Vec<u64>,
    first: Vec<u32>,
    last: Vec<u32>,
}

impl Records {
    fn get(&self, id: u32) -> Record {
        let i = id as usize;
        Record {
            size: self.size[i],
            first: self.first[i],
            last: self.last[i],
        }
    }
}

/// The offset of a record not placed yet.
const UNPLACED: u64 = u64::MAX;

#[derive(Debug)]
pub struct GreedyBySize {
    /// Offset of each allocation, in request order.
    offsets: Vec<u64>,
    sizes: Vec<u64>,
    arena: u64,
    next_alloc: usize,
    slot_record: Vec<u32>,
    allocated: u64,
    base: u64,
    high_water: u64,
}

impl GreedyBySize {
    /// Plans offsets for every allocation of `stream`.
    pub fn plan(stream: &RequestStream, alignment: u64) -> GreedyBySize {
        let n = stream.requests.len();
        let mut records = Records::default();
        let mut open: Vec<u32> = Vec::new();
        for (i, r) in stream.requests.iter().enumerate() {
            let slot = r.slot as usize;
            match r.kind {
                RequestKind::Alloc => {
                    if open.len() <= slot {
                        open.resize(slot + 1, u32::MAX);
                    }
                    open[slot] = records.size.len() as u32;
                    let size = r.size.clamp(1, MAX_REQUEST).next_multiple_of(alignment);
                    records.size.push(size);
                    records.first.push(i as u32);
                    records.last.push(n.saturating_sub(1) as u32);
                }
                RequestKind::Free => records.last[open[slot] as usize] = i as u32,
                // The planner knows the program survived without it.
                RequestKind::Attempt
                | RequestKind::EmptyCache
                | RequestKind::MemoryFraction
                | RequestKind::Order(_) => {}
            }
        }
        // Largest first, then by birth: records are numbered by birth, and the sort is stable.
        let mut order: Vec<u32> = (0..records.size.len() as u32).collect();
        radix_sort_by_key(&mut order, &mut Vec::new(), |&id| {
            !records.size[id as usize]
        });
        let mut offsets = vec![UNPLACED; records.size.len()];
        let mut placed = Placed::new(&records, n);
        // The placed records that meet the one being placed, as (offset, end).
        let (mut conflicts, mut scratch): (Vec<(u64, u64)>, _) = (Vec::new(), Vec::new());
        let mut arena = 0;
        for id in order {
            let r = records.get(id);
            conflicts.clear();
            placed.overlapping(&r, &records, &offsets, &mut conflicts);
            // The order of equal offsets changes nothing below: after the first of them the
            // others leave no gap.
            radix_sort_by_key(&mut conflicts, &mut scratch, |c| c.0);
            let (mut best, mut best_gap, mut prev_end) = (None, u64::MAX, 0u64);
            for &(offset, end) in &conflicts {
                if offset >= prev_end {
                    let gap = offset - prev_end;
                    if gap >= r.size && gap < best_gap {
                        best = Some(prev_end);
                        best_gap = gap;
                    }
                }
                prev_end = prev_end.max(end);
            }
            let offset = best.unwrap_or(prev_end);
            offsets[id as usize] = offset;
            arena = arena.max(offset + r.size);
            placed.insert(&r, offset);
        }
        GreedyBySize {
            sizes: records.size,
            offsets,
            arena,
            next_alloc: 0,
            slot_record: Vec::new(),
            allocated: 0,
            base: 0,
            high_water: 0,
        }
    }

    /// Bytes of the planned arena.
    pub fn arena(&self) -> u64 {
        self.arena
    }
}

/// Sorts `v` by `key`, ascending and stable (equal keys keep their order): least significant
/// digit first, one counting pass per [`DIGIT`] bits over the bits in which the keys differ only
/// (offsets are multiples of the alignment and below the arena: about 25 bits, 3 passes). The
/// conflicts of one record number in the thousands on long traces and the records in the
/// millions, where this is several times faster than a comparison sort; `scratch` is reused
/// between calls.
fn radix_sort_by_key<T: Copy>(v: &mut Vec<T>, scratch: &mut Vec<T>, key: impl Fn(&T) -> u64) {
    // Below this a comparison sort beats the passes over the counters.
    const SMALL: usize = 64;
    if v.len() < SMALL {
        v.sort_by_key(key);
        return;
    }
    let first = key(&v[0]);
    let differ = v.iter().fold(0, |d, x| d | (key(x) ^ first));
    if differ == 0 {
        return;
    }
    let (low, high) = (differ.trailing_zeros(), 64 - differ.leading_zeros());
    for shift in (low..high).step_by(DIGIT as usize) {
        let digit = |x: &T| (key(x) >> shift) as usize & ((1 << DIGIT) - 1);
        let mut at = [0u32; 1 << DIGIT];
        v.iter().for_each(|x| at[digit(x)] += 1);
        let mut sum = 0;
        for n in &mut at {
            (*n, sum) = (sum, sum + *n);
        }
        scratch.clear();
        scratch.resize(v.len(), v[0]);
        for x in v.iter() {
            let d = digit(x);
            scratch[at[d] as usize] = *x;
            at[d] += 1;
        }
        std::mem::swap(v, scratch);
    }
}

/// Bits of the key sorted per pass of [`radix_sort_by_key`]: its counters (8 KiB) stay in the
/// first-level cache.
const DIGIT: u32 = 11;

/// Time is cut into blocks of this many requests for the placed-record index.
const BLOCK: u32 = 64;

/// Placed records, queried by lifetime for the arena's spans they hold. A placement needs only
/// the union of the spans of the records that meet it (its gaps are the union's), so the index
/// keeps unions: records placed side by side merge into one span, and a query reads a few
/// merged spans where the records meeting it number in the thousands.
///
/// Time is cut into blocks of [`BLOCK`] requests, which keeps the index proportional to the
/// records, not to the trace length squared. A record covers some blocks whole and at most two
/// in part (its pieces); a record never freed lives to the end of the last block. The records
/// meeting a lifetime from block `bf` to block `bl` are exactly those that
///
/// - cover `bf` or `bl` whole: `cover`, a segment tree over blocks holding each record's span
///   at the canonical nodes of its whole blocks, read on the paths from the two leaves up;
/// - cover whole, or have a piece in, a block strictly between them: `inside`, a segment tree
///   holding each record's span at the nodes above the first of its whole blocks and above
///   each of its pieces' blocks, read at the canonical nodes of `(bf, bl)`;
/// - have a piece in `bf` or `bl` that meets the lifetime, tested exactly: a piece is its
///   record's birth (the records born in a block are a range of numbers, `born`) or its end
///   (`ends`, the records whose end is a piece, by block).
///
/// A record may be found more than once; the union does not change.
struct Placed {
    leaves: usize,
    /// Requests in the trace.
    n: usize,
    /// Last request of the time the blocks cover (a record never freed lives to it).
    end: u32,
    cover: Vec<Spans>,
    inside: Vec<Spans>,
    /// Per block `b`, the records born in it: `born[b]..born[b + 1]`.
    born: Vec<u32>,
    /// Per block `b`, the records that end in a piece of it: `ends[ends_at[b]..ends_at[b + 1]]`.
    ends_at: Vec<u32>,
    ends: Vec<u32>,
}

/// `r`'s lifetime in a trace of `n` requests, a record never freed living to `end`.
fn lifetime(r: &Record, n: usize, end: u32) -> (u32, u32) {
    // Freed by the last request or never: no lifetime begins after it.
    let to_the_end = r.last as usize + 1 >= n;
    (r.first, if to_the_end { end } else { r.last })
}

/// Disjoint spans `(start, end)` of the arena, sorted, none touching another: a union.
#[derive(Debug, Clone, Default)]
struct Spans(Vec<(u64, u64)>);

impl Spans {
    fn insert(&mut self, (start, end): (u64, u64)) {
        let v = &mut self.0;
        // The spans from `i` to `j` overlap or touch the new one: it replaces them.
        let i = v.partition_point(|s| s.1 < start);
        let j = i + v[i..].partition_point(|s| s.0 <= end);
        if i == j {
            v.insert(i, (start, end));
        } else {
            v[i] = (v[i].0.min(start), v[j - 1].1.max(end));
            v.drain(i + 1..j);
        }
    }
}

impl Placed {
    fn new(records: &Records, n: usize) -> Placed {
        let blocks = n.div_ceil(BLOCK as usize).max(1);
        let leaves = blocks.next_power_of_two();
        let end = (blocks as u64 * u64::from(BLOCK) - 1).min(u64::from(u32::MAX)) as u32;
        let mut placed = Placed {
            leaves,
            n,
            end,
            cover: vec![Spans::default(); 2 * leaves],
            inside: vec![Spans::default(); 2 * leaves],
            born: (0..=blocks as u32)
                .map(|b| records.first.partition_point(|&f| f / BLOCK < b) as u32)
                .collect(),
            ends_at: vec![0; blocks + 1],
            ends: Vec::new(),
        };
        // Counted, then placed by block (a counting sort).
        let end_piece = |id: u32| {
            let (first, last) = lifetime(&records.get(id), n, end);
            (last / BLOCK > first / BLOCK && last % BLOCK != BLOCK - 1).then_some(last / BLOCK)
        };
        let ids = 0..records.size.len() as u32;
        for block in ids.clone().filter_map(end_piece) {
            placed.ends_at[block as usize + 1] += 1;
        }
        for b in 0..blocks {
            placed.ends_at[b + 1] += placed.ends_at[b];
        }
        let mut at = placed.ends_at.clone();
        placed.ends = vec![0; at[blocks] as usize];
        for id in ids {
            if let Some(block) = end_piece(id) {
                placed.ends[at[block as usize] as usize] = id;
                at[block as usize] += 1;
            }
        }
        placed
    }

    fn lifetime(&self, r: &Record) -> (u32, u32) {
        lifetime(r, self.n, self.end)
    }

    fn insert(&mut self, r: &Record, offset: u64) {
        let span = (offset, offset + r.size);
        let (first, last) = self.lifetime(r);
        let (head, tail) = (first / BLOCK, last / BLOCK);
        // The blocks covered whole: `lo..hi`; the others of `head..=tail` hold pieces.
        let lo = head + u32::from(first % BLOCK != 0);
        let hi = tail + u32::from(last % BLOCK == BLOCK - 1);
        if lo >= hi {
            self.up(head, span);
            if tail != head {
                self.up(tail, span);
            }
            return;
        }
        if lo > head {
            self.up(head, span);
        }
        if hi <= tail {
            self.up(tail, span);
        }
        self.up(lo, span);
        let (mut a, mut b) = (lo as usize + self.leaves, hi as usize + self.leaves);
        while a < b {
            if a & 1 == 1 {
                self.cover[a].insert(span);
                a += 1;
            }
            if b & 1 == 1 {
                b -= 1;
                self.cover[b].insert(span);
            }
            a /= 2;
            b /= 2;
        }
    }

    /// Adds `span` to `inside` at `block`'s leaf and every node above it.
    fn up(&mut self, block: u32, span: (u64, u64)) {
        let mut node = block as usize + self.leaves;
        while node >= 1 {
            self.inside[node].insert(span);
            node /= 2;
        }
    }

    /// The spans of the placed records (those of `offsets` not [`UNPLACED`]) whose lifetimes
    /// intersect `r`'s: their union, some spans perhaps more than once.
    fn overlapping(
        &self,
        r: &Record,
        records: &Records,
        offsets: &[u64],
        out: &mut Vec<(u64, u64)>,
    ) {
        let (first, last) = self.lifetime(r);
        let (bf, bl) = (first / BLOCK, last / BLOCK);
        let (mut a, mut b) = (bf as usize + self.leaves, bl as usize + self.leaves);
        while a >= 1 {
            out.extend_from_slice(&self.cover[a].0);
            if b != a {
                out.extend_from_slice(&self.cover[b].0);
            }
            a /= 2;
            b /= 2;
        }
        let (mut a, mut b) = (bf as usize + 1 + self.leaves, bl as usize + self.leaves);
        while a < b {
            if a & 1 == 1 {
                out.extend_from_slice(&self.inside[a].0);
                a += 1;
            }
            if b & 1 == 1 {
                b -= 1;
                out.extend_from_slice(&self.inside[b].0);
            }
            a /= 2;
            b /= 2;
        }
        let ends = if bf == bl { &[bf][..] } else { &[bf, bl][..] };
        for &block in ends {
            let block = block as usize;
            // Numbered by birth: those of the block born after `last` are a suffix.
            let (lo, hi) = (self.born[block] as usize, self.born[block + 1] as usize);
            let hi = lo + records.first[lo..hi].partition_point(|&f| f <= last);
            let ending = &self.ends[self.ends_at[block] as usize..self.ends_at[block + 1] as usize];
            for id in (lo as u32..hi as u32).chain(ending.iter().copied()) {
                let offset = offsets[id as usize];
                if offset == UNPLACED {
                    continue;
                }
                let c = records.get(id);
                let (f, l) = self.lifetime(&c);
                if f <= last && l >= first {
                    out.push((offset, offset + c.size));
                }
            }
        }
    }
}

impl Policy for GreedyBySize {
    fn malloc(&mut self, slot: u32, _: u64, _: u32, driver: &mut Device) -> Result<(), Refused> {
        if self.next_alloc == 0 {
            driver.count_alloc(Call::Malloc, self.arena);
            self.base = driver.reserve_address(self.arena);
        }
        let record = self.next_alloc as u32;
        let end = self.offsets[record as usize] + self.sizes[record as usize];
        if end > self.high_water {
            if !driver.hold(end - self.high_water) {
                return Err(Refused);
            }
            self.high_water = end;
        }
        self.next_alloc += 1;
        let slot = slot as usize;
        if self.slot_record.len() <= slot {
            self.slot_record.resize(slot + 1, u32::MAX);
        }
        self.slot_record[slot] = record;
        self.allocated += self.sizes[record as usize];
        Ok(())
    }

    /// The plan already knows the program went on without it.
    fn attempt(&mut self, _: u32, _: u64, _: u32, _: &mut Device) -> bool {
        false
    }

    fn free(&mut self, slot: u32, _: &mut Device) {
        let record = std::mem::replace(&mut self.slot_record[slot as usize], u32::MAX);
        self.allocated -= self.sizes[record as usize];
    }

    fn allocated(&self) -> u64 {
        self.allocated
    }

    fn address_map_into(&self, map: &mut AddressMap) {
        if self.high_water > 0 {
            map.segments.push(Span {
                address: self.base,
                size: self.high_water,
            });
        }
        for (slot, &record) in self.slot_record.iter().enumerate() {
            if record != u32::MAX {
                map.blocks.push(BlockSpan {
                    address: self.base + self.offsets[record as usize],
                    size: self.sizes[record as usize],
                    slot: Some(slot as u32),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plans_work_is_the_allocations_times_the_most_live_at_once() {
        let mut requests = Vec::new();
        for slot in 0..4 {
            requests.push(Request::alloc(slot, 1024, 0));
        }
        requests.push(Request::free(0, 1024));
        requests.push(Request::alloc(4, 1024, 0));
        let stream = RequestStream::from_requests(requests);
        assert_eq!(plan_work(&stream), 5 * 4);
    }
    use crate::model::Request;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_radix_sort_orders_as_the_standard_stable_sort(
            raw in prop::collection::vec(any::<u64>(), 0..700),
            // Keys that differ in every bit, in the middle bits (offsets), in one bit.
            mask in prop_oneof![Just(u64::MAX), Just(0xff_ffff << 9), Just(1)],
        ) {
            let mut v: Vec<(u64, usize)> = raw.iter().map(|k| k & mask).zip(0..).collect();
            let mut expected = v.clone();
            expected.sort_by_key(|p| p.0);
            radix_sort_by_key(&mut v, &mut Vec::new(), |p| p.0);
            prop_assert_eq!(v, expected);
        }
    }

    /// The same plan with conflicts found by scanning every placed record: the index must
    /// change nothing.
    fn plan_by_scanning(stream: &RequestStream, alignment: u64) -> Vec<u64> {
        let g = GreedyBySize::plan(stream, alignment);
        let n = stream.requests.len();
        let mut records: Vec<Record> = Vec::new();
        let mut open = vec![0usize; stream.slots as usize];
        for (i, r) in stream.requests.iter().enumerate() {
            match r.kind {
                RequestKind::Alloc => {
                    open[r.slot as usize] = records.len();
                    records.push(Record {
                        size: r.size.clamp(1, MAX_REQUEST).next_multiple_of(alignment),
                        first: i as u32,
                        last: (n - 1) as u32,
                    });
                }
                RequestKind::Free => records[open[r.slot as usize]].last = i as u32,
                RequestKind::Attempt
                | RequestKind::EmptyCache
                | RequestKind::MemoryFraction
                | RequestKind::Order(_) => {}
            }
        }
        let mut order: Vec<usize> = (0..records.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(records[i].size), records[i].first, i));
        let mut offsets = vec![u64::MAX; records.len()];
        for &i in &order {
            let r = records[i];
            let mut conflicts: Vec<(u64, u64)> = (0..records.len())
                .filter(|&j| offsets[j] != u64::MAX)
                .filter(|&j| records[j].first <= r.last && records[j].last >= r.first)
                .map(|j| (offsets[j], records[j].size))
                .collect();
            conflicts.sort_unstable();
            let (mut best, mut best_gap, mut prev_end) = (None, u64::MAX, 0u64);
            for (offset, size) in conflicts {
                if offset >= prev_end {
                    let gap = offset - prev_end;
                    if gap >= r.size && gap < best_gap {
                        best = Some(prev_end);
                        best_gap = gap;
                    }
                }
                prev_end = prev_end.max(offset + size);
            }
            offsets[i] = best.unwrap_or(prev_end);
        }
        assert_eq!(g.offsets.len(), offsets.len());
        offsets
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn the_lifetime_index_finds_exactly_the_conflicting_records(
            ops in prop::collection::vec((any::<bool>(), 1u64..5000, any::<usize>()), 1..600),
        ) {
            let (mut live, mut free, mut next, mut requests) = (Vec::new(), Vec::new(), 0u32, Vec::new());
            for (alloc, size, pick) in ops {
                if alloc || live.is_empty() {
                    let slot = free.pop().unwrap_or_else(|| { next += 1; next - 1 });
                    live.push((slot, size));
                    requests.push(Request::alloc(slot, size, 0));
                } else {
                    let (slot, size) = live.swap_remove(pick % live.len());
                    free.push(slot);
                    requests.push(Request::free(slot, size));
                }
            }
            let stream = RequestStream::from_requests(requests);
            let g = GreedyBySize::plan(&stream, 512);
            prop_assert_eq!(g.offsets, plan_by_scanning(&stream, 512));
        }
    }

    fn stream(ops: &[(bool, u32, u64)]) -> RequestStream {
        RequestStream::from_requests(
            ops.iter()
                .map(|&(alloc, slot, size)| {
                    if alloc {
                        Request::alloc(slot, size, 0)
                    } else {
                        Request::free(slot, size)
                    }
                })
                .collect(),
        )
    }

    #[test]
    fn records_that_never_meet_share_offsets() {
        // A (4 KiB) dies before B (2 KiB) is born: both at offset 0, arena 4 KiB.
        let s = stream(&[
            (true, 0, 4096),
            (false, 0, 4096),
            (true, 0, 2048),
            (false, 0, 2048),
        ]);
        let g = GreedyBySize::plan(&s, 512);
        assert_eq!(g.offsets, vec![0, 0]);
        assert_eq!(g.arena(), 4096);
    }

    #[test]
    fn the_smallest_fitting_gap_between_conflicting_records_is_chosen() {
        // Big (8 KiB) lives throughout; C (1 KiB) and D (3 KiB) overlap each other and Big.
        let s = stream(&[
            (true, 0, 8192),
            (true, 1, 1024),
            (true, 2, 3072),
            (false, 1, 1024),
            (false, 2, 3072),
            (false, 0, 8192),
        ]);
        let g = GreedyBySize::plan(&s, 512);
        // Largest first: Big at 0, D after it at 8192, C after D at 11264.
        assert_eq!(g.offsets, vec![0, 11264, 8192]);
        assert_eq!(g.arena(), 12288);
        assert_eq!(g.arena(), s.lower_bound());
    }

    #[test]
    fn a_gap_left_by_an_earlier_record_is_reused() {
        // X (4 KiB, early) and Y (4 KiB, late) around a long-lived Z (2 KiB) placed after
        // them: X and Y share offset 0, Z goes after, then W (1 KiB) lives only with Y.
        let s = stream(&[
            (true, 0, 4096),
            (true, 1, 2048),
            (false, 0, 4096),
            (true, 0, 4096),
            (true, 2, 1024),
            (false, 0, 4096),
            (false, 1, 2048),
            (false, 2, 1024),
        ]);
        let g = GreedyBySize::plan(&s, 512);
        assert_eq!(g.offsets, vec![0, 4096, 0, 6144]);
        assert_eq!(g.arena(), 7168);
    }
}
