//! Opening trace files for the commands, with errors that name the file.

use crate::budget;
use anyhow::{Context, Result, anyhow};
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use vramtrace::backward::{BackwardNamer, name_backward, name_backward_events};
use vramtrace::completeness::Incomplete;
use vramtrace::interop::import_snapshot::{self, Imported};
use vramtrace::job::{Rank, rank_of, ranks};
use vramtrace::limits::{limits_since, reads};
use vramtrace::model::Calls;
use vramtrace::model::{Loader, Model, load};
use vramtrace::policy::PolicySpec;
use vramtrace::replay::{Beside, Limits, ReplayInput, RunResult, prepare};
use vramtrace::report::input::{Events, ReportInput, SummaryFrom};
use vramtrace::tune::{Recorded, model_and_recorded, recorded};
use vramtrace_format::{
    Event, EventBatch, Layout, MappedFile, Metadata, ReadOptions, Tables, Trace, TraceHead,
    journal, pickle,
};

/// Maps and decodes `path`; an error names the file and what is wrong with it.
///
/// A read never writes: a crash journal left beside the trace (its process was killed before
/// it could finish the file, and no `vramtrace record` launcher was there to merge it) adds the
/// events the file lacks in memory only ([`journal::extend_in_memory`]), marks the trace
/// incomplete with a note, and says so in one line on stderr; both files are left as they are.
/// A trace that is missing or empty is read from its journal alone, in memory. A trace that does
/// not read (a newer format version, a damaged header) is an error whatever lies beside it.
///
/// The allocations of autograd's engine threads are named by their `backward()` call
/// ([`name_backward`]), as every command shows them.
pub fn load_trace(path: &Path, salvage: bool) -> Result<Trace> {
    let mut trace = load_unnamed(path, salvage)?;
    name_backward(&mut trace);
    Ok(trace)
}

/// [`load_trace`] before the backward passes are named.
fn load_unnamed(path: &Path, salvage: bool) -> Result<Trace> {
    let journal_path = journal::path_for(path);
    let name = journal_path.display().to_string();
    let Some(bytes) = journal::load(&journal_path).with_context(|| name.clone())? else {
        return open(path, salvage);
    };
    let mut trace = if !std::fs::metadata(path).is_ok_and(|m| m.len() > 0) {
        empty_trace()
    } else {
        open(path, salvage)
            .map_err(|e| anyhow!("{e:#} (its crash journal {name} is left as it is)"))?
    };
    let why = if journal::owner_running(&bytes) {
        "its process still runs"
    } else {
        "a read leaves both files as they are"
    };
    let added =
        journal::extend_in_memory(&mut trace, &bytes, &name, why).with_context(|| name.clone())?;
    if added > 0 {
        eprintln!(
            "vramtrace: {}: {added} more events read from its crash journal {name}, in memory \
             only; neither file was changed",
            path.display()
        );
    }
    Ok(trace)
}

/// Maps and decodes the trace at `path` within the events budget ([`budget::check`]).
fn open(path: &Path, salvage: bool) -> Result<Trace> {
    let file = MappedFile::open(path).with_context(|| format!("{}", path.display()))?;
    budget::check(path, file.bytes(), salvage)?;
    Trace::from_bytes(file.bytes(), ReadOptions { salvage })
        .with_context(|| format!("{}", path.display()))
}

/// The trace of a file that holds nothing yet: what the journal's events are added to when the
/// recorder was killed before writing its first chunk.
fn empty_trace() -> Trace {
    let metadata = vramtrace_format::Metadata {
        writer: "vramtrace journal recovery".into(),
        ..Default::default()
    };
    Trace::in_memory(metadata, Tables::default(), &[])
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
    budget::check(path, file.bytes(), salvage)?;
    TraceHead::stream(file.bytes(), ReadOptions { salvage }, map, sink)
        .with_context(|| format!("{}", path.display()))
}

/// Streams the trace's events, in order, into `each` in blocks of at most [`BLOCK_EVENTS`],
/// named as [`load_trace`] names them (the backward passes, [`BackwardNamer`]); returns the rest
/// of the trace, the backward stacks in its tables.
fn stream_named_blocks(
    path: &Path,
    salvage: bool,
    mut each: impl FnMut(Vec<Event>),
) -> Result<TraceHead> {
    // With a journal the trace is loaded whole, and named, by `stream_trace`. A namer that
    // can name nothing is not run.
    let mut namer = match journal::path_for(path).exists() {
        true => None,
        false => {
            let file = MappedFile::open(path).with_context(|| format!("{}", path.display()))?;
            let head = Trace::header_from_bytes(file.bytes(), ReadOptions { salvage })
                .with_context(|| format!("{}", path.display()))?;
            Some(BackwardNamer::new(&head.tables)).filter(|n| !n.names_nothing())
        }
    };
    let mut head = stream_trace(
        path,
        salvage,
        |b| b,
        |b| {
            for start in (0..b.len()).step_by(BLOCK_EVENTS) {
                let mut block = Vec::with_capacity(BLOCK_EVENTS);
                b.extend_rows(start..b.len().min(start + BLOCK_EVENTS), &mut block);
                if let Some(n) = namer.as_mut() {
                    block.iter_mut().for_each(|e| e.stack = n.stack_of(e));
                }
                each(block);
            }
        },
    )?;
    if let Some(n) = namer {
        n.finish(&mut head.tables);
    }
    Ok(head)
}

/// Streams the trace into its request streams ([`vramtrace::replay::prepare`]) and returns
/// them with the chunks read (whether the file was complete); `capacity` overrides the traced
/// devices' memory and the memory limit the process recorded.
pub fn load_streams_and_layout(
    path: &Path,
    capacity: Option<u64>,
) -> Result<(ReplayInput, Layout)> {
    let (input, _, _, layout) = replay_input_and_recorded(path, capacity)?;
    let input = input
        .ok_or_else(|| anyhow!("{}: no device-memory allocation to replay", path.display()))?;
    Ok((input, layout))
}

/// Streams the trace into its request streams; `None` when it holds no device-memory
/// allocation to replay.
pub fn replay_input(path: &Path, capacity: Option<u64>) -> Result<Option<ReplayInput>> {
    Ok(replay_input_and_recorded(path, capacity)?.0)
}

/// [`replay_input`], the configuration the trace was recorded with, its tables and the chunks
/// read, in one pass over the events (the decoded trace is never held whole).
pub fn replay_input_and_recorded(path: &Path, capacity: Option<u64>) -> Result<ReplayLoad> {
    Ok(replay_input_and_one_replay(path, capacity, None)?.0)
}

/// What [`replay_input_and_recorded`] reads of a trace: its request streams (`None` when it
/// holds no device-memory allocation to replay), the configuration it was recorded with, its
/// tables and the chunks read.
pub type ReplayLoad = (Option<ReplayInput>, Recorded, Tables, Layout);

/// [`replay_input_and_recorded`] with the replay of `spec`, when given, run beside the load
/// ([`Beside`]); its result when the stream it was fed proved to be the finished one (`None`:
/// replay the input).
pub fn replay_input_and_one_replay(
    path: &Path,
    capacity: Option<u64>,
    spec: Option<&PolicySpec>,
) -> Result<(ReplayLoad, Option<RunResult>)> {
    let mut beside = spec.and_then(|s| beside(path, s, capacity));
    let (loader, head) = load_beside(path, Loader::requests_only(), &mut |loader, _| {
        if let Some(b) = beside.as_mut() {
            b.feed(loader.growing());
        }
    })?;
    let (model, table) = loader.finish(&head.metadata);
    let recorded = recorded(&head.metadata, &head.tables, table.calls);
    let input = prepared(model, &recorded, &head.metadata, &head.tables, capacity);
    let run = beside.zip(input.as_ref()).and_then(|(b, i)| b.finish(i));
    Ok(((input, recorded, head.tables, head.layout), run))
}

/// The replay of `spec` beside the load of the trace at `path`, under the limits its header
/// states (the memory fraction as the metadata alone says it: [`Beside::finish`] checks it
/// against the calls); `None` when the header does not read, for the load to say why.
fn beside(path: &Path, spec: &PolicySpec, capacity: Option<u64>) -> Option<Beside> {
    let file = MappedFile::open(path).ok()?;
    let head = Trace::header_from_bytes(file.bytes(), ReadOptions { salvage: false }).ok()?;
    let guessed = recorded(&head.metadata, &head.tables, Calls::default());
    let limits = Limits {
        given: capacity,
        memory_fraction: guessed.memory_fraction,
    };
    Beside::new(spec, &head.tables.devices, limits)
}

/// Events handed from the reading thread to the model's in blocks of this many: large enough
/// that the channel costs little per event, small enough (about 400 KiB) that the blocks in
/// flight add nothing to the memory a replay holds.
const BLOCK_EVENTS: usize = 4096;

/// Blocks in flight between the two threads: room for the reader to run ahead while the model
/// works through a block, so that neither waits on the other's pace from block to block.
const BLOCKS_IN_FLIGHT: usize = 4;

/// [`stream_named_blocks`] into `loader` on a thread of its own: the rows rebuilt from the
/// chunks (decoded as [`stream_trace`] decodes them) and the naming of the backward passes on
/// this thread, the model's pass beside them, so that the two halves of the load share the two
/// cores rather than run one after the other. The events reach `loader` in file order, every
/// one of them; an error of the read is returned as [`stream_named_blocks`] returns it, once
/// the model's thread has stopped.
///
/// `after` is called on the model's thread with `loader` and the block after each block: a
/// stage that reads the model as it grows ([`Beside`]), or the block's events, runs there;
/// `&mut |_, _| {}` for none.
fn load_beside(
    path: &Path,
    loader: Loader,
    after: &mut (dyn FnMut(&Loader, &[Event]) + Send),
) -> Result<(Loader, TraceHead)> {
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Event>>(BLOCKS_IN_FLIGHT);
        let model = scope.spawn(move || {
            let mut loader = loader;
            for block in rx {
                block.iter().for_each(|e| loader.push(e));
                after(&loader, &block);
            }
            loader
        });
        // A send fails only when the model's thread has gone, which it does only by panicking:
        // `join` below carries that panic on.
        let head = stream_named_blocks(path, false, |block| {
            let _ = tx.send(block);
        });
        drop(tx);
        let loader = model
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        Ok((loader, head?))
    })
}

/// The events of the trace at `path` once more, each as the report's load read them (named
/// alike), handed to `each` in file order on this thread: the summary's pass
/// ([`SummaryFrom::Events`]). The reading runs on a thread of its own beside `each`, on a rayon
/// pool of one thread of its own: the report's replays hold the threads of rayon's global pool
/// for seconds at a time, and a decoding queued behind them would hold the summary, and the
/// page, until they end (and a caller on one of them would wait for itself).
fn events_again(path: &Path, each: &mut dyn FnMut(&Event)) -> Result<()> {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Event>>(BLOCKS_IN_FLIGHT);
        let reading = scope.spawn(move || {
            // A send fails only when this thread has stopped taking blocks, which it does only
            // by panicking: the scope carries that panic on.
            pool.install(|| {
                stream_named_blocks(path, false, |block| {
                    let _ = tx.send(block);
                })
            })
        });
        rx.into_iter()
            .for_each(|block| block.iter().for_each(&mut *each));
        reading
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            .map(drop)
    })
}

/// The request streams of `trace`, already loaded from `path`, prepared as
/// [`replay_input_and_recorded`] prepares them.
pub fn streams_of(path: &Path, trace: &Trace, capacity: Option<u64>) -> Result<ReplayInput> {
    let (model, recorded) = model_and_recorded(trace);
    prepared(model, &recorded, &trace.metadata, &trace.tables, capacity)
        .ok_or_else(|| anyhow!("{}: no device-memory allocation to replay", path.display()))
}

/// The replay's set-up of `model`: its devices' memory, unless `capacity` overrides it, and the
/// memory limit the process `recorded`.
fn prepared(
    model: Model,
    recorded: &Recorded,
    metadata: &Metadata,
    tables: &Tables,
    capacity: Option<u64>,
) -> Option<ReplayInput> {
    let limits = Limits {
        given: capacity,
        memory_fraction: recorded.memory_fraction,
    };
    prepare(model, metadata, &tables.devices, limits)
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
            let incomplete = Incomplete::of(&trace.layout);
            Ok((path.clone(), (analyse(&path, trace)?, incomplete), rank))
        })
        .collect::<Result<Vec<_>>>()?;
    // Each incomplete rank is flagged on stderr here, in `--json` by `job::output` and in the
    // text by `job::render`.
    Ok(ranks(loaded)
        .into_iter()
        .map(|r| {
            let (value, incomplete) = r.value;
            if let Some(i) = &incomplete {
                eprintln!(
                    "vramtrace: warning: rank {}: {}",
                    r.rank,
                    i.warning(&r.path.display().to_string())
                );
            }
            Rank {
                value,
                incomplete,
                rank: r.rank,
                rank_known: r.rank_known,
                path: r.path,
            }
        })
        .collect())
}

/// A `.vramtrace` trace, or a PyTorch memory snapshot pickle imported in memory (nothing is
/// written): what `report` accepts; `progress` hears each stage of a snapshot's import as it
/// starts.
pub fn load_trace_or_snapshot(path: &Path, progress: &dyn Fn(&str)) -> Result<Trace> {
    Ok(match snapshot_or_trace(path, progress)? {
        Err(trace) => trace,
        Ok(imported) => imported.into_trace(),
    })
}

/// What the report reads of the trace or snapshot at `path` ([`ReportInput`]): a trace is
/// streamed ([`report_trace`]); a snapshot's model and table are built on a thread of their own
/// from the imported events, beside the trace made of the same events, so that the report's
/// search, which needs the model only, starts sooner.
pub fn report_input(path: &Path, progress: &(dyn Fn(&str) + Sync)) -> Result<ReportInput> {
    if is_trace(path)? {
        progress("reading events");
        return report_trace(path);
    }
    let imported = snapshot(path, progress)?;
    progress("reading events");
    let Imported {
        metadata,
        tables,
        events,
        ..
    } = imported;
    let events = &events;
    let (trace, loader) = std::thread::scope(|scope| {
        let model = scope.spawn(move || {
            let mut loader = Loader::with_rows();
            events.iter().for_each(|e| loader.push(e));
            loader
        });
        let trace = Trace::in_memory(metadata, tables, events);
        let loader = model
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (trace, loader)
    });
    let loaded = loader.finish(&trace.metadata);
    Ok(ReportInput::of(trace, loaded))
}

/// The report's input of the trace at `path`, its decoded events never held whole: the model
/// and the table, without its rows, built beside the decoder ([`load_beside`]), which keeps
/// the few events the limits read ([`reads`]); the summary streams the events once more when
/// the report makes it ([`SummaryFrom::Events`]). A trace with a crash journal beside it is
/// read whole once, as [`load_trace`] reads it (the journal's events are added in memory, and
/// said so once), and its summary reads the table's rows.
fn report_trace(path: &Path) -> Result<ReportInput> {
    if journal::path_for(path).exists() {
        let trace = load_trace(path, false)?;
        let loaded = load(&trace);
        return Ok(ReportInput::of(trace, loaded));
    }
    let mut kept = Vec::new();
    let (loader, head) = load_beside(path, Loader::requests_only(), &mut |_, block| {
        kept.extend(block.iter().filter(|e| reads(e.api, e.result)));
    })?;
    let (model, table) = loader.finish(&head.metadata);
    let path = path.to_path_buf();
    let events: Events =
        Box::new(move |each| events_again(&path, each).map_err(|e| format!("{e:#}")));
    Ok(ReportInput {
        limits: limits_since(table.start_ns, kept),
        head,
        model,
        table,
        summary_from: SummaryFrom::Events(events),
    })
}

/// Whether the file at `path` is a `.vramtrace` trace (by its first chunk's magic).
fn is_trace(path: &Path) -> Result<bool> {
    let file = MappedFile::open(path).with_context(|| format!("{}", path.display()))?;
    Ok(file.bytes().starts_with(&vramtrace_format::chunk::MAGIC))
}

/// The trace at `path` (`Err`), or the PyTorch memory snapshot there imported with its
/// backward passes named (`Ok`), as [`load_trace`] names a trace's.
fn snapshot_or_trace(path: &Path, progress: &dyn Fn(&str)) -> Result<Result<Imported, Trace>> {
    if is_trace(path)? {
        return Ok(Err(load_trace(path, false)?));
    }
    snapshot(path, progress).map(Ok)
}

/// The PyTorch memory snapshot at `path`, imported with its backward passes named.
fn snapshot(path: &Path, progress: &dyn Fn(&str)) -> Result<Imported> {
    let file = MappedFile::open(path).with_context(|| format!("{}", path.display()))?;
    let name = path.display().to_string();
    progress("unpickling the snapshot");
    let doc = pickle::read(file.bytes()).with_context(|| {
        format!("{name}: neither a .vramtrace trace nor a PyTorch memory snapshot")
    })?;
    progress("importing the snapshot");
    let mut imported = import_snapshot::import(&doc, &name).with_context(|| name.clone())?;
    progress("dropping the document, naming the backward passes");
    drop(doc);
    name_backward_events(&mut imported.events, &mut imported.tables);
    Ok(imported)
}
