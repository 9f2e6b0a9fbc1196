//! The summary's one reading of a trace's changes in call order ([`Stepper`]): the rows' walk
//! ([`AllocationTable::walk`](crate::model::table::AllocationTable::walk)) and a pass that keeps
//! no row ([`crate::model::StepPass`]) hand it the same steps, so both summaries are this loop.
//!
//! The stacks at a group's peak are kept without the live set at the peak: what changed since
//! (per stack, the bytes and objects born less those ended) is counted from the peak on, and
//! the live set at the peak is the live set at the end less those changes
//! ([`GroupAcc::stacks_at_peak`]); a new peak starts the count again.

use crate::driver_count::DriverCounts;
use crate::failures::{FailureSites, device_of};
use crate::model::table::{DriverCountEvent, Moment, Object, Step, Stepper, Totals};
use crate::symbolize::StackNames;
use std::collections::{BTreeMap, HashMap};
use vramtrace_format::MemoryKind;
use vramtrace_format::conventions::ALLOCATOR_SEGMENT;

/// Size classes in steps of 16×, from the small-block pool of caching allocators up.
pub const SIZE_CLASSES: [(u64, &str); 7] = [
    (0, "< 4 KiB"),
    (4 << 10, "4 KiB – 64 KiB"),
    (64 << 10, "64 KiB – 1 MiB"),
    (1 << 20, "1 MiB – 16 MiB"),
    (16 << 20, "16 MiB – 256 MiB"),
    (256 << 20, "256 MiB – 4 GiB"),
    (4 << 30, "≥ 4 GiB"),
];

/// The index in [`SIZE_CLASSES`] of an object of `size` bytes.
fn size_class(size: u64) -> usize {
    SIZE_CLASSES.partition_point(|&(min, _)| min <= size) - 1
}

/// The hasher of the changes since a peak (one lookup per requested step).
type Hasher = foldhash::fast::RandomState;

/// What the walk has counted so far, per (process, device) and for the whole trace.
pub(super) struct Tally<'n, 'a, 'f> {
    pub groups: BTreeMap<(u32, i32), GroupAcc>,
    pub failures: FailureSites<'n, 'a, 'f>,
    pub driver_counts: DriverCounts,
}

#[derive(Default)]
pub(super) struct GroupAcc {
    pub peak: Totals,
    pub peak_time: (u64, u64),
    pub allocations: u64,
    pub frees: u64,
    pub failed: u64,
    pub kinds: BTreeMap<(MemoryKind, bool), KindAcc>,
    pub streams: BTreeMap<u64, (u64, u64, u64)>,
    since_peak: SincePeak,
}

#[derive(Default)]
pub(super) struct KindAcc {
    pub live: u64,
    pub peak: u64,
    pub allocations: u64,
    pub frees: u64,
    pub failed: u64,
    pub bytes: u64,
    pub classes: [(u64, u64); SIZE_CLASSES.len()],
}

/// The requested objects born and ended since the group's peak, per stack: bytes and objects
/// born less those ended. Entries of an earlier peak's count (`generation`) count as nothing,
/// so that a new peak starts the count again in one step whatever the stacks seen.
#[derive(Default)]
struct SincePeak {
    generation: u64,
    by_stack: HashMap<u32, (u64, i128, i64), Hasher>,
}

impl SincePeak {
    fn change(&mut self, o: &Object, born: bool) {
        let generation = self.generation;
        let e = self.by_stack.entry(o.stack).or_insert((generation, 0, 0));
        if e.0 != generation {
            *e = (generation, 0, 0);
        }
        let (bytes, count) = (i128::from(o.size), if born { 1 } else { -1 });
        e.1 += if born { bytes } else { -bytes };
        e.2 += count;
    }

    fn restart(&mut self) {
        self.generation += 1;
    }

    /// The count since the peak, per stack.
    fn since(&self) -> impl Iterator<Item = (u32, i128, i64)> + '_ {
        self.by_stack
            .iter()
            .filter(|(_, e)| e.0 == self.generation)
            .map(|(&stack, &(_, bytes, count))| (stack, bytes, count))
    }
}

impl<'n, 'a, 'f> Tally<'n, 'a, 'f> {
    /// Nothing counted yet, of a trace whose first event was at `start_ns`; `names` names the
    /// failed calls' stacks.
    pub fn new(names: &'n StackNames<'a, 'f>, start_ns: u64) -> Tally<'n, 'a, 'f> {
        Tally {
            groups: BTreeMap::new(),
            failures: FailureSites::new(names, start_ns),
            driver_counts: DriverCounts::default(),
        }
    }
}

impl GroupAcc {
    /// The group's requested objects live at its peak, per stack: bytes (summed, saturating,
    /// as [`crate::symbolize::top_stacks`] sums them) and objects, from `live_at_end`, those
    /// live when the trace ended.
    pub fn stacks_at_peak(&self, live_at_end: &[Object]) -> Vec<(u32, (u64, u64))> {
        let mut by: HashMap<u32, (i128, i64), Hasher> = HashMap::default();
        for o in live_at_end {
            let e = by.entry(o.stack).or_default();
            e.0 += i128::from(o.size);
            e.1 += 1;
        }
        // What was born since the peak was not live then, and what ended since was.
        for (stack, bytes, count) in self.since_peak.since() {
            let e = by.entry(stack).or_default();
            e.0 -= bytes;
            e.1 -= count;
        }
        by.into_iter()
            .filter(|&(_, (_, count))| count > 0)
            .map(|(stack, (bytes, count))| {
                let bytes = u64::try_from(bytes.max(0)).unwrap_or(u64::MAX);
                (stack, (bytes, count as u64))
            })
            .collect()
    }
}

impl Stepper for Tally<'_, '_, '_> {
    fn step(&mut self, step: Step<'_>, now: &dyn Moment) {
        let time_ns = step.time_ns();
        let (obj, alloc) = match step {
            Step::Alloc { object, .. } => (object, true),
            Step::Free { object, .. } => (object, false),
            Step::Replaced { object, .. } => {
                if let Some(g) = self.groups.get_mut(&(object.pid, object.device))
                    && object.requested
                {
                    g.since_peak.change(&object, false);
                }
                return;
            }
            Step::Failed(f) => {
                self.failures.step(step, now);
                let e = &f.event;
                let kind = e.api.kind();
                let device = device_of(e);
                let g = self.groups.entry((e.pid, device)).or_default();
                g.failed += 1;
                g.kinds
                    .entry((kind, e.flags & ALLOCATOR_SEGMENT != 0))
                    .or_default()
                    .failed += 1;
                return;
            }
        };
        let g = self.groups.entry((obj.pid, obj.device)).or_default();
        let k = g.kinds.entry((obj.kind, obj.segment)).or_default();
        if alloc {
            g.allocations += u64::from(obj.requested);
            k.allocations += 1;
            k.bytes = k.bytes.saturating_add(obj.size);
            k.live = k.live.saturating_add(obj.size);
            k.peak = k.peak.max(k.live);
            let c = &mut k.classes[size_class(obj.size)];
            c.0 += 1;
            c.1 = c.1.saturating_add(obj.size);
        } else {
            g.frees += u64::from(obj.requested);
            k.frees += 1;
            k.live = k.live.saturating_sub(obj.size);
        }
        if obj.requested {
            let s = g.streams.entry(obj.stream).or_default();
            if alloc {
                s.0 = s.0.saturating_add(obj.size);
                s.1 = s.1.max(s.0);
                s.2 += 1;
            } else {
                s.0 = s.0.saturating_sub(obj.size);
            }
            g.since_peak.change(&obj, alloc);
        }
        let t = now.totals(obj.pid, obj.device);
        if t.requested > g.peak.requested {
            g.peak.requested = t.requested;
            g.peak_time.0 = time_ns;
            g.since_peak.restart();
        }
        if t.reserved > g.peak.reserved {
            g.peak.reserved = t.reserved;
            g.peak_time.1 = time_ns;
        }
    }

    fn counted(&mut self, c: &DriverCountEvent, now: &dyn Moment) {
        self.driver_counts.counted(c, now);
    }
}
