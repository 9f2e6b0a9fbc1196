//! The clock and identities the hook path reads: no system call beyond the vDSO.
//!
//! # Event times ([`stamp`])
//!
//! A record's times are read with `rdtsc` where the time-stamp counter is what the kernel's
//! `CLOCK_MONOTONIC` counts (the clock source is `tsc` and the processor's counter is invariant,
//! CPUID leaf 0x8000_0007, EDX bit 8: it ticks at one rate in every power state and the kernel
//! checked that it agrees across processors), else with the vDSO's `CLOCK_MONOTONIC`. The
//! choice is made once, when the library is loaded ([`decide`]), so that every record of the
//! process has the same unit. In a real program's cold caches the vDSO call costs more than
//! the counter: its code, its data page and the library's GOT slot are lines the counter does
//! not read (recorder/BENCHMARKS.md, "Where a tensor's recording time goes"). The journal says
//! which unit its records have, and carries the line that turns ticks into nanoseconds
//! ([`rule`], formats/JOURNAL.md "Times"); the writer thread converts what it drains, so a
//! trace's times are `CLOCK_MONOTONIC` nanoseconds as formats/SPEC.md says.

use crate::hot::HOT;
use crate::{bench, thread};
use std::sync::atomic::{AtomicU64, Ordering};
use vramtrace_format::journal::{CLOCK_NS, CLOCK_TSC, TimeRule};

/// The reading of both clocks (ticks, nanoseconds) taken when the library was loaded: where
/// every [`rule`]'s slope is measured from.
static LOADED: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];

/// Chooses the unit of the process's record times (`HOT.tsc`), once, from the library's
/// constructor.
pub fn decide() {
    // A hook that ran before the constructor (another library's) may have started a session
    // whose records are nanoseconds: it keeps them.
    if !HOT.journal.load(Ordering::Acquire).is_null() || !counter_is_the_clock() {
        return;
    }
    let (ticks, ns) = reading();
    LOADED[0].store(ticks, Ordering::Relaxed);
    LOADED[1].store(ns, Ordering::Relaxed);
    HOT.tsc.store(true, Ordering::Release);
}

/// Whether the kernel's `CLOCK_MONOTONIC` is the invariant time-stamp counter, scaled.
fn counter_is_the_clock() -> bool {
    // SAFETY: CPUID exists on every x86-64 processor; leaf 0x8000_0007 is read only when the
    // highest extended leaf reaches it.
    #[allow(unused_unsafe)]
    let invariant = unsafe {
        std::arch::x86_64::__cpuid(0x8000_0000).eax >= 0x8000_0007
            && std::arch::x86_64::__cpuid(0x8000_0007).edx & (1 << 8) != 0
    };
    invariant
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|s| s.trim() == "tsc")
}

/// The unit of this process's record times, as the journal's header states it.
pub fn unit() -> u32 {
    if HOT.tsc.load(Ordering::Acquire) {
        CLOCK_TSC
    } else {
        CLOCK_NS
    }
}

/// An event's time for its record: counter ticks or nanoseconds, as [`unit`] says. The hook
/// path.
#[inline]
pub fn stamp() -> u64 {
    if bench::skips(bench::CLOCK) {
        return 0;
    }
    if HOT.tsc.load(Ordering::Relaxed) && !bench::skips(bench::VDSO) {
        // SAFETY: rdtsc has no preconditions on x86-64.
        return unsafe { std::arch::x86_64::_rdtsc() };
    }
    now()
}

/// Both clocks read together (ticks, nanoseconds): the counter on both sides of the vDSO call,
/// of the tightest of a few tries, its midpoint.
fn reading() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..4 {
        // SAFETY: rdtsc has no preconditions on x86-64.
        let (before, ns, after) = unsafe {
            let before = std::arch::x86_64::_rdtsc();
            let ns = now();
            (before, ns, std::arch::x86_64::_rdtsc())
        };
        let width = after.wrapping_sub(before);
        if width < best.0 {
            best = (width, before + width / 2, ns);
        }
    }
    (best.1, best.2)
}

/// The line from ticks to nanoseconds as of now, its slope measured since the library was
/// loaded; `None` when the times are nanoseconds already.
pub fn rule() -> Option<TimeRule> {
    if unit() != CLOCK_TSC {
        return None;
    }
    let loaded = (
        LOADED[0].load(Ordering::Relaxed),
        LOADED[1].load(Ordering::Relaxed),
    );
    TimeRule::between(loaded, reading())
}

/// `CLOCK_MONOTONIC` in nanoseconds (a vDSO call, no system call).
#[inline]
pub fn now() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Wall-clock nanoseconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// This process's id, cached (refreshed in a fork child by [`after_fork_in_child`]).
#[inline]
pub fn pid() -> u32 {
    match HOT.pid.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: getpid has no preconditions.
            let p = unsafe { libc::getpid() } as u32;
            HOT.pid.store(p, Ordering::Relaxed);
            p
        }
        p => p,
    }
}

/// The calling thread's id, cached per thread (`thread::PerThread`) after one `gettid`.
#[inline]
pub fn tid() -> u32 {
    let t = &thread::this().tid;
    match t.get() {
        0 => {
            // SAFETY: gettid has no preconditions. The system call rather than glibc's wrapper,
            // which only glibc 2.30 and later export (the library must load on 2.17).
            let id = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
            t.set(id);
            crate::threadnames::note(id);
            id
        }
        id => id,
    }
}

/// Runs in the only thread of a fork child: its pid and tid differ from the parent's.
pub fn after_fork_in_child() {
    HOT.pid.store(0, Ordering::Relaxed);
    thread::this().tid.set(0);
}
