//! Writing command output: text to stdout, treating a closed pipe (`| head`) as success, errors
//! as one line, and never over the command's own input. Files are written whole or not at all
//! by `vramtrace_format::replace::write_replacing`.

use anyhow::Result;
use std::io::Write;
use std::path::Path;

/// Prints `text` with every character that would control the terminal escaped: text output
/// carries frame names, paths, command lines and environment values from the trace.
pub fn print(text: &str) -> Result<()> {
    write_stdout(&vramtrace::terminal::escape(text))
}

/// Prints `value` as pretty JSON, escaped as JSON only ([`vramtrace::terminal::json_pretty`]):
/// the text escaping would make invalid JSON of it.
pub fn print_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<()> {
    write_stdout(&(vramtrace::terminal::json_pretty(value)? + "\n"))
}

fn write_stdout(text: &str) -> Result<()> {
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
        print_json(value)
    } else {
        print(&render(value))
    }
}

/// An error as one line: the context chain joined most general first, a cause that an outer
/// message already ends with left out ("X: is a directory" over "is a directory"), and control
/// characters (a newline in a path, terminal escapes) written as escapes.
pub fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for part in e.chain().map(ToString::to_string) {
        if line.ends_with(&part) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&part);
    }
    let mut out = String::with_capacity(line.len());
    for c in line.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Fails when `output` names the same file as `input` (a command would replace its own input).
pub fn refuse_overwriting_input(input: &Path, output: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(a), Ok(b)) = (std::fs::metadata(input), std::fs::metadata(output))
        && (a.dev(), a.ino()) == (b.dev(), b.ino())
    {
        anyhow::bail!(
            "{} is the input file; give the output another name",
            output.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_one_line_and_says_its_cause_once() {
        let io = std::io::Error::other("is a directory");
        let e = anyhow::Error::new(io).context("out\nput: is a directory");
        assert_eq!(error_line(&e), "out\\nput: is a directory");
        let e = anyhow::anyhow!("disk full").context("writing a.svg");
        assert_eq!(error_line(&e), "writing a.svg: disk full");
    }
}
