//! A trace as a PyTorch memory snapshot, for pytorch.org/memory_viz and
//! `python -m torch.cuda._memory_viz` — for traces of any program, not only PyTorch.
//!
//! The layout follows what the viewers read (pytorch/pytorch `torch/cuda/_memory_viz.py`:
//! `segsum` asserts that a segment's blocks add up to its `total_size`; `trace` reads
//! `action`, `addr`, `size`, `device_free`; `_block_extra` reads `frames` and
//! `requested_size`) and the keys `torch/csrc/cuda/memory_snapshot.cpp` writes.
//!
//! Mapping back:
//! - An imported snapshot (requests plus flagged allocator segments) becomes what it was:
//!   `alloc`/`free_requested`/`free_completed` for requests, `segment_alloc`/`segment_free`
//!   and `segment_map`/`segment_unmap` for segments, `oom` for failures, and the final
//!   `segments` with their blocks.
//! - Any other trace has no allocator between program and driver: each driver allocation is
//!   its own segment holding one block, so it appears as `segment_alloc` + `alloc` and, when
//!   freed, `free_requested` + `free_completed` + `segment_free`; VMM memory appears through
//!   its mappings.
//!
//! Host memory (pinned or registered) is left out: the viewer's `device_traces` are per GPU.
//! Containers shared by many entries (a stack's frame list, a frame dict) are created once, so
//! the pickle references them through the memo as PyTorch's own snapshots do.

use crate::model::table::{AllocationTable, Object, Step};
use crate::symbolize::{NamedFrame, NoFiles, StackNames};
use std::collections::{BTreeMap, HashMap};
use vramtrace_format::cuda_result::is_out_of_memory;
use vramtrace_format::pickle::{Document, Value};
use vramtrace_format::{Event, MemoryKind, NO_STACK, Op, Trace};

/// Segments of at most this size come from the small pool in PyTorch (`kSmallSize`).
const SMALL_SEGMENT: u64 = 1 << 20;
/// Device ordinals a snapshot can list. `device_traces` holds one list per ordinal from 0 to
/// the highest (the viewers index it by device), so one event on device 2^31 - 1 once made the
/// export build two billion lists (24 GB). CUDA numbers a process's devices from 0 up to
/// `cuDeviceGetCount` (driver API, "Device Management"); no machine has a thousand.
pub const MAX_DEVICES: i32 = 1024;

/// What an export left out or added.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotReport {
    pub devices: u64,
    pub trace_entries: u64,
    pub segments: u64,
    pub blocks: u64,
    /// Events of host memory, which a snapshot's device traces cannot hold.
    pub host_events_skipped: u64,
    /// Events on devices numbered [`MAX_DEVICES`] or more, which no snapshot lists.
    pub high_device_events_skipped: u64,
}

struct Out<'t, 'f> {
    doc: Document<'static>,
    names: StackNames<'t, 'f>,
    stacks: HashMap<u32, Value>,
    frames: HashMap<String, Value>,
    empty_frames: Value,
    traces: Vec<Value>,
    report: SnapshotReport,
}

impl Out<'_, '_> {
    fn frames(&mut self, stack: u32) -> Value {
        if stack == NO_STACK {
            return self.empty_frames;
        }
        if let Some(v) = self.stacks.get(&stack) {
            return *v;
        }
        let list = self.doc.new_list();
        for named in self.names.named(stack) {
            let f = self.frame(&named);
            self.doc.push(&list, f);
        }
        self.stacks.insert(stack, list);
        list
    }

    fn frame(&mut self, named: &NamedFrame) -> Value {
        let key = named.text();
        if let Some(v) = self.frames.get(&key) {
            return *v;
        }
        let (file, line, name) = if named.python {
            (named.file.clone(), named.line, named.function.clone())
        } else {
            (named.module.clone(), 0, key.clone())
        };
        let d = self.doc.new_dict();
        self.doc.set_str(&d, "filename", &file);
        self.doc.set_int(&d, "line", i64::from(line));
        self.doc.set_str(&d, "name", &name);
        self.frames.insert(key, d);
        d
    }

    fn entry(&mut self, e: &Event, action: &str, addr: u64, size: u64) {
        let Ok(device) = usize::try_from(e.device) else {
            return;
        };
        let frames = self.frames(e.stack);
        let d = self.doc.new_dict();
        self.doc.set_str(&d, "action", action);
        if action == "oom" {
            self.doc.set_int(&d, "device_free", addr);
        } else {
            self.doc.set_int(&d, "addr", addr);
        }
        self.doc.set_int(&d, "size", size);
        // PyTorch stores `cudaStream_t` in an int64.
        self.doc.set_int(&d, "stream", e.stream as i64);
        self.doc.set_int(&d, "time_us", e.time_ns / 1000);
        self.doc.set(&d, "frames", frames);
        let list = self.traces[device];
        self.doc.push(&list, d);
        self.report.trace_entries += 1;
    }
}

/// A live range at the end of the trace that becomes a segment.
#[derive(Debug, Clone, Copy)]
struct Segment {
    device: i32,
    address: u64,
    size: u64,
    stream: u64,
    stack: u32,
    expandable: bool,
}

/// Builds the snapshot of `trace`.
pub fn snapshot(trace: &Trace) -> (Document<'static>, SnapshotReport) {
    let devices = trace
        .events()
        .map(|e| e.device)
        .filter(|&d| (0..MAX_DEVICES).contains(&d))
        .max()
        .map_or(0, |d| d as usize + 1);
    let mut files = NoFiles;
    let mut out = Out {
        doc: Document::new(),
        names: StackNames::new(&trace.tables, &mut files),
        stacks: HashMap::new(),
        frames: HashMap::new(),
        empty_frames: Value::None,
        traces: Vec::new(),
        report: SnapshotReport {
            devices: devices as u64,
            ..Default::default()
        },
    };
    out.empty_frames = out.doc.new_list();
    out.traces = (0..devices).map(|_| out.doc.new_list()).collect();

    let table = AllocationTable::of(trace);
    let split = table.split_levels();
    let mut steps = table.steps();
    // Live mappings (VMM) by (device, address): size, stack, stream.
    let mut mapped: BTreeMap<(i32, u64), (u64, u32, u64)> = BTreeMap::new();
    let total_memory: HashMap<i32, u64> = trace
        .tables
        .devices
        .iter()
        .map(|d| (d.ordinal, d.total_memory))
        .collect();
    for (i, e) in trace.events().enumerate() {
        let change = steps.at(i as u64);
        if e.device < 0
            || matches!(
                e.api.kind(),
                MemoryKind::PinnedHost | MemoryKind::RegisteredHost
            )
        {
            out.report.host_events_skipped += 1;
            continue;
        }
        if e.device >= MAX_DEVICES {
            out.report.high_device_events_skipped += 1;
            continue;
        }
        if e.succeeded() && e.api.kind() == MemoryKind::Vmm {
            match e.api.op() {
                Op::Map => {
                    mapped.insert((e.device, e.address), (e.size, e.stack, e.stream));
                    out.entry(&e, "segment_map", e.address, e.size);
                    if !split {
                        out.entry(&e, "alloc", e.address, e.size);
                    }
                }
                Op::Unmap => {
                    mapped.remove(&(e.device, e.address));
                    if !split {
                        out.entry(&e, "free_requested", e.address, e.size);
                        out.entry(&e, "free_completed", e.address, e.size);
                    }
                    out.entry(&e, "segment_unmap", e.address, e.size);
                }
                _ => {}
            }
            continue;
        }
        match change {
            Some(Step::Alloc { object: o, .. }) if counted(&o) => {
                if o.segment || !split {
                    out.entry(&e, "segment_alloc", o.address, o.size);
                }
                if !o.segment {
                    out.entry(&e, "alloc", o.address, o.size);
                }
            }
            Some(Step::Free { object: o, .. }) if counted(&o) => {
                if !o.segment {
                    out.entry(&e, "free_requested", o.address, o.size);
                    out.entry(&e, "free_completed", o.address, o.size);
                }
                if o.segment || !split {
                    out.entry(&e, "segment_free", o.address, o.size);
                }
            }
            // The snapshot format knows one failure, `oom`: other failed calls (an invalid
            // context, a call not permitted) are not out-of-memory errors and are left out.
            Some(Step::Failed(_)) if is_out_of_memory(e.result) => {
                // An imported OOM keeps PyTorch's `device_free` in `aux`; otherwise it is
                // what the device table's capacity leaves beside the reserved bytes.
                let t = steps.totals(e.pid, e.device);
                let free = if split {
                    e.aux
                } else {
                    total_memory
                        .get(&e.device)
                        .map_or(0, |&m| m.saturating_sub(t.reserved))
                };
                out.entry(&e, "oom", free, e.size);
            }
            _ => {}
        }
    }

    // The end state: segments and the blocks inside them.
    let live: Vec<Object> = table
        .live_at_end()
        .filter(|o| (0..MAX_DEVICES).contains(&o.device) && counted(o))
        .filter(|o| o.kind != MemoryKind::Vmm)
        .collect();
    let mut segments: Vec<Segment> = live
        .iter()
        .filter(|o| o.segment || !split)
        .map(|o| Segment {
            device: o.device,
            address: o.address,
            size: o.size,
            stream: o.stream,
            stack: o.stack,
            expandable: false,
        })
        .collect();
    // Contiguous mappings form one expandable segment, as PyTorch reports them.
    let mut last: Option<Segment> = None;
    for (&(device, address), &(size, stack, stream)) in &mapped {
        match &mut last {
            Some(s) if s.device == device && s.address + s.size == address => s.size += size,
            _ => {
                segments.extend(last.take());
                last = Some(Segment {
                    device,
                    address,
                    size,
                    stream,
                    stack,
                    expandable: true,
                });
            }
        }
    }
    segments.extend(last);
    segments.sort_by_key(|s| (s.device, s.address));
    // Blocks: the requests inside each segment (without an allocator, the segment itself).
    let mut requests: Vec<Object> = live.iter().filter(|o| !o.segment).copied().collect();
    requests.sort_by_key(|o| (o.device, o.address));
    let seg_list = out.doc.new_list();
    let mut placed = vec![false; requests.len()];
    for s in &segments {
        let lo = requests.partition_point(|o| (o.device, o.address) < (s.device, s.address));
        let mut blocks = Vec::new();
        for (i, o) in requests.iter().enumerate().skip(lo) {
            if o.device != s.device || o.address >= s.address + s.size {
                break;
            }
            blocks.push((o.address, o.size, o.stack));
            placed[i] = true;
        }
        if !split && s.expandable {
            // A mapping without an allocator is one block in use.
            blocks.push((s.address, s.size, s.stack));
        }
        let seg = segment_dict(&mut out, s, &blocks);
        out.doc.push(&seg_list, seg);
    }
    // Requests outside every known segment (their segment predates a ring-buffered history):
    // each becomes a segment of its own, so nothing live is lost.
    for (o, _) in requests.iter().zip(&placed).filter(|(_, p)| !**p) {
        let s = Segment {
            device: o.device,
            address: o.address,
            size: o.size,
            stream: o.stream,
            stack: o.stack,
            expandable: false,
        };
        let seg = segment_dict(&mut out, &s, &[(o.address, o.size, o.stack)]);
        out.doc.push(&seg_list, seg);
    }

    let root = out.doc.new_dict();
    out.doc.set(&root, "segments", seg_list);
    let traces = out.doc.new_list();
    for t in out.traces.clone() {
        out.doc.push(&traces, t);
    }
    out.doc.set(&root, "device_traces", traces);
    if let Some((_, conf)) = trace
        .metadata
        .environment
        .iter()
        .find(|(k, _)| k == "PYTORCH_CUDA_ALLOC_CONF")
    {
        let settings = out.doc.new_dict();
        out.doc.set_str(&settings, "PYTORCH_CUDA_ALLOC_CONF", conf);
        out.doc.set(
            &settings,
            "expandable_segments",
            Value::Bool(conf.contains("expandable_segments:True")),
        );
        out.doc.set(&root, "allocator_settings", settings);
    }
    out.doc.set_root(root);
    (out.doc, out.report)
}

fn counted(o: &Object) -> bool {
    o.requested || o.reserved
}

/// One segment dict with its blocks; gaps become `inactive` blocks so the sizes add up.
fn segment_dict(out: &mut Out, s: &Segment, blocks: &[(u64, u64, u32)]) -> Value {
    let list = out.doc.new_list();
    let end = s.address + s.size;
    let mut at = s.address;
    let mut allocated = 0;
    let inactive = |out: &mut Out, address: u64, size: u64| {
        let b = out.doc.new_dict();
        out.doc.set_int(&b, "address", address);
        out.doc.set_int(&b, "size", size);
        out.doc.set_int(&b, "requested_size", 0u8);
        out.doc.set_str(&b, "state", "inactive");
        let empty = out.empty_frames;
        out.doc.set(&b, "frames", empty);
        out.doc.push(&list, b);
        out.report.blocks += 1;
    };
    for &(address, size, stack) in blocks {
        // Overlapping or out-of-range blocks cannot be drawn; clip them to the segment.
        if address < at || address >= end {
            continue;
        }
        if address > at {
            inactive(out, at, address - at);
        }
        let size = size.min(end - address);
        let frames = out.frames(stack);
        let b = out.doc.new_dict();
        out.doc.set_int(&b, "address", address);
        out.doc.set_int(&b, "size", size);
        out.doc.set_int(&b, "requested_size", size);
        out.doc.set_str(&b, "state", "active_allocated");
        out.doc.set(&b, "frames", frames);
        out.doc.push(&list, b);
        out.report.blocks += 1;
        allocated += size;
        at = address + size;
    }
    if at < end {
        inactive(out, at, end - at);
    }
    let frames = out.frames(s.stack);
    let pool = out.doc.new_tuple(vec![Value::Small(0), Value::Small(0)]);
    let d = out.doc.new_dict();
    for (k, v) in [
        ("device", i128::from(s.device)),
        ("address", i128::from(s.address)),
        ("total_size", i128::from(s.size)),
        ("allocated_size", i128::from(allocated)),
        ("active_size", i128::from(allocated)),
        ("requested_size", i128::from(allocated)),
        // PyTorch stores `cudaStream_t` in an int64.
        ("stream", i128::from(s.stream as i64)),
    ] {
        out.doc.set_int(&d, k, v);
    }
    let kind = if s.size <= SMALL_SEGMENT {
        "small"
    } else {
        "large"
    };
    out.doc.set_str(&d, "segment_type", kind);
    out.doc.set(&d, "segment_pool_id", pool);
    out.doc.set(&d, "is_expandable", Value::Bool(s.expandable));
    out.doc.set(&d, "frames", frames);
    out.doc.set(&d, "blocks", list);
    out.report.segments += 1;
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interop::import_snapshot::import;
    use vramtrace_format::pickle;
    use vramtrace_format::{Metadata, ReadOptions, TraceWriter, WriterOptions};

    const SNAPSHOT: &[u8] =
        include_bytes!("../../../formats/src/pickle/testdata/snapshot-like-p4.pickle");

    fn imported_trace() -> Trace {
        let imp = import(&pickle::read(SNAPSHOT).unwrap(), "s").unwrap();
        let mut w = TraceWriter::new(Vec::new(), &imp.metadata, WriterOptions::default()).unwrap();
        w.tables_mut().extend(imp.tables.clone());
        for e in &imp.events {
            w.push(e).unwrap();
        }
        Trace::from_bytes(&w.finish().unwrap(), ReadOptions::default()).unwrap()
    }

    fn actions(doc: &Document) -> Vec<String> {
        let traces = doc.get(doc.root(), "device_traces").unwrap();
        let dev0 = &doc.items(traces).unwrap()[0];
        doc.items(dev0)
            .unwrap()
            .iter()
            .map(|e| {
                doc.as_str(doc.get(e, "action").unwrap())
                    .unwrap()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn an_imported_snapshot_exports_back_to_the_same_actions_and_end_state() {
        let (doc, report) = snapshot(&imported_trace());
        assert_eq!(
            actions(&doc),
            [
                "segment_alloc",
                "alloc",
                "alloc",
                "free_requested",
                "free_completed",
                "oom"
            ]
        );
        assert_eq!(report.segments, 1);
        let segs = doc.items(doc.get(doc.root(), "segments").unwrap()).unwrap();
        let blocks = doc.items(doc.get(&segs[0], "blocks").unwrap()).unwrap();
        let sizes: Vec<u64> = blocks
            .iter()
            .map(|b| doc.as_u64(doc.get(b, "size").unwrap()).unwrap())
            .collect();
        assert_eq!(sizes, [1024, 2097152 - 1024]);
        let f = doc.items(doc.get(&blocks[0], "frames").unwrap()).unwrap();
        assert_eq!(
            doc.as_str(doc.get(&f[0], "filename").unwrap()),
            Some("train.py")
        );
        assert_eq!(doc.as_int(doc.get(&f[0], "line").unwrap()), Some(42));
        // Shared frame lists stay shared.
        assert_eq!(
            doc.get(&blocks[0], "frames").unwrap().id(),
            doc.get(&segs[0], "frames").unwrap().id()
        );
        let bytes = pickle::write(&doc).unwrap();
        assert!(pickle::read(&bytes).is_ok());
    }

    /// A tracker trace of one tensor, its free as one event (`WITH_FREE_REQUEST`, what the
    /// recorder writes) or as the two entries PyTorch reported.
    fn tracker_trace(merged: bool) -> Trace {
        use vramtrace_format::Api;
        use vramtrace_format::conventions::WITH_FREE_REQUEST;
        let e = |seq, api, address, size| Event {
            seq,
            time_ns: seq * 1000,
            pid: 3,
            device: 0,
            address,
            size,
            ..Event::new(api)
        };
        let mut events = vec![
            e(1, Api::CuMemAlloc_v2, 0x10000, 2 << 20),
            e(2, Api::TorchSegmentAlloc, 0x10000, 2 << 20),
            e(3, Api::TorchAlloc, 0x10000, 512),
        ];
        if merged {
            let mut free = e(4, Api::TorchFreeCompleted, 0x10000, 512);
            free.flags = WITH_FREE_REQUEST;
            events.push(free);
        } else {
            events.push(e(4, Api::TorchFreeRequested, 0x10000, 512));
            events.push(e(5, Api::TorchFreeCompleted, 0x10000, 512));
        }
        let mut w =
            TraceWriter::new(Vec::new(), &Metadata::default(), WriterOptions::default()).unwrap();
        for ev in &events {
            w.push(ev).unwrap();
        }
        Trace::from_bytes(&w.finish().unwrap(), ReadOptions::default()).unwrap()
    }

    #[test]
    fn a_free_recorded_as_one_event_exports_as_the_request_and_its_completion() {
        let merged = actions(&snapshot(&tracker_trace(true)).0);
        assert_eq!(
            merged,
            ["segment_alloc", "alloc", "free_requested", "free_completed"]
        );
        assert_eq!(merged, actions(&snapshot(&tracker_trace(false)).0));
    }

    #[test]
    fn a_driver_trace_makes_one_segment_per_live_allocation() {
        let e = |seq, api, address, size| Event {
            seq,
            time_ns: seq * 1000,
            pid: 3,
            device: 1,
            address,
            size,
            ..Event::new(api)
        };
        let mut w =
            TraceWriter::new(Vec::new(), &Metadata::default(), WriterOptions::default()).unwrap();
        for ev in [
            e(1, vramtrace_format::Api::CuMemAlloc_v2, 0x10000, 4 << 20),
            e(2, vramtrace_format::Api::CuMemAlloc_v2, 0x900000, 512),
            e(3, vramtrace_format::Api::CuMemFree_v2, 0x900000, 0),
        ] {
            w.push(&ev).unwrap();
        }
        let t = Trace::from_bytes(&w.finish().unwrap(), ReadOptions::default()).unwrap();
        let (doc, report) = snapshot(&t);
        assert_eq!(report.devices, 2);
        assert_eq!(report.segments, 1);
        let traces = doc
            .items(doc.get(doc.root(), "device_traces").unwrap())
            .unwrap();
        assert_eq!(doc.items(&traces[0]).unwrap().len(), 0);
        assert_eq!(doc.items(&traces[1]).unwrap().len(), 7);
        let segs = doc.items(doc.get(doc.root(), "segments").unwrap()).unwrap();
        assert_eq!(
            doc.as_str(doc.get(&segs[0], "segment_type").unwrap()),
            Some("large")
        );
        assert_eq!(
            doc.as_u64(doc.get(&segs[0], "allocated_size").unwrap()),
            Some(4 << 20)
        );
    }

    #[test]
    fn an_event_on_device_two_to_the_31_minus_1_is_left_out_not_given_two_billion_lists() {
        let e = |seq, device, address| Event {
            seq,
            device,
            address,
            size: 4096,
            ..Event::new(vramtrace_format::Api::CuMemAlloc_v2)
        };
        let mut w =
            TraceWriter::new(Vec::new(), &Metadata::default(), WriterOptions::default()).unwrap();
        for ev in [
            e(1, 1, 0x10000),
            e(2, i32::MAX, 0x20000),
            e(3, MAX_DEVICES, 0x30000),
        ] {
            w.push(&ev).unwrap();
        }
        let t = Trace::from_bytes(&w.finish().unwrap(), ReadOptions::default()).unwrap();
        let (doc, report) = snapshot(&t);
        assert_eq!((report.devices, report.high_device_events_skipped), (2, 2));
        assert_eq!(report.segments, 1);
        let traces = doc
            .items(doc.get(doc.root(), "device_traces").unwrap())
            .unwrap();
        assert_eq!(traces.len(), 2);
    }
}
