//! Issue 24 on an H200 (docs/validation.md, "The stream-ordered pool from its
//! synchronizations"): the probes of `samples/workloads/probes/pool_rules.py` and the workloads of
//! `samples/workloads/programs/pool_workloads.py`, recorded with the ordering events
//! (`samples/traces/h200-pool/`, real figures in its `truth.json`), replayed with `cuda-async`.

use crate::util::{only_stream, repo};
use vramtrace::model::{Order, RequestKind, RequestStream};
use vramtrace::policy::parse_specs;
use vramtrace::replay::{PoolRange, pool_range, run};

const MIB: u64 = 1 << 20;
const H200: u64 = 150_109_880_320;

fn truth() -> serde_json::Value {
    let path = repo("samples/traces/h200-pool/truth.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn stream(name: &str) -> RequestStream {
    only_stream(&repo(&format!("samples/traces/h200-pool/{name}.vramtrace")))
}

/// `cuda-async`'s peak on `s`, and its range.
fn predict(s: &RequestStream) -> (u64, PoolRange) {
    let spec = &parse_specs("cuda-async").unwrap()[0];
    let peak = run(s, spec, H200).unwrap().peak_reserved;
    (peak, pool_range(s, spec, H200, peak).unwrap().unwrap())
}

fn orders(s: &RequestStream, order: Order) -> usize {
    s.requests
        .iter()
        .filter(|r| r.kind == RequestKind::Order(order))
        .count()
}

/// Every probe whose rule the trace shows: the pool's real peak, to the byte.
#[test]
fn each_probe_rule_gives_the_real_pools_peak() {
    let t = truth();
    for probe in [
        "same_stream_busy",  // a stream reuses its own free at once
        "cross_busy",        // another stream does not, while the freeing stream is busy
        "cross_wait_stream", // ... until it waits for an event recorded after the free
        "cross_stream_sync", // ... or the freeing stream is synchronized
        "cross_event_sync",  // ... or an event recorded after the free is
        "cross_query",       // ... or a query saw the freeing stream done
        "pending_first",     // a stream's frees since the last synchronization come first
        "ties",              // among equal ones, the earliest freed
        "threshold_zero",    // release threshold 0: back to the driver at synchronization
        "empty_cache",       // empty_cache: trimmed to nothing
    ] {
        let s = stream(&format!("probes/{probe}"));
        let real = t["probes"][probe]["max_memory_reserved"].as_u64().unwrap();
        assert_eq!(predict(&s).0, real, "{probe}");
    }
    let s = stream("probes/cross_event_sync");
    assert_eq!(
        (orders(&s, Order::Record), orders(&s, Order::Event)),
        (1, 1)
    );
    let s = stream("probes/cross_wait_stream");
    assert_eq!((orders(&s, Order::Record), orders(&s, Order::Wait)), (1, 1));
}

/// A free on an idle stream, no ordering, asked for on another stream: GPU progress decided
/// (the pool reused it). The prediction is the range from reuse (64 MiB) to growth (128 MiB).
#[test]
fn where_gpu_progress_decides_the_real_peak_lies_in_the_predicted_range() {
    let s = stream("probes/cross_idle");
    let real = truth()["probes"]["cross_idle"]["max_memory_reserved"]
        .as_u64()
        .unwrap();
    let (peak, r) = predict(&s);
    assert_eq!(
        (r.earliest_completion, r.latest_completion),
        (64 * MIB, 128 * MIB)
    );
    assert_eq!(peak, r.latest_completion);
    assert!(r.earliest_completion <= real && real <= r.latest_completion);
}

/// `torch.cuda.synchronize()` under CUDA 13.0 / driver 580 reached the driver through no
/// entry point the recorder of that run hooked (no `cuCtxSynchronize`): the probe's trace holds
/// no device synchronization, and the model, not seeing it, grows where the pool reused (128
/// against 64 MiB). `cuCtxSynchronize_v2` is hooked since, not yet checked on a GPU.
#[test]
fn the_device_synchronization_of_cuda_13_is_missing_from_the_probe_trace() {
    let s = stream("probes/cross_device_sync");
    assert_eq!(orders(&s, Order::Device), 0);
    assert_eq!(predict(&s).0, 128 * MIB);
    assert_eq!(
        truth()["probes"]["cross_device_sync"]["max_memory_reserved"].as_u64(),
        Some(64 * MIB)
    );
}

/// The side stream with `record_stream` and `empty_cache`: exact from both captures.
#[test]
fn the_side_stream_workload_is_exact_from_both_captures() {
    let real = truth()["workloads"]["side_stream.async"]["max_memory_reserved"]
        .as_u64()
        .unwrap();
    for capture in ["native", "async"] {
        let s = stream(&format!("side_stream.{capture}"));
        let (peak, r) = predict(&s);
        assert!(r.synchronizations, "{capture}");
        assert_eq!(peak, real, "{capture}");
    }
}

/// Both captures of every workload carry the ordering calls, so the model follows them.
#[test]
fn every_workload_trace_records_its_synchronizations() {
    for w in [
        "gpt2_varlen",
        "generate_kv",
        "amp_vit",
        "multires_cnn",
        "side_stream",
        "transformer",
        "varbatch_infer",
    ] {
        for capture in ["native", "async"] {
            let s = stream(&format!("{w}.{capture}"));
            assert!(orders(&s, Order::Stream) > 0, "{w}.{capture}");
        }
    }
}

/// A trace recorded before the recorder logged orderings reads as before: no ordering request,
/// and `cuda-async` says its prediction lacks them.
#[test]
fn an_older_trace_has_no_orderings_and_says_so() {
    let s = only_stream(&repo("samples/traces/torch-transformer-requests.vramtrace"));
    assert!(
        !s.requests
            .iter()
            .any(|r| matches!(r.kind, RequestKind::Order(_)))
    );
    assert!(!predict(&s).1.synchronizations);
}
