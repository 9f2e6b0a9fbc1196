//! RMM's memory-event log: the CSV that `rmm::mr::logging_resource_adaptor` (Python
//! `rmm.mr.LoggingResourceAdaptor`) writes and RMM's `REPLAY_BENCHMARK` reads.
//!
//! Format (`rapidsai/rmm` `cpp/src/mr/detail/logging_resource_adaptor_impl.cpp`): a header line
//! `Thread,Time,Action,Pointer,Size,Stream`, then one line per call, written with the pattern
//! `%t,%H:%M:%S.%f,%v` (thread id, wall-clock time of day with microseconds) and the message
//! `allocate,%p,%zu,STREAM`, `allocate failure,%p,%zu,STREAM` or `free,%p,%zu,STREAM`. The
//! stream is printed in hex. A log describes one memory resource: the requests of one
//! allocator instance, which is what a request-level trace holds.
//!
//! Reading also accepts what RMM's own documentation shows (`docs/user_guide/logging.md`):
//! `deallocate` for `free`, and a time in seconds since the epoch.

use crate::model::{RequestKind, RequestStream};
use std::fmt::Write as _;
use vramtrace_format::{Api, Event, Metadata};

/// The header RMM writes first.
pub const HEADER: &str = "Thread,Time,Action,Pointer,Size,Stream";

/// `CUDA_ERROR_OUT_OF_MEMORY`: an `allocate failure` becomes a refused `cuMemAllocAsync`.
const CUDA_ERROR_OUT_OF_MEMORY: u32 = 2;

const DAY_NS: u64 = 86_400 * 1_000_000_000;

#[derive(Debug, thiserror::Error)]
pub enum RmmLogError {
    #[error("not an RMM log: the first line is not `{HEADER}`")]
    NoHeader,
    #[error("line {line}: {what}")]
    Line { line: usize, what: String },
}

/// A log read into events, and what it held.
#[derive(Debug, Clone)]
pub struct Imported {
    pub metadata: Metadata,
    pub events: Vec<Event>,
    pub allocations: u64,
    pub frees: u64,
    pub failures: u64,
}

/// True when `text` starts with RMM's header (the way `import` tells a log from a pickle).
pub fn looks_like(text: &[u8]) -> bool {
    text.strip_prefix(b"\xef\xbb\xbf")
        .unwrap_or(text)
        .starts_with(HEADER.as_bytes())
}

/// Parses a log into request-level events: `cuMemAllocAsync` / `cuMemFreeAsync` on the logged
/// stream, a failure as a `cuMemAllocAsync` that returned `CUDA_ERROR_OUT_OF_MEMORY`. Times are
/// made relative to the first line; a time of day that goes backwards crossed midnight.
pub fn read(text: &str) -> Result<Imported, RmmLogError> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if h.trim_start_matches('\u{feff}').trim() == HEADER => {}
        _ => return Err(RmmLogError::NoHeader),
    }
    let mut out = Imported {
        metadata: Metadata {
            writer: format!("vramtrace {} import (RMM log)", env!("CARGO_PKG_VERSION")),
            host: String::new(),
            driver_version: 0,
            environment: Vec::new(),
            capture_level: "request".into(),
        },
        events: Vec::new(),
        allocations: 0,
        frees: 0,
        failures: 0,
    };
    let (mut first, mut last, mut days) = (None, 0u64, 0u64);
    for (n, line) in lines {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let bad = |what: String| RmmLogError::Line { line: n + 1, what };
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let [thread, time, action, pointer, size, stream] = f[..] else {
            return Err(bad(format!("expected 6 fields, found {}", f.len())));
        };
        let mut t = parse_time(time).ok_or_else(|| bad(format!("time `{time}`")))?;
        if first.is_some() && t + days * DAY_NS + DAY_NS / 2 < last {
            days += 1;
        }
        t += days * DAY_NS;
        last = t;
        let t0 = *first.get_or_insert(t);
        let (api, result) = match action {
            "allocate" => (Api::CuMemAllocAsync, 0),
            "allocate failure" => (Api::CuMemAllocAsync, CUDA_ERROR_OUT_OF_MEMORY),
            "free" | "deallocate" => (Api::CuMemFreeAsync, 0),
            other => return Err(bad(format!("action `{other}`"))),
        };
        match (api, result) {
            (Api::CuMemFreeAsync, _) => out.frees += 1,
            (_, 0) => out.allocations += 1,
            _ => out.failures += 1,
        }
        let thread: u64 = thread
            .parse()
            .map_err(|_| bad(format!("thread `{thread}`")))?;
        out.events.push(Event {
            seq: out.events.len() as u64 + 1,
            time_ns: t - t0,
            pid: 1,
            // Thread ids are 64-bit pthread ids or OS ids; the trace keeps 32 bits.
            tid: thread as u32,
            device: 0,
            result,
            address: if result == 0 {
                parse_hex(pointer).ok_or_else(|| bad(format!("pointer `{pointer}`")))?
            } else {
                0
            },
            size: size.parse().map_err(|_| bad(format!("size `{size}`")))?,
            stream: parse_hex(stream).ok_or_else(|| bad(format!("stream `{stream}`")))?,
            ..Event::new(api)
        });
    }
    Ok(out)
}

/// `HH:MM:SS.ffffff` (RMM's pattern) or seconds since the epoch with a fraction, in ns.
fn parse_time(s: &str) -> Option<u64> {
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let frac_ns: u64 = format!("{frac:0<9}").parse().ok()?;
    let secs = if whole.contains(':') {
        let p: Vec<u64> = whole
            .split(':')
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        let [h, m, s] = p[..] else { return None };
        (h * 60 + m) * 60 + s
    } else {
        whole.parse().ok()?
    };
    secs.checked_mul(1_000_000_000)?.checked_add(frac_ns)
}

/// `0x7f…`, bare hex, or `(nil)` / `nil` for a null pointer (what `%p` prints for one).
fn parse_hex(s: &str) -> Option<u64> {
    if matches!(s, "(nil)" | "nil" | "0") {
        return Some(0);
    }
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    u64::from_str_radix(digits, 16).ok()
}

/// What [`write`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    pub allocations: u64,
    pub frees: u64,
    pub failures: u64,
}

/// Writes one request stream (one allocator instance) as RMM's log, in request order, so
/// RMM's replay benchmark or a Python replay through real RMM resources serves exactly what
/// `vramtrace replay` serves. A pointer names the object (a distinct value per live object,
/// `0x10000000000 + 4 KiB × slot`), not the address the program saw: the replay gives the
/// addresses. Times are the requests' offsets from the trace's first event, as a time of day.
pub fn write(stream: &RequestStream, out: &mut String) -> Written {
    let mut w = Written::default();
    out.push_str(HEADER);
    out.push('\n');
    let handle = |i: u32| stream.cuda_streams.get(i as usize).copied().unwrap_or(0);
    // The stream a live slot was allocated on: RMM logs a free with the stream it is freed on,
    // which for a request-level trace is the allocation's.
    let mut on = vec![0u64; stream.slots as usize];
    for r in &stream.requests {
        let us = r.time_ns / 1000;
        let (h, m, s, f) = (
            us / 3_600_000_000 % 24,
            us / 60_000_000 % 60,
            us / 1_000_000 % 60,
            us % 1_000_000,
        );
        let pointer = 0x100_0000_0000u64 + u64::from(r.slot) * 4096;
        let (action, pointer, st) = match r.kind {
            RequestKind::Alloc => {
                w.allocations += 1;
                on[r.slot as usize] = handle(r.stream);
                ("allocate", pointer, handle(r.stream))
            }
            RequestKind::Free => {
                w.frees += 1;
                ("free", pointer, on[r.slot as usize])
            }
            RequestKind::Attempt => {
                w.failures += 1;
                ("allocate failure", 0, handle(r.stream))
            }
            // RMM's log has no such action.
            RequestKind::EmptyCache | RequestKind::MemoryFraction | RequestKind::Order(_) => {
                continue;
            }
        };
        let _ = writeln!(
            out,
            "1,{h:02}:{m:02}:{s:02}.{f:06},{action},{pointer:#x},{},{st:#x}",
            r.size
        );
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Model, Request};

    #[test]
    fn rmm_lines_become_stream_ordered_requests() {
        let log = "Thread,Time,Action,Pointer,Size,Stream\n\
                   140,23:59:59.999000,allocate,0x7f0000000000,1024,0x0\n\
                   140,23:59:59.999500,allocate failure,(nil),99999999999,0x5a\n\
                   140,00:00:00.000250,free,0x7f0000000000,1024,0x0\n";
        let imp = read(log).unwrap();
        assert_eq!((imp.allocations, imp.failures, imp.frees), (1, 1, 1));
        let e = &imp.events;
        assert_eq!(e[0].api, Api::CuMemAllocAsync);
        assert_eq!(
            (e[0].address, e[0].size, e[0].tid),
            (0x7f00_0000_0000, 1024, 140)
        );
        assert_eq!((e[1].result, e[1].stream), (CUDA_ERROR_OUT_OF_MEMORY, 0x5a));
        assert_eq!(e[2].api, Api::CuMemFreeAsync);
        // Midnight passed between the second and third lines: 1.25 ms after the first.
        assert_eq!(e[2].time_ns, 1_250_000);
        assert_eq!(imp.metadata.capture_level, "request");
    }

    #[test]
    fn the_documented_variant_reads_too_and_bad_lines_name_their_number() {
        let log = "Thread,Time,Action,Pointer,Size,Stream\n\
                   7,1634567890.123456,allocate,0x7f8a40000000,2048,0x7f8a38001020\n\
                   7,1634567890.345678,deallocate,0x7f8a40000000,2048,0x7f8a38001020\n";
        let imp = read(log).unwrap();
        assert_eq!(imp.events[1].time_ns, 222_222_000);
        assert_eq!(imp.events[1].stream, 0x7f8a_3800_1020);
        let err = read("Thread,Time,Action,Pointer,Size,Stream\n1,00:00:01.0,grow,0x1,2,0x0\n");
        assert_eq!(err.unwrap_err().to_string(), "line 2: action `grow`");
        assert!(matches!(read("action,addr\n"), Err(RmmLogError::NoHeader)));
        assert!(looks_like(HEADER.as_bytes()) && !looks_like(b"\x80\x04"));
    }

    #[test]
    fn a_written_log_reads_back_as_the_same_requests() {
        let mut requests = vec![
            Request::alloc(0, 4096, 0),
            Request::alloc(1, 1 << 20, 1),
            Request::free(0, 4096),
            Request::alloc(0, 512, 1),
            Request::free(1, 1 << 20),
        ];
        requests[4].time_ns = 3_723_000_004_000; // 1 h 2 min 3.000004 s
        let mut stream = RequestStream::from_requests(requests.clone());
        stream.cuda_streams = vec![0, 0xabc];
        let mut text = String::new();
        let w = write(&stream, &mut text);
        assert_eq!((w.allocations, w.frees, w.failures), (3, 2, 0));
        assert!(text.contains("1,01:02:03.000004,free,0x10000001000,1048576,0xabc\n"));
        let imp = read(&text).unwrap();
        let model = Model::from_events(imp.events, &imp.metadata);
        let back = &model.streams[0];
        assert_eq!(back.cuda_streams, vec![0, 0xabc]);
        let strip = |r: &[Request]| -> Vec<(RequestKind, u64, u32)> {
            r.iter().map(|r| (r.kind, r.size, r.stream)).collect()
        };
        let mut want = strip(&requests);
        // A free is logged, and read back, on the stream its object was allocated on.
        want[4].2 = 1;
        assert_eq!(strip(&back.requests), want);
    }
}
