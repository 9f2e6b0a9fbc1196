//! `--json` is JSON escaped as JSON: a trace whose strings hold every character a terminal
//! obeys (DEL, C0 and C1 controls, bidi marks) and JSON's own specials (quotes, backslashes,
//! NUL) gives, from every command, a document serde_json parses, holding those strings exactly
//! and no raw control character; the text output shows them escaped.

use crate::util::vramtrace;
use serde_json::Value;
use std::path::{Path, PathBuf};
use vramtrace_format::{
    Api, Device, Event, Frame, Metadata, Module, Process, PythonFrame, Stack, Tables, TraceWriter,
    WriterOptions,
};

/// Every kind of character that must not reach a terminal raw, and JSON's specials.
const HOSTILE: &str = "del\u{7f} c1\u{9b}2J\u{85} bidi\u{202e}cod.exe\u{2066}\u{200f} \
                       quote\" back\\slash nul\0 esc\u{1b}]0;t\u{7} cr\r";

fn module_path() -> String {
    format!("/opt/{HOSTILE}/libhostile.so")
}
fn python_file() -> String {
    format!("/src/{HOSTILE}.py")
}
fn python_function() -> String {
    format!("Model.{HOSTILE}")
}

/// A one-device trace whose module path, Python file and function names, writer, host, command
/// line and environment value each hold [`HOSTILE`]; `rank` is its `RANK`.
fn hostile_trace(dir: &Path, name: &str, rank: u32) -> PathBuf {
    let metadata = Metadata {
        writer: HOSTILE.into(),
        host: HOSTILE.into(),
        capture_level: "request".into(),
        environment: vec![
            ("PYTORCH_CUDA_ALLOC_CONF".into(), HOSTILE.into()),
            ("RANK".into(), rank.to_string()),
        ],
        ..Metadata::default()
    };
    let path = dir.join(name);
    let file = std::fs::File::create(&path).unwrap();
    let mut w = TraceWriter::new(file, &metadata, WriterOptions::default()).unwrap();
    *w.tables_mut() = Tables {
        processes: vec![Process {
            pid: 9,
            parent_pid: 1,
            command_line: vec!["python".into(), HOSTILE.into()],
            start_unix_ns: 0,
            start_monotonic_ns: 0,
        }],
        devices: vec![Device {
            ordinal: 0,
            name: HOSTILE.into(),
            uuid: [0; 16],
            total_memory: 1 << 30,
            compute_capability: (9, 0),
        }],
        stacks: vec![Stack {
            id: 1,
            frames: vec![1, 2],
        }],
        frames: vec![Frame {
            id: 1,
            address: 0x7000_0100,
        }],
        python_frames: vec![PythonFrame {
            id: 2,
            file: python_file(),
            function: python_function(),
            line: 7,
            module: String::new(),
        }],
        modules: vec![Module {
            id: 1,
            pid: 9,
            path: module_path(),
            build_id: Vec::new(),
            load_address: 0x7000_0000,
            size: 1 << 20,
            loaded_ns: 0,
            unloaded_ns: None,
        }],
        ..Tables::default()
    };
    let events = [
        (Api::CuMemAlloc_v2, 0x10_0000, 3 << 20),
        (Api::CuMemAlloc_v2, 0x40_0000, 1 << 20),
        (Api::CuMemFree_v2, 0x10_0000, 0),
        (Api::CuMemFree_v2, 0x40_0000, 0),
    ];
    for (seq, (api, address, size)) in (1..).zip(events) {
        let event = Event {
            seq,
            time_ns: seq * 1_000,
            pid: 9,
            address,
            size,
            stack: 1,
            ..Event::new(api)
        };
        w.push(&event).unwrap();
    }
    w.finish().unwrap();
    path
}

/// Every string in `v`, keys included.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => o.iter().for_each(|(k, x)| {
            out.push(k.clone());
            strings(x, out);
        }),
        _ => {}
    }
}

/// A character the terminal obeys, line feed and tab (the layout) aside.
fn controls_a_terminal(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn stdout_of(args: &[&str]) -> String {
    let out = vramtrace().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_json_output_parses_and_holds_the_traces_strings_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    std::fs::create_dir(&job).unwrap();
    let a = hostile_trace(&job, "a.vramtrace", 0);
    hostile_trace(&job, "b.vramtrace", 1);
    let (a, j) = (a.to_str().unwrap(), job.to_str().unwrap());
    // (command, strings it must hold exactly)
    let file = python_file();
    let function = python_function();
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (vec!["info", a], vec![HOSTILE]),
        (vec!["summary", a], vec![HOSTILE, &file]),
        (vec!["replay", a], vec![]),
        (vec!["fit", a, "--policy", "cuda-malloc"], vec![]),
        (vec!["tune", a], vec![]),
        (vec!["diff", a, a], vec![]),
        (vec!["summary", j], vec![HOSTILE]),
        (vec!["replay", j], vec![]),
        (vec!["fit", j, "--policy", "cuda-malloc"], vec![]),
    ];
    for (args, expected) in cases {
        let mut with_json = args.clone();
        with_json.push("--json");
        let text = stdout_of(&with_json);
        assert!(
            !text.chars().any(controls_a_terminal),
            "{args:?}: a raw control character in {text:?}"
        );
        let value: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{args:?}: invalid JSON ({e}): {text}"));
        let mut found = Vec::new();
        strings(&value, &mut found);
        for want in expected {
            assert!(
                found.iter().any(|s| s.contains(want)),
                "{args:?}: {want:?} is not among the strings {found:?}"
            );
        }
        // A string holding a Python frame's name holds it whole, as the trace had it.
        for s in found.iter().filter(|s| s.contains("Model.")) {
            assert!(s.contains(&function), "{args:?}: {s:?}");
        }
    }
}

#[test]
fn text_output_of_hostile_strings_holds_no_raw_control_character() {
    let dir = tempfile::tempdir().unwrap();
    let a = hostile_trace(dir.path(), "a.vramtrace", 0);
    let a = a.to_str().unwrap();
    for args in [
        vec!["info", a],
        vec!["summary", a],
        vec!["replay", a],
        vec!["tune", a],
        vec!["diff", a, a],
    ] {
        let text = stdout_of(&args);
        assert!(
            !text.chars().any(controls_a_terminal),
            "{args:?}: a raw control character in {text:?}"
        );
    }
    let info = stdout_of(&["info", a]);
    assert!(info.contains("del\\u{7f} c1\\u{9b}2J"), "{info}");
}

/// Every key of a JSON document, at any depth.
fn keys(v: &Value, out: &mut std::collections::BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                out.insert(k.clone());
                keys(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| keys(x, out)),
        _ => {}
    }
}

/// docs/architecture.md's "Output contracts" names the fields other tools rely on; each line's
/// fields are in the real `--json` of its command (on the capped grow run, which has limits, a
/// recorded out-of-memory error and a replay that runs out; and on cut traces for
/// `incomplete`).
#[test]
fn every_field_of_the_output_contract_is_in_the_real_json() {
    let doc = std::fs::read_to_string(crate::util::repo("docs/architecture.md")).unwrap();
    let section = &doc[doc.find("## Output contracts").unwrap()..];
    let section = &section[..section[3..].find("\n## ").unwrap()];
    let grow = crate::util::repo("samples/traces/h200-pressure/grow-native.vramtrace");
    let grow = grow.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cut = tmp.path().join("cut.vramtrace");
    std::fs::copy(grow, &cut).unwrap();
    crate::util::cut_short(&cut);
    let job = tmp.path().join("job");
    let ranks = crate::util::write_job(&job, "job-x", 2, &[], 1);
    crate::util::cut_short(&ranks[1]);
    let (cut, job) = (cut.to_str().unwrap(), job.to_str().unwrap());
    let runs: [(&str, Vec<Vec<&str>>); 7] = [
        ("- `info --json`", vec![vec!["info", grow]]),
        ("- `summary --json`", vec![vec!["summary", grow]]),
        (
            "- `replay --json`",
            vec![
                vec!["replay", grow, "--policy", "pytorch"],
                vec!["replay", grow, "--policy", "pytorch", "--capacity", "1GiB"],
            ],
        ),
        (
            "- `fit --json`",
            vec![vec!["fit", grow, "--policy", "pytorch"]],
        ),
        ("- `tune --json`", vec![vec!["tune", grow]]),
        (
            "- A job directory given to",
            vec![vec!["tune", job], vec!["fit", job, "--policy", "pytorch"]],
        ),
        (
            "- Every command given an incomplete trace",
            vec![vec!["summary", cut], vec!["summary", job]],
        ),
    ];
    let bullets: Vec<&str> = section.split("\n- ").skip(1).collect();
    assert_eq!(bullets.len(), runs.len(), "one run per contract line");
    for (start, commands) in &runs {
        let bullet = bullets
            .iter()
            .find(|b| start.strip_prefix("- ").is_some_and(|s| b.starts_with(s)))
            .unwrap_or_else(|| panic!("{start}"));
        let mut present = std::collections::BTreeSet::new();
        for args in commands {
            let out = vramtrace().args(args).arg("--json").output().unwrap();
            assert!(out.status.success(), "{args:?}");
            keys(&serde_json::from_slice(&out.stdout).unwrap(), &mut present);
        }
        let named: Vec<&str> = bullet
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|t| !t.is_empty() && t.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            .collect();
        assert!(named.len() >= 3, "{start}: {named:?}");
        for field in named {
            assert!(
                present.contains(field),
                "{start}: `{field}` is not in the output"
            );
        }
    }
}
