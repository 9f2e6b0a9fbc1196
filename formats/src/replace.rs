//! Writing a file whole or not at all: into a temporary file beside it, renamed over it at the
//! end.
//!
//! A failure part way (a full disk, a killed process) leaves the old file, or none, never a
//! truncated one. The temporary is created exclusively (`O_EXCL`: a link planted at its name
//! is not followed), and `rename` replaces what is at the final name, a symbolic link included,
//! without writing through it into the link's target.
//!
//! A stream is not a file to replace: a name for one of the process's own descriptors
//! (`/dev/stdout`, `/dev/fd/N`, `/proc/self/fd/N`, or a link to one), a FIFO or a device is
//! written into as it is, appending, so `-o /dev/stdout` prints instead of replacing the
//! system's `/dev/stdout` link with a file.

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
    if is_stream(path) {
        let mut out = BufWriter::new(File::options().append(true).open(path)?);
        let value = write(&mut out)?;
        out.flush()?;
        return Ok(value);
    }
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

/// Whether `path` names a stream rather than a file: one of this process's descriptors (also
/// through a link, as `/dev/stdout` is one), or an existing FIFO, device or socket.
fn is_stream(path: &Path) -> bool {
    const OWN_FDS: [&str; 2] = ["/dev/fd/", "/proc/self/fd/"];
    let own = |p: &Path| OWN_FDS.iter().any(|d| p.starts_with(d));
    if own(path) || std::fs::read_link(path).is_ok_and(|target| own(&target)) {
        return true;
    }
    std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
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
    fn a_link_to_an_own_descriptor_and_a_fifo_are_written_into_not_replaced() {
        let d = dir("streams");
        // A link like /dev/stdout, to this process's descriptor of a file.
        let target = d.join("captured");
        let fd = File::create(&target).unwrap();
        let link = d.join("stdout");
        let fd_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        std::os::unix::fs::symlink(&fd_path, &link).unwrap();
        write_replacing(&link, |f| f.write_all(b"printed")).unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "printed");
        // A FIFO: its reader gets the bytes.
        let fifo = d.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success(), "mkfifo");
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
        };
        write_replacing(&fifo, |f| f.write_all(b"piped")).unwrap();
        assert_eq!(reader.join().unwrap(), "piped");
        assert!(!std::fs::metadata(&fifo).unwrap().is_file());
        drop(fd);
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
