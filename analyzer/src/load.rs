//! Opening trace files for the commands, with errors that name the file.

use anyhow::{Context, Result};
use std::path::Path;
use vramtrace_format::{ReadOptions, Trace};

/// Maps and decodes `path`; an error names the file and what is wrong with it.
pub fn load_trace(path: &Path, salvage: bool) -> Result<Trace> {
    Trace::open(path, ReadOptions { salvage }).with_context(|| format!("{}", path.display()))
}
