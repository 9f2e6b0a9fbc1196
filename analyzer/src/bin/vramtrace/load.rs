//! Opening trace files for the commands, with errors that name the file.

use anyhow::{Context, Result, anyhow};
use std::path::Path;
use vramtrace::replay::ReplayInput;
use vramtrace_format::{ReadOptions, Trace, journal};

/// Maps and decodes `path`; an error names the file and what is wrong with it.
///
/// A crash journal left beside the trace (the recording process was killed before it could
/// finish the file, and no `vramtrace record` launcher was there to merge it) is read too, and
/// its events that the file lacks are added in memory ([`journal::extend_in_memory`]).
pub fn load_trace(path: &Path, salvage: bool) -> Result<Trace> {
    let mut trace = Trace::open(path, ReadOptions { salvage })
        .with_context(|| format!("{}", path.display()))?;
    let journal_path = journal::path_for(path);
    let Ok(bytes) = std::fs::read(&journal_path) else {
        return Ok(trace);
    };
    let name = journal_path.display().to_string();
    journal::extend_in_memory(&mut trace, &bytes, &name).with_context(|| name.clone())?;
    Ok(trace)
}

/// Reads the trace and builds its request streams; `capacity` overrides the traced devices'.
pub fn load_streams(path: &Path, capacity: Option<u64>) -> Result<ReplayInput> {
    let trace = load_trace(path, false)?;
    ReplayInput::from_trace(&trace, capacity)
        .ok_or_else(|| anyhow!("{}: no device-memory allocation to replay", path.display()))
}
