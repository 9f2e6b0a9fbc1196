//! `summary`, `diff`, `import` and `export` through the real command line, on the sample trace
//! and on PyTorch snapshots recorded on an H200 (samples/README.md has their
//! provenance and the allocator counters quoted below).

use crate::util::{repo, vramtrace_in_repo as vramtrace};
use serde_json::Value;
use std::path::{Path, PathBuf};
use vramtrace_format::pickle;

/// Runs the command, expects success, returns stdout.
fn ok(args: &[&str]) -> String {
    let out = vramtrace().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn import(dir: &Path, snapshot: &str) -> PathBuf {
    let out = dir.join(format!("{snapshot}.vramtrace"));
    let src = repo(&format!("samples/snapshots/{snapshot}.pickle"));
    ok(&["import", src.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    out
}

fn summary_json(trace: &Path) -> Value {
    serde_json::from_str(&ok(&["summary", "--json", trace.to_str().unwrap()])).unwrap()
}

fn device0(summary: &Value) -> &Value {
    summary["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["device"] == 0)
        .unwrap()
}

#[test]
fn imported_snapshots_reproduce_pytorchs_own_peaks_exactly() {
    let dir = tempfile::tempdir().unwrap();
    // (snapshot, torch requested_bytes.all.peak, reserved_bytes.all.peak, num_ooms)
    for (name, requested, reserved, ooms) in [
        ("fp32", 581_095_424u64, 666_894_336u64, 1u64),
        ("amp", 581_095_424, 603_979_776, 0),
        ("expandable", 581_095_424, 637_534_208, 0),
        // Only the last 300 entries: what was live before them is rebuilt from the end state.
        ("ring", 581_095_424, 666_894_336, 0),
    ] {
        let s = summary_json(&import(dir.path(), name));
        let g = device0(&s);
        assert_eq!(g["peak_requested"], requested, "{name}");
        assert_eq!(g["peak_reserved"], reserved, "{name}");
        assert_eq!(g["failed"], ooms, "{name}");
        assert_eq!(s["has_allocator_segments"], true);
    }
}

#[test]
fn the_oom_is_reported_with_what_was_live() {
    let dir = tempfile::tempdir().unwrap();
    let s = summary_json(&import(dir.path(), "fp32"));
    let f = &device0(&s)["failures"][0];
    assert_eq!(
        (f["count"].as_u64(), f["max_size"].as_u64()),
        (Some(1), Some(1u64 << 45))
    );
    assert_eq!(f["api"], "cuMemAllocAsync");
    assert_eq!(f["result"], 2);
    assert_eq!(f["out_of_memory"], true);
    assert_eq!(f["result_name"], "CUDA_ERROR_OUT_OF_MEMORY (2)");
    assert!(f["live_requested"].as_u64().unwrap() > 300 << 20);
    assert!(
        f["frames"][0]
            .as_str()
            .unwrap()
            .contains("interop_snapshot.py")
    );
}

/// `device_free` of the `oom` entry in samples/snapshots/fp32.pickle.
const FP32_OOM_DEVICE_FREE: u64 = 148_945_108_992;

#[test]
fn export_then_import_keeps_peaks_and_end_state() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["fp32", "expandable", "ring"] {
        let trace = import(dir.path(), name);
        let exported = dir.path().join(format!("{name}.export.pickle"));
        ok(&[
            "export",
            trace.to_str().unwrap(),
            "--to",
            "pytorch-snapshot",
            "-o",
            exported.to_str().unwrap(),
        ]);
        let bytes = std::fs::read(&exported).unwrap();
        let doc = pickle::read(&bytes).unwrap();
        // _memory_viz `segsum` asserts this for every segment.
        let segs = doc.items(doc.get(doc.root(), "segments").unwrap()).unwrap();
        for seg in segs {
            let total = doc.as_u64(doc.get(seg, "total_size").unwrap()).unwrap();
            let blocks = doc.items(doc.get(seg, "blocks").unwrap()).unwrap();
            let sum: u64 = blocks
                .iter()
                .map(|b| doc.as_u64(doc.get(b, "size").unwrap()).unwrap())
                .sum();
            assert_eq!(sum, total, "{name}");
        }
        // PyTorch's `device_free` of the OOM survives the round trip.
        let traces = doc
            .items(doc.get(doc.root(), "device_traces").unwrap())
            .unwrap();
        let ooms: Vec<u64> = doc
            .items(&traces[0])
            .unwrap()
            .iter()
            .filter(|e| doc.as_str(doc.get(e, "action").unwrap()) == Some("oom"))
            .map(|e| doc.as_u64(doc.get(e, "device_free").unwrap()).unwrap())
            .collect();
        assert_eq!(ooms.len(), usize::from(name == "fp32"), "{name}");
        if name == "fp32" {
            assert_eq!(ooms[0], FP32_OOM_DEVICE_FREE);
        }
        let again = dir.path().join(format!("{name}.again.vramtrace"));
        ok(&[
            "import",
            exported.to_str().unwrap(),
            "-o",
            again.to_str().unwrap(),
        ]);
        let (a, b) = (summary_json(&trace), summary_json(&again));
        assert_eq!(device0(&a)["peak_requested"], device0(&b)["peak_requested"]);
        assert_eq!(device0(&a)["peak_reserved"], device0(&b)["peak_reserved"]);
        assert_eq!(device0(&a)["leaks"]["bytes"], device0(&b)["leaks"]["bytes"]);
    }
}

#[test]
fn perfetto_export_matches_the_trace_event_schema() {
    let dir = tempfile::tempdir().unwrap();
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(repo("analyzer/tests/perfetto.schema.json")).unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let fp32 = import(dir.path(), "fp32");
    for trace in [repo("samples/traces/synthetic-mlp.vramtrace"), fp32] {
        let out = dir.path().join("out.json");
        ok(&[
            "export",
            trace.to_str().unwrap(),
            "--to",
            "perfetto",
            "-o",
            out.to_str().unwrap(),
        ]);
        let json: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&json)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{}: {errors:?}", trace.display());
        let events = json["traceEvents"].as_array().unwrap();
        assert!(events.iter().any(|e| e["ph"] == "C"));
    }
    // The schema is not vacuous.
    let bad = serde_json::json!({"traceEvents": [{"name": "x", "ph": "C", "pid": 1, "ts": -1}]});
    assert!(!validator.is_valid(&bad));
}

#[test]
fn diff_shows_the_reserved_saving_of_mixed_precision() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (import(dir.path(), "fp32"), import(dir.path(), "amp"));
    let d: Value = serde_json::from_str(&ok(&[
        "diff",
        "--json",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]))
    .unwrap();
    let g = &d["groups"][0];
    assert_eq!(g["peak_reserved"]["a"], 666_894_336u64);
    assert_eq!(g["peak_reserved"]["b"], 603_979_776u64);
    assert_eq!(g["peak_reserved"]["delta"], -62_914_560i64);
    assert_eq!(g["failed"]["delta"], -1);
    let text = ok(&["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert!(text.contains("peak reserved"), "{text}");
}

#[test]
fn summary_of_the_synthetic_sample() {
    let text = ok(&["summary", "samples/traces/synthetic-mlp.vramtrace"]);
    insta::assert_snapshot!(text);
}

#[test]
fn summary_text_and_json_agree_on_the_synthetic_peak() {
    let s = summary_json(&repo("samples/traces/synthetic-mlp.vramtrace"));
    let g = device0(&s);
    assert_eq!(g["peak_requested"], g["peak_reserved"]);
    assert_eq!(g["allocations"], 1206);
    assert_eq!(g["leaks"]["count"], 6);
    assert_eq!(g["by_stream"].as_array().unwrap().len(), 2);
}

#[test]
fn hostile_and_broken_inputs_fail_with_one_line_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let evil = repo("formats/src/pickle/testdata/reduce-os-system.pickle");
    let out = dir.path().join("x.vramtrace");
    let r = vramtrace()
        .args([
            "import",
            evil.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(1));
    let err = String::from_utf8(r.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("reduce-os-system.pickle"), "{err}");
    assert!(err.contains("GLOBAL"), "{err}");
    assert!(!out.exists());

    // A trace is not a snapshot.
    let trace = repo("samples/traces/synthetic-mlp.vramtrace");
    let r = vramtrace()
        .args([
            "import",
            trace.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stderr).contains("synthetic-mlp.vramtrace"));

    // Truncated snapshot.
    let full = std::fs::read(repo("samples/snapshots/fp32.pickle")).unwrap();
    let cut = dir.path().join("cut.pickle");
    std::fs::write(&cut, &full[..full.len() / 2]).unwrap();
    let r = vramtrace()
        .args(["import", cut.to_str().unwrap(), "-o", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stderr).contains("ends at byte"));
}

#[test]
fn bad_usage_exits_2() {
    for args in [
        &["export", "t.vramtrace", "--to", "svg", "-o", "x"][..],
        &["export", "t.vramtrace", "-o", "x"],
        &["import", "s.pickle"],
        &["diff", "only-one.vramtrace"],
    ] {
        let r = vramtrace().args(args).output().unwrap();
        assert_eq!(r.status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn recorded_segment_allocations_match_pytorchs_segment_counter() {
    use vramtrace::interop::import_snapshot::{import, recorded_segment_allocs};
    // (snapshot, torch segment.all.allocated, or the number of segment_map actions for
    // expandable segments, which allocate by mapping pages)
    for (name, segments) in [("fp32", 23), ("amp", 20), ("expandable", 23)] {
        let bytes = std::fs::read(repo(&format!("samples/snapshots/{name}.pickle"))).unwrap();
        let imp = import(&pickle::read(&bytes).unwrap(), name).unwrap();
        let segs = recorded_segment_allocs(imp.events.iter().copied());
        assert_eq!(segs.len(), segments, "{name}");
    }
    // In the ring buffer only the 4 that happened inside the last 300 entries are allocations
    // the history saw; the other 19 of torch's 23 predate it.
    let bytes = std::fs::read(repo("samples/snapshots/ring.pickle")).unwrap();
    let imp = import(&pickle::read(&bytes).unwrap(), "ring").unwrap();
    assert_eq!(recorded_segment_allocs(imp.events.iter().copied()).len(), 4);
}

#[test]
fn summary_of_an_imported_training_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    import(dir.path(), "fp32");
    let out = crate::util::vramtrace()
        .current_dir(dir.path())
        .args(["summary", "fp32.vramtrace"])
        .output()
        .unwrap();
    assert!(out.status.success());
    insta::assert_snapshot!(String::from_utf8(out.stdout).unwrap());
}
