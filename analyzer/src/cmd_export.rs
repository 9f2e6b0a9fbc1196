//! `vramtrace export`: Perfetto JSON or a PyTorch memory snapshot.

use crate::cli::ExportFormat;
use crate::load::load_trace;
use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;
use vramtrace::units::{bytes, count};
use vramtrace::{export_perfetto, export_snapshot};
use vramtrace_format::pickle;
use vramtrace_format::replace::write_replacing;

pub fn run(path: &Path, to: ExportFormat, output: &Path, salvage: bool) -> Result<()> {
    crate::output::refuse_overwriting_input(path, output)?;
    let trace = load_trace(path, salvage)?;
    crate::output::print(&(export(&trace, to, output)? + "\n"))
}

/// Written beside the output and renamed at the end, so a failure leaves no half file.
fn export(trace: &vramtrace_format::Trace, to: ExportFormat, output: &Path) -> Result<String> {
    let name = output.display().to_string();
    let line = match to {
        ExportFormat::Perfetto => {
            // Per-policy reserved tracks join here once the replay engine exists
            // (`export_perfetto::CounterSeries`, one per policy and device).
            let extra = [];
            let r = write_replacing(output, |file| export_perfetto::write(trace, &extra, file))
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
            write_replacing(output, |f| f.write_all(&bytes_out)).with_context(|| name.clone())?;
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
    };
    Ok(line)
}
