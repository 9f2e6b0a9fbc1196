//! What orders a stream-ordered pool's reuse: the host waiting for streams, events or the whole
//! device (and asking whether they are done), event records and stream waits, `_ptsz` variants
//! included (formats/SPEC.md §4.4). One small event each, without a stack: `stream` is the
//! stream, `handle` the event, `flags` the call's flags, `result` what the driver answered
//! (`CUDA_ERROR_NOT_READY` for a query of unfinished work).

use super::hook;
use crate::cuda::{CUcontext, CUevent, CUstream};

hook!(cuStreamSynchronize, cuStreamSynchronize_ptsz, cuStreamQuery, cuStreamQuery_ptsz
    => fn(stream: CUstream) |_r, e| {
    e.stream = stream as u64;
});

hook!(cuCtxSynchronize => fn() |_r, _e| {});

// CUDA 13's form with the context to synchronize (NULL: the current one).
hook!(cuCtxSynchronize_v2 => fn(ctx: CUcontext) |_r, e| {
    e.handle = ctx as u64;
});

hook!(cuEventSynchronize, cuEventQuery => fn(event: CUevent) |_r, e| {
    e.handle = event as u64;
});

hook!(cuEventRecord, cuEventRecord_ptsz => fn(event: CUevent, stream: CUstream) |_r, e| {
    e.handle = event as u64;
    e.stream = stream as u64;
});

hook!(cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz => fn(
    event: CUevent,
    stream: CUstream,
    flags: u32,
) |_r, e| {
    e.handle = event as u64;
    e.stream = stream as u64;
    e.flags = u64::from(flags);
});

hook!(cuStreamWaitEvent, cuStreamWaitEvent_ptsz => fn(
    stream: CUstream,
    event: CUevent,
    flags: u32,
) |_r, e| {
    e.stream = stream as u64;
    e.handle = event as u64;
    e.flags = u64::from(flags);
});
