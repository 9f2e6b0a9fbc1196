//! Backward attribution on the bundled real traces: the allocations of autograd's engine thread,
//! `<no stack>` before, are named "backward of <line>" by every command.

use crate::util::{repo, vramtrace_in_repo};
use vramtrace::backward::name_backward;
use vramtrace::summary::Summary;
use vramtrace_format::{ReadOptions, Trace};

const FLAGSHIP: &str = "samples/traces/torch-transformer-requests.vramtrace";
const BACKWARD_LINE: &str = "backward of /work/main/.dev-pyframes/workloads/torch_train.py:48 \
                             transformer_steps";

/// Bytes at the requested peak held by stacks without frames and by backward stacks, and the
/// peak.
fn shares(trace: &Trace) -> (u64, u64, u64) {
    let s = Summary::of(trace);
    let g = &s.groups[0];
    let sum = |f: &dyn Fn(&[String]) -> bool| {
        g.top_stacks_at_peak
            .iter()
            .filter(|s| f(&s.frames))
            .map(|s| s.bytes)
            .sum()
    };
    let none = sum(&|f| f.is_empty());
    let backward = sum(&|f| f.first().is_some_and(|f| f.starts_with("backward of ")));
    (none, backward, g.peak_requested)
}

#[test]
fn the_flagship_samples_no_stack_bytes_become_its_backward_line() {
    let mut trace = Trace::open(&repo(FLAGSHIP), ReadOptions::default()).unwrap();
    let (none, backward, peak) = shares(&trace);
    assert_eq!(backward, 0);
    // 216.14 MiB of the 1.10 GiB peak had no stack.
    assert!(none * 100 / peak >= 15, "{none} of {peak}");
    name_backward(&mut trace);
    let (none_after, backward_after, peak_after) = shares(&trace);
    assert_eq!((none_after, backward_after, peak_after), (0, none, peak));
}

#[test]
fn summary_replay_report_and_exports_name_the_backward_line() {
    let out = vramtrace_in_repo()
        .args(["summary", FLAGSHIP])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(BACKWARD_LINE), "{text}");
    assert!(!text.contains("<no stack>"), "{text}");

    let out = vramtrace_in_repo()
        .args(["replay", FLAGSHIP])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let peak = text.lines().find(|l| l.starts_with("at the peak")).unwrap();
    assert!(peak.contains(BACKWARD_LINE), "{peak}");

    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report");
    vramtrace_in_repo()
        .args(["report", FLAGSHIP, "--no-symbolize", "-o"])
        .arg(&html)
        .assert()
        .success();
    let page = std::fs::read_dir(&html)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap_or_default())
        .collect::<String>();
    assert!(
        page.contains("backward of "),
        "the report names no backward line"
    );

    let snapshot = dir.path().join("snapshot.pickle");
    vramtrace_in_repo()
        .args(["export", FLAGSHIP, "--to", "pytorch-snapshot", "-o"])
        .arg(&snapshot)
        .assert()
        .success();
    let bytes = std::fs::read(&snapshot).unwrap();
    let found = bytes.windows(12).any(|w| w == b"backward of ");
    assert!(found, "the snapshot names no backward line");
}

#[test]
fn an_engine_thread_without_its_backward_call_says_why() {
    // Recorded without PyTorch's tracker: the loss's gradient came from the allocator's cache,
    // so the trace holds no allocation of the backward() call.
    let out = vramtrace_in_repo()
        .args(["summary", "samples/traces/torch-mlp-native.vramtrace"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(vramtrace::symbolize::BACKWARD_UNSEEN),
        "{text}"
    );
}
