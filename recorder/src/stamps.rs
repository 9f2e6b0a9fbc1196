//! Bench builds only: what each part of the tracker callback's path costs in the real program,
//! timed with the time-stamp counter at the parts' boundaries and summed per thread
//! (`samples/workloads/programs/recorder_parts.py`, recorder/BENCHMARKS.md "Where the time goes,
//! by the counters"). Without the feature every function here does nothing and compiles away;
//! in a bench build they do nothing either until the variant sets [`bench::STAMPS`].
//!
//! A thread's path is a run of parts: [`begin`] starts the first, [`enter`] ends the running
//! one and starts another, returning the one it ended so that a callee can hand the time back
//! to its caller's part ([`enter`] again), and [`end`] ends the last ([`bench::WHOLE`]: only
//! [`begin`] and [`end`] stamp, into [`Part::Whole`]). A thread outside a begun
//! path (a driver hook) times nothing. Each boundary is one `rdtscp`, which waits until the
//! instructions before it have executed and their loads completed, so a load's miss is charged
//! to the part that made it. Stores retire into the store buffer and complete later: their
//! misses are charged where the buffer drains: the next locked instruction (the journal
//! cursor's `fetch_add`), or after the callback returned (the allocator's unlock).
//!
//! Each thread sums into its own slot of `on::SLOTS` (claimed on its first stamp; only that
//! thread writes it, with plain loads and stores, no locked instruction), and
//! `vramtrace_bench_parts` adds the slots up for the driver.

#[cfg(feature = "bench")]
use crate::{bench, thread};

/// The parts, in the order the path runs them; `vramtrace_bench_parts` reports them in this
/// order, from [`Part::Decode`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Part {
    /// No path begun.
    Outside,
    /// From the tracker callback's recording check to the decoded entry (the session check,
    /// the layout word, the `TraceEntry` fields).
    Decode,
    /// The held `free_requested`: the check, and a coalesced record's flags (not its push).
    Held,
    /// The event's time (`clock::now`).
    Clock,
    /// The process and thread ids (`clock::pid`, `clock::tid`).
    Ids,
    /// The stack capture's own work: its mode, the thread's block, the panic guard.
    Stack,
    /// The Python frames' walk (`python::walk`).
    Walk,
    /// The autograd node's read where the walk found no frame (`autograd::node_word`).
    Node,
    /// The stack's intern (`stacks::intern`: the recent stacks, the thread's table, the arena).
    Intern,
    /// The record's fields, and a `free_requested` held in the thread's block.
    Record,
    /// The journal push (`ring::push`: the cursor, the slot's copy, its `seq`).
    Push,
    /// From the push's return to the callback's return.
    Exit,
    /// The whole path, from [`Part::Decode`]'s start to [`Part::Exit`]'s end, with
    /// [`bench::WHOLE`] (no stamp in between).
    #[cfg(feature = "bench")]
    Whole,
    /// Nothing: the cost of a stamp itself (`vramtrace_bench_stamp_cost`).
    #[cfg(feature = "bench")]
    Empty,
}

/// Parts that are timed (every one but [`Part::Outside`]).
#[cfg(feature = "bench")]
const PARTS: usize = Part::Empty as usize;

/// Starts a path in `part` (the tracker callback, once it records).
#[inline(always)]
pub fn begin(part: Part) {
    #[cfg(feature = "bench")]
    if bench::has(bench::STAMPS) {
        let part = if bench::has(bench::WHOLE) {
            Part::Whole
        } else {
            part
        };
        let t = thread::this();
        t.stamp_at.set(tick());
        t.stamp_part.set(part as u8);
    }
    #[cfg(not(feature = "bench"))]
    let _ = part;
}

/// Ends the running part and starts `part`; the part it ended ([`Part::Outside`], doing
/// nothing, outside a begun path).
#[inline(always)]
pub fn enter(part: Part) -> Part {
    #[cfg(feature = "bench")]
    if bench::has(bench::STAMPS) && !bench::has(bench::WHOLE) {
        return switch(part);
    }
    let _ = part;
    Part::Outside
}

/// Ends the path's running part.
#[inline(always)]
pub fn end() {
    #[cfg(feature = "bench")]
    if bench::has(bench::STAMPS) {
        switch(Part::Outside);
    }
}

#[cfg(feature = "bench")]
use on::switch;
#[cfg(feature = "bench")]
use on::tick;

#[cfg(feature = "bench")]
mod on {
    use super::{PARTS, Part};
    use crate::thread;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    /// One thread's sums: ticks, and how many times each part ran.
    #[repr(C, align(64))]
    pub struct Slot {
        pub ticks: [AtomicU64; PARTS],
        pub runs: [AtomicU64; PARTS],
    }

    /// Slots for this many threads; later threads share the last one (whose sums can then lose
    /// an addition to a race: a measurement aid).
    const SLOT_COUNT: usize = 64;
    pub static SLOTS: [Slot; SLOT_COUNT] = [const {
        Slot {
            ticks: [const { AtomicU64::new(0) }; PARTS],
            runs: [const { AtomicU64::new(0) }; PARTS],
        }
    }; SLOT_COUNT];
    static CLAIMED: AtomicUsize = AtomicUsize::new(0);

    /// Every part, by its number.
    const ALL: [Part; PARTS + 1] = [
        Part::Outside,
        Part::Decode,
        Part::Held,
        Part::Clock,
        Part::Ids,
        Part::Stack,
        Part::Walk,
        Part::Node,
        Part::Intern,
        Part::Record,
        Part::Push,
        Part::Exit,
        Part::Whole,
        Part::Empty,
    ];

    /// The time-stamp counter once the instructions before have executed.
    #[inline(always)]
    pub fn tick() -> u64 {
        let mut aux = 0;
        // SAFETY: rdtscp has no preconditions on x86-64 (the recorder refuses to build
        // elsewhere, and every x86-64 processor of the last fifteen years has it).
        unsafe { std::arch::x86_64::__rdtscp(&mut aux) }
    }

    /// Charges the time since the running part's start to it and starts `to`; returns the part
    /// ended. Outside a begun path it does nothing.
    #[inline(always)]
    pub fn switch(to: Part) -> Part {
        let t = thread::this();
        let from = ALL
            .get(usize::from(t.stamp_part.get()))
            .copied()
            .unwrap_or(Part::Outside);
        if from == Part::Outside {
            return from;
        }
        let now = tick();
        let slot = slot_of(t);
        let i = from as usize - 1;
        if let (Some(ticks), Some(runs)) = (slot.ticks.get(i), slot.runs.get(i)) {
            add(ticks, now.wrapping_sub(t.stamp_at.get()));
            add(runs, 1);
        }
        t.stamp_at.set(now);
        t.stamp_part.set(to as u8);
        from
    }

    /// An addition by the slot's only writer: no locked instruction.
    #[inline(always)]
    fn add(sum: &AtomicU64, v: u64) {
        sum.store(
            sum.load(Ordering::Relaxed).wrapping_add(v),
            Ordering::Relaxed,
        );
    }

    fn slot_of(t: &thread::PerThread) -> &'static Slot {
        let mine = t.stamp_slot.get() as *const Slot;
        // SAFETY: a slot pointer is null or one of SLOTS' elements, which are static.
        if let Some(s) = unsafe { mine.as_ref() } {
            return s;
        }
        let i = CLAIMED.fetch_add(1, Ordering::Relaxed).min(SLOT_COUNT - 1);
        let s = &SLOTS[i];
        t.stamp_slot.set((s as *const Slot).cast());
        s
    }
}

/// Words `vramtrace_bench_parts` writes: the time-stamp counter and `CLOCK_MONOTONIC` (ns)
/// read together (two such pairs give the counter's frequency), the ticks of every part, then
/// how many times each part ran, parts in [`Part`]'s order from [`Part::Decode`].
#[cfg(feature = "bench")]
const WORDS: usize = 2 + 2 * PARTS;

/// Writes the first `n` of [`WORDS`] words (the sums over every thread) to `out`; returns
/// [`WORDS`].
///
/// # Safety
/// `out` is null or valid for `n` `u64` writes.
#[cfg(feature = "bench")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_bench_parts(out: *mut u64, n: usize) -> usize {
    use std::sync::atomic::Ordering;
    let mut words = [0u64; WORDS];
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: rdtsc has no preconditions; `ts` is a valid out-pointer.
    words[0] = unsafe { std::arch::x86_64::_rdtsc() };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    words[1] = (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64;
    for slot in &on::SLOTS {
        for i in 0..PARTS {
            words[2 + i] += slot.ticks[i].load(Ordering::Relaxed);
            words[2 + PARTS + i] += slot.runs[i].load(Ordering::Relaxed);
        }
    }
    if !out.is_null() {
        // SAFETY: the caller's contract: `out` holds `n` words.
        unsafe { std::ptr::copy_nonoverlapping(words.as_ptr(), out, n.min(WORDS)) };
    }
    WORDS
}

/// Times `n` empty parts in a row on the calling thread (into [`Part::Empty`]), whatever the
/// variant: what one stamp adds to every part's time, with the stamp's code and data hot.
#[cfg(feature = "bench")]
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_bench_stamp_cost(n: u32) {
    let before = bench::vramtrace_bench_skip(bench::STAMPS);
    begin(Part::Empty);
    for _ in 0..n {
        enter(Part::Empty);
    }
    end();
    bench::vramtrace_bench_skip(before);
}
