//! Opening trace files for the commands, with errors that name the file.

use anyhow::{Context, Result};
use std::path::Path;
use vramtrace_format::{EventBatch, ReadOptions, Trace, journal};

/// Maps and decodes `path`; an error names the file and what is wrong with it.
///
/// A crash journal left beside the trace (the recording process was killed before it could
/// finish the file, and no `vramtrace record` launcher was there to merge it) is merged into
/// the file first when its process no longer runs, and the finished trace is read. When the
/// process still runs, or the file cannot be rewritten, the journal's events that the file lacks
/// are added in memory only and the files are left as they are.
pub fn load_trace(path: &Path, salvage: bool) -> Result<Trace> {
    let journal_path = journal::path_for(path);
    let bytes = journal::load(&journal_path).with_context(|| journal_path.display().to_string())?;
    let note = match &bytes {
        Some(b) if !journal::owner_running(b) => match journal::recover(path) {
            Ok(Some(r)) => {
                eprintln!(
                    "vramtrace: {}: merged {} events from its crash journal into the file",
                    path.display(),
                    r.from_journal
                );
                None
            }
            Ok(None) => None,
            Err(e) => Some(format!("the journal could not be merged ({e})")),
        },
        Some(_) => Some("its process still runs".to_string()),
        None => None,
    };
    let mut trace = Trace::open(path, ReadOptions { salvage })
        .with_context(|| format!("{}", path.display()))?;
    let (Some(why), Some(bytes)) = (note, bytes) else {
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
        "{} more events read from the crash journal {} (not merged into the file: {why})",
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
