//! The real allocator as the oracle: traces PyTorch recorded of its own requests on an H200,
//! replayed and compared with the same processes' `torch.cuda.memory_stats()`.
//!
//! The traces and stats are in `samples/traces/h200-torch/` (provenance in
//! `samples/README.md`; `samples/workloads/programs/replay_validate.py` made them).

use crate::util::{only_stream, repo};
use std::path::PathBuf;
use vramtrace::model::RequestStream;
use vramtrace::policy::PolicySpec;
use vramtrace::policy::alloc_conf::spec_from_alloc_conf;
use vramtrace::replay::run;

fn samples() -> PathBuf {
    repo("samples/traces/h200-torch")
}

fn stats(name: &str) -> serde_json::Value {
    let path = samples().join(format!("{name}.stats.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The policy the recorded process ran under.
fn policy_of(stats: &serde_json::Value) -> PolicySpec {
    spec_from_alloc_conf(
        stats["alloc_conf"].as_str().unwrap(),
        stats["memory_fraction"].as_str(),
    )
    .unwrap()
}

fn stream_of(name: &str) -> RequestStream {
    only_stream(&samples().join(format!("{name}.vramtrace")))
}

/// Every recorded run, by name.
fn runs() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(samples())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_suffix(".stats.json").map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

#[test]
fn pytorch_policies_predict_every_real_run_exactly() {
    let capacity = |s: &serde_json::Value| s["total_memory"].as_u64().unwrap();
    let mut checked = 0;
    for name in runs() {
        let s = stats(&name);
        let spec = policy_of(&s);
        let o = run(&stream_of(&name), &spec, capacity(&s)).unwrap();
        let real_reserved = s["max_memory_reserved"].as_u64().unwrap();
        let real_allocated = s["max_memory_allocated"].as_u64().unwrap();
        assert_eq!(o.peak_allocated, real_allocated, "{name}: peak allocated");
        if s["memory_stats"]["num_ooms"].as_u64() == Some(0) {
            assert!(o.oom.is_none(), "{name} never ran out of memory");
        }
        // The traces carry the allocator's segment addresses (recorded through PyTorch's trace
        // tracker), which the replay follows: every run is exact, under pressure too
        // (docs/validation.md, section 3).
        assert_eq!(
            o.peak_reserved, real_reserved,
            "{name} ({spec}): exact peak reserved"
        );
        let stat = |k: &str| s["memory_stats"][k].as_u64().unwrap();
        assert_eq!(
            (o.device_allocs, o.device_frees),
            (stat("num_device_alloc"), stat("num_device_free")),
            "{name}: device allocations and frees"
        );
        checked += 1;
    }
    assert_eq!(checked, 22, "every recorded run is checked");
}

/// docs/validation.md's table of the 22 tracker runs (section 3, "Capture: `tracker`"), from
/// which `pytorch`'s and `pytorch-expandable`'s bands on tracker captures come, is the replay of
/// the bundled traces: every row's predicted cell is the replay's peak reserved and its real
/// cell the run's own, and every bundled run has its row.
#[test]
fn the_tracker_table_of_validation_md_is_the_replay_of_the_bundled_traces() {
    let doc = std::fs::read_to_string(repo("docs/validation.md")).unwrap();
    let grouped = vramtrace::units::count;
    let names = runs();
    for name in &names {
        let (workload, config) = name.split_once('.').unwrap();
        let prefix = format!("| {workload} | ");
        let row = doc
            .lines()
            .find(|l| l.starts_with(&prefix) && l.contains(&format!(" | {config}: ")))
            .unwrap_or_else(|| panic!("{name}: a row of the tracker table"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let s = stats(name);
        let o = run(
            &stream_of(name),
            &policy_of(&s),
            s["total_memory"].as_u64().unwrap(),
        )
        .unwrap();
        assert_eq!(cells[4], grouped(o.peak_reserved), "{name}: predicted cell");
        assert_eq!(
            cells[5],
            grouped(s["max_memory_reserved"].as_u64().unwrap()),
            "{name}: real cell"
        );
        assert_eq!(cells[6], "+0.00%", "{name}");
    }
    assert_eq!(names.len(), 22);
}

/// The what-if question itself: from the trace of a run under the default allocator, predict
/// what another configuration reserves, and compare with a separate process that ran under it.
#[test]
fn the_default_run_predicts_the_other_configurations_of_the_same_workload() {
    let mut checked = 0;
    for workload in ["mlp", "transformer_varlen", "resnet", "gpt_ckpt_varlen"] {
        let stream = stream_of(&format!("{workload}.native"));
        for config in ["expandable", "split64"] {
            let s = stats(&format!("{workload}.{config}"));
            let spec = policy_of(&s);
            let o = run(&stream, &spec, u64::MAX).unwrap();
            assert_eq!(
                o.peak_reserved,
                s["max_memory_reserved"].as_u64().unwrap(),
                "{workload}: {spec} predicted from the default run"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 8);
}

/// Out of memory, predicted: the default run's trace, replayed under the memory cap another
/// process ran under, fails at the very request where that process got its OOM error.
#[test]
fn a_capped_run_is_predicted_to_fail_at_the_request_where_it_really_failed() {
    let full = stream_of("gpt_ckpt_varlen.native");
    for capped in ["gpt_ckpt_varlen.cap2_5g", "gpt_ckpt_varlen.cap3g"] {
        let s = stats(capped);
        assert!(s["oom"].is_string(), "{capped} ran out of memory");
        let real = stream_of(capped);
        let failed_at = real
            .requests
            .iter()
            .position(|r| r.kind == vramtrace::model::RequestKind::Attempt)
            .unwrap();
        let o = run(&full, &policy_of(&s), s["total_memory"].as_u64().unwrap()).unwrap();
        let oom = o.oom.expect("the cap is too small for the whole run");
        assert_eq!(oom.request_index, failed_at, "{capped}");
        assert_eq!(oom.size, real.requests[failed_at].size, "{capped}");
    }
}
