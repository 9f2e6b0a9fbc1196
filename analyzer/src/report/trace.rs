//! The device-memory allocations of each allocator instance (process × device), with their
//! lifetimes and the order in which they were made and freed.
//!
//! Sans-IO, and read from the replay model's request streams rather than from a second pass
//! over the events, so the report sees exactly the allocations `vramtrace replay` replays and
//! shows the same lower bound (`model/from_table.rs` decides what is device memory, how frees are
//! matched and what failed calls and unmatched frees do).
//!
//! Nothing here is laid out beside the requests: an [`Instance`] borrows its request stream and
//! walks it again for each section ([`Instance::steps`], [`Instance::allocations`]), holding
//! only what is live at once, so the report's memory does not grow with the trace past the
//! requests the replays read anyway.

use crate::model::table::AllocationTable;
use crate::model::{Model, Outside, Request, RequestKind, RequestStream};
use vramtrace_format::Layout;

/// `death_ns` of an allocation still live when the trace ends.
pub const NEVER: u64 = u64::MAX;

/// One device allocation from birth to death.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// Its rank among the instance's allocations, in call order.
    pub index: u32,
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

/// An allocation or a free, in call order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub time_ns: u64,
    /// The bytes allocated, or for a free the bytes of the allocation it ends.
    pub size: u64,
    pub is_free: bool,
}

/// The device memory of one process on one device.
#[derive(Debug, Clone, Copy)]
pub struct Instance<'m> {
    pub pid: u32,
    pub device: i32,
    /// What it asked of its allocator, which every walk below reads.
    pub requests: &'m RequestStream,
    /// How many allocations it made ([`Instance::allocations`]).
    pub allocation_count: u64,
    /// How many allocations and frees ([`Instance::steps`]).
    pub step_count: usize,
    /// Plain driver allocations beside a stream-ordered pool, which the model sets aside.
    pub outside: Outside,
}

/// An allocation the real driver refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub time_ns: u64,
    pub size: u64,
    pub stack: u32,
}

impl<'m> Instance<'m> {
    /// The instance whose requests are `stream`'s.
    pub fn of(stream: &'m RequestStream) -> Instance<'m> {
        let key = stream.key;
        let (mut allocation_count, mut step_count) = (0u64, 0usize);
        for r in &stream.requests {
            match r.kind {
                RequestKind::Alloc => {
                    allocation_count += 1;
                    step_count += 1;
                }
                RequestKind::Free => step_count += 1,
                _ => {}
            }
        }
        Instance {
            pid: key.map_or(0, |k| k.pid),
            device: key.map_or(-1, |k| k.device),
            requests: stream,
            allocation_count,
            step_count,
            outside: stream.outside,
        }
    }

    /// The allocations and frees, in call order (a refused allocation holds nothing, and the
    /// other requests are no step).
    pub fn steps(&self) -> impl Iterator<Item = Step> + Clone + 'm {
        self.requests.requests.iter().filter_map(|r| {
            let is_free = match r.kind {
                RequestKind::Alloc => false,
                RequestKind::Free => true,
                _ => return None,
            };
            Some(Step {
                time_ns: r.time_ns,
                size: r.size,
                is_free,
            })
        })
    }

    /// Every allocation with its death: each as it is freed, then those never freed. A walk
    /// over the requests that holds what is live, one pending allocation per slot.
    pub fn allocations(&self) -> Allocations<'m> {
        Allocations {
            requests: self.requests.requests.iter(),
            pending: vec![None; self.requests.slots as usize],
            index: 0,
            step: 0,
            survivor: 0,
        }
    }

    /// What was live right after step `peak_step`, as (stack, bytes) per allocation: a walk
    /// that stops there ([`RequestStream::live_before`] the next request).
    pub fn live_after(&self, peak_step: usize) -> Vec<(u32, u64)> {
        let request = self
            .requests
            .requests
            .iter()
            .enumerate()
            .filter(|(_, r)| matches!(r.kind, RequestKind::Alloc | RequestKind::Free))
            .nth(peak_step)
            .map_or(self.requests.requests.len(), |(i, _)| i + 1);
        self.requests.live_before(request)
    }

    /// The allocations the driver refused and the program survived, in call order.
    pub fn refused(&self) -> impl Iterator<Item = Refusal> + 'm {
        self.requests
            .requests
            .iter()
            .filter(|r| r.kind == RequestKind::Attempt)
            .map(|r| Refusal {
                time_ns: r.time_ns,
                size: r.size,
                stack: r.stack,
            })
    }
}

/// The walk of [`Instance::allocations`].
#[derive(Debug, Clone)]
pub struct Allocations<'m> {
    requests: std::slice::Iter<'m, Request>,
    /// The live allocation of each slot.
    pending: Vec<Option<Allocation>>,
    /// The next allocation's index and the next step's.
    index: u32,
    step: u32,
    /// Where the survivors are taken from, once the requests are walked.
    survivor: usize,
}

impl Iterator for Allocations<'_> {
    type Item = Allocation;

    fn next(&mut self) -> Option<Allocation> {
        for r in self.requests.by_ref() {
            let slot = r.slot as usize;
            match r.kind {
                RequestKind::Alloc => {
                    if self.pending.len() <= slot {
                        self.pending.resize(slot + 1, None);
                    }
                    self.pending[slot] = Some(Allocation {
                        index: self.index,
                        size: r.size,
                        birth_ns: r.time_ns,
                        death_ns: NEVER,
                        stack: r.stack,
                        stream: r.stream,
                        birth_step: self.step,
                        death_step: u32::MAX,
                    });
                    self.index += 1;
                    self.step += 1;
                }
                RequestKind::Free => {
                    let mut a = self.pending[slot]
                        .take()
                        .expect("the model frees only live slots");
                    (a.death_ns, a.death_step) = (r.time_ns, self.step);
                    self.step += 1;
                    return Some(a);
                }
                _ => {}
            }
        }
        while let Some(p) = self.pending.get_mut(self.survivor) {
            self.survivor += 1;
            if let Some(a) = p.take() {
                return Some(a);
            }
        }
        None
    }
}

/// What the pass found.
#[derive(Debug, Clone, Default)]
pub struct TracePass<'m> {
    /// In (pid, device) order.
    pub instances: Vec<Instance<'m>>,
    pub first_ns: u64,
    pub last_ns: u64,
    pub events: u64,
    pub failed_calls: u64,
    pub unmatched_frees: u64,
}

impl<'m> TracePass<'m> {
    /// The instances of `model`'s request streams, timed by the trace's chunk index (`layout`),
    /// with the events, failed calls and unmatched frees of its allocation table.
    pub fn new(layout: &Layout, model: &'m Model, table: &AllocationTable) -> TracePass<'m> {
        let chunks = layout.chunks.iter().filter(|c| c.event_count > 0);
        let first_ns = chunks.clone().map(|c| c.first_time_ns).min().unwrap_or(0);
        let last_ns = chunks.map(|c| c.last_time_ns).max().unwrap_or(0);
        TracePass {
            instances: model.streams.iter().map(Instance::of).collect(),
            first_ns,
            last_ns: last_ns.max(first_ns),
            events: table.events,
            failed_calls: table.failed_calls,
            unmatched_frees: table.unmatched_frees,
        }
    }

    pub fn allocations(&self) -> u64 {
        self.instances.iter().map(|i| i.allocation_count).sum()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::Loader;
    use vramtrace_format::{Api, Event, Metadata};

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

    /// The model and table of events in call order, for a [`TracePass`] of them
    /// ([`Loaded::pass`]).
    pub(crate) struct Loaded {
        model: Model,
        table: AllocationTable,
        first_ns: u64,
        last_ns: u64,
        events: u64,
    }

    pub(crate) fn load(events: &[Event]) -> Loaded {
        let mut loader = Loader::requests_only();
        events.iter().for_each(|e| loader.push(e));
        let (model, table) = loader.finish(&Metadata::default());
        Loaded {
            model,
            table,
            first_ns: events.iter().map(|e| e.time_ns).min().unwrap_or(0),
            last_ns: events.iter().map(|e| e.time_ns).max().unwrap_or(0),
            events: events.len() as u64,
        }
    }

    impl Loaded {
        pub(crate) fn pass(&self) -> TracePass<'_> {
            TracePass {
                instances: self.model.streams.iter().map(Instance::of).collect(),
                first_ns: self.first_ns,
                last_ns: self.last_ns,
                events: self.events,
                failed_calls: self.table.failed_calls,
                unmatched_frees: self.table.unmatched_frees,
            }
        }
    }

    #[test]
    fn allocations_are_paired_with_their_frees_by_address() {
        let loaded = load(&[
            ev(Api::CuMemAlloc_v2, 10, 0x1000, 100),
            ev(Api::CuMemAlloc_v2, 20, 0x2000, 50),
            ev(Api::CuMemFree_v2, 30, 0x1000, 0),
            ev(Api::CuMemFree_v2, 40, 0x9999, 0),
        ]);
        let pass = loaded.pass();
        assert_eq!(pass.instances.len(), 1);
        let i = &pass.instances[0];
        let a: Vec<Allocation> = i.allocations().collect();
        assert_eq!((a[0].index, a[0].death_ns, a[0].death_step), (0, 30, 2));
        assert_eq!((a[1].index, a[1].death_ns, a[1].birth_step), (1, NEVER, 1));
        assert_eq!(i.step_count, 3);
        let steps: Vec<Step> = i.steps().collect();
        assert!(steps[2].is_free && steps[2].size == 100);
        assert_eq!((steps[1].time_ns, steps[2].time_ns), (20, 30));
        assert_eq!(pass.unmatched_frees, 1);
        assert_eq!((pass.first_ns, pass.last_ns), (10, 40));
    }

    #[test]
    fn the_live_set_after_a_step_holds_what_was_allocated_and_not_yet_freed() {
        let mut big = ev(Api::CuMemAlloc_v2, 0, 0x1000, 100);
        big.stack = 3;
        let loaded = load(&[
            big,
            ev(Api::CuMemAlloc_v2, 1, 0x2000, 50),
            ev(Api::CuMemFree_v2, 2, 0x2000, 0),
            ev(Api::CuMemAlloc_v2, 3, 0x3000, 7),
        ]);
        let i = loaded.pass().instances[0];
        assert_eq!(i.live_after(0), vec![(3, 100)]);
        assert_eq!(i.live_after(1).len(), 2);
        assert_eq!(i.live_after(2), vec![(3, 100)]);
        assert_eq!(i.live_after(3).iter().map(|l| l.1).sum::<u64>(), 107);
    }

    #[test]
    fn plain_allocations_beside_a_pool_are_outside_the_allocator() {
        let loaded = load(&[
            ev(Api::CuMemAlloc_v2, 10, 0x1000, 100),
            ev(Api::CuMemAllocAsync, 20, 0x2000, 50),
        ]);
        let i = loaded.pass().instances[0];
        let a: Vec<Allocation> = i.allocations().collect();
        assert_eq!((i.allocation_count, a.len(), a[0].size), (1, 1, 50));
        assert_eq!((i.outside.allocations, i.outside.peak_bytes), (1, 100));
    }

    #[test]
    fn failed_calls_and_host_memory_are_not_device_allocations() {
        let mut failed = ev(Api::CuMemAlloc_v2, 1, 0x1000, 100);
        failed.result = 2;
        let loaded = load(&[failed, ev(Api::CuMemAllocHost_v2, 2, 0x5000, 64)]);
        let pass = loaded.pass();
        assert_eq!(pass.allocations(), 0);
        assert_eq!(pass.failed_calls, 1);
    }
}
