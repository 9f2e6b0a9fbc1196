//! Job directories: one listing for every command (regular files only, a FIFO or a link loop
//! skipped with a note, never waited on), ranks named so that none collides, and `report` of a
//! job bounded per rank past its detail budget.

use crate::util::{vramtrace, write_calls};
use std::path::Path;
use std::time::Duration;
use vramtrace::report::job::DETAILED_RANKS;
use vramtrace_format::{Api, Metadata};

/// A rank of two allocations (`scale` times 1 MiB and 2 MiB), `RANK` as given.
fn tiny_rank(path: &Path, rank: Option<u32>, scale: u64) {
    let metadata = Metadata {
        capture_level: "request".into(),
        environment: rank
            .map(|r| vec![("RANK".to_string(), r.to_string())])
            .unwrap_or_default(),
        ..Metadata::default()
    };
    let events = [
        (Api::CuMemAlloc_v2, 0x1000_0000, scale << 20),
        (Api::CuMemAlloc_v2, 0x2000_0000, scale << 21),
        (Api::CuMemFree_v2, 0x1000_0000, 0),
        (Api::CuMemFree_v2, 0x2000_0000, 0),
    ];
    write_calls(path, &metadata, &events);
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

#[test]
fn every_command_skips_a_fifo_and_a_link_loop_in_a_job_directory_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    std::fs::create_dir(&job).unwrap();
    tiny_rank(&job.join("rank-0.vramtrace"), Some(0), 1);
    tiny_rank(&job.join("rank-1.vramtrace"), Some(1), 2);
    mkfifo(&job.join("stuck.vramtrace"));
    std::os::unix::fs::symlink("b.vramtrace", job.join("a.vramtrace")).unwrap();
    std::os::unix::fs::symlink("a.vramtrace", job.join("b.vramtrace")).unwrap();
    let j = job.to_str().unwrap();
    let report = dir.path().join("report");
    let parquet = dir.path().join("parquet");
    for args in [
        vec!["summary", j],
        vec!["replay", j, "--policy", "cuda-malloc"],
        vec!["fit", j, "--policy", "cuda-malloc"],
        vec!["report", j, "-o", report.to_str().unwrap()],
        vec![
            "export",
            j,
            "--to",
            "parquet",
            "--policy",
            "none",
            "-o",
            parquet.to_str().unwrap(),
        ],
    ] {
        let out = vramtrace()
            .args(&args)
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert!(
            stderr.contains("stuck.vramtrace: skipped: a FIFO, not a regular file"),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains("a.vramtrace: skipped: a link loop"),
            "{args:?}: {stderr}"
        );
    }
    let json = vramtrace().args(["summary", j, "--json"]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["ranks"].as_array().unwrap().len(), 2);
}

#[test]
fn report_of_a_job_names_ranks_by_their_rank_and_numbers_unnamed_ones_after_them() {
    // rank-0 and rank-5 are named 3 and 0; rank-2 names none and rank-9 repeats rank 3: they
    // become ranks 4 and 5 (after the highest named, in file order), never 0 or 3.
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    std::fs::create_dir(&job).unwrap();
    for (file, rank) in [
        ("rank-0.vramtrace", Some(3)),
        ("rank-2.vramtrace", None),
        ("rank-5.vramtrace", Some(0)),
        ("rank-9.vramtrace", Some(3)),
    ] {
        tiny_rank(&job.join(file), rank, 1);
    }
    let out = dir.path().join("report");
    vramtrace()
        .args(["report", job.to_str().unwrap(), "-o", out.to_str().unwrap()])
        .assert()
        .success();
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    let label = |rank: u32, file: &str| {
        format!(
            "<summary>rank {rank}: <code>{}</code>",
            job.join(file).display()
        )
    };
    for (rank, file) in [
        (0, "rank-5.vramtrace"),
        (3, "rank-0.vramtrace"),
        (4, "rank-2.vramtrace"),
        (5, "rank-9.vramtrace"),
    ] {
        assert!(html.contains(&label(rank, file)), "rank {rank}: {file}");
    }
    assert!(
        html.contains("<tr><td>4*</td>"),
        "an unnamed rank is starred"
    );
}

/// The page of `n` tiny ranks, rank `k` at `k % 5 + 1` times the smallest sizes.
fn job_page_bytes(dir: &Path, n: u32) -> usize {
    let job = dir.join(format!("job-{n}"));
    std::fs::create_dir(&job).unwrap();
    for k in 0..n {
        tiny_rank(
            &job.join(format!("rank-{k}.vramtrace")),
            Some(k),
            u64::from(k % 5 + 1),
        );
    }
    let out = dir.join(format!("report-{n}"));
    vramtrace()
        .args(["report", job.to_str().unwrap(), "-o", out.to_str().unwrap()])
        .args(["--policy", "cuda-malloc", "--no-symbolize"])
        .assert()
        .success();
    std::fs::metadata(out.join("index.html")).unwrap().len() as usize
}

#[test]
fn a_job_page_past_its_detail_budget_grows_by_one_table_row_per_rank() {
    let dir = tempfile::tempdir().unwrap();
    let at_budget = job_page_bytes(dir.path(), DETAILED_RANKS as u32 + 2);
    let past = job_page_bytes(dir.path(), DETAILED_RANKS as u32 + 42);
    let per_rank = (past - at_budget) / 40;
    // A row: rank, trace path (about 60 bytes here), events, peak; under 400 bytes.
    assert!(
        per_rank < 400,
        "{per_rank} bytes of page per rank ({at_budget} -> {past})"
    );
}
