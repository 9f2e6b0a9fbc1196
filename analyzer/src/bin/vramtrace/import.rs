//! `vramtrace import`: a PyTorch memory snapshot (pickle) or an RMM memory-event log (CSV) to a
//! `.vramtrace` trace.

use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use vramtrace::interop::import_snapshot;
use vramtrace::interop::rmm_log;
use vramtrace::units::count;
use vramtrace_format::replace::write_replacing;
use vramtrace_format::{Event, MappedFile, Metadata, Tables, pickle};

/// Convert a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) or an RMM memory-event
/// log (RMM's LoggingResourceAdaptor CSV) into a trace.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  vramtrace import snapshot.pickle -o run.vramtrace
  vramtrace import rmm_log.csv -o run.vramtrace      # Thread,Time,Action,Pointer,Size,Stream
  vramtrace summary run.vramtrace")]
pub struct Args {
    /// The snapshot pickle (protocols 2 to 5) or RMM log (told apart by its first line).
    snapshot: PathBuf,
    /// The trace to write.
    #[arg(short, long)]
    output: PathBuf,
}

impl Args {
    pub fn run(self) -> Result<()> {
        let (snapshot, output) = (&self.snapshot, &self.output);
        crate::output::refuse_overwriting_input(snapshot, output)?;
        let name = snapshot.display().to_string();
        // Mapped, as `report` maps it: the unpickled strings borrow the bytes, never copied.
        let file = MappedFile::open(snapshot).with_context(|| name.clone())?;
        let bytes = file.bytes();
        let write = |metadata: &Metadata, tables: &Tables, events: &[Event]| {
            write_trace(metadata, tables, events, output)
                .with_context(|| output.display().to_string())
        };
        if rmm_log::looks_like(bytes) {
            let text = std::str::from_utf8(bytes).with_context(|| format!("{name}: not UTF-8"))?;
            let log = rmm_log::read(text).with_context(|| name.clone())?;
            write(&log.metadata, &Tables::default(), &log.events)?;
            return crate::output::print(&format!(
                "imported an RMM log from {name}: {} allocations, {} frees, {} failed allocations\n\
                 wrote {}: {} events\n",
                count(log.allocations),
                count(log.frees),
                count(log.failures),
                output.display(),
                count(log.events.len() as u64)
            ));
        }
        let doc = pickle::read(bytes).with_context(|| name.clone())?;
        let imported = import_snapshot::import(&doc, &name).with_context(|| name.clone())?;
        write(&imported.metadata, &imported.tables, &imported.events)?;
        crate::output::print(&render(&name, output, &imported))
    }
}

/// Writes through a temporary file beside `output`, so a failed import leaves no half trace.
fn write_trace(
    metadata: &Metadata,
    tables: &Tables,
    events: &[Event],
    output: &Path,
) -> Result<()> {
    write_replacing(output, |file| -> Result<()> {
        import_snapshot::write_trace(file, metadata, tables, events)?;
        Ok(())
    })
}

fn render(source: &str, output: &Path, imp: &import_snapshot::Imported) -> String {
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
