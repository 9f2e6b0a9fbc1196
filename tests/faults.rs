//! The recorder's fault matrix: programs that close or replace descriptors, exec themselves,
//! handle their own faults, start many threads or fork trees, or run with few descriptors, and
//! outputs that are not regular files. With and without `vramtrace record` the program's exit
//! status, output and files are identical, and the traces hold every event the program reports.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use vramtrace_format::{Api, journal};
use vramtrace_tests::*;

/// What a run of a program left behind.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    /// The files the program wrote in its working directory, by name.
    files: BTreeMap<String, Vec<u8>>,
}

/// The exit status as a shell reports it: the code, or 128 + the signal.
fn code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

fn files_in(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect()
}

fn run_in(mut cmd: Command, cwd: &Path) -> Run {
    let out = cmd.current_dir(cwd).output().unwrap();
    Run {
        code: code(out.status),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        files: files_in(cwd),
    }
}

/// `faults ARGS` without the recorder.
fn plain(name: &str, args: &[&str]) -> Run {
    let cwd = scratch(&format!("faults-{name}-plain"));
    let mut cmd = command(&artifacts().faults);
    cmd.args(args);
    run_in(cmd, &cwd)
}

/// `vramtrace record -o TRACES/ -- faults ARGS`; returns the run and the trace directory.
fn recorded_run(name: &str, args: &[&str]) -> (Run, PathBuf) {
    let cwd = scratch(&format!("faults-{name}-recorded"));
    let traces = scratch(&format!("faults-{name}-traces"));
    let a = artifacts();
    let mut cmd = command(&a.vramtrace);
    cmd.arg("record")
        .arg("-o")
        .arg(traces.join(""))
        .arg("--")
        .arg(&a.faults)
        .args(args);
    (run_in(cmd, &cwd), traces)
}

/// The lines of `text`; when the program's threads print concurrently (`concurrent`), sorted
/// and without the addresses, which the fake driver hands out in whatever order the threads
/// reach it.
fn lines(text: &str, concurrent: bool) -> Vec<String> {
    let mut v: Vec<String> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            match f[..] {
                [who, "A", _, size] if concurrent => format!("{who} A _ {size}"),
                [who, "F", _] if concurrent => format!("{who} F _"),
                _ => l.to_string(),
            }
        })
        .collect();
    if concurrent {
        v.sort_unstable();
    }
    v
}

/// Allocations (address, size) and frees (address) a program printed, sorted.
fn reported(stdout: &str) -> (Vec<(u64, u64)>, Vec<u64>) {
    let (mut allocs, mut frees) = (Vec::new(), Vec::new());
    for line in stdout.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f[..] {
            [_, "A", addr, size] => allocs.push((addr.parse().unwrap(), size.parse().unwrap())),
            [_, "F", addr] => frees.push(addr.parse().unwrap()),
            _ => {}
        }
    }
    allocs.sort_unstable();
    frees.sort_unstable();
    (allocs, frees)
}

/// The same, from every trace in `dir` (each of which must be complete).
fn traced(dir: &Path) -> (Vec<(u64, u64)>, Vec<u64>) {
    let (mut allocs, mut frees) = (Vec::new(), Vec::new());
    for path in traces_in(dir) {
        for e in open(&path).events().filter(|e| e.succeeded()) {
            match e.api {
                Api::CuMemAlloc_v2 => allocs.push((e.address, e.size)),
                Api::CuMemFree_v2 => frees.push(e.address),
                _ => {}
            }
        }
    }
    allocs.sort_unstable();
    frees.sort_unstable();
    (allocs, frees)
}

/// Runs `faults ARGS` with and without the recorder and checks that the program cannot tell:
/// same exit status, same output (line order aside when `sorted`), same files, its own stderr
/// untouched but for the launcher's report lines, no warning, every reported event traced,
/// no journal left. Returns the trace files.
fn identical(name: &str, args: &[&str], concurrent: bool) -> Vec<PathBuf> {
    let p = plain(name, args);
    let (r, dir) = recorded_run(name, args);
    assert_eq!(p.code, r.code, "exit status\n{}", r.stderr);
    assert!(
        lines(&p.stdout, concurrent) == lines(&r.stdout, concurrent),
        "stdout differs ({} and {} lines)",
        p.stdout.lines().count(),
        r.stdout.lines().count()
    );
    assert_eq!(p.files, r.files, "the program's files");
    let own: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| !l.starts_with("vramtrace: "))
        .collect();
    assert_eq!(
        p.stderr.lines().collect::<Vec<_>>(),
        own,
        "the program's stderr"
    );
    for warning in ["cannot", "no longer recorded", "unreadable", "no trace"] {
        assert!(!r.stderr.contains(warning), "{}", r.stderr);
    }
    let (traced, reported) = (traced(&dir), reported(&r.stdout));
    assert!(
        traced == reported,
        "traced {} allocations and {} frees, the program reported {} and {}\n{}",
        traced.0.len(),
        traced.1.len(),
        reported.0.len(),
        reported.1.len(),
        r.stderr
    );
    assert!(!reported.0.is_empty());
    let traces = traces_in(&dir);
    for t in &traces {
        assert!(
            !journal::path_for(t).exists(),
            "{} kept its journal",
            t.display()
        );
    }
    traces
}

#[test]
fn the_program_gets_the_same_descriptor_numbers_with_the_recorder() {
    assert_eq!(identical("fds", &["fds"], false).len(), 1);
}

#[test]
fn a_program_that_closes_every_descriptor_keeps_its_file_and_its_trace() {
    identical("closefrom", &["closefrom"], false);
}

#[test]
fn a_program_that_puts_its_file_on_the_recorders_descriptor_keeps_it_clean() {
    identical("dup2", &["dup2"], false);
}

#[test]
fn a_process_that_execs_itself_keeps_the_trace_of_each_image() {
    let traces = identical("reexec", &["reexec"], false);
    assert_eq!(traces.len(), 2, "{traces:?}");
    let mut counts: Vec<u64> = traces.iter().map(|t| open(t).event_count()).collect();
    counts.sort_unstable();
    assert_eq!(counts, [6, 8], "{traces:?}");
}

#[test]
fn a_fault_the_program_handles_itself_does_not_end_recording() {
    let traces = identical("segv", &["segv"], false);
    assert_eq!(open(&traces[0]).event_count(), 16);
}

#[test]
fn a_fault_the_programs_handler_gives_up_on_still_finishes_the_trace() {
    let traces = identical("segv-fatal", &["segv_fatal"], false);
    assert_eq!(open(&traces[0]).event_count(), 6);
    // Without the launcher (which would merge a journal), the trace is finished by the
    // recorder itself before the fault kills the process.
    let dir = scratch("faults-segv-fatal-preloaded");
    let out = preloaded(&artifacts().faults, &dir.join("t.vramtrace"))
        .arg("segv_fatal")
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(SIGSEGV));
    assert_eq!(open(&dir.join("t.vramtrace")).event_count(), 6);
    assert!(!journal::path_for(&dir.join("t.vramtrace")).exists());
}

/// SIGSEGV's number on Linux.
const SIGSEGV: i32 = 11;

#[test]
fn sixty_four_threads_lose_no_event() {
    identical("threads", &["threads", "64", "200"], true);
}

#[test]
fn every_process_of_a_fork_tree_writes_its_own_complete_trace() {
    assert_eq!(identical("forktree", &["forktree"], true).len(), 7);
}

#[test]
fn a_low_descriptor_limit_changes_nothing_the_program_sees() {
    identical("lowfd", &["lowfd"], false);
}

/// `vramtrace record -o output -- faults fds` in a fresh working directory named `name`.
fn record_fds(name: &str, output: &Path) -> std::process::Output {
    let a = artifacts();
    command(&a.vramtrace)
        .arg("record")
        .arg("-o")
        .arg(output)
        .arg("--")
        .arg(&a.faults)
        .arg("fds")
        .current_dir(scratch(&format!("faults-{name}-cwd")))
        .output()
        .unwrap()
}

/// `faults fds` preloaded directly, writing to `output`: the run and what it printed.
fn preloaded_to(name: &str, output: &Path) -> Run {
    let cwd = scratch(&format!("faults-{name}-preloaded"));
    let mut cmd = preloaded(&artifacts().faults, output);
    cmd.arg("fds");
    run_in(cmd, &cwd)
}

fn one_warning(r: &Run, what: &str) {
    let warnings: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("vramtrace"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", r.stderr);
    assert!(warnings[0].contains(what), "{}", r.stderr);
    assert!(warnings[0].contains("runs on unrecorded"), "{}", r.stderr);
}

#[test]
fn fifo_device_and_stdout_outputs_are_refused_with_one_warning() {
    let p = plain("fds", &["fds"]);
    let dir = scratch("faults-outputs");
    let fifo = dir.join("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for (name, output, what) in [
        // No reader: opening it for writing used to block the program forever.
        ("fifo", fifo.as_path(), "FIFO"),
        ("null", Path::new("/dev/null"), "a device"),
        // A link to the program's own output (here a pipe).
        ("stdout", Path::new("/dev/stdout"), "symbolic link"),
    ] {
        let r = preloaded_to(name, output);
        assert_eq!((r.code, &r.stdout), (p.code, &p.stdout), "{name}");
        assert_eq!(r.files, p.files, "{name}");
        one_warning(&r, what);
    }
}

#[test]
fn dev_stdout_redirected_to_a_file_keeps_only_the_programs_output() {
    let p = plain("fds", &["fds"]);
    let dir = scratch("faults-stdout-file");
    let file = dir.join("out.txt");
    let mut cmd = preloaded(&artifacts().faults, Path::new("/dev/stdout"));
    let out = cmd
        .arg("fds")
        .current_dir(&dir)
        .stdout(std::fs::File::create(&file).unwrap())
        .output()
        .unwrap();
    assert_eq!(code(out.status), p.code);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), p.stdout);
}

#[test]
fn a_symbolic_link_output_is_never_written_through() {
    let dir = scratch("faults-link");
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "someone else's file\n").unwrap();
    let link = dir.join("link.vramtrace");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    // The launcher refuses before running anything.
    let r = record_fds("link", &link);
    assert_eq!(r.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(stderr.contains("symbolic link"), "{stderr}");
    assert!(r.stdout.is_empty(), "the program did not run");
    // The recorder alone refuses too, with one warning, and the program runs on.
    let p = plain("fds", &["fds"]);
    let r = preloaded_to("link", &link);
    assert_eq!((r.code, &r.stdout), (p.code, &p.stdout));
    one_warning(&r, "symbolic link");
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "someone else's file\n"
    );
}

#[test]
fn an_output_name_without_the_suffix_is_reported_as_a_trace() {
    let dir = scratch("faults-suffix");
    let out = record_fds("suffix", &dir.join("run.bin"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("run.bin: 8 events"), "{stderr}");
    assert!(!stderr.contains("no trace"), "{stderr}");
    assert_eq!(open(&dir.join("run.bin")).event_count(), 8);
}

#[test]
fn a_failed_journal_creation_leaves_no_empty_trace() {
    let dir = scratch("faults-no-journal");
    let trace = dir.join("t.vramtrace");
    // A directory where the journal must go: creating it fails.
    std::fs::create_dir(journal::path_for(&trace)).unwrap();
    let p = plain("fds", &["fds"]);
    let r = preloaded_to("no-journal", &trace);
    assert_eq!((r.code, &r.stdout), (p.code, &p.stdout));
    one_warning(&r, "journal");
    assert!(!trace.exists());
}

/// `vramtrace record -o dir/ -- faults wait GO` started in its own process group; returns
/// once the program printed "ready".
fn start_waiting(dir: &Path, go: &Path) -> std::process::Child {
    let a = artifacts();
    let mut child = command(&a.vramtrace)
        .arg("record")
        .arg("-o")
        .arg(dir.join(""))
        .arg("--")
        .arg(&a.faults)
        .arg("wait")
        .arg(go)
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    while !line.contains("ready") {
        line.clear();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the program ended early"
        );
    }
    // Keep reading the rest in the background so the program never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    child
}

#[test]
fn two_launchers_sharing_an_output_directory_touch_only_their_own_traces() {
    let dir = scratch("faults-shared");
    let go = dir.join("go");
    let long = start_waiting(&dir, &go);
    // The long run's trace is live in the same directory while the short one ends.
    let short = record_fds("shared", &dir.join(""));
    let short_err = String::from_utf8_lossy(&short.stderr).into_owned();
    assert!(short.status.success(), "{short_err}");
    assert_eq!(short_err.lines().count(), 1, "{short_err}");
    std::fs::write(&go, "").unwrap();
    let long = long.wait_with_output().unwrap();
    let long_err = String::from_utf8_lossy(&long.stderr).into_owned();
    assert!(long.status.success(), "{long_err}");
    assert_eq!(long_err.lines().count(), 1, "{long_err}");
    assert!(long_err.contains("12 events (0 failed),"), "{long_err}");
    assert!(!long_err.contains("recovered"), "{long_err}");
    let mut counts: Vec<u64> = traces_in(&dir)
        .iter()
        .map(|t| open(t).event_count())
        .collect();
    counts.sort_unstable();
    assert_eq!(counts, [8, 12]);
}

#[test]
fn ctrl_c_ends_the_program_and_the_launcher_still_merges_its_journal() {
    let dir = scratch("faults-ctrl-c");
    let child = start_waiting(&dir, &dir.join("never"));
    // The terminal sends SIGINT to the whole foreground process group.
    let group = format!("-{}", child.id());
    let killed = Command::new("kill")
        .args(["-INT", "--", &group])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code(out.status), 130, "{stderr}");
    assert!(stderr.contains("6 events (0 failed)"), "{stderr}");
    let traces = traces_in(&dir);
    assert_eq!(traces.len(), 1);
    assert_eq!(open(&traces[0]).event_count(), 6);
    assert!(!journal::path_for(&traces[0]).exists());
}

/// `client LOADER all` with `LD_PRELOAD` set to `libs` in that order (the recorder, when among
/// them, writing `trace`): the run's stderr.
fn client_under(libs: &[&Path], loader: &str, trace: &Path) -> String {
    let a = artifacts();
    let program = if loader == "linked" {
        &a.client_linked
    } else {
        &a.client
    };
    let preload: Vec<String> = libs.iter().map(|l| l.display().to_string()).collect();
    let out = command(program)
        .args([loader, "all"])
        .env("LD_PRELOAD", preload.join(":"))
        .env("VRAMTRACE_OUTPUT", trace)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{loader} {preload:?}\n{stderr}");
    stderr
}

/// The line a test interposer prints at exit (what it saw).
fn interposer_line(stderr: &str, who: &str) -> String {
    stderr
        .lines()
        .find(|l| l.starts_with(who))
        .unwrap_or_else(|| panic!("no {who} line in {stderr}"))
        .to_string()
}

/// With a second interposer preloaded before or after the recorder, each library sees what it
/// sees alone: the interposer's count of lookups and allocations equals its count without the
/// recorder, and the trace holds every call of `client LOADER all` (55 events, 3 failed) with
/// its device (the allocations are made on device 1).
fn coexists_with(interposer: &Path, who: &str) {
    let a = artifacts();
    for loader in ["dlsym", "gpa", "linked"] {
        let dir = scratch(&format!("faults-coexist-{who}-{loader}"));
        let alone = interposer_line(&client_under(&[interposer], loader, &dir.join("x")), who);
        for (order, libs) in [
            ("after", [a.preload.as_path(), interposer]),
            ("before", [interposer, a.preload.as_path()]),
        ] {
            let trace = dir.join(format!("{order}.vramtrace"));
            let stderr = client_under(&libs, loader, &trace);
            assert_eq!(
                interposer_line(&stderr, who),
                alone,
                "{who} {order} vramtrace, loader {loader}"
            );
            assert!(!stderr.contains("vramtrace"), "{stderr}");
            let t = open(&trace);
            let events: Vec<_> = t.events().collect();
            let failed = events.iter().filter(|e| !e.succeeded()).count();
            assert_eq!(
                (events.len(), failed),
                (55, 3),
                "{who} {order}, loader {loader}"
            );
            let allocs: Vec<i32> = events
                .iter()
                .filter(|e| e.api == Api::CuMemAlloc_v2)
                .map(|e| e.device)
                .collect();
            assert_eq!(allocs, [1, 1, 1, 1], "{who} {order}, loader {loader}");
            assert!(
                t.tables.devices.iter().any(|d| d.name == "Fake GPU 1"),
                "{who} {order}, loader {loader}"
            );
        }
    }
}

#[test]
fn a_hami_style_dlsym_wrapper_and_the_recorder_both_see_every_call_in_either_order() {
    coexists_with(&artifacts().hami_like, "hami:");
}

#[test]
fn a_plain_symbol_wrapper_and_the_recorder_both_see_every_call_and_keep_the_devices() {
    coexists_with(&artifacts().plain_wrapper, "plain:");
}

/// `sh -c 'SETUP; exec "$@"' sh ARGS` from the fake driver's environment, in `cwd`: the
/// programs the file-size tests run under a `ulimit -f` (in 512-byte blocks: dash).
fn under_shell(setup: &str, args: &[&Path], cwd: &Path) -> Run {
    under_shell_with(&[], setup, args, cwd)
}

/// [`under_shell`] with the variables `env` set.
fn under_shell_with(env: &[(&str, &str)], setup: &str, args: &[&Path], cwd: &Path) -> Run {
    let mut cmd = command(Path::new("sh"));
    cmd.envs(env.iter().copied())
        .arg("-c")
        .arg(format!("{setup}; exec \"$@\""))
        .arg("sh")
        .args(args);
    run_in(cmd, cwd)
}

#[test]
fn a_file_size_limit_below_the_journal_changes_nothing_the_program_sees_and_says_why() {
    // 2 MiB: the 8 MiB journal's posix_fallocate fails (EFBIG) and raises SIGXFSZ, whose
    // default action used to end the program at its first CUDA call (exit 153).
    let (recorded, plain, traces) = limited("faults-fsize", "ulimit -f 4096", &[], &["fds"]);
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    assert_eq!((recorded.code, &recorded.stdout), (0, &plain.stdout));
    assert_eq!(recorded.files, plain.files);
    says(
        &recorded.stderr,
        &[
            &["runs on unrecorded", "file-size limit"],
            &["no trace was written", "file-size limit"],
        ],
    );
    assert!(traces_in(&traces).is_empty());
}

/// Checks that `stderr` has exactly one line per entry of `lines`, holding each of its words.
fn says(stderr: &str, lines: &[&[&str]]) {
    let got: Vec<&str> = stderr.lines().collect();
    assert_eq!(got.len(), lines.len(), "{stderr}");
    for (line, words) in got.iter().zip(lines) {
        for w in *words {
            assert!(line.contains(w), "{w:?} missing from {line:?}");
        }
    }
}

/// `faults ARGS` under the shell's `setup`, alone and recorded by `vramtrace record` with the
/// variables `env` into a fresh folder: the recorded run, the plain run, and the trace folder.
fn limited(name: &str, setup: &str, env: &[(&str, &str)], args: &[&str]) -> (Run, Run, PathBuf) {
    let a = artifacts();
    let args: Vec<&Path> = args.iter().map(Path::new).collect();
    let plain_args: Vec<&Path> = std::iter::once(a.faults.as_path())
        .chain(args.iter().copied())
        .collect();
    let plain = under_shell(setup, &plain_args, &scratch(&format!("{name}-plain")));
    let traces = scratch(&format!("{name}-traces"));
    let out = traces.join("");
    let mut recorded_args: Vec<&Path> = vec![
        &a.vramtrace,
        Path::new("record"),
        Path::new("-o"),
        &out,
        Path::new("--"),
        &a.faults,
    ];
    recorded_args.extend(args);
    let recorded = under_shell_with(
        env,
        setup,
        &recorded_args,
        &scratch(&format!("{name}-recorded")),
    );
    (recorded, plain, traces)
}

/// `faults threads 1 100000` (200,000 events, a trace of about 750 KB) under `setup`, recorded
/// with a 1,024-slot journal (132 KiB): see [`limited`].
fn past_the_limit(name: &str, setup: &str) -> (Run, Run, PathBuf) {
    limited(
        name,
        setup,
        &[("VRAMTRACE_JOURNAL_SLOTS", "1024")],
        &["threads", "1", "100000"],
    )
}

/// The trace in `dir`, read as far as it goes: its event count.
fn salvaged_events(dir: &Path) -> u64 {
    let traces = traces_in(dir);
    assert_eq!(traces.len(), 1, "{traces:?}");
    vramtrace_format::Trace::open(&traces[0], vramtrace_format::ReadOptions { salvage: true })
        .unwrap()
        .event_count()
}

#[test]
fn a_trace_that_reaches_the_file_size_limit_stops_there_and_the_program_runs_on() {
    // 512 KiB: the journal fits, the trace does not. The program used to die of SIGXFSZ when
    // the trace passed the limit.
    let (recorded, plain, traces) = past_the_limit("faults-fsize-trace", "ulimit -f 1024");
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    assert_eq!(recorded.code, 0, "{}", recorded.stderr);
    assert_eq!(recorded.stdout.lines().count(), 200_000);
    let events = salvaged_events(&traces);
    assert!(events > 0 && events < 200_000, "{events}");
    // The end line: the events kept, and why the trace stops early.
    let kept = format!("{} events", thousands(events));
    says(
        &recorded.stderr,
        &[
            &["no longer recorded", "file-size limit"],
            &[&kept, "incomplete", "file-size limit"],
        ],
    );
}

#[test]
fn the_end_line_of_a_trace_cut_by_a_failed_write_says_it_is_incomplete() {
    // With SIGXFSZ ignored a write past the limit fails with EFBIG, like a write to a full
    // disk fails with ENOSPC: the same path in the recorder.
    let (recorded, _, traces) = past_the_limit("faults-cut", "trap '' XFSZ; ulimit -f 1024");
    assert_eq!(recorded.code, 0, "{}", recorded.stderr);
    let events = salvaged_events(&traces);
    let end = recorded.stderr.lines().last().unwrap_or_default();
    assert!(
        end.contains(&format!("{} events", thousands(events))),
        "{}",
        recorded.stderr
    );
    assert!(
        end.contains("incomplete: recording stopped (cannot write"),
        "{end}"
    );
}

/// `n` as the launcher prints counts (1,234).
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[test]
fn an_existing_file_that_is_not_a_trace_is_refused_and_left_untouched() {
    let dir = scratch("faults-notes");
    let notes = dir.join("notes.txt");
    std::fs::write(&notes, "my notes\n").unwrap();
    let r = record_fds("notes", &notes);
    assert_eq!(r.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("is not a vramtrace trace"), "{stderr}");
    assert!(r.stdout.is_empty(), "the program did not run");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "my notes\n");
    // The recorder alone refuses it too, with one warning, and the program runs on.
    let p = plain("fds", &["fds"]);
    let r = preloaded_to("notes", &notes);
    assert_eq!((r.code, &r.stdout), (p.code, &p.stdout));
    one_warning(&r, "is not a vramtrace trace");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "my notes\n");
}

#[test]
fn an_output_file_whose_folder_cannot_be_written_is_refused_before_the_program_starts() {
    for output in ["/proc/nope/x.vramtrace", "/dev/null/x.vramtrace"] {
        let r = record_fds("unwritable", Path::new(output));
        let stderr = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{output}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("cannot write traces into"), "{stderr}");
        assert!(r.stdout.is_empty(), "{output}: the program did not run");
    }
}

/// True when this machine has a `libcuda.so.1` where the dynamic loader looks without
/// `LD_LIBRARY_PATH` (the `ldconfig` cache or the usual folders).
fn machine_has_a_driver() -> bool {
    let cached = Command::new("ldconfig")
        .arg("-p")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("libcuda.so.1"));
    cached
        || [
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib64",
            "/lib64",
            "/usr/lib",
            "/lib",
        ]
        .iter()
        .any(|d| Path::new(d).join("libcuda.so.1").exists())
}

#[test]
fn a_run_without_a_cuda_driver_is_told_the_driver_is_missing() {
    let a = artifacts();
    let dir = scratch("faults-no-driver");
    // The client dlopens libcuda.so.1 and fails; no folder holds the fake driver.
    let out = command(&a.vramtrace)
        .env("LD_LIBRARY_PATH", &dir)
        .arg("record")
        .arg("-o")
        .arg(dir.join(""))
        .arg("--")
        .arg(&a.client)
        .args(["dlsym", "all"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let named = stderr.contains("the CUDA driver (libcuda.so.1) is not installed");
    assert_eq!(named, !machine_has_a_driver(), "{stderr}");
    assert!(stderr.contains("no trace was written"), "{stderr}");
}

#[test]
fn an_output_folder_removed_while_the_program_runs_keeps_its_trace() {
    let dir = scratch("faults-removed");
    let go = scratch("faults-removed-go").join("go");
    let child = start_waiting(&dir, &go);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&go, "").unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("was removed while process"), "{stderr}");
    assert!(stderr.contains("12 events (0 failed)"), "{stderr}");
    assert!(!stderr.contains("no memory call"), "{stderr}");
    let traces = traces_in(&dir);
    assert_eq!(traces.len(), 1);
    assert_eq!(open(&traces[0]).event_count(), 12);
}

/// The peak resident memory a `faults waves` run printed, in KiB.
fn peak_rss_kib(stderr: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("faults: peak rss "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak rss line in {stderr}"))
}

#[test]
fn a_thousand_short_threads_share_one_stack_and_reuse_the_blocks_of_ended_threads() {
    let a = artifacts();
    // 125 waves of 8 threads, each allocating 4 times from the same code. Each thread used to
    // store the one stack again (1,000 stacks), and the pool of capture blocks grew with every
    // thread started: 421 MB peak resident memory against 17 MB without the recorder, and
    // events without a stack once it was full.
    let args = ["waves", "125", "8", "4"];
    let plain = plain("waves", &args);
    let dir = scratch("faults-waves");
    let trace = dir.join("w.vramtrace");
    let out = preloaded(&a.faults, &trace)
        .env("VRAMTRACE_STACKS", "native")
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("without a stack"), "{stderr}");
    let recorder_kib = peak_rss_kib(&stderr).saturating_sub(peak_rss_kib(&plain.stderr));
    assert!(
        recorder_kib < 64 << 10,
        "the recorder took {recorder_kib} KiB"
    );
    let t = open(&trace);
    assert_eq!(t.tables.threads.len(), 1000);
    let allocs: Vec<_> = t.events().filter(|e| e.api == Api::CuMemAlloc_v2).collect();
    assert_eq!(allocs.len(), 4000);
    assert!(allocs.iter().all(|e| e.stack != 0));
    // Threads that meet the new stack at the same moment may each add it before one of them
    // publishes it (the process-wide table is lock-free): at most one copy per thread of the
    // first wave, never one per thread started. Every copy names the same frames.
    let stacks = &t.tables.stacks;
    assert!(
        (1..=8).contains(&stacks.len()),
        "{} stacks for one line of code",
        stacks.len()
    );
    assert!(stacks.iter().all(|s| s.frames == stacks[0].frames));
}

/// `faults wait NEVER` under the preload alone (no launcher to merge), killed with `SIGKILL`
/// once it printed "ready": the trace and the crash journal a killed recording leaves.
fn killed_recording(name: &str) -> PathBuf {
    let dir = scratch(&format!("faults-{name}"));
    let trace = dir.join("t.vramtrace");
    let mut child = preloaded(&artifacts().faults, &trace)
        .arg("wait")
        .arg(dir.join("never"))
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("ready") {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "ended early");
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(journal::path_for(&trace).exists());
    trace
}

/// `vramtrace ARGS`: the exit code, stdout and stderr.
fn vramtrace_read(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let out = command(&artifacts().vramtrace).args(args).output().unwrap();
    (
        code(out.status),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn reading_a_killed_recording_changes_neither_file_whatever_the_trace_holds() {
    let trace = killed_recording("read-killed");
    let journal_path = journal::path_for(&trace);
    let journal_bytes = std::fs::read(&journal_path).unwrap();
    let original = std::fs::read(&trace).unwrap();
    assert!(original.len() >= 16, "{} bytes", original.len());
    // The oracle: what the file holds and what the journal adds after its last seq.
    let in_file: Vec<u64> = vramtrace_format::Trace::from_bytes(&original, Default::default())
        .map(|t| t.events().map(|e| e.seq).collect())
        .unwrap_or_default();
    let last = in_file.iter().copied().max().unwrap_or(0);
    let (_, in_journal) = journal::read(&journal_bytes).unwrap();
    let added = in_journal.iter().filter(|e| e.seq > last).count();
    assert!(added > 0, "the kill left events in the journal only");
    let t = trace.as_os_str();
    for round in 0..2 {
        let (code, stdout, stderr) = vramtrace_read(&["info".as_ref(), "--json".as_ref(), t]);
        assert_eq!(code, 0, "round {round}: {stderr}");
        let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(v["events"], in_file.len() + added, "round {round}");
        assert_eq!(v["complete"], false);
        assert!(stderr.contains("neither file was changed"), "{stderr}");
        assert_eq!(std::fs::read(&trace).unwrap(), original);
        assert_eq!(std::fs::read(&journal_path).unwrap(), journal_bytes);
    }
    // A newer format version (valid header checksum), then one flipped header bit.
    let mut newer = original.clone();
    newer[8..10].copy_from_slice(&99u16.to_le_bytes());
    let crc = vramtrace_format::codec::checksum(&newer[0..12]);
    newer[12..16].copy_from_slice(&crc.to_le_bytes());
    let mut flipped = original.clone();
    flipped[9] ^= 0x40;
    for (bytes, error) in [
        (newer, "format version 99 is newer"),
        (flipped, "file header checksum mismatch"),
    ] {
        std::fs::write(&trace, &bytes).unwrap();
        for command in ["info", "summary"] {
            let (code, _, stderr) = vramtrace_read(&[command.as_ref(), t]);
            assert_eq!(code, 1, "{command}: {stderr}");
            assert!(
                stderr.contains(error) && stderr.contains("is left as it is"),
                "{command}: {stderr}"
            );
            assert_eq!(std::fs::read(&trace).unwrap(), bytes, "{command}");
            assert_eq!(std::fs::read(&journal_path).unwrap(), journal_bytes);
        }
    }
}
