//! The streaming writer: bounded memory, one chunk at a time.

use crate::chunk::{ChunkHeader, ChunkKind, Compression, MAX_CHUNK_EVENTS, file_header, trailer};
use crate::codec::{self, Compressor, checksum};
use crate::column::ColumnBuilder;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::metadata::Metadata;
use crate::tables::Tables;
use std::io::Write;

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
        self.write_chunk(ChunkKind::Metadata, 0, 0, 0, 0)
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

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.offset
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
        self.write_chunk(ChunkKind::Index, 0, 0, 0, 0)?;
        self.write_all(&trailer(index_offset))?;
        self.out.flush().map_err(|e| self.poison(e))?;
        Ok(self.out)
    }

    fn flush_chunks(&mut self) -> Result<()> {
        if !self.tables.is_empty() {
            self.raw = codec::encode_value(&self.tables);
            self.write_chunk(ChunkKind::Tables, 0, 0, 0, 0)?;
            self.tables = Tables::default();
        }
        if self.events.is_empty() {
            return Ok(());
        }
        let count = self.events.len() as u32;
        let (first_seq, _) = self.events.first_last(0).unwrap_or_default();
        let (first_time, last_time) = self.events.first_last(1).unwrap_or_default();
        self.raw.clear();
        self.events.encode_into(&mut self.raw);
        self.events_written += u64::from(count);
        self.write_chunk(ChunkKind::Events, count, first_seq, first_time, last_time)
    }

    /// Writes `self.raw` as one chunk, compressed when that makes it smaller.
    fn write_chunk(
        &mut self,
        kind: ChunkKind,
        event_count: u32,
        first_seq: u64,
        first_time_ns: u64,
        last_time_ns: u64,
    ) -> Result<()> {
        if self.poisoned {
            return Err(Error::WriterPoisoned);
        }
        let raw_len = u32::try_from(self.raw.len())
            .ok()
            .filter(|&n| n <= crate::chunk::MAX_RAW_LEN)
            .ok_or_else(|| {
                std::io::Error::other(format!(
                    "a {kind:?} chunk of {} bytes is too large",
                    self.raw.len()
                ))
            })?;
        let compress = kind != ChunkKind::Index && self.raw.len() > 64;
        if compress {
            self.compressor.compress(&self.raw, &mut self.packed)?;
        }
        let (compression, payload) = if compress && self.packed.len() < self.raw.len() {
            (Compression::Zstd, std::mem::take(&mut self.packed))
        } else {
            (Compression::None, std::mem::take(&mut self.raw))
        };
        let header = ChunkHeader {
            offset: self.offset,
            kind,
            compression,
            payload_len: payload.len() as u32,
            raw_len,
            event_count,
            first_seq,
            first_time_ns,
            last_time_ns,
            payload_crc: checksum(&payload),
        };
        let written = self
            .write_all(&header.to_bytes())
            .and_then(|()| self.write_all(&payload));
        match compression {
            Compression::Zstd => self.packed = payload,
            Compression::None => self.raw = payload,
        }
        written?;
        if kind != ChunkKind::Index {
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
