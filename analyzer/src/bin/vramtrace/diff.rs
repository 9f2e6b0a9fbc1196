//! `vramtrace diff`.

use crate::elf_files::ElfFiles;
use crate::incomplete::Flagged;
use crate::load::load_trace;
use anyhow::Result;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use vramtrace::diff::{Diff, Pair, StackDelta};
use vramtrace::summary::Summary;
use vramtrace::symbolize::short_frame;
use vramtrace::units::{bytes, count};
use vramtrace_format::Trace;

/// Two runs side by side: peaks, and the stacks whose bytes at the peak grew or shrank most.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  vramtrace diff fp32.vramtrace amp.vramtrace
  vramtrace diff --json before.vramtrace after.vramtrace")]
pub struct Args {
    /// The baseline trace.
    a: PathBuf,
    /// The trace compared with it.
    b: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

impl Args {
    pub fn run(self) -> Result<()> {
        let (a, b) = (&self.a, &self.b);
        let (ta, tb) = (load_trace(a, false)?, load_trace(b, false)?);
        let diff = compare(&ta, &tb);
        let flagged = Flagged::new(
            &diff,
            &[(a.as_path(), &ta.layout), (b.as_path(), &tb.layout)],
        );
        crate::output::json_or_text(self.json, &flagged, |f| render(a, b, f.report))
    }
}

/// Trace `a` against `b`, every stack at each peak, native frames named from the modules' files
/// as `summary` and `report` name them.
pub fn compare(a: &Trace, b: &Trace) -> Diff {
    let (sa, sb) = rayon::join(
        || Summary::with_files(a, usize::MAX, &mut ElfFiles::new()),
        || Summary::with_files(b, usize::MAX, &mut ElfFiles::new()),
    );
    Diff::of(&sa, &sb)
}

fn signed_bytes(d: i128) -> String {
    let sign = if d < 0 { "-" } else { "+" };
    format!(
        "{sign}{}",
        bytes(d.unsigned_abs().min(u128::from(u64::MAX)) as u64)
    )
}

fn percent(p: &Pair) -> String {
    if p.a == 0 {
        return String::new();
    }
    format!(" ({:+.1}%)", p.delta as f64 * 100.0 / p.a as f64)
}

pub fn render(a: &Path, b: &Path, d: &Diff) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "A  {} ({} events)", a.display(), count(d.a.events));
    let _ = writeln!(o, "B  {} ({} events)", b.display(), count(d.b.events));
    if d.a.capture_level != d.b.capture_level {
        let _ = writeln!(
            o,
            "note: capture levels differ (A {:?}, B {:?}); peaks compare different things",
            d.a.capture_level, d.b.capture_level
        );
    }
    for g in &d.groups {
        let place = if g.device < 0 {
            "host memory".to_string()
        } else {
            format!("device {}", g.device)
        };
        let pid = |p: Option<u32>| p.map_or("-".to_string(), |p| p.to_string());
        let _ = writeln!(
            o,
            "\nprocess #{} (A pid {}, B pid {}) · {place}",
            g.process_index + 1,
            pid(g.pid_a),
            pid(g.pid_b)
        );
        let _ = writeln!(o, "  {:<16} {:>12} {:>12} {:>14}", "", "A", "B", "B − A");
        for (name, p, is_bytes) in [
            ("peak requested", &g.peak_requested, true),
            ("peak reserved", &g.peak_reserved, true),
            ("live at end", &g.leaked_bytes, true),
            ("allocations", &g.allocations, false),
            ("failed", &g.failed, false),
        ] {
            let (x, y, dd) = if is_bytes {
                (bytes(p.a), bytes(p.b), signed_bytes(p.delta))
            } else {
                (count(p.a), count(p.b), format!("{:+}", p.delta))
            };
            let _ = writeln!(o, "  {name:<16} {x:>12} {y:>12} {dd:>14}{}", percent(p));
        }
        section(&mut o, "grew most at the peak", &g.grew);
        section(&mut o, "shrank most at the peak", &g.shrank);
    }
    o
}

/// The stacks of `list` under `title`, each by its bytes in A and B and its first frames.
pub fn section(o: &mut String, title: &str, list: &[StackDelta]) {
    if list.is_empty() {
        return;
    }
    let _ = writeln!(o, "  {title}");
    for s in list {
        let first = s
            .frames
            .first()
            .map_or("<no stack>".into(), |f| short_frame(f));
        let _ = writeln!(
            o,
            "    {:>12}  ({} → {})  {first}",
            signed_bytes(s.delta),
            bytes(s.bytes_a),
            bytes(s.bytes_b)
        );
        for fr in s.frames.iter().skip(1).take(2) {
            let _ = writeln!(o, "    {:>12}                 {}", "", short_frame(fr));
        }
    }
}
