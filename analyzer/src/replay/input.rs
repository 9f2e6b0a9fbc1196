//! What a replay of a trace runs on: its request streams, each with the device capacity it
//! replays under.

use crate::model::{Model, pytorch_alloc_conf};
use crate::policy::PolicySpec;
use crate::policy::alloc_conf::spec_from_alloc_conf;
use vramtrace_format::{Device, Metadata, Trace};

/// Where a stream's capacity came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacitySource {
    /// Given by the caller for every stream.
    Given,
    /// The traced device's memory.
    Device,
    /// Neither: no limit (`u64::MAX`).
    Unlimited,
    /// The limit the recorded process ran under, as its metadata states it (a memory fraction
    /// of the traced device).
    Recorded,
}

/// A trace's request streams with the capacity each replays under.
pub struct ReplayInput {
    pub model: Model,
    /// Per stream: the capacity, and where it came from.
    pub capacities: Vec<(u64, CapacitySource)>,
    /// The policy of the allocator as it ran, when the trace holds that allocator's own
    /// segments (PyTorch's tracker): the row a replay is checked against.
    pub recorded_policy: Option<PolicySpec>,
}

impl ReplayInput {
    /// The request streams of a trace already in memory; `capacity` overrides the traced
    /// devices' memory. `None` when it holds no device-memory allocation to replay.
    pub fn from_trace(trace: &Trace, capacity: Option<u64>) -> Option<ReplayInput> {
        let model = Model::from_events(trace.events(), &trace.metadata);
        ReplayInput::of_model(model, &trace.metadata, &trace.tables.devices, capacity)
    }

    /// The input of the `model` of a trace with this `metadata` and these `devices`;
    /// `capacity` overrides the traced devices' memory. `None` when the trace holds no
    /// device-memory allocation to replay.
    pub fn of_model(
        model: Model,
        metadata: &Metadata,
        devices: &[Device],
        capacity: Option<u64>,
    ) -> Option<ReplayInput> {
        if model.streams.is_empty() {
            return None;
        }
        let capacities = model
            .streams
            .iter()
            .map(|s| {
                let device = s.key.expect("model streams have keys").device;
                capacity_among(devices, device, capacity)
            })
            .collect();
        let recorded_policy = model
            .streams
            .iter()
            .any(|s| s.recorded_peak_reserved.is_some())
            .then(|| spec_from_alloc_conf(&pytorch_alloc_conf(metadata), None).ok())
            .flatten();
        Some(ReplayInput {
            model,
            capacities,
            recorded_policy,
        })
    }

    /// Replays every stream that took its capacity from the traced device under `fraction` of
    /// it instead: the limit the recorded process ran under.
    pub fn limit_to(&mut self, fraction: f64) {
        for c in &mut self.capacities {
            if c.1 == CapacitySource::Device {
                *c = ((c.0 as f64 * fraction) as u64, CapacitySource::Recorded);
            }
        }
    }
}

/// The capacity a stream on `device` replays under: `given`, else the traced device's memory,
/// else unlimited (`u64::MAX`).
pub fn capacity_of(trace: &Trace, device: i32, given: Option<u64>) -> (u64, CapacitySource) {
    capacity_among(&trace.tables.devices, device, given)
}

fn capacity_among(devices: &[Device], device: i32, given: Option<u64>) -> (u64, CapacitySource) {
    if let Some(c) = given {
        return (c, CapacitySource::Given);
    }
    devices
        .iter()
        .find(|d| d.ordinal == device && d.total_memory > 0)
        .map_or((u64::MAX, CapacitySource::Unlimited), |d| {
            (d.total_memory, CapacitySource::Device)
        })
}
