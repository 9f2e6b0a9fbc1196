//! The tables events refer to: processes, threads, devices, streams, pools, stacks, native
//! frames, modules and Python frames.
//!
//! A writer learns table entries while it runs (a new thread, a new stack, a `dlopen`), so the
//! file stores them as [`Tables`] deltas in table chunks, each holding only new entries; a reader
//! concatenates them in file order. Every entry is written before the first event chunk that
//! refers to it, which keeps a truncated file self-consistent.

use serde::{Deserialize, Serialize};

/// A traced process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Process {
    pub pid: u32,
    pub parent_pid: u32,
    /// `argv`, lossily converted to UTF-8.
    pub command_line: Vec<String>,
    /// Wall-clock start, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    /// `CLOCK_MONOTONIC` at the same instant, to convert event times to wall-clock time.
    pub start_monotonic_ns: u64,
}

/// A thread that made at least one hooked call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thread {
    pub tid: u32,
    pub pid: u32,
    /// The thread's name (`/proc/self/task/TID/comm`), possibly empty.
    pub name: String,
}

/// A CUDA device as the driver described it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    pub ordinal: i32,
    pub name: String,
    /// `CUuuid` bytes.
    pub uuid: [u8; 16],
    pub total_memory: u64,
    pub compute_capability: (u32, u32),
}

/// A stream seen in an event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stream {
    /// The `CUstream` handle value as events carry it.
    pub handle: u64,
    pub device: i32,
    /// True for the per-thread default stream.
    pub per_thread_default: bool,
}

/// A memory pool seen in an event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pool {
    /// The `CUmemoryPool` handle value as events carry it.
    pub handle: u64,
    pub device: i32,
    /// `CUmemAllocationType` of the pool's memory.
    pub allocation_type: u32,
    /// The pool's `maxSize`, 0 for unlimited.
    pub max_size: u64,
}

/// A distinct call stack, innermost frame first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stack {
    /// The id events carry; never [`crate::NO_STACK`].
    pub id: u32,
    /// Frame ids, innermost first: each names an entry of `frames` (native) or of
    /// `python_frames` (the two tables share one id space).
    pub frames: Vec<u32>,
}

/// A distinct native instruction address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    pub id: u32,
    /// Absolute instruction address in the traced process (a return address, already adjusted
    /// to point inside the call instruction).
    pub address: u64,
}

/// A loaded executable or shared library, for offline symbolization.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Module {
    pub id: u32,
    pub pid: u32,
    pub path: String,
    /// GNU build-id note contents, empty when the module has none.
    pub build_id: Vec<u8>,
    /// Address where the module's first byte (file offset 0) is mapped.
    pub load_address: u64,
    /// Bytes mapped from `load_address`.
    pub size: u64,
    /// `CLOCK_MONOTONIC` ns when the module was seen loaded.
    pub loaded_ns: u64,
    /// When it was seen unloaded, if it was.
    pub unloaded_ns: Option<u64>,
}

/// A Python source line a stack passed through (format version 2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PythonFrame {
    /// Shares the id space of [`Frame::id`].
    pub id: u32,
    /// The code object's `co_filename`, as the interpreter had it.
    pub file: String,
    /// The code object's `co_qualname` (`Model.forward`).
    pub function: String,
    /// 1-based source line; 0 when unknown.
    pub line: u32,
    /// The dotted module name the file belongs to, derived from its path
    /// ([`crate::conventions::module_of_file`]); empty when the path says nothing.
    pub module: String,
}

/// What a frame id of a [`Stack`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameRef<'t> {
    Native(u64),
    Python(&'t PythonFrame),
}

/// All table entries, or a delta of new entries in one table chunk.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tables {
    pub processes: Vec<Process>,
    pub threads: Vec<Thread>,
    pub devices: Vec<Device>,
    pub streams: Vec<Stream>,
    pub pools: Vec<Pool>,
    pub stacks: Vec<Stack>,
    pub frames: Vec<Frame>,
    pub modules: Vec<Module>,
    /// Empty in version-1 files.
    pub python_frames: Vec<PythonFrame>,
}

/// [`Tables`] as version 1 of the format stored them (no Python frames).
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct TablesV1 {
    processes: Vec<Process>,
    threads: Vec<Thread>,
    devices: Vec<Device>,
    streams: Vec<Stream>,
    pools: Vec<Pool>,
    stacks: Vec<Stack>,
    frames: Vec<Frame>,
    modules: Vec<Module>,
}

impl From<TablesV1> for Tables {
    fn from(v: TablesV1) -> Tables {
        Tables {
            processes: v.processes,
            threads: v.threads,
            devices: v.devices,
            streams: v.streams,
            pools: v.pools,
            stacks: v.stacks,
            frames: v.frames,
            modules: v.modules,
            python_frames: Vec::new(),
        }
    }
}

impl Tables {
    /// True when there is no entry in any table.
    pub fn is_empty(&self) -> bool {
        self.processes.is_empty()
            && self.threads.is_empty()
            && self.devices.is_empty()
            && self.streams.is_empty()
            && self.pools.is_empty()
            && self.stacks.is_empty()
            && self.frames.is_empty()
            && self.modules.is_empty()
            && self.python_frames.is_empty()
    }

    /// Appends every entry of `delta`.
    pub fn extend(&mut self, delta: Tables) {
        self.processes.extend(delta.processes);
        self.threads.extend(delta.threads);
        self.devices.extend(delta.devices);
        self.streams.extend(delta.streams);
        self.pools.extend(delta.pools);
        self.stacks.extend(delta.stacks);
        self.frames.extend(delta.frames);
        self.modules.extend(delta.modules);
        self.python_frames.extend(delta.python_frames);
    }

    /// Frame id → what it names, for looking up many stacks' frames.
    pub fn frame_index(&self) -> std::collections::HashMap<u32, FrameRef<'_>> {
        let native = self
            .frames
            .iter()
            .map(|f| (f.id, FrameRef::Native(f.address)));
        let python = self
            .python_frames
            .iter()
            .map(|f| (f.id, FrameRef::Python(f)));
        native.chain(python).collect()
    }

    /// The instruction addresses of a stack, innermost first, or `None` for an unknown id.
    pub fn stack_addresses(&self, stack: u32) -> Option<Vec<u64>> {
        let stack = self.stacks.iter().find(|s| s.id == stack)?;
        stack
            .frames
            .iter()
            .map(|f| {
                self.frames
                    .iter()
                    .find(|fr| fr.id == *f)
                    .map(|fr| fr.address)
            })
            .collect()
    }
}
