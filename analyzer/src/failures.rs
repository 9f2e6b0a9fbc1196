//! The recorded failed allocations, grouped by site: one entry per (process, device, call,
//! result, stack), however often it failed there, with its sizes, times (from the trace's
//! start), the stack, and what was live the first time.
//!
//! Sans-IO. Used by `summary` and the report; [`FailureSites`] is fed event by event by a
//! caller that already follows live memory, [`failures_by_site`] makes its own pass.

use crate::model::live::{Change, Ledger, Object, is_host};
use crate::symbolize::{ModuleFiles, StackBytes, StackNames, top_stacks};
use serde::Serialize;
use std::collections::HashMap;
use vramtrace_format::cuda_result::{describe_result, is_out_of_memory};
use vramtrace_format::{Api, Event, NO_DEVICE, Trace};

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

/// Groups failures as they come.
#[derive(Debug, Default)]
pub struct FailureSites {
    start_ns: u64,
    sites: Vec<FailureSite>,
    index: HashMap<(u32, i32, Api, u32, u32), usize>,
}

impl FailureSites {
    /// `start_ns`: the time of the trace's first event.
    pub fn new(start_ns: u64) -> FailureSites {
        FailureSites {
            start_ns,
            ..FailureSites::default()
        }
    }

    /// The device a failed call's memory would have been on (−1 for host memory).
    pub fn device_of(e: &Event) -> i32 {
        if is_host(e.api.kind()) {
            NO_DEVICE
        } else {
            e.device
        }
    }

    /// Records the failed allocation `e`; `ledger` is live memory just before it.
    pub fn see(&mut self, e: &Event, ledger: &Ledger, names: &StackNames) {
        let device = Self::device_of(e);
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
        let totals = ledger.totals(e.pid, device);
        let live = ledger
            .live()
            .filter(|o| o.pid == e.pid && o.device == device && o.requested)
            .map(Object::stack_bytes);
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
            frames: names.frames(e.stack),
            live_requested: totals.requested,
            live_reserved: totals.reserved,
            top_live_stacks: top_stacks(live, names, LIVE_STACKS),
        });
    }

    /// The sites in the order they first failed.
    pub fn finish(self) -> Vec<FailureSite> {
        self.sites
    }
}

/// Every failed allocation of `trace`, grouped by site; `files` names native frames
/// ([`crate::symbolize::NoFiles`] for module+offset).
pub fn failures_by_site(trace: &Trace, files: &mut dyn ModuleFiles) -> Vec<FailureSite> {
    let names = StackNames::new(&trace.tables, files);
    let mut ledger = Ledger::for_trace(trace);
    let start = trace.events().next().map_or(0, |e| e.time_ns);
    let mut sites = FailureSites::new(start);
    for e in trace.events() {
        if matches!(ledger.apply(&e), Change::Failed) {
            sites.see(&e, &ledger, &names);
        }
    }
    sites.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramtrace_format::{Metadata, TraceWriter, WriterOptions};

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
        let sites = failures_by_site(&trace(&events), &mut crate::symbolize::NoFiles);
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
