//! The most device memory a trace's processes held at once, by the driver calls themselves:
//! what `vramtrace record` prints per trace and the `traces` table's `peak_live_device_bytes`.

use std::collections::HashMap;
use vramtrace_format::{Event, MemoryKind, Op};

/// Live device bytes, updated one event at a time in call order: plain, managed and
/// stream-ordered allocations by address, VMM physical allocations on a device by handle.
/// Imported (IPC, external) memory belongs to another owner and is not counted.
#[derive(Debug, Default)]
pub struct LivePeak {
    live: HashMap<(u32, u64), u64>,
    now: u64,
    peak: u64,
}

impl LivePeak {
    pub fn see(&mut self, e: &Event) {
        if !e.succeeded() {
            return;
        }
        let kind = e.api.kind();
        let by_address = matches!(
            kind,
            MemoryKind::Device | MemoryKind::Managed | MemoryKind::Pool
        );
        match e.api.op() {
            Op::Alloc if by_address => self.add((e.pid, e.address), e.size),
            Op::Free if by_address => self.remove((e.pid, e.address)),
            // The location type sits in bits 8-15 of a cuMemCreate's flags; 1 is a device.
            Op::Create if kind == MemoryKind::Vmm && (e.flags >> 8) & 0xff == 1 => {
                self.add((e.pid, e.handle), e.size)
            }
            Op::Release if kind == MemoryKind::Vmm => self.remove((e.pid, e.handle)),
            _ => {}
        }
    }

    fn add(&mut self, key: (u32, u64), size: u64) {
        if let Some(old) = self.live.insert(key, size) {
            self.now -= old;
        }
        self.now += size;
        self.peak = self.peak.max(self.now);
    }

    fn remove(&mut self, key: (u32, u64)) {
        self.now -= self.live.remove(&key).unwrap_or(0);
    }

    /// The peak so far, in bytes.
    pub fn peak(&self) -> u64 {
        self.peak
    }

    /// The peak over all of `events`.
    pub fn of(events: impl IntoIterator<Item = Event>) -> u64 {
        let mut p = LivePeak::default();
        for e in events {
            p.see(&e);
        }
        p.peak()
    }
}
