//! `vramtrace replay` and `vramtrace fit` from the outside: output contracts, errors, warnings.

use crate::util::vramtrace;
use std::path::PathBuf;
use vramtrace_format::{Api, Event, Metadata, TraceWriter, WriterOptions};

const MLP: &str = "../samples/traces/h200-torch/mlp.native.vramtrace";

fn json(args: &[&str]) -> serde_json::Value {
    let out = vramtrace().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn replay_json_has_the_contract_fields_for_every_policy() {
    let v = json(&["replay", MLP, "--json", "--policy", "all"]);
    assert!(v["lower_bound_bytes"].as_u64().unwrap() > 0);
    let policies = v["policies"].as_array().unwrap();
    assert_eq!(policies.len(), vramtrace::policy::REGISTRY.len());
    for p in policies {
        for field in [
            "name",
            "peak_requested",
            "peak_allocated",
            "peak_reserved",
            "fragmentation_at_peak",
            "device_allocs",
            "device_frees",
            "est_alloc_time_us",
        ] {
            assert!(!p[field].is_null(), "{field} missing in {p}");
        }
        assert!(p["oom"].is_null());
    }
}

#[test]
fn replay_text_output_is_stable() {
    let out = vramtrace()
        .args([
            "replay",
            MLP,
            "--policy",
            "pytorch,pytorch-expandable,lower-bound",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    insta::assert_snapshot!(String::from_utf8(out.stdout).unwrap());
}

#[test]
fn replay_json_output_is_stable() {
    let v = json(&["replay", MLP, "--policy", "pytorch,cuda-malloc", "--json"]);
    insta::assert_json_snapshot!(v);
}

#[test]
fn an_oom_names_time_size_and_reserved() {
    let v = json(&[
        "replay",
        MLP,
        "--policy",
        "pytorch",
        "--capacity",
        "300MiB",
        "--json",
    ]);
    let oom = &v["policies"][0]["oom"];
    assert!(oom["time_ns"].is_u64() && oom["size"].is_u64());
    assert!(oom["reserved"].as_u64().unwrap() <= 300 << 20);
    assert!(!oom["largest_live"].as_array().unwrap().is_empty());
}

#[test]
fn csv_has_one_row_per_policy() {
    let out = vramtrace()
        .args(["replay", MLP, "--policy", "pytorch,lower-bound", "--csv"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 3);
    assert!(text.starts_with("pid,device,policy,lower_bound_bytes,peak_requested"));
}

#[test]
fn fit_finds_a_capacity_that_fits_and_one_byte_less_does_not() {
    let v = json(&["fit", MLP, "--json"]);
    let lb = v["lower_bound_bytes"].as_u64().unwrap();
    let at = |name: &str, c: u64| {
        json(&[
            "replay",
            MLP,
            "--policy",
            name,
            "--capacity",
            &format!("{c}B"),
            "--json",
        ])
    };
    // The replay lists the recorded setting beside the one asked for: read the one asked for.
    let oom_of = |v: serde_json::Value, name: &str| {
        v["policies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} replayed"))["oom"]
            .clone()
    };
    for p in v["policies"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let need = p["min_capacity_bytes"].as_u64().unwrap();
        assert!(need >= lb, "{name}");
        assert!(oom_of(at(name, need), name).is_null(), "{name} at {need}");
        assert!(
            !oom_of(at(name, need - 1), name).is_null(),
            "{name} at {need} - 1"
        );
        if name == "lower-bound" {
            assert_eq!(need, lb);
        }
    }
}

#[test]
fn list_policies_shows_every_policy_and_its_defaults() {
    let out = vramtrace()
        .args(["replay", "--list-policies"])
        .output()
        .unwrap();
    assert!(out.status.success());
    insta::assert_snapshot!(String::from_utf8(out.stdout).unwrap());
}

#[test]
fn a_bad_policy_is_bad_usage() {
    let out = vramtrace()
        .args(["replay", MLP, "--policy", "pytorch:max_split_size_mb=4"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("max_split_size_mb=4 is too small"));
    let out = vramtrace()
        .args(["replay", MLP, "--policy", "tcmalloc"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn hostile_policy_options_are_bad_usage_in_one_line() {
    // Each once panicked (a division by zero) or never ended (a rounding that wrapped near 2^64).
    for policy in [
        "cuda-async:large_alignment=0",
        "cuda-async:alignment=3",
        "cuda-async:chunk_mb=18446744073709551615",
        "bfc:memory_limit=18446744073709551615",
        "bfc:memory_limit=2PiB",
        "pytorch:max_split_size_mb=18446744073709551615",
        "rmm-binning:max_size_exponent=64",
        "best-fit:alignment=0",
        "buddy:min_block=0",
    ] {
        let out = vramtrace()
            .args(["replay", MLP, "--policy", policy])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{policy}: {err}");
        assert_eq!(
            err.lines().filter(|l| l.starts_with("error")).count(),
            1,
            "{policy}: {err}"
        );
        assert!(err.contains(policy), "{policy}: {err}");
    }
    let out = vramtrace()
        .args(["replay", MLP, "--capacity", "18446744073709551615"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// `groups` processes, each allocating and freeing one 1 MiB buffer on device 0.
fn many_process_trace(groups: u32) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("many.vramtrace");
    let file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let metadata = Metadata {
        capture_level: "request".into(),
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(file, &metadata, WriterOptions::default()).unwrap();
    let mut seq = 0;
    for pid in 1..=groups {
        for api in [Api::CuMemAlloc_v2, Api::CuMemFree_v2] {
            seq += 1;
            w.push(&Event {
                seq,
                time_ns: seq * 10,
                pid,
                tid: pid,
                address: 0x7000_0000_0000,
                size: 1 << 20,
                ..Event::new(api)
            })
            .unwrap();
        }
    }
    w.finish().unwrap();
    (dir, path)
}

#[test]
fn twenty_thousand_processes_are_replayed_and_fitted_each_once() {
    // Assembling the tables once scanned every result for every process: 20,000 processes of
    // one allocation each took 40 s to replay with every policy.
    let (_dir, path) = many_process_trace(20_000);
    let path = path.to_str().unwrap();
    let v = json(&["replay", path, "--policy", "pytorch,cuda-malloc", "--json"]);
    let streams = v["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 20_000);
    assert_eq!(streams[19_999]["pid"], 20_000);
    for st in [&streams[0], &streams[19_999]] {
        let names: Vec<&str> = st["policies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["pytorch", "cuda-malloc"]);
        assert_eq!(st["policies"][0]["peak_reserved"], 2 << 20);
        assert_eq!(st["policies"][1]["peak_reserved"], 2 << 20);
    }
    assert_eq!(v["policies"][1]["peak_reserved"], 20_000u64 << 21);
    let v = json(&["fit", path, "--policy", "cuda-malloc", "--json"]);
    let streams = v["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 20_000);
    assert_eq!(streams[12_345]["policies"][0]["name"], "cuda-malloc");
}

#[test]
fn a_missing_trace_fails_with_one_line_naming_it() {
    let out = vramtrace()
        .args(["replay", "no-such.vramtrace"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1);
    assert!(err.contains("no-such.vramtrace"));
}

/// A trace of `events` (pid, api, address, bytes), one a microsecond, on device 0.
fn trace_of(
    name: &str,
    metadata: &Metadata,
    events: &[(u32, Api, u64, u64)],
) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    let file = std::fs::File::create(&path).unwrap();
    let mut w = TraceWriter::new(file, metadata, WriterOptions::default()).unwrap();
    for (i, &(pid, api, address, size)) in events.iter().enumerate() {
        w.push(&Event {
            seq: i as u64 + 1,
            time_ns: i as u64 * 1000,
            pid,
            device: 0,
            address,
            size,
            ..Event::new(api)
        })
        .unwrap();
    }
    w.finish().unwrap();
    (dir, path)
}

/// What the driver sees under PyTorch's default allocator: a few 2 MiB-multiple segments.
fn segment_level_trace() -> (tempfile::TempDir, PathBuf) {
    let events: Vec<(u32, Api, u64, u64)> = [2u64 << 20, 20 << 20, 20 << 20, 64 << 20, 2 << 20]
        .iter()
        .enumerate()
        .map(|(i, &size)| {
            let address = 0x7000_0000_0000 + (i as u64) * (1 << 30);
            (7, Api::CuMemAlloc_v2, address, size)
        })
        .collect();
    trace_of("segments.vramtrace", &Metadata::default(), &events)
}

#[test]
fn a_segment_level_trace_is_replayed_with_a_warning() {
    let (_dir, path) = segment_level_trace();
    let out = vramtrace()
        .args(["replay", path.to_str().unwrap(), "--policy", "pytorch"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("segment-level trace"));
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("level        segment (inferred from the calls)")
    );
    let v = json(&["replay", path.to_str().unwrap(), "--json"]);
    assert_eq!(v["capture_level"], "segment");
    assert!(
        v["warning"].as_str().unwrap().contains("misleads")
            || v["warning"].as_str().unwrap().contains("mislead")
    );
}

/// Two processes; the second asks for an impossible size (a damaged or hostile trace).
fn two_process_trace() -> (tempfile::TempDir, PathBuf) {
    let metadata = Metadata {
        capture_level: "request".into(),
        ..Metadata::default()
    };
    let events = [
        (1, Api::CuMemAllocAsync, 0x1000, 64 << 20),
        (2, Api::CuMemAllocAsync, 0x2000, u64::MAX / 2),
        (1, Api::CuMemAllocAsync, 0x3000, 32 << 20),
        (1, Api::CuMemFreeAsync, 0x1000, 0),
    ];
    trace_of("two.vramtrace", &metadata, &events)
}

#[test]
fn each_process_is_replayed_on_its_own_and_an_impossible_request_is_an_oom() {
    let (_dir, path) = two_process_trace();
    let v = json(&[
        "replay",
        path.to_str().unwrap(),
        "--json",
        "--policy",
        "all",
    ]);
    let streams = v["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 2);
    assert_eq!(streams[0]["pid"], 1);
    assert_eq!(streams[0]["lower_bound_bytes"], 96u64 << 20);
    for p in streams[0]["policies"].as_array().unwrap() {
        assert!(p["oom"].is_null(), "{p}");
    }
    for p in streams[1]["policies"].as_array().unwrap() {
        assert_eq!(p["oom"]["size"], u64::MAX / 2, "{p}");
    }
    // The summary sums the streams' peaks and keeps the earliest OOM.
    let lb = &v["policies"].as_array().unwrap()[4];
    assert_eq!(lb["name"], "lower-bound");
    assert_eq!(lb["peak_reserved"], 96u64 << 20);
    assert_eq!(lb["oom"]["time_ns"], 1000);
}

#[test]
fn fit_says_null_when_no_capacity_fits() {
    let (_dir, path) = two_process_trace();
    let v = json(&[
        "fit",
        path.to_str().unwrap(),
        "--policy",
        "pytorch",
        "--json",
    ]);
    assert!(v["policies"][0]["min_capacity_bytes"].is_null());
    assert!(v["streams"][0]["policies"][0]["min_capacity_bytes"].is_u64());
}

/// A PyTorch tracker trace (`torch.*` events beside the driver calls) in which the real driver
/// returned its second segment *below* the first. Of the two free 18 MiB blocks the request
/// `c` then finds (the rest of the 20 MiB segment behind `a`, and the whole second segment),
/// PyTorch takes the one at the lower address: the second segment. So the 20 MiB segment is
/// whole again once `a` is freed, and `d` reuses it: 38 MiB reserved. With rising addresses
/// `c` would take the first segment's rest, and `d` a third segment: 58 MiB.
fn tracker_trace_with_falling_addresses() -> (tempfile::TempDir, PathBuf) {
    const MIB: u64 = 1 << 20;
    let (x1, x2) = (0x7f10_0000_0000u64, 0x7f00_0000_0000u64);
    let segment = |address, size| {
        [
            (7, Api::CuMemAlloc_v2, address, size),
            (7, Api::TorchSegmentAlloc, address, size),
        ]
    };
    let free = |address, size| {
        [
            (7, Api::TorchFreeRequested, address, size),
            (7, Api::TorchFreeCompleted, address, size),
        ]
    };
    let alloc = |address, size| (7, Api::TorchAlloc, address, size);
    let mut events = Vec::new();
    events.extend(segment(x1, 20 * MIB));
    events.push(alloc(x1, 2 * MIB)); // a
    events.push(alloc(x1 + 2 * MIB, 18 * MIB)); // t
    events.extend(segment(x2, 18 * MIB));
    events.push(alloc(x2, 18 * MIB)); // b
    events.extend(free(x1 + 2 * MIB, 18 * MIB));
    events.extend(free(x2, 18 * MIB));
    events.push(alloc(x2, 18 * MIB)); // c
    events.extend(free(x1, 2 * MIB));
    events.push(alloc(x1, 20 * MIB)); // d
    trace_of("tracker.vramtrace", &Metadata::default(), &events)
}

#[test]
fn a_tracker_trace_is_replayed_with_the_segment_addresses_the_real_driver_returned() {
    let (_dir, path) = tracker_trace_with_falling_addresses();
    let v = json(&[
        "replay",
        path.to_str().unwrap(),
        "--policy",
        "pytorch",
        "--json",
    ]);
    let stream = &v["streams"][0];
    assert_eq!(stream["recorded_peak_reserved"], 38u64 << 20);
    let row = &stream["policies"][0];
    assert_eq!(row["peak_reserved"], 38u64 << 20, "{row}");
    assert_eq!(row["device_allocs"], 2);
    assert_eq!(row["error_vs_recorded"], 0.0);
}

/// A run capped with `set_per_process_memory_fraction` gave segments back; the trace does not
/// record the cap, so the uncapped replay of the recorded setting says why it differs, and the
/// capped one reproduces the run (`samples/traces/h200-torch/resnet.cap6g`).
#[test]
fn a_run_that_gave_segments_back_is_explained_and_its_cap_reproduces_it() {
    let dir = crate::util::repo("samples/traces/h200-torch");
    let trace = dir.join("resnet.cap6g.vramtrace");
    let trace = trace.to_str().unwrap();
    let stats: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("resnet.cap6g.stats.json")).unwrap(),
    )
    .unwrap();
    let capped = format!(
        "pytorch:memory_fraction={}",
        stats["memory_fraction"].as_str().unwrap()
    );
    let out = vramtrace()
        .args(["replay", trace, "--policy", &capped])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("this run gave 73 segments back to the driver and the replay none"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "recorded     {capped}: predicted 5.99 GiB, this run reserved 5.99 GiB (+0.00%)"
        )),
        "{text}"
    );
    let v = json(&["replay", trace, "--policy", &capped, "--json"]);
    assert_eq!(
        v["streams"][0]["recorded_device_frees"],
        stats["memory_stats"]["num_device_free"]
    );
}

/// A job's ranks are replayed under the limit each recorded, as a single trace is: two copies
/// of the H200 MLP run, their recorded `PYTORCH_CUDA_ALLOC_CONF` capping PyTorch at 0.3% of
/// the device (450 MB; the run reserved 718 MiB).
#[test]
fn a_job_replays_each_rank_under_the_limit_it_recorded() {
    let trace = vramtrace_format::Trace::open(
        &crate::util::repo("samples/traces/h200-torch/mlp.native.vramtrace"),
        vramtrace_format::ReadOptions::default(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for rank in ["0", "1"] {
        let mut metadata = trace.metadata.clone();
        metadata
            .environment
            .retain(|(k, _)| k != "PYTORCH_CUDA_ALLOC_CONF");
        metadata.environment.extend([
            (
                "PYTORCH_CUDA_ALLOC_CONF".to_string(),
                "per_process_memory_fraction:0.003".to_string(),
            ),
            ("RANK".to_string(), rank.to_string()),
        ]);
        let path = dir.path().join(format!("rank{rank}.vramtrace"));
        let mut w = TraceWriter::new(
            std::fs::File::create(&path).unwrap(),
            &metadata,
            WriterOptions::default(),
        )
        .unwrap();
        *w.tables_mut() = trace.tables.clone();
        for e in trace.events() {
            w.push(&e).unwrap();
        }
        w.finish().unwrap();
        let single = json(&[
            "replay",
            path.to_str().unwrap(),
            "--policy",
            "pytorch",
            "--json",
        ]);
        assert!(!single["policies"][0]["oom"].is_null(), "{single}");
    }
    let job = json(&[
        "replay",
        dir.path().to_str().unwrap(),
        "--policy",
        "pytorch",
        "--json",
    ]);
    assert_eq!(
        job["job_summary"][0]["oom_ranks"],
        serde_json::json!([0, 1]),
        "{job}"
    );
}

/// The replay names the lines holding the most at the peak, with the shares PyTorch's own
/// snapshot of the same seeded GPT-2 run gives them (`gpt2-train.pytorch-sites.json`: bytes per
/// site at its peak of allocated bytes, which the trace's lower bound equals).
#[test]
fn the_replay_names_the_lines_at_the_peak_with_pytorchs_own_shares() {
    let dir = crate::util::repo("samples/traces/h200-tracker");
    let sites: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("gpt2-train.pytorch-sites.json")).unwrap(),
    )
    .unwrap();
    let peak = sites["peak_allocated"].as_u64().unwrap() as f64;
    let share = |i: usize| {
        format!(
            "{:.0}%",
            100.0 * sites["sites"][i]["bytes"].as_u64().unwrap() as f64 / peak
        )
    };
    let out = vramtrace()
        .args([
            "replay",
            dir.join("gpt2-train.vramtrace").to_str().unwrap(),
            "--policy",
            "pytorch",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    // PyTorch's third site is the autograd thread's, which has no Python frame to name;
    // vramtrace names it by the backward() call of GPT-2's step (all of it but one 32 MiB buffer
    // of the MLP loop that ran first, named by the MLP's call).
    let backward =
        100.0 * (sites["sites"][2]["bytes"].as_u64().unwrap() - (32 << 20)) as f64 / peak;
    let expected = format!(
        "at the peak  {} transformers/activations.py:66 NewGELUActivation.forward, {} \
         /work/main/.dev-lead/workloads/pyframes_train.py:49 gpt2_step, {backward:.0}% \
         backward of /work/main/.dev-lead/workloads/pyframes_train.py:48 gpt2_step (",
        share(0),
        share(1),
    );
    assert!(text.contains(&expected), "{expected}\n{text}");
    assert!(text.contains("lower bound  4.62 GiB"), "{text}");
}
