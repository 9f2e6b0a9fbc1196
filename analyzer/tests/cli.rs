//! The `vramtrace` command line as users meet it: output, exit codes, error lines.

use assert_cmd::Command;
use std::path::{Path, PathBuf};

fn sample() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/traces/synthetic-mlp.vramtrace")
}

fn vramtrace() -> Command {
    let mut cmd = Command::cargo_bin("vramtrace").unwrap();
    cmd.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    cmd
}

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
fn info_json_has_the_fields_design_md_promises() {
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
