//! The text of an out-of-memory story ([`super::OomStory`]): one screen, ending with the line
//! to paste. `summary` prints it; the report shows the same text in its card.

use super::OomStory;
use crate::units::{bytes, duration};
use std::fmt::Write as _;

/// The story as `summary` prints it, starting with an empty line.
pub fn render(s: &OomStory) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "\nOOM story: process {} device {}, request #{} at {}",
        s.pid,
        s.device,
        s.request_index,
        duration(s.time_ns)
    );
    let line = if s.site.is_empty() {
        "<no stack>"
    } else {
        s.site.as_str()
    };
    let _ = writeln!(
        o,
        "  asked      {} on stream {:#x} at {line}",
        bytes(s.size),
        s.stream
    );
    let _ = writeln!(
        o,
        "  live       {} requested, by line:",
        bytes(s.live_requested)
    );
    for l in &s.live_by_line {
        let site = if l.site.is_empty() {
            "<no stack>"
        } else {
            l.site.as_str()
        };
        let _ = writeln!(o, "    {:>12} {:>7}×  {site}", bytes(l.bytes), l.count);
    }
    if let Some(c) = &s.cache {
        let verdict = if s.served_within.is_none() {
            "replayed without the limit that refused it, which the trace does not record".into()
        } else if c.fragmentation {
            format!(
                "fragmentation: enough free in the cache, but no free block of {}",
                bytes(s.size)
            )
        } else if c.largest_free_block >= s.size {
            "a free block was large enough: the allocator's rules kept it from this request"
                .to_string()
        } else {
            "not fragmentation: the cache had less free than asked".to_string()
        };
        let _ = writeln!(
            o,
            "  cache      {} reserved by {}, {} of it cached but free, the largest free block {}: {verdict}",
            bytes(c.reserved),
            c.policy,
            bytes(c.cached_free),
            bytes(c.largest_free_block)
        );
        for seg in &c.segments {
            let _ = writeln!(
                o,
                "    segment {:#x} of {}: {} free, largest free block {}",
                seg.address,
                bytes(seg.size),
                bytes(seg.free),
                bytes(seg.largest_free_block)
            );
        }
    }
    if let Some(l) = &s.limit {
        let cap = match (l.cap_bytes, l.fraction) {
            (Some(c), Some(f)) => format!(
                "PyTorch may reserve {} (set_per_process_memory_fraction({f}))",
                bytes(c)
            ),
            _ => "no memory fraction set".to_string(),
        };
        let device = l
            .device_total
            .map_or(String::new(), |t| format!(" of a {} device", bytes(t)));
        let free = match (l.free_on_device, &l.verdict) {
            (Some(f), Some(v)) => format!("; {} free on the device: {v}", bytes(f)),
            _ => String::new(),
        };
        let _ = writeln!(o, "  limit      {cap}{device}{free}");
    }
    let within = match s.served_within {
        Some(w) => format!("under the same cap ({})", bytes(w)),
        None => "judged: the trace does not record the limit that refused it (record with \
                 this vramtrace to capture a memory fraction)"
            .into(),
    };
    match (s.served_by.first(), &s.smallest) {
        (Some(_), _) => {
            let _ = writeln!(
                o,
                "  served by  {} setting(s) {within}, best first:",
                s.served_by.len()
            );
            for x in s.served_by.iter().take(3) {
                let room = x
                    .headroom
                    .map_or(String::new(), |h| format!(", {} to spare", bytes(h)));
                let _ = writeln!(
                    o,
                    "    {}: pool peak {}{room}",
                    x.setting,
                    bytes(x.pool_peak_reserved)
                );
            }
        }
        (None, Some(m)) => {
            let more = if m.memory_fraction.is_none() {
                ", more than this device has"
            } else {
                ""
            };
            let _ = writeln!(
                o,
                "  served by  no selectable setting {within}; {} needs {}{more}",
                m.policy,
                bytes(m.capacity_bytes)
            );
        }
        (None, None) => {
            let _ = writeln!(o, "  served by  nothing found {within}");
        }
    }
    if let Some(p) = &s.paste {
        let _ = writeln!(o, "  paste      {p}");
    }
    o
}
