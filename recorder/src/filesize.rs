//! The file-size limit (`ulimit -f`, `RLIMIT_FSIZE`): a write or `posix_fallocate` past it fails
//! with `EFBIG` and also sends `SIGXFSZ` to the writing thread, whose default action ends the
//! process (exit status 153 in a shell). The recorder's own writes must never do that to the
//! program: they run with `SIGXFSZ` blocked on their thread, and a `SIGXFSZ` they raised is
//! taken back with `sigtimedwait` before the mask is restored, so it is never delivered. The
//! write then fails like any other (one warning, the program runs on unrecorded) and the
//! warning says which limit was reached. The signal is thread-directed (Linux
//! `send_sig(SIGXFSZ, current, 0)` in `generic_write_check_limits` and `inode_newsize_ok`), so
//! taking it on the writing thread takes exactly the one the recorder caused.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a recorder write reached the file-size limit.
static REACHED: AtomicBool = AtomicBool::new(false);

/// True once a recorder write in this process reached the file-size limit.
pub fn reached() -> bool {
    REACHED.load(Ordering::Relaxed)
}

fn sigxfsz_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise a zeroed set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGXFSZ);
        set
    }
}

fn pending() -> bool {
    // SAFETY: sigpending fills a zeroed set; sigismember reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigpending(&mut set) == 0 && libc::sigismember(&set, libc::SIGXFSZ) == 1
    }
}

/// Takes a pending `SIGXFSZ` of the calling thread (which has it blocked), if any: the writer
/// thread, which keeps it blocked for its whole life, calls this after a failed write.
pub fn take() {
    let set = sigxfsz_set();
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: sigtimedwait with a valid set and a zero timeout never blocks.
    if unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &zero) } == libc::SIGXFSZ {
        REACHED.store(true, Ordering::Relaxed);
    }
}

/// `SIGXFSZ` blocked on the calling thread until dropped; one the guarded code raised is taken
/// back first. A `SIGXFSZ` that was already pending (the program's own) is left alone.
pub struct Guard {
    old: libc::sigset_t,
    was_pending: bool,
}

impl Guard {
    pub fn new() -> Guard {
        let set = sigxfsz_set();
        // SAFETY: a zeroed set for the old mask; pthread_sigmask with valid sets.
        let old = unsafe {
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            old
        };
        Guard {
            old,
            was_pending: pending(),
        }
    }

    /// Takes back a `SIGXFSZ` the guarded writes raised so far; true once the limit was reached.
    pub fn settle(&self) -> bool {
        if !self.was_pending {
            take();
        }
        reached()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.settle();
        // SAFETY: restoring the mask `new` found.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

/// What a warning adds when the file-size limit was reached.
pub fn note() -> &'static str {
    if reached() {
        "; the file-size limit (ulimit -f) was reached"
    } else {
        ""
    }
}
