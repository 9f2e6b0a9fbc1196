//! The `vramtrace` command line as users meet it: output, exit codes, error lines.

use crate::util::{sample, vramtrace_in_repo as vramtrace};
use assert_cmd::Command;

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

/// A journal as the recorder leaves it after `SIGKILL` (formats/JOURNAL.md): records of seq
/// `seqs`, each in its own slot of a 16-slot ring, allocations of 4 KiB.
fn journal(seqs: &[u64]) -> Vec<u8> {
    use vramtrace_format::journal::{HEADER_LEN, Header, RECORD_LEN};
    let capacity = 16u64;
    let mut b = vec![0u8; HEADER_LEN + capacity as usize * RECORD_LEN];
    let header = Header::new(4242, capacity).to_bytes();
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
fn a_crash_journal_beside_a_trace_is_read_without_touching_either_file() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("run.vramtrace");
    std::fs::copy(sample(), &trace).unwrap();
    let journal_path = dir.path().join("run.vramtrace.journal");
    // 2,406 events are in the file; 2,405 and 2,406 are also still in the journal.
    let bytes = journal(&[2405, 2406, 2407, 2408]);
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
    assert_eq!(std::fs::read(&journal_path).unwrap(), bytes);
    assert_eq!(
        std::fs::read(&trace).unwrap(),
        std::fs::read(sample()).unwrap()
    );
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
        let out = vramtrace().args(&args).output().unwrap();
        let code = out.status.code();
        assert!(
            code == Some(0) || code == Some(1),
            "{args:?} exited {code:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
