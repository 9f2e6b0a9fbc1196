//! The state that every hook and tracker entry reads, in one cache line.
//!
//! Between two allocator calls a training step runs kernel launches, Python and the framework's
//! own bookkeeping, which push the recorder's data out of the CPU's caches: each cache line the
//! hook path reads is then a miss, and those misses, not the instructions, make a tracker entry
//! cost several times as much in a real program as in a hot loop (recorder/BENCHMARKS.md,
//! "Where a tracker entry's time goes"). Statics spread over the library's data take a line
//! each; gathered here they take one (a simulated cache counts about 3 misses fewer a tensor).

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU16, AtomicU32, AtomicU64};

/// The fields; each is owned (written) by the module named beside it.
#[repr(C, align(64))]
pub struct Hot {
    /// Base of the journal mapping, null when not recording (`ring`).
    pub journal: AtomicPtr<u8>,
    /// Record slots in the journal, a power of two (`ring`).
    pub capacity: AtomicU64,
    /// A slot below this needs no look at the journal's `drained` cursor: `drained` plus the
    /// capacity, as last seen (`ring`).
    pub limit: AtomicU64,
    /// The `TraceEntry` layout of the PyTorch found, as `EntryLayout::to_word`; 0 before
    /// (`torch`).
    pub torch_entry: AtomicU64,
    /// This process's id, 0 until read (`clock`).
    pub pid: AtomicU32,
    /// Recording paused (`pause`).
    pub paused: AtomicBool,
    /// The kind of stack captured, `stacks::OFF` when none (`stacks`).
    pub stack_mode: AtomicU8,
    /// Frames a stack keeps, at most (`stacks`).
    pub max_depth: AtomicU16,
    /// The parts a bench build's variant leaves out (`bench`).
    #[cfg(feature = "bench")]
    pub bench_skip: AtomicU32,
}

const _: () = assert!(std::mem::size_of::<Hot>() == 64);

pub static HOT: Hot = Hot {
    journal: AtomicPtr::new(std::ptr::null_mut()),
    capacity: AtomicU64::new(0),
    limit: AtomicU64::new(0),
    torch_entry: AtomicU64::new(0),
    pid: AtomicU32::new(0),
    paused: AtomicBool::new(false),
    stack_mode: AtomicU8::new(0),
    max_depth: AtomicU16::new(0),
    #[cfg(feature = "bench")]
    bench_skip: AtomicU32::new(0),
};
