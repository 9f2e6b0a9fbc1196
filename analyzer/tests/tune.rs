//! `vramtrace tune`, `fit` and the failure views against the definitions of
//! docs/definitions.md: on every bundled sample, on the H200 runs tune was validated on, and
//! pinned as snapshots.

use crate::util::{repo, vramtrace_in_repo};
use serde_json::Value;
use vramtrace::model::device::CUDA_CONTEXT_BYTES;
use vramtrace::policy::alloc_conf::spec_from_alloc_conf;
use vramtrace::replay::run;
use vramtrace::units::gpu_bytes;

fn json(args: &[&str]) -> Value {
    let out = vramtrace_in_repo().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn text(args: &[&str]) -> String {
    let out = vramtrace_in_repo().args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The bundled traces: every top-level sample and every H200 workload. Of the H200 runs of one
/// workload under several configurations (the same requests, bar the capped runs that stop
/// early) the default run and every capped or failing one are taken; the others differ only in
/// the configuration recorded, and a debug build takes seconds per tune of each.
fn bundled() -> Vec<String> {
    let mut all = Vec::new();
    for dir in [
        "samples/traces",
        "samples/traces/h200-torch",
        "samples/traces/h200-tune",
    ] {
        for e in std::fs::read_dir(repo(dir)).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            let small = e.metadata().unwrap().len() < 30_000;
            let default_run = name.ends_with(".native.vramtrace") || name.contains("recorded");
            let take = dir == "samples/traces" || small || default_run;
            if name.ends_with(".vramtrace") && take && !name.starts_with("generate") {
                all.push(format!("{dir}/{name}"));
            }
        }
    }
    all.sort();
    all
}

#[test]
fn tune_fit_and_summary_answer_on_every_bundled_sample() {
    for t in bundled() {
        let tune = json(&["tune", &t, "--json"]);
        let rec = &tune["recorded"];
        assert_eq!(rec["recorded"], true, "{t}");
        // The process peak is the pool peak plus what is outside it plus the context.
        assert_eq!(
            rec["process_peak"].as_u64().unwrap(),
            rec["pool_peak_reserved"].as_u64().unwrap()
                + tune["outside_bytes"].as_u64().unwrap()
                + CUDA_CONTEXT_BYTES,
            "{t}"
        );
        let ranked = tune["ranked"].as_array().unwrap();
        if tune["judged"] == true {
            assert!(ranked.iter().any(|r| r["recorded"] == true), "{t}");
            // A saving is measured against the recorded row.
            for r in ranked {
                assert_eq!(
                    r["saving_bytes"].as_i64().unwrap(),
                    rec["process_peak"].as_i64().unwrap() - r["process_peak"].as_i64().unwrap(),
                    "{t}"
                );
                assert_eq!(r["role"], "setting", "{t}");
            }
        } else {
            assert!(ranked.is_empty(), "{t}");
        }
        let fit = json(&["fit", &t, "--policy", "pytorch,lower-bound", "--json"]);
        for p in fit["policies"].as_array().unwrap() {
            if let (Some(min), Some(gpu)) = (
                p["min_capacity_bytes"].as_u64(),
                p["min_gpu_bytes"].as_u64(),
            ) {
                assert!(gpu >= min + CUDA_CONTEXT_BYTES, "{t}");
                for g in p["gpus"].as_array().unwrap() {
                    let size = gpu_bytes(g["gb"].as_u64().unwrap());
                    assert_eq!(g["fits"], gpu <= size, "{t}");
                }
            }
        }
        let summary = json(&["summary", &t, "--json"]);
        for g in summary["groups"].as_array().unwrap() {
            for f in g["failures"].as_array().unwrap() {
                assert_eq!(f["out_of_memory"], f["result"] == 2, "{t}");
            }
        }
    }
}

#[test]
fn tune_finds_the_varying_transformer_a_setting_that_saves_a_third_and_says_what_to_paste() {
    let t = json(&[
        "tune",
        "samples/traces/h200-torch/transformer_varlen.native.vramtrace",
        "--json",
    ]);
    assert_eq!(t["framework"], "pytorch");
    assert_eq!(t["recorded"]["select"], "unset PYTORCH_CUDA_ALLOC_CONF");
    // The recorded default reserves 8.54 GiB (the real run's max_memory_reserved).
    assert_eq!(t["recorded"]["pool_peak_reserved"], 9_164_554_240u64);
    let best = &t["ranked"][0];
    // About 40% of the process peak (3.7 GiB of 9.3): the H200 runs under the settings it
    // ranks near the top reserved 5.20-5.32 GB against the default's 9.16 GB.
    assert!(best["saving_fraction"].as_f64().unwrap() > 0.35);
    assert!(
        best["select"]
            .as_str()
            .unwrap()
            .starts_with("export PYTORCH_CUDA_ALLOC_CONF=")
    );
    let bounds: Vec<&str> = t["bounds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["setting"].as_str().unwrap())
        .collect();
    assert_eq!(bounds, ["lower-bound", "greedy-by-size"]);
}

#[test]
fn a_segment_level_trace_ranks_nothing_and_says_why() {
    let t = json(&[
        "tune",
        "samples/traces/torch-mlp-native.vramtrace",
        "--json",
    ]);
    assert_eq!(t["judged"], false);
    assert!(
        t["not_judged"][0]["why"]
            .as_str()
            .unwrap()
            .contains("record --requests")
    );
}

#[test]
fn the_policy_list_takes_the_alloc_conf_syntax() {
    let a = json(&[
        "replay",
        "samples/traces/h200-torch/mlp.native.vramtrace",
        "--policy",
        "pytorch:max_split_size_mb:128",
        "--json",
    ]);
    // The replay lists the recorded setting (`pytorch`) beside the one asked for.
    assert!(
        a["policies"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "pytorch:max_split_size_mb=128")
    );
    let b = json(&[
        "replay",
        "samples/traces/h200-torch/mlp.native.vramtrace",
        "--policy",
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        "--json",
    ]);
    assert!(
        b["policies"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "pytorch-expandable")
    );
}

/// tune's recommendations run for real on the H200 (docs/validation.md, "tune on an H200"): the
/// recorded default and the tuned setting of each workload, predicted from the recorded trace
/// to the byte.
#[test]
fn tunes_predictions_match_the_h200_runs() {
    for w in ["multires_cnn", "generate", "transformer_varlen"] {
        let dir = repo("samples/traces/h200-tune");
        let stats = |n: &str| -> Value {
            serde_json::from_str(&std::fs::read_to_string(dir.join(n)).unwrap()).unwrap()
        };
        let recorded = stats(&format!("{w}.recorded.stats.json"));
        let tuned = stats(&format!("{w}.tuned.stats.json"));
        let stream = crate::util::only_stream(&dir.join(format!("{w}.recorded.vramtrace")));
        let capacity = recorded["total_memory"].as_u64().unwrap();
        let predict = |s: &Value| {
            let spec = spec_from_alloc_conf(s["alloc_conf"].as_str().unwrap(), None).unwrap();
            run(&stream, &spec, capacity).unwrap().peak_reserved
        };
        let real = |s: &Value| s["max_memory_reserved"].as_u64().unwrap();
        assert_eq!(predict(&recorded), real(&recorded), "{w}: recorded");
        assert_eq!(predict(&tuned), real(&tuned), "{w}: tuned");
        assert!(real(&tuned) < real(&recorded), "{w}");
    }
}

/// tune's pick, run for real: on each of the three H200 workloads the setting the tuned run used
/// (tune's pick when it ran) has its predicted pool peak equal to that run's
/// `max_memory_reserved` to the byte (the recorded traces carry PyTorch's segment addresses,
/// which the replays follow while the segments match), and is ranked by that figure: the traces
/// are tracker captures, on which docs/validation.md's runs validate both PyTorch models exact,
/// so no row above it predicts more and none is a noise tie. On `transformer_varlen`
/// `expandable_segments:True` (5.63 GiB) no longer ranks first on a band earned on other
/// captures: the setting that ran (5.58 GiB) ranks above it. The first is always a validated
/// model. Rows whose prediction hangs on the driver's addresses in a run no trace can know are
/// flagged with their range (issue 14); the settings that ran are not.
#[test]
fn tunes_picks_are_the_settings_that_ran_and_predict_them_exactly() {
    let dir = repo("samples/traces/h200-tune");
    for w in ["transformer_varlen", "multires_cnn", "generate"] {
        let trace = dir.join(format!("{w}.recorded.vramtrace"));
        let tune = json(&["tune", trace.to_str().unwrap(), "--json"]);
        let ranked = tune["ranked"].as_array().unwrap();
        assert!(!ranked[0]["validated"].is_null(), "{w}: {}", ranked[0]);
        let tuned: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{w}.tuned.stats.json"))).unwrap(),
        )
        .unwrap();
        let ran = spec_from_alloc_conf(tuned["alloc_conf"].as_str().unwrap(), None)
            .unwrap()
            .to_string();
        let (at, row) = ranked
            .iter()
            .enumerate()
            .find(|(_, r)| {
                r["setting"] == ran.as_str()
                    || r["equivalent"]
                        .as_array()
                        .unwrap()
                        .contains(&Value::from(ran.as_str()))
            })
            .unwrap_or_else(|| panic!("{w}: {ran} is a row"));
        for above in &ranked[..at] {
            assert!(
                above["process_peak"].as_u64() <= row["process_peak"].as_u64(),
                "{w}: {} ranks above {ran} and predicts more",
                above["setting"]
            );
            assert_eq!(above["validated"]["capture"], "tracker", "{w}: {above}");
            assert_eq!(above["validated"]["low"], 0.0, "{w}: {above}");
        }
        assert_eq!(tune["capture"], "tracker", "{w}");
        if w == "transformer_varlen" {
            let expandable = ranked
                .iter()
                .position(|r| r["setting"] == "pytorch-expandable")
                .expect("expandable segments are a row");
            assert!(
                at < expandable,
                "{w}: {ran} #{} above expandable #{}",
                at + 1,
                expandable + 1
            );
        }
        assert_eq!(
            row["pool_peak_reserved"], tuned["max_memory_reserved"],
            "{w}: predicted to the byte"
        );
        assert!(row["address_sensitive"].is_null(), "{w}: {row}");
    }
    let text = text(&[
        "tune",
        "samples/traces/h200-tune/transformer_varlen.recorded.vramtrace",
    ]);
    assert!(
        text.contains("address-sensitive: 5.56 GiB-5.57 GiB]"),
        "{text}"
    );
    assert!(
        text.contains("address-sensitive: 5.54 GiB, up to "),
        "{text}"
    );
}

#[test]
fn recorded_failures_are_grouped_by_site_with_times_from_the_start() {
    let s = json(&[
        "summary",
        "samples/traces/h200-torch/resnet.cap5_6g.vramtrace",
        "--json",
    ]);
    // The device's group (the trace also holds a pinned host buffer's group).
    let device = s["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["device"] == 0)
        .unwrap();
    let f = &device["failures"];
    assert_eq!(f.as_array().unwrap().len(), 1);
    assert_eq!(f[0]["count"], 36);
    assert_eq!(f[0]["result_name"], "CUDA_ERROR_OUT_OF_MEMORY (2)");
    assert!(f[0]["last_time_ns"].as_u64().unwrap() < 5_000_000_000);
    let r = text(&[
        "replay",
        "samples/traces/h200-torch/resnet.cap5_6g.vramtrace",
        "--policy",
        "pytorch",
    ]);
    assert!(r.contains("36 allocations failed with CUDA_ERROR_OUT_OF_MEMORY"));
    assert!(r.contains("pass --capacity SIZE"));
}

#[test]
fn tune_and_fit_text_are_stable() {
    let t = "samples/traces/h200-torch/mlp.native.vramtrace";
    let tune = text(&["tune", t]);
    // The search time is the one figure that changes from run to run.
    let tune: String = tune
        .lines()
        .map(|l| {
            if l.starts_with("tried") {
                "tried      (time elided)"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    insta::assert_snapshot!("tune_text", tune);
    insta::assert_snapshot!(
        "fit_text",
        text(&[
            "fit",
            t,
            "--policy",
            "pytorch,pytorch-expandable,bfc,lower-bound"
        ])
    );
    insta::assert_json_snapshot!(
        "fit_json",
        json(&["fit", t, "--policy", "pytorch,lower-bound", "--json"])
    );
}

#[test]
fn the_answers_name_the_peak_the_best_setting_and_the_smallest_gpu() {
    let path = repo("samples/traces/h200-tune/multires_cnn.recorded.vramtrace");
    let (tune, a) = crate::util::answers_of(&path);
    assert_eq!(a.recorded_select, "unset PYTORCH_CUDA_ALLOC_CONF");
    let best = a.best.unwrap();
    assert_eq!(
        best.select,
        "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    );
    // 4.15 GB recorded against 2.43 GB: the H200 run reserved exactly these.
    assert_eq!(best.saving_bytes, 4_150_263_808 - 2_426_404_864);
    assert_eq!(a.smallest_gpu_gb, Some(16));
    assert!(a.preallocating.is_empty());
    // The recorded process peak as the driver saw it: the run's own max_memory_reserved, its
    // allocator's segments, plus what libraries took with plain cuMemAlloc beside them.
    assert_eq!(a.peak_bytes, 4_150_263_808 + tune.outside_bytes);
    assert_eq!(tune.outside_bytes, 134_532_616);
}
