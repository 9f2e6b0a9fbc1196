//! End-to-end: the recorder attaches a trace tracker to a PyTorch-shaped caching allocator (a
//! fake `libc10_cuda.so` with 2.11's vtable slots and `TraceEntry` layout, tests/c) and records
//! every entry it reports beside the driver calls; an unknown PyTorch version gets one warning
//! and is recorded from its driver calls alone. The same trace then goes through `info` and
//! `replay`.

use vramtrace_format::conventions::memory_fraction;
use vramtrace_format::conventions::{WITH_FREE_REQUEST, requests_free};
use vramtrace_format::{Api, Event, MemoryKind};
use vramtrace_tests::*;

fn record_fake_torch(name: &str, lib: &std::path::Path) -> (std::process::Output, Vec<Event>) {
    let a = artifacts();
    let dir = scratch(name);
    let lib = lib.to_str().expect("utf-8 path");
    let out = recorded(&dir.join("t.vramtrace"), &a.torch_client, &[lib]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = open(&dir.join("t.vramtrace")).events().collect();
    (out, events)
}

fn tensors(stdout: &[u8]) -> Vec<u64> {
    let s = String::from_utf8_lossy(stdout);
    let line = s
        .lines()
        .find(|l| l.starts_with("tensors "))
        .expect("tensors line");
    line.split_whitespace()
        .skip(1)
        .map(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).expect("hex"))
        .collect()
}

#[test]
fn every_entry_of_pytorchs_allocator_is_recorded_after_the_driver_call_that_made_its_segment() {
    let (out, events) = record_fake_torch("torch-2.11", &artifacts().fake_torch);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("recording PyTorch's segments"), "{stderr}");
    let t = tensors(&out.stdout);
    let names: Vec<&str> = events
        .iter()
        .filter(|e| e.api.kind() != MemoryKind::Limits)
        .map(|e| e.api.name())
        .collect();
    let seg = |n: usize| &names[n..n + 3];
    // cuMemAlloc_v2 attaches the tracker, so its own segment is already seen.
    assert_eq!(
        seg(0),
        ["cuMemAlloc_v2", "torch.segment_alloc", "torch.alloc"]
    );
    assert_eq!(
        seg(3),
        ["cuMemAlloc_v2", "torch.segment_alloc", "torch.alloc"]
    );
    assert_eq!(
        seg(6),
        ["cuMemAlloc_v2", "torch.segment_alloc", "torch.alloc"]
    );
    assert_eq!(&names[9..11], ["cuMemAlloc_v2", "torch.alloc"]);
    let torch = |api: Api| events.iter().filter(move |e| e.api == api);
    let allocs: Vec<&Event> = torch(Api::TorchAlloc).filter(|e| e.succeeded()).collect();
    assert_eq!(allocs.iter().map(|e| e.address).collect::<Vec<_>>(), t);
    assert_eq!(
        allocs
            .iter()
            .map(|e| (e.size, e.stream, e.pool))
            .collect::<Vec<_>>(),
        [(1000, 0, 0), (3 << 20, 0x77, 0), (4096, 0, 1), (512, 0, 0)]
    );
    assert!(allocs.iter().all(|e| e.device == 0 && e.stack != 0));
    let segs: Vec<(u64, u64)> = torch(Api::TorchSegmentAlloc)
        .map(|e| (e.address, e.size))
        .collect();
    let driver: Vec<(u64, u64)> = events
        .iter()
        .filter(|e| e.api == Api::CuMemAlloc_v2 && e.succeeded())
        .map(|e| (e.address, e.size))
        .collect();
    assert_eq!(segs, driver);
    let oom: Vec<&Event> = torch(Api::TorchAlloc).filter(|e| !e.succeeded()).collect();
    assert_eq!(oom.len(), 1);
    assert_eq!((oom[0].result, oom[0].size, oom[0].aux), (2, 1 << 50, 1234));
    assert_eq!(torch(Api::TorchSegmentFree).count(), 3);
    // A free requested and completed in one call is one event; a deferred request is its own,
    // written when the thread's next entry comes (c's request) or at exit (d's).
    let frees: Vec<(Api, u64, bool)> = events
        .iter()
        .filter(|e| matches!(e.api, Api::TorchFreeRequested | Api::TorchFreeCompleted))
        .map(|e| (e.api, e.address, e.flags & WITH_FREE_REQUEST != 0))
        .collect();
    assert_eq!(
        frees,
        [
            (Api::TorchFreeCompleted, t[0], true),
            (Api::TorchFreeRequested, t[1], false),
            (Api::TorchFreeCompleted, t[2], true),
            (Api::TorchFreeCompleted, t[1], false),
            (Api::TorchFreeRequested, t[3], false),
        ]
    );
    assert_eq!(events.iter().filter(|e| requests_free(e)).count(), 4);
    for e in events.iter().filter(|e| requests_free(e)) {
        let alloc = allocs
            .iter()
            .find(|a| a.address == e.address)
            .expect("its alloc");
        assert_eq!(
            (e.size, e.stream, e.device, e.tid, e.stack),
            (alloc.size, alloc.stream, 0, alloc.tid, 0)
        );
    }
    let time = |api: Api, address: u64| {
        torch(api)
            .find(|e| e.address == address)
            .expect("event")
            .time_ns
    };
    // The held request keeps its own time: before the next free's.
    assert!(
        time(Api::TorchFreeRequested, t[1]) <= time(Api::TorchFreeCompleted, t[2])
            && time(Api::TorchFreeCompleted, t[2]) <= time(Api::TorchFreeCompleted, t[1])
    );
    let map: Vec<(Api, u64, u64)> = events
        .iter()
        .filter(|e| matches!(e.api, Api::TorchSegmentMap | Api::TorchSegmentUnmap))
        .map(|e| (e.api, e.address, e.size))
        .collect();
    assert_eq!(
        map,
        [
            (Api::TorchSegmentMap, 0x70_0000_0000, 20 << 20),
            (Api::TorchSegmentUnmap, 0x70_0000_0000, 20 << 20)
        ]
    );
}

#[test]
fn the_device_memory_the_memory_fraction_and_every_empty_cache_are_recorded_where_they_happened() {
    let (out, events) = record_fake_torch("torch-limits", &artifacts().fake_torch);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The wrappers called the allocator's own methods: it saw the last fraction and the release.
    assert!(
        stdout.contains("allocator fraction 0.25 empty_caches 1"),
        "{stdout}"
    );
    const MIB: u64 = 1 << 20;
    let capacity = 1u64 << 40;
    let limits: Vec<(Api, i32, u64, u64, Option<f64>, u64)> = events
        .iter()
        .filter(|e| e.api.kind() == MemoryKind::Limits)
        .map(|e| (e.api, e.device, e.size, e.aux, memory_fraction(e), e.flags))
        .collect();
    let fraction_bits = |f: f64| f.to_bits();
    assert_eq!(
        limits,
        [
            // At the attach, inside the first segment's driver call: 2 MiB taken.
            (Api::DeviceMemory, 0, capacity, capacity - 2 * MIB, None, 0),
            // Set before the first tensor, so read at the attach (flag bit 0).
            (
                Api::TorchSetMemoryFraction,
                0,
                0,
                fraction_bits(0.5),
                Some(0.5),
                1
            ),
            // Right after the refused request: three segments (2 + 4 + 2 MiB) held.
            (Api::DeviceMemory, 0, capacity, capacity - 8 * MIB, None, 0),
            (
                Api::TorchSetMemoryFraction,
                0,
                0,
                fraction_bits(0.25),
                Some(0.25),
                0
            ),
            (Api::TorchEmptyCache, -1, 0, 0, None, 0),
        ]
    );
    let at = |api: Api, nth: usize| {
        events
            .iter()
            .enumerate()
            .filter(|(_, e)| e.api == api)
            .nth(nth)
            .expect("event")
            .0
    };
    let oom = events
        .iter()
        .position(|e| e.api == Api::TorchAlloc && !e.succeeded())
        .expect("the refused request");
    assert_eq!(at(Api::DeviceMemory, 0), 0);
    assert_eq!(at(Api::DeviceMemory, 1), oom + 1);
    assert!(at(Api::TorchSetMemoryFraction, 1) > oom + 1);
    // The release comes after the map and unmap and before the last tensor's segment.
    assert!(at(Api::TorchEmptyCache, 0) > at(Api::TorchSegmentUnmap, 0));
    assert!(at(Api::TorchEmptyCache, 0) < at(Api::TorchSegmentAlloc, 3));
}

#[test]
fn an_unknown_pytorch_version_gets_one_warning_and_its_driver_calls() {
    let (out, events) = record_fake_torch("torch-2.5", &artifacts().fake_torch_unknown);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("PyTorch 2.5.1+cu121 is not a version"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("--requests"), "{stderr}");
    assert!(events.iter().all(|e| !e.api.from_framework()));
    assert_eq!(
        events
            .iter()
            .filter(|e| e.api == Api::CuMemAlloc_v2)
            .count(),
        5
    );
}

#[test]
fn the_tracker_can_be_switched_off() {
    let a = artifacts();
    let dir = scratch("torch-off");
    let mut cmd = command(&a.vramtrace);
    cmd.arg("record")
        .arg("--no-torch-tracker")
        .arg("-o")
        .arg(dir.join("t.vramtrace"))
        .arg("--")
        .arg(&a.torch_client)
        .arg(&a.fake_torch);
    let out = cmd.output().expect("run vramtrace record");
    assert!(out.status.success());
    let events: Vec<Event> = open(&dir.join("t.vramtrace")).events().collect();
    assert!(!events.is_empty());
    assert!(events.iter().all(|e| !e.api.from_framework()));
}

#[test]
fn info_and_replay_read_a_tracker_trace_as_requests_checked_against_its_segments() {
    let a = artifacts();
    let dir = scratch("torch-info-replay");
    let trace = dir.join("t.vramtrace");
    let mut cmd = command(&a.vramtrace);
    cmd.env("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64")
        .arg("record")
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(&a.torch_client)
        .arg(&a.fake_torch);
    assert!(cmd.output().expect("run vramtrace record").status.success());
    let json = |args: &[&str]| -> serde_json::Value {
        let out = command(&a.vramtrace)
            .args(args)
            .arg(&trace)
            .output()
            .expect("run vramtrace");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let info = json(&["info", "--json"]);
    assert_eq!(info["capture_level"], "request");
    assert_eq!(info["allocator"], "pytorch native max_split_size_mb:64");
    // Tensors are the requests, the driver calls what was reserved; nothing counts twice.
    let summary = json(&["summary", "--json"]);
    let group = &summary["groups"][0];
    assert_eq!(group["peak_requested"], 1000 + (3u64 << 20) + 4096);
    assert_eq!(group["peak_reserved"], 8u64 << 20);
    let replay = json(&["replay", "--json", "--policy", "cuda-malloc"]);
    let stream = &replay["streams"][0];
    // The segments PyTorch reported: 2 + 4 + 2 MiB at once, then a 20 MiB mapping alone.
    assert_eq!(stream["recorded_peak_reserved"], 20u64 << 20);
    assert_eq!(stream["allocations"], 4);
    assert_eq!(stream["outside_allocator"]["allocations"], 0);
    let policies = stream["policies"].as_array().expect("rows");
    // The recorded configuration leads, checked against the run; other policies are not.
    assert_eq!(policies[0]["name"], "pytorch:max_split_size_mb=64");
    assert!(policies[0]["error_vs_recorded"].is_f64());
    assert_eq!(policies[1]["name"], "cuda-malloc");
    assert!(policies[1]["error_vs_recorded"].is_null());
}
