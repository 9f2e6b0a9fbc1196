//! Real runs at their memory limit (`samples/traces/h200-pressure/`, H200, PyTorch 2.11): the
//! recorded setting replayed under the fraction the program set, and with its `empty_cache`
//! calls, reproduces what the run's own `torch.cuda.memory_stats()` say, the recorded
//! out-of-memory error included; `fit` leaves the program's fraction out.

use crate::util::{only_stream, repo};
use vramtrace::model::RequestKind;
use vramtrace::policy::{PolicySpec, resolve};
use vramtrace::replay::{fit_one, run};

fn sample(name: &str) -> std::path::PathBuf {
    repo(&format!("samples/traces/h200-pressure/{name}"))
}

/// The `torch.cuda.memory_stats()` the recorded process wrote at its end.
fn stats(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(sample(&format!("{name}.json"))).unwrap();
    serde_json::from_str::<serde_json::Value>(&text).unwrap()["memory_stats"].clone()
}

fn policy(text: &str) -> PolicySpec {
    resolve(text).unwrap().remove(0)
}

fn stat(s: &serde_json::Value, key: &str) -> u64 {
    s[key].as_u64().unwrap_or_else(|| panic!("{key}"))
}

#[test]
fn a_run_capped_at_4_gib_that_ran_out_of_memory_replays_to_its_own_peak_and_its_own_oom() {
    let stream = only_stream(&sample("grow-native.vramtrace"));
    assert_eq!(stream.memory_fraction(), Some(0.02861215588770113));
    assert_eq!(stream.device_total, Some(150_109_880_320));
    let real = stats("grow-native");
    let o = run(&stream, &policy("pytorch"), u64::MAX).unwrap();
    assert_eq!(o.peak_reserved, stat(&real, "reserved_bytes.all.peak"));
    assert_eq!(
        (o.device_allocs, o.device_frees),
        (
            stat(&real, "num_device_alloc"),
            stat(&real, "num_device_free")
        )
    );
    // The one refused request was refused again (the program caught it and went on), and every
    // request the run served was served.
    let attempts = stream
        .requests
        .iter()
        .filter(|r| r.kind == RequestKind::Attempt)
        .count() as u64;
    assert_eq!(attempts, stat(&real, "num_ooms"));
    assert_eq!((o.refused_attempts, o.oom.is_none()), (attempts, true));
    // Without the cap the same requests reserve far more: the cap is what the run was.
    let uncapped = run(&stream, &policy("pytorch:memory_fraction=1"), u64::MAX).unwrap();
    assert!(uncapped.peak_reserved > 2 * o.peak_reserved);
}

#[test]
fn an_expandable_run_that_died_of_its_cap_replays_to_its_own_peak() {
    let stream = only_stream(&sample("capped-expandable.vramtrace"));
    let real = stats("capped-expandable");
    let o = run(&stream, &policy("pytorch-expandable"), u64::MAX).unwrap();
    assert_eq!(o.peak_reserved, stat(&real, "reserved_bytes.all.peak"));
    assert_eq!(o.device_frees, stat(&real, "num_device_free"));
    assert_eq!((o.refused_attempts, stat(&real, "num_ooms")), (1, 1));
}

#[test]
fn empty_cache_calls_give_back_what_the_run_gave_back() {
    let stream = only_stream(&sample("empty-native.vramtrace"));
    let calls = stream
        .requests
        .iter()
        .filter(|r| r.kind == RequestKind::EmptyCache)
        .count();
    assert_eq!(calls, 8);
    let real = stats("empty-native");
    let o = run(&stream, &policy("pytorch"), u64::MAX).unwrap();
    assert_eq!(o.peak_reserved, stat(&real, "reserved_bytes.all.peak"));
    assert_eq!(o.device_frees, stat(&real, "num_device_free"));
}

#[test]
fn fit_searches_the_limit_itself_rather_than_under_the_programs_fraction() {
    let stream = only_stream(&sample("grow-native.vramtrace"));
    let f = fit_one(&stream, &policy("pytorch")).unwrap();
    let need = f.min_capacity_bytes.expect("fits somewhere");
    // Below the 4 GiB cap it ran under (it OOMed there only at a request it survived) and at
    // least its peak of live bytes.
    assert!(need <= 4 << 30 && need >= stream.lower_bound(), "{need}");
}

#[test]
fn summary_tells_the_programs_cap_from_a_full_device_at_the_oom() {
    let out = crate::util::vramtrace()
        .args(["summary", sample("grow-native.vramtrace").to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let cap = "limit: PyTorch may reserve 4.00 GiB (the program's \
               set_per_process_memory_fraction(0.02861215588770113) of 139.80 GiB)";
    assert!(text.contains(cap), "{text}");
    assert!(
        text.contains("free then: room on the device: the program's cap was reached"),
        "{text}"
    );
}

/// `tune`'s "not judged" line says what the trace holds: the `empty_cache` program's eight
/// calls, not "no empty_cache calls".
#[test]
fn tune_counts_the_empty_cache_calls_the_trace_holds() {
    let tune = |name: &str| {
        let out = crate::util::vramtrace()
            .args(["tune", sample(name).to_str().unwrap(), "--json"])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["not_judged"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["setting"].as_str().unwrap().contains("empty_cache"))
            .expect("the empty_cache line")["why"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let empty = tune("empty-native.vramtrace");
    assert!(
        empty.starts_with("the trace records 8 empty_cache call(s) and 0 private pool(s)"),
        "{empty}"
    );
    assert_eq!(
        tune("grow-native.vramtrace"),
        "the trace records no graph captures and no empty_cache calls"
    );
}

/// `summary --json` of a trace.
fn summary_json(name: &str) -> serde_json::Value {
    let out = crate::util::vramtrace()
        .args(["summary", sample(name).to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The OOM story of the 4 GiB grow-until-OOM run: the request and its line, what was live by
/// line, the real allocator's cache then (14 MiB free blocks against a 177 MiB request: not
/// fragmentation), the program's cap, no setting that serves it under that cap (tune's search),
/// and the smallest fraction that does (fit), which the replay confirms to the byte's side.
#[test]
fn the_oom_story_of_the_capped_grow_run_ends_with_the_fraction_that_serves_its_request() {
    let v = summary_json("grow-native.vramtrace");
    let stories = v["oom_stories"].as_array().unwrap();
    assert_eq!(stories.len(), 1);
    let s = &stories[0];
    let stream = only_stream(&sample("grow-native.vramtrace"));
    let at = s["request_index"].as_u64().unwrap() as usize;
    let request = stream.requests[at];
    assert_eq!(request.kind, RequestKind::Attempt);
    assert_eq!(s["size"], request.size);
    assert!(
        s["site"]
            .as_str()
            .unwrap()
            .ends_with("pressure_workloads.py:51 train_step"),
        "{s}"
    );
    let lines = s["live_by_line"].as_array().unwrap();
    assert_eq!(lines[0]["site"], s["site"]);
    let live: u64 = stream.live_before(at).iter().map(|o| o.1).sum();
    assert_eq!(s["live_requested"], live);
    let cache = &s["cache"];
    assert_eq!(cache["policy"], "pytorch");
    assert_eq!(cache["fragmentation"], false);
    assert!(cache["largest_free_block"].as_u64().unwrap() < request.size);
    assert_eq!(s["limit"]["cap_bytes"], 4_294_967_296u64);
    assert_eq!(s["served_within"], 4_294_967_296u64);
    assert!(s["served_by"].as_array().unwrap().is_empty(), "{s}");
    let f = s["smallest"]["memory_fraction"].as_f64().unwrap();
    assert_eq!(
        s["paste"],
        format!("torch.cuda.set_per_process_memory_fraction({f})").as_str()
    );
    // The program as far as the request, asked as an allocation: served at that fraction,
    // refused 2 MiB below it.
    let mut upto = stream.without_memory_fraction().into_owned();
    upto.requests.truncate(at + 1);
    upto.requests[at].kind = RequestKind::Alloc;
    let total = stream.device_total.unwrap();
    let at_fraction = |f: f64| {
        run(
            &upto,
            &policy(&format!("pytorch:memory_fraction={f}")),
            u64::MAX,
        )
        .unwrap()
    };
    assert!(at_fraction(f).oom.is_none());
    let cap = s["smallest"]["capacity_bytes"].as_u64().unwrap();
    let below = vramtrace::policy::pytorch::fraction_for_cap(cap - (2 << 20), total);
    assert!(at_fraction(below).oom.is_some());
    // The text is the same story, ending with the line to paste.
    let out = crate::util::vramtrace()
        .args(["summary", sample("grow-native.vramtrace").to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let story = &text[text.find("OOM story").expect("the story")..];
    assert!(story.contains("not fragmentation"), "{story}");
    assert!(story.contains("under the same cap (4.00 GiB)"), "{story}");
    assert_eq!(
        story.lines().last().unwrap(),
        format!("  paste      torch.cuda.set_per_process_memory_fraction({f})")
    );
    assert!(story.lines().count() <= 24, "one screen: {story}");
}

/// The expandable run that died of its cap: the story says so, and a trace without a recorded
/// failure has none.
#[test]
fn the_capped_expandable_run_has_its_story_and_a_run_without_failures_none() {
    let v = summary_json("capped-expandable.vramtrace");
    let s = &v["oom_stories"][0];
    assert_eq!(s["cache"]["policy"], "pytorch-expandable");
    assert!(
        s["limit"]["verdict"]
            .as_str()
            .unwrap()
            .contains("cap was reached")
    );
    assert!(
        s["paste"]
            .as_str()
            .unwrap()
            .starts_with("torch.cuda.set_per_process_memory_fraction(")
    );
    assert!(
        summary_json("empty-native.vramtrace")["oom_stories"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

/// Every memory fraction the program set is in `summary --json`, with its time: the grow run
/// set one.
#[test]
fn summary_lists_every_memory_fraction_the_program_set() {
    let v = summary_json("grow-native.vramtrace");
    let changes = v["limits"][0]["fraction_changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0]["fraction"], 0.02861215588770113);
}
