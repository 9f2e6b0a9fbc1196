//! Thread names, told by each thread itself the first time it asks for its id.
//!
//! Reading `/proc/self/task/TID/comm` from the writer thread would open a descriptor while the
//! program runs: a file the program opens at that moment would get the next number instead of
//! its usual one. `prctl(PR_GET_NAME)` names the calling thread without a descriptor, so each
//! thread notes its own name in a fixed table (no allocation, no lock) and the writer looks it up.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// Threads whose names are kept; later ones get an empty name.
const SLOTS: usize = 4096;
/// `prctl(PR_GET_NAME)` writes up to 16 bytes, NUL included.
const NAME_LEN: usize = 16;

struct Names(UnsafeCell<[[u8; NAME_LEN]; SLOTS]>);
// SAFETY: slot `i` is written only by the thread that claimed it, before it publishes its tid
// in `TIDS[i]` (Release); readers read it only after seeing that tid (Acquire).
unsafe impl Sync for Names {}

static NEXT: AtomicUsize = AtomicUsize::new(0);
static TIDS: [AtomicU32; SLOTS] = [const { AtomicU32::new(0) }; SLOTS];
static NAMES: Names = Names(UnsafeCell::new([[0; NAME_LEN]; SLOTS]));

/// Notes the calling thread's name under `tid`. Async-signal-safe: one system call, atomics.
pub fn note(tid: u32) {
    let i = NEXT.fetch_add(1, Ordering::Relaxed);
    if i >= SLOTS {
        return;
    }
    // SAFETY: slot `i` belongs to this call alone (see `Names`); PR_GET_NAME writes at most 16
    // bytes into it.
    unsafe {
        let slot = (*NAMES.0.get()).as_mut_ptr().add(i);
        libc::prctl(libc::PR_GET_NAME, slot as libc::c_ulong, 0, 0, 0);
    }
    TIDS[i].store(tid, Ordering::Release);
}

/// The name thread `tid` noted, empty when it noted none.
pub fn get(tid: u32) -> String {
    let n = NEXT.load(Ordering::Relaxed).min(SLOTS);
    // The latest note wins: a fork child's thread may reuse a tid its parent's table holds.
    let Some(i) = (0..n)
        .rev()
        .find(|&i| TIDS[i].load(Ordering::Acquire) == tid)
    else {
        return String::new();
    };
    // SAFETY: slot `i` was published by the Acquire load above and is never written again.
    let name = unsafe { &(*NAMES.0.get())[i] };
    let len = name.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
    String::from_utf8_lossy(&name[..len]).into_owned()
}
