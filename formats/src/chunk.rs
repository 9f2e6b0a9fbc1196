//! Framing: the file header, chunk headers, the index and the trailer (SPEC.md, "Layout").

use crate::codec::{self, checksum};
use crate::error::Error;

/// First eight bytes of every trace. The high byte and the line feed catch text-mode mangling.
pub const MAGIC: [u8; 8] = *b"\x89VRAMTR\n";
/// The format version this crate writes and the newest it reads.
pub const VERSION: u16 = 3;
/// Bytes in the file header.
pub const FILE_HEADER_LEN: usize = 16;
/// Bytes in a chunk header.
pub const CHUNK_HEADER_LEN: usize = 52;
/// Bytes in the trailer that ends a finished file.
pub const TRAILER_LEN: usize = 16;
/// Bytes per entry of the index chunk.
pub const INDEX_ENTRY_LEN: usize = 37;

const CHUNK_MAGIC: [u8; 4] = *b"VTCK";
const TRAILER_MAGIC: [u8; 8] = *b"VTRCEND\n";

/// Most events one chunk may declare; bounds what a hostile header can make a reader allocate.
pub const MAX_CHUNK_EVENTS: u32 = 1 << 20;
/// Most decompressed bytes one chunk may declare.
pub const MAX_RAW_LEN: u32 = 64 << 20;
/// Most a payload may expand on decompression: zstd's densest encoding, an RLE block (a 3-byte
/// header and one byte for 128 KiB), stays below it, so nothing a writer made is refused (a
/// nearly constant byte plane of a 65,536-event column compresses more than 4,096 times); a
/// tiny file still cannot claim more than [`MAX_RAW_LEN`] a chunk.
pub const MAX_EXPANSION: u64 = 32 * 1024;
/// Events an events chunk may declare regardless of its size.
pub const FREE_CHUNK_EVENTS: u64 = 4096;
/// Events per stored payload byte an events chunk may declare beyond [`FREE_CHUNK_EVENTS`].
///
/// A column in `LINEAR` mode stores any number of values in two varints, so without this bound
/// a 60-byte chunk could declare a million events and a file of a few kilobytes would decode to
/// gigabytes. Recorded events carry clock readings that no progression describes, and zstd
/// leaves them several bits per event; 64 events per byte is far above what any recorded or
/// generated trace reaches, and keeps what a reader builds within a constant factor of the file.
pub const MAX_EVENTS_PER_PAYLOAD_BYTE: u64 = 64;

/// Most events an events chunk with a `payload_len`-byte payload may declare.
pub fn max_events_in(payload_len: u32) -> u64 {
    FREE_CHUNK_EVENTS + u64::from(payload_len) * MAX_EVENTS_PER_PAYLOAD_BYTE
}

/// True when `event_count` events may be stored in a `payload_len`-byte payload.
pub fn events_fit(event_count: u32, payload_len: u32) -> bool {
    u64::from(event_count) <= max_events_in(payload_len)
}

/// What a chunk holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChunkKind {
    Metadata = 1,
    Tables = 2,
    Events = 3,
    Index = 4,
}

impl ChunkKind {
    fn from_u8(v: u8) -> Option<ChunkKind> {
        Some(match v {
            1 => ChunkKind::Metadata,
            2 => ChunkKind::Tables,
            3 => ChunkKind::Events,
            4 => ChunkKind::Index,
            _ => return None,
        })
    }
}

/// How a payload is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    None = 0,
    Zstd = 1,
}

/// A parsed chunk header plus where it sits in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Byte offset of the header in the file.
    pub offset: u64,
    pub kind: ChunkKind,
    pub compression: Compression,
    pub payload_len: u32,
    pub raw_len: u32,
    pub event_count: u32,
    pub first_seq: u64,
    pub first_time_ns: u64,
    pub last_time_ns: u64,
    pub payload_crc: u32,
}

impl ChunkHeader {
    /// Offset of the first payload byte.
    pub fn payload_offset(&self) -> u64 {
        self.offset + CHUNK_HEADER_LEN as u64
    }

    /// Offset just past the payload.
    pub fn end(&self) -> u64 {
        self.payload_offset() + u64::from(self.payload_len)
    }

    pub fn to_bytes(&self) -> [u8; CHUNK_HEADER_LEN] {
        let mut b = [0u8; CHUNK_HEADER_LEN];
        b[0..4].copy_from_slice(&CHUNK_MAGIC);
        b[4] = self.kind as u8;
        b[5] = self.compression as u8;
        b[8..12].copy_from_slice(&self.payload_len.to_le_bytes());
        b[12..16].copy_from_slice(&self.raw_len.to_le_bytes());
        b[16..20].copy_from_slice(&self.event_count.to_le_bytes());
        b[20..28].copy_from_slice(&self.first_seq.to_le_bytes());
        b[28..36].copy_from_slice(&self.first_time_ns.to_le_bytes());
        b[36..44].copy_from_slice(&self.last_time_ns.to_le_bytes());
        b[44..48].copy_from_slice(&self.payload_crc.to_le_bytes());
        let crc = checksum(&b[0..48]);
        b[48..52].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses and checks the header at `offset`; `bytes` must hold at least a header.
    pub fn parse(bytes: &[u8], offset: u64) -> Result<ChunkHeader, Error> {
        let corrupt = |what: String| Error::Corrupt { offset, what };
        let b = &bytes[..CHUNK_HEADER_LEN];
        if b[0..4] != CHUNK_MAGIC {
            return Err(corrupt("no chunk header here".into()));
        }
        if checksum(&b[0..48]) != u32_at(b, 48) {
            return Err(corrupt("chunk header checksum mismatch".into()));
        }
        let kind = ChunkKind::from_u8(b[4])
            .ok_or_else(|| corrupt(format!("unknown chunk kind {}", b[4])))?;
        let compression = match b[5] {
            0 => Compression::None,
            1 => Compression::Zstd,
            c => return Err(corrupt(format!("unknown compression {c}"))),
        };
        let h = ChunkHeader {
            offset,
            kind,
            compression,
            payload_len: u32_at(b, 8),
            raw_len: u32_at(b, 12),
            event_count: u32_at(b, 16),
            first_seq: u64_at(b, 20),
            first_time_ns: u64_at(b, 28),
            last_time_ns: u64_at(b, 36),
            payload_crc: u32_at(b, 44),
        };
        h.check_limits().map_err(corrupt)?;
        Ok(h)
    }

    fn check_limits(&self) -> Result<(), String> {
        if self.event_count > MAX_CHUNK_EVENTS {
            return Err(format!(
                "chunk declares {} events (limit {MAX_CHUNK_EVENTS})",
                self.event_count
            ));
        }
        if self.raw_len > MAX_RAW_LEN {
            return Err(format!(
                "chunk declares {} decompressed bytes (limit {MAX_RAW_LEN})",
                self.raw_len
            ));
        }
        if self.kind == ChunkKind::Events && !events_fit(self.event_count, self.payload_len) {
            return Err(format!(
                "chunk declares {} events in a {}-byte payload (at most {})",
                self.event_count,
                self.payload_len,
                max_events_in(self.payload_len)
            ));
        }
        let ok = match self.compression {
            Compression::None => self.raw_len == self.payload_len,
            Compression::Zstd => {
                u64::from(self.raw_len) <= u64::from(self.payload_len) * MAX_EXPANSION
            }
        };
        if !ok {
            return Err(format!(
                "chunk declares {} decompressed bytes from a {}-byte payload",
                self.raw_len, self.payload_len
            ));
        }
        Ok(())
    }

    /// Checks the payload checksum and returns the decompressed payload.
    pub fn payload<'a>(&self, file: &'a [u8], scratch: &'a mut Vec<u8>) -> Result<&'a [u8], Error> {
        let corrupt = |what: String| Error::Corrupt {
            offset: self.offset,
            what,
        };
        let start = self.payload_offset() as usize;
        let payload = file
            .get(start..self.end() as usize)
            .ok_or_else(|| corrupt("chunk payload runs past the end of the file".into()))?;
        if checksum(payload) != self.payload_crc {
            return Err(corrupt(format!(
                "{:?} chunk payload checksum mismatch",
                self.kind
            )));
        }
        match self.compression {
            Compression::None => Ok(payload),
            Compression::Zstd => {
                codec::decompress(payload, self.raw_len as usize, scratch)
                    .map_err(|e| corrupt(format!("zstd payload: {e}")))?;
                Ok(scratch)
            }
        }
    }

    /// The index entry describing this chunk.
    pub fn index_entry(&self) -> [u8; INDEX_ENTRY_LEN] {
        let mut b = [0u8; INDEX_ENTRY_LEN];
        b[0..8].copy_from_slice(&self.offset.to_le_bytes());
        b[8] = self.kind as u8;
        b[9..13].copy_from_slice(&self.event_count.to_le_bytes());
        b[13..21].copy_from_slice(&self.first_seq.to_le_bytes());
        b[21..29].copy_from_slice(&self.first_time_ns.to_le_bytes());
        b[29..37].copy_from_slice(&self.last_time_ns.to_le_bytes());
        b
    }
}

/// One index entry: where a chunk is and what it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub offset: u64,
    pub kind: u8,
    pub event_count: u32,
    pub first_seq: u64,
    pub first_time_ns: u64,
    pub last_time_ns: u64,
}

impl IndexEntry {
    pub fn parse(b: &[u8]) -> IndexEntry {
        IndexEntry {
            offset: u64_at(b, 0),
            kind: b[8],
            event_count: u32_at(b, 9),
            first_seq: u64_at(b, 13),
            first_time_ns: u64_at(b, 21),
            last_time_ns: u64_at(b, 29),
        }
    }
}

/// The file header.
pub fn file_header() -> [u8; FILE_HEADER_LEN] {
    let mut b = [0u8; FILE_HEADER_LEN];
    b[0..8].copy_from_slice(&MAGIC);
    b[8..10].copy_from_slice(&VERSION.to_le_bytes());
    let crc = checksum(&b[0..12]);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Checks the file header and returns the format version.
pub fn parse_file_header(bytes: &[u8]) -> Result<u16, Error> {
    if bytes.is_empty() {
        return Err(Error::Empty);
    }
    let n = bytes.len().min(MAGIC.len());
    if bytes[..n] != MAGIC[..n] {
        return Err(Error::NotATrace);
    }
    if bytes.len() < FILE_HEADER_LEN {
        return Err(Error::TruncatedHeader {
            offset: bytes.len() as u64,
        });
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if checksum(&bytes[0..12]) != u32_at(bytes, 12) {
        return Err(Error::Corrupt {
            offset: 0,
            what: "file header checksum mismatch".into(),
        });
    }
    if version > VERSION {
        return Err(Error::NewerVersion {
            found: version,
            supported: VERSION,
        });
    }
    if version == 0 {
        return Err(Error::Corrupt {
            offset: 8,
            what: "format version 0".into(),
        });
    }
    Ok(version)
}

/// The trailer pointing at the index chunk.
pub fn trailer(index_offset: u64) -> [u8; TRAILER_LEN] {
    let mut b = [0u8; TRAILER_LEN];
    b[0..8].copy_from_slice(&index_offset.to_le_bytes());
    b[8..16].copy_from_slice(&TRAILER_MAGIC);
    b
}

/// The index chunk offset, when `bytes` ends with a trailer.
pub fn parse_trailer(bytes: &[u8]) -> Option<u64> {
    let t = bytes.get(bytes.len().checked_sub(TRAILER_LEN)?..)?;
    (t[8..16] == TRAILER_MAGIC).then(|| u64_at(t, 0))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
