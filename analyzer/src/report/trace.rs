//! The device-memory allocations of each allocator instance (process × device), with their
//! lifetimes and the order in which they were made and freed.
//!
//! Sans-IO, and derived from the replay model's request streams rather than from a second pass
//! over the events, so the report sees exactly the allocations `vramtrace replay` replays and
//! shows the same lower bound (`model/from_events.rs` decides what is device memory, how frees are
//! matched and what failed calls and unmatched frees do).

use crate::model::table::AllocationTable;
use crate::model::{Loader, Model, Outside, RequestKind, RequestStream};
use vramtrace_format::Layout;

/// `death_ns` of an allocation still live when the trace ends.
pub const NEVER: u64 = u64::MAX;

/// One device allocation from birth to death.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    pub size: u64,
    pub birth_ns: u64,
    /// [`NEVER`] while still live at the end.
    pub death_ns: u64,
    pub stack: u32,
    /// Index into the request stream's CUDA streams.
    pub stream: u32,
    /// Index in [`Instance::steps`] of its allocation.
    pub birth_step: u32,
    /// Index of its free, or `u32::MAX`.
    pub death_step: u32,
}

/// An allocation or a free, in call order; its time is its allocation's birth or death
/// ([`Instance::time_ns`]), not held twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Index in [`Instance::allocations`], with [`Step::FREE`] set for a free.
    tagged: u32,
}

impl Step {
    const FREE: u32 = 1 << 31;

    pub fn allocation(&self) -> usize {
        (self.tagged & !Self::FREE) as usize
    }

    pub fn is_free(&self) -> bool {
        self.tagged & Self::FREE != 0
    }
}

/// The device memory of one process on one device.
#[derive(Debug, Clone, Default)]
pub struct Instance {
    pub pid: u32,
    pub device: i32,
    pub allocations: Vec<Allocation>,
    pub steps: Vec<Step>,
    /// Plain driver allocations beside a stream-ordered pool, which the model sets aside.
    pub outside: Outside,
    /// Allocations the driver refused and the program survived, in call order.
    pub refused: Vec<Refusal>,
}

/// An allocation the real driver refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub time_ns: u64,
    pub size: u64,
    pub stack: u32,
}

impl Instance {
    /// The time of `step`: its allocation's birth, or for a free its death.
    #[inline]
    pub fn time_ns(&self, step: Step) -> u64 {
        let a = &self.allocations[step.allocation()];
        if step.is_free() {
            a.death_ns
        } else {
            a.birth_ns
        }
    }
}

/// What the pass found.
#[derive(Debug, Clone, Default)]
pub struct TracePass {
    /// In (pid, device) order.
    pub instances: Vec<Instance>,
    pub first_ns: u64,
    pub last_ns: u64,
    pub events: u64,
    pub failed_calls: u64,
    pub unmatched_frees: u64,
}

impl TracePass {
    /// The instances of `model`'s request streams, timed by the trace's chunk index (`layout`),
    /// with the events, failed calls and unmatched frees of its allocation table.
    pub fn new(layout: &Layout, model: &Model, table: &AllocationTable) -> TracePass {
        let chunks = layout.chunks.iter().filter(|c| c.event_count > 0);
        let first_ns = chunks.clone().map(|c| c.first_time_ns).min().unwrap_or(0);
        let last_ns = chunks.map(|c| c.last_time_ns).max().unwrap_or(0);
        TracePass {
            instances: model.streams.iter().map(instance).collect(),
            first_ns,
            last_ns: last_ns.max(first_ns),
            events: table.events,
            failed_calls: table.failed_calls,
            unmatched_frees: table.unmatched_frees,
        }
    }

    /// From events in call order (tests and callers without a file).
    pub fn from_events(events: Vec<vramtrace_format::Event>) -> TracePass {
        let first_ns = events.iter().map(|e| e.time_ns).min().unwrap_or(0);
        let last_ns = events.iter().map(|e| e.time_ns).max().unwrap_or(0);
        let n = events.len() as u64;
        let mut loader = Loader::requests_only();
        events.iter().for_each(|e| loader.push(e));
        let (model, table) = loader.finish(&vramtrace_format::Metadata::default());
        TracePass {
            instances: model.streams.iter().map(instance).collect(),
            first_ns,
            last_ns,
            events: n,
            failed_calls: table.failed_calls,
            unmatched_frees: table.unmatched_frees,
        }
    }

    pub fn allocations(&self) -> u64 {
        self.instances
            .iter()
            .map(|i| i.allocations.len() as u64)
            .sum()
    }
}

/// Allocations and steps of one request stream: a request's slot names the allocation it made
/// until that allocation is freed.
fn instance(stream: &RequestStream) -> Instance {
    let key = stream.key;
    // Counted first, so that neither vector outgrows what it holds (a doubling would leave
    // up to half of the largest structure of the report unused).
    let allocations = stream
        .requests
        .iter()
        .filter(|r| r.kind == RequestKind::Alloc)
        .count();
    let frees = stream
        .requests
        .iter()
        .filter(|r| r.kind == RequestKind::Free)
        .count();
    let mut inst = Instance {
        pid: key.map_or(0, |k| k.pid),
        device: key.map_or(-1, |k| k.device),
        allocations: Vec::with_capacity(allocations),
        steps: Vec::with_capacity(allocations + frees),
        outside: stream.outside,
        refused: Vec::new(),
    };
    let mut by_slot: Vec<u32> = vec![u32::MAX; stream.slots as usize];
    for r in &stream.requests {
        let step = inst.steps.len() as u32;
        let slot = r.slot as usize;
        if by_slot.len() <= slot {
            by_slot.resize(slot + 1, u32::MAX);
        }
        match r.kind {
            RequestKind::Alloc => {
                let index = inst.allocations.len() as u32;
                inst.allocations.push(Allocation {
                    size: r.size,
                    birth_ns: r.time_ns,
                    death_ns: NEVER,
                    stack: r.stack,
                    stream: r.stream,
                    birth_step: step,
                    death_step: u32::MAX,
                });
                by_slot[slot] = index;
                inst.steps.push(Step { tagged: index });
            }
            // A refused allocation the program survived holds nothing.
            RequestKind::Attempt => inst.refused.push(Refusal {
                time_ns: r.time_ns,
                size: r.size,
                stack: r.stack,
            }),
            RequestKind::EmptyCache | RequestKind::MemoryFraction | RequestKind::Order(_) => {}
            RequestKind::Free => {
                let index = by_slot[slot];
                let a = &mut inst.allocations[index as usize];
                a.death_ns = r.time_ns;
                a.death_step = step;
                inst.steps.push(Step {
                    tagged: index | Step::FREE,
                });
            }
        }
    }
    inst
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use vramtrace_format::{Api, Event};

    /// An event of process 7 on GPU 0, for the report's tests.
    pub(crate) fn ev(api: Api, time_ns: u64, address: u64, size: u64) -> Event {
        Event {
            time_ns,
            pid: 7,
            device: 0,
            address,
            size,
            ..Event::new(api)
        }
    }

    #[test]
    fn allocations_are_paired_with_their_frees_by_address() {
        let pass = TracePass::from_events(vec![
            ev(Api::CuMemAlloc_v2, 10, 0x1000, 100),
            ev(Api::CuMemAlloc_v2, 20, 0x2000, 50),
            ev(Api::CuMemFree_v2, 30, 0x1000, 0),
            ev(Api::CuMemFree_v2, 40, 0x9999, 0),
        ]);
        assert_eq!(pass.instances.len(), 1);
        let i = &pass.instances[0];
        assert_eq!(i.allocations[0].death_ns, 30);
        assert_eq!(i.allocations[0].death_step, 2);
        assert_eq!(i.allocations[1].death_ns, NEVER);
        assert_eq!(i.steps.len(), 3);
        assert!(i.steps[2].is_free() && i.steps[2].allocation() == 0);
        assert_eq!(i.time_ns(i.steps[1]), 20);
        assert_eq!(i.time_ns(i.steps[2]), 30);
        assert_eq!(pass.unmatched_frees, 1);
        assert_eq!((pass.first_ns, pass.last_ns), (10, 40));
    }

    #[test]
    fn plain_allocations_beside_a_pool_are_outside_the_allocator() {
        let pass = TracePass::from_events(vec![
            ev(Api::CuMemAlloc_v2, 10, 0x1000, 100),
            ev(Api::CuMemAllocAsync, 20, 0x2000, 50),
        ]);
        let i = &pass.instances[0];
        assert_eq!(i.allocations.len(), 1);
        assert_eq!(i.allocations[0].size, 50);
        assert_eq!((i.outside.allocations, i.outside.peak_bytes), (1, 100));
    }

    #[test]
    fn failed_calls_and_host_memory_are_not_device_allocations() {
        let mut failed = ev(Api::CuMemAlloc_v2, 1, 0x1000, 100);
        failed.result = 2;
        let pass = TracePass::from_events(vec![failed, ev(Api::CuMemAllocHost_v2, 2, 0x5000, 64)]);
        assert_eq!(pass.allocations(), 0);
        assert_eq!(pass.failed_calls, 1);
    }
}
