//! `vramtrace info`.

use crate::args::TraceView;
use crate::load::stream_trace;
use anyhow::Result;
use std::fmt::Write as _;
use std::path::Path;
use vramtrace::info::{EventTally, TraceInfo};
use vramtrace::units::{bytes, count, duration};

/// Describe a trace file: what wrote it, how many calls of which function, its size.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  vramtrace info run.vramtrace
  vramtrace info --json run.vramtrace
  vramtrace info --salvage damaged.vramtrace")]
pub struct Args {
    #[command(flatten)]
    view: TraceView,
}

impl Args {
    pub fn run(self) -> Result<()> {
        let v = &self.view;
        // Counted as the chunks decode: memory does not grow with the trace.
        let mut tally = EventTally::default();
        let head = stream_trace(
            &v.trace,
            v.salvage,
            |b| EventTally::of(&b),
            |t| tally.add(t),
        )?;
        let info = TraceInfo::of(&head, tally);
        crate::output::json_or_text(v.json, &info, |info| render(&v.trace, info))
    }
}

fn render(path: &Path, i: &TraceInfo) -> String {
    let mut s = String::new();
    let state = if i.complete { "complete" } else { "INCOMPLETE" };
    let _ = writeln!(
        s,
        "trace        {} ({}, format {}, {state})",
        path.display(),
        bytes(i.file_bytes),
        i.format_version
    );
    if let Some(d) = &i.damage {
        let _ = writeln!(s, "damage       {d}");
    }
    let driver = match i.driver_version {
        0 => "driver unknown".to_string(),
        v => format!("driver {}.{}", v / 1000, v % 1000 / 10),
    };
    let _ = writeln!(
        s,
        "written by   {} on {}, {driver}",
        or_unknown(&i.writer),
        or_unknown(&i.host)
    );
    let _ = writeln!(s, "level        {}", i.capture_level_shown);
    if !i.allocator.is_empty() {
        let _ = writeln!(s, "allocator    {}", i.allocator);
    }
    let _ = writeln!(
        s,
        "events       {} ({} failed) over {}, {:.2} bytes/event in {} chunks",
        count(i.events),
        count(i.failed_calls),
        duration(i.duration_ns),
        i.bytes_per_event,
        i.chunks
    );
    for p in &i.processes {
        let _ = writeln!(
            s,
            "process      {} (parent {}): {} events: {}",
            p.pid,
            p.parent_pid,
            count(p.events),
            p.command_line.join(" ")
        );
    }
    for d in &i.devices {
        let _ = writeln!(
            s,
            "device       {}: {} ({}, compute {})",
            d.ordinal,
            d.name,
            bytes(d.total_memory),
            d.compute_capability
        );
    }
    let _ = writeln!(
        s,
        "threads      {}   streams {}   stacks {}   modules {}",
        i.threads, i.streams, i.stacks, i.modules
    );
    for (k, v) in &i.environment {
        let _ = writeln!(s, "environment  {k}={v}");
    }
    if !i.by_api.is_empty() {
        let _ = writeln!(s, "calls");
        let width = i.by_api.keys().map(String::len).max().unwrap_or(0);
        let mut apis: Vec<_> = i.by_api.iter().collect();
        apis.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (api, n) in apis {
            let _ = writeln!(s, "  {api:<width$}  {:>12}", count(*n));
        }
    }
    s
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "unknown" } else { s }
}
