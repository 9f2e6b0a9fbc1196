//! A recorded trace's backward allocations per autograd node beside PyTorch's profiler's count of
//! the same program run in another process (docs/validation.md, R3;
//! samples/workloads/programs/backward_nodes.py writes PROFILE.json).
//!
//!     cargo run -p vramtrace-tests --example backward_nodes -- TRACE PROFILE.json
//!
//! From the trace: every successful `torch.alloc` of a thread named as PyTorch names its
//! autograd engine threads (`pt_autograd_*`), by the node its stack names (the recorder's
//! `<autograd node>` frame, formats/SPEC.md §8), its requested bytes and those bytes rounded as
//! PyTorch's caching allocator rounds a request (`round_size`: 512 at least, else up to a
//! multiple of 512; a block taken whole from a larger free one is larger still), which is what
//! the profiler reports. Prints a Markdown table, one row per node of either side, then the
//! engine threads' allocations that no node names.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use vramtrace_format::conventions::AUTOGRAD_NODE_FILE;
use vramtrace_format::{Api, ReadOptions, Trace};

#[derive(Default)]
struct Row {
    count: u64,
    bytes: u64,
    rounded: u64,
    profiler_count: u64,
    profiler_bytes: u64,
}

fn main() {
    let args: Vec<PathBuf> = std::env::args().skip(1).map(PathBuf::from).collect();
    let [trace, profile] = args.as_slice() else {
        eprintln!("usage: backward_nodes TRACE PROFILE.json");
        std::process::exit(2);
    };
    let t = Trace::open(trace, ReadOptions { salvage: true }).unwrap_or_else(|e| {
        eprintln!("{}: {e}", trace.display());
        std::process::exit(1);
    });
    let node_frames: HashMap<u32, &str> = t
        .tables
        .python_frames
        .iter()
        .filter(|f| f.file == AUTOGRAD_NODE_FILE)
        .map(|f| (f.id, f.function.as_str()))
        .collect();
    let node_of: HashMap<u32, &str> = t
        .tables
        .stacks
        .iter()
        .filter_map(|s| Some((s.id, *node_frames.get(s.frames.first()?)?)))
        .collect();
    let engine: Vec<(u32, u32)> = t
        .tables
        .threads
        .iter()
        .filter(|th| th.name.starts_with("pt_autograd_"))
        .map(|th| (th.pid, th.tid))
        .collect();
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    let (mut unnamed, mut unnamed_bytes) = (0u64, 0u64);
    for e in t.events() {
        if e.api != Api::TorchAlloc || e.result != 0 || !engine.contains(&(e.pid, e.tid)) {
            continue;
        }
        let Some(node) = node_of.get(&e.stack) else {
            unnamed += 1;
            unnamed_bytes += e.size;
            continue;
        };
        let r = rows.entry(node.to_string()).or_default();
        r.count += 1;
        r.bytes += e.size;
        r.rounded += e.size.max(512).div_ceil(512) * 512;
    }
    let text = std::fs::read_to_string(profile).unwrap_or_else(|e| {
        eprintln!("{}: {e}", profile.display());
        std::process::exit(1);
    });
    let json: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        eprintln!("{}: {e}", profile.display());
        std::process::exit(1);
    });
    let nodes = json["nodes"].as_object().cloned().unwrap_or_default();
    for (node, v) in nodes.iter().filter(|(n, _)| !n.is_empty()) {
        let r = rows.entry(node.clone()).or_default();
        r.profiler_count = v["count"].as_u64().unwrap_or(0);
        r.profiler_bytes = v["bytes"].as_u64().unwrap_or(0);
    }
    println!(
        "| node | allocations, vramtrace | allocations, profiler | requested bytes, vramtrace \
         | rounded to 512, vramtrace | block bytes, profiler |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let mut total = Row::default();
    for (node, r) in &rows {
        println!(
            "| `{node}` | {} | {} | {} | {} | {} |",
            r.count, r.profiler_count, r.bytes, r.rounded, r.profiler_bytes
        );
        total.count += r.count;
        total.bytes += r.bytes;
        total.rounded += r.rounded;
        total.profiler_count += r.profiler_count;
        total.profiler_bytes += r.profiler_bytes;
    }
    println!(
        "| all nodes | {} | {} | {} | {} | {} |",
        total.count, total.profiler_count, total.bytes, total.rounded, total.profiler_bytes
    );
    println!(
        "engine-thread allocations no node names: {unnamed} ({unnamed_bytes} B); \
         the profiler's outside any node (every thread): {}",
        nodes
            .get("")
            .map_or(0, |v| v["count"].as_u64().unwrap_or(0))
    );
}
