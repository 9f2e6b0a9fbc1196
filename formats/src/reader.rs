//! Reading: locate chunks (through the index, or by a sequential scan after a crash), then decode
//! them, sequentially in order or all at once in parallel.

use crate::chunk::{
    self, CHUNK_HEADER_LEN, ChunkHeader, ChunkKind, FILE_HEADER_LEN, INDEX_ENTRY_LEN, IndexEntry,
    TRAILER_LEN,
};
use crate::codec;
use crate::column::EventBatch;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::metadata::Metadata;
use crate::tables::{Tables, TablesV1};
use rayon::prelude::*;
use std::path::Path;

/// How strictly to treat damage in the middle of a file.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadOptions {
    /// On a corrupt chunk, keep everything before it (and say so) instead of failing.
    /// A file cut short is always recovered up to its last complete chunk.
    pub salvage: bool,
}

/// Where each chunk is, and whether the file was finished.
#[derive(Debug, Clone)]
pub struct Layout {
    pub version: u16,
    /// Every chunk that will be read, in file order (the index chunk excluded).
    pub chunks: Vec<ChunkHeader>,
    /// True when the file ends with a valid index and trailer and nothing was skipped.
    pub complete: bool,
    /// Why the file is incomplete, with the byte offset, when it is.
    pub damage: Option<String>,
    pub file_bytes: u64,
}

impl Layout {
    /// Finds the chunks of `bytes`.
    pub fn scan(bytes: &[u8], options: ReadOptions) -> Result<Layout> {
        let version = chunk::parse_file_header(bytes)?;
        match Self::from_index(bytes, version) {
            Ok(Some(layout)) => Ok(layout),
            Ok(None) => Self::sequential(bytes, version, options),
            // A damaged index or trailer says nothing about the chunks before it: salvage walks
            // them from the start instead.
            Err(e) if options.salvage => {
                let mut layout = Self::sequential(bytes, version, options)?;
                layout.damage = Some(format!(
                    "{e}; read the chunks in file order instead ({})",
                    layout.damage.take().unwrap_or_default()
                ));
                Ok(layout)
            }
            Err(e) => Err(e),
        }
    }

    /// The event chunks whose time range overlaps `[from_ns, to_ns]`, through the index: random
    /// access by time without decoding the rest.
    pub fn overlapping(&self, from_ns: u64, to_ns: u64) -> Vec<ChunkHeader> {
        self.chunks
            .iter()
            .filter(|h| h.kind == ChunkKind::Events)
            .filter(|h| h.first_time_ns <= to_ns && h.last_time_ns >= from_ns)
            .copied()
            .collect()
    }

    /// The layout given by the trailer and index, when the file has them. An index that is
    /// present but broken is corruption, not a crash, so it is reported.
    fn from_index(bytes: &[u8], version: u16) -> Result<Option<Layout>> {
        let Some(index_offset) = chunk::parse_trailer(bytes) else {
            return Ok(None);
        };
        let trailer_at = bytes.len() - TRAILER_LEN;
        let bad = |what: &str| Error::Corrupt {
            offset: index_offset,
            what: format!("{what} (the trailer at byte {trailer_at} points here)"),
        };
        let start = usize::try_from(index_offset).ok().filter(|&s| {
            s >= FILE_HEADER_LEN
                && s.checked_add(CHUNK_HEADER_LEN)
                    .is_some_and(|e| e <= trailer_at)
        });
        let Some(start) = start else {
            return Err(bad("index offset outside the file"));
        };
        let header = ChunkHeader::parse(&bytes[start..], index_offset)?;
        if header.kind != ChunkKind::Index || header.end() != trailer_at as u64 {
            return Err(bad("no index chunk ending at the trailer"));
        }
        let mut scratch = Vec::new();
        let entries = header.payload(bytes, &mut scratch)?;
        if entries.len() % INDEX_ENTRY_LEN != 0 {
            return Err(bad("index length is not a whole number of entries"));
        }
        let mut chunks = Vec::with_capacity(entries.len() / INDEX_ENTRY_LEN);
        let mut expected = FILE_HEADER_LEN as u64;
        for entry in entries.chunks_exact(INDEX_ENTRY_LEN).map(IndexEntry::parse) {
            // Chunks are contiguous, so each entry must start where the previous chunk ended.
            if entry.offset != expected {
                return Err(bad(&format!(
                    "index entry points at byte {}, expected {expected}",
                    entry.offset
                )));
            }
            let h = header_at(bytes, entry.offset, header.offset)?;
            if h.kind == ChunkKind::Index {
                return Err(Error::Corrupt {
                    offset: entry.offset,
                    what: "the index lists an index chunk".into(),
                });
            }
            if h.kind as u8 != entry.kind || h.event_count != entry.event_count {
                return Err(Error::Corrupt {
                    offset: entry.offset,
                    what: "chunk header disagrees with its index entry".into(),
                });
            }
            expected = h.end();
            chunks.push(h);
        }
        if expected != index_offset {
            return Err(bad("the index does not cover the file"));
        }
        Ok(Some(Layout {
            version,
            chunks,
            complete: true,
            damage: None,
            file_bytes: bytes.len() as u64,
        }))
    }

    /// Walks chunk headers from the start: the recovery path for files whose writer died.
    fn sequential(bytes: &[u8], version: u16, options: ReadOptions) -> Result<Layout> {
        let mut chunks = Vec::new();
        let mut pos = FILE_HEADER_LEN as u64;
        let end = bytes.len() as u64;
        let damage = loop {
            let rest = &bytes[pos as usize..];
            if rest.is_empty() {
                break format!(
                    "the file ends at byte {pos} without an index (the writer did not finish)"
                );
            }
            if rest.len() < CHUNK_HEADER_LEN || rest.iter().take(CHUNK_HEADER_LEN).all(|&b| b == 0)
            {
                break format!(
                    "the file ends at byte {pos} inside a chunk header (the writer did not finish)"
                );
            }
            let h = match ChunkHeader::parse(rest, pos) {
                Ok(h) => h,
                Err(e) if options.salvage => break format!("{e}; recovered the chunks before it"),
                Err(e) => return Err(e),
            };
            if h.end() > end {
                break format!(
                    "the file ends at byte {end} inside the chunk at byte {pos} (the writer did not finish)"
                );
            }
            if h.kind == ChunkKind::Index {
                // An index whose trailer is missing: the writer died while finishing.
                break format!(
                    "the file ends at byte {end} before its trailer (the writer did not finish)"
                );
            }
            pos = h.end();
            chunks.push(h);
        };
        Ok(Layout {
            version,
            chunks,
            complete: false,
            damage: Some(damage),
            file_bytes: end,
        })
    }
}

fn header_at(bytes: &[u8], offset: u64, limit: u64) -> Result<ChunkHeader> {
    let start = offset as usize;
    if offset
        .checked_add(CHUNK_HEADER_LEN as u64)
        .is_none_or(|end| end > limit)
    {
        return Err(Error::Corrupt {
            offset,
            what: "chunk header runs into the index".into(),
        });
    }
    let h = ChunkHeader::parse(&bytes[start..], offset)?;
    if h.end() > limit {
        return Err(Error::Corrupt {
            offset,
            what: "chunk runs into the index".into(),
        });
    }
    Ok(h)
}

/// A fully decoded trace.
#[derive(Debug, Clone)]
pub struct Trace {
    pub metadata: Metadata,
    pub tables: Tables,
    /// Event chunks in file order.
    pub batches: Vec<EventBatch>,
    pub layout: Layout,
}

/// What a trace holds besides its events: what [`TraceHead::stream`] returns once the events
/// have streamed past.
#[derive(Debug, Clone)]
pub struct TraceHead {
    pub metadata: Metadata,
    pub tables: Tables,
    /// The chunks read; on damage, up to the last good one.
    pub layout: Layout,
}

impl Trace {
    /// Maps the file at `path` and decodes it in parallel.
    pub fn open(path: &Path, options: ReadOptions) -> Result<Trace> {
        let file = MappedFile::open(path)?;
        Trace::from_bytes(file.bytes(), options)
    }

    /// Decodes a whole trace held in memory, chunks in parallel.
    pub fn from_bytes(bytes: &[u8], options: ReadOptions) -> Result<Trace> {
        let mut batches = Vec::new();
        let head = TraceHead::stream(bytes, options, |b| b, |b| batches.push(b))?;
        Ok(Trace::from_parts(head, batches))
    }

    /// Decodes the metadata and tables of a trace held in memory but none of its events
    /// (`batches` stays empty): for streaming them afterwards, one chunk at a time, with
    /// [`EventChunks`] over `layout.chunks`. Damage is treated as [`Trace::from_bytes`] does.
    pub fn header_from_bytes(bytes: &[u8], options: ReadOptions) -> Result<Trace> {
        let mut layout = Layout::scan(bytes, options)?;
        let (mut metadata, mut tables) = (Metadata::default(), Tables::default());
        let last = layout.chunks.len().saturating_sub(1);
        let mut stopped = None;
        for (i, h) in layout.chunks.iter().enumerate() {
            if h.kind == ChunkKind::Events {
                continue;
            }
            match decode_chunk(bytes, h, layout.version) {
                Ok(Decoded::Metadata(m)) => metadata = m,
                Ok(Decoded::Tables(t)) => tables.extend(t),
                Ok(Decoded::Events(_)) => {}
                // A torn last chunk of an unfinished file is the crash itself, not corruption.
                Err(e) if options.salvage || (i == last && !layout.complete) => {
                    stopped = Some((i, format!("{e}; recovered the chunks before it")));
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if let Some((i, damage)) = stopped {
            layout.chunks.truncate(i);
            layout.complete = false;
            layout.damage = Some(damage);
        }
        Ok(Trace {
            metadata,
            tables,
            batches: Vec::new(),
            layout,
        })
    }

    /// The trace that writing `events` (in that order) with `tables` and `metadata` through a
    /// [`crate::TraceWriter`] of default options and reading the bytes back would give, without
    /// the bytes: for content made in memory (an import) that is analysed at once. The events
    /// are batched in chunks of the writer's default size (which it splits further only for
    /// runs so regular that readers would refuse them), the batches built in parallel; the layout is
    /// complete and lists those events chunks only (their counts, first sequence numbers, first
    /// and last times; no offsets or payloads, and `file_bytes` 0, as there is no file).
    pub fn in_memory(metadata: Metadata, tables: Tables, events: &[Event]) -> Trace {
        let per_chunk = crate::WriterOptions::default().chunk_events as usize;
        let batches: Vec<EventBatch> = events
            .par_chunks(per_chunk)
            .map(EventBatch::from_events)
            .collect();
        let chunks = events
            .chunks(per_chunk)
            .map(|c| ChunkHeader {
                offset: 0,
                kind: ChunkKind::Events,
                compression: chunk::Compression::None,
                payload_len: 0,
                raw_len: 0,
                event_count: c.len() as u32,
                first_seq: c[0].seq,
                first_time_ns: c[0].time_ns,
                last_time_ns: c[c.len() - 1].time_ns,
                payload_crc: 0,
            })
            .collect();
        Trace {
            metadata,
            tables,
            batches,
            layout: Layout {
                version: chunk::VERSION,
                chunks,
                complete: true,
                damage: None,
                file_bytes: 0,
            },
        }
    }

    /// A trace of `head` and its event `batches`.
    pub fn from_parts(head: TraceHead, batches: Vec<EventBatch>) -> Trace {
        Trace {
            metadata: head.metadata,
            tables: head.tables,
            batches,
            layout: head.layout,
        }
    }

    /// The trace split into what [`TraceHead::stream`] returns and its event batches.
    pub fn into_parts(self) -> (TraceHead, Vec<EventBatch>) {
        let head = TraceHead {
            metadata: self.metadata,
            tables: self.tables,
            layout: self.layout,
        };
        (head, self.batches)
    }

    /// Number of events.
    pub fn event_count(&self) -> u64 {
        self.batches.iter().map(|b| b.len() as u64).sum()
    }

    /// Every event in file order.
    pub fn events(&self) -> impl Iterator<Item = Event> + '_ {
        self.batches.iter().flat_map(|b| b.iter())
    }
}

impl TraceHead {
    /// Decodes the chunks of `bytes` a window at a time, in parallel: `map` turns each events
    /// batch into a `T` on the decoding threads, and `sink` receives them in file order on the
    /// calling thread while the next window decodes. Memory stays at about two windows of
    /// chunks (and what `map` keeps), whatever the trace's length.
    ///
    /// Damage is treated as [`Trace::from_bytes`] does: a torn last chunk of an unfinished file,
    /// or any bad chunk under `salvage`, ends the stream there and is recorded in the layout;
    /// `sink` has then received every batch before it.
    pub fn stream<T: Send>(
        bytes: &[u8],
        options: ReadOptions,
        map: impl Fn(EventBatch) -> T + Sync,
        mut sink: impl FnMut(T),
    ) -> Result<TraceHead> {
        let mut layout = Layout::scan(bytes, options)?;
        let mut head = TraceHead {
            metadata: Metadata::default(),
            tables: Tables::default(),
            layout: layout.clone(),
        };
        // Two chunks per thread keep both cores busy without holding much of the trace.
        let window = 2 * rayon::current_num_threads().max(1);
        let last = layout.chunks.len().saturating_sub(1);
        let complete = layout.complete;
        let version = layout.version;
        let chunks = &layout.chunks;
        let map = &map;
        let decode = |w: &[ChunkHeader]| -> Vec<Result<Decoded<T>>> {
            w.par_iter()
                .map(|h| decode_chunk(bytes, h, version).map(|d| d.map_events(map)))
                .collect()
        };
        let stopped = std::thread::scope(|scope| -> Result<Option<(usize, String)>> {
            let windows: Box<dyn Iterator<Item = Vec<Result<Decoded<T>>>>> =
                if rayon::current_thread_index().is_some() {
                    // Called on a rayon worker (a caller reading several traces in parallel):
                    // a decoder thread's `par_iter` would wait for the workers, which would wait
                    // on it. The windows are decoded in turn on this worker instead.
                    Box::new(chunks.chunks(window).map(decode))
                } else {
                    // A rendezvous channel: the decoder waits with one window while the
                    // caller's `sink` works through the previous one.
                    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Result<Decoded<T>>>>(0);
                    let decode = &decode;
                    scope.spawn(move || {
                        for w in chunks.chunks(window) {
                            let decoded = decode(w);
                            let failed = decoded.iter().any(Result::is_err);
                            if tx.send(decoded).is_err() || failed {
                                break;
                            }
                        }
                    });
                    Box::new(rx.into_iter())
                };
            let mut i = 0;
            for window in windows {
                for d in window {
                    let d = match d {
                        Ok(d) => d,
                        // A torn last chunk of an unfinished file is the crash itself, not
                        // corruption.
                        Err(e) if options.salvage || (i == last && !complete) => {
                            return Ok(Some((i, format!("{e}; recovered the chunks before it"))));
                        }
                        Err(e) => return Err(e),
                    };
                    match d {
                        Decoded::Metadata(m) => head.metadata = m,
                        Decoded::Tables(t) => head.tables.extend(t),
                        Decoded::Events(b) => sink(b),
                    }
                    i += 1;
                }
            }
            Ok(None)
        })?;
        if let Some((i, damage)) = stopped {
            layout.chunks.truncate(i);
            layout.complete = false;
            layout.damage = Some(damage);
        }
        head.layout = layout;
        Ok(head)
    }
}

enum Decoded<T = EventBatch> {
    Metadata(Metadata),
    Tables(Tables),
    Events(T),
}

impl Decoded {
    fn map_events<T>(self, f: impl Fn(EventBatch) -> T) -> Decoded<T> {
        match self {
            Decoded::Metadata(m) => Decoded::Metadata(m),
            Decoded::Tables(t) => Decoded::Tables(t),
            Decoded::Events(b) => Decoded::Events(f(b)),
        }
    }
}

fn decode_chunk(bytes: &[u8], h: &ChunkHeader, version: u16) -> Result<Decoded> {
    // One decompression buffer per thread: allocating one per chunk costs a map and an unmap
    // (with a TLB shootdown across cores) for every chunk.
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SCRATCH.with(|scratch| decode_payload(bytes, h, version, &mut scratch.borrow_mut()))
}

fn decode_payload(
    bytes: &[u8],
    h: &ChunkHeader,
    version: u16,
    scratch: &mut Vec<u8>,
) -> Result<Decoded> {
    let raw = h.payload(bytes, scratch)?;
    let at = h.payload_offset();
    Ok(match h.kind {
        ChunkKind::Metadata => Decoded::Metadata(codec::decode_value(raw, at)?),
        // Version 1 had no Python frame table (SPEC.md §9).
        ChunkKind::Tables if version == 1 => {
            Decoded::Tables(codec::decode_value::<TablesV1>(raw, at)?.into())
        }
        ChunkKind::Tables => Decoded::Tables(codec::decode_value(raw, at)?),
        ChunkKind::Events => Decoded::Events(decode_events(raw, h)?),
        ChunkKind::Index => {
            return Err(Error::Corrupt {
                offset: h.offset,
                what: "an index chunk among the data chunks".into(),
            });
        }
    })
}

fn decode_events(raw: &[u8], h: &ChunkHeader) -> Result<EventBatch> {
    EventBatch::decode(raw, h.event_count as usize).map_err(|(pos, what)| Error::Corrupt {
        offset: h.offset,
        what: format!("events chunk, decompressed byte {pos}: {what}"),
    })
}

/// Decodes the event chunks of a file one at a time, in order, for bounded-memory streaming.
pub struct EventChunks<'a> {
    bytes: &'a [u8],
    chunks: std::slice::Iter<'a, ChunkHeader>,
    scratch: Vec<u8>,
}

impl<'a> EventChunks<'a> {
    /// The event chunks among `chunks` (all of a [`Layout`], or [`Layout::overlapping`]).
    pub fn new(bytes: &'a [u8], chunks: &'a [ChunkHeader]) -> Self {
        EventChunks {
            bytes,
            chunks: chunks.iter(),
            scratch: Vec::new(),
        }
    }
}

impl Iterator for EventChunks<'_> {
    type Item = Result<EventBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let h = self.chunks.find(|h| h.kind == ChunkKind::Events)?;
        Some(
            h.payload(self.bytes, &mut self.scratch)
                .and_then(|raw| decode_events(raw, h)),
        )
    }
}

/// A trace file mapped into memory.
pub struct MappedFile {
    map: Option<memmap2::Mmap>,
}

impl MappedFile {
    /// Maps `path`, refusing directories and other non-files with a clear error.
    pub fn open(path: &Path) -> Result<MappedFile> {
        let file = std::fs::File::open(path)?;
        let meta = file.metadata()?;
        if meta.is_dir() {
            return Err(Error::Io(std::io::Error::other(
                "is a directory, not a trace file",
            )));
        }
        if meta.len() == 0 {
            return Ok(MappedFile { map: None });
        }
        // SAFETY: the map is read-only and private to this process. If another process truncates
        // the file while it is mapped, reads past the new end fault; vramtrace only reads traces
        // whose writer has finished or died, which is the documented use.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Ok(MappedFile { map: Some(map) })
    }

    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::arb_event;
    use crate::writer::{TraceWriter, WriterOptions};
    use crate::{Process, Thread};
    use proptest::prelude::*;

    #[test]
    fn traces_read_on_every_rayon_worker_at_once_do_not_wait_on_each_other() {
        // Each read once handed its chunks to a decoder thread whose `par_iter` needed a free
        // worker, while every worker waited in a read: a job directory read in parallel hung.
        let events = crate::synthetic::pytorch_like(3, 1).events;
        let options = WriterOptions {
            chunk_events: 64,
            ..WriterOptions::default()
        };
        let mut w = TraceWriter::new(Vec::new(), &Metadata::default(), options).unwrap();
        for e in &events {
            w.push(e).unwrap();
        }
        let bytes = w.finish().unwrap();
        let counts: Vec<usize> = (0..4 * rayon::current_num_threads())
            .into_par_iter()
            .map(|_| {
                Trace::from_bytes(&bytes, ReadOptions::default())
                    .unwrap()
                    .events()
                    .count()
            })
            .collect();
        assert!(counts.iter().all(|&n| n == events.len()));
    }

    proptest! {
        #[test]
        fn any_events_and_tables_round_trip_through_a_file(
            events in proptest::collection::vec(arb_event(), 0..300),
            chunk_events in 1u32..100,
            level in 1i32..4,
            names in proptest::collection::vec(".*", 0..4),
        ) {
            let metadata = Metadata { writer: names.concat(), ..Metadata::default() };
            let options = WriterOptions { chunk_events, zstd_level: level };
            let mut w = TraceWriter::new(Vec::new(), &metadata, options).unwrap();
            let mut tables = Tables::default();
            for (i, name) in names.iter().enumerate() {
                tables.threads.push(Thread { tid: i as u32, pid: 1, name: name.clone() });
                tables.processes.push(Process {
                    pid: i as u32,
                    parent_pid: 0,
                    command_line: vec![name.clone(); i],
                    start_unix_ns: u64::MAX - i as u64,
                    start_monotonic_ns: 0,
                });
            }
            *w.tables_mut() = tables.clone();
            for e in &events {
                w.push(e).unwrap();
            }
            let bytes = w.finish().unwrap();
            let trace = Trace::from_bytes(&bytes, ReadOptions::default()).unwrap();
            prop_assert!(trace.layout.complete);
            prop_assert_eq!(&trace.metadata, &metadata);
            prop_assert_eq!(&trace.tables, &tables);
            prop_assert_eq!(trace.events().collect::<Vec<_>>(), events.clone());
            let streamed: Vec<Event> = EventChunks::new(&bytes, &trace.layout.chunks)
                .flat_map(|b| b.unwrap().iter().collect::<Vec<_>>())
                .collect();
            prop_assert_eq!(streamed, events);
        }
    }

    #[test]
    fn time_ranges_select_only_the_chunks_that_overlap() {
        let mut w = TraceWriter::new(
            Vec::new(),
            &Metadata::default(),
            WriterOptions {
                chunk_events: 10,
                ..WriterOptions::default()
            },
        )
        .unwrap();
        for i in 0..100u64 {
            let e = Event {
                seq: i,
                time_ns: 1_000 * i,
                ..Event::new(crate::Api::CuMemAlloc_v2)
            };
            w.push(&e).unwrap();
        }
        let bytes = w.finish().unwrap();
        let layout = Layout::scan(&bytes, ReadOptions::default()).unwrap();
        let hits = layout.overlapping(25_000, 41_000);
        let firsts: Vec<u64> = hits.iter().map(|h| h.first_time_ns).collect();
        assert_eq!(firsts, [20_000, 30_000, 40_000]);
        let events: Vec<u64> = EventChunks::new(&bytes, &hits)
            .flat_map(|b| b.unwrap().iter().map(|e| e.seq).collect::<Vec<_>>())
            .collect();
        assert_eq!(events, (20..50).collect::<Vec<_>>());
    }
}
