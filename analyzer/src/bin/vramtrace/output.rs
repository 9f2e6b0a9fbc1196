//! Writing command output: text to stdout, treating a closed pipe (`| head`) as success, and
//! files through a temporary file, so that a failure leaves no half-written file.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;

pub fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

/// Runs `write` on `tmp` (a path beside `output`), then renames `tmp` to `output`; on any
/// error `tmp` is removed and `output` left as it was.
pub fn write_via<T>(
    output: &Path,
    tmp: &Path,
    write: impl FnOnce(&Path) -> Result<T>,
) -> Result<T> {
    let result = write(tmp).and_then(|value| {
        std::fs::rename(tmp, output).with_context(|| output.display().to_string())?;
        Ok(value)
    });
    if result.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    result
}
