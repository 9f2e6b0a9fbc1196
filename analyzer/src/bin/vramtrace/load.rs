//! Opening trace files for the commands, with errors that name the file.

use anyhow::{Context, Result, anyhow};
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use vramtrace::interop::import_snapshot;
use vramtrace::job::{Rank, rank_of, ranks};
use vramtrace::model::{Model, ModelBuilder};
use vramtrace::replay::ReplayInput;
use vramtrace::tune::{Recorded, recorded, through_pool};
use vramtrace_format::{
    EventBatch, MappedFile, ReadOptions, Tables, Trace, TraceHead, journal, pickle,
};

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

/// Streams the trace's event batches through `map` (in parallel) and `sink` (in order), holding
/// only a few chunks at a time ([`TraceHead::stream`]); returns the rest of the trace.
///
/// With a crash journal beside the trace the whole trace is read as [`load_trace`] reads it, so
/// the journal's events stream too.
pub fn stream_trace<T: Send>(
    path: &Path,
    salvage: bool,
    map: impl Fn(EventBatch) -> T + Sync,
    mut sink: impl FnMut(T),
) -> Result<TraceHead> {
    if journal::path_for(path).exists() {
        let (head, batches) = load_trace(path, salvage)?.into_parts();
        batches.into_iter().for_each(|b| sink(map(b)));
        return Ok(head);
    }
    let file = MappedFile::open(path).with_context(|| format!("{}", path.display()))?;
    TraceHead::stream(file.bytes(), ReadOptions { salvage }, map, sink)
        .with_context(|| format!("{}", path.display()))
}

/// Streams the trace into its request streams; `capacity` overrides the traced devices'.
pub fn load_streams(path: &Path, capacity: Option<u64>) -> Result<ReplayInput> {
    replay_input(path, capacity)?
        .ok_or_else(|| anyhow!("{}: no device-memory allocation to replay", path.display()))
}

/// Streams the trace into its request streams; `None` when it holds no device-memory
/// allocation to replay.
pub fn replay_input(path: &Path, capacity: Option<u64>) -> Result<Option<ReplayInput>> {
    Ok(replay_input_and_recorded(path, capacity)?.0)
}

/// [`replay_input`], the configuration the trace was recorded with and its tables, in one pass
/// over the events (the decoded trace is never held whole).
pub fn replay_input_and_recorded(
    path: &Path,
    capacity: Option<u64>,
) -> Result<(Option<ReplayInput>, Recorded, Tables)> {
    let mut builder = ModelBuilder::default();
    let mut uses_pool = false;
    let head = stream_trace(
        path,
        false,
        |b| b,
        |b| {
            b.iter().for_each(|e| {
                uses_pool = uses_pool || through_pool(&e);
                builder.push(&e);
            })
        },
    )?;
    let model = builder.finish(&head.metadata);
    let recorded = recorded(&head.metadata, &head.tables, uses_pool);
    let input = ReplayInput::of_model(model, &head.metadata, &head.tables.devices, capacity);
    Ok((input, recorded, head.tables))
}

/// The request streams of `trace`, already loaded from `path`.
pub fn streams_of(path: &Path, trace: &Trace, capacity: Option<u64>) -> Result<ReplayInput> {
    let model = Model::from_events(trace.events(), &trace.metadata);
    ReplayInput::of_model(model, &trace.metadata, &trace.tables.devices, capacity)
        .ok_or_else(|| anyhow!("{}: no device-memory allocation to replay", path.display()))
}

/// The `.vramtrace` files directly in `dir` ([`crate::listing::job_files`]: regular files
/// only, in natural name order); an error when there is none.
pub fn trace_files(dir: &Path) -> Result<Vec<PathBuf>> {
    crate::listing::job_files(dir, &["vramtrace"])
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
    let t = imported.into_trace();
    Ok(t)
}
