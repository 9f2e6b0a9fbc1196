//! Argument types several commands share.

use crate::Cli;
use clap::CommandFactory;
use vramtrace::policy::{PolicySpec, resolve};

/// The `--policy` list, checked (names and options) while parsing the command line.
#[derive(Debug, Clone)]
pub struct PolicyList(pub Vec<PolicySpec>);

/// Parses a `--policy` value: `all`, or NAME[:KEY=VALUE,...] separated by commas.
pub fn policies(text: &str) -> Result<PolicyList, String> {
    resolve(text).map(PolicyList)
}

/// [`policies`], or `none` for no replay.
pub fn policies_or_none(text: &str) -> Result<PolicyList, String> {
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
