//! Completeness of a trace recorded with the PyTorch tracker against the
//! `torch.cuda.memory_stats()` of the same process (`vramtrace_tests::torch_complete`).
//!
//!     cargo run -p vramtrace-tests --example torch_complete -- TRACE STATS.json
//!
//! Prints one line per figure, `name trace stats equal`. Exits 1 when a figure differs.

use std::path::PathBuf;
use vramtrace_format::{ReadOptions, Trace};
use vramtrace_tests::torch_complete::compare;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [trace, stats] = args.as_slice() else {
        eprintln!("usage: torch_complete TRACE STATS.json");
        std::process::exit(2);
    };
    let trace = Trace::open(&PathBuf::from(trace), ReadOptions::default()).unwrap_or_else(|e| {
        eprintln!("{trace}: {e}");
        std::process::exit(1)
    });
    let stats: serde_json::Value = std::fs::read(stats)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_else(|| {
            eprintln!("{stats}: not a JSON file");
            std::process::exit(1)
        });
    let (rows, private_pool_allocs) = compare(&trace, &stats).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1)
    });
    let mut all = true;
    for (name, got, want) in rows {
        println!("{name} {got} {want} {}", got == want);
        all &= got == want;
    }
    println!("private_pool_allocations {private_pool_allocs}");
    std::process::exit(i32::from(!all));
}
