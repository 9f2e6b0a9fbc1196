//! Opening trace files for the commands, with errors that name the file.

use anyhow::{Context, Result, anyhow};
use std::path::Path;
use vramtrace::interop::import_snapshot;
use vramtrace::replay::ReplayInput;
use vramtrace_format::{MappedFile, ReadOptions, Trace, journal, pickle};

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

/// A `.vramtrace` trace, or a PyTorch memory snapshot pickle imported in memory (nothing is
/// written): what `report` accepts.
pub fn load_trace_or_snapshot(path: &Path) -> Result<Trace> {
    let file = MappedFile::open(path).with_context(|| format!("{}", path.display()))?;
    if file.bytes().starts_with(&vramtrace_format::chunk::MAGIC) {
        drop(file);
        return load_trace(path, false);
    }
    let name = path.display().to_string();
    let doc = pickle::read(file.bytes()).with_context(|| {
        format!("{name}: neither a .vramtrace trace nor a PyTorch memory snapshot")
    })?;
    let imported = import_snapshot::import(&doc, &name).with_context(|| name.clone())?;
    drop(doc);
    let bytes = imported
        .write(Vec::with_capacity(imported.events.len() * 4 + (1 << 16)))
        .with_context(|| name.clone())?;
    Trace::from_bytes(&bytes, ReadOptions::default()).with_context(|| name.clone())
}
