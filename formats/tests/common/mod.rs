//! Helpers shared by the integration tests of the format.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use vramtrace_format::{Event, TraceWriter, WriterOptions, synthetic};

/// A small trace with several chunks of each kind: 3 steps of the synthetic stream in chunks of
/// 50 events, tables split over two table chunks.
pub fn small_trace() -> (Vec<u8>, Vec<Event>) {
    let s = synthetic::pytorch_like(3, 11);
    let options = WriterOptions {
        chunk_events: 50,
        ..WriterOptions::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &s.metadata, options).unwrap();
    let mut tables = s.tables;
    let late_stacks = tables.stacks.split_off(tables.stacks.len() / 2);
    *w.tables_mut() = tables;
    for (i, e) in s.events.iter().enumerate() {
        if i == 120 {
            w.tables_mut().stacks = late_stacks.clone();
        }
        w.push(e).unwrap();
    }
    (w.finish().unwrap(), s.events)
}

/// The system allocator, counting live bytes and their peak.
pub struct PeakAlloc {
    pub current: AtomicUsize,
    pub peak: AtomicUsize,
}

impl PeakAlloc {
    pub const fn new() -> Self {
        PeakAlloc {
            current: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }
}

// SAFETY: forwards every call to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = self.current.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
        self.peak.fetch_max(now, Ordering::SeqCst);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.current.fetch_sub(layout.size(), Ordering::SeqCst);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}
