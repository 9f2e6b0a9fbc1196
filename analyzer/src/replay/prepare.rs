//! The one set-up of every replay: the request streams of a trace, the capacity each replays
//! under (given, else the traced device's memory, under the memory limit the process recorded),
//! the allocator the program ran under, and the simulated driver each replay starts from (with
//! the addresses the real driver handed out, where the trace recorded them). `replay`, `fit`,
//! `tune`, `diff` and the report all prepare their replays here, so the same policy on the same
//! trace peaks at the same figure in every command (docs/definitions.md, "Capacity").

use super::input::{CapacitySource, ReplayInput};
use crate::model::{Model, RequestStream, pytorch_alloc_conf};
use crate::policy::alloc_conf::spec_from_alloc_conf;
use crate::policy::{AddressOrder, Driver, DriverModel};
use vramtrace_format::{Device, Metadata};

/// What limits a replay's capacity: a capacity the caller gave for every stream, and the
/// memory limit the recorded process ran under (a fraction of the traced device, as its
/// metadata states it).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    pub given: Option<u64>,
    pub memory_fraction: Option<f64>,
}

/// The capacity a stream on `device` replays under: the given one, else the traced device's
/// memory (times the recorded memory fraction, when there is one), else unlimited (`u64::MAX`).
pub fn capacity(devices: &[Device], device: i32, limits: Limits) -> (u64, CapacitySource) {
    if let Some(c) = limits.given {
        return (c, CapacitySource::Given);
    }
    let Some(d) = devices
        .iter()
        .find(|d| d.ordinal == device && d.total_memory > 0)
    else {
        return (u64::MAX, CapacitySource::Unlimited);
    };
    match limits.memory_fraction {
        Some(f) => ((d.total_memory as f64 * f) as u64, CapacitySource::Recorded),
        None => (d.total_memory, CapacitySource::Device),
    }
}

/// The replay input of the `model` of a trace with this `metadata` and these `devices`, each
/// stream under [`capacity`]. `None` when the trace holds no device-memory allocation to
/// replay.
pub fn prepare(
    model: Model,
    metadata: &Metadata,
    devices: &[Device],
    limits: Limits,
) -> Option<ReplayInput> {
    if model.streams.is_empty() {
        return None;
    }
    let capacities = model
        .streams
        .iter()
        .map(|s| {
            capacity(
                devices,
                s.key.expect("model streams have keys").device,
                limits,
            )
        })
        .collect();
    let recorded_policy = model
        .streams
        .iter()
        .any(|s| s.recorded_peak_reserved.is_some())
        .then(|| spec_from_alloc_conf(pytorch_alloc_conf(metadata).unwrap_or_default(), None).ok())
        .flatten();
    Some(ReplayInput {
        model,
        capacities,
        recorded_policy,
    })
}

/// The simulated driver a replay of `stream` at `capacity` starts from: when the trace recorded
/// the real allocator's `cudaMalloc`s (an imported snapshot, PyTorch's tracker) it returns their
/// addresses while the sizes agree ([`Driver::script_segments`]); its own addresses run in
/// `order`.
pub fn driver(stream: &RequestStream, capacity: u64, order: AddressOrder) -> Driver {
    let mut driver = Driver::new(DriverModel { capacity });
    driver.set_address_order(order);
    driver.script_segments(stream.recorded_segments.iter().copied());
    driver
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200() -> Vec<Device> {
        vec![Device {
            ordinal: 0,
            name: "NVIDIA H200".into(),
            uuid: [0; 16],
            total_memory: 1000,
            compute_capability: (9, 0),
        }]
    }

    #[test]
    fn the_recorded_memory_fraction_limits_the_traced_device_but_not_a_given_capacity() {
        let fraction = Limits {
            given: None,
            memory_fraction: Some(0.5),
        };
        assert_eq!(
            capacity(&h200(), 0, fraction),
            (500, CapacitySource::Recorded)
        );
        let given = Limits {
            given: Some(700),
            ..fraction
        };
        assert_eq!(capacity(&h200(), 0, given), (700, CapacitySource::Given));
        assert_eq!(
            capacity(&h200(), 0, Limits::default()),
            (1000, CapacitySource::Device)
        );
        assert_eq!(
            capacity(&h200(), 1, fraction),
            (u64::MAX, CapacitySource::Unlimited)
        );
    }

    #[test]
    fn a_prepared_driver_hands_out_the_recorded_addresses_first() {
        let mut stream = RequestStream::from_requests(Vec::new());
        stream.recorded_segments = vec![(0x7f00_0000_0000, 2 << 20)];
        let mut d = driver(&stream, u64::MAX, AddressOrder::Rising);
        assert_eq!(d.malloc(2 << 20), Some(0x7f00_0000_0000));
    }
}
