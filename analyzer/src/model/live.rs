//! The recorded process peak, for callers that stream the events once (`record`'s closing
//! line, the report of a job, the Parquet export): the live-memory rules of the allocation
//! table ([`super::table`]) kept without its rows.

use super::lifetimes::{Matched, Matcher};
use super::rules::Rules;
use super::table::{Shape, is_host};
use crate::sums::Live;
use vramtrace_format::conventions::ALLOCATOR_SEGMENT;
use vramtrace_format::{Event, MemoryKind, NO_DEVICE, Trace};

/// What the peak keeps of a live object: enough to classify it under each [`Shape`].
#[derive(Debug, Clone, Copy)]
struct Held {
    kind: MemoryKind,
    framework: bool,
    flagged: bool,
    device: bool,
    size: u64,
}

impl Held {
    /// Its bytes when, under `shape`, they are reserved device memory.
    fn reserved_device_bytes(&self, shape: Shape) -> Option<u64> {
        let (_, _, reserved) = shape.classify(self.kind, self.framework, self.flagged);
        (reserved && self.device).then_some(self.size)
    }
}

/// The recorded process peak, one event at a time: the most device memory (host memory not
/// counted) the trace's processes held at once, summed over their devices, as the driver saw
/// it (the allocation table's *reserved*).
///
/// Which bytes are reserved depends on the trace's [`Shape`], which only its whole event list
/// shows, so the peak is kept under each of the three shapes and the one the events showed is
/// answered.
#[derive(Debug, Default)]
pub struct DevicePeak {
    live: Matcher<Held>,
    now: [Live; 3],
    peak: [u64; 3],
    tracker: bool,
    snapshot: bool,
}

impl DevicePeak {
    /// Takes the next event in file order.
    pub fn see(&mut self, e: &Event) {
        let o = Rules::get().of(e);
        let (tracker, snapshot) = Shape::shown_by(e);
        self.tracker |= tracker;
        self.snapshot |= snapshot;
        let kind = o.kind;
        let born = Held {
            kind,
            framework: e.api.from_framework(),
            flagged: e.flags & ALLOCATOR_SEGMENT != 0,
            device: !is_host(kind) && e.device != NO_DEVICE,
            size: e.size,
        };
        let now = &mut self.now;
        let matched = self.live.apply(e, (o.lifetime, o.key), |old| {
            // An object whose address was taken again without a free is gone, as in the
            // table.
            if let Some(h) = old {
                count(now, &h, false);
            }
            born
        });
        match matched {
            Matched::Born => count(now, &born, true),
            Matched::Ended(h) => count(now, &h, false),
            _ => return,
        }
        for (peak, live) in self.peak.iter_mut().zip(now.iter()) {
            *peak = (*peak).max(live.bytes());
        }
    }

    /// The peak of the events seen so far, under the shape they showed.
    pub fn peak(&self) -> u64 {
        // `Shape::ALL` lists the shapes in declaration order.
        self.peak[Shape::of(self.tracker, self.snapshot) as usize]
    }
}

/// Adds (`add`) or takes away `held`'s bytes from the live totals of each shape it is reserved
/// device memory under.
fn count(now: &mut [Live; 3], held: &Held, add: bool) {
    for (i, shape) in Shape::ALL.into_iter().enumerate() {
        match held.reserved_device_bytes(shape) {
            Some(size) if add => now[i].add(size),
            Some(size) => now[i].sub(size),
            None => {}
        }
    }
}

/// The recorded process peak of a trace ([`DevicePeak`]).
pub fn recorded_device_peak(trace: &Trace) -> u64 {
    let mut peak = DevicePeak::default();
    for e in trace.events() {
        peak.see(&e);
    }
    peak.peak()
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramtrace_format::Api;

    fn ev(api: Api, address: u64, size: u64, flags: u64) -> Event {
        Event {
            pid: 1,
            device: 0,
            address,
            size,
            flags,
            ..Event::new(api)
        }
    }

    fn peak(events: &[Event]) -> u64 {
        let mut p = DevicePeak::default();
        events.iter().for_each(|e| p.see(e));
        p.peak()
    }

    #[test]
    fn the_device_peak_counts_what_the_driver_held_whatever_the_traces_shape() {
        const MIB: u64 = 1 << 20;
        // Driver calls only: every allocation counts.
        let plain = [
            ev(Api::CuMemAlloc_v2, 0x1000, 20 * MIB, 0),
            ev(Api::CuMemAllocAsync, 0x9000, 4 * MIB, 0),
            ev(Api::CuMemFree_v2, 0x1000, 0, 0),
            ev(Api::CuMemAllocHost_v2, 0x5000, 64 * MIB, 0),
        ];
        assert_eq!(peak(&plain), 24 * MIB);
        // An imported snapshot: the segment reserved, the request inside it not again.
        let snapshot = [
            ev(Api::CuMemAlloc_v2, 0x1000, 20 * MIB, ALLOCATOR_SEGMENT),
            ev(Api::CuMemAllocAsync, 0x1000, 3 * MIB, 0),
        ];
        assert_eq!(peak(&snapshot), 20 * MIB);
        // PyTorch's tracker: the segment's driver call counts; the tensor at its address and
        // the tracker's own word on the segment do not count again.
        let tracker = [
            ev(Api::CuMemAlloc_v2, 0x1000, 20 * MIB, 0),
            ev(Api::TorchSegmentAlloc, 0x1000, 20 * MIB, 0),
            ev(Api::TorchAlloc, 0x1000, 3 * MIB, 0),
            ev(Api::TorchFreeCompleted, 0x1000, 3 * MIB, 0),
            ev(Api::CuMemAlloc_v2, 0x8000_0000, 2 * MIB, 0),
        ];
        assert_eq!(peak(&tracker), 22 * MIB);
    }
}
