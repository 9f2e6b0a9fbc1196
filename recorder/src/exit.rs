//! The ends of a process: normal exit, fatal signals, `fork`.
//!
//! Normal exit finalizes the trace from this library's destructor (`.fini_array`), which runs in
//! `_dl_fini` after every `atexit` handler and after the destructors of the libraries loaded
//! later (libcuda, the frameworks), so their last frees are in the trace. `abort`, `SIGSEGV` and
//! `SIGBUS` finalize from a signal handler that only sets a flag and waits (async-signal-safe);
//! the writer thread does the work, then the previous handler runs. `SIGKILL` cannot be caught:
//! the journal covers it (`ring`).

use crate::clock;
use crate::lifecycle;
use crate::ring;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use vramtrace_format::conventions::{Heartbeat, env, heartbeat_name};

const FATAL: [libc::c_int; 3] = [libc::SIGABRT, libc::SIGSEGV, libc::SIGBUS];

/// The handlers that were installed before ours, restored before the signal goes on.
static mut PREVIOUS: [MaybeUninit<libc::sigaction>; 3] = [MaybeUninit::uninit(); 3];
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Installs the fork and signal handlers, once per process image.
pub fn install() {
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: registering a plain function; it runs in the child's only thread.
    unsafe { libc::pthread_atfork(None, None, Some(in_fork_child)) };
    for (i, &sig) in FATAL.iter().enumerate() {
        // SAFETY: a zeroed sigaction is valid; PREVIOUS is written here once, before our handler
        // can run, and read only by that handler.
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

extern "C" fn in_fork_child() {
    clock::after_fork_in_child();
    crate::hooks::context::after_fork_in_child();
    ring::detach();
    lifecycle::after_fork_in_child();
}

extern "C" fn on_fatal_signal(
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    _ctx: *mut libc::c_void,
) {
    if lifecycle::running_here() {
        lifecycle::finalize_and_wait(Duration::from_secs(3));
    }
    let Some(i) = FATAL.iter().position(|&s| s == sig) else {
        return;
    };
    // SAFETY: PREVIOUS[i] was filled by `install` before this handler was installed; sigaction
    // and raise are async-signal-safe.
    unsafe {
        let previous = (&raw const PREVIOUS[i]).cast::<libc::sigaction>();
        libc::sigaction(sig, previous, std::ptr::null_mut());
        // A fault re-executes the faulting instruction on return and meets the previous
        // handler; a signal that was sent (abort, kill) must be sent again.
        let sent = info.is_null() || (*info).si_code <= 0;
        if sig == libc::SIGABRT || sent {
            libc::raise(sig);
        }
    }
}

extern "C" fn on_unload() {
    if lifecycle::running_here() {
        lifecycle::finalize_and_wait(Duration::from_secs(10));
    }
}

extern "C" fn on_load() {
    // Tells `vramtrace record` that the preload was loaded at all (a process that never makes
    // a CUDA lookup leaves only this mark).
    if let Some(dir) = std::env::var_os(env::HEARTBEAT) {
        let mark = std::path::Path::new(&dir).join(heartbeat_name(clock::pid(), Heartbeat::Loaded));
        let _ = std::fs::write(mark, "");
    }
}

#[used]
#[unsafe(link_section = ".fini_array")]
static FINI: extern "C" fn() = on_unload;

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = on_load;
