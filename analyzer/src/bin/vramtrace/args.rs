//! Argument types several commands share.

use vramtrace::policy::{PolicySpec, resolve};

/// The `--policy` list, checked (names and options) while parsing the command line.
#[derive(Debug, Clone)]
pub struct PolicyList(pub Vec<PolicySpec>);

/// Parses a `--policy` value: `all`, or NAME[:KEY=VALUE,...] separated by commas.
pub fn policies(text: &str) -> Result<PolicyList, String> {
    resolve(text).map(PolicyList)
}
