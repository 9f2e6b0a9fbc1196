//! `summary`, `replay` and `fit` given a directory of one job's per-rank traces: each rank's
//! report is the one the command gives for that trace alone, and the job's figures name the
//! rank that sets the peak.

use crate::util::repo;
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
    // Ranks 0 and 2 are equal and below rank 1: the middle of them by peak is rank 2.
    assert_eq!(spread["median_rank"], 2);
    assert_eq!(spread["median"].as_u64(), Some(peaks[0]));
    let imbalance = spread["imbalance"].as_f64().unwrap();
    assert_eq!(imbalance, peaks[1] as f64 / peaks[0] as f64);
    assert!(imbalance > 1.5, "{imbalance}");

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

/// A job of bundled traces, ranks numbered by file name: ranks 0 and 1 the MLP, rank 2 the
/// transformer, which needs more at every setting.
fn bundled_job(dir: &Path) -> (String, Vec<String>) {
    std::fs::create_dir_all(dir).unwrap();
    let traces = [
        "torch-mlp-requests",
        "torch-mlp-requests",
        "torch-transformer-requests",
    ]
    .iter()
    .enumerate()
    .map(|(rank, sample)| {
        let to = dir.join(format!("r-{rank}.vramtrace"));
        std::fs::copy(repo(&format!("samples/traces/{sample}.vramtrace")), &to).unwrap();
        to.display().to_string()
    })
    .collect();
    (dir.display().to_string(), traces)
}

/// The rank with the largest figure against the median rank: rank 2 against rank 1, by the
/// sites `vramtrace diff` lists between their traces.
fn check_peak_rank(p: &Value, figure: &str, traces: &[String]) {
    assert_eq!(p["figure"], figure);
    assert_eq!(
        (p["rank"].as_u64(), p["median_rank"].as_u64()),
        (Some(2), Some(1))
    );
    let (peak, median) = (p["peak"].as_u64().unwrap(), p["median"].as_u64().unwrap());
    assert_eq!(p["imbalance"].as_f64(), Some(peak as f64 / median as f64));
    let d = json(&["diff", "--json", &traces[1], &traces[2]]);
    assert_eq!(d["groups"].as_array().unwrap().len(), 1);
    assert_eq!(p["grew"], d["groups"][0]["grew"]);
    assert_eq!(p["shrank"], d["groups"][0]["shrank"]);
    assert!(!p["grew"].as_array().unwrap().is_empty());
}

#[test]
fn tune_of_a_job_ranks_each_setting_by_its_largest_rank() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, traces) = bundled_job(&tmp.path().join("job"));
    let j = json(&["tune", "--json", &dir]);
    let alone: Vec<Value> = traces
        .iter()
        .map(|t| json(&["tune", "--json", t]))
        .collect();
    for (r, a) in j["ranks"].as_array().unwrap().iter().zip(&alone) {
        assert_eq!(r["report"]["ranked"], a["ranked"]);
    }
    // A setting's process peak on one rank alone, whichever row of its search names it.
    let peak_of = |a: &Value, setting: &str| -> (u64, bool) {
        let row = a["ranked"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| {
                r["setting"] == setting
                    || r["equivalent"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|e| e == setting)
            })
            .unwrap_or_else(|| panic!("{setting}"));
        (row["process_peak"].as_u64().unwrap(), row["oom"] == true)
    };
    let ranked = j["job_summary"]["ranked"].as_array().unwrap();
    let mut settings = 0;
    let mut previous = 0;
    for row in ranked {
        let names = std::iter::once(&row["setting"]).chain(row["equivalent"].as_array().unwrap());
        for name in names {
            let name = name.as_str().unwrap();
            let peaks: Vec<(u64, bool)> = alone.iter().map(|a| peak_of(a, name)).collect();
            let max = peaks.iter().map(|p| p.0).max().unwrap();
            assert_eq!(row["process_peak"]["max"].as_u64(), Some(max), "{name}");
            assert_eq!(row["process_peak"]["max_rank"], 2, "{name}");
            assert!(
                peaks.iter().all(|p| !p.1),
                "{name}: no rank runs out of memory"
            );
            settings += 1;
        }
        let max = row["process_peak"]["max"].as_u64().unwrap();
        assert!(max >= previous, "ranked by the largest rank's peak");
        previous = max;
    }
    assert_eq!(settings, alone[0]["tried"].as_u64().unwrap());
    assert_eq!(j["job_summary"]["not_on_every_rank"], 0);
    let best = &ranked[0];
    check_peak_rank(
        &j["peak_rank"],
        &format!("process peak under {}", best["setting"].as_str().unwrap()),
        &traces,
    );

    let t = text(&["tune", &dir]);
    assert!(
        t.contains("peak rank  2 sets the job's process peak under"),
        "{t}"
    );
    assert!(t.contains("grew most at the peak"), "{t}");
    assert!(
        t.contains(&format!(
            "to apply the best setting on every rank:\n  {}",
            best["select"].as_str().unwrap()
        )),
        "{t}"
    );
}

#[test]
fn fit_of_a_job_needs_the_pool_and_gpu_of_its_largest_rank() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, traces) = bundled_job(&tmp.path().join("job"));
    let policies = ["pytorch", "pytorch-expandable"];
    let f = json(&["fit", "--json", "--policy", &policies.join(","), &dir]);
    let alone: Vec<Value> = traces
        .iter()
        .map(|t| json(&["fit", "--json", "--policy", &policies.join(","), t]))
        .collect();
    for (p, policy) in policies.iter().enumerate() {
        for (k, (field, what)) in [("min_capacity_bytes", "pool"), ("min_gpu_bytes", "GPU")]
            .iter()
            .enumerate()
        {
            let figure = &f["job_summary"][k * policies.len() + p];
            assert_eq!(figure["name"], format!("{policy} min {what}"));
            let each: Vec<u64> = alone
                .iter()
                .map(|a| a["policies"][p][field].as_u64().unwrap())
                .collect();
            assert_eq!(figure["spread"]["max"].as_u64(), each.iter().max().copied());
            assert_eq!(figure["spread"]["max_rank"], 2);
        }
    }
    check_peak_rank(&f["peak_rank"], "pytorch min GPU", &traces);
    let t = text(&["fit", "--policy", "pytorch", &dir]);
    assert!(
        t.contains("peak rank  2 sets the job's pytorch min GPU"),
        "{t}"
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
