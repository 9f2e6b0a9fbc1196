//! The one accountant of live memory: which objects a recorded trace holds, event by event,
//! and how many bytes they count as *requested* and *reserved* (docs/definitions.md). Every
//! view of a recorded trace uses it: `record`'s closing line, `summary`, `diff`, the failure
//! sites, the Perfetto and PyTorch-snapshot exports.

use std::collections::HashMap;
use vramtrace_format::conventions::ALLOCATOR_SEGMENT;
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
    live: HashMap<(u32, bool, u64), Object>,
    handles: HashMap<(u32, u64), Object>,
    totals: HashMap<(u32, i32), Totals>,
}

impl Ledger {
    /// A ledger for `trace`, whose events are then given to [`Ledger::apply`] in file order.
    pub fn for_trace(trace: &Trace) -> Ledger {
        let tracker = trace
            .events()
            .any(|e| e.api.kind() == MemoryKind::TorchBlock);
        Ledger {
            split_levels: tracker || trace.events().any(|e| e.flags & ALLOCATOR_SEGMENT != 0),
            tracker,
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
            Op::Alloc | Op::Register => {
                let obj = self.object(e, segment);
                if let Some(old) = self.live.insert((e.pid, segment, e.address), obj) {
                    // The address was handed out again without a free we saw: the old object
                    // is gone.
                    self.account(&old, false);
                }
                self.account(&obj, true);
                Change::Alloc(obj)
            }
            Op::Free | Op::Unregister => match self.live.remove(&(e.pid, segment, e.address)) {
                Some(obj) => {
                    self.account(&obj, false);
                    Change::Free(obj)
                }
                None => Change::UnmatchedFree,
            },
            Op::Create => {
                let obj = self.object(e, segment);
                if let Some(old) = self.handles.insert((e.pid, e.handle), obj) {
                    self.account(&old, false);
                }
                self.account(&obj, true);
                Change::Alloc(obj)
            }
            Op::Release => match self.handles.remove(&(e.pid, e.handle)) {
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
        self.live.values().chain(self.handles.values())
    }
}

pub(crate) fn is_host(kind: MemoryKind) -> bool {
    matches!(kind, MemoryKind::PinnedHost | MemoryKind::RegisteredHost)
}

/// The recorded process peak of a trace: the most device memory (host memory not counted) it
/// held at once, summed over its devices, as the driver saw it.
pub fn recorded_device_peak(trace: &Trace) -> u64 {
    let mut ledger = Ledger::for_trace(trace);
    let (mut now, mut peak) = (0u64, 0u64);
    for e in trace.events() {
        match ledger.apply(&e) {
            Change::Alloc(o) if o.reserved && o.device != NO_DEVICE => now += o.size,
            Change::Free(o) if o.reserved && o.device != NO_DEVICE => {
                now = now.saturating_sub(o.size)
            }
            _ => {}
        }
        peak = peak.max(now);
    }
    peak
}
