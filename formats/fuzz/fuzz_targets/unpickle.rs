//! Any bytes into the unpickler: it must return, never panic, and whatever it accepts must
//! survive a write and a second read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramtrace_format::pickle;

fuzz_target!(|data: &[u8]| {
    if let Ok(doc) = pickle::read(data) {
        // Cycles through tuples are refused by the writer; everything else must round-trip.
        if let Ok(bytes) = pickle::write(&doc) {
            let again = pickle::read(&bytes).expect("the writer's output reads back");
            // Only reachable containers are written, so the copy can hold fewer, never more.
            assert!(again.containers() <= doc.containers());
        }
    }
});
