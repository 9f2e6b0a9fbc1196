//! `vramtrace import`: a PyTorch memory snapshot (pickle) to a `.vramtrace` trace.

use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use vramtrace::interop::import_snapshot::{self, Imported};
use vramtrace::units::count;
use vramtrace_format::{TraceWriter, WriterOptions, pickle};

/// Convert a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) into a trace.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  vramtrace import snapshot.pickle -o run.vramtrace
  vramtrace summary run.vramtrace")]
pub struct Args {
    /// The snapshot pickle (protocols 2 to 5).
    snapshot: PathBuf,
    /// The trace to write.
    #[arg(short, long)]
    output: PathBuf,
}

impl Args {
    pub fn run(self) -> Result<()> {
        let (snapshot, output) = (&self.snapshot, &self.output);
        let name = snapshot.display().to_string();
        let bytes = std::fs::read(snapshot).with_context(|| name.clone())?;
        let doc = pickle::read(&bytes).with_context(|| name.clone())?;
        let imported = import_snapshot::import(&doc, &name).with_context(|| name.clone())?;
        // A failed import leaves no half trace.
        let tmp = output.with_extension("vramtrace.partial");
        crate::output::write_via(output, &tmp, |tmp| {
            write_to(&imported, tmp).with_context(|| output.display().to_string())
        })?;
        crate::output::print(&render(&name, output, &imported))
    }
}

fn write_to(imp: &Imported, tmp: &Path) -> Result<()> {
    let file = std::fs::File::create(tmp)?;
    let mut w = TraceWriter::new(
        std::io::BufWriter::new(file),
        &imp.metadata,
        WriterOptions::default(),
    )?;
    w.tables_mut().extend(imp.tables.clone());
    for e in &imp.events {
        w.push(e)?;
    }
    let out = w.finish()?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(())
}

fn render(source: &str, output: &Path, imp: &Imported) -> String {
    let r = &imp.report;
    let mut s = String::new();
    let entries: u64 = r.actions.values().sum();
    let _ = writeln!(
        s,
        "imported {} trace entries on {} device(s) from {source}",
        count(entries),
        r.devices
    );
    let actions: Vec<String> = r
        .actions
        .iter()
        .map(|(a, n)| format!("{a} {}", count(*n)))
        .collect();
    if !actions.is_empty() {
        let _ = writeln!(s, "  actions      {}", actions.join(", "));
    }
    if r.preexisting > 0 {
        let _ = writeln!(
            s,
            "  before       {} allocations were live before the first entry (max_entries ring); \
             added at the start",
            count(r.preexisting)
        );
    }
    if r.synthetic_times {
        let _ = writeln!(
            s,
            "  times        entries carry no time_us; 1 µs apart in order"
        );
    }
    let _ = writeln!(
        s,
        "wrote {}: {} events, {} stacks, {} frames",
        output.display(),
        count(r.events),
        count(r.stacks),
        count(r.frames)
    );
    s
}
