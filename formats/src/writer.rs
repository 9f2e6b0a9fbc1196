//! The streaming writer: bounded memory, one chunk at a time.

use crate::chunk::{
    ChunkHeader, ChunkKind, Compression, FREE_CHUNK_EVENTS, MAX_CHUNK_EVENTS, events_fit,
    file_header, trailer,
};
use crate::codec::{self, Compressor, checksum};
use crate::column::ColumnBuilder;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::metadata::Metadata;
use crate::tables::Tables;
use std::io::Write;

/// Events chunks of at most this many events are also tried compressed whole.
const WHOLE_CHUNK_EVENTS: usize = 4096;

/// How a [`TraceWriter`] cuts and compresses chunks.
#[derive(Debug, Clone, Copy)]
pub struct WriterOptions {
    /// Events per chunk; the writer holds at most this many in memory.
    pub chunk_events: u32,
    /// zstd level, 1 (fastest) to 19.
    pub zstd_level: i32,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            chunk_events: 1 << 16,
            zstd_level: 1,
        }
    }
}

/// Writes a trace as it is produced.
///
/// Memory stays bounded by one chunk of events plus the table entries added since the last
/// flush. Table entries are always written before the events chunk that follows them, so every
/// prefix of the file that ends on a chunk boundary is a consistent trace. After an I/O error
/// the writer refuses further work ([`Error::WriterPoisoned`]); what it wrote stays readable.
pub struct TraceWriter<W: Write> {
    out: W,
    offset: u64,
    options: WriterOptions,
    events: ColumnBuilder,
    tables: Tables,
    index: Vec<ChunkHeader>,
    compressor: Compressor,
    raw: Vec<u8>,
    packed: Vec<u8>,
    /// An events chunk's payload with no column compressed (small chunks, [`Self::pack_events`]).
    plain: Vec<u8>,
    events_written: u64,
    poisoned: bool,
}

impl<W: Write> TraceWriter<W> {
    /// Starts a trace: writes the file header and the metadata.
    pub fn new(out: W, metadata: &Metadata, options: WriterOptions) -> Result<Self> {
        let mut w = TraceWriter {
            out,
            offset: 0,
            options: WriterOptions {
                chunk_events: options.chunk_events.clamp(1, MAX_CHUNK_EVENTS),
                ..options
            },
            events: ColumnBuilder::default(),
            tables: Tables::default(),
            index: Vec::new(),
            compressor: Compressor::new(options.zstd_level)?,
            raw: Vec::new(),
            packed: Vec::new(),
            plain: Vec::new(),
            events_written: 0,
            poisoned: false,
        };
        w.write_all(&file_header())?;
        w.set_metadata(metadata)?;
        Ok(w)
    }

    /// Writes a metadata chunk that replaces the earlier one for readers.
    pub fn set_metadata(&mut self, metadata: &Metadata) -> Result<()> {
        self.raw = codec::encode_value(metadata);
        self.write_chunk(ChunkKind::Metadata)
    }

    /// New table entries; they are written before the next events chunk.
    pub fn tables_mut(&mut self) -> &mut Tables {
        &mut self.tables
    }

    /// Adds one event; writes a chunk when the buffer is full.
    pub fn push(&mut self, event: &Event) -> Result<()> {
        self.events.push(event);
        if self.events.len() >= self.options.chunk_events as usize {
            self.flush_chunks()?;
        }
        Ok(())
    }

    /// Events pushed so far.
    pub fn events_pushed(&self) -> u64 {
        self.events_written + self.events.len() as u64
    }

    /// Writes buffered tables and events as chunks, then flushes the output.
    pub fn flush(&mut self) -> Result<()> {
        self.flush_chunks()?;
        self.out.flush().map_err(|e| self.poison(e))
    }

    /// Flushes, writes the index and the trailer, and returns the output.
    pub fn finish(mut self) -> Result<W> {
        self.flush_chunks()?;
        let index_offset = self.offset;
        self.raw.clear();
        for h in &self.index {
            self.raw.extend_from_slice(&h.index_entry());
        }
        self.write_chunk(ChunkKind::Index)?;
        self.write_all(&trailer(index_offset))?;
        self.out.flush().map_err(|e| self.poison(e))?;
        Ok(self.out)
    }

    fn flush_chunks(&mut self) -> Result<()> {
        if !self.tables.is_empty() {
            self.raw = codec::encode_value(&self.tables);
            self.write_chunk(ChunkKind::Tables)?;
            self.tables = Tables::default();
        }
        let n = self.events.len();
        let mut start = 0;
        let mut piece = n;
        while start < n {
            let end = n.min(start + piece);
            let (compression, payload) = self.pack_events(start..end)?;
            let count = (end - start) as u32;
            if !events_fit(count, payload.len() as u32) && piece > FREE_CHUNK_EVENTS as usize {
                // Events so regular that every column is a progression: readers refuse a chunk
                // that declares this many events in so few bytes, so it goes in smaller pieces.
                self.unpack(compression, payload);
                piece = FREE_CHUNK_EVENTS as usize;
                continue;
            }
            let header = ChunkHeader {
                event_count: count,
                first_seq: self.events.value(0, start),
                first_time_ns: self.events.value(1, start),
                last_time_ns: self.events.value(1, end - 1),
                ..self.header(ChunkKind::Events, compression, &payload)?
            };
            self.emit(header, compression, payload)?;
            self.events_written += u64::from(count);
            start = end;
        }
        self.events.clear();
        Ok(())
    }

    /// Encodes the buffered events `range` as an events chunk's payload: each column compressed
    /// on its own, or, for a chunk of at most [`WHOLE_CHUNK_EVENTS`] events where that is
    /// smaller, the whole payload in one zstd frame (sixteen frames' headers and tables weigh on
    /// a small chunk).
    fn pack_events(&mut self, range: std::ops::Range<usize>) -> Result<(Compression, Vec<u8>)> {
        self.raw.clear();
        self.events
            .encode_into(range.clone(), &mut self.raw, Some(&mut self.compressor))
            .map_err(|e| self.poison(e))?;
        if range.len() <= WHOLE_CHUNK_EVENTS {
            self.plain.clear();
            self.events
                .encode_into(range, &mut self.plain, None)
                .map_err(|e| self.poison(e))?;
            self.compressor.compress(&self.plain, &mut self.packed)?;
            if self.packed.len() < self.raw.len() {
                // `self.raw` holds what the compressed payload expands to (see `header`).
                std::mem::swap(&mut self.raw, &mut self.plain);
                return Ok((Compression::Zstd, std::mem::take(&mut self.packed)));
            }
        }
        Ok((Compression::None, std::mem::take(&mut self.raw)))
    }

    /// Writes `self.raw` as one chunk without events, compressed when that makes it smaller.
    fn write_chunk(&mut self, kind: ChunkKind) -> Result<()> {
        let (compression, payload) = self.pack(kind)?;
        let header = self.header(kind, compression, &payload)?;
        self.emit(header, compression, payload)
    }

    /// Compresses `self.raw` when that makes it smaller; the payload is handed back with
    /// [`Self::unpack`] or [`Self::emit`] so its buffer is reused.
    fn pack(&mut self, kind: ChunkKind) -> Result<(Compression, Vec<u8>)> {
        // Events chunks compress column by column (`ColumnBuilder::encode_into`).
        let compress = !matches!(kind, ChunkKind::Index | ChunkKind::Events) && self.raw.len() > 64;
        if compress {
            self.compressor.compress(&self.raw, &mut self.packed)?;
        }
        Ok(if compress && self.packed.len() < self.raw.len() {
            (Compression::Zstd, std::mem::take(&mut self.packed))
        } else {
            (Compression::None, std::mem::take(&mut self.raw))
        })
    }

    fn unpack(&mut self, compression: Compression, payload: Vec<u8>) {
        match compression {
            Compression::Zstd => self.packed = payload,
            Compression::None => self.raw = payload,
        }
    }

    /// The header of a chunk of `kind` holding `payload` (no events, no time range).
    fn header(
        &mut self,
        kind: ChunkKind,
        compression: Compression,
        payload: &[u8],
    ) -> Result<ChunkHeader> {
        if self.poisoned {
            return Err(Error::WriterPoisoned);
        }
        let raw = match compression {
            Compression::None => payload.len(),
            Compression::Zstd => self.raw.len(),
        };
        let raw_len = u32::try_from(raw)
            .ok()
            .filter(|&n| n <= crate::chunk::MAX_RAW_LEN)
            .ok_or_else(|| {
                std::io::Error::other(format!("a {kind:?} chunk of {raw} bytes is too large"))
            })?;
        Ok(ChunkHeader {
            offset: self.offset,
            kind,
            compression,
            payload_len: payload.len() as u32,
            raw_len,
            event_count: 0,
            first_seq: 0,
            first_time_ns: 0,
            last_time_ns: 0,
            payload_crc: checksum(payload),
        })
    }

    fn emit(
        &mut self,
        header: ChunkHeader,
        compression: Compression,
        payload: Vec<u8>,
    ) -> Result<()> {
        let written = self
            .write_all(&header.to_bytes())
            .and_then(|()| self.write_all(&payload));
        self.unpack(compression, payload);
        written?;
        if header.kind != ChunkKind::Index {
            self.index.push(header);
        }
        Ok(())
    }

    fn write_all(&mut self, bytes: &[u8]) -> Result<()> {
        if self.poisoned {
            return Err(Error::WriterPoisoned);
        }
        self.out.write_all(bytes).map_err(|e| self.poison(e))?;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    fn poison(&mut self, e: std::io::Error) -> Error {
        self.poisoned = true;
        Error::Io(e)
    }
}
