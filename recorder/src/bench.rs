//! Bench builds only (`cargo build --release -p vramtrace-recorder --features bench`): switches
//! that take one part of the hook path out at a time, so that a benchmark can alternate the
//! variants in blocks of one process and measure what each part costs in the real program's
//! cold caches (`samples/workloads/programs/recorder_parts.py`, recorder/BENCHMARKS.md "Where a
//! tensor's recording time goes"). A variant's trace is wrong by design (no times, no stacks,
//! no events): a measurement aid, never a recording. Without the feature every switch is a
//! constant `false` and compiles away.
//!
//! From Python: `ctypes.CDLL(None).vramtrace_bench_skip(MASK)`, which returns the previous mask.
//! The same mask switches the per-part timing of `stamps` on ([`STAMPS`], [`WHOLE`]).

/// The clock reads give 0 (`clock::now`).
pub const CLOCK: u32 = 1;
/// The clock reads give the raw time-stamp counter (`rdtsc`) instead of the vDSO's
/// nanoseconds: what a TSC stored on the hook path would cost.
pub const TSC: u32 = 2;
/// No stack at all (`stacks::capture` returns at once, as with `--stacks none`).
pub const STACK: u32 = 4;
/// The thread's stack block is taken, but no Python frame is walked (so nothing is interned).
pub const WALK: u32 = 8;
/// The Python frames are walked, but not interned (the event gets no stack).
pub const INTERN: u32 = 16;
/// The autograd node of an engine thread's capture is not read.
pub const NODE: u32 = 32;
/// The record is built but not written into the journal (`ring::push` returns at once).
pub const PUSH: u32 = 64;
/// A tracker entry is decoded, and then nothing else is done (no clock, stack or record).
pub const RECORD: u32 = 128;
/// Not a part left out but timing added: the tracker path's parts are timed (`stamps`).
#[cfg(feature = "bench")]
pub const STAMPS: u32 = 256;
/// With [`STAMPS`]: only the callback's start and end are stamped, its whole time charged to
/// one part (`stamps::Part::Whole`): the parts' sum checked with the fewest stamps.
#[cfg(feature = "bench")]
pub const WHOLE: u32 = 512;

/// Whether the running variant sets `flag` (a part left out, or [`STAMPS`], [`WHOLE`]).
#[inline(always)]
pub fn has(flag: u32) -> bool {
    #[cfg(feature = "bench")]
    {
        crate::hot::HOT
            .bench_skip
            .load(std::sync::atomic::Ordering::Relaxed)
            & flag
            != 0
    }
    #[cfg(not(feature = "bench"))]
    {
        let _ = flag;
        false
    }
}

/// Sets the variant (an or of the constants above); returns the previous mask.
#[cfg(feature = "bench")]
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_bench_skip(mask: u32) -> u32 {
    crate::hot::HOT
        .bench_skip
        .swap(mask, std::sync::atomic::Ordering::Relaxed)
}
