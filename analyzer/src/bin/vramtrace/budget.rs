//! How many events a command decodes from one trace file: a bound per byte of the file, checked
//! on the chunk headers before any chunk is decoded.
//!
//! The format stores a run of regular events in a few bytes (a column that is a progression is
//! two varints, formats/SPEC.md §3.3), and each chunk may declare 4,096 events whatever its size,
//! so an 83 KB file can hold millions of events, and every command holds per event what it
//! analyses. The bound keeps what a command builds within a constant factor of its input
//! (docs/reliability.md, "Bounded on any input", has the figures per command).

use anyhow::{Result, bail};
use std::path::Path;
use vramtrace::units::count;
use vramtrace_format::chunk::ChunkKind;
use vramtrace_format::{Layout, ReadOptions};

/// Events any file may hold whatever its size: one full chunk of the reference writer.
pub const FREE_EVENTS: u64 = 1 << 16;
/// Events per file byte beyond [`FREE_EVENTS`]. A recorded event carries clock readings at
/// nanosecond resolution that no progression describes: the bundled recordings hold 0.01 to
/// 0.42 events per byte, the generated PyTorch-like stream about 0.3.
pub const EVENTS_PER_BYTE: u64 = 1;
/// The environment variable that replaces the bound by a number of events.
pub const OVERRIDE: &str = "VRAMTRACE_MAX_EVENTS";

/// Refuses a trace whose chunks declare more events than its size allows (or than
/// `VRAMTRACE_MAX_EVENTS` when set). A file whose chunks cannot be found passes: the read
/// that follows reports why.
pub fn check(path: &Path, bytes: &[u8], salvage: bool) -> Result<()> {
    let Ok(layout) = Layout::scan(bytes, ReadOptions { salvage }) else {
        return Ok(());
    };
    let declared: u64 = layout
        .chunks
        .iter()
        .filter(|h| h.kind == ChunkKind::Events)
        .map(|h| u64::from(h.event_count))
        .sum();
    let (limit, rule) = match std::env::var(OVERRIDE) {
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(n) => (n, format!("{OVERRIDE}={n}")),
            Err(_) => bail!("{OVERRIDE}={v:?}: not a number of events"),
        },
        Err(_) => {
            let n = FREE_EVENTS + EVENTS_PER_BYTE * bytes.len() as u64;
            let rule = format!(
                "{} + {EVENTS_PER_BYTE} per byte = {}; recordings hold under 0.5 per byte",
                count(FREE_EVENTS),
                count(n)
            );
            (n, rule)
        }
    };
    if declared > limit {
        bail!(
            "{}: declares {} events in {} bytes, more than this reads ({rule}); \
             {OVERRIDE}=N reads up to N events",
            path.display(),
            count(declared),
            count(bytes.len() as u64),
        );
    }
    Ok(())
}
