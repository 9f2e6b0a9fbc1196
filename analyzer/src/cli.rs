//! The command line (clap derive). DESIGN.md, "Command line", is the contract.

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;
use vramtrace::policy::{PolicySpec, resolve};
use vramtrace::units::parse_size;

/// The `--policy` list, checked (names and options) while parsing the command line.
#[derive(Debug, Clone)]
pub struct PolicyList(pub Vec<PolicySpec>);

fn policies(text: &str) -> Result<PolicyList, String> {
    resolve(text).map(PolicyList)
}

/// Ends the process as clap does for bad usage: the message, the usage line, exit code 2.
pub fn usage_error(message: std::fmt::Arguments) -> ! {
    Cli::command()
        .error(clap::error::ErrorKind::ArgumentConflict, message)
        .exit()
}

/// [`policies`], or `none` for no replay.
fn policies_or_none(text: &str) -> Result<PolicyList, String> {
    if text == "none" {
        return Ok(PolicyList(Vec::new()));
    }
    policies(text)
}

/// Record every CUDA allocation of any program; replay it offline against real GPU allocators.
#[derive(Debug, Parser)]
#[command(name = "vramtrace", version, about, long_about = None, after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

const EXAMPLES: &str = "\
Examples:
  vramtrace info samples/traces/synthetic-mlp.vramtrace
  vramtrace info --json run.vramtrace | jq .by_api
  vramtrace summary samples/traces/synthetic-mlp.vramtrace
  vramtrace import snapshot.pickle -o run.vramtrace
  vramtrace export run.vramtrace --to perfetto -o run.json";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a program and record every CUDA allocation it makes (one trace per process).
    #[command(after_help = "\
Examples:
  vramtrace record -- python train.py
  vramtrace record -o traces/ -- torchrun --nproc-per-node 2 train.py
  vramtrace record --requests -o mlp.vramtrace -- python train.py

Without the launcher (a job scheduler, a container entry point), set the variables it sets:
  LD_PRELOAD=/path/to/libvramtrace_preload.so VRAMTRACE_OUTPUT=traces/ python train.py
  VRAMTRACE_OUTPUT      a file, or a directory (existing, or ending in /) for PROGRAM-PID.vramtrace
  VRAMTRACE_STACKS      native (default), fp or none;  VRAMTRACE_MAX_DEPTH  frames kept (64)
  VRAMTRACE_REQUESTS=1  mark the trace request level (what --requests sets, besides the
                        PYTORCH_CUDA_ALLOC_CONF / XLA / TF variables that switch allocators)
  VRAMTRACE_DISABLE=1   load but record nothing
The library is found by --preload, else VRAMTRACE_PRELOAD, else beside this executable, else in
the `vramtrace` Python package that `pip install vramtrace` put it in.")]
    Record {
        /// Trace file, or a directory (existing, or ending in /) for one file per process.
        /// Default: the current directory.
        #[arg(short, long, value_name = "PATH|DIR")]
        output: Option<PathBuf>,
        /// Switch PyTorch, JAX and TensorFlow to pass-through allocators: one event per tensor.
        #[arg(long)]
        requests: bool,
        /// The recorder library (default: $VRAMTRACE_PRELOAD, else libvramtrace_preload.so
        /// beside vramtrace or in its installed Python package).
        #[arg(long, value_name = "PATH")]
        preload: Option<PathBuf>,
        /// How to capture the calling stack of each allocation: DWARF unwinding (native),
        /// frame-pointer walking for programs built with frame pointers (fp), or not at all.
        #[arg(long, value_name = "MODE", default_value = "native", value_parser = ["native", "fp", "none"])]
        stacks: String,
        /// The most frames kept per stack (1 to 256).
        #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=256))]
        max_depth: u16,
        /// The program and its arguments.
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "CMD"
        )]
        command: Vec<OsString>,
    },
    /// Describe a trace file: what wrote it, how many calls of which function, its size.
    #[command(after_help = "\
Examples:
  vramtrace info run.vramtrace
  vramtrace info --json run.vramtrace
  vramtrace info --salvage damaged.vramtrace")]
    Info {
        /// The .vramtrace file.
        trace: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Keep what precedes a corrupt chunk instead of failing.
        #[arg(long)]
        salvage: bool,
    },

    /// Peaks, counts, size classes, the stacks holding memory at the peak, leaks and failed
    /// allocations, per process, device, stream and memory kind.
    #[command(after_help = "\
Examples:
  vramtrace summary run.vramtrace
  vramtrace summary --json run.vramtrace | jq '.groups[0].leaks'")]
    Summary {
        /// The .vramtrace file.
        trace: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Keep what precedes a corrupt chunk instead of failing.
        #[arg(long)]
        salvage: bool,
    },
    /// Two runs side by side: peaks, and the stacks whose bytes at the peak grew or shrank most.
    #[command(after_help = "\
Examples:
  vramtrace diff fp32.vramtrace amp.vramtrace
  vramtrace diff --json before.vramtrace after.vramtrace")]
    Diff {
        /// The baseline trace.
        a: PathBuf,
        /// The trace compared with it.
        b: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Replay a trace's requests against allocator policies: peak reserved, fragmentation,
    /// driver calls, OOM.
    #[command(after_help = "\
Examples:
  vramtrace replay run.vramtrace
  vramtrace replay run.vramtrace --policy pytorch,pytorch-expandable --capacity 80GiB
  vramtrace replay run.vramtrace --policy 'pytorch:max_split_size_mb=128,garbage_collection_threshold=0.6,memory_fraction=0.9'
  vramtrace replay --list-policies")]
    Replay {
        /// The .vramtrace file.
        #[arg(required_unless_present = "list_policies")]
        trace: Option<PathBuf>,
        /// Policies: `all`, or NAME[:KEY=VALUE,...] separated by commas.
        #[arg(long, default_value = "all", value_parser = policies)]
        policy: PolicyList,
        /// Device capacity (default: the traced device's memory, else unlimited).
        #[arg(long, value_parser = parse_size)]
        capacity: Option<u64>,
        /// Print JSON instead of text.
        #[arg(long, conflicts_with = "csv")]
        json: bool,
        /// Print CSV instead of text.
        #[arg(long)]
        csv: bool,
        /// List every policy with its options and their defaults.
        #[arg(long)]
        list_policies: bool,
        /// Replay on GPU 0 with real cuMemAllocAsync/cuMemFreeAsync and cuMemAlloc/cuMemFree
        /// instead of the policies: the pool's reserved peak and per-call latency (needs a
        /// build with `--features device`).
        #[arg(long, conflicts_with_all = ["csv", "list_policies", "capacity"])]
        on_device: bool,
    },
    /// The smallest device each policy runs the trace on without running out of memory.
    #[command(after_help = "\
Examples:
  vramtrace fit run.vramtrace
  vramtrace fit run.vramtrace --policy pytorch,pytorch-expandable,lower-bound --json")]
    Fit {
        /// The .vramtrace file.
        trace: PathBuf,
        /// Policies: `all`, or NAME[:KEY=VALUE,...] separated by commas.
        #[arg(long, default_value = "all", value_parser = policies)]
        policy: PolicyList,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Convert a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) into a trace.
    #[command(after_help = "\
Examples:
  vramtrace import snapshot.pickle -o run.vramtrace
  vramtrace summary run.vramtrace")]
    Import {
        /// The snapshot pickle (protocols 2 to 5).
        snapshot: PathBuf,
        /// The trace to write.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Write traces in another tool's format: Perfetto (Chrome trace-event JSON), a PyTorch
    /// memory snapshot for pytorch.org/memory_viz, or Apache Parquet tables for DuckDB, Spark,
    /// Trino, Polars and pandas.
    #[command(after_help = "\
Examples:
  vramtrace export run.vramtrace --to perfetto -o run.json         # open in ui.perfetto.dev
  vramtrace export run.vramtrace --to pytorch-snapshot -o run.pickle
  vramtrace export traces/*.vramtrace --to parquet -o fleet/
  vramtrace export job-42/ --to parquet -o fleet/ --policy pytorch,pytorch-expandable --fit
  duckdb -c \"SELECT host, rank, peak_live_device_bytes FROM 'fleet/traces/*.parquet'\"

Parquet: one directory per table (events, stacks, frames, modules, traces, policy_results), one
file per trace in each, named by the trace's id; exporting more traces into the same directory
adds to the tables. The tables and their columns are described in docs/fleet.md of the
vramtrace repository.")]
    Export {
        /// The .vramtrace files, or directories of them (one job's ranks). Perfetto and
        /// pytorch-snapshot take exactly one file.
        #[arg(required = true, value_name = "TRACE")]
        traces: Vec<PathBuf>,
        /// The format to write.
        #[arg(long, value_enum)]
        to: ExportFormat,
        /// The file to write (a directory for parquet, created if missing).
        #[arg(short, long)]
        output: PathBuf,
        /// Keep what precedes a corrupt chunk instead of failing.
        #[arg(long)]
        salvage: bool,
        /// Parquet: the policies replayed into policy_results: `all`, `none`, or
        /// NAME[:KEY=VALUE,...] separated by commas.
        #[arg(long, default_value = "all", value_parser = policies_or_none)]
        policy: PolicyList,
        /// Parquet: also bisect each policy's smallest device (policy_results.fit_bytes); slower.
        #[arg(long)]
        fit: bool,
    },
    /// Write SVG charts and one self-contained HTML page: memory over time per policy, what is
    /// live at the peak and from where, fragmentation, address maps, histograms, a timeline.
    #[command(after_help = "\
Examples:
  vramtrace report run.vramtrace
  vramtrace report run.vramtrace -o report/ --capacity 80GiB
  vramtrace report run.vramtrace --policy pytorch,pytorch-expandable
  vramtrace report run.vramtrace --no-symbolize")]
    Report {
        /// The .vramtrace file.
        trace: PathBuf,
        /// Directory for index.html and the .svg files (created if missing); default
        /// TRACE-NAME-report in the current directory.
        #[arg(short = 'o', long = "output", value_name = "DIR")]
        out: Option<PathBuf>,
        /// Policies to replay and compare: `all`, or NAME[:KEY=VALUE,...] separated by commas.
        #[arg(long, default_value = "all", value_parser = policies)]
        policy: PolicyList,
        /// Device capacity for the replays, drawn as a line (default: the traced device's
        /// memory, else unlimited).
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        capacity: Option<u64>,
        /// Show frames as module+0xoffset without reading the traced program's files.
        #[arg(long)]
        no_symbolize: bool,
    },
}

/// Formats `vramtrace export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// Chrome trace-event JSON: counter tracks and OOM instants, for ui.perfetto.dev.
    Perfetto,
    /// A PyTorch memory snapshot pickle, for pytorch.org/memory_viz.
    PytorchSnapshot,
    /// Apache Parquet tables in a directory, for DuckDB, Spark, Trino, Polars and pandas.
    Parquet,
}
