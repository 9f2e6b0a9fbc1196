//! End-to-end: unmodified clients reach a fake driver every way real programs do; the recorder
//! must catch every call, with the right values, in one trace per process, whatever happens to
//! the process.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use vramtrace_format::{Api, Event, journal};
use vramtrace_tests::*;

/// What `client LOADER all` calls, per exported name; `ptsz` for the cudart-style loader, which
/// resolves stream-ordered calls with flag 2.
fn expected_all(ptsz: bool) -> BTreeMap<String, usize> {
    let s = |name: &str| {
        if ptsz {
            format!("{name}_ptsz")
        } else {
            name.to_string()
        }
    };
    let mut m: BTreeMap<String, usize> = [
        ("cuMemAlloc_v2", 4),
        ("cuMemAllocPitch_v2", 1),
        ("cuMemAllocManaged", 1),
        ("cuMemFree_v2", 6),
        ("cuMemPoolCreate", 1),
        ("cuMemPoolTrimTo", 1),
        ("cuMemPoolDestroy", 1),
        ("cuMemPoolImportPointer", 1),
        ("cuMemAddressReserve", 1),
        ("cuMemCreate", 3),
        ("cuMemMap", 2),
        ("cuMemUnmap", 1),
        ("cuMemRelease", 2),
        ("cuMemAddressFree", 1),
        ("cuMemImportFromShareableHandle", 1),
        ("cuMemRetainAllocationHandle", 1),
        ("cuMulticastCreate", 1),
        ("cuMemAllocHost_v2", 1),
        ("cuMemHostAlloc", 1),
        ("cuMemFreeHost", 2),
        ("cuMemHostRegister_v2", 1),
        ("cuMemHostUnregister", 1),
        ("cuArrayCreate_v2", 1),
        ("cuArray3DCreate_v2", 1),
        ("cuMipmappedArrayCreate", 1),
        ("cuArrayDestroy", 2),
        ("cuMipmappedArrayDestroy", 1),
        ("cuIpcOpenMemHandle_v2", 1),
        ("cuIpcCloseMemHandle", 1),
        ("cuExternalMemoryGetMappedBuffer", 1),
        ("cuDestroyExternalMemory", 1),
        ("cuGraphAddMemAllocNode", 1),
        ("cuGraphAddMemFreeNode", 1),
        ("cuDeviceGraphMemTrim", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    m.insert(s("cuMemAllocAsync"), 2);
    m.insert(s("cuMemAllocFromPoolAsync"), 1);
    m.insert(s("cuMemFreeAsync"), 3);
    m.insert(s("cuMemMapArrayAsync"), 1);
    m
}

fn of(events: &[Event], api: Api) -> Vec<Event> {
    events.iter().filter(|e| e.api == api).copied().collect()
}

fn check_all(loader: &str) {
    let a = artifacts();
    let dir = scratch(&format!("all-{loader}"));
    let program = if loader == "linked" {
        &a.client_linked
    } else {
        &a.client
    };
    let out = recorded(&dir.join(""), program, &[loader, "all"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("pitch 1024"),
        "the program's stdout is untouched"
    );
    let traces = traces_in(&dir);
    assert_eq!(traces.len(), 1, "{traces:?}");
    assert!(stderr.contains("55 events (3 failed)"), "{stderr}");
    let trace = open(&traces[0]);
    let events: Vec<Event> = trace.events().collect();
    assert_eq!(
        counts(&events),
        expected_all(loader == "gpa"),
        "loader {loader}"
    );

    let pid = printed_pid(&out.stdout);
    assert!(events.iter().all(|e| e.pid == pid));
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=55).collect::<Vec<u64>>());

    let allocs = of(&events, Api::CuMemAlloc_v2);
    let sizes: Vec<u64> = allocs.iter().map(|e| e.size).collect();
    assert_eq!(sizes, [1000, 2 << 20, 3, 0]);
    assert_eq!(allocs[3].result, 1, "the zero-byte allocation failed");
    assert!(allocs[..3].iter().all(|e| e.succeeded() && e.address != 0));
    assert!(allocs.iter().all(|e| e.device == 1), "context of device 1");

    let pitch = of(&events, Api::CuMemAllocPitch_v2)[0];
    assert_eq!((pitch.size, pitch.aux, pitch.flags), (10240, 1024, 4));

    let frees = of(&events, Api::CuMemFree_v2);
    let freed: HashSet<u64> = frees
        .iter()
        .filter(|e| e.succeeded())
        .map(|e| e.address)
        .collect();
    assert!(allocs[..3].iter().all(|e| freed.contains(&e.address)));
    assert!(frees.iter().any(|e| e.address == 0x1234 && e.result == 1));

    let managed = of(&events, Api::CuMemAllocManaged)[0];
    assert_eq!((managed.size, managed.flags), (4096, 1));

    let (alloc_async, from_pool) = if loader == "gpa" {
        (Api::CuMemAllocAsync_ptsz, Api::CuMemAllocFromPoolAsync_ptsz)
    } else {
        (Api::CuMemAllocAsync, Api::CuMemAllocFromPoolAsync)
    };
    let asyncs = of(&events, alloc_async);
    assert_eq!(
        asyncs.iter().map(|e| e.size).collect::<Vec<_>>(),
        [512, 1 << 20]
    );
    assert!(asyncs.iter().all(|e| e.stream == 0x5007));
    let created = of(&events, Api::CuMemPoolCreate)[0];
    let pooled = of(&events, from_pool)[0];
    assert_eq!((pooled.size, pooled.stream), (777, 0x5008));
    assert!(pooled.pool != 0 && pooled.pool == created.pool);
    assert_eq!(of(&events, Api::CuMemPoolTrimTo)[0].aux, 4096);

    let creates = of(&events, Api::CuMemCreate);
    assert_eq!(creates.iter().filter(|e| e.succeeded()).count(), 2);
    assert!(creates.iter().all(|e| e.size == 2 << 20 && e.device == 1));
    assert_eq!(
        creates[0].flags & 0xffff,
        0x0101,
        "pinned type on a device location"
    );
    let reserve = of(&events, Api::CuMemAddressReserve)[0];
    assert_eq!(reserve.size, 64 << 20);
    let maps = of(&events, Api::CuMemMap);
    assert_eq!(maps[0].address, reserve.address);
    assert_eq!(maps[1].address, reserve.address + (2 << 20));
    assert_eq!(maps[0].handle, creates[0].handle);
    assert_eq!(of(&events, Api::CuMemUnmap)[0].size, 4 << 20);

    let host: Vec<u64> = of(&events, Api::CuMemHostAlloc)
        .iter()
        .map(|e| e.size)
        .collect();
    assert_eq!(host, [200]);
    assert!(
        of(&events, Api::CuMemHostAlloc)
            .iter()
            .all(|e| e.device == -1)
    );
    assert_eq!(of(&events, Api::CuArrayCreate_v2)[0].size, 64 * 32 * 4 * 4);
    assert_eq!(of(&events, Api::CuArray3DCreate_v2)[0].size, 16 * 16 * 16);
    let ext = of(&events, Api::CuExternalMemoryGetMappedBuffer)[0];
    assert_eq!((ext.size, ext.aux, ext.handle), (65536, 4096, 0xeee));
    let node = of(&events, Api::CuGraphAddMemAllocNode)[0];
    assert_eq!(
        (node.size, node.address, node.aux),
        (3 << 20, 0x6c00_0000_0000, 0x9a)
    );
    assert_eq!(
        of(&events, Api::CuIpcOpenMemHandle_v2)[0].address,
        0x6f00_0000_0009
    );

    let streams: HashSet<u64> = trace.tables.streams.iter().map(|s| s.handle).collect();
    assert!(streams.contains(&0x5007) && streams.contains(&0x5008) && streams.contains(&0x5009));
    // Every stream an event names is in the table, also one first seen right after a call on
    // the same thread with the same values that takes no stream.
    for e in events.iter().filter(|e| e.stream != 0) {
        assert!(streams.contains(&e.stream), "{e:?}");
    }
    let pools: HashSet<u64> = trace.tables.pools.iter().map(|p| p.handle).collect();
    assert!(pools.contains(&created.pool));
    let device = trace
        .tables
        .devices
        .iter()
        .find(|d| d.ordinal == 1)
        .expect("device 1");
    assert_eq!(device.name, "Fake GPU 1");
    assert_eq!(
        (device.total_memory, device.compute_capability),
        (1 << 40, (9, 0))
    );
    assert_eq!(device.uuid, [0xa1; 16]);
    assert_eq!(trace.metadata.driver_version, 13000);
    assert_eq!(trace.tables.processes.len(), 1);
    assert_eq!(trace.tables.processes[0].pid, pid);
}

#[test]
fn every_api_is_recorded_exactly_for_a_program_linked_with_lcuda() {
    check_all("linked");
}

#[test]
fn every_api_is_recorded_exactly_through_dlsym_of_versioned_names() {
    check_all("dlsym");
}

#[test]
fn every_api_is_recorded_exactly_through_cu_get_proc_address_with_flags_0_and_2() {
    check_all("gpa");
}

#[test]
fn every_api_is_recorded_exactly_through_the_name_libcuda_so() {
    check_all("numba");
}

#[test]
fn sixteen_threads_of_ten_thousand_events_keep_their_threads_streams_and_order() {
    let a = artifacts();
    let dir = scratch("threads");
    let out = recorded(
        &dir.join("t.vramtrace"),
        &a.client,
        &["gpa", "threads", "16", "5000"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trace = open(&dir.join("t.vramtrace"));
    let events: Vec<Event> = trace.events().collect();
    assert_eq!(events.len(), 160_000);
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=160_000).collect::<Vec<u64>>());
    let mut per_thread: HashMap<u32, Vec<Event>> = HashMap::new();
    for e in &events {
        per_thread.entry(e.tid).or_default().push(*e);
    }
    assert_eq!(per_thread.len(), 16);
    let mut streams = HashSet::new();
    for evs in per_thread.values() {
        assert_eq!(evs.len(), 10_000);
        let stream = evs[0].stream;
        assert!(streams.insert(stream), "each thread has its own stream");
        for pair in evs.chunks(2) {
            assert_eq!(pair[0].api, Api::CuMemAllocAsync_ptsz);
            assert_eq!(pair[1].api, Api::CuMemFreeAsync_ptsz);
            assert_eq!(pair[0].address, pair[1].address);
            assert_eq!(pair[0].size, 256 + (stream - 0x5000));
            assert!(pair[0].stream == stream && pair[1].stream == stream);
        }
    }
    assert_eq!(trace.tables.threads.len(), 16);
}

#[test]
fn a_fork_child_without_exec_writes_its_own_trace_and_the_parent_goes_on() {
    let a = artifacts();
    let dir = scratch("fork");
    let out = recorded(&dir.join(""), &a.client, &["dlsym", "fork"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parent = printed_pid(&out.stdout);
    let text = String::from_utf8_lossy(&out.stdout);
    let child: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("child "))
        .and_then(|p| p.parse().ok())
        .expect("child pid");
    let traces = traces_in(&dir);
    assert_eq!(traces.len(), 2, "{traces:?}");
    for path in traces {
        let events: Vec<Event> = open(&path).events().collect();
        let pid = events[0].pid;
        assert!(events.iter().all(|e| e.pid == pid));
        let sizes: Vec<u64> = of(&events, Api::CuMemAlloc_v2)
            .iter()
            .map(|e| e.size)
            .collect();
        if pid == parent {
            assert_eq!(sizes, [100, 100, 100, 300, 300]);
        } else {
            assert_eq!(pid, child);
            assert_eq!(sizes, [200; 5]);
            assert_eq!(events[0].seq, 1, "the child numbers its own events");
        }
        assert_eq!(events.len(), 2 * sizes.len());
    }
}

#[test]
fn an_exec_child_writes_its_own_trace_named_with_its_pid() {
    let a = artifacts();
    let dir = scratch("forkexec");
    let client = a.client.to_str().unwrap();
    let out = recorded(
        &dir.join("run.vramtrace"),
        &a.client,
        &["gpa", "forkexec", client],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let child: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("child "))
        .and_then(|p| p.parse().ok())
        .expect("child pid");
    let parent = open(&dir.join("run.vramtrace"));
    assert_eq!(parent.event_count(), 10);
    let exec = open(&dir.join(format!("run-{child}.vramtrace")));
    let events: Vec<Event> = exec.events().collect();
    assert_eq!(counts(&events), expected_all(true));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches(" events (").count(), 2, "{stderr}");
}

#[test]
fn out_of_memory_and_other_failed_calls_are_recorded_with_their_result() {
    let a = artifacts();
    let dir = scratch("oom");
    let out = preloaded(&a.client, &dir.join("oom.vramtrace"))
        .env("FAKECUDA_CAPACITY", (64u64 << 20).to_string())
        .args(["numba", "oom"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("allocated 64 then 2"));
    let events: Vec<Event> = open(&dir.join("oom.vramtrace")).events().collect();
    assert_eq!(events.len(), 65);
    assert!(
        events[..64]
            .iter()
            .all(|e| e.succeeded() && e.size == 1 << 20)
    );
    assert_eq!((events[64].result, events[64].address), (2, 0));
}

#[test]
fn sigkill_at_random_points_loses_no_event_whose_call_returned() {
    let a = artifacts();
    let dir = scratch("sigkill");
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut from_journal = 0;
    for round in 0..4 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let lines_before_kill = 1 + (seed >> 33) % 60_000;
        let path = dir.join(format!("kill-{round}.vramtrace"));
        let mut child = preloaded(&a.client, &path)
            .args(["gpa", "kill"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let mut lines = Vec::new();
        let mut line = String::new();
        while (lines.len() as u64) < lines_before_kill {
            line.clear();
            assert!(
                reader.read_line(&mut line).unwrap() > 0,
                "client ended early"
            );
            lines.push(line.trim_end().to_string());
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // Lines written before the kill may still sit in the pipe: they count too.
        for l in reader.lines() {
            lines.push(l.unwrap());
        }
        let merged = journal::recover(&path).unwrap();
        let merged = merged.expect("a killed process leaves its journal");
        from_journal += merged.from_journal;
        let events: Vec<Event> = open(&path).events().collect();
        let allocs: HashSet<(u64, u64)> = of(&events, Api::CuMemAlloc_v2)
            .iter()
            .map(|e| (e.address, e.size))
            .collect();
        let frees: HashSet<u64> = of(&events, Api::CuMemFree_v2)
            .iter()
            .map(|e| e.address)
            .collect();
        let mut checked = 0;
        for l in &lines {
            let f: Vec<&str> = l.split(' ').collect();
            match f[0] {
                "A" => {
                    let key = (f[1].parse().unwrap(), f[2].parse().unwrap());
                    assert!(
                        allocs.contains(&key),
                        "seed {seed}: returned {l:?} is missing"
                    );
                    checked += 1;
                }
                "F" => {
                    assert!(
                        frees.contains(&f[1].parse().unwrap()),
                        "seed {seed}: returned {l:?} is missing"
                    );
                    checked += 1;
                }
                _ => {}
            }
        }
        assert!(checked as u64 >= lines_before_kill - 1);
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert!(
            seqs.windows(2).all(|w| w[1] == w[0] + 1),
            "no gaps, no duplicates"
        );
    }
    assert!(
        from_journal > 0,
        "the kills landed between flushes at least once"
    );
}

#[test]
fn abort_finalizes_the_trace() {
    let a = artifacts();
    let dir = scratch("abort");
    let path = dir.join("abort.vramtrace");
    let status = preloaded(&a.client, &path)
        .args(["dlsym", "abort"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success());
    assert!(
        !journal::path_for(&path).exists(),
        "finalized: no journal left"
    );
    assert_eq!(open(&path).event_count(), 6);
}

#[test]
fn an_unwritable_output_gives_one_warning_and_the_program_runs_on() {
    let a = artifacts();
    // Not even root can create a directory under a character device.
    let out = preloaded(&a.client, std::path::Path::new("/dev/null/traces/"))
        .args(["gpa", "all"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("pitch 1024"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("vramtrace:").count(), 1, "{stderr}");
    assert!(stderr.contains("runs on unrecorded"), "{stderr}");
}

#[test]
fn tools_that_only_inherit_the_preload_create_no_file() {
    let a = artifacts();
    let dir = scratch("inherit");
    let out = recorded(
        &dir.join(""),
        std::path::Path::new("sh"),
        &["-c", "ls / >/dev/null; exit 7"],
    );
    assert_eq!(
        out.status.code(),
        Some(7),
        "the program's exit status comes back"
    );
    assert!(traces_in(&dir).is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("none looked up a CUDA driver function"),
        "{stderr}"
    );
    let _ = a;
}

#[test]
fn the_device_comes_from_the_current_context_even_when_cudart_set_it_privately() {
    let a = artifacts();
    for loader in ["gpa", "dlsym"] {
        let dir = scratch(&format!("private-{loader}"));
        let out = preloaded(&a.client, &dir.join("p.vramtrace"))
            .args([loader, "private"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let events: Vec<Event> = open(&dir.join("p.vramtrace")).events().collect();
        let alloc = of(&events, Api::CuMemAlloc_v2)[0];
        assert_eq!((alloc.size, alloc.device), (12345, 0), "loader {loader}");
    }
}

#[test]
fn a_process_that_makes_no_memory_call_leaves_no_trace() {
    let a = artifacts();
    let dir = scratch("no-memory-call");
    // Resolves every function, calls cuInit and sets a context, allocates nothing.
    let out = recorded(&dir.join(""), &a.client, &["gpa", "threads", "0", "0"]);
    assert!(out.status.success());
    assert!(traces_in(&dir).is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("made no memory call"), "{stderr}");
}

#[test]
fn rtld_next_lookups_keep_the_callers_identity() {
    let a = artifacts();
    let dir = scratch("rtld-next");
    let out = preloaded(&a.rtld_next, &dir).output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "finds itself: 0\n");
    assert!(traces_in(&dir).is_empty());
}

#[test]
fn a_process_ending_in_underscore_exit_finishes_its_trace_with_every_stack() {
    let a = artifacts();
    let dir = scratch("underscore-exit");
    let out = recorded(&dir.join(""), &a.client, &["gpa", "exit"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("recovered"), "{stderr}");
    let traces = traces_in(&dir);
    assert_eq!(traces.len(), 1);
    assert!(!journal::path_for(&traces[0]).exists());
    let t = open(&traces[0]);
    assert!(t.layout.complete);
    let events: Vec<Event> = t.events().collect();
    let allocs: Vec<&Event> = events
        .iter()
        .filter(|e| e.api == Api::CuMemAlloc_v2)
        .collect();
    assert_eq!(allocs.len(), 3);
    let stacks: HashSet<u32> = t.tables.stacks.iter().map(|s| s.id).collect();
    for e in allocs {
        assert!(
            stacks.contains(&e.stack),
            "stack {} of {e:?} is not in the table",
            e.stack
        );
    }
}

#[test]
fn the_launcher_merges_the_journal_of_a_child_that_skipped_its_destructors() {
    let a = artifacts();
    let dir = scratch("fork-exit");
    let out = recorded(&dir.join(""), &a.client, &["gpa", "fork_exit"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("10 events (0 failed), 10 recovered from the crash journal"),
        "{stderr}"
    );
    let traces = traces_in(&dir);
    assert_eq!(traces.len(), 2);
    for t in traces {
        assert_eq!(open(&t).event_count(), 10);
        assert!(!journal::path_for(&t).exists());
    }
}

#[test]
fn the_launcher_reports_events_failures_and_peak_device_memory() {
    let a = artifacts();
    let dir = scratch("report");
    let out = recorded(&dir.join(""), &a.client, &["numba", "all"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // 1000 + 2 MiB + 3 + pitched 10240 live at once, then two 2 MiB VMM allocations on device 1.
    assert!(
        stderr.contains("55 events (3 failed), peak 4.00 MiB live device memory"),
        "{stderr}"
    );
}

#[test]
fn a_full_disk_mid_run_gives_one_warning_and_the_program_runs_on() {
    let a = artifacts();
    let dir = scratch("full-disk");
    let path = dir.join("full.vramtrace");
    // A file size limit stands in for a full disk: writes past it fail (EFBIG) once SIGXFSZ is
    // ignored. The 1,024-slot journal (132 KiB) fits; the trace (about 2 MB) does not.
    let mut cmd = preloaded(std::path::Path::new("sh"), &path);
    cmd.env("VRAMTRACE_JOURNAL_SLOTS", "1024")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 512; exec \"$@\"")
        .arg("sh")
        .arg(&a.client)
        .args(["gpa", "threads", "1", "200000"]);
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ns per call"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("vramtrace:").count(), 1, "{stderr}");
    assert!(stderr.contains("no longer recorded"), "{stderr}");
    // What was written before the failure is still a readable (incomplete) trace.
    let t = vramtrace_format::Trace::open(&path, vramtrace_format::ReadOptions { salvage: true })
        .unwrap();
    assert!(t.event_count() > 0 && t.event_count() < 400_000);
    assert!(!journal::path_for(&path).exists());
}

#[test]
fn threads_that_race_the_start_of_recording_lose_no_event() {
    // Linked with -lcuda: no lookup starts the recorder early; 16 threads' first calls race to
    // start it.
    let a = artifacts();
    let dir = scratch("start-race");
    let out = preloaded(&a.client_linked, &dir.join("race.vramtrace"))
        .args(["linked", "threads", "16", "50"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(open(&dir.join("race.vramtrace")).event_count(), 16 * 100);
}
