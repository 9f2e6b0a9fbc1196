//! The `vramtrace` binary: parse the command line, dispatch, map errors to exit codes. Each
//! command is one file with its arguments (`#[derive(Args)]`) and what it does with them; the
//! work itself is the `vramtrace` library's.
//!
//! Exit codes: 0 success, 1 failure (one line on stderr naming the file or argument), 2 bad
//! usage (clap's message).

mod args;
mod budget;
mod diff;
mod elf_files;
mod export;
mod export_parquet;
mod find_preload;
mod fit;
mod import;
mod incomplete;
mod info;
mod job;
mod listing;
mod load;
mod on_device;
mod output;
mod record;
mod replay;
mod report;
mod summary;
mod tune;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Record every CUDA allocation of any program; replay it offline against real GPU allocators.
#[derive(Debug, Parser)]
#[command(name = "vramtrace", version, about, long_about = None, after_help = EXAMPLES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

const EXAMPLES: &str = "\
Examples:
  vramtrace info samples/traces/synthetic-mlp.vramtrace
  vramtrace info --json run.vramtrace | jq .by_api
  vramtrace summary samples/traces/synthetic-mlp.vramtrace
  vramtrace import snapshot.pickle -o run.vramtrace
  vramtrace export run.vramtrace --to perfetto -o run.json
  vramtrace export traces/*.vramtrace --to parquet -o fleet/
  vramtrace replay traces/job-42/     # a directory: one job's per-rank traces";

/// Keeps the memory of decoded event chunks in the process between chunks.
///
/// Every streamed command decodes a trace chunk by chunk, each column of a default chunk
/// (65,536 events, `formats/src/writer.rs`) a vector of up to 512 KiB freed before the next.
/// glibc's defaults (mallopt(3): `M_MMAP_THRESHOLD` 128 KiB, adjusted upwards as such blocks
/// are freed, and `M_TRIM_THRESHOLD` twice that) hand those pages back to the kernel after
/// each chunk, so the next one faults them in and clears them again: 128,000 page faults and a
/// third of the CPU of `info` on a 10 M-event trace (analyzer/BENCHMARKS.md, "At the limit").
/// Fixed thresholds keep blocks below 1 MiB on the heap and up to 16 MiB of freed heap
/// unreturned; larger vectors still get their own mappings (and `mremap` as they grow).
fn keep_freed_chunks() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets the allocator's parameters, called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 16 << 20);
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    Record(record::Args),
    Info(info::Args),
    Summary(summary::Args),
    Diff(diff::Args),
    Replay(replay::Args),
    Fit(fit::Args),
    Tune(tune::Args),
    Import(import::Args),
    Export(export::Args),
    Report(report::Args),
}

fn main() -> ExitCode {
    keep_freed_chunks();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let result = match cli.command {
        Command::Record(a) => a.run(),
        Command::Info(a) => a.run(),
        Command::Summary(a) => a.run(),
        Command::Diff(a) => a.run(),
        Command::Replay(a) => a.run(),
        Command::Fit(a) => a.run(),
        Command::Tune(a) => a.run(),
        Command::Import(a) => a.run(),
        Command::Export(a) => a.run(),
        Command::Report(a) => a.run(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vramtrace: error: {}", output::error_line(&e));
            ExitCode::from(1)
        }
    }
}
