//! Opening trace files for the commands, with errors that name the file.

use anyhow::{Context, Result, anyhow, bail};
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use vramtrace::job::{Rank, rank_of, ranks};
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
    streams_of(path, &load_trace(path, false)?, capacity)
}

/// The request streams of `trace`, read from `path`.
pub fn streams_of(path: &Path, trace: &Trace, capacity: Option<u64>) -> Result<ReplayInput> {
    ReplayInput::from_trace(trace, capacity)
        .ok_or_else(|| anyhow!("{}: no device-memory allocation to replay", path.display()))
}

/// The `.vramtrace` files directly in `dir`, sorted by name; an error when there is none.
pub fn trace_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).with_context(|| dir.display().to_string())?;
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "vramtrace"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("{}: no .vramtrace file in the directory", dir.display());
    }
    Ok(files)
}

/// One job: every trace of the directory `dir`, each loaded and handed to `analyse` in
/// parallel (one trace in memory per core, only what `analyse` returns kept), in rank order
/// ([`vramtrace::job`] says where ranks come from). `summary`, `replay` and `fit` take a
/// directory through this, and so can every command that analyses a job.
pub fn load_job<R: Send>(
    dir: &Path,
    salvage: bool,
    analyse: impl Fn(&Path, Trace) -> Result<R> + Sync,
) -> Result<Vec<Rank<R>>> {
    let loaded = trace_files(dir)?
        .into_par_iter()
        .map(|path| {
            let trace = load_trace(&path, salvage)?;
            let rank = rank_of(&trace.metadata);
            Ok((path.clone(), analyse(&path, trace)?, rank))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(ranks(loaded))
}
