//! Writing a file whole or not at all: into a temporary file beside it, renamed over it at the
//! end.
//!
//! A failure part way (a full disk, a killed process) leaves the old file, or none, never a
//! truncated one. The temporary is created exclusively (`O_EXCL`: a link planted at its name
//! is not followed), and `rename` replaces what is at the final name, a symbolic link included,
//! without writing through it into the link's target.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// Writes `path` through `write`, which gets a buffered temporary file beside it. On success
/// the data is flushed to disk and the temporary renamed to `path`; on any error it is removed.
pub fn write_replacing<T, E: From<std::io::Error>>(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<T, E>,
) -> Result<T, E> {
    let (tmp, file) = create_temporary(path)?;
    let mut out = BufWriter::new(file);
    let result = write(&mut out).and_then(|value| {
        out.flush()?;
        out.get_ref().sync_all()?;
        std::fs::rename(&tmp, path)?;
        Ok(value)
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// A new file named `.NAME.PID-N.tmp` in `path`'s directory.
fn create_temporary(path: &Path) -> std::io::Result<(PathBuf, File)> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "names no file"))?;
    loop {
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(
            ".{}-{}.tmp",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let tmp = path.with_file_name(tmp_name);
        match File::options().write(true).create_new(true).open(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vt-replace-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let d = dir("fail");
        let path = d.join("out.svg");
        std::fs::write(&path, "old").unwrap();
        let r: std::io::Result<()> = write_replacing(&path, |f| {
            f.write_all(b"half")?;
            Err(std::io::Error::other("disk full"))
        });
        assert!(r.is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_symbolic_link_at_the_name_is_replaced_not_written_through() {
        let d = dir("link");
        let victim = d.join("victim");
        std::fs::write(&victim, "someone else's").unwrap();
        let path = d.join("index.html");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        write_replacing(&path, |f| f.write_all(b"report")).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "someone else's");
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "report");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
