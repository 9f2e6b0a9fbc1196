//! `tune`: which allocator setting a program should run with, measured on its own trace.
//!
//! Sans-IO: takes the model and the trace's metadata, returns the ranked answer as data.
//! [`framework`] finds the recorded configuration (the baseline), [`grid`] lists what a user
//! can select, [`search`] replays them all in parallel ([`distinct`]: once per class of
//! candidates that provably replay the same) and ranks them.

pub mod distinct;
pub mod framework;
pub mod grid;
pub mod job;
pub mod pressure;
pub mod row;
pub mod search;

pub use framework::{Framework, Recorded, recorded};
pub use grid::{Candidate, Role};
pub use row::{AddressSpread, Row};
pub use search::{Grid, Tune, TuneOptions, Unjudged, tune};

use crate::model::device::pool_capacity;
use crate::model::load;
use crate::model::table::AllocationTable;
use crate::model::{Loader, Model};
use crate::policy::PolicyError;
use crate::replay::Limits;
use vramtrace_format::{Device, Trace};

/// The trace's model and its recorded configuration (from the table's [`AllocationTable::calls`]),
/// in one pass over the events that keeps no row of the table ([`Loader::requests_only`]).
pub fn model_and_recorded(trace: &Trace) -> (Model, Recorded) {
    let mut loader = Loader::requests_only();
    trace.events().for_each(|e| loader.push(&e));
    let (model, table) = loader.finish(&trace.metadata);
    (model, recorded(&trace.metadata, &trace.tables, table.calls))
}

/// [`model_and_recorded`] with the trace's allocation table ([`crate::model::load`]),
/// from the same pass: what the report reads.
pub fn loaded(trace: &Trace) -> (Model, AllocationTable, Recorded) {
    let (model, table) = load(trace);
    let recorded = recorded(&trace.metadata, &trace.tables, table.calls);
    (model, table, recorded)
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
    let (model, recorded) = model_and_recorded(trace);
    let devices = &trace.tables.devices;
    tune_model(
        devices,
        &model,
        &recorded,
        capacity,
        gpu,
        context,
        Grid::Full,
    )
}

/// [`tune_trace`] on the trace's `model`, already built, from its `recorded` configuration
/// ([`model_and_recorded`]), trying `grid`; `devices` are the trace's (its tables').
pub fn tune_model(
    devices: &[Device],
    model: &Model,
    recorded: &Recorded,
    capacity: Option<u64>,
    gpu: Option<u64>,
    context: u64,
    grid: Grid,
) -> Result<Option<Tune>, PolicyError> {
    let streams = &model.streams;
    if streams.is_empty() {
        return Ok(None);
    }
    let options = TuneOptions {
        capacities: capacities(devices, model, capacity, gpu, context),
        gpu_bytes: gpu,
        context_bytes: context,
        grid,
    };
    tune(streams, &model.level, recorded, &options).map(Some)
}

/// The capacity [`tune_model`] replays each stream of `model` at: `capacity` (exact), else a
/// GPU of `gpu` bytes, else the traced device, each less the CUDA context (`context`) and the
/// memory outside the pool; `devices` are the trace's.
pub fn capacities(
    devices: &[Device],
    model: &Model,
    capacity: Option<u64>,
    gpu: Option<u64>,
    context: u64,
) -> Vec<u64> {
    model
        .streams
        .iter()
        .map(|s| {
            let ordinal = s.key.expect("model streams have keys").device;
            let device = crate::replay::capacity(devices, ordinal, Limits::default()).0;
            match (capacity, gpu) {
                (Some(c), _) => c,
                (None, Some(g)) => pool_capacity(g, context, s.outside.peak_bytes),
                (None, None) => pool_capacity(device, context, s.outside.peak_bytes),
            }
        })
        .collect()
}
