//! Opening trace files for the commands, with errors that name the file.

use anyhow::{Context, Result, anyhow};
use std::path::Path;
use vramtrace::replay::ReplayInput;
use vramtrace_format::{ReadOptions, Trace, journal};

/// Maps and decodes `path`; an error names the file and what is wrong with it.
///
/// A crash journal left beside the trace (the recording process was killed before it could
/// finish the file, and no `vramtrace record` launcher was there to merge it) is merged into
/// the file first when its process no longer runs, and the finished trace is read. When the
/// process still runs, or the file cannot be rewritten, the journal's events that the file lacks
/// are added in memory only ([`journal::extend_in_memory`]) and the files are left as they are.
pub fn load_trace(path: &Path, salvage: bool) -> Result<Trace> {
    let journal_path = journal::path_for(path);
    let name = journal_path.display().to_string();
    let bytes = journal::load(&journal_path).with_context(|| name.clone())?;
    let not_merged = match &bytes {
        Some(b) if !journal::owner_running(b) => match journal::recover(path) {
            Ok(r) => {
                if let Some(r) = r {
                    eprintln!(
                        "vramtrace: {}: merged {} events from its crash journal into the file",
                        path.display(),
                        r.from_journal
                    );
                }
                None
            }
            Err(e) => Some(format!("it could not be merged ({e})")),
        },
        Some(_) => Some("its process still runs".to_string()),
        None => None,
    };
    let mut trace = Trace::open(path, ReadOptions { salvage })
        .with_context(|| format!("{}", path.display()))?;
    if let (Some(why), Some(bytes)) = (not_merged, bytes) {
        journal::extend_in_memory(&mut trace, &bytes, &name, &why).with_context(|| name.clone())?;
    }
    Ok(trace)
}

/// Reads the trace and builds its request streams; `capacity` overrides the traced devices'.
pub fn load_streams(path: &Path, capacity: Option<u64>) -> Result<ReplayInput> {
    let trace = load_trace(path, false)?;
    ReplayInput::from_trace(&trace, capacity)
        .ok_or_else(|| anyhow!("{}: no device-memory allocation to replay", path.display()))
}
