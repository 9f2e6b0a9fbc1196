//! Issue 16 on an H200 (docs/validation.md, "Part 3"): small real traces and logs from
//! `samples/workloads/h200/validation_device_run.sh` (`samples/traces/h200-validation/`, provenance in
//! `samples/README.md`), each replayed and compared with what the real allocator reported in the
//! same run (`truth.json`).

use crate::util::{only_stream, repo};
use std::path::PathBuf;
use vramtrace::interop::rmm_log;
use vramtrace::model::{Loader, Model, RequestStream};
use vramtrace::policy::{BuildContext, Driver, DriverModel, build, parse_specs};
use vramtrace::replay::{Outcome, replay_on, run};

const H200: u64 = 150_109_880_320;

fn dir() -> PathBuf {
    repo("samples/traces/h200-validation")
}

fn truth() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join("truth.json")).unwrap()).unwrap()
}

fn trace_stream(name: &str) -> RequestStream {
    only_stream(&dir().join(name))
}

fn log_stream(name: &str) -> RequestStream {
    let log = rmm_log::read(&std::fs::read_to_string(dir().join(name)).unwrap()).unwrap();
    let model = Model::from_events(log.events, &log.metadata);
    model.streams.into_iter().next().unwrap()
}

fn replay(stream: &RequestStream, policy: &str) -> Outcome {
    run(stream, &parse_specs(policy).unwrap()[0], H200).unwrap()
}

/// PyTorch's `cudaMallocAsync` back-end, three CUDA streams (a side stream hands batches over with
/// `record_stream`): the pool grew to 640 MiB, which the default model reproduces because another
/// stream does not reuse a free while the freeing stream's work is in flight. Sharing every free
/// at once (what a `CUDA_LAUNCH_BLOCKING=1` run does: 608 MiB there) gives 608 MiB.
#[test]
fn cuda_async_keeps_frees_per_stream_while_the_other_stream_is_busy() {
    let s = trace_stream("side_stream.async.vramtrace");
    assert_eq!(s.cuda_streams.len(), 3);
    let t = truth();
    let real = t["torch"]["side_stream.async"]["max_memory_reserved"]
        .as_u64()
        .unwrap();
    assert_eq!(replay(&s, "cuda-async").peak_reserved, real);
    let blocking = t["torch"]["side_stream.async_blocking"]["max_memory_reserved"]
        .as_u64()
        .unwrap();
    assert_eq!(
        replay(&s, "cuda-async:reuse_allow_opportunistic=true").peak_reserved,
        blocking
    );
}

/// The variable-length transformer's native run (PyTorch's memory history of that run): the
/// replay is 4.5% low with the model's own segment addresses and exact, with the same 82
/// `cudaMalloc`s, once the driver returns the addresses the real one did, in order. What differs
/// is which of two equal-size cached blocks is reused: PyTorch takes the one at the lower
/// address, and the addresses are the driver's. A replay of an imported snapshot does this by
/// itself (`RequestStream::recorded_segments`); a configuration whose segments differ drops the
/// script at the first size that differs.
#[test]
fn the_transformer_native_miss_is_the_drivers_addresses() {
    let s = trace_stream("transformer.native.vramtrace");
    let segments: Vec<(u64, u64)> =
        std::fs::read_to_string(dir().join("transformer.native.segments.csv"))
            .unwrap()
            .lines()
            .map(|l| {
                let (a, s) = l.split_once(',').unwrap();
                (a.parse().unwrap(), s.parse().unwrap())
            })
            .collect();
    let t = truth();
    let real = &t["torch"]["transformer.native"];
    let spec = &parse_specs("pytorch").unwrap()[0];
    let mut got = Vec::new();
    for scripted in [false, true] {
        let mut p = build(
            spec,
            &BuildContext {
                stream: &s,
                capacity: H200,
            },
        )
        .unwrap();
        let mut d = Driver::new(DriverModel { capacity: H200 });
        if scripted {
            d.script_segments(segments.iter().copied());
        }
        let (o, d) = replay_on(p.as_mut(), s.requests.iter().copied(), d, None, &mut ());
        got.push((o.peak_reserved, d.device_allocs()));
    }
    let (reserved, allocs) = (
        real["max_memory_reserved"].as_u64().unwrap(),
        real["num_device_alloc"].as_u64().unwrap(),
    );
    assert_eq!(got[1], (reserved, allocs));
    assert_eq!(got[0], (1_243_611_136, 80));
    // A configuration whose segments differ from the first one on gets the model's addresses.
    let spec = &parse_specs("pytorch:max_split_size_mb=64,roundup_power2_divisions=4").unwrap()[0];
    let ctx = BuildContext {
        stream: &s,
        capacity: H200,
    };
    let mut outcomes = Vec::new();
    for scripted in [false, true] {
        let mut p = build(spec, &ctx).unwrap();
        let mut d = Driver::new(DriverModel { capacity: H200 });
        if scripted {
            d.script_segments(segments.iter().copied());
        }
        outcomes.push(replay_on(p.as_mut(), s.requests.iter().copied(), d, None, &mut ()).0);
    }
    assert_eq!(outcomes[0].peak_reserved, outcomes[1].peak_reserved);
}

/// BFC's own request stream (XLA's `bfc_allocator` log of a JAX MLP, 771 requests) against
/// `memory_stats()`: with `allow_growth` (XLA_PYTHON_CLIENT_PREALLOCATE=false) the regions, peak
/// reserved and peak in use are exact; preallocated, the limit is 0.75 of the device rounded up to
/// 2 MiB and the peak in use is exact too.
#[test]
fn bfc_reproduces_xla_on_its_own_request_stream() {
    let s = log_stream("jax_mlp.bfc.csv");
    let t = truth();
    let growth = &t["jax"]["mlp.growth"];
    let o = replay(&s, "bfc:allow_growth=true");
    assert_eq!(o.peak_reserved, growth["peak_pool_bytes"].as_u64().unwrap());
    assert_eq!(
        o.peak_allocated,
        growth["peak_bytes_in_use"].as_u64().unwrap()
    );
    assert_eq!(o.device_allocs, 7);
    let default = &t["jax"]["mlp.default"];
    let o = replay(&s, "bfc");
    assert_eq!(o.peak_reserved, default["pool_bytes"].as_u64().unwrap());
    assert_eq!(o.peak_reserved, default["bytes_limit"].as_u64().unwrap());
    assert_eq!(
        o.peak_allocated,
        default["peak_bytes_in_use"].as_u64().unwrap()
    );
}

/// A request stream exported as RMM's log and replayed through real RMM 26.10 resources
/// (`rmm_replay.py`): RMM's StatisticsResourceAdaptor under each resource gave what it took from
/// upstream. Pool and binning are exact, the capped pool within 0.3%, the smallest arena that
/// serves the log exact on the bisection grid real RMM was bisected on.
#[test]
fn rmm_models_match_real_rmm_on_a_two_stream_log() {
    let s = log_stream("side_stream.rmm.csv");
    assert_eq!(s.cuda_streams.len(), 2);
    let t = truth();
    let real = &t["rmm"]["side_stream"];
    let o = replay(&s, "rmm-pool");
    assert_eq!(
        o.peak_reserved,
        real["pool"]["reserved_peak"].as_u64().unwrap()
    );
    assert_eq!(
        o.device_allocs,
        real["pool"]["upstream_allocations"].as_u64().unwrap()
    );
    let o = replay(&s, "rmm-binning");
    assert_eq!(
        o.peak_reserved,
        real["binning"]["reserved_peak"].as_u64().unwrap()
    );
    let cap = real["pool_cap"]["maximum_pool_size"].as_u64().unwrap();
    let o = replay(&s, &format!("rmm-pool:maximum_pool_size={cap}"));
    let want = real["pool_cap"]["reserved_peak"].as_u64().unwrap() as f64;
    assert!((o.peak_reserved as f64 - want).abs() / want < 0.003);
    // Real RMM's bisection: every arena it found too small the model finds too small, every
    // one it served the model serves.
    for step in real["arena"]["bisection"].as_array().unwrap() {
        let (size, served) = (step[0].as_u64().unwrap(), step[1].as_bool().unwrap());
        let o = replay(&s, &format!("rmm-arena:arena_size={size}"));
        assert_eq!(o.oom.is_none(), served, "arena of {size} B");
    }
}

/// A log RMM's own LoggingResourceAdaptor wrote (the first 600 requests of another workload's log
/// replayed through it; frees of what was still live at the end): every line reads back.
#[test]
fn a_log_written_by_real_rmm_imports() {
    let text = std::fs::read_to_string(dir().join("rmm_logged.csv")).unwrap();
    assert!(rmm_log::looks_like(text.as_bytes()));
    let log = rmm_log::read(&text).unwrap();
    assert_eq!((log.allocations, log.frees, log.failures), (345, 345, 0));
    let mut loader = Loader::requests_only();
    log.events.iter().for_each(|e| loader.push(e));
    let (model, table) = loader.finish(&log.metadata);
    assert_eq!(table.unmatched_frees, 0);
    assert_eq!(model.streams.len(), 1);
    let s = &model.streams[0];
    assert!(s.requests.iter().all(|r| r.size > 0));
}
