//! Bad input: every damaged or hostile file gives a clear error or an honest partial recovery,
//! never a panic, never garbage, and never an allocation the file's size does not justify.

mod common;

use common::{PeakAlloc, small_trace};
use std::sync::atomic::Ordering;
use vramtrace_format::chunk::{
    CHUNK_HEADER_LEN, ChunkHeader, ChunkKind, Compression, FILE_HEADER_LEN,
};
use vramtrace_format::codec::checksum;
use vramtrace_format::{Error, Event, ReadOptions, Trace};

#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc::new();

fn read(bytes: &[u8]) -> Result<Trace, Error> {
    Trace::from_bytes(bytes, ReadOptions::default())
}

fn events(t: &Trace) -> Vec<Event> {
    t.events().collect()
}

#[test]
fn a_file_cut_at_every_byte_recovers_exactly_the_complete_chunks_before_the_cut() {
    let (bytes, original) = small_trace();
    let full = read(&bytes).unwrap();
    assert!(full.layout.complete);
    let chunk_ends: Vec<(u64, u64)> = {
        // (end offset of each events chunk, events up to and including it)
        let mut n = 0;
        full.layout
            .chunks
            .iter()
            .filter(|h| h.kind == ChunkKind::Events)
            .map(|h| {
                n += u64::from(h.event_count);
                (h.end(), n)
            })
            .collect()
    };
    for cut in 0..bytes.len() {
        let prefix = &bytes[..cut];
        match read(prefix) {
            Ok(t) => {
                assert!(!t.layout.complete, "cut at {cut} claims to be complete");
                assert!(
                    t.layout.damage.as_deref().unwrap().contains("byte"),
                    "cut at {cut}"
                );
                let expected = chunk_ends
                    .iter()
                    .filter(|(end, _)| *end <= cut as u64)
                    .map(|(_, n)| *n)
                    .next_back()
                    .unwrap_or(0);
                assert_eq!(t.event_count(), expected, "cut at {cut}");
                assert_eq!(
                    events(&t)[..],
                    original[..expected as usize],
                    "cut at {cut}"
                );
            }
            Err(Error::Empty) => assert_eq!(cut, 0),
            Err(Error::TruncatedHeader { offset }) => {
                assert!(cut < FILE_HEADER_LEN && offset == cut as u64)
            }
            Err(e) => panic!("cut at {cut}: unexpected error {e}"),
        }
    }
}

#[test]
fn a_bit_flip_in_any_byte_is_detected_or_harmless() {
    let (bytes, original) = small_trace();
    let mut detected = 0;
    // One flip per byte, cycling through the bit positions, keeps this fast; every byte of
    // every structure (headers, payloads, index, trailer) gets hit.
    for byte in 0..bytes.len() {
        let bit = byte * 8 + byte % 8;
        let mut damaged = bytes.clone();
        damaged[bit / 8] ^= 1 << (bit % 8);
        match read(&damaged) {
            Err(e) => {
                detected += 1;
                let msg = e.to_string();
                assert!(
                    msg.contains("byte") || msg.contains("not a vramtrace file"),
                    "bit {bit}: error without a location: {msg}"
                );
            }
            // A flip in the trailer's magic turns the file into an unfinished one: everything
            // is still there, and the reader says the file is incomplete.
            Ok(t) => {
                assert_eq!(
                    events(&t),
                    original,
                    "bit {bit} decoded into different events"
                );
                assert!(!t.layout.complete || damaged == bytes, "bit {bit}");
            }
        }
    }
    assert!(
        detected > bytes.len() * 9 / 10,
        "only {detected} flips detected"
    );
}

#[test]
fn salvage_keeps_the_chunks_before_a_corrupt_one() {
    let (bytes, original) = small_trace();
    let layout = read(&bytes).unwrap().layout;
    let third = layout
        .chunks
        .iter()
        .filter(|h| h.kind == ChunkKind::Events)
        .nth(2)
        .unwrap();
    let mut damaged = bytes.clone();
    damaged[third.payload_offset() as usize + 3] ^= 0x10;
    let err = read(&damaged).unwrap_err().to_string();
    assert!(err.contains(&format!("byte {}", third.offset)), "{err}");
    let t = Trace::from_bytes(&damaged, ReadOptions { salvage: true }).unwrap();
    assert!(!t.layout.complete);
    let kept = events(&t);
    assert!(!kept.is_empty() && kept.len() < original.len());
    assert_eq!(kept[..], original[..kept.len()]);
}

#[test]
fn wrong_magic_is_not_a_trace() {
    let (mut bytes, _) = small_trace();
    bytes[1] = b'X';
    assert!(matches!(read(&bytes), Err(Error::NotATrace)));
    assert!(matches!(
        read(b"PK\x03\x04 a zip file"),
        Err(Error::NotATrace)
    ));
}

#[test]
fn a_newer_version_is_refused_with_the_versions_named() {
    let (mut bytes, _) = small_trace();
    bytes[8..10].copy_from_slice(&7u16.to_le_bytes());
    let crc = checksum(&bytes[0..12]);
    bytes[12..16].copy_from_slice(&crc.to_le_bytes());
    let err = read(&bytes).unwrap_err();
    assert!(matches!(
        err,
        Error::NewerVersion {
            found: 7,
            supported: vramtrace_format::chunk::VERSION
        }
    ));
    assert!(err.to_string().contains("upgrade vramtrace"));
}

#[test]
fn an_empty_file_and_a_directory_give_clear_errors() {
    assert!(matches!(read(b""), Err(Error::Empty)));
    let dir = std::env::temp_dir();
    let err = Trace::open(&dir, ReadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("directory"), "{err}");
}

/// The header of an uncompressed chunk at `offset` holding `payload`, correctly checksummed.
fn header(
    offset: u64,
    kind: ChunkKind,
    payload: &[u8],
    raw_len: u32,
    event_count: u32,
) -> ChunkHeader {
    ChunkHeader {
        offset,
        kind,
        compression: Compression::None,
        payload_len: payload.len() as u32,
        raw_len,
        event_count,
        first_seq: 0,
        first_time_ns: 0,
        last_time_ns: 0,
        payload_crc: checksum(payload),
    }
}

/// A file whose only chunk is `kind` with `payload`, correctly checksummed.
fn file_with_chunk(kind: ChunkKind, payload: &[u8], raw_len: u32, event_count: u32) -> Vec<u8> {
    let mut bytes = vramtrace_format::chunk::file_header().to_vec();
    let h = header(bytes.len() as u64, kind, payload, raw_len, event_count);
    bytes.extend_from_slice(&h.to_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

#[test]
fn absurd_declared_lengths_fail_without_allocating_for_them() {
    // A table chunk whose first table (processes) claims 2^60 entries.
    let mut payload = vec![0xFD];
    payload.extend_from_slice(&(1u64 << 60).to_le_bytes());
    let tables = file_with_chunk(ChunkKind::Tables, &payload, payload.len() as u32, 0);
    // An events chunk claiming 2^20 events with four bytes of payload.
    let events = file_with_chunk(ChunkKind::Events, &[0x80, 0x80, 0x40, 0], 4, 1 << 20);
    // An events chunk claiming more events than any chunk may hold.
    let too_many = file_with_chunk(ChunkKind::Events, &[0], 1, u32::MAX);
    for (name, file) in [
        ("tables", tables),
        ("events", events),
        ("too many", too_many),
    ] {
        ALLOC
            .peak
            .store(ALLOC.current.load(Ordering::SeqCst), Ordering::SeqCst);
        let before = ALLOC.current.load(Ordering::SeqCst);
        // The file has no index, so its only chunk is also its last: the reader reports it as
        // the damage that ended the file and recovers nothing, or fails outright.
        let err = match read(&file) {
            Ok(t) => {
                assert_eq!(t.event_count(), 0, "{name}");
                assert!(!t.layout.complete, "{name}");
                t.layout.damage.unwrap()
            }
            Err(e) => e.to_string(),
        };
        let grew = ALLOC.peak.load(Ordering::SeqCst) - before;
        assert!(err.contains("corrupt data at byte"), "{name}: {err}");
        // Fixed costs (a zstd context, the rayon pool) aside, nothing in proportion to the claim.
        assert!(
            grew < 8 << 20,
            "{name}: allocated {grew} bytes for a {}-byte file",
            file.len()
        );
    }
}

#[test]
fn a_chunk_header_cannot_claim_a_payload_past_the_end_of_a_finished_file() {
    let (bytes, _) = small_trace();
    let layout = read(&bytes).unwrap().layout;
    let h = layout.chunks[1];
    let mut damaged = bytes.clone();
    let mut forged = h;
    forged.payload_len = u32::MAX / 2;
    damaged[h.offset as usize..h.offset as usize + CHUNK_HEADER_LEN]
        .copy_from_slice(&forged.to_bytes());
    let err = read(&damaged).unwrap_err().to_string();
    assert!(err.contains("corrupt data at byte"), "{err}");
}

/// Inputs the fuzzer (formats/fuzz) found; each once panicked the reader.
#[test]
fn fuzzer_regressions_give_errors_not_panics() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions");
    for entry in std::fs::read_dir(dir).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        let _ = read(&bytes);
        let _ = Trace::from_bytes(&bytes, ReadOptions { salvage: true });
    }
}

/// `bytes` (a finished file) with its index replaced by one listing the chunks `entries` and
/// a new trailer: every header and checksum matches.
fn with_index(bytes: &[u8], body_end: usize, extra: &[u8], entries: &[ChunkHeader]) -> Vec<u8> {
    let mut out = bytes[..body_end].to_vec();
    out.extend_from_slice(extra);
    let payload: Vec<u8> = entries.iter().flat_map(|h| h.index_entry()).collect();
    let index = header(
        out.len() as u64,
        ChunkKind::Index,
        &payload,
        payload.len() as u32,
        0,
    );
    out.extend_from_slice(&index.to_bytes());
    out.extend_from_slice(&payload);
    out.extend_from_slice(&vramtrace_format::chunk::trailer(index.offset));
    out
}

#[test]
fn an_index_that_lists_an_index_chunk_is_corruption_not_a_panic() {
    let (bytes, original) = small_trace();
    let layout = read(&bytes).unwrap().layout;
    let body_end = layout.chunks.last().unwrap().end() as usize;
    // An empty index-kind chunk among the data chunks, listed by the index like any other.
    let inner = header(body_end as u64, ChunkKind::Index, &[], 0, 0);
    let mut entries = layout.chunks.clone();
    entries.push(inner);
    let forged = with_index(&bytes, body_end, &inner.to_bytes(), &entries);
    let err = read(&forged).unwrap_err().to_string();
    assert!(err.contains("the index lists an index chunk"), "{err}");
    let t = Trace::from_bytes(&forged, ReadOptions { salvage: true }).unwrap();
    assert!(!t.layout.complete);
    assert_eq!(events(&t), original);
}

#[test]
fn salvage_reads_every_data_chunk_when_the_trailer_offset_or_the_index_is_damaged() {
    let (bytes, original) = small_trace();
    let n = bytes.len();
    let mut bad_offset = bytes.clone();
    bad_offset[n - 16..n - 8].copy_from_slice(&u64::MAX.to_le_bytes());
    let mut bad_index = bytes.clone();
    // The last byte of the index payload, just before the trailer: its checksum no longer holds.
    bad_index[n - 17] ^= 0x01;
    for (name, damaged) in [("trailer offset", bad_offset), ("index", bad_index)] {
        let err = read(&damaged).unwrap_err().to_string();
        assert!(err.contains("corrupt data at byte"), "{name}: {err}");
        let t = Trace::from_bytes(&damaged, ReadOptions { salvage: true })
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!t.layout.complete, "{name}");
        let damage = t.layout.damage.clone().unwrap();
        assert!(damage.contains("in file order"), "{name}: {damage}");
        assert_eq!(events(&t), original, "{name}");
    }
}

/// The raw payload of an events chunk of `count` events whose sixteen columns are all `LINEAR`
/// (a constant, known api id): a few dozen bytes whatever `count` is.
fn linear_events_payload(count: u64) -> Vec<u8> {
    let mut raw = Vec::new();
    vramtrace_format::codec::put_uvarint(&mut raw, count);
    for c in 0..vramtrace_format::COLUMNS {
        let start = if vramtrace_format::COLUMN_NAMES[c] == "api" {
            u64::from(vramtrace_format::Api::CuMemAlloc_v2.id())
        } else {
            0
        };
        raw.extend_from_slice(&[0, 2, start as u8, 0]);
    }
    raw
}

#[test]
fn a_chunk_of_linear_columns_cannot_declare_more_events_than_its_bytes_justify() {
    use vramtrace_format::chunk::max_events_in;
    let payload = linear_events_payload(1 << 20);
    // Twenty such chunks: a few kilobytes that once decoded to twenty million events.
    let mut file = vramtrace_format::chunk::file_header().to_vec();
    for _ in 0..20 {
        let h = header(
            file.len() as u64,
            ChunkKind::Events,
            &payload,
            payload.len() as u32,
            1 << 20,
        );
        file.extend_from_slice(&h.to_bytes());
        file.extend_from_slice(&payload);
    }
    ALLOC
        .peak
        .store(ALLOC.current.load(Ordering::SeqCst), Ordering::SeqCst);
    let before = ALLOC.current.load(Ordering::SeqCst);
    let err = read(&file).unwrap_err().to_string();
    assert!(err.contains("events in a"), "{err}");
    let salvaged = Trace::from_bytes(&file, ReadOptions { salvage: true }).unwrap();
    assert_eq!(salvaged.event_count(), 0);
    let grew = ALLOC.peak.load(Ordering::SeqCst) - before;
    assert!(grew < 8 << 20, "allocated {grew} bytes");
    // What a chunk of that size may declare: the reader's work stays a constant per file byte.
    // (Sixteen four-byte columns and a two-byte count.)
    let most = max_events_in(66);
    let allowed = linear_events_payload(most);
    assert_eq!(allowed.len(), 66);
    let fits = file_with_chunk(
        ChunkKind::Events,
        &allowed,
        allowed.len() as u32,
        most as u32,
    );
    let t = Trace::from_bytes(&fits, ReadOptions::default()).unwrap();
    assert_eq!(t.event_count(), most);
}

#[test]
fn the_writer_splits_events_too_regular_for_one_chunk_so_readers_accept_them() {
    use vramtrace_format::{Api, Metadata, TraceWriter, WriterOptions};
    // Every column an arithmetic progression: a 65,536-event chunk would be a few dozen bytes.
    let pushed: Vec<Event> = (1..=100_000u64)
        .map(|i| Event {
            seq: i,
            time_ns: 1_000 * i,
            address: 0x7000_0000_0000,
            size: 4096,
            ..Event::new(Api::CuMemAlloc_v2)
        })
        .collect();
    let mut w =
        TraceWriter::new(Vec::new(), &Metadata::default(), WriterOptions::default()).unwrap();
    for e in &pushed {
        w.push(e).unwrap();
    }
    let bytes = w.finish().unwrap();
    let t = read(&bytes).unwrap();
    assert!(t.layout.complete);
    assert_eq!(events(&t), pushed);
    assert!(
        t.layout
            .chunks
            .iter()
            .filter(|h| h.kind == ChunkKind::Events)
            .count()
            > 2
    );
}

#[test]
fn a_version_1_file_still_reads_with_an_empty_python_frame_table() {
    // Recorded on an H200 by the version-1 recorder (a copy of an earlier bundled sample).
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/v1-torch-mlp-native.vramtrace"
    );
    let trace = Trace::open(std::path::Path::new(path), ReadOptions::default()).unwrap();
    assert_eq!(trace.layout.version, 1);
    assert!(trace.layout.complete);
    assert_eq!(trace.event_count(), 51);
    assert_eq!(trace.tables.devices[0].name, "NVIDIA H200");
    assert!(trace.tables.python_frames.is_empty());
}

#[test]
fn a_version_2_file_still_reads_and_the_current_writer_stores_it_smaller_and_unchanged() {
    use vramtrace_format::{TraceWriter, WriterOptions};
    // Recorded on an H200 by the version-2 recorder with Python stacks (a copy of the bundled
    // sample `torch-mlp-requests`).
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/v2-torch-mlp-requests.vramtrace"
    );
    let old = std::fs::read(path).unwrap();
    let trace = read(&old).unwrap();
    assert_eq!(trace.layout.version, 2);
    assert!(trace.layout.complete);
    assert_eq!(trace.event_count(), 4488);
    assert!(!trace.tables.python_frames.is_empty());
    // Through the current writer, one chunk per recorded events chunk.
    let mut w = TraceWriter::new(Vec::new(), &trace.metadata, WriterOptions::default()).unwrap();
    *w.tables_mut() = trace.tables.clone();
    for batch in &trace.batches {
        batch.iter().for_each(|e| w.push(&e).unwrap());
        w.flush().unwrap();
    }
    let new = w.finish().unwrap();
    let again = read(&new).unwrap();
    assert_eq!(again.layout.version, vramtrace_format::chunk::VERSION);
    assert_eq!(again.tables, trace.tables);
    assert!(again.events().eq(trace.events()));
    assert!(
        new.len() * 10 < old.len() * 9,
        "{} against {}",
        new.len(),
        old.len()
    );
}

#[test]
fn python_frames_round_trip_through_a_current_file() {
    use vramtrace_format::{PythonFrame, Stack, TraceWriter, WriterOptions};
    let s = vramtrace_format::synthetic::pytorch_like(1, 3);
    let mut w = TraceWriter::new(Vec::new(), &s.metadata, WriterOptions::default()).unwrap();
    let frame = PythonFrame {
        id: 9_000,
        file: "/work/tränïng.py".into(),
        function: "Model.forward".into(),
        line: 57,
        module: "tränïng".into(),
    };
    let mut tables = s.tables.clone();
    tables.python_frames.push(frame.clone());
    tables.stacks.push(Stack {
        id: 9_000,
        frames: vec![9_000, 1],
    });
    *w.tables_mut() = tables;
    for e in &s.events {
        w.push(e).unwrap();
    }
    let trace = read(&w.finish().unwrap()).unwrap();
    assert_eq!(trace.layout.version, vramtrace_format::chunk::VERSION);
    assert_eq!(trace.tables.python_frames, std::slice::from_ref(&frame));
    let index = trace.tables.frame_index();
    assert_eq!(index[&9_000], vramtrace_format::FrameRef::Python(&frame));
    assert!(matches!(index[&1], vramtrace_format::FrameRef::Native(_)));
}
