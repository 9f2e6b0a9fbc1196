//! Opening trace files for the commands, with errors that name the file.

use anyhow::{Context, Result};
use std::path::Path;
use vramtrace::import_snapshot;
use vramtrace_format::{EventBatch, MappedFile, ReadOptions, Trace, journal, pickle};

/// Maps and decodes `path`; an error names the file and what is wrong with it.
///
/// A crash journal left beside the trace (the recording process was killed before it could
/// finish the file, and no `vramtrace record` launcher was there to merge it) is read too, and
/// its events that the file lacks are added in memory. The files are left as they are: the
/// journal may still belong to a running process.
pub fn load_trace(path: &Path, salvage: bool) -> Result<Trace> {
    let mut trace = Trace::open(path, ReadOptions { salvage })
        .with_context(|| format!("{}", path.display()))?;
    let journal_path = journal::path_for(path);
    let Ok(bytes) = std::fs::read(&journal_path) else {
        return Ok(trace);
    };
    let (_, events) =
        journal::read(&bytes).with_context(|| format!("{}", journal_path.display()))?;
    let last = trace.events().map(|e| e.seq).max().unwrap_or(0);
    let mut extra: Vec<_> = events.into_iter().filter(|e| e.seq > last).collect();
    if extra.is_empty() {
        return Ok(trace);
    }
    extra.sort_by_key(|e| e.seq);
    let note = format!(
        "{} more events read from the crash journal {} (not merged into the file)",
        extra.len(),
        journal_path.display()
    );
    trace.layout.complete = false;
    trace.layout.damage = Some(match trace.layout.damage.take() {
        Some(d) => format!("{d}; {note}"),
        None => note,
    });
    trace.batches.push(EventBatch::from_events(&extra));
    Ok(trace)
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
