//! Writing command output: text to stdout, treating a closed pipe (`| head`) as success, and
//! files through a temporary file, so that a failure leaves no half-written file.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;

/// Prints `text` with every character that would control the terminal escaped: text output
/// carries frame names, paths, command lines and environment values from the trace.
pub fn print(text: &str) -> Result<()> {
    let text = vramtrace::terminal::escape(text);
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

/// Prints `value` as pretty JSON with `json`, else the text `render` makes.
pub fn json_or_text<T: serde::Serialize>(
    json: bool,
    value: &T,
    render: impl FnOnce(&T) -> String,
) -> Result<()> {
    if json {
        print(&(serde_json::to_string_pretty(value)? + "\n"))
    } else {
        print(&render(value))
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
