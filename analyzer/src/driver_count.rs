//! The driver's own count of each process's memory against the memory the trace names
//! (docs/definitions.md, "driver's count"): the `driver.process_memory` events the recorder
//! takes from NVML (formats/SPEC.md §4.3) beside the live memory of the trace's allocation table
//! ([`AllocationTable`]) at the same moment.
//!
//! What the trace names on a device at a moment is the CUDA context's own memory (the count
//! after each context was made less the count before it) plus every byte of device memory the
//! process held then as the driver saw it (the table's *reserved*: the pool's segments and the
//! memory outside it, by address or VMM handle). The check is made at the highest count: the
//! share of it that the trace names, which the target puts at 99% or more.

use crate::model::table::{DriverCountEvent, Moment, Step, Stepper};
use serde::Serialize;
use std::collections::BTreeMap;
use vramtrace_format::Event;
use vramtrace_format::conventions::driver_count::{AFTER_CONTEXT, BEFORE_CONTEXT};

/// The name of the context's own memory among the libraries outside the pool.
pub const CUDA_CONTEXT: &str = "CUDA context";

/// One process on one device: the driver's highest count and what the trace names then.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DriverCount {
    /// The highest count the driver gave (NVML's `usedGpuMemory` of the process).
    pub driver_bytes: u64,
    /// What the trace names at that moment: the contexts' own memory plus the device memory
    /// the process held.
    pub named_bytes: u64,
    /// `named_bytes / driver_bytes` (0 when the driver counted nothing).
    pub named_fraction: f64,
    /// When the driver gave that count (the event's clock, as `peak_requested_time_ns`).
    pub time_ns: u64,
    /// The contexts' own memory (after − before each context the recorder saw made); `null`
    /// when no context was made while recording.
    pub context_bytes: Option<u64>,
    /// The contexts counted.
    pub contexts: u64,
    /// The driver's counts recorded.
    pub samples: u64,
}

#[derive(Default)]
struct Acc {
    before: Option<u64>,
    context: Option<u64>,
    contexts: u64,
    samples: u64,
    /// The highest count: (driver's bytes, reserved bytes then, time).
    highest: Option<(u64, u64, u64)>,
}

/// The counts of a trace, as a walk of its changes meets them ([`Stepper`]): the rows' walk,
/// or a pass that keeps no row ([`crate::model::StepPass`]).
#[derive(Default)]
pub struct DriverCounts {
    by: BTreeMap<(u32, i32), Acc>,
}

impl DriverCounts {
    /// Takes the count `e` into account, `reserved` being the bytes the process held on that
    /// device just after it.
    fn see(&mut self, e: &Event, reserved: u64) {
        if e.device < 0 {
            return;
        }
        let acc = self.by.entry((e.pid, e.device)).or_default();
        acc.samples += 1;
        match e.flags {
            BEFORE_CONTEXT => acc.before = Some(e.size),
            AFTER_CONTEXT => {
                if let Some(before) = acc.before.take() {
                    acc.contexts += 1;
                    *acc.context.get_or_insert(0) += e.size.saturating_sub(before);
                }
            }
            _ => {}
        }
        if acc.highest.is_none_or(|(bytes, _, _)| e.size > bytes) {
            acc.highest = Some((e.size, reserved, e.time_ns));
        }
    }

    /// The check per (process, device) that has counts.
    pub fn finish(self) -> BTreeMap<(u32, i32), DriverCount> {
        self.by
            .into_iter()
            .filter_map(|(key, acc)| {
                let (driver_bytes, reserved, time_ns) = acc.highest?;
                let named_bytes = reserved.saturating_add(acc.context.unwrap_or(0));
                Some((
                    key,
                    DriverCount {
                        driver_bytes,
                        named_bytes,
                        named_fraction: if driver_bytes == 0 {
                            0.0
                        } else {
                            named_bytes as f64 / driver_bytes as f64
                        },
                        time_ns,
                        context_bytes: acc.context,
                        contexts: acc.contexts,
                        samples: acc.samples,
                    },
                ))
            })
            .collect()
    }
}

impl Stepper for DriverCounts {
    fn step(&mut self, _: Step<'_>, _: &dyn Moment) {}

    fn counted(&mut self, c: &DriverCountEvent, now: &dyn Moment) {
        self.see(&c.event, now.totals(c.event.pid, c.event.device).reserved);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::table::TableBuilder;
    use vramtrace_format::Api;
    use vramtrace_format::conventions::driver_count::NEW_HIGH;

    const MIB: u64 = 1 << 20;

    fn count(time_ns: u64, bytes: u64, when: u64) -> Event {
        Event {
            time_ns,
            device: 0,
            size: bytes,
            flags: when,
            ..Event::new(Api::DriverProcessMemory)
        }
    }

    fn alloc(time_ns: u64, address: u64, size: u64) -> Event {
        Event {
            time_ns,
            device: 0,
            address,
            size,
            ..Event::new(Api::CuMemAlloc_v2)
        }
    }

    fn check(events: &[Event]) -> BTreeMap<(u32, i32), DriverCount> {
        let mut b = TableBuilder::default();
        events.iter().for_each(|e| b.push(e));
        let mut counts = DriverCounts::default();
        b.finish().0.walk(&mut counts);
        counts.finish()
    }

    #[test]
    fn the_highest_count_is_named_by_the_context_and_the_memory_held_then() {
        let events = [
            count(10, 0, BEFORE_CONTEXT),
            count(20, 500 * MIB, AFTER_CONTEXT),
            alloc(30, 0x1000, 1024 * MIB),
            count(40, 1600 * MIB, NEW_HIGH),
            alloc(50, 0x9000_0000, 64 * MIB),
        ];
        let c = &check(&events)[&(0, 0)];
        assert_eq!(c.driver_bytes, 1600 * MIB);
        assert_eq!(c.context_bytes, Some(500 * MIB));
        // The later allocation was not live when the driver counted.
        assert_eq!(c.named_bytes, 1524 * MIB);
        assert_eq!(c.named_fraction, 1524.0 / 1600.0);
        assert_eq!((c.time_ns, c.contexts, c.samples), (40, 1, 3));
    }

    #[test]
    fn a_process_without_counts_has_no_check_and_a_late_context_has_no_size() {
        assert!(check(&[alloc(0, 0x1000, MIB)]).is_empty());
        let c = &check(&[alloc(0, 0x1000, MIB), count(5, 3 * MIB, NEW_HIGH)])[&(0, 0)];
        assert_eq!((c.context_bytes, c.named_bytes), (None, MIB));
    }
}
