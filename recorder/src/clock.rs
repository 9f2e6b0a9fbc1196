//! The clock and identities the hook path reads: no system call beyond the vDSO.

use crate::hot::HOT;
use crate::{bench, thread};
use std::sync::atomic::Ordering;

/// `CLOCK_MONOTONIC` in nanoseconds (a vDSO call, no system call).
#[inline]
pub fn now() -> u64 {
    if bench::has(bench::CLOCK) {
        return 0;
    }
    if bench::has(bench::TSC) {
        // SAFETY: rdtsc has no preconditions on x86-64.
        return unsafe { std::arch::x86_64::_rdtsc() };
    }
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
