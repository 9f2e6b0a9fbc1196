//! `vramtrace export --to parquet`: a trace as Apache Parquet tables that DuckDB, Spark,
//! Trino, Polars and pandas read as they are (`docs/fleet.md` documents the schema).
//!
//! Each table is a directory and each trace one file in it (`events/ID.parquet`), the layout
//! Spark, Trino and DuckDB read as one table. A trace's events are streamed: one event chunk is
//! decoded and buffered at a time, and a row group is written once [`ROW_GROUP_ROWS`] rows are
//! buffered, so memory stays bounded whatever the trace's length.
//!
//! Written with parquet's own file and column writers (no Arrow arrays): each table's schema
//! is a Parquet message type ([`schema`]), each column written with its typed column writer.
//!
//! Sans-IO apart from the sinks it is given: the caller opens the files.

mod events;
mod rows;
pub mod schema;
mod symbols;
mod vocabulary;
mod write;

pub use rows::{PolicyResult, TraceRow};

use crate::job;
use crate::model::live::DevicePeak;
use crate::model::{CaptureLevel, LevelFacts, LevelStats, detect_level, pytorch_alloc_conf};
use events::EventColumns;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnPath;
use schema::Table;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::Arc;
use vocabulary::serde_name;
use vramtrace_format::chunk::ChunkKind;
use vramtrace_format::{EventChunks, ReadOptions, Trace};

/// `events` columns written with `DELTA_BINARY_PACKED` and no dictionary.
const DELTA_COLUMNS: [&str; 12] = [
    "seq",
    "ts",
    "dur",
    "pid",
    "device",
    "stream",
    "requested_size",
    "handle",
    "aux",
    "flags",
    "pool",
    "result",
];

/// Rows of `events` buffered before a row group is written (at least this many per row group
/// but the last): one event chunk, 8 MiB of stored values. A quarter of a million rows (32 MiB
/// a core) raised the export's peak memory from 77 to 120 MiB and was slower
/// (analyzer/BENCHMARKS.md, "First build").
pub const ROW_GROUP_ROWS: usize = 1 << 16;

/// The Arrow schema `events` files carry under `ARROW:schema` (base64 of the Arrow IPC schema
/// message, as Arrow's Parquet writers store it): its string columns are dictionaries
/// (`dictionary<values=string, indices=int32>`), which pyarrow, pandas (`category`) and Polars
/// (`Categorical`) read them as. Written by Arrow's `ArrowWriter` for this schema; readers
/// without Arrow ignore it.
const EVENTS_ARROW_SCHEMA: &str = include_str!("events.arrow_schema");

/// The version of the table layout, stored in every file's key-value metadata.
pub const SCHEMA_VERSION: &str = "1";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Trace(#[from] vramtrace_format::Error),
    #[error("writing Parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
}

/// Where each table of one trace goes.
pub struct Sinks<W> {
    pub events: W,
    pub stacks: W,
    pub frames: W,
    pub modules: W,
}

fn properties(sorted_by_seq: bool) -> WriterProperties {
    let zstd = ZstdLevel::try_new(1).expect("zstd level 1 is valid");
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(zstd))
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_created_by(format!("vramtrace {}", env!("CARGO_PKG_VERSION")))
        .set_key_value_metadata(Some(vec![KeyValue::new(
            "vramtrace.schema_version".into(),
            SCHEMA_VERSION.to_string(),
        )]));
    if sorted_by_seq {
        // Dictionary encoding hashes every value; it pays only where values repeat and vary
        // (addresses, sizes, stacks, threads, and the API names). Counters, clocks and the
        // columns that are nearly constant get their differences bit-packed instead (a run of
        // equal values costs almost nothing). The constant trace id stays dictionary encoded
        // (one dictionary entry, its indices a single run): its Arrow type is a dictionary
        // ([`EVENTS_ARROW_SCHEMA`]), and Arrow C++ (pyarrow, pandas) reads a dictionary column only from dictionary
        // pages; from `DELTA_BYTE_ARRAY` pages it fails ("DecodeArrow of DictAccumulator for
        // DeltaByteArrayDecoder" is not implemented).
        for c in DELTA_COLUMNS {
            b = b
                .set_column_dictionary_enabled(ColumnPath::from(c), false)
                .set_column_encoding(ColumnPath::from(c), Encoding::DELTA_BINARY_PACKED);
        }
    }
    b.build()
}

/// A file writer of `table` with `props`.
fn writer<W: Write + Send>(
    sink: W,
    table: &Table,
    props: WriterProperties,
) -> Result<SerializedFileWriter<W>, ParquetError> {
    SerializedFileWriter::new(sink, table.schema.clone(), Arc::new(props))
}

/// Writes one row group of `rows` rows (none when `rows` is 0), its columns written by `fill`.
fn row_group<W: Write + Send>(
    w: &mut SerializedFileWriter<W>,
    rows: usize,
    fill: impl FnOnce(&mut write::RowGroup<'_, W>) -> Result<(), ParquetError>,
) -> Result<(), ParquetError> {
    if rows > 0 {
        let mut g = write::RowGroup(w.next_row_group()?);
        fill(&mut g)?;
        g.0.close()?;
    }
    Ok(())
}

/// Writes one small table of `rows` rows in a single row group.
fn write_table<W: Write + Send>(
    sink: W,
    table: &Table,
    rows: usize,
    fill: impl FnOnce(&mut write::RowGroup<'_, W>) -> Result<(), ParquetError>,
) -> Result<(), Error> {
    let mut w = writer(sink, table, properties(false))?;
    row_group(&mut w, rows, fill)?;
    w.close()?;
    Ok(())
}

/// A stable id for a trace file: FNV-1a (64 bits) of its length and first MiB, which holds its
/// header, metadata, tables and first events (timestamps included), as 16 hex digits.
pub fn trace_id(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let len = (bytes.len() as u64).to_le_bytes();
    for &b in len.iter().chain(&bytes[..bytes.len().min(1 << 20)]) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Streams the trace in `bytes` (the file named `path`) into the `events`, `stacks`, `frames`
/// and `modules` sinks and returns its `traces` row. With `salvage`, a corrupt event chunk ends
/// the events instead of failing (the row says so); a torn last chunk of an unfinished file
/// always does, as when reading it.
pub fn export_trace<W: Write + Send>(
    bytes: &[u8],
    path: &str,
    salvage: bool,
    sinks: Sinks<W>,
) -> Result<TraceRow, Error> {
    let mut trace = Trace::header_from_bytes(bytes, ReadOptions { salvage })?;
    let id = trace_id(bytes);
    let metadata = &trace.metadata;
    let sizes_are_requests =
        detect_level(metadata, &LevelFacts::default()).level == CaptureLevel::Request;
    let mut columns = EventColumns::new(&id, sizes_are_requests);

    let mut writer = writer(sinks.events, schema::events(), properties(true))?;
    writer.append_key_value_metadata(KeyValue::new(
        "ARROW:schema".into(),
        EVENTS_ARROW_SCHEMA.to_string(),
    ));
    let mut stats = Stats::default();
    let event_chunks = trace
        .layout
        .chunks
        .iter()
        .filter(|h| h.kind == ChunkKind::Events)
        .count();
    for (i, batch) in EventChunks::new(bytes, &trace.layout.chunks).enumerate() {
        let batch = match batch {
            Ok(b) => b,
            Err(e) if salvage || (i + 1 == event_chunks && !trace.layout.complete) => {
                trace.layout.complete = false;
                trace.layout.damage = Some(format!("{e}; exported the chunks before it"));
                break;
            }
            Err(e) => return Err(e.into()),
        };
        for e in batch.iter() {
            stats.see(&e);
        }
        columns.push(&batch);
        if columns.len() >= ROW_GROUP_ROWS {
            row_group(&mut writer, columns.len(), |g| columns.write(g))?;
        }
    }
    row_group(&mut writer, columns.len(), |g| columns.write(g))?;
    writer.close()?;

    let t = &trace.tables;
    let frames = t.frames.len() + t.python_frames.len();
    write_table(sinks.stacks, schema::stacks(), t.stacks.len(), |g| {
        symbols::stacks(g, &id, t)
    })?;
    write_table(sinks.frames, schema::frames(), frames, |g| {
        symbols::frames(g, &id, t)
    })?;
    let modules = symbols::real_modules(t);
    write_table(sinks.modules, schema::modules(), modules.len(), |g| {
        symbols::modules(g, &id, &modules)
    })?;
    Ok(stats.row(id, path, &trace))
}

/// What the `traces` row needs from the events, gathered while streaming them.
#[derive(Default)]
struct Stats {
    events: u64,
    failed: u64,
    tids: BTreeSet<u32>,
    pids: BTreeSet<u32>,
    last_thread: Option<(u32, u32)>,
    first: Option<u64>,
    last: u64,
    level: LevelStats,
    peak: DevicePeak,
}

impl Stats {
    fn see(&mut self, e: &vramtrace_format::Event) {
        self.events += 1;
        self.failed += u64::from(!e.succeeded());
        // Runs of calls come from one thread: look it up only when it changes.
        if self.last_thread != Some((e.pid, e.tid)) {
            self.last_thread = Some((e.pid, e.tid));
            self.tids.insert(e.tid);
            self.pids.insert(e.pid);
        }
        self.first = Some(self.first.map_or(e.time_ns, |f| f.min(e.time_ns)));
        self.last = self.last.max(e.time_ns + e.duration_ns);
        self.level.see(e, e.api.op(), e.api.kind());
        self.peak.see(e);
    }

    fn row(mut self, trace_id: String, path: &str, trace: &Trace) -> TraceRow {
        let m = &trace.metadata;
        let t = &trace.tables;
        self.tids.extend(t.threads.iter().map(|th| th.tid));
        self.pids.extend(t.processes.iter().map(|p| p.pid));
        let level = detect_level(m, &self.level.into_facts());
        let first_process = t.processes.first();
        let argv = first_process
            .map(|p| &p.command_line)
            .filter(|c| !c.is_empty());
        let environment: BTreeMap<&str, &str> = m
            .environment
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let first = self.first.unwrap_or(0);
        TraceRow {
            trace_id,
            path: path.to_string(),
            file_bytes: trace.layout.file_bytes,
            complete: trace.layout.complete,
            damage: trace.layout.damage.clone(),
            writer: m.writer.clone(),
            host: m.host.clone(),
            program: argv.map(|a| a[0].rsplit('/').next().unwrap_or(&a[0]).to_string()),
            command_line: argv.map(|a| a.join(" ")),
            pid: first_process.map(|p| p.pid),
            job_id: job::job_id_of(m),
            rank: job::rank_of(m),
            local_rank: job::local_rank_of(m),
            world_size: job::world_size_of(m),
            driver_version: m.driver_version,
            device_name: t.devices.first().map(|d| d.name.clone()),
            device_total_memory: t.devices.first().map(|d| d.total_memory),
            capture_level: serde_name(level.level),
            capture_level_declared: level.declared,
            allocator_config: pytorch_alloc_conf(m).map(str::to_string),
            environment_json: serde_json::to_string(&environment).expect("a string map serializes"),
            start_time_unix_nano: first_process.map(|p| p.start_unix_ns).filter(|&t| t > 0),
            start_monotonic_ns: first_process
                .filter(|p| p.start_unix_ns > 0)
                .map(|p| p.start_monotonic_ns),
            events: self.events,
            failed_calls: self.failed,
            processes: self.pids.len() as u32,
            threads: self.tids.len() as u32,
            stacks: t.stacks.len() as u64,
            first_ts: first,
            duration_ns: self
                .last
                .saturating_sub(if self.events == 0 { self.last } else { first }),
            peak_live_device_bytes: self.peak.peak(),
        }
    }
}

/// Writes the `traces` rows.
pub fn write_traces<W: Write + Send>(sink: W, rows: &[TraceRow]) -> Result<(), Error> {
    write_table(sink, schema::traces(), rows.len(), |g| {
        rows::traces(g, rows)
    })
}

/// Writes the `policy_results` rows of one trace.
pub fn write_policy_results<W: Write + Send>(
    sink: W,
    trace_id: &str,
    rows: &[PolicyResult],
) -> Result<(), Error> {
    write_table(sink, schema::policy_results(), rows.len(), |g| {
        rows::policy_results(g, trace_id, rows)
    })
}
