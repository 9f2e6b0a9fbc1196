//! The real allocator as the oracle, through the whole pipeline: traces that `vramtrace record
//! --requests` made of PyTorch training loops on an H200, replayed with the PyTorch policies and
//! compared with PyTorch's own `max_memory_reserved()` for the same loops under the native
//! allocator and expandable segments (`samples/traces/*.truth.json`; provenance in
//! `samples/README.md`).

use crate::util::repo;
use std::path::PathBuf;
use vramtrace::model::Model;
use vramtrace::policy::parse_specs;
use vramtrace::replay::run;
use vramtrace_format::{ReadOptions, Trace};

fn traces() -> PathBuf {
    repo("samples/traces")
}

fn truth(workload: &str, config: &str, field: &str) -> u64 {
    let path = traces().join(format!("torch-{workload}.truth.json"));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["configs"][config][field].as_u64().unwrap()
}

fn replay(workload: &str, policy: &str) -> (u64, u64, u64) {
    let path = traces().join(format!("torch-{workload}-requests.vramtrace"));
    let trace = Trace::open(&path, ReadOptions::default()).unwrap();
    let model = Model::from_events(trace.events(), &trace.metadata);
    let stream = &model.streams[0];
    let spec = &parse_specs(policy).unwrap()[0];
    let outcome = run(stream, spec, 140 << 30).unwrap();
    (
        outcome.peak_reserved,
        outcome.device_allocs,
        stream.outside.peak_bytes,
    )
}

/// Regression: the six plain `cuMemAlloc` calls libraries make beside PyTorch's pool requests
/// were replayed as tensors, which put the MLP 17.9% and the transformer 5.5% off.
#[test]
fn plain_driver_allocations_beside_pool_requests_stay_outside_the_allocator() {
    for workload in ["mlp", "transformer"] {
        let (_, _, outside) = replay(workload, "pytorch");
        assert_eq!(outside, 134_481_920, "{workload}");
    }
}

#[test]
fn a_recorded_mlp_replays_to_the_real_peak_reserved_of_both_pytorch_allocators() {
    let (native, allocs, _) = replay("mlp", "pytorch");
    assert_eq!(native, truth("mlp", "native", "max_memory_reserved"));
    assert_eq!(allocs, truth("mlp", "native", "num_device_alloc"));
    assert_eq!(
        replay("mlp", "pytorch-expandable").1,
        truth("mlp", "expandable_segments", "num_device_alloc")
    );
    let (expandable, _, _) = replay("mlp", "pytorch-expandable");
    assert_eq!(
        expandable,
        truth("mlp", "expandable_segments", "max_memory_reserved")
    );
}

/// The transformer's sequence lengths vary, which fragments: the known miss of the native
/// model on a trace recorded under another back-end (docs/validation.md) is held to its
/// measured size so that a change for the worse shows.
#[test]
fn a_recorded_transformer_replays_within_the_documented_error() {
    let error = |policy: &str, config: &str| {
        let predicted = replay("transformer", policy).0 as f64;
        let real = truth("transformer", config, "max_memory_reserved") as f64;
        (predicted - real) / real
    };
    let native = error("pytorch", "native");
    let expandable = error("pytorch-expandable", "expandable_segments");
    assert!(native.abs() < 0.06, "native {native:+.4}");
    assert!(expandable.abs() < 0.01, "expandable {expandable:+.4}");
}
