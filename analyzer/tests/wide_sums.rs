//! Sums of sizes never wrap: a trace whose live allocations add up to several times
//! `u64::MAX` (a crafted or damaged trace can say so) goes through every command, one trace and
//! a job directory of two, without a panic (the test binary is built with overflow checks, so
//! a wrapping `+` exits 101) and with the sums shown saturated at `u64::MAX`.

use crate::util::{assert_answers_or_refuses, vramtrace, write_calls};
use serde_json::Value;
use std::path::{Path, PathBuf};
use vramtrace_format::{Api, Metadata};

const HALF: u64 = u64::MAX / 2 + 1;

/// Four allocations of `HALF` bytes each on device 0, never freed (two leak past `u64::MAX`),
/// and one freed.
fn huge_trace(dir: &Path, name: &str, rank: u32) -> PathBuf {
    let metadata = Metadata {
        capture_level: "request".into(),
        environment: vec![("RANK".into(), rank.to_string())],
        ..Metadata::default()
    };
    let path = dir.join(name);
    let events = [
        (Api::CuMemAlloc_v2, 0x1000, HALF),
        (Api::CuMemAlloc_v2, 0x2000, HALF),
        (Api::CuMemAlloc_v2, 0x3000, HALF),
        (Api::CuMemAlloc_v2, 0x4000, HALF),
        (Api::CuMemAlloc_v2, 0x5000, u64::MAX),
        (Api::CuMemFree_v2, 0x5000, 0),
    ];
    write_calls(&path, &metadata, &events);
    path
}

#[test]
fn every_command_saturates_sums_of_sizes_past_u64_max() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    std::fs::create_dir(&job).unwrap();
    let t = huge_trace(&job, "a.vramtrace", 0);
    huge_trace(&job, "b.vramtrace", 1);
    let (p, j) = (t.to_str().unwrap(), job.to_str().unwrap());
    let out = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (report, parquet, perfetto, pickle, csv) = (
        out("report"),
        out("parquet"),
        out("x.json"),
        out("x.pickle"),
        out("x.csv"),
    );
    for args in [
        vec!["info", p, "--json"],
        vec!["summary", p, "--json"],
        vec!["summary", j, "--json"],
        vec!["replay", p, "--json"],
        vec!["replay", j, "--json"],
        vec!["fit", p, "--policy", "cuda-malloc,pytorch"],
        vec!["fit", j, "--policy", "cuda-malloc,pytorch"],
        vec!["tune", p],
        vec!["diff", p, p],
        vec!["report", p, "-o", &report],
        vec!["report", j, "-o", &report],
        vec!["export", p, "--to", "perfetto", "-o", &perfetto],
        vec!["export", p, "--to", "pytorch-snapshot", "-o", &pickle],
        vec!["export", p, "--to", "rmm-csv", "-o", &csv],
        vec!["export", j, "--to", "parquet", "-o", &parquet],
    ] {
        assert_answers_or_refuses(vramtrace().args(&args));
    }
    let summary = vramtrace().args(["summary", p, "--json"]).output().unwrap();
    let summary: Value = serde_json::from_slice(&summary.stdout).unwrap();
    let group = &summary["groups"][0];
    assert_eq!(group["leaks"]["bytes"], u64::MAX, "{group}");
    assert_eq!(group["leaks"]["count"], 4, "{group}");
    assert_eq!(group["peak_requested"], u64::MAX, "{group}");
}
