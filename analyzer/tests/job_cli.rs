//! `summary`, `replay` and `fit` given a directory of one job's per-rank traces: each rank's
//! report is the one the command gives for that trace alone, and the job's figures name the
//! rank that sets the peak.

use assert_cmd::Command;
use serde_json::Value;
use std::path::Path;

fn json(args: &[&str]) -> Value {
    let out = Command::cargo_bin("vramtrace")
        .unwrap()
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn text(args: &[&str]) -> String {
    let out = Command::cargo_bin("vramtrace")
        .unwrap()
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn job(dir: &Path) -> String {
    // Rank 1's buffers are 3 times larger: it sets every peak.
    crate::util::write_job(dir, "job-x", 3, &[1], 3);
    dir.display().to_string()
}

#[test]
fn replay_of_a_job_is_each_ranks_replay_and_names_the_largest_rank() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = job(&tmp.path().join("job"));
    let policy = "pytorch,pytorch-expandable";
    let j = json(&["replay", "--json", "--policy", policy, &dir]);
    let ranks = j["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 3);
    let mut peaks = Vec::new();
    for (i, r) in ranks.iter().enumerate() {
        assert_eq!(r["rank"], i);
        assert_eq!(r["rank_known"], true);
        let alone = json(&[
            "replay",
            "--json",
            "--policy",
            policy,
            r["trace"].as_str().unwrap(),
        ]);
        assert_eq!(r["report"]["policies"], alone["policies"]);
        peaks.push(alone["policies"][0]["peak_reserved"].as_u64().unwrap());
    }
    let pytorch = &j["job_summary"][0];
    assert_eq!(pytorch["name"], "pytorch");
    let spread = &pytorch["peak_reserved"]["spread"];
    assert_eq!(spread["max_rank"], 1);
    assert_eq!(spread["max"].as_u64(), peaks.iter().max().copied());
    assert_eq!(spread["min"].as_u64(), peaks.iter().min().copied());
    let mean = peaks.iter().sum::<u64>() as f64 / 3.0;
    let imbalance = spread["imbalance"].as_f64().unwrap();
    assert!((imbalance - (peaks[1] as f64 / mean - 1.0)).abs() < 1e-9);
    assert!(imbalance > 0.5, "{imbalance}");

    let t = text(&["replay", "--policy", policy, &dir]);
    assert!(t.contains("(3 ranks)"), "{t}");
}

#[test]
fn summary_and_fit_of_a_job_name_the_rank_that_sets_the_peak() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = job(&tmp.path().join("job"));
    let s = json(&["summary", "--json", &dir]);
    let requested = &s["job_summary"][0];
    assert_eq!(requested["name"], "peak requested");
    assert_eq!(requested["spread"]["max_rank"], 1);
    let rank1 = json(&[
        "summary",
        "--json",
        s["ranks"][1]["trace"].as_str().unwrap(),
    ]);
    assert_eq!(
        requested["spread"]["max"],
        rank1["groups"][0]["peak_requested"]
    );

    let f = json(&["fit", "--json", "--policy", "pytorch", &dir]);
    let alone = json(&[
        "fit",
        "--json",
        "--policy",
        "pytorch",
        f["ranks"][1]["trace"].as_str().unwrap(),
    ]);
    assert_eq!(f["job_summary"][0]["spread"]["max_rank"], 1);
    assert_eq!(
        f["job_summary"][0]["spread"]["max"],
        alone["policies"][0]["min_capacity_bytes"]
    );
}

#[test]
fn a_directory_without_traces_is_a_one_line_error() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("vramtrace")
        .unwrap()
        .args(["summary"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("no .vramtrace file in the directory"), "{err}");
    assert_eq!(err.lines().count(), 1);
}

/// A rank whose trace was cut short is flagged as a single trace is: on stderr, in `--json`
/// (the rank's `incomplete` and the job's, keyed by file) and in the text (its row and the job
/// line); the complete ranks are not.
#[test]
fn an_incomplete_rank_is_flagged_on_stderr_in_json_and_in_the_job_line() {
    let tmp = tempfile::tempdir().unwrap();
    let paths = crate::util::write_job(tmp.path(), "job-x", 3, &[], 1);
    let cut = &paths[2];
    crate::util::cut_short(cut);
    let dir = tmp.path().to_str().unwrap();
    let name = cut.display().to_string();
    for args in [
        &["summary", dir][..],
        &["replay", dir, "--policy", "pytorch"],
        &["fit", dir, "--policy", "pytorch"],
    ] {
        let out = Command::cargo_bin("vramtrace")
            .unwrap()
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(out.status.success(), "{args:?}: {err}");
        assert!(
            err.contains(&format!("warning: rank 2: {name} is incomplete")),
            "{args:?}: {err}"
        );
        assert_eq!(err.matches("is incomplete").count(), 1, "{args:?}: {err}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.lines()
                .next()
                .unwrap()
                .contains("INCOMPLETE traces: rank 2"),
            "{args:?}: {text}"
        );
        let row = text
            .lines()
            .find(|l| l.contains(&name))
            .expect("rank 2's row");
        assert!(row.contains("(INCOMPLETE: "), "{args:?}: {row}");
        let v = json(&[args, &["--json"]].concat());
        let ranks = v["ranks"].as_array().unwrap();
        assert!(ranks[0]["incomplete"].is_null() && ranks[1]["incomplete"].is_null());
        let i = &ranks[2]["incomplete"];
        assert!(i["fraction"].as_f64().unwrap() < 1.0, "{i}");
        assert_eq!(&v["incomplete"][&name], i, "{args:?}");
        assert_eq!(v["incomplete"].as_object().unwrap().len(), 1);
    }
}
