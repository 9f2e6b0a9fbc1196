//! The command line (clap derive). DESIGN.md, "Command line", is the contract.

use clap::{Parser, Subcommand};
use std::path::PathBuf;

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
  vramtrace info --json run.vramtrace | jq .by_api";

#[derive(Debug, Subcommand)]
pub enum Command {
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
}
