//! How often a trace's captures would be answered by the recorder's recent stacks
//! (recorder/src/stacks.rs, `State::recent`: per thread, 16 slots chosen by a stack's first
//! words and its length), replayed from the trace's events in order, so that the saving measured
//! per capture on the development machine can be carried over to a recorded program
//! (recorder/BENCHMARKS.md, "Python stacks, cheaper").
//!
//!     cargo run -p vramtrace-tests --example recent_stacks -- TRACE
//!
//! Prints `events E with_stack S hits H (P%)`. The key here is the stack's first eight frame ids
//! (the recorder's 16 words: eight Python frames) and its length; the trace's frames of one line
//! share one id where the recorder keeps each instruction's word, and the slots' collisions
//! differ: an estimate, not the recorder's own count.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::PathBuf;
use vramtrace_format::{NO_STACK, ReadOptions, Trace};

const SLOTS: usize = 16;

fn main() {
    let Some(path) = std::env::args().nth(1).map(PathBuf::from) else {
        eprintln!("usage: recent_stacks TRACE");
        std::process::exit(2);
    };
    let trace = match Trace::open(&path, ReadOptions { salvage: true }) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            std::process::exit(1);
        }
    };
    let keys: HashMap<u32, u64> = trace
        .tables
        .stacks
        .iter()
        .map(|s| {
            let mut h = DefaultHasher::new();
            (s.frames.iter().take(8).collect::<Vec<_>>(), s.frames.len()).hash(&mut h);
            (s.id, h.finish())
        })
        .collect();
    let mut recent: HashMap<(u32, u32), [(u64, u32); SLOTS]> = HashMap::new();
    let (mut events, mut with_stack, mut hits) = (0u64, 0u64, 0u64);
    for e in trace.events() {
        events += 1;
        let Some(&key) = (e.stack != NO_STACK).then(|| keys.get(&e.stack)).flatten() else {
            continue;
        };
        with_stack += 1;
        let slots = recent.entry((e.pid, e.tid)).or_insert([(0, 0); SLOTS]);
        let slot = (key >> (64 - SLOTS.trailing_zeros())) as usize;
        if slots[slot] == (key, e.stack) {
            hits += 1;
        }
        slots[slot] = (key, e.stack);
    }
    let share = 100.0 * hits as f64 / with_stack.max(1) as f64;
    println!("events {events} with_stack {with_stack} hits {hits} ({share:.1}%)");
}
