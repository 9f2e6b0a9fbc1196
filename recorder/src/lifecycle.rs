//! The process-wide state of recording, in one place: whether this process's session has not
//! started, is starting, runs or is off, which process owns it, and whether its writer thread
//! is alive or asked to finish. The other modules read and change that state only through the
//! functions here, which are atomics and nothing else (async-signal-safe, no allocation).
//!
//! Recording starts lazily, on the first tracked lookup or call (the hooks, the tracker, `dlsym`
//! and the resolvers ask `session` for it), never at load time, so tools that merely inherit
//! `LD_PRELOAD` create nothing. [`start`] runs the opener it is given (`session::open`, which
//! creates the files and the writer thread) on the one thread that wins the start, so nothing
//! here names the modules above.

use crate::clock;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};
use std::time::Duration;

const NOT_STARTED: u8 = 0;
const STARTING: u8 = 1;
const RUNNING: u8 = 2;
const OFF: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(NOT_STARTED);
static STARTER: AtomicU32 = AtomicU32::new(0);
/// Set in a fork child: it must not claim its parent's file name.
static FORK_CHILD: AtomicBool = AtomicBool::new(false);
/// The process that owns the running session (0 when none).
static OWNER: AtomicU32 = AtomicU32::new(0);

static WRITER_ALIVE: AtomicBool = AtomicBool::new(false);
static FINALIZE: AtomicBool = AtomicBool::new(false);
static FINISHED: AtomicBool = AtomicBool::new(false);
static WRITER_TID: AtomicU32 = AtomicU32::new(0);

/// True while recording has not started yet or is starting on some thread (a hook should then
/// build its record; `ring::push` waits for the start).
#[inline]
pub fn may_start() -> bool {
    matches!(STATE.load(Ordering::Relaxed), NOT_STARTED | STARTING)
}

/// True when this process records into a live session.
pub fn running_here() -> bool {
    owned_by(clock::pid())
}

/// True when process `pid` records into a live session (`pid` as the kernel gives it: a `vfork`
/// child's cached pid is its parent's).
pub fn owned_by(pid: u32) -> bool {
    STATE.load(Ordering::Acquire) == RUNNING && OWNER.load(Ordering::Relaxed) == pid
}

/// Starts recording with `open` if it has not started; true when recording. With `wait`, while
/// another thread is starting, it waits (up to 2 s, then it gives up: the starting thread might
/// be waiting for a lock this one holds, such as the loader's).
pub fn start(wait: bool, open: fn() -> bool) -> bool {
    let mut deadline = 0;
    loop {
        match STATE.load(Ordering::Acquire) {
            RUNNING => return true,
            OFF => return false,
            NOT_STARTED => {
                if STATE
                    .compare_exchange(NOT_STARTED, STARTING, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    STARTER.store(clock::tid(), Ordering::Relaxed);
                    let ok = std::panic::catch_unwind(open).unwrap_or(false);
                    STATE.store(if ok { RUNNING } else { OFF }, Ordering::Release);
                    return ok;
                }
            }
            _ => {
                // Starting on another thread, or re-entered from `open` itself.
                if !wait || STARTER.load(Ordering::Relaxed) == clock::tid() {
                    return false;
                }
                let now = clock::now();
                if deadline == 0 {
                    deadline = now + 2_000_000_000;
                } else if now > deadline {
                    return false;
                }
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            }
        }
    }
}

/// Stops recording for good in this process (after the trace was finalized).
pub fn stop() {
    STATE.store(OFF, Ordering::Release);
}

/// Records `pid` as the owner of the session being opened.
pub fn set_owner(pid: u32) {
    OWNER.store(pid, Ordering::Relaxed);
}

/// True in a process made by `fork` from a recorded one.
pub fn is_fork_child() -> bool {
    FORK_CHILD.load(Ordering::Relaxed)
}

/// Runs in a fork child: the parent's session and writer thread belong to the parent; the
/// child starts its own session on its first call.
pub fn after_fork_in_child() {
    FORK_CHILD.store(true, Ordering::Relaxed);
    OWNER.store(0, Ordering::Relaxed);
    // A parent that could not record warned already; its child stays quiet and unrecorded.
    if STATE.load(Ordering::Relaxed) != OFF {
        STATE.store(NOT_STARTED, Ordering::Relaxed);
    }
    WRITER_ALIVE.store(false, Ordering::Relaxed);
    FINALIZE.store(false, Ordering::Relaxed);
    FINISHED.store(false, Ordering::Relaxed);
    WRITER_TID.store(0, Ordering::Relaxed);
}

/// True while the writer thread drains the journal.
pub fn writer_alive() -> bool {
    WRITER_ALIVE.load(Ordering::Acquire)
}

/// True on the writer thread itself.
pub fn is_writer_thread() -> bool {
    WRITER_TID.load(Ordering::Relaxed) == clock::tid()
}

/// The writer thread is being started (`alive` until it ends or fails to start).
pub fn writer_starting() {
    WRITER_ALIVE.store(true, Ordering::Release);
}

/// Runs first on the writer thread.
pub fn writer_running() {
    WRITER_TID.store(clock::tid(), Ordering::Relaxed);
}

/// The writer thread ended: `finished` when it finished the trace (or gave up on it), false
/// when it could not be started at all.
pub fn writer_ended(finished: bool) {
    WRITER_ALIVE.store(false, Ordering::Release);
    if finished {
        FINISHED.store(true, Ordering::Release);
    }
}

/// True once [`finalize_and_wait`] asked the writer to finish the trace.
pub fn finalize_requested() -> bool {
    FINALIZE.load(Ordering::Acquire)
}

/// Asks the writer to finish the trace and waits up to `timeout`. Async-signal-safe: atomics and
/// `nanosleep` only, so a fatal-signal handler may call it.
pub fn finalize_and_wait(timeout: Duration) -> bool {
    if !writer_alive() || is_writer_thread() {
        return FINISHED.load(Ordering::Acquire);
    }
    FINALIZE.store(true, Ordering::Release);
    let step = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000,
    };
    let steps = timeout.as_millis() as u64;
    for _ in 0..steps {
        if FINISHED.load(Ordering::Acquire) {
            return true;
        }
        // SAFETY: nanosleep with a valid timespec; async-signal-safe.
        unsafe { libc::nanosleep(&step, std::ptr::null_mut()) };
    }
    FINISHED.load(Ordering::Acquire)
}
