//! Replays of imported PyTorch snapshots (`samples/snapshots/`, provenance in
//! `samples/README.md`): the requests only, never the recorded allocator's own segments,
//! and the `pytorch` policy's driver calls compared with the segments PyTorch really allocated.

use std::path::Path;
use vramtrace::interop::import_snapshot::{import, recorded_segment_allocs};
use vramtrace::model::Model;
use vramtrace::policy::{BuildContext, build, parse_specs};
use vramtrace::policy::{Driver, DriverCall, DriverModel};
use vramtrace::replay::replay_on;
use vramtrace_format::pickle;

fn predicted_and_recorded(name: &str, policy: &str) -> (Vec<DriverCall>, Vec<u64>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../samples/snapshots/{name}"));
    let bytes = std::fs::read(&path).unwrap();
    let doc = pickle::read(&bytes).unwrap();
    let imported = import(&doc, name).unwrap();
    let recorded: Vec<u64> = recorded_segment_allocs(imported.events.iter().copied())
        .iter()
        .map(|s| s.size)
        .collect();
    let model = Model::from_events(imported.events, &imported.metadata);
    assert_eq!(model.streams.len(), 1);
    let stream = &model.streams[0];
    let spec = &parse_specs(policy).unwrap()[0];
    let mut p = build(
        spec,
        &BuildContext {
            stream,
            capacity: u64::MAX,
        },
    )
    .unwrap();
    let mut driver = Driver::new(DriverModel::default());
    driver.record_calls();
    let (_, driver) = replay_on(
        p.as_mut(),
        stream.requests.iter().copied(),
        driver,
        None,
        &mut (),
    );
    (driver.calls().to_vec(), recorded)
}

#[test]
fn the_native_policy_allocates_the_segments_pytorch_allocated_in_the_same_order() {
    for name in ["fp32.pickle", "amp.pickle"] {
        let (calls, recorded) = predicted_and_recorded(name, "pytorch");
        let predicted: Vec<u64> = calls
            .iter()
            .filter_map(|c| match c {
                DriverCall::Malloc(size) => Some(*size),
                _ => None,
            })
            .collect();
        assert_eq!(predicted, recorded, "{name}");
    }
}

#[test]
fn a_refused_request_frees_the_cached_segments_as_pytorch_did() {
    // fp32 ends with a 32 TiB request that PyTorch refused after freeing 10 cached segments.
    let (calls, _) = predicted_and_recorded("fp32.pickle", "pytorch");
    let frees = calls
        .iter()
        .filter(|c| matches!(c, DriverCall::Free(_)))
        .count();
    assert_eq!(frees, 10);
}

#[test]
fn expandable_segments_map_what_pytorch_mapped() {
    let (calls, recorded) = predicted_and_recorded("expandable.pickle", "pytorch-expandable");
    let predicted: Vec<u64> = calls
        .iter()
        .filter_map(|c| match c {
            DriverCall::Map(size) => Some(*size),
            _ => None,
        })
        .collect();
    assert_eq!(predicted, recorded);
}
