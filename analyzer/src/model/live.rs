//! The one accountant of live memory: which objects a recorded trace holds, event by event,
//! and how many bytes they count as *requested* and *reserved* (docs/definitions.md). Every
//! view of a recorded trace uses it: `record`'s closing line, `summary`, `diff`, the failure
//! sites, the Perfetto and PyTorch-snapshot exports.

use super::lifetimes::ObjectKey;
use crate::sums::Live;
use std::collections::HashMap;
use vramtrace_format::conventions::ALLOCATOR_SEGMENT;

/// The hasher of the ledger's maps (three lookups per event): fast, and seeded at random as the
/// model's, so that a crafted trace cannot aim at collisions.
type Hasher = foldhash::fast::RandomState;
use vramtrace_format::{Event, MemoryKind, NO_DEVICE, Op, Trace};

/// One live allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Object {
    pub pid: u32,
    pub device: i32,
    pub kind: MemoryKind,
    pub address: u64,
    pub size: u64,
    pub stack: u32,
    pub stream: u64,
    pub time_ns: u64,
    /// An allocator segment of an imported PyTorch snapshot rather than a program request.
    pub segment: bool,
    pub requested: bool,
    pub reserved: bool,
}

impl Object {
    /// Its stack and bytes, what [`crate::symbolize::top_stacks`] counts.
    pub fn stack_bytes(&self) -> (u32, u64) {
        (self.stack, self.size)
    }
}

/// What one event did to live memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing that holds memory (address reservations, mappings, pool settings).
    None,
    Alloc(Object),
    Free(Object),
    /// A call that returned an error: it created and ended nothing.
    Failed,
    /// A free of an address (or handle) the trace never saw allocated, for example memory
    /// allocated before recording began.
    UnmatchedFree,
}

/// Per-(process, device) running totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub requested: u64,
    pub reserved: u64,
}

/// Live memory, event by event: which objects exist and how many bytes they hold.
///
/// Accounting rules, the same in every command:
/// - Device memory (`cuMemAlloc*`, managed, stream-ordered pools, arrays, graph allocations,
///   and VMM physical handles from `cuMemCreate`) and pinned or registered host memory (device
///   [`NO_DEVICE`]) count; memory opened from another process or API (IPC, external,
///   multicast) is listed by kind but counts in neither total, since another owner holds it.
/// - In a recorded trace every counted byte is both *requested* and *reserved*: the driver saw
///   exactly what the program asked for (under a caching allocator those "requests" are its
///   segments, which `capture_level` says).
/// - In an imported PyTorch snapshot the program's requests and the allocator's segments are
///   both present; segments (events flagged [`ALLOCATOR_SEGMENT`]) count only as reserved and
///   requests only as requested.
/// - A trace recorded with PyTorch's tracker is split the same way: `torch.alloc` blocks are
///   the requests, the driver calls what the process reserved (PyTorch's segments and memory
///   taken past PyTorch); `torch.segment_*` events repeat those driver calls and count in
///   neither.
#[derive(Debug, Default)]
pub struct Ledger {
    split_levels: bool,
    /// The requests come from PyTorch's tracker (`torch.alloc` events).
    tracker: bool,
    live: HashMap<ObjectKey, Object, Hasher>,
    totals: HashMap<(u32, i32), Totals, Hasher>,
}

impl Ledger {
    /// A ledger for `trace`, whose events are then given to [`Ledger::apply`] in file order.
    pub fn for_trace(trace: &Trace) -> Ledger {
        let tracker = trace.events().any(|e| Shape::Tracker.shown_by(&e));
        let snapshot = trace.events().any(|e| Shape::Snapshot.shown_by(&e));
        Ledger::of_shape(Shape::of(tracker, snapshot))
    }

    /// A ledger for a trace of the given [`Shape`].
    fn of_shape(shape: Shape) -> Ledger {
        Ledger {
            split_levels: shape != Shape::Plain,
            tracker: shape == Shape::Tracker,
            ..Ledger::default()
        }
    }

    /// True when the trace carries both request and allocator-segment events.
    pub fn split_levels(&self) -> bool {
        self.split_levels
    }

    pub fn apply(&mut self, e: &Event) -> Change {
        let op = e.api.op();
        if e.api.kind() == MemoryKind::TorchSegment {
            return Change::None;
        }
        let segment = if self.tracker {
            !e.api.from_framework()
        } else {
            e.flags & ALLOCATOR_SEGMENT != 0
        };
        if !e.succeeded() {
            return if matches!(op, Op::Alloc | Op::Create | Op::Register) {
                Change::Failed
            } else {
                Change::None
            };
        }
        match op {
            Op::Alloc | Op::Register | Op::Create => {
                let obj = self.object(e, segment);
                if let Some(old) = self.live.insert(ObjectKey::of(e), obj) {
                    // The address (or handle) was handed out again without a free we saw: the
                    // old object is gone.
                    self.account(&old, false);
                }
                self.account(&obj, true);
                Change::Alloc(obj)
            }
            Op::Free | Op::Unregister | Op::Release => match self.live.remove(&ObjectKey::of(e)) {
                Some(obj) => {
                    self.account(&obj, false);
                    Change::Free(obj)
                }
                None => Change::UnmatchedFree,
            },
            _ => Change::None,
        }
    }

    fn object(&self, e: &Event, segment: bool) -> Object {
        let kind = e.api.kind();
        let counted = !matches!(
            kind,
            MemoryKind::Ipc | MemoryKind::External | MemoryKind::Multicast
        );
        Object {
            pid: e.pid,
            device: if is_host(kind) { NO_DEVICE } else { e.device },
            kind,
            address: if e.api.op() == Op::Create {
                e.handle
            } else {
                e.address
            },
            size: e.size,
            stack: e.stack,
            stream: e.stream,
            time_ns: e.time_ns,
            segment,
            requested: counted && !(self.split_levels && segment),
            reserved: counted && (!self.split_levels || segment),
        }
    }

    fn account(&mut self, o: &Object, add: bool) {
        let t = self.totals.entry((o.pid, o.device)).or_default();
        let apply = |v: &mut u64, on: bool| {
            if on {
                *v = if add {
                    v.saturating_add(o.size)
                } else {
                    v.saturating_sub(o.size)
                };
            }
        };
        apply(&mut t.requested, o.requested);
        apply(&mut t.reserved, o.reserved);
    }

    /// Running totals of one process and device.
    pub fn totals(&self, pid: u32, device: i32) -> Totals {
        self.totals.get(&(pid, device)).copied().unwrap_or_default()
    }

    /// Every live object, in no particular order.
    pub fn live(&self) -> impl Iterator<Item = &Object> {
        self.live.values()
    }
}

pub(crate) fn is_host(kind: MemoryKind) -> bool {
    matches!(kind, MemoryKind::PinnedHost | MemoryKind::RegisteredHost)
}

/// Which request and segment events a trace holds: what the [`Ledger`]'s rules split on,
/// known only from all of its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Driver calls only: every counted byte is requested and reserved.
    Plain,
    /// An imported PyTorch snapshot: requests beside segment events ([`ALLOCATOR_SEGMENT`]).
    Snapshot,
    /// PyTorch's tracker: `torch.alloc` requests beside the driver calls.
    Tracker,
}

impl Shape {
    const ALL: [Shape; 3] = [Shape::Plain, Shape::Snapshot, Shape::Tracker];

    fn of(tracker: bool, snapshot: bool) -> Shape {
        match (tracker, snapshot) {
            (true, _) => Shape::Tracker,
            (false, true) => Shape::Snapshot,
            (false, false) => Shape::Plain,
        }
    }

    /// Whether `e` shows that a trace has this shape.
    fn shown_by(self, e: &Event) -> bool {
        match self {
            Shape::Plain => false,
            Shape::Snapshot => e.flags & ALLOCATOR_SEGMENT != 0,
            Shape::Tracker => e.api.kind() == MemoryKind::TorchBlock,
        }
    }
}

/// The recorded process peak, one event at a time: the most device memory (host memory not
/// counted) the trace's processes held at once, summed over their devices, as the driver saw
/// it (the [`Ledger`]'s *reserved*).
///
/// For callers that stream the events once: the ledger's rules depend on the trace's
/// [`Shape`], which only its whole event list shows, so the peak is kept under each of the
/// three shapes and the one the events showed is answered.
#[derive(Debug)]
pub struct DevicePeak {
    ledgers: [Ledger; 3],
    now: [Live; 3],
    peak: [u64; 3],
    tracker: bool,
    snapshot: bool,
}

impl Default for DevicePeak {
    fn default() -> DevicePeak {
        DevicePeak {
            ledgers: Shape::ALL.map(Ledger::of_shape),
            now: [Live::default(); 3],
            peak: [0; 3],
            tracker: false,
            snapshot: false,
        }
    }
}

impl DevicePeak {
    /// Takes the next event in file order.
    pub fn see(&mut self, e: &Event) {
        self.tracker |= Shape::Tracker.shown_by(e);
        self.snapshot |= Shape::Snapshot.shown_by(e);
        for (i, ledger) in self.ledgers.iter_mut().enumerate() {
            let now = &mut self.now[i];
            match ledger.apply(e) {
                Change::Alloc(o) if o.reserved && o.device != NO_DEVICE => now.add(o.size),
                Change::Free(o) if o.reserved && o.device != NO_DEVICE => now.sub(o.size),
                _ => {}
            }
            self.peak[i] = self.peak[i].max(now.bytes());
        }
    }

    /// The peak of the events seen so far, under the shape they showed.
    pub fn peak(&self) -> u64 {
        // `Shape::ALL` lists the shapes in declaration order.
        self.peak[Shape::of(self.tracker, self.snapshot) as usize]
    }
}

/// The recorded process peak of a trace ([`DevicePeak`]).
pub fn recorded_device_peak(trace: &Trace) -> u64 {
    let mut peak = DevicePeak::default();
    for e in trace.events() {
        peak.see(&e);
    }
    peak.peak()
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramtrace_format::Api;

    fn ev(api: Api, address: u64, size: u64, flags: u64) -> Event {
        Event {
            pid: 1,
            device: 0,
            address,
            size,
            flags,
            ..Event::new(api)
        }
    }

    fn peak(events: &[Event]) -> u64 {
        let mut p = DevicePeak::default();
        events.iter().for_each(|e| p.see(e));
        p.peak()
    }

    #[test]
    fn the_device_peak_counts_what_the_driver_held_whatever_the_traces_shape() {
        const MIB: u64 = 1 << 20;
        // Driver calls only: every allocation counts.
        let plain = [
            ev(Api::CuMemAlloc_v2, 0x1000, 20 * MIB, 0),
            ev(Api::CuMemAllocAsync, 0x9000, 4 * MIB, 0),
            ev(Api::CuMemFree_v2, 0x1000, 0, 0),
            ev(Api::CuMemAllocHost_v2, 0x5000, 64 * MIB, 0),
        ];
        assert_eq!(peak(&plain), 24 * MIB);
        // An imported snapshot: the segment reserved, the request inside it not again.
        let snapshot = [
            ev(Api::CuMemAlloc_v2, 0x1000, 20 * MIB, ALLOCATOR_SEGMENT),
            ev(Api::CuMemAllocAsync, 0x1000, 3 * MIB, 0),
        ];
        assert_eq!(peak(&snapshot), 20 * MIB);
        // PyTorch's tracker: the segment's driver call counts; the tensor at its address and
        // the tracker's own word on the segment do not count again.
        let tracker = [
            ev(Api::CuMemAlloc_v2, 0x1000, 20 * MIB, 0),
            ev(Api::TorchSegmentAlloc, 0x1000, 20 * MIB, 0),
            ev(Api::TorchAlloc, 0x1000, 3 * MIB, 0),
            ev(Api::TorchFreeCompleted, 0x1000, 3 * MIB, 0),
            ev(Api::CuMemAlloc_v2, 0x8000_0000, 2 * MIB, 0),
        ];
        assert_eq!(peak(&tracker), 22 * MIB);
    }
}
