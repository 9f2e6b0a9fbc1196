//! The summary's one reading of a trace's changes in call order ([`Stepper`]): the rows' walk
//! ([`AllocationTable::walk`](crate::model::table::AllocationTable::walk)) and a pass that keeps
//! no row ([`crate::model::StepPass`]) hand it the same steps, so both summaries are this loop.
//!
//! The stacks at a group's peak are kept without the live set at the peak: what changed since
//! (per stack, the bytes and objects born less those ended) is counted from the peak on, and
//! the live set at the peak is the live set at the end less those changes
//! ([`GroupAcc::stacks_at_peak`]); a new peak starts the count again.

use super::{SIZE_CLASSES, size_class};
use crate::driver_count::DriverCounts;
use crate::failures::{FailureSites, device_of};
use crate::model::table::{DriverCountEvent, Moment, Object, Step, Stepper, Totals};
use crate::symbolize::StackNames;
use std::collections::{BTreeMap, HashMap};
use vramtrace_format::MemoryKind;
use vramtrace_format::conventions::ALLOCATOR_SEGMENT;

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

#[cfg(test)]
mod tests {
    use crate::model::load;
    use crate::summary::Summary;
    use crate::symbolize::NoFiles;
    use proptest::prelude::*;
    use vramtrace_format::conventions::ALLOCATOR_SEGMENT;
    use vramtrace_format::{Api, Event, Metadata, PythonFrame, Stack, Tables, Trace};

    /// Stacks 1 to 4, each of one Python line of its own.
    fn tables() -> Tables {
        let frame = |id: u32| PythonFrame {
            id,
            file: "train.py".into(),
            function: "step".into(),
            line: id,
            module: String::new(),
        };
        Tables {
            python_frames: (1..=4).map(frame).collect(),
            stacks: (1..=4)
                .map(|id| Stack {
                    id,
                    frames: vec![id],
                })
                .collect(),
            ..Tables::default()
        }
    }

    fn trace(events: &[Event]) -> Trace {
        Trace::in_memory(Metadata::default(), tables(), events)
    }

    /// The summary from the rows, and the one from a pass that keeps none.
    fn both(events: &[Event]) -> (Summary, Summary) {
        let trace = trace(events);
        let (model, table) = load(&trace);
        let rows = Summary::with_table(&trace.tables, &table, &model, 10, &mut NoFiles);
        let streamed = Summary::streamed(&trace.tables, &table, &model, 10, &mut NoFiles, |each| {
            trace.events().for_each(|e| each(&e));
            Ok::<_, ()>(())
        });
        (rows, streamed.unwrap())
    }

    fn alloc(t: u64, address: u64, size: u64, stack: u32) -> Event {
        Event {
            pid: 1,
            time_ns: t,
            address,
            size,
            stack,
            ..Event::new(Api::CuMemAlloc_v2)
        }
    }

    fn free(t: u64, address: u64) -> Event {
        Event {
            pid: 1,
            time_ns: t,
            address,
            ..Event::new(Api::CuMemFree_v2)
        }
    }

    #[test]
    fn the_stacks_at_the_peak_are_those_live_then_not_those_live_at_the_end() {
        let events = [
            alloc(1, 0x1000, 100, 1),
            alloc(2, 0x2000, 50, 2),
            // The peak, 250 bytes: stack 1 holds 100, stack 2 50, stack 3 100.
            alloc(3, 0x3000, 100, 3),
            free(4, 0x3000),
            free(5, 0x1000),
            alloc(6, 0x4000, 40, 4),
            // 0x2000 taken again without a free: stack 2's 50 bytes end here.
            alloc(7, 0x2000, 60, 4),
        ];
        let (rows, streamed) = both(&events);
        assert_eq!(rows, streamed);
        let g = &streamed.groups[0];
        assert_eq!((g.peak_requested, g.peak_requested_time_ns), (250, 3));
        let at_peak: Vec<(u64, u64)> = g
            .top_stacks_at_peak
            .iter()
            .map(|s| (s.bytes, s.count))
            .collect();
        assert_eq!(at_peak, [(100, 1), (100, 1), (50, 1)]);
        assert_eq!(g.top_stacks_at_peak[2].site, "train.py:2 step");
        assert_eq!((g.leaks.bytes, g.leaks.count), (100, 2));
    }

    /// One event of a small trace: allocations and frees on a few addresses and handles (so
    /// that some are taken again without a free and some frees match nothing), failed calls,
    /// host memory, the driver's counts, an imported snapshot's segments and PyTorch's tracker
    /// blocks, in two processes.
    fn event() -> impl Strategy<Value = Event> {
        let apis = prop_oneof![
            4 => Just(Api::CuMemAlloc_v2),
            4 => Just(Api::CuMemFree_v2),
            1 => Just(Api::CuMemHostAlloc),
            1 => Just(Api::CuMemCreate),
            1 => Just(Api::CuMemRelease),
            1 => Just(Api::DriverProcessMemory),
            1 => Just(Api::TorchAlloc),
            1 => Just(Api::TorchFreeCompleted),
        ];
        (
            apis,
            1u32..=2,
            0u64..6,
            0u64..5,
            0u32..=4,
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.05),
        )
            .prop_map(|(api, pid, slot, size, stack, failed, segment)| Event {
                pid,
                address: 0x1000 * (slot + 1),
                handle: slot + 1,
                size: size << 20,
                stack,
                result: if failed { 2 } else { 0 },
                flags: if segment { ALLOCATOR_SEGMENT } else { 0 },
                ..Event::new(api)
            })
    }

    proptest! {
        #[test]
        fn a_pass_without_rows_summarises_as_the_rows_do(
            mut events in prop::collection::vec(event(), 0..120)
        ) {
            for (t, e) in (1..).zip(events.iter_mut()) {
                e.time_ns = t;
            }
            let (rows, streamed) = both(&events);
            prop_assert_eq!(rows, streamed);
        }
    }
}
