//! The search replays each class of provably identical candidates once
//! (`vramtrace::tune::distinct`): on the bundled real traces, that gives exactly what replaying
//! every candidate gives, at the traced capacity and at one that presses the allocators (out of
//! memory, retries, garbage collection), with both driver address orders.

use crate::util::repo;
use vramtrace::interop::import_snapshot::import;
use vramtrace::model::CaptureLevel;
use vramtrace::model::device::CUDA_CONTEXT_BYTES;
use vramtrace::policy::{AddressOrder, PolicySpec};
use vramtrace::replay::replay_all_with;
use vramtrace::tune::distinct::replay_distinct;
use vramtrace::tune::search::candidates;
use vramtrace::tune::{Grid, capacities, model_and_recorded};
use vramtrace_format::{ReadOptions, Trace, pickle};

/// A trace file, or a PyTorch snapshot imported in memory as `report` reads it.
fn open(path: &str) -> Trace {
    if !path.ends_with(".pickle") {
        return Trace::open(&repo(path), ReadOptions::default()).unwrap();
    }
    let bytes = std::fs::read(repo(path)).unwrap();
    let imported = import(&pickle::read(&bytes).unwrap(), path).unwrap();
    let bytes = imported.write(Vec::new()).unwrap();
    Trace::from_bytes(&bytes, ReadOptions::default()).unwrap()
}

/// Checks the collapsed replays of `tune`'s full grid on the trace at `path` against every
/// candidate replayed; returns (replays run, replays asked for).
fn collapsed_equals_every_replay(path: &str) -> (usize, usize) {
    collapsed_equals_every_replay_with(path, None)
}

/// [`collapsed_equals_every_replay`], as if the run had set the memory fraction `fraction`
/// (every PyTorch setting of the grid then keeps it).
fn collapsed_equals_every_replay_with(path: &str, fraction: Option<f64>) -> (usize, usize) {
    let trace = open(path);
    let (model, mut recorded) = model_and_recorded(&trace);
    let judged = model.level.level != CaptureLevel::Segment;
    recorded.memory_fraction = fraction.or(recorded.memory_fraction);
    let specs: Vec<PolicySpec> = candidates(&model.streams, judged, &recorded, Grid::Full)
        .into_iter()
        .map(|c| c.spec)
        .collect();
    let traced = capacities(
        &trace.tables.devices,
        &model,
        None,
        None,
        CUDA_CONTEXT_BYTES,
    );
    // An eighth above the least any allocator needs: most settings run out of memory or
    // retry there, and garbage collection runs (peaks pass the thresholds, so settings with
    // one are replayed, where at the traced capacity they take the outcome of the setting
    // without it).
    let pressed: Vec<u64> = model
        .streams
        .iter()
        .map(|s| s.lower_bound() + s.lower_bound() / 8)
        .collect();
    let (mut ran, mut asked) = (0, 0);
    for (caps, order) in [
        (&traced, AddressOrder::Rising),
        (&traced, AddressOrder::Falling),
        (&pressed, AddressOrder::Rising),
    ] {
        let every = replay_all_with(&model.streams, &specs, caps, order).unwrap();
        let (collapsed, replays) = replay_distinct(&model.streams, &specs, caps, order, 1).unwrap();
        // Rounds as wide as a 16-core pool's: siblings replayed beside the first of their group.
        let (wide, _) = replay_distinct(&model.streams, &specs, caps, order, 16).unwrap();
        assert_eq!(collapsed.len(), every.len(), "{path}");
        for ((c, w), e) in collapsed.iter().zip(&wide).zip(&every) {
            assert_eq!(
                c, e,
                "{path} at {caps:?} ({order:?}): {} on stream {}",
                specs[e.policy], e.stream
            );
            assert_eq!(w, e, "{path} at {caps:?} ({order:?}), 16 wide");
        }
        ran += replays;
        asked += every.len();
    }
    (ran, asked)
}

fn check_all(paths: &[&str]) {
    let (mut ran, mut asked) = (0, 0);
    for p in paths {
        let (r, a) = collapsed_equals_every_replay(p);
        println!("{p}: {r} replays of {a}");
        (ran, asked) = (ran + r, asked + a);
    }
    // The classes must actually merge candidates, or this test checks nothing.
    assert!(ran * 2 < asked, "{ran} replays of {asked}");
}

/// The small real traces: every kind of recording (PyTorch's tracker, the interposer, imported
/// snapshots, JAX and plain CUDA programs), native, expandable and capped runs.
#[test]
fn collapsed_replays_equal_every_replay_on_the_small_real_traces() {
    check_all(&[
        "samples/traces/torch-mlp-native.vramtrace",
        "samples/traces/torch-mlp-expandable.vramtrace",
        "samples/traces/jax-platform.vramtrace",
        "samples/traces/nvcc-static.vramtrace",
        "samples/traces/h200-torch/mlp.split64.vramtrace",
        "samples/traces/h200-torch/gpt_ckpt_varlen.cap2_5g.vramtrace",
        "samples/traces/h200-torch/transformer_varlen.expandable_cap4_2g.vramtrace",
        "samples/traces/h200-tracker/complete-graph.vramtrace",
        "samples/traces/h200-tracker/complete-native.vramtrace",
        "samples/snapshots/fp32.pickle",
        "samples/snapshots/amp.pickle",
        "samples/snapshots/expandable.pickle",
        "samples/snapshots/ring.pickle",
    ]);
}

/// With a memory fraction in every setting, a garbage-collection setting takes the outcome of
/// the same setting without the threshold (fraction kept).
#[test]
fn collapsed_replays_equal_every_replay_with_a_recorded_memory_fraction() {
    for path in [
        "samples/traces/h200-torch/mlp.split64.vramtrace",
        "samples/snapshots/fp32.pickle",
    ] {
        let (ran, asked) = collapsed_equals_every_replay_with(path, Some(0.9));
        println!("{path} at a fraction of 0.9: {ran} replays of {asked}");
        assert!(ran * 2 < asked, "{path}: {ran} replays of {asked}");
    }
}

/// The long real traces: minutes in a debug build, seconds in a release one
/// (`cargo test --release -p vramtrace --test integration tune_replays -- --ignored`).
#[test]
#[ignore = "minutes in a debug build: run with --release -- --ignored"]
fn collapsed_replays_equal_every_replay_on_the_long_real_traces() {
    let mut all = Vec::new();
    for dir in [
        "samples/traces",
        "samples/traces/h200-torch",
        "samples/traces/h200-tracker",
        "samples/traces/h200-tune",
    ] {
        for e in std::fs::read_dir(repo(dir)).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            if name.ends_with(".vramtrace") {
                all.push(format!("{dir}/{name}"));
            }
        }
    }
    all.sort();
    check_all(&all.iter().map(String::as_str).collect::<Vec<_>>());
}
