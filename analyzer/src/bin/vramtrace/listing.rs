//! The one listing of a job directory, shared by every command that takes one (`summary`,
//! `replay`, `fit`, `report`, `export --to parquet`).
//!
//! Only regular files are taken, each opened once without blocking (`O_NONBLOCK`, so a FIFO
//! renamed into the directory between the look and the open cannot hang the command) and
//! checked on the open descriptor. A FIFO, socket, device or directory with a trace's name, a
//! link loop and a dangling link are skipped with a note on stderr, never read and never fatal.
//! Files come in natural name order: `rank-9` before `rank-10`.

use anyhow::{Context, Result, bail};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The regular files directly in `dir` whose extension is one of `extensions`, in natural name
/// order; each entry skipped is said on stderr. An error when none is left.
pub fn job_files(dir: &Path, extensions: &[&str]) -> Result<Vec<PathBuf>> {
    let (files, skipped) = list(dir, extensions)?;
    for note in &skipped {
        eprintln!("vramtrace: {note}");
    }
    if files.is_empty() {
        let names: Vec<String> = extensions.iter().map(|e| format!(".{e}")).collect();
        let names = match names.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        };
        bail!("{}: no {names} file in the directory", dir.display());
    }
    Ok(files)
}

/// The files [`job_files`] takes and a note for each entry it skips.
fn list(dir: &Path, extensions: &[&str]) -> Result<(Vec<PathBuf>, Vec<String>)> {
    let entries = std::fs::read_dir(dir).with_context(|| dir.display().to_string())?;
    let mut named: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| extensions.contains(&x))
        })
        .collect();
    named.sort_by_cached_key(|p| natural_key(p));
    let mut skipped = Vec::new();
    let files = named
        .into_iter()
        .filter(|p| match regular(p) {
            Ok(()) => true,
            Err(why) => {
                skipped.push(format!("{}: skipped: {why}", p.display()));
                false
            }
        })
        .collect();
    Ok((files, skipped))
}

/// `Ok` when `path` opens, without blocking, as a regular file; else why not.
fn regular(path: &Path) -> Result<(), String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => "a link loop".to_string(),
            Some(libc::ENOENT) => "a link to nothing".to_string(),
            _ => e.to_string(),
        })?;
    let kind = file.metadata().map_err(|e| e.to_string())?.file_type();
    use std::os::unix::fs::FileTypeExt;
    match () {
        _ if kind.is_file() => Ok(()),
        _ if kind.is_fifo() => Err("a FIFO, not a regular file".into()),
        _ if kind.is_dir() => Err("a directory".into()),
        _ if kind.is_socket() => Err("a socket, not a regular file".into()),
        _ => Err("a device, not a regular file".into()),
    }
}

/// The file name with its digit runs compared as numbers.
fn natural_key(p: &Path) -> Vec<(String, u64)> {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut key = Vec::new();
    let (mut text, mut digits) = (String::new(), String::new());
    for c in name.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            if !digits.is_empty() {
                key.push((
                    std::mem::take(&mut text),
                    digits.parse().unwrap_or(u64::MAX),
                ));
                digits.clear();
            }
            text.push(c);
        }
    }
    key.push((text, digits.parse().unwrap_or(0)));
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(files: &[PathBuf]) -> Vec<String> {
        files
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn files_come_in_natural_order_and_other_names_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        for n in [
            "rank-10.vramtrace",
            "rank-9.vramtrace",
            "rank-0.vramtrace",
            "notes.txt",
        ] {
            std::fs::write(dir.path().join(n), b"x").unwrap();
        }
        let (files, skipped) = list(dir.path(), &["vramtrace"]).unwrap();
        assert_eq!(
            names(&files),
            ["rank-0.vramtrace", "rank-9.vramtrace", "rank-10.vramtrace"]
        );
        assert!(skipped.is_empty());
    }

    #[test]
    fn fifos_link_loops_dangling_links_and_directories_are_skipped_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("a.vramtrace"), b"x").unwrap();
        let fifo = std::ffi::CString::new(d.join("fifo.vramtrace").to_str().unwrap()).unwrap();
        // SAFETY: `fifo` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink("loop2.vramtrace", d.join("loop1.vramtrace")).unwrap();
        std::os::unix::fs::symlink("loop1.vramtrace", d.join("loop2.vramtrace")).unwrap();
        std::os::unix::fs::symlink("gone", d.join("dangling.vramtrace")).unwrap();
        std::os::unix::fs::symlink("a.vramtrace", d.join("b.vramtrace")).unwrap();
        std::fs::create_dir(d.join("dir.vramtrace")).unwrap();
        let (files, skipped) = list(d, &["vramtrace"]).unwrap();
        assert_eq!(names(&files), ["a.vramtrace", "b.vramtrace"]);
        let skipped: Vec<&str> = skipped
            .iter()
            .map(|s| s.rsplit_once("skipped: ").unwrap().1)
            .collect();
        assert_eq!(
            skipped,
            [
                "a link to nothing",
                "a directory",
                "a FIFO, not a regular file",
                "a link loop",
                "a link loop"
            ]
        );
    }
}
