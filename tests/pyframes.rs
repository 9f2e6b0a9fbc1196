//! Python frames in recorded stacks (recorder/src/python): Python programs reaching the fake
//! driver through ctypes, recorded, then read back through `vramtrace summary --json`.
//!
//! They run under `python3` (CPython 3.11 in CI), and under every other CPython found in
//! `/root/.pyenv/versions` (3.12 and 3.13 on the development machine; 3.10 must be refused).

use std::path::{Path, PathBuf};
use std::process::Command;
use vramtrace_format::NO_STACK;
use vramtrace_tests::{artifacts, command, open, scratch, traces_in};

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("py").join(name)
}

/// `python3`, then the other interpreters of the development machine, with their minor version.
fn interpreters() -> Vec<(PathBuf, u32)> {
    let mut found = vec![PathBuf::from("python3")];
    if let Ok(dir) = std::fs::read_dir("/root/.pyenv/versions") {
        let mut more: Vec<PathBuf> = dir
            .flatten()
            .map(|e| e.path().join("bin/python3"))
            .filter(|p| p.is_file())
            .collect();
        more.sort();
        found.extend(more);
    }
    found
        .into_iter()
        .filter_map(|p| {
            let out = Command::new(&p)
                .args([
                    "-c",
                    "import sys; print(sys.version_info[0] * 100 + sys.version_info[1])",
                ])
                .output()
                .ok()?;
            let v: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
            (v >= 310).then_some((p, v % 100))
        })
        .collect()
}

/// Records `python args` with `vramtrace record --stacks MODE`; the trace path, the program's
/// stdout and stderr.
fn record(python: &Path, mode: &str, dir: &Path, args: &[&str]) -> (PathBuf, String, String) {
    let a = artifacts();
    let out = command(&a.vramtrace)
        .args(["record", "--stacks", mode, "-o"])
        .arg(dir.join("run.vramtrace"))
        .arg("--")
        .arg(python)
        .args(args)
        .output()
        .expect("run vramtrace record");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let traces = traces_in(dir);
    assert_eq!(traces.len(), 1, "{traces:?}\n{stderr}");
    (traces[0].clone(), stdout, stderr)
}

/// Every stack `summary --json` lists anywhere: (site, frames).
fn summary_stacks(trace: &Path) -> Vec<(String, Vec<String>)> {
    let out = command(&artifacts().vramtrace)
        .args(["summary", "--json"])
        .arg(trace)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut found = Vec::new();
    collect(&json, &mut found);
    found
}

fn collect(v: &serde_json::Value, out: &mut Vec<(String, Vec<String>)>) {
    match v {
        serde_json::Value::Object(m) => {
            if let (Some(site), Some(frames)) = (m.get("site"), m.get("frames")) {
                let frames = frames
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|f| f.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                out.push((site.as_str().unwrap_or_default().to_string(), frames));
            }
            m.values().for_each(|x| collect(x, out));
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| collect(x, out)),
        _ => {}
    }
}

/// The `site NAME LINE` lines a script printed: each allocation's function and line.
fn sites(stdout: &str) -> Vec<(String, u32)> {
    stdout
        .lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix("site ")?.split_whitespace();
            Some((w.next()?.to_string(), w.next()?.parse().ok()?))
        })
        .collect()
}

#[test]
fn summary_names_each_allocating_function_with_its_file_and_line() {
    let file = script("alloc_sites.py");
    for (python, minor) in interpreters() {
        let dir = scratch(&format!(
            "pyframes-sites-3{minor}-{}",
            python.display().to_string().len()
        ));
        for mode in ["python", "mixed"] {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let (trace, stdout, stderr) = record(&python, mode, &dir, &[file.to_str().unwrap()]);
            let listed = summary_stacks(&trace);
            let expected = sites(&stdout);
            if minor == 10 {
                assert!(
                    stderr.contains("Python frames are read for CPython 3.11 to 3.13 only"),
                    "{stderr}"
                );
                assert!(
                    listed.iter().all(|(site, _)| !site.contains(".py:")),
                    "{listed:?}"
                );
                continue;
            }
            assert_eq!(expected.len(), 4, "{stdout}");
            for (function, line) in expected {
                let want = format!("{}:{line} {function}", file.display());
                assert!(
                    listed.iter().any(|(site, _)| *site == want),
                    "3.{minor} {mode}: no stack names {want}: {listed:#?}\n{stderr}"
                );
            }
            // Depth 200: the innermost 64 frames are kept, all of them `deep`.
            let deep = listed
                .iter()
                .find(|(site, _)| site.ends_with(" deep"))
                .expect("the recursion's stack");
            let python_frames = deep.1.iter().filter(|f| f.contains(".py:")).count();
            assert_eq!(python_frames, 64, "3.{minor} {mode}: {:?}", deep.1);
            // The thread's stack goes out through threading.py.
            let thread = listed
                .iter()
                .find(|(s, _)| s.ends_with(" in_thread"))
                .unwrap();
            assert!(
                thread.1.iter().any(|f| f.contains("threading.py:")),
                "{thread:?}"
            );
            // Both modes start with native frames: `python` keeps the driver call's caller alone
            // (the library that made it, recorder/src/stacks.rs `names_caller`).
            let native = deep.1.iter().take_while(|f| !f.contains(".py:")).count();
            if mode == "python" {
                assert_eq!(native, 1, "3.{minor}: {:?}", deep.1);
                assert!(deep.1[0].contains("libffi"), "3.{minor}: {:?}", deep.1);
            } else {
                assert!(native > 1, "3.{minor}: {:?}", deep.1);
            }
            if mode == "mixed" {
                // The native part crossed libffi's call frame (a rule framehop does not cache,
                // `recorder/src/memo.rs`) into the ctypes module that called it.
                assert!(
                    deep.1
                        .iter()
                        .take_while(|f| !f.contains(".py:"))
                        .any(|f| f.contains("_ctypes")),
                    "3.{minor}: {:?}",
                    deep.1
                );
            }
        }
    }
}

#[test]
fn stacks_none_records_no_stack_from_python() {
    let dir = scratch("pyframes-none");
    let (trace, _, _) = record(
        Path::new("python3"),
        "none",
        &dir,
        &[script("alloc_sites.py").to_str().unwrap()],
    );
    let t = open(&trace);
    assert_eq!(t.event_count(), 4);
    assert!(t.events().all(|e| e.stack == NO_STACK));
    assert!(t.tables.stacks.is_empty() && t.tables.python_frames.is_empty());
}

/// Builds the helper library that allocates from a thread without a Python thread state.
fn native_thread_library() -> PathBuf {
    let dir = scratch("pyframes-native-thread-lib");
    let lib = dir.join("libnative_thread.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(cc)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&lib)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("c/native_thread.c"))
        .args(["-ldl", "-lpthread"])
        .status()
        .unwrap();
    assert!(status.success());
    lib
}

#[test]
fn frames_made_and_freed_by_other_threads_and_a_thread_without_python_do_no_harm() {
    let lib = native_thread_library();
    for (python, minor) in interpreters().into_iter().filter(|(_, m)| *m >= 11) {
        for mode in ["python", "mixed"] {
            let dir = scratch(&format!("pyframes-stress-3{minor}-{mode}"));
            let (trace, stdout, stderr) = record(
                &python,
                mode,
                &dir,
                &[
                    script("stress.py").to_str().unwrap(),
                    lib.to_str().unwrap(),
                    "300",
                ],
            );
            let made: u64 = stdout
                .lines()
                .find_map(|l| l.strip_prefix("allocations "))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or_else(|| panic!("{stdout}\n{stderr}"));
            assert_eq!(made, 4 * 300 * 3);
            let t = open(&trace);
            assert_eq!(t.event_count(), made + 1, "every allocation recorded");
            // The native thread's allocation is the last event: no Python frames there.
            let last = t.events().last().unwrap();
            assert_eq!(last.size, 8192);
            let frames = t
                .tables
                .stacks
                .iter()
                .find(|s| s.id == last.stack)
                .map_or(0, |s| s.frames.len());
            if mode == "python" {
                // No Python frames there: the driver call's caller alone.
                assert_eq!(frames, 1, "3.{minor}: a thread without Python frames");
            } else {
                assert!(frames > 1, "3.{minor}: mixed keeps its native frames");
            }
            // Each path's own frames were named, with the line of its call.
            let named = &t.tables.python_frames;
            for (function, line) in [("short_lived_", 2), ("recurse", 24), ("generator", 29)] {
                assert!(
                    named
                        .iter()
                        .any(|f| f.function.starts_with(function) && f.line == line),
                    "3.{minor} {mode}: no {function} at line {line}: {named:#?}"
                );
            }
        }
    }
}

#[test]
fn a_python_lookalike_without_interpreter_symbols_records_native_stacks_and_says_so() {
    let a = artifacts();
    let dir = scratch("pyframes-lookalike");
    // A C program named like an interpreter: the recorder looks for Python, finds no symbols.
    let fake = dir.join("python3-lookalike");
    std::fs::copy(&a.client, &fake).unwrap();
    let out = command(&a.vramtrace)
        .args(["record", "--stacks", "python", "-o"])
        .arg(dir.join("out/"))
        .arg("--")
        .arg(&fake)
        .args(["dlsym", "all"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("interpreter's symbols (PyGILState_GetThisThreadState) were not found"),
        "{stderr}"
    );
    let traces = traces_in(&dir.join("out"));
    let t = open(&traces[0]);
    assert!(
        t.events().any(|e| e.stack != NO_STACK),
        "native stacks instead"
    );
    assert!(t.tables.python_frames.is_empty());
}

#[test]
fn a_paused_stretch_records_nothing_and_recording_resumes_after_it() {
    let dir = scratch("pyframes-paused");
    let (trace, stdout, _) = record(
        Path::new("python3"),
        "python",
        &dir,
        &[script("paused.py").to_str().unwrap()],
    );
    assert_eq!(stdout.lines().collect::<Vec<_>>(), ["was 0", "was 1"]);
    let allocs = open(&trace)
        .events()
        .filter(|e| e.api == vramtrace_format::Api::CuMemAlloc_v2 && e.succeeded())
        .count();
    assert_eq!(allocs, 3);
}

#[test]
fn allocations_from_lines_and_callers_of_one_function_in_turn_keep_their_own_stacks() {
    // The recorder looks a capture up among its thread's recent stacks first, by the innermost
    // frame (recorder/src/stacks.rs, `intern`): a line that changed inside the same function,
    // or the same line reached from another caller, with every frame at the same address, must
    // not be served the other's stack.
    for (python, minor) in interpreters().into_iter().filter(|(_, m)| *m >= 11) {
        let dir = scratch(&format!("pyframes-two-lines-3{minor}"));
        let (trace, stdout, stderr) = record(
            &python,
            "python",
            &dir,
            &[script("two_lines.py").to_str().unwrap()],
        );
        let printed = |prefix: &str| -> Vec<(u64, String)> {
            stdout
                .lines()
                .filter_map(|l| {
                    let mut w = l.strip_prefix(prefix)?.split_whitespace();
                    Some((w.next()?.parse().ok()?, w.next()?.to_string()))
                })
                .collect()
        };
        let (lines, callers) = (printed("line "), printed("caller "));
        assert_eq!((lines.len(), callers.len()), (3, 2), "{stdout}\n{stderr}");
        let t = open(&trace);
        // The stack's two innermost Python frames: (function, line) each.
        let innermost = |stack: u32| -> Vec<(String, u32)> {
            let Some(s) = t.tables.stacks.iter().find(|s| s.id == stack) else {
                return Vec::new();
            };
            s.frames
                .iter()
                .filter_map(|id| t.tables.python_frames.iter().find(|f| f.id == *id))
                .take(2)
                .map(|f| (f.function.clone(), f.line))
                .collect()
        };
        let allocs: Vec<_> = t
            .events()
            .filter(|e| e.api == vramtrace_format::Api::CuMemAlloc_v2)
            .collect();
        assert_eq!(allocs.len(), 15, "3.{minor}");
        for e in &allocs {
            let frames = innermost(e.stack);
            let size = e.size;
            if let Some((_, line)) = lines.iter().find(|(s, _)| *s == size) {
                let want = ("two_lines".to_string(), line.parse().unwrap());
                assert_eq!(frames.first(), Some(&want), "3.{minor}: {size} B");
            } else {
                let (_, caller) = callers.iter().find(|(s, _)| *s == size).unwrap();
                let names: Vec<&str> = frames.iter().map(|(f, _)| f.as_str()).collect();
                assert_eq!(names, ["inner", caller.as_str()], "3.{minor}: {size} B");
            }
        }
        // The three allocations of one line, one after the other, share one stack id.
        let repeated: Vec<u32> = allocs
            .iter()
            .filter(|e| e.size == 3 << 20)
            .map(|e| e.stack)
            .collect();
        assert_eq!(repeated, [repeated[0]; 3], "3.{minor}");
    }
}

#[test]
fn a_program_ending_in_os_exit_keeps_the_python_stack_of_every_allocation() {
    // os._exit runs no destructor: the recorder's own `_exit` finishes the trace, or the last
    // events' stacks, interned in process memory, would be lost with it (recorder/src/exit.rs).
    for (python, minor) in interpreters().into_iter().filter(|(_, m)| *m >= 11) {
        let dir = scratch(&format!("pyframes-os-exit-3{minor}"));
        let (trace, _, stderr) = record(
            &python,
            "python",
            &dir,
            &[script("os_exit.py").to_str().unwrap()],
        );
        assert!(!stderr.contains("recovered"), "{stderr}");
        let t = open(&trace);
        assert!(t.layout.complete, "3.{minor}");
        let allocs: Vec<_> = t
            .events()
            .filter(|e| e.api == vramtrace_format::Api::CuMemAlloc_v2)
            .collect();
        assert_eq!(allocs.len(), 3, "3.{minor}");
        for e in &allocs {
            let stack = t.tables.stacks.iter().find(|s| s.id == e.stack);
            let lines: Vec<u32> = stack
                .into_iter()
                .flat_map(|s| &s.frames)
                .filter_map(|id| t.tables.python_frames.iter().find(|f| f.id == *id))
                .map(|f| f.line)
                .collect();
            assert!(
                !lines.is_empty(),
                "3.{minor}: the stack of {e:?} is not in the table"
            );
        }
    }
}

#[test]
fn under_python_stacks_a_library_s_own_driver_calls_are_named_by_the_library_and_the_line() {
    // `python` stacks keep the caller of a driver call (recorder/src/stacks.rs, `names_caller`):
    // enough for summary's `outside_by_library` to name NCCL without `--stacks mixed`.
    let dir = scratch("pyframes-outside-library");
    let lib = dir.join("libnccl.so.2");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(cc)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&lib)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("c/nccl_like.c"))
        .arg("-ldl")
        .status()
        .unwrap();
    assert!(status.success());
    for (python, minor) in interpreters().into_iter().filter(|(_, m)| *m >= 11) {
        let run = dir.join(format!("3{minor}"));
        std::fs::create_dir_all(&run).unwrap();
        let (trace, stdout, _) = record(
            &python,
            "python",
            &run,
            &[
                script("outside_library.py").to_str().unwrap(),
                lib.to_str().unwrap(),
            ],
        );
        let out = command(&artifacts().vramtrace)
            .args(["summary", "--json"])
            .arg(&trace)
            .output()
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let libraries = &json["groups"][0]["outside_by_library"];
        assert_eq!(libraries[0]["library"], "NCCL", "3.{minor}: {libraries}");
        assert_eq!(libraries[0]["peak_bytes"], 3 << 20);
        let (function, line) = sites(&stdout).pop().unwrap();
        let want = format!(
            "{}:{line} {function}",
            script("outside_library.py").display()
        );
        assert_eq!(libraries[0]["site"], want.as_str(), "3.{minor}");
    }
}

#[test]
fn an_autograd_engine_threads_allocations_are_named_by_the_node_it_evaluates() {
    let dir = scratch("pyframes-autograd-lib");
    let lib = dir.join("libtorch_cpu.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(cc)
        .args([
            "-shared",
            "-fPIC",
            "-O1",
            "-Wl,-soname,libtorch_cpu.so",
            "-o",
        ])
        .arg(&lib)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("c/fake_torch_cpu.c"))
        .args(["-ldl", "-lpthread"])
        .status()
        .unwrap();
    assert!(status.success());
    let dir = scratch("pyframes-autograd");
    let args = [script("autograd_node.py"), lib];
    let args: Vec<&str> = args.iter().map(|p| p.to_str().unwrap()).collect();
    let (trace, stdout, stderr) = record(Path::new("python3"), "python", &dir, &args);
    // Every reference to a node the recorder took was given back.
    assert_eq!(
        stdout.lines().filter(|l| *l == "uses 11").count(),
        2,
        "{stdout}\n{stderr}"
    );
    let t = open(&trace);
    let frames: std::collections::HashMap<u32, Vec<String>> = t
        .tables
        .stacks
        .iter()
        .map(|s| {
            // The Python frames only: the caller's native frame that `python` stacks keep for
            // a library's own driver calls is not what this test is about.
            let names = s.frames.iter().filter_map(|id| {
                let f = t.tables.python_frames.iter().find(|f| f.id == *id);
                f.map(|f| format!("{} {}", f.file, f.function))
            });
            (s.id, names.collect())
        })
        .collect();
    let stacks: Vec<(u64, Vec<String>)> = t
        .events()
        .skip(1)
        .map(|e| (e.size, frames.get(&e.stack).cloned().unwrap_or_default()))
        .collect();
    let node = |name: &str| vec![format!("<autograd node> {name}")];
    let mib = 1 << 20;
    assert_eq!(
        stacks,
        [
            (mib, node("MmBackward0")),
            (mib, node("MmBackward0")),
            (2 * mib, node("torch::autograd::AccumulateGrad")),
            (3 * mib, vec![]),
            // A thread of another name: its node is not read.
            (5 * mib, vec![]),
            (5 * mib, vec![]),
            (10 * mib, vec![]),
            (15 * mib, vec![]),
        ],
        "{stderr}"
    );
}
