//! The ends of a process: normal exit, fatal signals, `fork`.
//!
//! Normal exit finalizes the trace from this library's destructor (`.fini_array`), which runs in
//! `_dl_fini` after every `atexit` handler and after the destructors of the libraries loaded
//! later (libcuda, the frameworks), so their last frees are in the trace. `abort`, `SIGSEGV` and
//! `SIGBUS` finalize from a signal handler that only sets a flag and waits (async-signal-safe);
//! the writer thread does the work, then the previous handler runs. `SIGKILL` cannot be caught:
//! the journal covers it (`ring`).
//!
//! A program that installed its own `SIGSEGV` or `SIGBUS` handler before recording started
//! (managed runtimes use faults for null checks, safepoints and guard pages) survives most of
//! its faults, so its handler runs first and recording goes on. A fault ends recording only
//! when it will kill the process: when no handler of the program's is there, or when the
//! program's handler returns having restored the default disposition (the instruction faults
//! again and the kernel ends the process).
//!
//! `_exit` (Python's `os._exit`, a fork child that skips its parent's destructors, a handler that
//! ends the process itself) runs no destructor, so this library exports its own `_exit` and
//! `_Exit` that finalize as the fatal signals do, then end the process with the system call the
//! C library's `_exit` makes. Without them the events still survive in the journal, but the
//! stacks they name were interned in process memory and would be lost with it. A process that
//! ends in the raw system call, or in `SIGKILL`, leaves the journal (`vramtrace record`
//! merges it) and its last events' stacks unwritten.

use crate::clock;
use crate::lifecycle;
use crate::ring;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const FATAL: [libc::c_int; 3] = [libc::SIGABRT, libc::SIGSEGV, libc::SIGBUS];

/// The handlers that were installed before ours, restored before the signal goes on.
static mut PREVIOUS: [MaybeUninit<libc::sigaction>; 3] = [MaybeUninit::uninit(); 3];
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Installs the fork and signal handlers, once per process image.
pub fn install() {
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: registering plain functions; the child's runs in the child's only thread.
    unsafe { libc::pthread_atfork(Some(before_fork), Some(in_fork_parent), Some(in_fork_child)) };
    for (i, &sig) in FATAL.iter().enumerate() {
        // SAFETY: a zeroed sigaction is valid; PREVIOUS is written here, before our handler can
        // run, and afterwards only by that handler.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fatal_signal as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let previous = (&raw mut PREVIOUS[i]).cast::<libc::sigaction>();
            libc::sigaction(sig, &action, previous);
        }
    }
}

extern "C" fn before_fork() {
    crate::modules::before_fork();
}

extern "C" fn in_fork_parent() {
    crate::modules::after_fork(false);
}

extern "C" fn in_fork_child() {
    crate::modules::after_fork(true);
    clock::after_fork_in_child();
    crate::held::after_fork_in_child();
    crate::context::after_fork_in_child();
    crate::nvml::after_fork_in_child();
    crate::driver_count::after_fork_in_child();
    ring::detach();
    lifecycle::after_fork_in_child();
}

extern "C" fn on_fatal_signal(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    ctx: *mut libc::c_void,
) {
    let Some(i) = FATAL.iter().position(|&s| s == sig) else {
        return;
    };
    // SAFETY: PREVIOUS[i] was filled by `install` before this handler was installed; only
    // this handler reads or changes it afterwards.
    let previous = unsafe { (&raw mut PREVIOUS[i]).cast::<libc::sigaction>() };
    // SAFETY: as above.
    let handler = unsafe { (*previous).sa_sigaction };
    if sig != libc::SIGABRT && handler != libc::SIG_DFL && handler != libc::SIG_IGN {
        // The program handles its own faults (JVM, Go, Julia, .NET and wasm runtimes do): most
        // are recovered, so its handler decides. It runs first, as if it had been called by the
        // kernel; recording goes on unless the fault will now kill the process.
        // SAFETY: `previous` is a handler the program installed for this signal.
        unsafe { chain(previous, sig, info, ctx) };
        if fault(info) && default_now(sig) {
            // The handler gave up (restored the default and returned): the faulting
            // instruction runs again and the kernel ends the process.
            finish_before_death();
        }
        return;
    }
    finish_before_death();
    // SAFETY: sigaction and raise are async-signal-safe; `previous` is valid (above).
    unsafe {
        libc::sigaction(sig, previous, std::ptr::null_mut());
        // A fault re-executes the faulting instruction on return and meets the previous
        // handler; a signal that was sent (abort, kill) must be sent again.
        if sig == libc::SIGABRT || !fault(info) {
            libc::raise(sig);
        }
    }
}

fn finish_before_death() {
    if lifecycle::running_here() {
        lifecycle::finalize_and_wait(Duration::from_secs(3));
    }
}

/// The C library's `_exit`, interposed: the trace is finished first (see the module's header).
#[unsafe(no_mangle)]
pub extern "C" fn _exit(status: libc::c_int) -> ! {
    end_now(status)
}

/// The C library's `_Exit`, interposed (the same as `_exit`).
#[unsafe(no_mangle)]
pub extern "C" fn _Exit(status: libc::c_int) -> ! {
    end_now(status)
}

fn end_now(status: libc::c_int) -> ! {
    // A `vfork` child shares its parent's memory and cached pid: only the process that owns the
    // session (asked of the kernel, not of the cache) finishes it.
    // SAFETY: getpid has no preconditions and is async-signal-safe.
    if lifecycle::owned_by(unsafe { libc::getpid() } as u32) {
        crate::held::release_held();
        lifecycle::finalize_and_wait(Duration::from_secs(3));
    }
    loop {
        // SAFETY: exit_group ends every thread of the process, as the C library's `_exit` does.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}

/// True for a synchronous fault (the kernel's own SIGSEGV or SIGBUS), false for a signal that
/// was sent.
fn fault(info: *const libc::siginfo_t) -> bool {
    // SAFETY: the kernel's siginfo, when given.
    !info.is_null() && unsafe { (*info).si_code } > 0
}

/// True when `sig`'s disposition is now the default or ignore: a fault kills the process.
fn default_now(sig: libc::c_int) -> bool {
    // SAFETY: querying a disposition into a zeroed struct; async-signal-safe.
    unsafe {
        let mut now: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut now) == 0
            && (now.sa_sigaction == libc::SIG_DFL || now.sa_sigaction == libc::SIG_IGN)
    }
}

/// Calls the program's own handler the way the kernel would have: its mask added, its
/// `SA_NODEFER` and `SA_RESETHAND` honoured, with or without `SA_SIGINFO`.
///
/// # Safety
///
/// `previous` holds a handler (not `SIG_DFL` or `SIG_IGN`) installed for `sig`.
unsafe fn chain(
    previous: *mut libc::sigaction,
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    ctx: *mut libc::c_void,
) {
    // SAFETY: the caller's contract; every call here is async-signal-safe.
    unsafe {
        let action = *previous;
        if action.sa_flags & libc::SA_RESETHAND != 0 {
            // The kernel would have reset it on this delivery: the next one is fatal.
            (*previous).sa_sigaction = libc::SIG_DFL;
            (*previous).sa_flags &= !libc::SA_SIGINFO;
        }
        let mut mask = action.sa_mask;
        if action.sa_flags & libc::SA_NODEFER == 0 {
            libc::sigaddset(&mut mask, sig);
        }
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &mask, &mut old);
        if action.sa_flags & libc::SA_NODEFER != 0 {
            let mut this: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut this);
            libc::sigaddset(&mut this, sig);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &this, std::ptr::null_mut());
        }
        if action.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(action.sa_sigaction);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(action.sa_sigaction);
            f(sig);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}

extern "C" fn on_unload() {
    if lifecycle::running_here() {
        crate::held::release_held();
        lifecycle::finalize_and_wait(Duration::from_secs(10));
    }
}

#[used]
#[unsafe(link_section = ".fini_array")]
static FINI: extern "C" fn() = on_unload;
