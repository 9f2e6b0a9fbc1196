//! The tracker's `free_requested` held back on its thread (`thread::PerThread`) until the next
//! entry there (`torch`), and what becomes of it at the ends of a process.

use crate::ring;
use crate::thread;
use vramtrace_format::journal::Record;

/// This thread's held `free_requested`, if any. When there is none it only reads the flag: a
/// store into a cold line before the journal's atomic add would make the add wait for it.
#[inline]
pub fn take_held() -> Option<Record> {
    let t = thread::this();
    if !t.has_held.get() {
        return None;
    }
    t.has_held.set(false);
    Some(t.held.get())
}

/// Publishes this thread's held `free_requested`, if any: at exit, on the exiting thread.
pub fn release_held() {
    if let Some(mut held) = take_held() {
        ring::push(&mut held);
    }
}

/// Runs in the only thread of a fork child: the parent's held entry is the parent's.
pub fn after_fork_in_child() {
    thread::this().has_held.set(false);
}
