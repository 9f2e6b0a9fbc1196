//! The densest trace the writer makes: events so regular that every column is a progression or
//! a constant, so a chunk of 4,096 events stores in about a hundred bytes (27 events per file
//! byte). The input of the commands' bound on decoded events per file byte, of its tests and of
//! the memory figures in docs/reliability.md ("Bounded on any input: reading").

use crate::api::Api;
use crate::event::Event;
use crate::metadata::Metadata;
use crate::writer::{TraceWriter, WriterOptions};

/// Events per chunk: the most a chunk may hold whatever its size (`chunk::FREE_CHUNK_EVENTS`).
const CHUNK_EVENTS: u32 = crate::chunk::FREE_CHUNK_EVENTS as u32;

/// Allocation `i` of the dense trace (from 0): 4 KiB at `1 GiB + i × 4 KiB` on device 0,
/// 1 µs after the previous one, never freed.
pub fn event(i: u64) -> Event {
    Event {
        seq: i + 1,
        time_ns: 1_000 * (i + 1),
        address: (1 << 30) + (i << 12),
        size: 4096,
        ..Event::new(Api::CuMemAlloc_v2)
    }
}

/// A finished trace of `events` dense allocations ([`event`]) in chunks of 4,096.
pub fn trace(events: u64) -> Vec<u8> {
    let options = WriterOptions {
        chunk_events: CHUNK_EVENTS,
        ..WriterOptions::default()
    };
    let metadata = Metadata {
        writer: "vramtrace dense".into(),
        ..Metadata::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &metadata, options).expect("a Vec takes any write");
    for i in 0..events {
        w.push(&event(i)).expect("a Vec takes any write");
    }
    w.finish().expect("a Vec takes any write")
}
