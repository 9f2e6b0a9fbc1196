//! Every command tells the same story about the same trace: the figures one command shows are
//! the figures every other command shows for the same thing (docs/definitions.md).

use crate::util::{repo, vramtrace_in_repo};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use vramtrace::diff::Diff;
use vramtrace::model::device::CUDA_CONTEXT_BYTES;
use vramtrace::model::table::AllocationTable;
use vramtrace::model::{Model, RequestKind, RequestStream};
use vramtrace::policy::parse_specs;
use vramtrace::replay::{FitReport, ReplayInput};
use vramtrace::replay::{Limits, ReplayReport, capacity, prepare};
use vramtrace::report::data::Buckets;
use vramtrace::report::from_replay::{replay_policies, windows};
use vramtrace::summary::Summary;
use vramtrace::symbolize::NoFiles;
use vramtrace::tune::{Grid, capacities, loaded, model_and_recorded, tune_model};
use vramtrace_format::{ReadOptions, Trace, pickle};

/// Every bundled trace (samples/traces and the workloads' probes) and snapshot
/// (samples/snapshots), sorted.
fn bundled() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p
                .extension()
                .is_some_and(|x| x == "vramtrace" || x == "pickle")
            {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo("samples"), &mut out);
    out.sort();
    out
}

fn open(path: &Path) -> Trace {
    if path.extension().is_some_and(|x| x == "pickle") {
        let bytes = std::fs::read(path).unwrap();
        let doc = pickle::read(&bytes).unwrap();
        let name = path.display().to_string();
        vramtrace::interop::import_snapshot::import(&doc, &name)
            .unwrap()
            .into_trace()
    } else {
        Trace::open(path, ReadOptions::default()).unwrap()
    }
}

/// Every command's figures come from the one allocation table and the one replay set-up: on
/// every bundled trace and snapshot, the replay input built in the table's pass (what the report
/// loads, [`vramtrace::tune::loaded`]) gives the `vramtrace replay`
/// command's whole JSON (which streams the file through its own loader), and the report's
/// replays of each stream give the same peaks and the same out-of-memory verdicts per policy.
/// A view that built its requests, its limits or its segment addresses its own way would
/// differ on one of them (the recorded segment addresses alone moved a ResNet snapshot's
/// `pytorch` peak by 56 MiB: issue 23).
#[test]
fn replay_the_report_and_the_loaded_model_agree_per_policy_on_every_bundled_trace() {
    const POLICIES: &str = "pytorch,pytorch-expandable,cuda-malloc,bfc";
    let specs = parse_specs(POLICIES).unwrap();
    let files = bundled();
    assert!(files.len() > 40, "{} samples", files.len());
    let (mut scripted, mut commands) = (0, 0);
    for path in &files {
        let trace = open(path);
        let (model, _, recorded) = loaded(&trace);
        let limits = recorded_limits(recorded.memory_fraction);
        let Some(input) = set_up(&trace, &model, limits) else {
            continue;
        };
        let name = path.strip_prefix(repo("")).unwrap().to_str().unwrap();
        let replayed = ReplayReport::build(name, &specs, &input).unwrap();
        if path.extension().is_some_and(|x| x == "vramtrace") {
            // The command leads with the configuration the program ran under.
            let mut led = specs.clone();
            if let Some(r) = &input.recorded_policy
                && !led.iter().any(|s| s.to_string() == r.to_string())
            {
                led.insert(0, r.clone());
            }
            let expected = ReplayReport::build(name, &led, &input).unwrap();
            let command = json_of(&["replay", name, "--policy", POLICIES, "--json"]);
            assert_eq!(command, serde_json::to_value(&expected).unwrap(), "{name}");
            commands += 1;
        }
        for (stream, row) in model.streams.iter().zip(&replayed.streams) {
            scripted += usize::from(!stream.recorded_segments.is_empty());
            // The capacity and the replays as the report makes them (report::generate).
            let device = stream.key.unwrap().device;
            let (c, _) = capacity(&trace.tables.devices, device, limits);
            let (first, last) = (stream.requests[0].time_ns, stream.requests.last().unwrap());
            let b = Buckets::new(first, last.time_ns.max(first + 1), 16);
            let ws = windows(stream, b, first, 100);
            let report = replay_policies(stream, &specs, c, (b, b), &ws).unwrap();
            // Peak reserved, and the peak allocated the report and `replay` both call allocated.
            assert_eq!(
                report
                    .iter()
                    .map(|p| (p.peak_reserved.bytes, p.peak_allocated))
                    .collect::<Vec<_>>(),
                row.policies
                    .iter()
                    .map(|p| (p.peak_reserved, p.peak_allocated))
                    .collect::<Vec<_>>(),
                "{name} pid {} device {device}",
                row.pid
            );
            assert_eq!(
                report.iter().map(|p| p.oom.is_some()).collect::<Vec<_>>(),
                row.policies
                    .iter()
                    .map(|p| p.oom.is_some())
                    .collect::<Vec<_>>(),
                "{name}: who ran out"
            );
        }
    }
    // The set-up that differed: streams whose recorded segment addresses the driver replays.
    assert!(scripted >= 10, "{scripted} streams with recorded segments");
    assert!(commands > 40, "{commands} traces replayed by the command");
}

/// `fit`, `tune` and `diff` read the replay's set-up too, on every bundled trace and snapshot:
/// the model that replays load without the table's rows ([`model_and_recorded`]: `tune`,
/// and `replay` and `fit` of a job) is the one built with them; `fit`'s command gives the
/// fit of that set-up, whose unlimited peak per policy is the replay's wherever the device
/// holds it, and whose smallest pool the replay runs to the end in; `tune`'s recorded row is
/// the recorded setting replayed at its capacities; `diff`'s requested peak per process and
/// device is the replay's lower bound where nothing was allocated past the pool.
#[test]
fn fit_tune_and_diff_agree_with_the_replays_set_up_on_every_bundled_trace() {
    // Two policies whose placement does not read the capacity (BFC sizes its regions and
    // expandable segments their address space from it): each replays the same under any
    // capacity that holds its peak. Bisecting more costs minutes in a debug build.
    const POLICIES: &str = "pytorch,cuda-malloc";
    let specs = parse_specs(POLICIES).unwrap();
    let (mut peaks, mut fits, mut tunes, mut diffs) = (0, 0, 0, 0);
    for path in &bundled() {
        let trace = open(path);
        let (model, table, recorded) = loaded(&trace);
        let (without_rows, recorded_again) = model_and_recorded(&trace);
        let name = path.strip_prefix(repo("")).unwrap().to_str().unwrap();
        same_streams(&without_rows.streams, &model.streams, name);
        assert_eq!(recorded_again.spec, recorded.spec, "{name}");
        let limits = recorded_limits(recorded.memory_fraction);
        let Some(input) = set_up(&trace, &model, limits) else {
            continue;
        };
        let replayed = ReplayReport::build(name, &specs, &input).unwrap();
        // The command's fit where there is one (it streams the file through its own loader),
        // the library's of the set-up for a snapshot.
        let trace_file = path.extension().is_some_and(|x| x == "vramtrace");
        let fit = if trace_file {
            json_of(&["fit", name, "--policy", POLICIES, "--json"])
        } else {
            let fit = FitReport::build(name, &specs, &input, CUDA_CONTEXT_BYTES, &|_, _| {});
            serde_json::to_value(fit.unwrap()).unwrap()
        };
        let fit = fit["streams"].as_array().unwrap();
        assert_eq!(fit.len(), replayed.streams.len(), "{name}");
        for (s, (f, r)) in fit.iter().zip(&replayed.streams).enumerate() {
            assert_eq!(f["lower_bound_bytes"], r.lower_bound_bytes, "{name}");
            let capped = capped(&model.streams[s]);
            let capacity = r.capacity_bytes.unwrap_or(u64::MAX);
            for (p, rp) in r.policies.iter().enumerate() {
                let uncapped = f["policies"][p]["uncapped_peak_reserved"].as_u64().unwrap();
                if !capped && uncapped <= capacity {
                    assert_eq!(
                        uncapped, rp.peak_reserved,
                        "{name} pid {} device {}: {}",
                        r.pid, r.device, specs[p]
                    );
                    peaks += 1;
                }
            }
        }
        for (p, spec) in specs.iter().enumerate() {
            // Each stream at the smallest pool fit found for it, where the program set no cap.
            let smallest: Vec<Option<u64>> = (fit.iter().zip(&model.streams))
                .map(|(f, stream)| {
                    let c = f["policies"][p]["min_capacity_bytes"].as_u64();
                    c.filter(|_| !capped(stream))
                })
                .collect();
            if smallest.iter().all(Option::is_none) {
                continue;
            }
            let at = at_capacities(&input, smallest.iter().map(|c| c.unwrap_or(u64::MAX)));
            let report = ReplayReport::build(name, std::slice::from_ref(spec), &at).unwrap();
            for (s, r) in report.streams.iter().enumerate() {
                assert!(
                    r.policies[0].oom.is_none(),
                    "{name} pid {} device {}: {spec} at {:?}",
                    r.pid,
                    r.device,
                    at.capacities[s]
                );
            }
            fits += 1;
        }
        // `tune`'s recorded row: the recorded setting replayed at tune's capacities.
        let tuned = tune_model(
            &trace.tables.devices,
            &without_rows,
            &recorded,
            None,
            None,
            CUDA_CONTEXT_BYTES,
            Grid::Backends,
        )
        .unwrap()
        .unwrap();
        // The configuration replay leads with, where the trace holds what it reserved, is
        // the one tune calls recorded.
        if let Some(r) = &input.recorded_policy {
            assert_eq!(r.to_string(), tuned.recorded.setting, "{name}");
        }
        let caps = capacities(
            &trace.tables.devices,
            &model,
            None,
            None,
            CUDA_CONTEXT_BYTES,
        );
        let at_tune = at_capacities(&input, caps);
        let spec = recorded.spec.clone();
        let report = ReplayReport::build(name, &[spec], &at_tune).unwrap();
        let rows = report.streams.iter().map(|s| &s.policies[0]);
        assert_eq!(
            tuned.recorded.pool_peak_reserved,
            rows.clone().map(|p| p.peak_reserved).max().unwrap(),
            "{name}: {}",
            tuned.recorded.setting
        );
        assert_eq!(
            tuned.recorded.oom,
            rows.clone().any(|p| p.oom.is_some()),
            "{name}"
        );
        tunes += 1;
        // `diff`'s sides are summaries of the table: their requested peaks are the replay's
        // lower bounds where the pool served everything.
        let summary = Summary::with_table(&trace.tables, &table, &model, 0, &mut NoFiles);
        let diff = Diff::of(&summary, &summary);
        // A device's streams: on no device (a VMM allocation whose device the trace does not
        // say), the replay serves a stream the summary counts as segments alone.
        for r in replayed.streams.iter().filter(|r| r.device >= 0) {
            let g = diff
                .groups
                .iter()
                .find(|g| g.pid_a == Some(r.pid) && g.device == r.device)
                .unwrap_or_else(|| panic!("{name}: no group of pid {}", r.pid));
            let pool = summary
                .groups
                .iter()
                .find(|s| s.pid == r.pid && s.device == r.device)
                .and_then(|s| s.pool_peak_requested);
            let requested = pool.unwrap_or(g.peak_requested.a);
            assert_eq!(requested, r.lower_bound_bytes, "{name} pid {}", r.pid);
            assert_eq!(g.peak_requested.b, g.peak_requested.a, "{name}");
            diffs += 1;
        }
        if trace_file {
            let command = json_of(&["diff", name, name, "--json"]);
            let groups = &command["groups"];
            for (i, g) in diff.groups.iter().enumerate() {
                assert_eq!(
                    groups[i]["peak_requested"]["a"], g.peak_requested.a,
                    "{name}"
                );
                assert_eq!(groups[i]["peak_reserved"]["b"], g.peak_reserved.b, "{name}");
            }
        }
    }
    assert!(peaks > 50 && fits > 50, "{peaks} peaks, {fits} fits");
    assert!(tunes > 40 && diffs > 40, "{tunes} tunes, {diffs} diffs");
}

/// The limits the program set: its memory fraction, no capacity given.
fn recorded_limits(memory_fraction: Option<f64>) -> Limits {
    Limits {
        given: None,
        memory_fraction,
    }
}

/// The one replay set-up of `trace`'s `model` under `limits`.
fn set_up(trace: &Trace, model: &Model, limits: Limits) -> Option<ReplayInput> {
    prepare(
        model.clone(),
        &trace.metadata,
        &trace.tables.devices,
        limits,
    )
}

/// `a` and `b` hold the same request streams; a failure names the first request that differs.
fn same_streams(a: &[RequestStream], b: &[RequestStream], name: &str) {
    assert_eq!(a.len(), b.len(), "{name}: streams");
    for (x, y) in a.iter().zip(b) {
        let at = x.requests.iter().zip(&y.requests).position(|(p, q)| p != q);
        if let Some(i) = at {
            panic!(
                "{name}: request {i}: {:?} against {:?}",
                x.requests[i], y.requests[i]
            );
        }
        // The rest: the lengths, the set-aside memory, the recorded segments and totals.
        assert_eq!(format!("{x:?}"), format!("{y:?}"), "{name}");
    }
}

/// Whether the program capped the allocator of `stream` itself (a memory fraction it set).
fn capped(stream: &RequestStream) -> bool {
    stream
        .requests
        .iter()
        .any(|q| q.kind == RequestKind::MemoryFraction)
}

/// `input` with each stream at the capacity `capacities` gives it.
fn at_capacities(input: &ReplayInput, capacities: impl IntoIterator<Item = u64>) -> ReplayInput {
    ReplayInput {
        model: input.model.clone(),
        capacities: (input.capacities.iter().zip(capacities))
            .map(|(&(_, source), c)| (c, source))
            .collect(),
        recorded_policy: input.recorded_policy.clone(),
    }
}

/// `vramtrace ARGS` run from the repository root: (exit code, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let out = vramtrace_in_repo().args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn json_of(args: &[&str]) -> serde_json::Value {
    let (code, out, err) = run(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap()
}

const JAX: &str = "samples/traces/jax-platform.vramtrace";
const MLP: &str = "samples/traces/synthetic-mlp.vramtrace";

#[test]
fn the_jax_sample_gets_jax_advice_though_its_python_lives_in_a_folder_named_torch() {
    let v = json_of(&["tune", JAX, "--json"]);
    assert_eq!(v["framework"], "jax");
    assert_eq!(v["evidence"], "loaded libjax_common.so");
    let (_, text, _) = run(&["tune", JAX]);
    assert!(text.contains("framework  JAX/XLA"), "{text}");
    assert!(!text.contains("PYTORCH_CUDA_ALLOC_CONF"), "{text}");
}

#[test]
fn a_bare_number_is_refused_by_capacity_and_gpu_alike() {
    for args in [
        &["replay", MLP, "--capacity", "80"][..],
        &["tune", MLP, "--gpu", "80"],
        &["tune", MLP, "--capacity", "80"],
    ] {
        let (code, _, err) = run(args);
        assert_eq!(code, 2, "{args:?}");
        assert!(
            err.contains("`80` has no unit: write 80GiB or 80GB (decimal), or 80B for exact bytes"),
            "{args:?}: {err}"
        );
    }
    let (code, _, _) = run(&["replay", MLP, "--policy", "pytorch", "--capacity", "80GB"]);
    assert_eq!(code, 0);
}

#[test]
fn a_conf_item_after_a_policy_name_is_refused_not_merged_into_it() {
    let (code, _, err) = run(&["replay", MLP, "--policy", "pytorch,max_split_size_mb:128"]);
    assert_eq!(code, 2);
    assert!(
        err.contains(
            "`pytorch,max_split_size_mb:128` is ambiguous: write `pytorch:max_split_size_mb=128`"
        ),
        "{err}"
    );
}

#[test]
fn a_collection_threshold_without_a_memory_fraction_is_warned_about() {
    let (code, _, err) = run(&[
        "replay",
        MLP,
        "--policy",
        "pytorch:garbage_collection_threshold=0.6",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(
            "warning: pytorch:garbage_collection_threshold=0.6: garbage_collection_threshold \
             does nothing without memory_fraction"
        ),
        "{err}"
    );
}

#[test]
fn replays_text_shows_the_allocated_its_csv_json_and_the_report_show() {
    const TRANSFORMER: &str = "samples/traces/torch-transformer-requests.vramtrace";
    let v = json_of(&["replay", TRANSFORMER, "--policy", "pytorch", "--json"]);
    let peak = v["policies"][0]["peak_allocated"].as_u64().unwrap();
    let at_peak = v["policies"][0]["allocated_at_peak_reserved"]
        .as_u64()
        .unwrap();
    assert_ne!(peak, at_peak, "the sample tells the two figures apart");
    let row = pytorch_row(&["replay", TRANSFORMER, "--policy", "pytorch"]);
    let columns: Vec<&str> = row.split("  ").filter(|c| !c.is_empty()).collect();
    assert_eq!(columns[2].trim(), vramtrace::units::bytes(peak), "{row}");
    let (_, csv, _) = run(&["replay", TRANSFORMER, "--policy", "pytorch", "--csv"]);
    assert!(csv.lines().nth(1).unwrap().contains(&format!(",{peak},")));
}

#[test]
fn every_predicted_figure_says_how_far_its_model_is_validated() {
    let v = json_of(&["replay", MLP, "--policy", "pytorch,gmlake", "--json"]);
    let pytorch = &v["policies"][0]["validated"];
    assert_eq!(pytorch["policy"], "pytorch");
    // The band is that of the runs of the trace's own capture, named beside it.
    assert_eq!(v["capture"], "requests");
    assert_eq!(pytorch["capture"], "requests");
    assert!(pytorch["runs"].as_u64().unwrap() >= 5, "{pytorch}");
    assert!(v["policies"][1]["validated"].is_null(), "gmlake: {v}");
    let (_, text, _) = run(&["replay", MLP, "--policy", "pytorch,gmlake"]);
    let gmlake = text.lines().find(|l| l.starts_with("gmlake ")).unwrap();
    assert!(gmlake.contains("unvalidated"), "{gmlake}");
    let (_, fit, _) = run(&["fit", MLP, "--policy", "pytorch,gmlake"]);
    assert!(fit.contains("unvalidated"), "{fit}");
    let from = "real runs replayed from requests captures";
    assert!(text.contains(from) && fit.contains(from), "{text}\n{fit}");
    let fit = json_of(&["fit", MLP, "--policy", "pytorch", "--json"]);
    assert_eq!(fit["capture"], "requests");
    assert_eq!(fit["policies"][0]["validated"]["capture"], "requests");
}

/// A model's band is that of the runs of the trace's capture: PyTorch's model replays tracker
/// captures exactly (they carry the real segment addresses), `--requests` traces within its
/// miss on the driver's address order, and a segment-level trace has no validated run at all.
#[test]
fn each_capture_gets_the_band_of_its_own_runs() {
    let band = |trace: &str| {
        let v = json_of(&["replay", trace, "--policy", "pytorch", "--json"]);
        (v["capture"].clone(), v["policies"][0]["validated"].clone())
    };
    let (capture, tracker) = band("samples/traces/h200-tune/generate.recorded.vramtrace");
    assert_eq!(capture, "tracker");
    assert_eq!(
        (tracker["low"].as_f64(), tracker["high"].as_f64()),
        (Some(0.0), Some(0.0))
    );
    let (capture, requests) = band("samples/traces/torch-transformer-requests.vramtrace");
    assert_eq!(capture, "requests");
    assert!(requests["low"].as_f64().unwrap() < -0.04, "{requests}");
    let (capture, segments) = band("samples/traces/torch-mlp-native.vramtrace");
    assert_eq!(capture, "segments");
    assert!(segments.is_null(), "{segments}");
    let (_, text, _) = run(&[
        "tune",
        "samples/traces/h200-tune/generate.recorded.vramtrace",
    ]);
    assert!(text.contains("from tracker captures"), "{text}");
}

/// `info` decides and shows the level as every other command does, not the raw metadata word
/// (a JAX platform trace declares none; its calls say it is request level).
#[test]
fn info_shows_the_level_every_other_command_shows() {
    for trace in [
        JAX,
        MLP,
        "samples/traces/torch-mlp-native.vramtrace",
        "samples/traces/h200-tune/generate.recorded.vramtrace",
    ] {
        let info = json_of(&["info", trace, "--json"]);
        let summary = json_of(&["summary", trace, "--json"]);
        assert_eq!(info["capture_level"], summary["capture_level"], "{trace}");
        // replay's text shows the level as it is (`LevelReport::shown`); info the same.
        let (_, replay, _) = run(&["replay", trace, "--policy", "lower-bound"]);
        let level = |text: &str| {
            let line = text.lines().find(|l| l.starts_with("level ")).unwrap();
            line["level".len()..].trim().to_string()
        };
        let (_, text, _) = run(&["info", trace]);
        assert_eq!(level(&text), level(&replay), "{trace}");
        assert_eq!(
            info["capture_level_shown"],
            level(&replay).as_str(),
            "{trace}"
        );
    }
}

#[test]
fn tune_ranks_by_figure_only_beyond_both_models_bands() {
    let t = json_of(&[
        "tune",
        "samples/traces/torch-transformer-requests.vramtrace",
        "--json",
    ]);
    let ranked = t["ranked"].as_array().unwrap();
    let best = &ranked[0];
    // The stream-ordered pool's model is validated as up to a fifth low on real runs: it does
    // not win on a figure inside that band.
    assert_ne!(best["setting"], "cuda-async", "{best}");
    assert!(!best["validated"].is_null());
    for pair in ranked.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let peak = |r: &serde_json::Value| r["process_peak"].as_u64().unwrap();
        if peak(a) > peak(b) && a["oom"] == b["oom"] && !b["validated"].is_null() {
            // A larger figure ranks above a smaller one only within the noise.
            assert_eq!(
                a["within_noise"], true,
                "{} above {}",
                a["setting"], b["setting"]
            );
        }
    }
}

#[test]
fn tune_and_the_reports_headline_count_the_same_settings_tried() {
    let v = json_of(&["tune", MLP, "--json"]);
    let trace = open(&repo(MLP));
    let (model, recorded) = model_and_recorded(&trace);
    let report = vramtrace::tune::tune_model(
        &trace.tables.devices,
        &model,
        &recorded,
        None,
        None,
        vramtrace::model::device::CUDA_CONTEXT_BYTES,
        vramtrace::tune::Grid::Settings,
    )
    .unwrap()
    .unwrap();
    assert_eq!(v["tried"].as_u64().unwrap(), report.tried as u64);
    assert_eq!(v["bounds"].as_array().unwrap().len(), 2);
}

/// The `pytorch` row of `vramtrace replay ARGS` in text.
fn pytorch_row(args: &[&str]) -> String {
    let (_, text, _) = run(args);
    let row = text.lines().find(|l| l.starts_with("pytorch "));
    row.expect("a pytorch row").to_string()
}

#[test]
fn a_recorded_out_of_memory_error_the_policy_reproduces_is_shown_not_a_dash() {
    let capped = "samples/traces/h200-torch/resnet.cap5_6g.vramtrace";
    let at = [
        "replay",
        capped,
        "--policy",
        "pytorch",
        "--capacity",
        "5.6GiB",
    ];
    // At the room the run had, the policy the program ran under is refused where the run was.
    let v = json_of(&[&at[..], &["--json"]].concat());
    let row = &v["policies"][0];
    assert!(row["oom"].is_null());
    assert_eq!(row["refused_as_recorded"], 36);
    let line = pytorch_row(&at);
    assert!(
        line.ends_with("  36 refused as in the recorded run"),
        "{line}"
    );
    // On the whole device (the trace does not record the limit) it serves them, and says so.
    let line = pytorch_row(&at[..4]);
    assert!(
        line.ends_with(
            "- (served the 36 allocations the recorded run was refused: it had more room)"
        ),
        "{line}"
    );
}

#[test]
fn every_command_flags_a_cut_short_trace_with_the_share_of_events_it_has() {
    let tmp = tempfile::tempdir().unwrap();
    let cut = tmp.path().join("cut.vramtrace");
    let whole = std::fs::read(repo("samples/traces/torch-transformer-requests.vramtrace")).unwrap();
    std::fs::write(&cut, &whole[..90_000]).unwrap();
    let cut = cut.to_str().unwrap();
    let name = cut.to_string();
    for args in [
        &["summary", cut, "--json"][..],
        &["replay", cut, "--policy", "pytorch", "--json"],
        &["fit", cut, "--policy", "pytorch", "--json"],
        &["tune", cut, "--json"],
        &["diff", cut, MLP, "--json"],
    ] {
        let (code, out, err) = run(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let i = &v["incomplete"][&name];
        assert_eq!(i["events"], 9073, "{args:?}: {v}");
        let fraction = i["fraction"].as_f64().unwrap();
        assert!(fraction > 0.0 && fraction <= 1.0, "{args:?}: {i}");
        assert!(
            err.contains(&format!(
                "warning: {name} is incomplete (the file ends at byte 90000"
            )),
            "{args:?}: {err}"
        );
    }
    // A complete trace's JSON has no such field.
    assert!(json_of(&["summary", MLP, "--json"])["incomplete"].is_null());
}

#[test]
fn an_allocation_without_a_stack_says_why_and_which_flag_names_it() {
    // JAX's runtime allocates on its own threads, which run no Python (PyTorch's autograd
    // thread is named by its backward() call: tests/backward.rs).
    let (code, text, _) = run(&["summary", "samples/traces/jax-platform.vramtrace"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.ends_with("×  <no stack>"))
        .expect("the sample's runtime allocations have no Python stack");
    assert_eq!(
        lines[at + 1].trim(),
        format!("({})", vramtrace::symbolize::NO_STACK_WHY)
    );
    assert!(vramtrace::symbolize::NO_STACK_WHY.contains("--stacks mixed"));
}

/// Per (process, device), the largest requested and reserved bytes.
type Peaks = BTreeMap<(u64, i64), (u64, u64)>;

/// Per (process, device track), the largest `requested` and `reserved` of a Perfetto export's
/// counter points, and the count of its points and of its failed-allocation instants.
fn perfetto_figures(trace: &Trace) -> (Peaks, u64, u64) {
    let mut out = Vec::new();
    vramtrace::interop::export_perfetto::write(trace, &mut out).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let (mut peaks, mut points, mut instants) = (BTreeMap::new(), 0, 0);
    for e in v["traceEvents"].as_array().unwrap() {
        match e["ph"].as_str().unwrap() {
            "C" => {
                let name = e["name"].as_str().unwrap();
                let device = name
                    .strip_prefix("GPU ")
                    .and_then(|n| n.strip_suffix(" memory"))
                    .map_or(-1, |n| n.parse().unwrap());
                let p: &mut (u64, u64) = peaks
                    .entry((e["pid"].as_u64().unwrap(), device))
                    .or_default();
                p.0 = p.0.max(e["args"]["requested"].as_u64().unwrap());
                p.1 = p.1.max(e["args"]["reserved"].as_u64().unwrap());
                points += 1;
            }
            "i" => instants += 1,
            _ => {}
        }
    }
    (peaks, points, instants)
}

#[test]
fn every_view_reads_its_totals_from_the_one_allocation_table_on_every_bundled_trace() {
    let (mut traces, mut failed, mut unmatched) = (0, 0, 0);
    for path in bundled() {
        let trace = open(&path);
        let name = path.display();
        let table = AllocationTable::of(&trace);
        let summary = Summary::of(&trace);
        // Unmatched frees: the table's, the summary's (the replay model has none of its own).
        assert_eq!(summary.unmatched_frees, table.unmatched_frees, "{name}");
        // Failed allocations: the summary's count, its sites', the export's instants.
        let (peaks, points, instants) = perfetto_figures(&trace);
        let at_sites: u64 = summary
            .groups
            .iter()
            .flat_map(|g| &g.failures)
            .map(|f| f.count)
            .sum();
        assert_eq!(
            (at_sites, instants),
            (table.failures.len() as u64, table.failures.len() as u64),
            "{name}"
        );
        assert_eq!(summary.failed_allocations, at_sites, "{name}");
        // Peaks of live bytes per process and device, and one counter point per allocation
        // and per free.
        let groups: Peaks = summary
            .groups
            .iter()
            .filter(|g| g.by_kind.iter().any(|k| k.allocations > 0))
            .map(|g| {
                let key = (u64::from(g.pid), i64::from(g.device));
                (key, (g.peak_requested, g.peak_reserved))
            })
            .collect();
        assert_eq!(groups, peaks, "{name}");
        let changes: u64 = summary
            .groups
            .iter()
            .flat_map(|g| &g.by_kind)
            .map(|k| k.allocations + k.frees)
            .sum();
        assert_eq!(changes, points, "{name}");
        traces += 1;
        failed += table.failures.len();
        unmatched += table.unmatched_frees;
    }
    assert!(traces > 40, "{traces} traces");
    // Neither comparison is of zeros alone.
    assert!(
        failed > 0 && unmatched > 0,
        "{failed} failed, {unmatched} unmatched"
    );
}
