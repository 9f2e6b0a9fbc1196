//! Where a trace's bytes go, and what the current writer makes of it.
//!
//! `cargo run --release -p vramtrace-format --example trace_bytes -- TRACE [OUT]`
//!
//! Prints the bytes of each chunk kind (headers included), of each event column (its share of
//! the events chunks' payload, compressed alone at the writer's zstd level: an estimate, since
//! the writer compresses all columns of a chunk together) and of each table (encoded alone,
//! then compressed alone). With `OUT`, also re-writes the trace through this crate's writer
//! chunk for chunk as the trace was written (the same table entries before the same events, a
//! chunk where each events chunk ended) and prints the new size: the measurement
//! `recorder/BENCHMARKS.md` quotes for the trace-size target, since a recorder that wrote the
//! same events would have cut the same chunks.

use std::collections::BTreeMap;
use vramtrace_format::chunk::{CHUNK_HEADER_LEN, ChunkKind};
use vramtrace_format::codec::{self, Compressor, Cursor};
use vramtrace_format::{
    COLUMN_NAMES, MappedFile, ReadOptions, Tables, Trace, TraceWriter, WriterOptions,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: trace_bytes TRACE [OUT]")?;
    let out = args.next();
    let file = MappedFile::open(path.as_ref())?;
    let bytes = file.bytes();
    let trace = Trace::from_bytes(bytes, ReadOptions::default())?;
    let events = trace.event_count().max(1) as f64;
    let mut zstd = Compressor::new(WriterOptions::default().zstd_level)?;
    let mut packed = Vec::new();
    let mut compressed = |raw: &[u8]| -> Result<usize, std::io::Error> {
        zstd.compress(raw, &mut packed)?;
        Ok(packed.len().min(raw.len()))
    };

    println!(
        "{path}: format v{}, {} bytes, {} events, {:.2} bytes/event",
        trace.layout.version,
        bytes.len(),
        trace.event_count(),
        bytes.len() as f64 / events
    );
    let mut kinds: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut columns = [(0usize, 0usize); COLUMN_NAMES.len()];
    let mut scratch = Vec::new();
    for h in &trace.layout.chunks {
        let k = kinds.entry(format!("{:?}", h.kind)).or_default();
        k.0 += 1;
        k.1 += CHUNK_HEADER_LEN + h.payload_len as usize;
        if h.kind != ChunkKind::Events {
            continue;
        }
        let raw = h.payload(bytes, &mut scratch)?.to_vec();
        let mut cur = Cursor::new(&raw);
        cur.uvarint().map_err(|e| format!("{e:?}"))?;
        for c in &mut columns {
            let start = cur.position();
            cur.u8().map_err(|e| format!("{e:?}"))?;
            let len = cur.uvarint().map_err(|e| format!("{e:?}"))? as usize;
            let data = cur.take(len).map_err(|e| format!("{e:?}"))?;
            c.0 += cur.position() - start;
            c.1 += compressed(data)? + (cur.position() - start - len);
        }
    }
    let others = bytes.len() - kinds.values().map(|k| k.1).sum::<usize>();
    println!("\nchunks            count      bytes  bytes/event");
    for (kind, (n, b)) in &kinds {
        println!("{kind:16} {n:6} {b:10} {:12.3}", *b as f64 / events);
    }
    println!(
        "{:16} {:6} {others:10} {:12.3}",
        "file header etc",
        "",
        others as f64 / events
    );
    // A column compressed on its own (version 3) is counted as stored.
    println!("\nevent column     stored   alone zstd  bytes/event");
    for (name, (raw, z)) in COLUMN_NAMES.iter().zip(columns) {
        println!("{name:12} {raw:10} {z:12} {:12.3}", z as f64 / events);
    }
    let t = &trace.tables;
    let tables: [(&str, usize, Vec<u8>); 9] = [
        (
            "processes",
            t.processes.len(),
            codec::encode_value(&t.processes),
        ),
        ("threads", t.threads.len(), codec::encode_value(&t.threads)),
        ("devices", t.devices.len(), codec::encode_value(&t.devices)),
        ("streams", t.streams.len(), codec::encode_value(&t.streams)),
        ("pools", t.pools.len(), codec::encode_value(&t.pools)),
        ("stacks", t.stacks.len(), codec::encode_value(&t.stacks)),
        ("frames", t.frames.len(), codec::encode_value(&t.frames)),
        ("modules", t.modules.len(), codec::encode_value(&t.modules)),
        (
            "python_frames",
            t.python_frames.len(),
            codec::encode_value(&t.python_frames),
        ),
    ];
    println!("\ntable          entries        raw   alone zstd  bytes/event");
    for (name, n, raw) in &tables {
        let z = compressed(raw)?;
        println!(
            "{name:14} {n:7} {:10} {z:12} {:12.3}",
            raw.len(),
            z as f64 / events
        );
    }

    if let Some(out) = out {
        let n = rewrite(&trace, bytes, &out)?;
        let again = Trace::open(out.as_ref(), ReadOptions::default())?;
        let same = again.tables == trace.tables
            && again.metadata == trace.metadata
            && again.events().eq(trace.events());
        println!(
            "\nre-written: {out}: {n} bytes, {:.2} bytes/event; read back {}",
            n as f64 / events,
            if same {
                "identical (metadata, tables, events)"
            } else {
                "DIFFERENT"
            }
        );
        if !same {
            return Err("the re-written trace reads back differently".into());
        }
    }
    Ok(())
}

/// Writes `trace` to `out` through this crate's writer chunk for chunk as it was written: the
/// same table entries before the same events, a flush where each events chunk ended, the
/// metadata chunks in their places. Returns the bytes written.
fn rewrite(trace: &Trace, bytes: &[u8], out: &str) -> Result<u64, Box<dyn std::error::Error>> {
    let sink = std::io::BufWriter::new(std::fs::File::create(out)?);
    let mut w = TraceWriter::new(sink, &trace.metadata, WriterOptions::default())?;
    let mut batches = trace.batches.iter();
    let mut scratch = Vec::new();
    let mut metadata_chunks = 0;
    for h in &trace.layout.chunks {
        match h.kind {
            // The first metadata chunk is the one `TraceWriter::new` writes.
            ChunkKind::Metadata => {
                metadata_chunks += 1;
                if metadata_chunks > 1 {
                    w.set_metadata(&trace.metadata)?;
                }
            }
            ChunkKind::Tables if trace.layout.version >= 2 => {
                let raw = h.payload(bytes, &mut scratch)?;
                let delta: Tables = codec::decode_value(raw, h.payload_offset())?;
                w.tables_mut().extend(delta);
            }
            // Version 1 tables lack a table the current layout has: all of them up front.
            ChunkKind::Tables => {
                if w.events_pushed() == 0 && w.tables_mut().is_empty() {
                    *w.tables_mut() = trace.tables.clone();
                }
            }
            ChunkKind::Events => {
                let batch = batches.next().ok_or("fewer event batches than chunks")?;
                for e in batch.iter() {
                    w.push(&e)?;
                }
                w.flush()?;
            }
            ChunkKind::Index => {}
        }
    }
    w.finish()?;
    Ok(std::fs::metadata(out)?.len())
}
