//! The recorded failed allocations, grouped by site: one entry per (process, device, call,
//! result, stack), however often it failed there, with its sizes, times (from the trace's
//! start), the stack, and what was live the first time.
//!
//! Sans-IO: read from a walk of the trace's changes ([`crate::model::table::Stepper`]), of
//! its allocation table's rows or of a pass that keeps none. Used by `summary` and the report.

use crate::model::table::{DriverCountEvent, Failure, Moment, Object, Step, Stepper, is_host};
use crate::sums::SaturatingSum;
use crate::symbolize::{StackBytes, StackNames, top_stacks};
use serde::Serialize;
use std::collections::HashMap;
use vramtrace_format::cuda_result::{describe_result, is_out_of_memory};
use vramtrace_format::{Api, Event, NO_DEVICE};

/// How many stacks of live memory a site keeps.
pub const LIVE_STACKS: usize = 5;

/// One place where allocations failed, and how.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FailureSite {
    pub pid: u32,
    /// −1 for host memory.
    pub device: i32,
    pub api: Api,
    /// The `CUresult`, and its name.
    pub result: u32,
    pub result_name: String,
    /// True only for `CUDA_ERROR_OUT_OF_MEMORY`: nothing else is an OOM.
    pub out_of_memory: bool,
    pub count: u64,
    pub min_size: u64,
    pub max_size: u64,
    pub total_bytes: u64,
    /// Nanoseconds after the trace's first event.
    pub first_time_ns: u64,
    pub last_time_ns: u64,
    /// Frames, innermost first; empty when the trace has no stack for it.
    pub frames: Vec<String>,
    /// Live memory of the process on that device at the first failure.
    pub live_requested: u64,
    pub live_reserved: u64,
    pub top_live_stacks: Vec<StackBytes>,
}

/// The failure sites as a walk of the trace's changes meets the failed calls ([`Stepper`]):
/// the rows' walk, or a pass that keeps no row ([`crate::model::StepPass`]).
pub struct FailureSites<'n, 'a, 'f> {
    names: &'n StackNames<'a, 'f>,
    /// The trace's first event's time, which the sites' times count from.
    start_ns: u64,
    sites: Vec<FailureSite>,
    index: HashMap<(u32, i32, Api, u32, u32), usize>,
}

impl<'n, 'a, 'f> FailureSites<'n, 'a, 'f> {
    /// No site yet, of a trace whose first event was at `start_ns`.
    pub fn new(names: &'n StackNames<'a, 'f>, start_ns: u64) -> FailureSites<'n, 'a, 'f> {
        FailureSites {
            names,
            start_ns,
            sites: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// Takes the failed call `f` in, `now` being the moment of its call.
    fn see(&mut self, f: &Failure, now: &dyn Moment) {
        let e = &f.event;
        let device = device_of(e);
        let key = (e.pid, device, e.api, e.result, e.stack);
        let t = e.time_ns.saturating_sub(self.start_ns);
        if let Some(&i) = self.index.get(&key) {
            let s = &mut self.sites[i];
            s.count += 1;
            s.min_size = s.min_size.min(e.size);
            s.max_size = s.max_size.max(e.size);
            s.total_bytes = s.total_bytes.saturating_add(e.size);
            s.last_time_ns = t;
            return;
        }
        // Live memory of the process on that device just before the call.
        let mut live: Vec<Object> = Vec::new();
        now.live(f.index, &mut |o| {
            if o.pid == e.pid && o.device == device {
                live.push(o);
            }
        });
        let sum = |counted: fn(&Object) -> bool| {
            live.iter()
                .filter(|o| counted(o))
                .map(|o| o.size)
                .saturating_sum()
        };
        self.index.insert(key, self.sites.len());
        self.sites.push(FailureSite {
            pid: e.pid,
            device,
            api: e.api,
            result: e.result,
            result_name: describe_result(e.result),
            out_of_memory: is_out_of_memory(e.result),
            count: 1,
            min_size: e.size,
            max_size: e.size,
            total_bytes: e.size,
            first_time_ns: t,
            last_time_ns: t,
            frames: self.names.frames(e.stack),
            live_requested: sum(|o| o.requested),
            live_reserved: sum(|o| o.reserved),
            top_live_stacks: top_stacks(
                live.iter().filter(|o| o.requested).map(Object::stack_bytes),
                self.names,
                LIVE_STACKS,
            ),
        });
    }

    /// The sites, in the order they first failed.
    pub fn finish(self) -> Vec<FailureSite> {
        self.sites
    }
}

impl Stepper for FailureSites<'_, '_, '_> {
    fn step(&mut self, step: Step<'_>, now: &dyn Moment) {
        if let Step::Failed(f) = step {
            self.see(f, now);
        }
    }

    fn counted(&mut self, _: &DriverCountEvent, _: &dyn Moment) {}
}

/// The device a failed call's memory would have been on (−1 for host memory).
pub fn device_of(e: &Event) -> i32 {
    if is_host(e.api.kind()) {
        NO_DEVICE
    } else {
        e.device
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::table::AllocationTable;
    use vramtrace_format::{Metadata, Trace, TraceWriter, WriterOptions};

    fn trace(events: &[Event]) -> Trace {
        let dir = std::env::temp_dir().join(format!("vramtrace-failures-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}.vramtrace", events.len()));
        let file = std::fs::File::create(&path).unwrap();
        let mut w = TraceWriter::new(file, &Metadata::default(), WriterOptions::default()).unwrap();
        for e in events {
            w.push(e).unwrap();
        }
        w.finish().unwrap();
        Trace::open(&path, Default::default()).unwrap()
    }

    fn ev(api: Api, t: u64, address: u64, size: u64, result: u32) -> Event {
        Event {
            pid: 1,
            time_ns: t,
            address,
            size,
            result,
            ..Event::new(api)
        }
    }

    #[test]
    fn identical_failures_are_one_site_and_only_oom_is_an_oom() {
        let mut events = vec![ev(Api::CuMemAlloc_v2, 1_000, 0xa000, 4 << 20, 0)];
        for i in 0..20 {
            events.push(ev(Api::CuMemAlloc_v2, 2_000 + i, 0, (1 << 30) + i, 2));
        }
        events.push(ev(Api::CuMemAlloc_v2, 9_000, 0, 64, 201));
        let trace = trace(&events);
        let mut files = crate::symbolize::NoFiles;
        let names = StackNames::new(&trace.tables, &mut files);
        let table = AllocationTable::of(&trace);
        let mut sites = FailureSites::new(&names, table.start_ns);
        table.walk(&mut sites);
        let sites = sites.finish();
        assert_eq!(sites.len(), 2);
        let oom = &sites[0];
        assert_eq!(
            (oom.count, oom.min_size, oom.max_size),
            (20, 1 << 30, (1 << 30) + 19)
        );
        assert_eq!((oom.first_time_ns, oom.last_time_ns), (1_000, 1_019));
        assert!(oom.out_of_memory);
        assert_eq!(oom.result_name, "CUDA_ERROR_OUT_OF_MEMORY (2)");
        assert_eq!(oom.live_requested, 4 << 20);
        let other = &sites[1];
        assert!(!other.out_of_memory);
        assert_eq!(other.result_name, "CUDA_ERROR_INVALID_CONTEXT (201)");
    }
}
