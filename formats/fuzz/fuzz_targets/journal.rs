//! Any trace and journal bytes into the launcher's merge (`journal::recover`): it must return,
//! never panic, and never lose what the trace held. When it merges, the new file reads without
//! salvage, is complete and starts with every event the old file read to; when it refuses, both
//! files are byte for byte as they were.
//!
//! The input is a 4-byte little-endian trace length, the trace's bytes, then the journal's. The
//! files live in a directory of `/dev/shm` (the merge syncs its file; memory makes that cheap).
//! Seed corpus (`corpus/journal`): a bundled trace behind its length, followed by a journal laid
//! out as formats/JOURNAL.md says (records that continue the trace's last seq, or that leave a
//! gap, or beside the trace cut in half), and an empty trace with a journal from seq 1.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use vramtrace_format::{Event, ReadOptions, Trace, journal};

fn dir() -> PathBuf {
    let d = PathBuf::from(format!("/dev/shm/vramtrace-fuzz-journal-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fuzz_target!(|data: &[u8]| {
    let Some((len, rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let len = (u32::from_le_bytes(*len) as usize).min(rest.len());
    let (trace_bytes, journal_bytes) = rest.split_at(len);
    let dir = dir();
    let trace = dir.join("t.vramtrace");
    let journal_path = journal::path_for(&trace);
    std::fs::write(&trace, trace_bytes).unwrap();
    std::fs::write(&journal_path, journal_bytes).unwrap();
    let before: Option<Vec<Event>> = Trace::from_bytes(trace_bytes, ReadOptions::default())
        .ok()
        .map(|t| t.events().collect());
    match journal::recover(&trace) {
        Ok(merged) => {
            let merged = merged.expect("a journal was there");
            let after = Trace::open(&trace, ReadOptions::default()).expect("the merge reads");
            assert!(after.layout.complete);
            let after: Vec<Event> = after.events().collect();
            let old = before.unwrap_or_default();
            assert_eq!(merged.from_trace as usize, old.len());
            assert_eq!(after.len(), old.len() + merged.from_journal as usize);
            assert_eq!(&after[..old.len()], &old[..]);
            assert!(!journal_path.exists());
        }
        Err(_) => {
            assert_eq!(std::fs::read(&trace).unwrap(), trace_bytes);
            assert_eq!(std::fs::read(&journal_path).unwrap(), journal_bytes);
        }
    }
    let _ = std::fs::remove_file(&journal_path);
});
