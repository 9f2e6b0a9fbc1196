//! Argument types several commands share.

use crate::Cli;
use clap::CommandFactory;
use std::path::PathBuf;
use vramtrace::policy::alloc_conf::ignored_options;
use vramtrace::policy::{PolicyError, PolicySpec, resolve};

/// A trace to describe, as text or JSON (`info`, `summary`).
#[derive(Debug, clap::Args)]
pub struct TraceView {
    /// The .vramtrace file.
    pub trace: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Keep what precedes a corrupt chunk instead of failing.
    #[arg(long)]
    pub salvage: bool,
}

/// The `--policy` list, checked (names and options) while parsing the command line.
#[derive(Debug, Clone)]
pub struct PolicyList(pub Vec<PolicySpec>);

/// Parses a `--policy` value: `all`, or NAME[:KEY=VALUE,...] separated by commas; warns on
/// stderr of each option the modelled allocator ignores ([`ignored_options`]).
pub fn policies(text: &str) -> Result<PolicyList, PolicyError> {
    let specs = resolve(text)?;
    for w in specs.iter().filter_map(ignored_options) {
        eprintln!("vramtrace: warning: {w}");
    }
    Ok(PolicyList(specs))
}

/// [`policies`], or `none` for no replay.
pub fn policies_or_none(text: &str) -> Result<PolicyList, PolicyError> {
    if text == "none" {
        return Ok(PolicyList(Vec::new()));
    }
    policies(text)
}

/// Ends the process as clap does for bad usage: the message, the usage line, exit code 2.
pub fn usage_error(message: std::fmt::Arguments) -> ! {
    Cli::command()
        .error(clap::error::ErrorKind::ArgumentConflict, message)
        .exit()
}
