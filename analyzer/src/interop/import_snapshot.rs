//! PyTorch memory snapshot → trace events and tables (`vramtrace import`).
//!
//! The snapshot schema follows pytorch/pytorch `torch/cuda/memory.py` (`_snapshot` docstring:
//! `Snapshot`, `Segment`, `Block`, `Frame`, `TraceEntry`) and the dict keys written by
//! `torch/csrc/cuda/memory_snapshot.cpp` (`_memory_snapshot_pickled`): per device a list of
//! trace entries with `action`, `addr` (`device_free` instead for `oom`), `size`, `stream`,
//! `frames`, `time_us`; segments with `address`, `total_size`, `stream`, `is_expandable` and
//! `blocks` (`size`, `requested_size`, `state`, `frames`).
//!
//! # Mapping
//!
//! A snapshot holds two levels at once, and both are kept:
//!
//! | action | event |
//! |---|---|
//! | `alloc` | `cuMemAllocAsync`: a program request |
//! | `free_completed` | `cuMemFreeAsync` (the block is reusable from here on) |
//! | `free_requested` | none: counted in the report; the request ends at `free_completed` |
//! | `oom` | `cuMemAllocAsync` that failed with `CUDA_ERROR_OUT_OF_MEMORY`; `aux` = `device_free` |
//! | `segment_alloc` / `segment_free` | `cuMemAlloc_v2` / `cuMemFree_v2`, flagged [`ALLOCATOR_SEGMENT`] |
//! | `segment_map` / `segment_unmap` | `cuMemCreate`+`cuMemMap` / `cuMemUnmap`+`cuMemRelease`, flagged |
//! | `snapshot`, `annotate` | none: counted in the report |
//!
//! Memory live before the history began also carries [`BEFORE_HISTORY`]; the parts of a
//! mapping that a partial unmap leaves mapped are re-mapped with [`REMAINDER`] (the flags are
//! defined in [`vramtrace_format::conventions`]).
//!
//! The flagged events are what the real caching allocator did, so a replay of the requests can
//! be compared with them; the rest of vramtrace counts them as *reserved*, never as requests.
//!
//! `max_entries` makes the history a ring buffer, so a snapshot may begin in the middle of a
//! run. Memory that was live before its first entry (freed in the history without an `alloc`,
//! or live in `segments` at the end without one) is added as allocations at the start, so that
//! live bytes never go negative and the end state matches the snapshot's `segments`.
//!
//! # Python frames
//!
//! A snapshot frame is `(filename, line, name)`: each distinct one becomes an entry of the
//! trace's `python_frames` table, as the recorder writes the Python frames it reads
//! (`formats/SPEC.md` §3.2). Imports written before format version 2 encoded them as synthetic
//! modules whose path is `py:{filename}\t{name}`, loaded at an address no user-space program
//! uses, each frame at `load_address + line`; `vramtrace_format::conventions::python_frame`
//! still reads those back.

use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap};
use vramtrace_format::conventions::{ALLOCATOR_SEGMENT, BEFORE_HISTORY, REMAINDER};
use vramtrace_format::pickle::{Document, StrId, Value};
use vramtrace_format::{
    Api, Event, Metadata, NO_STACK, Pool, Process, PythonFrame, Stack, Stream, Tables, Thread,
    Trace,
};

/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub const CUDA_ERROR_OUT_OF_MEMORY: u32 = 2;

/// The process and thread id of imported events: a snapshot does not say which process made it.
pub const SNAPSHOT_PID: u32 = 1;

/// One segment the recorded caching allocator obtained from the driver: a `cudaMalloc`
/// (`segment_alloc`) or, with expandable segments, one mapping (`segment_map`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct SegmentAlloc {
    pub time_ns: u64,
    pub device: i32,
    pub stream: u64,
    pub size: u64,
}

/// The segments the allocator obtained while its history was recorded, in order: what a replay
/// of the `pytorch` policy over the same requests must reproduce (compare them with
/// [`crate::diff::compare_segments`]). Segments live before the history are left out.
pub fn recorded_segment_allocs(events: impl IntoIterator<Item = Event>) -> Vec<SegmentAlloc> {
    events
        .into_iter()
        .filter(|e| {
            e.flags & ALLOCATOR_SEGMENT != 0
                && e.flags & (BEFORE_HISTORY | REMAINDER) == 0
                && e.succeeded()
                && matches!(e.api, Api::CuMemAlloc_v2 | Api::CuMemCreate)
        })
        .map(|e| SegmentAlloc {
            time_ns: e.time_ns,
            device: e.device,
            stream: e.stream,
            size: e.size,
        })
        .collect()
}

/// Why a snapshot could not be imported: what is wrong, and where in the snapshot
/// (`device_traces[0][12] has no action`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a PyTorch memory snapshot: {0}")]
pub struct ImportError(pub String);

fn bad(what: impl Into<String>) -> ImportError {
    ImportError(what.into())
}

/// What an import made and skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ImportReport {
    /// Trace entries read, by action.
    pub actions: BTreeMap<String, u64>,
    /// Devices with a trace.
    pub devices: u64,
    /// Allocations added at the start for memory live before the first entry.
    pub preexisting: u64,
    pub events: u64,
    pub stacks: u64,
    pub frames: u64,
    /// True when entries had no `time_us` and their order stands in for time.
    pub synthetic_times: bool,
}

/// A snapshot as trace content.
#[derive(Debug, Clone)]
pub struct Imported {
    pub metadata: Metadata,
    pub tables: Tables,
    pub events: Vec<Event>,
    pub report: ImportReport,
}

impl Imported {
    /// Writes it as a `.vramtrace` trace into `out`.
    pub fn write<W: std::io::Write>(&self, out: W) -> vramtrace_format::Result<W> {
        write_trace(out, &self.metadata, &self.tables, &self.events)
    }

    /// The trace that [`Imported::write`] and reading the bytes back would give, made in
    /// memory ([`Trace::in_memory`]): what `vramtrace report` analyses of a snapshot.
    pub fn into_trace(self) -> Trace {
        Trace::in_memory(self.metadata, self.tables, &self.events)
    }
}

/// Imported trace content (of a snapshot or any other import) as a `.vramtrace` trace in `out`.
pub fn write_trace<W: std::io::Write>(
    out: W,
    metadata: &Metadata,
    tables: &Tables,
    events: &[Event],
) -> vramtrace_format::Result<W> {
    let mut w = vramtrace_format::TraceWriter::new(
        out,
        metadata,
        vramtrace_format::WriterOptions::default(),
    )?;
    w.tables_mut().extend(tables.clone());
    for e in events {
        w.push(e)?;
    }
    w.finish()
}

/// Converts an unpickled snapshot. `source` names the file for the process table.
pub fn import(doc: &Document<'_>, source: &str) -> Result<Imported, ImportError> {
    let root = doc.root();
    // `_memory_viz` accepts a bare list of segments from old versions, and so does this.
    let (segments, traces) = match root {
        Value::List(_) => (doc.items(root).unwrap_or(&[]), &[][..]),
        Value::Dict(_) => {
            let segments = match doc.get(root, "segments") {
                Some(v) => doc
                    .items(v)
                    .ok_or_else(|| bad("`segments` is not a list"))?,
                None => &[][..],
            };
            let traces = match doc.get(root, "device_traces") {
                Some(v) => doc
                    .items(v)
                    .ok_or_else(|| bad("`device_traces` is not a list"))?,
                None => &[][..],
            };
            if doc.get(root, "segments").is_none() && doc.get(root, "device_traces").is_none() {
                return Err(bad(
                    "the top-level dict has neither `segments` nor `device_traces`",
                ));
            }
            (segments, traces)
        }
        other => return Err(bad(format!("the top level is a {}", other.type_name()))),
    };
    let mut b = Builder::new(doc);
    let entries = b.entries(traces)?;
    b.events_from(&entries)?;
    b.end_state(segments)?;
    // Pre-existing memory first, in the order found, then everything else in time order
    // (stable: entries of one time keep their order, devices in their order). The rest was
    // made in entry order, so a stable sort by time is that order, and a history whose times
    // never go back (one device's) needs none.
    let mut rest = std::mem::take(&mut b.events);
    if !rest.is_sorted_by_key(|e| e.time_ns) {
        rest.par_sort_by_key(|e| e.time_ns);
    }
    // In place: the few early events go in front of the many (`events_from` reserved room).
    let early = std::mem::take(&mut b.early);
    rest.reserve(early.len());
    rest.splice(0..0, early);
    let mut events = rest;
    events
        .par_iter_mut()
        .enumerate()
        .for_each(|(i, e)| e.seq = i as u64 + 1);

    let mut tables = b.tables;
    tables.processes.push(Process {
        pid: SNAPSHOT_PID,
        parent_pid: 0,
        command_line: vec!["<pytorch snapshot>".into(), source.into()],
        start_unix_ns: 0,
        start_monotonic_ns: 0,
    });
    tables.threads.push(Thread {
        tid: SNAPSHOT_PID,
        pid: SNAPSHOT_PID,
        name: String::new(),
    });
    tables.streams = distinct(events.iter().map(|e| (e.stream, e.device)))
        .into_iter()
        .map(|(handle, device)| Stream {
            handle,
            device,
            per_thread_default: false,
        })
        .collect();
    tables.pools = distinct(
        events
            .iter()
            .filter(|e| e.pool != 0)
            .map(|e| (e.pool, e.device)),
    )
    .into_iter()
    .map(|(handle, device)| Pool {
        handle,
        device,
        allocation_type: 1,
        max_size: 0,
    })
    .collect();

    let mut report = b.report;
    report.devices = traces.len() as u64;
    report.events = events.len() as u64;
    report.stacks = tables.stacks.len() as u64;
    report.frames = tables.python_frames.len() as u64;
    Ok(Imported {
        metadata: Metadata {
            writer: format!(
                "vramtrace {} import (PyTorch memory snapshot)",
                env!("CARGO_PKG_VERSION")
            ),
            host: String::new(),
            driver_version: 0,
            environment: allocator_environment(doc, root),
            capture_level: "request".into(),
        },
        tables,
        events,
        report,
    })
}

/// The distinct `(handle, device)` pairs of `pairs`, sorted; one set insert per run of equal
/// pairs (events come in long runs of one stream).
fn distinct(pairs: impl Iterator<Item = (u64, i32)>) -> std::collections::BTreeSet<(u64, i32)> {
    let mut set = std::collections::BTreeSet::new();
    let mut last = None;
    for p in pairs {
        if last != Some(p) {
            set.insert(p);
            last = Some(p);
        }
    }
    set
}

/// `PYTORCH_CUDA_ALLOC_CONF` as the snapshot's `allocator_settings` describe it, so that a
/// replay of the `pytorch` policy can use the same settings. Always present, empty for the
/// default configuration (and for snapshots older than `allocator_settings`): a snapshot is
/// PyTorch's caching allocator by definition, and the variable is how the analyzer tells the
/// framework a trace came from (`tune::framework`).
fn allocator_environment(doc: &Document<'_>, root: &Value) -> Vec<(String, String)> {
    let conf = |c: String| vec![("PYTORCH_CUDA_ALLOC_CONF".to_string(), c)];
    let Some(settings) = doc.get(root, "allocator_settings") else {
        return conf(String::new());
    };
    let mut setting = doc
        .get(settings, "PYTORCH_CUDA_ALLOC_CONF")
        .and_then(|v| doc.as_str(v))
        .unwrap_or("")
        .to_string();
    let expandable = doc
        .get(settings, "expandable_segments")
        .and_then(|v| doc.as_bool(v))
        .unwrap_or(false);
    if expandable && !setting.contains("expandable_segments") {
        if !setting.is_empty() {
            setting.push(',');
        }
        setting.push_str("expandable_segments:True");
    }
    conf(setting)
}

/// One trace entry, decoded.
#[derive(Clone, Copy)]
struct Entry<'d> {
    device: i32,
    action: &'d str,
    addr: u64,
    size: u64,
    stream: u64,
    pool: u64,
    time_ns: u64,
    frames: Option<&'d Value>,
    device_free: u64,
}

/// The hasher of the import's maps (one lookup or more per trace entry): fast, and seeded at
/// random as the model's, so that a crafted snapshot cannot aim at collisions.
type Fast = foldhash::fast::RandomState;

/// A live range of the reconstruction, to find memory live before the history began.
#[derive(Clone, Copy)]
struct Live {
    size: u64,
    handle: u64,
}

struct Builder<'d> {
    doc: &'d Document<'d>,
    tables: Tables,
    /// Events of memory live before the history began (order 0), in the order found.
    early: Vec<Event>,
    /// The other events, in the order of the entries that made them.
    events: Vec<Event>,
    report: ImportReport,
    first_time_ns: u64,
    /// Per container of the document (by [`vramtrace_format::pickle::Id`]): the frame id of a
    /// frame dict, once known (0: not yet).
    frame_of_dict: Vec<u32>,
    /// Per container: the stack of a frame list, once known (0: not yet). A real snapshot's
    /// entries share one list per distinct traceback.
    stack_of_list: Vec<u32>,
    /// The stack of a frame list's items: most trace entries have a list of their own, of
    /// frame dicts shared with other entries.
    stack_of_items: HashMap<&'d [Value], u32, Fast>,
    /// The same by the place of the items (their address and length): equal places are
    /// equal items.
    stack_of_span: HashMap<(usize, usize), u32, Fast>,
    stack_of_frames: HashMap<Vec<u32>, u32, Fast>,
    frame_of_line: HashMap<(&'d str, &'d str, u32), u32, Fast>,
    /// Live requests, segments and mappings per device, by address.
    requests: HashMap<(i32, u64), Live, Fast>,
    segments: HashMap<(i32, u64), Live, Fast>,
    mappings: BTreeMap<(i32, u64), Live>,
    next_handle: u64,
}

impl<'d> Builder<'d> {
    fn new(doc: &'d Document<'d>) -> Self {
        Builder {
            doc,
            tables: Tables::default(),
            early: Vec::new(),
            events: Vec::new(),
            report: ImportReport::default(),
            first_time_ns: 0,
            frame_of_dict: vec![0; doc.containers()],
            stack_of_list: vec![0; doc.containers()],
            stack_of_items: HashMap::default(),
            stack_of_span: HashMap::default(),
            stack_of_frames: HashMap::default(),
            frame_of_line: HashMap::default(),
            requests: HashMap::default(),
            segments: HashMap::default(),
            mappings: BTreeMap::new(),
            next_handle: 1,
        }
    }

    fn int(&self, d: &Value, key: &str) -> Option<u64> {
        self.doc.get(d, key).and_then(|v| self.doc.as_u64(v))
    }

    fn entries(&mut self, traces: &'d [Value]) -> Result<Vec<Entry<'d>>, ImportError> {
        let doc = self.doc;
        let keys = EntryKeys::of(doc);
        let mut out = Vec::new();
        let mut timed = true;
        // Counted by the action's string, named once at the end.
        let mut actions: HashMap<StrId, u64, Fast> = HashMap::default();
        for (device, list) in traces.iter().enumerate() {
            let list = doc
                .items(list)
                .ok_or_else(|| bad(format!("device_traces[{device}] is not a list")))?;
            // Each entry is read on its own, in parallel; what they add up to, in order.
            let (mut entries, found): (Vec<Entry<'d>>, Vec<(Option<StrId>, bool)>) = list
                .par_iter()
                .map(|e| keys.entry(doc, device as i32, e))
                .unzip();
            for (i, (action, time)) in found.into_iter().enumerate() {
                let action = action
                    .ok_or_else(|| bad(format!("device_traces[{device}][{i}] has no action")))?;
                *actions.entry(action).or_default() += 1;
                timed &= time;
            }
            if out.is_empty() {
                out = entries;
            } else {
                out.append(&mut entries);
            }
        }
        for (action, n) in actions {
            *self
                .report
                .actions
                .entry(doc.text(action).to_string())
                .or_default() += n;
        }
        if !timed {
            // Without times, order stands in for time, 1 µs apart.
            self.report.synthetic_times = true;
            for (i, e) in out.iter_mut().enumerate() {
                e.time_ns = (i as u64 + 1) * 1000;
            }
        }
        self.first_time_ns = out.iter().map(|e| e.time_ns).min().unwrap_or(1000);
        Ok(out)
    }

    /// Adds the event of `e`: before the history (`order` 0), or as made by the `order`th
    /// entry (1, 2, ...; entries push in order).
    fn push(&mut self, order: u64, e: Entry<'d>, api: Api, flags: u64) -> &mut Event {
        let stack = self.stack(e.frames);
        let ev = Event {
            time_ns: e.time_ns,
            pid: SNAPSHOT_PID,
            tid: SNAPSHOT_PID,
            device: e.device,
            address: e.addr,
            size: e.size,
            stream: e.stream,
            pool: e.pool,
            flags,
            stack,
            ..Event::new(api)
        };
        let to = if order == 0 {
            &mut self.early
        } else {
            &mut self.events
        };
        to.push(ev);
        to.last_mut().expect("just pushed")
    }

    /// An allocation that existed before the history began, placed before its first entry.
    fn preexisting(&mut self, e: Entry<'d>, api: Api, flags: u64) -> &mut Event {
        self.report.preexisting += 1;
        let at = self.first_time_ns.saturating_sub(1);
        self.push(0, Entry { time_ns: at, ..e }, api, flags | BEFORE_HISTORY)
    }

    fn events_from(&mut self, entries: &[Entry<'d>]) -> Result<(), ImportError> {
        self.events.reserve(entries.len());
        vramtrace_format::huge_pages::advise_huge_pages(&mut self.events);
        for (i, e) in entries.iter().enumerate() {
            let order = i as u64 + 1;
            let key = (e.device, e.addr);
            let copy = || *e;
            match e.action {
                "alloc" => {
                    self.requests.insert(
                        key,
                        Live {
                            size: e.size,
                            handle: 0,
                        },
                    );
                    self.push(order, copy(), Api::CuMemAllocAsync, 0);
                }
                "free_completed" => {
                    if self.requests.remove(&key).is_none() {
                        self.preexisting(copy(), Api::CuMemAllocAsync, 0);
                    }
                    self.push(order, copy(), Api::CuMemFreeAsync, 0);
                }
                "oom" => {
                    let ev = self.push(order, Entry { addr: 0, ..copy() }, Api::CuMemAllocAsync, 0);
                    ev.result = CUDA_ERROR_OUT_OF_MEMORY;
                    ev.aux = e.device_free;
                }
                "segment_alloc" => {
                    self.segments.insert(
                        key,
                        Live {
                            size: e.size,
                            handle: 0,
                        },
                    );
                    self.push(order, copy(), Api::CuMemAlloc_v2, ALLOCATOR_SEGMENT);
                }
                "segment_free" => {
                    if self.segments.remove(&key).is_none() {
                        self.preexisting(copy(), Api::CuMemAlloc_v2, ALLOCATOR_SEGMENT);
                    }
                    self.push(order, copy(), Api::CuMemFree_v2, ALLOCATOR_SEGMENT);
                }
                "segment_map" => self.map(order, copy(), 0),
                "segment_unmap" => self.unmap(order, copy()),
                // free_requested: the request ends when the block is reusable (free_completed).
                // snapshot, annotate and future actions carry no memory change.
                _ => {}
            }
        }
        Ok(())
    }

    /// Pushes `cuMemCreate` + `cuMemMap` for a mapping and returns its handle.
    fn map_events(&mut self, order: u64, e: Entry<'d>, extra: u64) -> u64 {
        let handle = self.next_handle;
        self.next_handle += 1;
        let flags = ALLOCATOR_SEGMENT | extra;
        self.push(order, Entry { addr: 0, ..e }, Api::CuMemCreate, flags)
            .handle = handle;
        self.push(order, e, Api::CuMemMap, flags).handle = handle;
        handle
    }

    fn map(&mut self, order: u64, e: Entry<'d>, extra: u64) {
        let handle = self.map_events(order, e, extra);
        self.mappings.insert(
            (e.device, e.addr),
            Live {
                size: e.size,
                handle,
            },
        );
    }

    /// Unmaps `[addr, addr + size)`: every mapping it overlaps is released, and the parts of
    /// them outside the range are mapped again as new handles, so reserved bytes drop by
    /// exactly the unmapped amount. Bytes of the range that no recorded mapping covers were
    /// mapped before the history began: they are added at the start.
    fn unmap(&mut self, order: u64, e: Entry<'d>) {
        let (dev, start, end) = (e.device, e.addr, e.addr.saturating_add(e.size));
        let mut pieces: Vec<(u64, Live)> = self
            .mappings
            .range((dev, 0)..(dev, end))
            .filter(|((_, a), l)| a.saturating_add(l.size) > start)
            .map(|((_, a), l)| (*a, *l))
            .collect();
        let covered: u64 = pieces
            .iter()
            .map(|(a, l)| end.min(a + l.size) - start.max(*a))
            .sum();
        if covered < e.size {
            self.report.preexisting += 1;
            let missing = Entry {
                time_ns: self.first_time_ns.saturating_sub(1),
                size: e.size - covered,
                ..e
            };
            let handle = self.map_events(0, missing, BEFORE_HISTORY);
            pieces.push((
                start,
                Live {
                    size: missing.size,
                    handle,
                },
            ));
        }
        for (a, l) in pieces {
            self.mappings.remove(&(dev, a));
            let unmap = self.push(
                order,
                Entry {
                    addr: a.max(start),
                    size: end.min(a + l.size) - a.max(start),
                    ..e
                },
                Api::CuMemUnmap,
                ALLOCATOR_SEGMENT,
            );
            unmap.handle = l.handle;
            let release = self.push(
                order,
                Entry {
                    addr: 0,
                    size: l.size,
                    ..e
                },
                Api::CuMemRelease,
                ALLOCATOR_SEGMENT,
            );
            release.handle = l.handle;
            // What stays mapped on either side becomes a mapping of its own.
            for (lo, hi) in [(a, start), (end, a + l.size)] {
                if hi > lo {
                    let rest = Entry {
                        addr: lo,
                        size: hi - lo,
                        ..e
                    };
                    self.map(order, rest, REMAINDER);
                }
            }
        }
    }

    /// Adds memory that the final `segments` show live but the history never allocated.
    fn end_state(&mut self, segments: &'d [Value]) -> Result<(), ImportError> {
        let doc = self.doc;
        for (i, seg) in segments.iter().enumerate() {
            let device = self
                .int(seg, "device")
                .map_or(0, |d| i32::try_from(d).unwrap_or(0));
            let address = self
                .int(seg, "address")
                .ok_or_else(|| bad(format!("segments[{i}] has no address")))?;
            let total = self.int(seg, "total_size").unwrap_or(0);
            let stream = self.int(seg, "stream").unwrap_or(0);
            let expandable = doc
                .get(seg, "is_expandable")
                .and_then(|v| doc.as_bool(v))
                .unwrap_or(false);
            let base = Entry {
                device,
                action: "segment",
                addr: address,
                size: total,
                stream,
                pool: 0,
                time_ns: 0,
                frames: doc.get(seg, "frames"),
                device_free: 0,
            };
            if expandable {
                let mapped = self
                    .mappings
                    .range((device, address)..(device, address.saturating_add(total)))
                    .next()
                    .is_some();
                if !mapped && total > 0 {
                    self.report.preexisting += 1;
                    let at = self.first_time_ns.saturating_sub(1);
                    self.map(
                        0,
                        Entry {
                            time_ns: at,
                            ..base
                        },
                        BEFORE_HISTORY,
                    );
                }
            } else if !self.segments.contains_key(&(device, address)) {
                self.preexisting(base, Api::CuMemAlloc_v2, ALLOCATOR_SEGMENT);
            }
            let blocks = doc
                .get(seg, "blocks")
                .and_then(|b| doc.items(b))
                .unwrap_or(&[]);
            let mut block_addr = address;
            for blk in blocks {
                let size = self.int(blk, "size").unwrap_or(0);
                let addr = self.int(blk, "address").unwrap_or(block_addr);
                block_addr = addr.saturating_add(size);
                let state = doc
                    .get(blk, "state")
                    .and_then(|v| doc.as_str(v))
                    .unwrap_or("");
                let live = state == "active_allocated"
                    || state == "active_pending_free"
                    || state == "active_awaiting_free";
                if live && !self.requests.contains_key(&(device, addr)) {
                    self.preexisting(
                        Entry {
                            addr,
                            size,
                            frames: doc.get(blk, "frames"),
                            ..base
                        },
                        Api::CuMemAllocAsync,
                        0,
                    );
                }
            }
        }
        Ok(())
    }

    /// The stack id of a snapshot frame list, interning lists of the same frames once.
    fn stack(&mut self, frames: Option<&'d Value>) -> u32 {
        let Some(items) = frames.and_then(|l| self.doc.items(l)) else {
            return NO_STACK;
        };
        if items.is_empty() {
            return NO_STACK;
        }
        let list = frames.and_then(Value::id);
        if let Some(&s) = list.and_then(|l| self.stack_of_list.get(l.index()))
            && s != 0
        {
            return s;
        }
        // Lists of equal items mostly share one span of the document's arena (`Document`'s
        // invariant), so the span's place finds most stacks without hashing the items.
        let span = (items.as_ptr() as usize, items.len());
        let known = match self.stack_of_span.get(&span) {
            Some(&s) => Some(s),
            None => self.stack_of_items.get(items).copied().inspect(|&s| {
                self.stack_of_span.insert(span, s);
            }),
        };
        if let Some(s) = known {
            if let Some(known) = list.and_then(|l| self.stack_of_list.get_mut(l.index())) {
                *known = s;
            }
            return s;
        }
        let ids: Vec<u32> = items.iter().map(|f| self.frame(f)).collect();
        let stack = match self.stack_of_frames.get(&ids) {
            Some(&s) => s,
            None => {
                let s = self.tables.stacks.len() as u32 + 1;
                self.tables.stacks.push(Stack {
                    id: s,
                    frames: ids.clone(),
                });
                self.stack_of_frames.insert(ids, s);
                s
            }
        };
        self.stack_of_items.insert(items, stack);
        self.stack_of_span.insert(span, stack);
        if let Some(known) = list.and_then(|l| self.stack_of_list.get_mut(l.index())) {
            *known = stack;
        }
        stack
    }

    fn frame(&mut self, f: &'d Value) -> u32 {
        let key = f.id();
        if let Some(&id) = key.and_then(|k| self.frame_of_dict.get(k.index()))
            && id != 0
        {
            return id;
        }
        let doc = self.doc;
        let text =
            |k: &str| -> &'d str { doc.get(f, k).and_then(|v| doc.as_str(v)).unwrap_or("??") };
        let (file, name) = (text("filename"), text("name"));
        let line = doc
            .get(f, "line")
            .and_then(|v| doc.as_u64(v))
            .and_then(|l| u32::try_from(l).ok())
            .unwrap_or(0);
        let frames = &mut self.tables.python_frames;
        let id = *self
            .frame_of_line
            .entry((file, name, line))
            .or_insert_with(|| {
                let id = frames.len() as u32 + 1;
                frames.push(PythonFrame {
                    id,
                    file: file.to_string(),
                    function: name.to_string(),
                    line,
                    module: vramtrace_format::conventions::module_of_file(file),
                });
                id
            });
        if let Some(k) = key.and_then(|k| self.frame_of_dict.get_mut(k.index())) {
            *k = id;
        }
        id
    }
}

/// The interned keys of a trace entry's fields (`None` when no string of the pickle is that
/// key, so no entry has the field).
struct EntryKeys {
    action: Option<StrId>,
    addr: Option<StrId>,
    size: Option<StrId>,
    stream: Option<StrId>,
    time_us: Option<StrId>,
    frames: Option<StrId>,
    device_free: Option<StrId>,
    pool_id: Option<StrId>,
}

impl EntryKeys {
    /// Trace entry `e` of device `device`, read in one pass over its fields matched by their
    /// interned key; with its action, if it has one, and whether it has a `time_us`.
    fn entry<'d>(
        &self,
        doc: &'d Document<'d>,
        device: i32,
        e: &'d Value,
    ) -> (Entry<'d>, (Option<StrId>, bool)) {
        let mut entry = Entry {
            device,
            action: "",
            addr: 0,
            size: 0,
            stream: 0,
            pool: 0,
            time_ns: 0,
            frames: None,
            device_free: 0,
        };
        let (mut action, mut time) = (None, None);
        let int = |v: &Value| doc.as_u64(v);
        for (k, v) in doc.entries(e).into_iter().flatten() {
            let Value::Str(k) = *k else { continue };
            let k = Some(k);
            if k == self.action {
                action = match *v {
                    Value::Str(a) => Some(a),
                    _ => None,
                };
            } else if k == self.addr {
                entry.addr = int(v).unwrap_or(0);
            } else if k == self.size {
                entry.size = int(v).unwrap_or(0);
            } else if k == self.stream {
                entry.stream = int(v).unwrap_or(0);
            } else if k == self.time_us {
                time = int(v);
            } else if k == self.frames {
                entry.frames = Some(v);
            } else if k == self.device_free {
                entry.device_free = int(v).unwrap_or(0);
            } else if k == self.pool_id {
                entry.pool = doc
                    .items(v)
                    .map(|p| {
                        let part = |i: usize| p.get(i).and_then(int).unwrap_or(0);
                        (part(0) << 32) | (part(1) & 0xffff_ffff)
                    })
                    .unwrap_or(0);
            }
        }
        if let Some(a) = action {
            entry.action = doc.text(a);
        }
        entry.time_ns = time.unwrap_or(0).saturating_mul(1000);
        (entry, (action, time.is_some()))
    }

    fn of(doc: &Document<'_>) -> EntryKeys {
        EntryKeys {
            action: doc.str_id("action"),
            addr: doc.str_id("addr"),
            size: doc.str_id("size"),
            stream: doc.str_id("stream"),
            time_us: doc.str_id("time_us"),
            frames: doc.str_id("frames"),
            device_free: doc.str_id("device_free"),
            pool_id: doc.str_id("pool_id"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramtrace_format::pickle;

    const SNAPSHOT: &[u8] =
        include_bytes!("../../../formats/src/pickle/testdata/snapshot-like-p4.pickle");

    #[test]
    fn a_snapshot_maps_requests_segments_and_ooms() {
        let doc = pickle::read(SNAPSHOT).unwrap();
        let imp = import(&doc, "s.pickle").unwrap();
        let apis: Vec<(Api, bool)> = imp
            .events
            .iter()
            .map(|e| (e.api, e.flags & ALLOCATOR_SEGMENT != 0))
            .collect();
        assert_eq!(
            apis,
            [
                (Api::CuMemAlloc_v2, true),
                (Api::CuMemAllocAsync, false),
                (Api::CuMemAllocAsync, false),
                (Api::CuMemFreeAsync, false),
                (Api::CuMemAllocAsync, false),
            ]
        );
        let oom = imp.events[4];
        assert_eq!(oom.result, CUDA_ERROR_OUT_OF_MEMORY);
        assert_eq!(oom.size, 1 << 40);
        assert_eq!(oom.aux, 123);
        assert_eq!(imp.events[1].time_ns, 1_001_000);
        assert_eq!(imp.report.preexisting, 0);
        assert_eq!(imp.report.actions["free_requested"], 1);
        // Two distinct frames, two distinct stacks ([f1, f2] and [f2]).
        assert!(imp.tables.frames.is_empty() && imp.tables.modules.is_empty());
        assert_eq!(imp.tables.python_frames.len(), 2);
        assert_eq!(imp.tables.stacks.len(), 2);
        assert_eq!(imp.tables.stacks[0].frames, [1, 2]);
        assert_eq!(imp.metadata.capture_level, "request");
    }

    /// The in-memory trace of an import is the one its file would read back as: every event,
    /// table and metadata field, and the events chunks' span.
    #[test]
    fn the_in_memory_trace_is_the_written_one_read_back() {
        let mut doc = Document::new();
        let root = doc.new_dict();
        let traces = doc.new_list();
        let dev0 = doc.new_list();
        doc.push(&traces, dev0);
        let frame = doc.new_dict();
        doc.set_str(&frame, "filename", "train.py");
        doc.set_str(&frame, "name", "step");
        doc.set_int(&frame, "line", 7);
        let frames = doc.new_list();
        doc.push(&frames, frame);
        // More events than one chunk holds, so that the trace has several.
        let n = vramtrace_format::WriterOptions::default().chunk_events as u64 + 1000;
        for i in 0..n {
            let (action, addr) = if i % 2 == 0 {
                ("alloc", 0x1000 + i * 512)
            } else {
                ("free_completed", 0x1000 + (i - 1) * 512)
            };
            let e = doc.new_dict();
            doc.set_str(&e, "action", action);
            doc.set_int(&e, "addr", addr);
            doc.set_int(&e, "size", 512);
            doc.set_int(&e, "stream", -7);
            doc.set_int(&e, "time_us", 1_000_000 + i);
            doc.set(&e, "frames", frames);
            doc.push(&dev0, e);
        }
        doc.set(&root, "device_traces", traces);
        doc.set_root(root);
        for imp in [
            import(&doc, "big.pickle").unwrap(),
            import(&pickle::read(SNAPSHOT).unwrap(), "s.pickle").unwrap(),
        ] {
            let bytes = imp.write(Vec::new()).unwrap();
            let read = Trace::from_bytes(&bytes, vramtrace_format::ReadOptions::default()).unwrap();
            let made = imp.into_trace();
            assert_eq!(made.metadata, read.metadata);
            assert_eq!(made.tables, read.tables);
            assert_eq!(
                made.events().collect::<Vec<_>>(),
                read.events().collect::<Vec<_>>()
            );
            assert!(made.layout.complete && read.layout.complete);
            // The writer splits runs as regular as these into smaller chunks than the default
            // (`FREE_CHUNK_EVENTS`); what the analyses read of the chunks is their span.
            let span = |t: &Trace| {
                let c = t.layout.chunks.iter().filter(|c| c.event_count > 0);
                (
                    c.clone().map(|c| u64::from(c.event_count)).sum::<u64>(),
                    c.clone().map(|c| c.first_time_ns).min(),
                    c.map(|c| c.last_time_ns).max(),
                )
            };
            assert_eq!(span(&made), span(&read));
            assert_eq!(span(&made).0, made.event_count());
        }
    }

    #[test]
    fn memory_live_before_the_history_is_added_at_the_start() {
        let mut doc = Document::new();
        let root = doc.new_dict();
        let traces = doc.new_list();
        let dev0 = doc.new_list();
        doc.push(&traces, dev0);
        for (action, addr, size, t) in [
            ("free_completed", 0x1000u64, 512u64, 10u64),
            ("segment_unmap", 0x20000, 4096, 11),
        ] {
            let e = doc.new_dict();
            let fields = [
                ("action", doc.new_str(action)),
                ("addr", doc.new_int(addr)),
                ("size", doc.new_int(size)),
                ("stream", Value::Small(0)),
                ("time_us", doc.new_int(t)),
            ];
            for (k, v) in fields {
                doc.set(&e, k, v);
            }
            doc.push(&dev0, e);
        }
        doc.set(&root, "device_traces", traces);
        let segs = doc.new_list();
        doc.set(&root, "segments", segs);
        doc.set_root(root);
        let imp = import(&doc, "x").unwrap();
        assert_eq!(imp.report.preexisting, 2);
        let apis: Vec<Api> = imp.events.iter().map(|e| e.api).collect();
        assert_eq!(
            apis,
            [
                Api::CuMemAllocAsync,
                Api::CuMemCreate,
                Api::CuMemMap,
                Api::CuMemFreeAsync,
                Api::CuMemUnmap,
                Api::CuMemRelease,
            ]
        );
        assert!(imp.events[0].time_ns < 10_000);
    }

    #[test]
    fn partial_unmaps_release_exactly_the_unmapped_bytes() {
        let mut doc = Document::new();
        let root = doc.new_dict();
        let traces = doc.new_list();
        let dev0 = doc.new_list();
        doc.push(&traces, dev0);
        for (action, addr, size) in [
            ("segment_map", 0x10000u64, 3 * 4096u64),
            ("segment_unmap", 0x10000 + 4096, 4096),
        ] {
            let e = doc.new_dict();
            let fields = [
                ("action", doc.new_str(action)),
                ("addr", doc.new_int(addr)),
                ("size", doc.new_int(size)),
            ];
            for (k, v) in fields {
                doc.set(&e, k, v);
            }
            doc.push(&dev0, e);
        }
        doc.set(&root, "device_traces", traces);
        doc.set_root(root);
        let imp = import(&doc, "x").unwrap();
        let created: i64 = imp
            .events
            .iter()
            .map(|e| match e.api {
                Api::CuMemCreate => e.size as i64,
                _ => 0,
            })
            .sum();
        let released: i64 = imp
            .events
            .iter()
            .filter(|e| e.api == Api::CuMemRelease)
            .map(|e| {
                imp.events
                    .iter()
                    .find(|c| c.api == Api::CuMemCreate && c.handle == e.handle)
                    .unwrap()
                    .size as i64
            })
            .sum();
        assert_eq!(created - released, 2 * 4096);
        assert!(imp.report.synthetic_times);
    }

    #[test]
    fn non_snapshots_are_refused_with_a_reason() {
        let doc = pickle::read(b"\x80\x04K\x05.").unwrap();
        assert_eq!(
            import(&doc, "x").unwrap_err().to_string(),
            "not a PyTorch memory snapshot: the top level is a int"
        );
        let doc = pickle::read(b"\x80\x04}.").unwrap();
        assert!(import(&doc, "x").is_err());
    }
}
