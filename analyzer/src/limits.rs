//! What bounded each process's device memory, from the limit events of formats/SPEC.md §4.3:
//! the memory fraction the program set, the device's total bytes, and the free bytes CUDA
//! reported at its first out-of-memory error. Enough to tell a reached cap from a full device.
//!
//! Sans-IO: fed the trace's events in order.

use serde::Serialize;
use std::collections::BTreeMap;
use vramtrace_format::conventions::memory_fraction;
use vramtrace_format::{Api, CUDA_SUCCESS, Event};

/// The limits of one process on one device.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProcessLimit {
    /// The last memory fraction below 1 the program set (PyTorch's cap), if any.
    pub fraction: Option<f64>,
    /// Every memory fraction the program set, in order (the first may be the one in force
    /// when the tracker attached), with its time from the trace's first event.
    pub fraction_changes: Vec<FractionChange>,
    /// The device's total bytes (`device.memory`).
    pub device_total: Option<u64>,
    /// The free bytes CUDA reported at the first refused `torch.alloc`.
    pub free_at_first_oom: Option<u64>,
}

/// One `set_per_process_memory_fraction` call.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FractionChange {
    pub time_ns: u64,
    pub fraction: f64,
}

impl ProcessLimit {
    /// PyTorch's cap, `fraction × totalGlobalMem`, when both are recorded.
    pub fn cap(&self) -> Option<u64> {
        Some((self.fraction? * self.device_total? as f64) as u64)
    }

    /// Why a request of `size` bytes was refused, in words, when the trace can tell.
    pub fn verdict(&self, size: u64) -> Option<&'static str> {
        let free = self.free_at_first_oom?;
        Some(match (free >= size, self.cap().is_some()) {
            (true, true) => "room on the device: the program's cap was reached, not the device",
            (true, false) => "room on the device: a limit the trace does not record refused it",
            (false, _) => {
                "less than asked: the device itself was full (other processes, or memory outside PyTorch)"
            }
        })
    }
}

/// Every (pid, device)'s limits, as [`limits`] finds them (not [`crate::replay::Limits`], the
/// capacity a replay is given).
pub type ProcessLimits = BTreeMap<(u32, i32), ProcessLimit>;

/// Every (pid, device)'s limits in `events`, times taken from the first event's.
pub fn limits(events: impl IntoIterator<Item = Event>) -> ProcessLimits {
    let mut events = events.into_iter().peekable();
    let start_ns = events.peek().map_or(0, |e| e.time_ns);
    limits_since(start_ns, events)
}

/// [`limits`] of `events`, times taken from `start_ns` (the trace's first event's): what a
/// caller that kept only the events [`reads`] passes.
pub fn limits_since(start_ns: u64, events: impl IntoIterator<Item = Event>) -> ProcessLimits {
    let mut out = ProcessLimits::new();
    for e in events.into_iter().filter(|e| reads(e.api, e.result)) {
        let at = (e.pid, e.device);
        match e.api {
            Api::TorchSetMemoryFraction => {
                if let Some(f) = memory_fraction(&e) {
                    let l = out.entry(at).or_default();
                    l.fraction = (f < 1.0).then_some(f);
                    l.fraction_changes.push(FractionChange {
                        time_ns: e.time_ns.saturating_sub(start_ns),
                        fraction: f,
                    });
                }
            }
            Api::DeviceMemory => out.entry(at).or_default().device_total = Some(e.size),
            Api::TorchAlloc => {
                let l = out.entry(at).or_default();
                l.free_at_first_oom.get_or_insert(e.aux);
            }
            _ => {}
        }
    }
    out
}

/// Whether [`limits`] reads an event of `api` that returned `result`: what a pass that builds
/// something else keeps of a trace's events for [`limits_since`] (`vramtrace report`'s load).
pub fn reads(api: Api, result: u32) -> bool {
    match api {
        Api::TorchSetMemoryFraction | Api::DeviceMemory => true,
        Api::TorchAlloc => result != CUDA_SUCCESS,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramtrace_format::conventions::fraction_bits;

    fn ev(api: Api, size: u64, aux: u64, result: u32) -> Event {
        Event {
            pid: 7,
            device: 0,
            size,
            aux,
            result,
            ..Event::new(api)
        }
    }

    #[test]
    fn the_events_it_reads_give_the_limits_of_all_the_events() {
        let at = |t: u64, e: Event| Event { time_ns: t, ..e };
        let events = vec![
            at(100, ev(Api::CuMemAlloc_v2, 64, 0, 0)),
            at(110, ev(Api::DeviceMemory, 1000, 990, 0)),
            at(
                150,
                ev(Api::TorchSetMemoryFraction, 0, fraction_bits(0.5), 0),
            ),
            at(160, ev(Api::TorchAlloc, 300, 0, 0)),
            at(170, ev(Api::TorchAlloc, 900, 100, 2)),
            at(180, ev(Api::CuMemFree_v2, 0, 0, 0)),
        ];
        let kept: Vec<Event> = events
            .iter()
            .filter(|e| reads(e.api, e.result))
            .copied()
            .collect();
        let apis: Vec<Api> = kept.iter().map(|e| e.api).collect();
        assert_eq!(
            apis,
            [
                Api::DeviceMemory,
                Api::TorchSetMemoryFraction,
                Api::TorchAlloc
            ]
        );
        let whole = limits(events);
        assert_eq!(limits_since(100, kept), whole);
        assert_eq!(whole[&(7, 0)].fraction_changes[0].time_ns, 50);
    }

    #[test]
    fn a_refusal_with_room_on_the_device_under_a_fraction_is_the_cap() {
        let l = limits([
            ev(Api::DeviceMemory, 1000, 990, 0),
            ev(Api::TorchSetMemoryFraction, 0, fraction_bits(0.25), 0),
            ev(Api::TorchAlloc, 300, 700, 2),
            ev(Api::TorchAlloc, 900, 100, 2),
        ]);
        let p = &l[&(7, 0)];
        assert_eq!((p.cap(), p.free_at_first_oom), (Some(250), Some(700)));
        assert_eq!(
            p.verdict(300),
            Some("room on the device: the program's cap was reached, not the device")
        );
        assert!(
            p.verdict(800)
                .unwrap()
                .contains("the device itself was full")
        );
    }

    #[test]
    fn every_fraction_the_program_set_is_kept_with_its_time() {
        let at = |t: u64, f: f64| Event {
            time_ns: t,
            ..ev(Api::TorchSetMemoryFraction, 0, fraction_bits(f), 0)
        };
        let l = limits([
            Event {
                time_ns: 100,
                ..ev(Api::DeviceMemory, 1000, 990, 0)
            },
            at(150, 0.5),
            at(400, 0.25),
            at(900, 1.0),
        ]);
        let p = &l[&(7, 0)];
        let changes: Vec<(u64, f64)> = p
            .fraction_changes
            .iter()
            .map(|c| (c.time_ns, c.fraction))
            .collect();
        assert_eq!(changes, [(50, 0.5), (300, 0.25), (800, 1.0)]);
        // The last call lifted the cap.
        assert_eq!(p.fraction, None);
    }

    #[test]
    fn without_limit_events_nothing_is_said() {
        let l = limits([ev(Api::TorchAlloc, 300, 0, 0)]);
        assert!(l.is_empty());
        assert_eq!(ProcessLimit::default().verdict(1), None);
    }
}
