//! Diagnosis aid for docs/allocators.md ("Driver addresses"): prints the address sequence of a
//! trace's caching-allocator segments as `alloc,ADDRESS,BYTES` and `free,ADDRESS,BYTES` lines,
//! in call order: PyTorch's tracker's `torch.segment_alloc` / `torch.segment_free` when the
//! trace has them, else an imported snapshot's segment events, else (a segment-level trace)
//! every `cuMemAlloc_v2` of at least 2 MiB and its `cuMemFree_v2`.
//! `examples/address_models.py` fits driver address models to these sequences.
//!
//! `cargo run --release -p vramtrace --example segment_addresses -- TRACE > SEGMENTS.csv`

use std::collections::HashMap;
use vramtrace_format::conventions::ALLOCATOR_SEGMENT;
use vramtrace_format::{Api, Event, ReadOptions, Trace};

/// Segments a segment-level trace's `cuMemAlloc_v2` may be: PyTorch's are 2 MiB multiples.
const SEGMENT_MIN: u64 = 2 << 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: segment_addresses TRACE")?;
    let trace = Trace::open(std::path::Path::new(&path), ReadOptions::default())?;
    let events: Vec<Event> = trace.events().filter(|e| e.succeeded()).collect();
    let tracker = events.iter().any(|e| e.api == Api::TorchSegmentAlloc);
    let snapshot = events.iter().any(|e| e.flags & ALLOCATOR_SEGMENT != 0);
    let mut live: HashMap<u64, u64> = HashMap::new();
    for e in &events {
        let (alloc, free) = if tracker {
            (
                e.api == Api::TorchSegmentAlloc,
                e.api == Api::TorchSegmentFree,
            )
        } else {
            let ours = !snapshot || e.flags & ALLOCATOR_SEGMENT != 0;
            (
                ours && e.api == Api::CuMemAlloc_v2 && e.size >= SEGMENT_MIN,
                ours && e.api == Api::CuMemFree_v2,
            )
        };
        if alloc {
            live.insert(e.address, e.size);
            println!("alloc,{},{}", e.address, e.size);
        } else if free && let Some(size) = live.remove(&e.address) {
            println!("free,{},{size}", e.address);
        }
    }
    Ok(())
}
