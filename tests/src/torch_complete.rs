//! Completeness of a trace recorded with the PyTorch tracker: its `torch.*` events against the
//! `torch.cuda.memory_stats()` the same process wrote (`samples/workloads/programs/
//! torch_tracker_workloads.py`, which allocates a marker tensor right after taking them).
//!
//! One row per figure, for the events before the marker: allocations and their requested
//! bytes, frees, segments (cudaMalloc'ed, or mapped pages of expandable segments) and their
//! bytes, and the peak of reserved bytes the segment events add up to against
//! `max_memory_reserved()`.

use vramtrace_format::conventions::requests_free;
use vramtrace_format::{Api, Trace};

/// The marker tensor's bytes (torch_tracker_workloads.py `MARKER`).
pub const MARKER: u64 = 1_234_567;

/// One figure: its name, what the trace holds, what PyTorch counted.
pub type Row = (&'static str, u64, u64);

/// What the trace's tracker events add up to against PyTorch's `stats` (the JSON the workload
/// wrote), and the allocations served from private pools (graphs, `MemPool`); an error when
/// the marker allocation is missing.
pub fn compare(trace: &Trace, stats: &serde_json::Value) -> Result<(Vec<Row>, u64), String> {
    let stat = |k: &str| stats["stats"][k].as_u64().unwrap_or(0);
    let (mut allocs, mut alloc_bytes, mut freed, mut requested_frees) = (0u64, 0u64, 0u64, 0u64);
    let (mut segments, mut segment_bytes, mut segment_frees) = (0u64, 0u64, 0u64);
    let (mut reserved, mut peak, mut private_pool_allocs, mut marker) = (0i128, 0i128, 0u64, false);
    for e in trace.events() {
        match e.api {
            Api::TorchAlloc if e.succeeded() && e.size == MARKER => {
                marker = true;
                break;
            }
            Api::TorchAlloc if e.succeeded() => {
                allocs += 1;
                alloc_bytes += e.size;
                private_pool_allocs += u64::from(e.pool != 0 || e.handle != 0);
            }
            Api::TorchFreeRequested => requested_frees += 1,
            Api::TorchFreeCompleted => {
                freed += 1;
                requested_frees += u64::from(requests_free(&e));
            }
            Api::TorchSegmentAlloc | Api::TorchSegmentMap => {
                segments += 1;
                segment_bytes += e.size;
                reserved += i128::from(e.size);
                peak = peak.max(reserved);
            }
            Api::TorchSegmentFree | Api::TorchSegmentUnmap => {
                segment_frees += 1;
                reserved -= i128::from(e.size);
            }
            _ => {}
        }
    }
    if !marker {
        return Err(format!(
            "no marker allocation of {MARKER} bytes in the trace"
        ));
    }
    let rows = vec![
        ("allocations", allocs, stat("allocation.all.allocated")),
        (
            "requested_bytes",
            alloc_bytes,
            stat("requested_bytes.all.allocated"),
        ),
        (
            "frees_requested",
            requested_frees,
            stat("allocation.all.freed"),
        ),
        ("frees_completed", freed, stat("allocation.all.freed")),
        ("segments", segments, stat("num_device_alloc")),
        ("segment_frees", segment_frees, stat("num_device_free")),
        (
            "reserved_bytes",
            segment_bytes,
            stat("reserved_bytes.all.allocated"),
        ),
        (
            "peak_reserved",
            peak as u64,
            stats["max_memory_reserved"].as_u64().unwrap_or(0),
        ),
    ];
    Ok((rows, private_pool_allocs))
}
