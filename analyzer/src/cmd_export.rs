//! `vramtrace export`: Perfetto JSON or a PyTorch memory snapshot (Parquet: `cmd_export_parquet`).

use crate::cli::ExportFormat;
use crate::load::load_trace;
use anyhow::{Context, Result};
use clap::ValueEnum;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use vramtrace::units::{bytes, count};
use vramtrace::{export_perfetto, export_snapshot};
use vramtrace_format::pickle;

pub fn run(paths: &[PathBuf], to: ExportFormat, output: &Path, salvage: bool) -> Result<()> {
    let [path] = paths else {
        crate::cli::usage_error(format_args!(
            "--to {} takes exactly one trace ({} given)",
            to.to_possible_value()
                .map_or_else(String::new, |v| v.get_name().to_string()),
            paths.len()
        ));
    };
    let trace = load_trace(path, salvage)?;
    // Written beside the output and renamed at the end, so a failure leaves no half file.
    let tmp = output.with_extension("partial");
    let result = export(&trace, to, output, &tmp);
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    crate::output::print(&(result? + "\n"))
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
            // Per-policy reserved tracks join here once the replay engine exists
            // (`export_perfetto::CounterSeries`, one per policy and device).
            let extra = [];
            let r = export_perfetto::write(trace, &extra, BufWriter::new(file))
                .with_context(|| name.clone())?;
            format!(
                "wrote {name}: {} counter points, {} OOM instants, {} processes \
                 (open in ui.perfetto.dev)",
                count(r.counter_points),
                count(r.instants),
                r.processes
            )
        }
        ExportFormat::Parquet => unreachable!("main dispatches parquet to cmd_export_parquet"),
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
    };
    std::fs::rename(tmp, output).with_context(|| name.clone())?;
    Ok(line)
}
