//! The `driver.process_memory` events (formats/SPEC.md §4.3): the driver's own count of this
//! process's memory per device ([`nvml`]), around the making of a context, at each new high of
//! the count, and at the end.
//!
//! Around a context ([`before_context`], [`after_context`]): the wrapper of
//! `cuDevicePrimaryCtxRetain` (the first on each device: later retains find the context made)
//! and of every `cuCtxCreate` asks NVML before and after the real call. That is two NVML calls
//! on the program's thread, once per context, which the analyzer needs: the difference is the
//! context's own memory, which no allocation call shows.
//!
//! At new highs and at the end ([`Sampler`]): the writer thread asks NVML at most every
//! [`EVERY`] for each device the trace has events on, and records the count when it is above
//! the highest recorded for that device; and once more when it finishes the trace. Off the
//! hook path entirely: a new high is recorded up to [`EVERY`] late, so a peak shorter than that
//! may be missed (the analyzer compares the named memory at the moment of each recorded count,
//! so a late count is still compared with what was live then).

use crate::nvml;
use crate::ring;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use vramtrace_format::Api;
use vramtrace_format::conventions::driver_count::{
    AFTER_CONTEXT, AT_END, BEFORE_CONTEXT, NEW_HIGH,
};

/// How often the writer thread asks NVML at most.
pub const EVERY: Duration = Duration::from_millis(250);

/// Devices whose primary context was counted (a retain of a made context adds nothing).
static PRIMARY_SEEN: [AtomicBool; 64] = [const { AtomicBool::new(false) }; 64];

/// A `driver.process_memory` record of `bytes` on `device` taken `when`.
fn record(device: i32, bytes: u64, when: u64, context: u64) -> vramtrace_format::journal::Record {
    let now = crate::clock::now();
    let mut rec = ring::record_of(Some(Api::DriverProcessMemory), now, now, 0);
    rec.device = device;
    rec.size = bytes;
    rec.flags = when;
    rec.handle = context;
    rec
}

/// Before a context is made on `device` (`primary`: by `cuDevicePrimaryCtxRetain`): the count
/// then, to hand to [`after_context`]; `None` when NVML does not answer or the device's
/// primary context was counted already. The caller started the session.
pub fn before_context(device: i32, primary: bool) -> Option<u64> {
    if primary {
        let seen = PRIMARY_SEEN.get(usize::try_from(device).ok()?)?;
        if seen.swap(true, Ordering::AcqRel) {
            return None;
        }
    }
    if !ring::wanted() || !nvml::wait_ready() {
        return None;
    }
    nvml::process_bytes(device, false)
}

/// After context `context` was made on `device`: both counts into the journal.
pub fn after_context(device: i32, context: u64, before: u64) {
    let Some(after) = nvml::process_bytes(device, true) else {
        return;
    };
    ring::push(&mut record(device, before, BEFORE_CONTEXT, context));
    ring::push(&mut record(device, after, AFTER_CONTEXT, context));
}

/// A fork child counts its own contexts.
pub fn after_fork_in_child() {
    for seen in &PRIMARY_SEEN {
        seen.store(false, Ordering::Relaxed);
    }
}

/// The writer thread's side: the highest count recorded per device, and when it last asked.
#[derive(Default)]
pub struct Sampler {
    highs: HashMap<i32, u64>,
    last: Option<Instant>,
}

impl Sampler {
    /// Records the count of each of `devices` that is above its recorded high; at most every
    /// [`EVERY`]. Call it from every turn of the writer loop.
    pub fn poll(&mut self, devices: &HashSet<i32>) {
        if !nvml::ready() || self.last.is_some_and(|t| t.elapsed() < EVERY) {
            return;
        }
        self.last = Some(Instant::now());
        for &device in devices.iter().filter(|&&d| d >= 0) {
            let Some(bytes) = nvml::process_bytes(device, true) else {
                continue;
            };
            let high = self.highs.entry(device).or_insert(0);
            if bytes > *high && ring::push_if_room(&mut record(device, bytes, NEW_HIGH, 0)) {
                *high = bytes;
            }
        }
    }

    /// Records the count of each of `devices` once more, as the trace is finished.
    pub fn at_end(&mut self, devices: &HashSet<i32>) {
        if !nvml::ready() {
            return;
        }
        for &device in devices.iter().filter(|&&d| d >= 0) {
            if let Some(bytes) = nvml::process_bytes(device, true) {
                ring::push_if_room(&mut record(device, bytes, AT_END, 0));
            }
        }
    }
}
