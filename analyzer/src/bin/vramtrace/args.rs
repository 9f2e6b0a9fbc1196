//! Argument types several commands share.

use std::path::PathBuf;
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

/// Parses a `--policy` value: `all`, or NAME[:KEY=VALUE,...] separated by commas.
pub fn policies(text: &str) -> Result<PolicyList, PolicyError> {
    resolve(text).map(PolicyList)
}
