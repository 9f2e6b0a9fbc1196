//! Feeds arbitrary bytes to the trace reader, in strict and salvage mode.
//!
//! Run with a nightly toolchain: `cargo install cargo-fuzz && cd formats/fuzz &&
//! cargo +nightly fuzz run reader -- -max_total_time=600`. Seed the corpus with the bundled
//! samples: `mkdir -p corpus/reader && cp ../../samples/traces/*.vramtrace corpus/reader/`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use vramtrace_format::{ReadOptions, Trace};

fuzz_target!(|data: &[u8]| {
    for salvage in [false, true] {
        if let Ok(trace) = Trace::from_bytes(data, ReadOptions { salvage }) {
            // Materializing every event must not panic either.
            let _ = trace.events().map(|e| e.size).fold(0u64, u64::wrapping_add);
        }
    }
});
