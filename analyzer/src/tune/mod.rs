//! `tune`: which allocator setting a program should run with, measured on its own trace.
//!
//! Sans-IO: takes the model and the trace's metadata, returns the ranked answer as data.
//! [`framework`] finds the recorded configuration (the baseline), [`grid`] lists what a user
//! can select, [`search`] replays them all in parallel and ranks them.

pub mod framework;
pub mod grid;
pub mod search;

pub use framework::{Framework, Recorded, recorded};
pub use grid::{Candidate, Role};
pub use search::{AddressSpread, Row, Tune, TuneOptions, Unjudged, tune};

use crate::model::device::pool_capacity;
use crate::policy::PolicyError;
use crate::replay::ReplayInput;
use vramtrace_format::{Event, MemoryKind, Trace};

/// The recorded configuration of a trace.
pub fn recorded_of(trace: &Trace) -> Recorded {
    let uses_pool = trace.events().any(|e| through_pool(&e));
    recorded(&trace.metadata, &trace.tables, uses_pool)
}

/// Whether `e` shows the process's requests going through the stream-ordered pool (the
/// `uses_pool` of [`recorded`]): a successful `cuMemAllocAsync`-family call.
pub fn through_pool(e: &Event) -> bool {
    e.succeeded() && e.api.kind() == MemoryKind::Pool
}

/// Tunes a whole trace: its request streams replayed at `capacity` (exact), else on a GPU of
/// `gpu` bytes, else on the traced device, each less the CUDA context (`context`) and the
/// memory outside the pool (docs/definitions.md, "Capacity"). `None` when the trace holds no
/// device memory to replay.
pub fn tune_trace(
    trace: &Trace,
    capacity: Option<u64>,
    gpu: Option<u64>,
    context: u64,
) -> Result<Option<Tune>, PolicyError> {
    let Some(input) = ReplayInput::from_trace(trace, None) else {
        return Ok(None);
    };
    let streams = &input.model.streams;
    let capacities = streams
        .iter()
        .zip(&input.capacities)
        .map(|(s, &(device, _))| match (capacity, gpu) {
            (Some(c), _) => c,
            (None, Some(g)) => pool_capacity(g, context, s.outside.peak_bytes),
            (None, None) => pool_capacity(device, context, s.outside.peak_bytes),
        })
        .collect();
    let options = TuneOptions {
        capacities,
        gpu_bytes: gpu,
        context_bytes: context,
    };
    tune(streams, &input.model.level, &recorded_of(trace), &options).map(Some)
}
