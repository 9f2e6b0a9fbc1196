//! `vramtrace export`: Perfetto JSON, a PyTorch memory snapshot, or RMM's memory-event log.

use crate::load::load_trace;
use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use vramtrace::interop::{export_perfetto, export_snapshot, rmm_log};
use vramtrace::model::Model;
use vramtrace::units::{bytes, count};
use vramtrace_format::pickle;

/// Write a trace in another tool's format: Perfetto (Chrome trace-event JSON), a PyTorch memory
/// snapshot for pytorch.org/memory_viz and `python -m torch.cuda._memory_viz`, or RMM's
/// memory-event log.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  vramtrace export run.vramtrace --to perfetto -o run.json         # open in ui.perfetto.dev
  vramtrace export run.vramtrace --to pytorch-snapshot -o run.pickle
  vramtrace export run.vramtrace --to rmm-csv -o run.csv            # RMM's REPLAY_BENCHMARK log")]
pub struct Args {
    /// The .vramtrace file.
    trace: PathBuf,
    /// The format to write.
    #[arg(long, value_enum)]
    to: ExportFormat,
    /// The file to write.
    #[arg(short, long)]
    output: PathBuf,
    /// Keep what precedes a corrupt chunk instead of failing.
    #[arg(long)]
    salvage: bool,
}

/// Formats `vramtrace export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// Chrome trace-event JSON: counter tracks and OOM instants, for ui.perfetto.dev.
    Perfetto,
    /// A PyTorch memory snapshot pickle, for pytorch.org/memory_viz.
    PytorchSnapshot,
    /// RMM's memory-event log (Thread,Time,Action,Pointer,Size,Stream) of the trace's requests,
    /// for RMM's replay benchmark.
    RmmCsv,
}

impl Args {
    pub fn run(self) -> Result<()> {
        let trace = load_trace(&self.trace, self.salvage)?;
        // Written beside the output and renamed at the end, so a failure leaves no half file.
        let tmp = self.output.with_extension("partial");
        let line = crate::output::write_via(&self.output, &tmp, |tmp| {
            export(&trace, self.to, &self.output, tmp)
        })?;
        crate::output::print(&(line + "\n"))
    }
}

fn export(
    trace: &vramtrace_format::Trace,
    to: ExportFormat,
    output: &Path,
    tmp: &Path,
) -> Result<String> {
    let name = output.display().to_string();
    let line = match to {
        ExportFormat::Perfetto => {
            let file = std::fs::File::create(tmp).with_context(|| name.clone())?;
            let r = export_perfetto::write(trace, BufWriter::new(file))
                .with_context(|| name.clone())?;
            format!(
                "wrote {name}: {} counter points, {} OOM instants, {} processes \
                 (open in ui.perfetto.dev)",
                count(r.counter_points),
                count(r.instants),
                r.processes
            )
        }
        ExportFormat::PytorchSnapshot => {
            let (doc, r) = export_snapshot::snapshot(trace);
            let bytes_out = pickle::write(&doc).with_context(|| name.clone())?;
            let mut f = std::fs::File::create(tmp).with_context(|| name.clone())?;
            f.write_all(&bytes_out).with_context(|| name.clone())?;
            let skipped = if r.host_events_skipped > 0 {
                format!(
                    "; {} host-memory events left out",
                    count(r.host_events_skipped)
                )
            } else {
                String::new()
            };
            format!(
                "wrote {name} ({}): {} trace entries on {} device(s), {} segments, {} blocks{skipped} \
                 (open in pytorch.org/memory_viz)",
                bytes(bytes_out.len() as u64),
                count(r.trace_entries),
                r.devices,
                count(r.segments),
                count(r.blocks)
            )
        }
        ExportFormat::RmmCsv => {
            let model = Model::from_events(trace.events(), &trace.metadata);
            let stream = match &model.streams[..] {
                [one] => one,
                [] => bail!("{name}: the trace holds no device allocations"),
                many => bail!(
                    "the trace holds {} allocator instances (process, device); an RMM log holds one",
                    many.len()
                ),
            };
            let mut text = String::new();
            let w = rmm_log::write(stream, &mut text);
            std::fs::write(tmp, text.as_bytes()).with_context(|| name.clone())?;
            format!(
                "wrote {name} ({}): {} allocations, {} frees, {} failed allocations (RMM log)",
                bytes(text.len() as u64),
                count(w.allocations),
                count(w.frees),
                count(w.failures)
            )
        }
    };
    Ok(line)
}
