//! A switch that stops the hooks from recording, for measuring what recording costs inside one
//! process: a benchmark alternates recorded and paused stretches of the same program
//! (`samples/workloads/programs/pyframes_train.py --alternate`), so the process-to-process spread of a
//! shared machine, larger than the cost itself, cancels out (recorder/BENCHMARKS.md, "In one
//! process"). A paused stretch's allocations and frees are missing from the trace by design,
//! which makes it a measurement aid, not a way to record part of a run.
//!
//! From C: `int vramtrace_set_paused(int paused)`; from Python:
//! `ctypes.CDLL(None).vramtrace_set_paused(1)`. It returns the previous state.

use crate::hot::HOT;
use std::ffi::c_int;
use std::sync::atomic::Ordering;

/// Pauses (`paused != 0`) or resumes recording in this process; returns 1 if it was paused.
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_set_paused(paused: c_int) -> c_int {
    c_int::from(HOT.paused.swap(paused != 0, Ordering::Relaxed))
}

/// True while recording is paused.
#[inline]
pub fn paused() -> bool {
    HOT.paused.load(Ordering::Relaxed)
}
