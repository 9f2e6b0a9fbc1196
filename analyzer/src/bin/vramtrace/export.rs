//! `vramtrace export`: Perfetto JSON, a PyTorch memory snapshot, or RMM's memory-event log;
//! Parquet in `export_parquet`.

use crate::args::{PolicyList, policies_or_none};
use crate::load::load_trace;
use anyhow::{Context, Result, bail};
use clap::ValueEnum;
use std::io::Write;
use std::path::{Path, PathBuf};
use vramtrace::interop::{export_perfetto, export_snapshot, rmm_log};
use vramtrace::model::Model;
use vramtrace::units::{bytes, count};
use vramtrace_format::pickle;
use vramtrace_format::replace::write_replacing;

/// Write traces in another tool's format: Perfetto (Chrome trace-event JSON), a PyTorch memory
/// snapshot for pytorch.org/memory_viz and `python -m torch.cuda._memory_viz`, RMM's
/// memory-event log, or Apache Parquet tables for DuckDB, Spark, Trino, Polars and pandas.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  vramtrace export run.vramtrace --to perfetto -o run.json         # open in ui.perfetto.dev
  vramtrace export run.vramtrace --to pytorch-snapshot -o run.pickle
  vramtrace export run.vramtrace --to rmm-csv -o run.csv            # RMM's REPLAY_BENCHMARK log
  vramtrace export traces/*.vramtrace --to parquet -o fleet/
  vramtrace export job-42/ --to parquet -o fleet/ --policy pytorch,pytorch-expandable --fit
  duckdb -c \"SELECT path, rank, peak_live_device_bytes FROM 'fleet/traces/*.parquet'\"

Parquet: one directory per table (events, stacks, frames, modules, traces, policy_results), one
file per trace in each, named by the trace's id; exporting more traces into the same directory
adds to the tables. events: one row per driver call (ts, pid, tid, device, stream, api, action,
address, size, requested_size, stack_id, result, ...); stacks: frame_ids per stack_id, innermost
first; policy_results: replay's peaks, fragmentation, driver calls and OOM per trace and policy.
Every column, with DuckDB and Spark queries: https://github.com/vramtrace/vramtrace/blob/main/docs/fleet.md")]
pub struct Args {
    /// The .vramtrace files, or directories of them (one job's ranks). Perfetto and
    /// pytorch-snapshot take exactly one file.
    #[arg(required = true, value_name = "TRACE")]
    traces: Vec<PathBuf>,
    /// The format to write.
    #[arg(long, value_enum)]
    to: ExportFormat,
    /// The file to write (parquet: a directory, created if missing).
    #[arg(short, long)]
    output: PathBuf,
    /// Keep what precedes a corrupt chunk instead of failing.
    #[arg(long)]
    salvage: bool,
    /// Parquet: the policies replayed into policy_results: `online` (every policy but the
    /// offline planner greedy-by-size), `all`, `none`, or NAME[:KEY=VALUE,...] separated by
    /// commas.
    #[arg(long, default_value = "online", value_parser = policies_or_none)]
    policy: PolicyList,
    /// Parquet: also bisect each policy's smallest device (policy_results.fit_bytes); slower.
    #[arg(long)]
    fit: bool,
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
    /// Apache Parquet tables in a directory, for DuckDB, Spark, Trino, Polars and pandas.
    Parquet,
}

impl Args {
    pub fn run(self) -> Result<()> {
        if self.to == ExportFormat::Parquet {
            return crate::export_parquet::run(
                &self.traces,
                &self.output,
                self.salvage,
                &self.policy.0,
                self.fit,
            );
        }
        let [path] = self.traces.as_slice() else {
            crate::args::usage_error(format_args!(
                "--to {} takes exactly one trace ({} given)",
                self.to
                    .to_possible_value()
                    .map_or_else(String::new, |v| v.get_name().to_string()),
                self.traces.len()
            ));
        };
        crate::output::refuse_overwriting_input(path, &self.output)?;
        let trace = load_trace(path, self.salvage)?;
        crate::output::print(&(export(&trace, self.to, &self.output)? + "\n"))
    }
}

/// Written beside the output and renamed at the end, so a failure leaves no half file.
fn export(trace: &vramtrace_format::Trace, to: ExportFormat, output: &Path) -> Result<String> {
    let name = output.display().to_string();
    let line = match to {
        ExportFormat::Perfetto => {
            let r = write_replacing(output, |file| export_perfetto::write(trace, file))
                .with_context(|| name.clone())?;
            format!(
                "wrote {name}: {} counter points, {} OOM instants, {} processes \
                 (open in ui.perfetto.dev)",
                count(r.counter_points),
                count(r.instants),
                r.processes
            )
        }
        ExportFormat::Parquet => unreachable!("Args::run writes parquet itself"),
        ExportFormat::PytorchSnapshot => {
            let (doc, r) = export_snapshot::snapshot(trace);
            let bytes_out = pickle::write(&doc).with_context(|| name.clone())?;
            write_replacing(output, |f| f.write_all(&bytes_out)).with_context(|| name.clone())?;
            let mut skipped = String::new();
            if r.host_events_skipped > 0 {
                skipped += &format!(
                    "; {} host-memory events left out",
                    count(r.host_events_skipped)
                );
            }
            if r.high_device_events_skipped > 0 {
                skipped += &format!(
                    "; {} events on devices numbered {} or more left out",
                    count(r.high_device_events_skipped),
                    export_snapshot::MAX_DEVICES
                );
            }
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
            write_replacing(output, |f| f.write_all(text.as_bytes()))
                .with_context(|| name.clone())?;
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
