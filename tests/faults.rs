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
