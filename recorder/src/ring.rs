//! The hook side of the crash journal (`formats/JOURNAL.md`): reserve a slot, copy one record,
//! publish it. Lock-free and allocation-free.
//!
//! Why an event survives `SIGKILL` once its hook returned: the record is stored into a
//! `MAP_SHARED` mapping of a file whose blocks were allocated up front, so the stores are page
//! cache writes the kernel keeps after the process dies; `seq` is stored last (x86-64 keeps
//! stores in program order, and compiler fences keep the compiler from reordering them), so a
//! record with its slot's `seq` is whole. The writer frees a slot only after the chunk holding
//! its event has been written to the trace file, so a committed record is overwritten only once
//! its event is in the trace.

use crate::clock;
use crate::context;
use crate::hot::HOT;
use crate::lifecycle;
use crate::pause;
use crate::stamps::{self, Part};
use crate::table::{APIS, Hook};
use std::sync::atomic::{AtomicU64, Ordering, compiler_fence};
use vramtrace_format::Api;
use vramtrace_format::journal::{DRAINED_OFFSET, HEADER_LEN, NEXT_OFFSET, RECORD_LEN, Record};

/// Publishes a journal mapping of `capacity` slots to the hooks (`HOT.journal`, `capacity`).
pub fn attach(base: *mut u8, capacity: u64) {
    HOT.capacity.store(capacity, Ordering::Relaxed);
    // A new journal starts with nothing drained: the first push looks at its cursor.
    HOT.limit.store(0, Ordering::Relaxed);
    HOT.journal.store(base, Ordering::Release);
}

/// Stops the hooks from writing (they skip events from now on).
pub fn detach() {
    HOT.journal.store(std::ptr::null_mut(), Ordering::Release);
}

/// The cursors in a journal header.
///
/// # Safety
/// `base` is a live journal mapping.
pub unsafe fn cursors(base: *mut u8) -> (&'static AtomicU64, &'static AtomicU64) {
    // SAFETY: the header is 4096 bytes, page-aligned; the cursors are 8-byte aligned u64s that
    // are only ever accessed atomically, and the mapping is never unmapped.
    unsafe {
        (
            &*(base.add(NEXT_OFFSET) as *const AtomicU64),
            &*(base.add(DRAINED_OFFSET) as *const AtomicU64),
        )
    }
}

/// The `seq` word of slot `slot`, and the record it starts.
///
/// # Safety
/// `base` is a live journal mapping of `capacity` slots.
pub unsafe fn slot(base: *mut u8, capacity: u64, slot: u64) -> (&'static AtomicU64, *mut Record) {
    let at = HEADER_LEN + (slot & (capacity - 1)) as usize * RECORD_LEN;
    // SAFETY: `at` is inside the mapping; records are 128-byte aligned; seq is their first u64.
    unsafe {
        let rec = base.add(at) as *mut Record;
        (&*(rec as *const AtomicU64), rec)
    }
}

/// Whether a hook should build a record at all (not while [`pause::paused`]).
#[inline]
pub fn wanted() -> bool {
    !pause::paused() && (!HOT.journal.load(Ordering::Relaxed).is_null() || lifecycle::may_start())
}

/// A record for `hook` with the fields every event has.
#[inline]
pub fn record(hook: Hook, t0: u64, t1: u64, result: u32) -> Record {
    Record {
        device: context::current_device(),
        ..record_of(APIS[hook as usize], t0, t1, result)
    }
}

/// A record of an event of `api` (the device left to the caller), with its stack.
#[inline]
pub fn record_of(api: Option<Api>, t0: u64, t1: u64, result: u32) -> Record {
    let outer = stamps::enter(Part::Ids);
    let (pid, tid) = (clock::pid(), clock::tid());
    stamps::enter(Part::Stack);
    let stack = crate::stacks::capture(api);
    stamps::enter(outer);
    Record {
        time_ns: t0,
        duration_ns: t1.wrapping_sub(t0),
        pid,
        tid,
        result,
        api: api.map_or(0, |a| a.id()),
        stack,
        ..Record::default()
    }
}

/// Appends `rec` to the journal, giving it the next `seq`.
#[inline]
pub fn push(rec: &mut Record) {
    let outer = stamps::enter(Part::Push);
    push_now(rec);
    stamps::enter(outer);
}

#[inline]
fn push_now(rec: &mut Record) {
    if crate::bench::has(crate::bench::PUSH) {
        return;
    }
    // The caller asked `session` to start recording first; without a journal, the event is lost.
    let base = HOT.journal.load(Ordering::Acquire);
    if base.is_null() {
        return;
    }
    let capacity = HOT.capacity.load(Ordering::Relaxed);
    // SAFETY: `base` is a live journal mapping (never unmapped once published).
    let (next, drained) = unsafe { cursors(base) };
    let s = next.fetch_add(1, Ordering::AcqRel);
    // `drained` only grows, so a slot below a `drained + capacity` seen before is free; the
    // journal's own cursor (a line of its own, which the writer stores) is read only when the
    // slot is past that. Acquire/release through `limit` carries the writer's "done reading
    // these slots" (its release store of `drained`) to this thread as a direct read would.
    if s >= HOT.limit.load(Ordering::Acquire) {
        // Ring full: wait for the writer to free slots. It always does while it lives, also
        // after an I/O error (it then discards), so this cannot wait forever.
        loop {
            let limit = drained.load(Ordering::Acquire) + capacity;
            if s < limit {
                HOT.limit.fetch_max(limit, Ordering::AcqRel);
                break;
            }
            if !lifecycle::writer_alive() {
                return;
            }
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
    }
    // SAFETY: slot `s` was reserved above and is free (below `drained + capacity`).
    unsafe { publish(base, capacity, s, rec) };
}

/// Appends `rec` as [`push`] does when a slot is free now, without waiting: for the writer
/// thread, which frees the slots itself and so must never wait for one. False when the ring is
/// full (or there is no journal).
pub fn push_if_room(rec: &mut Record) -> bool {
    let base = HOT.journal.load(Ordering::Acquire);
    if base.is_null() {
        return false;
    }
    let capacity = HOT.capacity.load(Ordering::Relaxed);
    // SAFETY: `base` is a live journal mapping (never unmapped once published).
    let (next, drained) = unsafe { cursors(base) };
    // Only the writer moves `drained`, so the limit cannot change under this thread; a hook's
    // `fetch_add` between the load and the exchange makes the exchange fail and look again.
    let limit = drained.load(Ordering::Acquire) + capacity;
    let mut s = next.load(Ordering::Acquire);
    loop {
        if s >= limit {
            return false;
        }
        match next.compare_exchange_weak(s, s + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break,
            Err(now) => s = now,
        }
    }
    // SAFETY: slot `s` was reserved by the exchange and is below `drained + capacity`.
    unsafe { publish(base, capacity, s, rec) };
    true
}

/// Writes `rec` into slot `s` and publishes it (`seq` last).
///
/// # Safety
/// `base` is a live journal mapping of `capacity` slots; slot `s` was reserved by this thread
/// and is free (`s < drained + capacity`).
#[inline]
unsafe fn publish(base: *mut u8, capacity: u64, s: u64, rec: &mut Record) {
    // SAFETY: slot `s` is this thread's alone until its seq is published (the caller's contract).
    unsafe {
        let (seq, dst) = slot(base, capacity, s);
        seq.store(0, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        rec.seq = s + 1;
        std::ptr::copy_nonoverlapping(
            (rec as *const Record as *const u8).add(8),
            (dst as *mut u8).add(8),
            RECORD_LEN - 8,
        );
        compiler_fence(Ordering::SeqCst);
        seq.store(s + 1, Ordering::Release);
    }
}
