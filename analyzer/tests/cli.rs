//! The `vramtrace` command line as users meet it: output, exit codes, error lines.

use crate::util::{assert_answers_or_refuses, sample, vramtrace_in_repo as vramtrace};
use assert_cmd::Command;
use std::path::{Path, PathBuf};

fn stdout(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs a failing command; returns its exit code and its stderr, which must be one line.
fn failure(cmd: &mut Command) -> (i32, String) {
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    (out.status.code().unwrap(), stderr)
}

/// The six cuBLAS workspaces of every PyTorch run on the H200 (134,481,920 bytes outside the
/// pool, samples/README.md) are named cuBLAS by their native stacks, in JSON and text; a trace
/// recorded without native frames says it has none.
#[test]
fn summary_names_the_library_of_the_memory_outside_the_pool() {
    let json = |trace: &str| -> serde_json::Value {
        let out = stdout(vramtrace().args(["summary", "--json", trace]));
        serde_json::from_str(&out).unwrap()
    };
    let device = |v: &serde_json::Value| {
        v["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["device"] == 0)
            .unwrap()["outside_by_library"]
            .clone()
    };
    let native = "samples/traces/h200-validation/side_stream.async.vramtrace";
    assert_eq!(
        device(&json(native)),
        serde_json::json!([{"library": "cuBLAS", "allocations": 6, "bytes": 134481920,
                            "peak_bytes": 134481920, "site": null}])
    );
    let text = stdout(vramtrace().args(["summary", native]));
    assert!(
        text.contains("  outside pool    cuBLAS 128.25 MiB (6 allocations)"),
        "{text}"
    );
    // Without native frames the library is unknown, but the Python line is not.
    let python = json("samples/traces/torch-mlp-requests.vramtrace");
    assert_eq!(device(&python)[0]["library"], "no native stack");
    let site = device(&python)[0]["site"].as_str().unwrap().to_string();
    assert!(site.ends_with("torch_train.py:31 mlp_steps"), "{site}");
    let text = stdout(vramtrace().args(["summary", "samples/traces/torch-mlp-requests.vramtrace"]));
    assert!(
        text.contains("(6 allocations, the largest at ") && text.contains("torch_train.py:31"),
        "{text}"
    );
    let nothing_outside = json("samples/traces/synthetic-mlp.vramtrace");
    assert!(
        nothing_outside["groups"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g.get("outside_by_library").is_none())
    );
}

/// A single-rank NCCL run on the H200 recorded with the defaults (docs/validation.md "Outside
/// the pool, named"): NCCL, cuBLAS and cuDNN named without native stacks, the CUDA context
/// measured from the driver's counts, and the driver's highest count beside what the trace
/// names then.
#[test]
fn summary_checks_the_driver_s_count_and_names_the_cuda_context() {
    let trace = "samples/workloads/h200/outside/traces/python3.12-514.vramtrace";
    let json: serde_json::Value =
        serde_json::from_str(&stdout(vramtrace().args(["summary", "--json", trace]))).unwrap();
    let group = json["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["device"] == 0)
        .unwrap();
    let libraries: Vec<(&str, u64)> = group["outside_by_library"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["library"].as_str().unwrap(),
                m["peak_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        libraries,
        [
            ("CUDA context", 543_162_368),
            ("NCCL", 406_847_488),
            ("cuBLAS", 67_240_960),
            ("cuDNN", 50_696)
        ]
    );
    let d = &group["driver_count"];
    assert_eq!(
        (d["driver_bytes"].as_u64(), d["named_bytes"].as_u64()),
        (Some(3_235_905_536), Some(2_942_487_048))
    );
    assert_eq!(d["context_bytes"], 543_162_368);
    let text = stdout(vramtrace().args(["summary", trace]));
    assert!(
        text.contains(
            "  driver's count      3.01 GiB  at 1.32 s   (the trace names 2.74 GiB of it, 90.9%: \
             the CUDA context 518.00 MiB and the memory held then)"
        ),
        "{text}"
    );
}

#[test]
fn info_describes_the_bundled_sample() {
    let text = stdout(vramtrace().args(["info", "samples/traces/synthetic-mlp.vramtrace"]));
    insta::assert_snapshot!(text);
}

#[test]
fn info_json_has_the_contract_fields() {
    let text = stdout(vramtrace().arg("info").arg(sample()).arg("--json"));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for field in [
        "format_version",
        "complete",
        "events",
        "failed_calls",
        "by_api",
        "processes",
        "threads",
        "streams",
        "devices",
        "stacks",
        "duration_ns",
        "file_bytes",
        "bytes_per_event",
    ] {
        assert!(v.get(field).is_some(), "missing {field}");
    }
    assert_eq!(v["events"], 2406);
    assert_eq!(v["by_api"]["cuMemAllocAsync"], 1206);
    assert_eq!(v["complete"], true);
    insta::assert_json_snapshot!(v);
}

#[test]
fn a_truncated_trace_is_read_up_to_its_last_chunk_and_flagged() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(sample()).unwrap();
    let cut = dir.path().join("cut.vramtrace");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let text = stdout(vramtrace().arg("info").arg(&cut).arg("--json"));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["complete"], false);
    assert!(v["events"].as_u64().unwrap() < 2406);
    assert!(v["damage"].as_str().unwrap().contains("did not finish"));
}

#[test]
fn a_missing_file_fails_with_one_line_naming_it() {
    let (code, err) = failure(vramtrace().args(["info", "no/such.vramtrace"]));
    assert_eq!(code, 1);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no/such.vramtrace") && err.contains("No such file"),
        "{err}"
    );
}

#[test]
fn a_directory_or_a_foreign_file_fails_with_one_line() {
    let (code, err) = failure(vramtrace().args(["info", "samples"]));
    assert_eq!((code, err.lines().count()), (1, 1), "{err}");
    assert!(err.contains("directory"), "{err}");
    let (code, err) = failure(vramtrace().args(["info", "Cargo.toml"]));
    assert_eq!((code, err.lines().count()), (1, 1), "{err}");
    assert!(err.contains("Cargo.toml: not a vramtrace file"), "{err}");
}

#[test]
fn bad_usage_exits_2() {
    assert_eq!(failure(vramtrace().arg("info")).0, 2);
    assert_eq!(failure(vramtrace().arg("frobnicate")).0, 2);
    assert_eq!(failure(vramtrace().args(["info", "--jsn", "x"])).0, 2);
}

#[test]
fn help_shows_examples() {
    let text = stdout(vramtrace().args(["info", "--help"]));
    assert!(text.contains("Examples:") && text.contains("vramtrace info --json"));
}

/// A journal as the recorder of process `pid` leaves it after `SIGKILL` (formats/JOURNAL.md):
/// records of seq `seqs`, each in its own slot of a 16-slot ring, allocations of 4 KiB.
fn journal(pid: u32, seqs: &[u64]) -> Vec<u8> {
    use vramtrace_format::journal::{HEADER_LEN, Header, RECORD_LEN};
    let capacity = 16u64;
    let mut b = vec![0u8; HEADER_LEN + capacity as usize * RECORD_LEN];
    let header = Header::new(pid, capacity).to_bytes();
    b[..header.len()].copy_from_slice(&header);
    for &seq in seqs {
        let at = HEADER_LEN + ((seq - 1) % capacity) as usize * RECORD_LEN;
        b[at..at + 8].copy_from_slice(&seq.to_le_bytes());
        b[at + 32..at + 40].copy_from_slice(&4096u64.to_le_bytes());
        b[at + 100..at + 102].copy_from_slice(&1u16.to_le_bytes());
    }
    b
}

#[test]
fn a_crash_journal_of_a_running_process_is_read_without_touching_either_file() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("run.vramtrace");
    std::fs::copy(sample(), &trace).unwrap();
    let journal_path = dir.path().join("run.vramtrace.journal");
    // 2,406 events are in the file; 2,405 and 2,406 are also still in the journal, whose owner
    // (this test process) still runs.
    let bytes = journal(std::process::id(), &[2405, 2406, 2407, 2408]);
    std::fs::write(&journal_path, &bytes).unwrap();
    let text = stdout(vramtrace().arg("info").arg(&trace).arg("--json"));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["events"], 2408);
    assert_eq!(v["by_api"]["cuMemAlloc_v2"], 2);
    assert_eq!(v["complete"], false);
    assert!(
        v["damage"]
            .as_str()
            .unwrap()
            .contains("2 more events read from the crash journal")
    );
    assert!(v["damage"].as_str().unwrap().contains("still runs"));
    assert_eq!(std::fs::read(&journal_path).unwrap(), bytes);
    assert_eq!(
        std::fs::read(&trace).unwrap(),
        std::fs::read(sample()).unwrap()
    );
}

/// A pid above the kernel's largest (2^22): no such process runs.
const DEAD_PID: u32 = 0x7fff_fff0;

#[test]
fn a_crash_journal_left_by_a_dead_process_is_read_in_memory_and_neither_file_changes() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("run.vramtrace");
    std::fs::copy(sample(), &trace).unwrap();
    let journal_path = dir.path().join("run.vramtrace.journal");
    let bytes = journal(DEAD_PID, &[2405, 2406, 2407, 2408]);
    std::fs::write(&journal_path, &bytes).unwrap();
    for _ in 0..2 {
        let out = vramtrace()
            .arg("info")
            .arg(&trace)
            .arg("--json")
            .output()
            .unwrap();
        assert!(out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("2 more events read from its crash journal")
                && stderr.contains("neither file was changed"),
            "{stderr}"
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            (v["events"].as_u64(), v["complete"].as_bool()),
            (Some(2408), Some(false))
        );
        assert!(
            v["damage"]
                .as_str()
                .unwrap()
                .contains("a read leaves both files as they are")
        );
        assert_eq!(std::fs::read(&journal_path).unwrap(), bytes);
        assert_eq!(
            std::fs::read(&trace).unwrap(),
            std::fs::read(sample()).unwrap()
        );
    }
}

/// `run.vramtrace` holding `trace` beside the journal of a dead process whose events continue
/// the sample's 2,406; returns the directory and the trace's path.
fn beside_a_dead_journal(trace: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.vramtrace");
    std::fs::write(&path, trace).unwrap();
    std::fs::write(
        journal_path_of(&path),
        journal(DEAD_PID, &[2407, 2408, 2409]),
    )
    .unwrap();
    (dir, path)
}

fn journal_path_of(trace: &Path) -> PathBuf {
    vramtrace_format::journal::path_for(trace)
}

/// Runs each read command on `trace` and asserts that it fails with `error` and leaves the
/// trace and its journal byte for byte as they were.
fn every_read_refuses_and_changes_nothing(trace: &Path, error: &str) {
    let before = std::fs::read(trace).unwrap();
    let journal_before = std::fs::read(journal_path_of(trace)).unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let page = out_dir.path().join("page.html");
    let commands: [Vec<&std::ffi::OsStr>; 4] = [
        vec!["info".as_ref(), trace.as_ref()],
        vec!["info".as_ref(), "--salvage".as_ref(), trace.as_ref()],
        vec!["summary".as_ref(), trace.as_ref()],
        vec![
            "report".as_ref(),
            trace.as_ref(),
            "-o".as_ref(),
            page.as_ref(),
        ],
    ];
    for args in commands {
        let (code, err) = failure(vramtrace().args(&args));
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains(error), "{args:?}: {err}");
        assert!(err.contains("is left as it is"), "{args:?}: {err}");
        assert_eq!(std::fs::read(trace).unwrap(), before, "{args:?}");
        assert_eq!(
            std::fs::read(journal_path_of(trace)).unwrap(),
            journal_before,
            "{args:?}"
        );
    }
}

#[test]
fn a_trace_of_a_newer_format_version_beside_a_dead_journal_is_refused_not_rebuilt() {
    let mut bytes = std::fs::read(sample()).unwrap();
    // Version 99 with a valid header checksum: a file a later vramtrace wrote.
    bytes[8..10].copy_from_slice(&99u16.to_le_bytes());
    let crc = vramtrace_format::codec::checksum(&bytes[0..12]);
    bytes[12..16].copy_from_slice(&crc.to_le_bytes());
    let (_dir, trace) = beside_a_dead_journal(&bytes);
    every_read_refuses_and_changes_nothing(&trace, "format version 99 is newer");
}

#[test]
fn a_flipped_header_bit_beside_a_dead_journal_is_an_error_and_changes_no_file() {
    let mut bytes = std::fs::read(sample()).unwrap();
    bytes[9] ^= 0x40;
    let (_dir, trace) = beside_a_dead_journal(&bytes);
    every_read_refuses_and_changes_nothing(&trace, "file header checksum mismatch");
}

/// A finished trace of 3,000 allocations in three events chunks of 1,000, and the byte offset
/// of the second chunk's payload.
fn three_chunks() -> (Vec<u8>, usize) {
    use vramtrace_format::{
        Api, Event, Layout, Metadata, ReadOptions, TraceWriter, WriterOptions, chunk::ChunkKind,
    };
    let options = WriterOptions {
        chunk_events: 1000,
        ..WriterOptions::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &Metadata::default(), options).unwrap();
    for seq in 1..=3000u64 {
        w.push(&Event {
            seq,
            time_ns: seq * 1000,
            address: seq << 20,
            size: 4096,
            ..Event::new(Api::CuMemAlloc_v2)
        })
        .unwrap();
    }
    let bytes = w.finish().unwrap();
    let layout = Layout::scan(&bytes, ReadOptions::default()).unwrap();
    let events: Vec<_> = layout
        .chunks
        .iter()
        .filter(|h| h.kind == ChunkKind::Events)
        .collect();
    assert_eq!(events.len(), 3);
    let middle = events[1].payload_offset() as usize;
    (bytes, middle)
}

#[test]
fn a_damaged_middle_chunk_beside_a_dead_journal_stays_incomplete_with_its_damage_note() {
    let (mut bytes, middle) = three_chunks();
    bytes[middle + 3] ^= 0x01;
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("run.vramtrace");
    std::fs::write(&trace, &bytes).unwrap();
    let journal_bytes = journal(DEAD_PID, &[3001, 3002]);
    std::fs::write(journal_path_of(&trace), &journal_bytes).unwrap();
    // Without --salvage the damage is an error; with it, the chunks before the damage and the
    // journal's events are read, and the trace says it is incomplete and why.
    let (code, err) = failure(vramtrace().arg("info").arg(&trace));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is left as it is"), "{err}");
    let text = stdout(
        vramtrace()
            .args(["info", "--salvage", "--json"])
            .arg(&trace),
    );
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (v["events"].as_u64(), v["complete"].as_bool()),
        (Some(1002), Some(false))
    );
    let damage = v["damage"].as_str().unwrap();
    assert!(
        damage.contains("recovered the chunks before it"),
        "{damage}"
    );
    assert!(
        damage.contains("2 more events read from the crash journal"),
        "{damage}"
    );
    assert_eq!(std::fs::read(&trace).unwrap(), bytes);
    assert_eq!(
        std::fs::read(journal_path_of(&trace)).unwrap(),
        journal_bytes
    );
}

#[test]
fn a_fifo_or_device_named_like_a_journal_is_refused_not_read_forever() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("run.vramtrace");
    std::fs::copy(sample(), &trace).unwrap();
    let journal_path = dir.path().join("run.vramtrace.journal");
    let status = std::process::Command::new("mkfifo")
        .arg(&journal_path)
        .status()
        .unwrap();
    assert!(status.success());
    let (code, err) = failure(vramtrace().arg("info").arg(&trace));
    assert_eq!(code, 1);
    assert!(err.contains("not a regular file"), "{err}");
    std::fs::remove_file(&journal_path).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &journal_path).unwrap();
    let (code, err) = failure(vramtrace().arg("info").arg(&trace));
    assert_eq!(code, 1);
    assert!(err.contains("not a regular file"), "{err}");
}

#[test]
fn export_onto_its_own_input_is_refused_and_the_input_kept() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("run.vramtrace");
    std::fs::copy(sample(), &trace).unwrap();
    let (code, err) = failure(
        vramtrace()
            .args(["export", "--to", "perfetto", "-o"])
            .arg(&trace)
            .arg(&trace),
    );
    assert_eq!(code, 1);
    assert!(err.contains("is the input file"), "{err}");
    assert_eq!(
        std::fs::read(&trace).unwrap(),
        std::fs::read(sample()).unwrap()
    );
}

#[test]
fn a_failed_parquet_export_leaves_no_directory_behind() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.vramtrace");
    std::fs::write(&bad, b"not a trace at all").unwrap();
    for input in [dir.path().join("missing.vramtrace"), bad] {
        let out = dir.path().join("tables");
        let (code, err) = failure(
            vramtrace()
                .args(["export", "--to", "parquet", "--policy", "none", "-o"])
                .arg(&out)
                .arg(&input),
        );
        assert_eq!(code, 1);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!out.exists(), "{} was left behind", out.display());
    }
    // A directory that was there before stays, with what it held.
    let out = dir.path().join("kept");
    std::fs::create_dir_all(out.join("events")).unwrap();
    std::fs::write(out.join("events").join("old.parquet"), b"x").unwrap();
    let (code, _) = failure(
        vramtrace()
            .args(["export", "--to", "parquet", "--policy", "none", "-o"])
            .arg(&out)
            .arg(dir.path().join("bad.vramtrace")),
    );
    assert_eq!(code, 1);
    assert!(out.join("events").join("old.parquet").exists());
}

#[test]
fn report_replaces_an_index_html_link_instead_of_writing_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "someone else's file").unwrap();
    let out = dir.path().join("report");
    std::fs::create_dir(&out).unwrap();
    std::os::unix::fs::symlink(&victim, out.join("index.html")).unwrap();
    stdout(
        vramtrace()
            .args(["report", "--policy", "pytorch", "--no-symbolize", "-o"])
            .arg(&out)
            .arg(sample()),
    );
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "someone else's file"
    );
    let index = out.join("index.html");
    assert!(!std::fs::symlink_metadata(&index).unwrap().is_symlink());
    assert!(std::fs::read_to_string(&index).unwrap().contains("<html"));
    // No temporary file is left behind.
    let names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
}

#[test]
fn an_error_naming_a_path_with_a_newline_stays_on_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let odd = dir.path().join("a\nb.vramtrace");
    let (code, err) = failure(vramtrace().arg("info").arg(&odd));
    assert_eq!(code, 1);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("a\\nb.vramtrace"), "{err}");
}

#[test]
fn a_report_on_a_full_disk_leaves_no_truncated_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    // A file size limit stands in for a full disk: writes past 16 KiB fail (EFBIG, with
    // SIGXFSZ ignored).
    let bin = assert_cmd::cargo::cargo_bin("vramtrace");
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 32; exec \"$@\"")
        .arg("sh")
        .arg(bin)
        .args(["report", "--policy", "pytorch", "--no-symbolize", "-o"])
        .arg(&out)
        .arg(sample())
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(1));
    let err = String::from_utf8_lossy(&status.stderr);
    assert!(err.contains("writing"), "{err}");
    for entry in std::fs::read_dir(&out).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(!name.ends_with(".tmp"), "{name} left behind");
        let text = std::fs::read_to_string(&path).unwrap();
        if name.ends_with(".svg") {
            assert!(text.trim_end().ends_with("</svg>"), "{name} is truncated");
        }
        assert_ne!(
            name, "index.html",
            "the page was written in full despite the limit"
        );
    }
}

#[test]
fn trace_strings_reach_the_terminal_escaped_never_as_control_sequences() {
    // The hostile trace's command line, device name, writer and module paths carry NUL and
    // an ESC colour sequence; printed raw they would act on the user's terminal.
    let dir = tempfile::tempdir().unwrap();
    let path = crate::report::hostile_trace(dir.path());
    for (args, names_it) in [
        (vec!["info"], true),
        (vec!["summary"], true),
        (vec!["diff", path.to_str().unwrap()], false),
    ] {
        let text = stdout(vramtrace().args(&args).arg(&path));
        assert!(!text.contains('\u{1b}'), "{args:?}: {text}");
        assert!(!text.contains('\0'), "{args:?}: {text}");
        assert_eq!(text.contains("\\u{1b}[31m"), names_it, "{args:?}: {text}");
    }
}

/// Events whose sizes, addresses, times and handles sit at the top of their ranges, as a
/// crafted or damaged trace can carry them: every sum, rounding and difference over them is
/// one step from wrapping.
fn extreme_trace(dir: &std::path::Path) -> std::path::PathBuf {
    use vramtrace_format::{Api, Event, Metadata, TraceWriter, WriterOptions};
    let path = dir.join("extreme.vramtrace");
    let file = std::fs::File::create(&path).unwrap();
    let metadata = Metadata {
        capture_level: "request".into(),
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(file, &metadata, WriterOptions::default()).unwrap();
    let top = u64::MAX;
    let events = [
        (Api::CuMemAlloc_v2, 0, 0x1000, 1 << 20, 0),
        (Api::CuMemAlloc_v2, top - 10, top - 4096, top - 1, 0),
        (Api::CuMemAlloc_v2, top - 9, top - (1 << 40), top / 2, 0),
        (Api::CuMemAllocAsync, top - 8, 0x2000, top, top),
        (Api::CuMemAlloc_v2, top - 7, 0x3000, top, 2),
        (Api::CuMemFree_v2, top - 6, top - 4096, 0, 0),
        (Api::CuMemFreeAsync, top - 5, 0x2000, 0, top),
        (Api::CuMemFree_v2, top, 0x1000, 0, 0),
    ];
    for (i, (api, time_ns, address, size, stream)) in events.into_iter().enumerate() {
        let result = if size == top && stream == 2 { 2 } else { 0 };
        w.push(&Event {
            seq: i as u64 + 1,
            time_ns,
            duration_ns: top,
            pid: 1,
            address,
            size,
            stream,
            result,
            ..Event::new(api)
        })
        .unwrap();
    }
    w.finish().unwrap();
    path
}

#[test]
fn every_command_survives_sizes_times_and_addresses_at_the_top_of_their_range() {
    // The test binary is built with overflow checks on: a wrapping sum panics (exit 101).
    let dir = tempfile::tempdir().unwrap();
    let path = extreme_trace(dir.path());
    let p = path.to_str().unwrap();
    let out_dir = dir.path().join("out");
    let perfetto = dir.path().join("x.json");
    let pickle = dir.path().join("x.pickle");
    for args in [
        vec!["info", p],
        vec!["info", p, "--json"],
        vec!["summary", p],
        vec!["summary", p, "--json"],
        vec!["replay", p],
        vec!["replay", p, "--json"],
        vec!["fit", p, "--policy", "cuda-malloc,pytorch"],
        vec!["diff", p, p],
        vec!["report", p, "-o", out_dir.to_str().unwrap()],
        vec![
            "export",
            p,
            "--to",
            "perfetto",
            "-o",
            perfetto.to_str().unwrap(),
        ],
        vec![
            "export",
            p,
            "--to",
            "pytorch-snapshot",
            "-o",
            pickle.to_str().unwrap(),
        ],
    ] {
        assert_answers_or_refuses(vramtrace().args(&args));
    }
}

/// `-o /dev/stdout` (here `/dev/fd/1`, the same descriptor by another name) prints: the file
/// is written into the command's own output, not replaced by a new file beside it.
#[test]
fn an_output_naming_the_commands_own_stdout_prints_there() {
    let out = vramtrace()
        .args([
            "export",
            "samples/traces/torch-mlp-requests.vramtrace",
            "--to",
            "rmm-csv",
            "-o",
            "/dev/fd/1",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("Thread,Time,Action,Pointer,Size,Stream"),
        "{text:.200}"
    );
    assert!(text.lines().count() > 4000);
}

/// `vramtrace ARGS` under an address-space limit of 1 GiB (`ulimit -v`), from the repository.
fn under_one_gib(args: &[&std::ffi::OsStr]) -> (i32, String) {
    let mut cmd = std::process::Command::new("bash");
    cmd.arg("-c")
        .arg("ulimit -v 1048576 && exec \"$@\"")
        .arg("bash")
        .arg(assert_cmd::cargo::cargo_bin("vramtrace"))
        .args(args)
        .env_remove("VRAMTRACE_MAX_EVENTS");
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_72_kb_file_declaring_two_million_events_is_refused_by_every_command_before_decoding() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("dense.vramtrace");
    let bytes = vramtrace_format::dense::trace(2_000_000);
    assert!(bytes.len() < 80_000, "{} bytes", bytes.len());
    std::fs::write(&trace, &bytes).unwrap();
    let out = |name: &str| dir.path().join(name).into_os_string();
    let t = trace.as_os_str();
    let commands: Vec<Vec<std::ffi::OsString>> = vec![
        vec!["info".into(), t.into()],
        vec!["summary".into(), t.into()],
        vec!["replay".into(), t.into()],
        vec!["fit".into(), t.into()],
        vec!["report".into(), t.into(), "-o".into(), out("page.html")],
        vec![
            "export".into(),
            t.into(),
            "--to".into(),
            "parquet".into(),
            "-o".into(),
            out("pq"),
        ],
        vec![
            "export".into(),
            t.into(),
            "--to".into(),
            "pytorch-snapshot".into(),
            "-o".into(),
            out("s.pickle"),
        ],
    ];
    for args in &commands {
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let (code, err) = under_one_gib(&args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(
            err.contains("declares 2,000,000 events in")
                && err.contains("65,536 + 1 per byte")
                && err.lines().count() == 1,
            "{args:?}: {err}"
        );
    }
}

#[test]
fn the_events_budget_is_lifted_by_vramtrace_max_events() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("dense.vramtrace");
    std::fs::write(&trace, vramtrace_format::dense::trace(100_000)).unwrap();
    let refused = failure(vramtrace().args(["info", "--json"]).arg(&trace));
    assert_eq!(refused.0, 1, "{}", refused.1);
    let text = stdout(
        vramtrace()
            .args(["info", "--json"])
            .arg(&trace)
            .env("VRAMTRACE_MAX_EVENTS", "100000"),
    );
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["events"], 100_000);
    let (code, err) = failure(
        vramtrace()
            .arg("info")
            .arg(&trace)
            .env("VRAMTRACE_MAX_EVENTS", "many"),
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("VRAMTRACE_MAX_EVENTS=\"many\": not a number"),
        "{err}"
    );
}

/// A mixed stack (native and Python frames, `record --stacks mixed`): the library is the
/// native module past the runtime, and the line is the program's Python frame that made the
/// library's largest allocation, not the library's own frame.
#[test]
fn summary_names_the_line_that_made_a_librarys_largest_allocation() {
    use vramtrace_format::{
        Api, Event, Frame, Metadata, Module, PythonFrame, Stack, Tables, TraceWriter, WriterOptions,
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixed.vramtrace");
    let module = |id: u32, path: &str| Module {
        id,
        pid: 5,
        path: path.into(),
        build_id: Vec::new(),
        load_address: u64::from(id) << 32,
        size: 1 << 20,
        loaded_ns: 0,
        unloaded_ns: None,
    };
    let python = |id: u32, line: u32, function: &str| PythonFrame {
        id,
        file: "/src/train.py".into(),
        function: function.into(),
        line,
        module: "train".into(),
    };
    let mut w = TraceWriter::new(
        std::fs::File::create(&path).unwrap(),
        &Metadata {
            capture_level: "request".into(),
            ..Metadata::default()
        },
        WriterOptions::default(),
    )
    .unwrap();
    *w.tables_mut() = Tables {
        modules: vec![
            module(1, "/usr/lib/libcudart.so.13"),
            module(2, "/usr/lib/libcublasLt.so.13"),
            module(3, "/usr/lib/libtorch_cuda.so"),
        ],
        frames: [1, 2, 3]
            .map(|id| Frame {
                id,
                address: (u64::from(id) << 32) + 0x100,
            })
            .to_vec(),
        python_frames: vec![
            python(10, 7, "main"),
            python(11, 12, "step"),
            python(12, 30, "warm"),
        ],
        // Innermost first: the runtime, cuBLAS, PyTorch, then the program's lines.
        stacks: vec![
            Stack {
                id: 1,
                frames: vec![1, 2, 3, 11, 10],
            },
            Stack {
                id: 2,
                frames: vec![1, 2, 3, 12, 10],
            },
            Stack {
                id: 3,
                frames: vec![11, 10],
            },
        ],
        ..Tables::default()
    };
    let mut seq = 0;
    let mut push = |api, address: u64, size: u64, stack: u32| {
        seq += 1;
        w.push(&Event {
            seq,
            time_ns: seq * 1000,
            pid: 5,
            device: 0,
            address,
            size,
            stack,
            ..Event::new(api)
        })
        .unwrap();
    };
    push(Api::CuMemAllocAsync, 0x1000_0000, 1 << 20, 3);
    push(Api::CuMemAlloc_v2, 0x2000_0000, 4 << 20, 2);
    push(Api::CuMemAlloc_v2, 0x3000_0000, 32 << 20, 1);
    w.finish().unwrap();
    let path = path.to_str().unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&stdout(vramtrace().args(["summary", "--json", path]))).unwrap();
    assert_eq!(
        json["groups"][0]["outside_by_library"],
        serde_json::json!([{"library": "cuBLAS", "allocations": 2, "bytes": 36 << 20,
                            "peak_bytes": 36 << 20, "site": "/src/train.py:12 step"}])
    );
    let text = stdout(vramtrace().args(["summary", path]));
    assert!(
        text.contains("cuBLAS 36.00 MiB (2 allocations, the largest at /src/train.py:12 step)"),
        "{text}"
    );
}
