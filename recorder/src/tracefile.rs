//! The trace file's descriptor: opened without following links or blocking, kept out of the
//! program's way, and checked before every write.
//!
//! A program may close descriptors it did not open (`closefrom(3)`, a daemon's close loop) or
//! put one of its own files on any number (`dup2`, `exec 3>` in a shell). The descriptor
//! therefore lives high (below the `RLIMIT_NOFILE` soft limit and below 1024, where `select`
//! users and shells do not look) and close-on-exec, so it does not shift the numbers the program
//! gets; and before each write the writer checks with `fstat` that it still names the trace
//! (device and inode). When it does not, the trace is reopened by name if the name still leads
//! to the same inode; otherwise writing stops (the caller warns once) and the descriptor number,
//! which now belongs to the program, is never written to or closed.
//!
//! A program could still replace the descriptor between the check and the `pwrite` that follows
//! it: the window is one system call (docs/reliability.md, "Limits").

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{IntoRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once the program took the trace's descriptor away for good.
static LOST: AtomicBool = AtomicBool::new(false);

/// True when writing stopped because the program closed or replaced the trace's descriptor and
/// the trace could not be reopened (the file on disk is intact up to there).
pub fn descriptor_lost() -> bool {
    LOST.load(Ordering::Relaxed)
}

/// How [`open`] creates the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Create {
    /// A new file; an existing name (file, link or anything else) fails with `AlreadyExists`.
    New,
    /// An existing regular file, or a new one; its contents are kept.
    Reuse,
}

/// Opens `path` for writing without following a symbolic link at its end and without blocking
/// on a FIFO, and insists on a regular file. The error names what the path is instead.
pub fn open(path: &Path, create: Create) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.write(true);
    match create {
        Create::New => o.create_new(true),
        Create::Reuse => o.create(true),
    };
    open_regular(path, &mut o)
}

/// Opens `path` with `options`, never through a symbolic link at its end and never blocking on a
/// FIFO, and insists on a regular file.
pub fn open_regular(path: &Path, options: &mut OpenOptions) -> io::Result<File> {
    options
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC);
    let file = options.open(path).map_err(|e| explain(path, e))?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::other(not_regular(&meta.file_type())));
    }
    Ok(file)
}

/// A clearer error for what `open` refuses.
fn explain(path: &Path, e: io::Error) -> io::Error {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return e;
    };
    let t = meta.file_type();
    if t.is_symlink() {
        io::Error::other("is a symbolic link; vramtrace does not write through links")
    } else if !t.is_file() && !t.is_dir() {
        io::Error::other(not_regular(&t))
    } else {
        e
    }
}

fn not_regular(t: &std::fs::FileType) -> String {
    let what = if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    format!("is {what}; vramtrace writes traces only to regular files")
}

/// The trace, written at its own offsets through a descriptor that is checked before each write.
pub struct TraceFile {
    fd: RawFd,
    dev: u64,
    ino: u64,
    path: PathBuf,
    /// Where the next write goes (`pwrite`: the program cannot move it with `lseek` on a dup).
    pos: u64,
    /// Whether the descriptor still names the trace (false: never write to it or close it).
    owned: bool,
}

impl TraceFile {
    /// Takes `file` (opened by [`open`], empty or about to be truncated by the caller) and moves
    /// its descriptor high.
    pub fn new(file: File, path: PathBuf) -> io::Result<TraceFile> {
        let meta = file.metadata()?;
        Ok(TraceFile {
            fd: move_high(file),
            dev: meta.dev(),
            ino: meta.ino(),
            path,
            pos: 0,
            owned: true,
        })
    }

    /// True when `fd` names the trace's inode.
    fn names_trace(&self, fd: RawFd) -> bool {
        // SAFETY: fstat into a zeroed stat of the right type; a closed fd gives EBADF.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        (unsafe { libc::fstat(fd, &mut st) }) == 0 && st.st_dev == self.dev && st.st_ino == self.ino
    }

    /// Makes sure the descriptor names the trace, reopening the trace by name when the program
    /// closed or replaced it.
    fn check(&mut self) -> io::Result<()> {
        if self.owned && self.names_trace(self.fd) {
            return Ok(());
        }
        self.owned = false;
        let lost = self.fd;
        let reopened = open(&self.path, Create::Reuse).ok().map(move_high);
        match reopened {
            Some(fd) if self.names_trace(fd) && lock(fd) => {
                self.fd = fd;
                self.owned = true;
                Ok(())
            }
            other => {
                if let Some(fd) = other {
                    // SAFETY: a descriptor this function just opened.
                    unsafe { libc::close(fd) };
                }
                LOST.store(true, Ordering::Relaxed);
                Err(io::Error::other(format!(
                    "the program closed or replaced descriptor {lost}, and the name no longer \
                     leads to the trace"
                )))
            }
        }
    }
}

impl TraceFile {
    /// When the trace has no name left (its folder was removed while the program ran: the
    /// descriptor still holds every byte), writes it again under its name, re-creating the
    /// folder; `Ok(false)` when its name still leads to it.
    pub fn restore_if_removed(&self) -> io::Result<bool> {
        // SAFETY: fstat into a zeroed stat of the right type.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if !self.owned || unsafe { libc::fstat(self.fd, &mut st) } != 0 || st.st_nlink > 0 {
            return Ok(false);
        }
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        // The descriptor is write-only; /proc reopens the (unlinked) file for reading.
        let mut bytes = std::fs::File::open(format!("/proc/self/fd/{}", self.fd))?;
        let mut copy = open(&self.path, Create::New)?;
        io::copy(&mut bytes, &mut copy)?;
        Ok(true)
    }
}

impl Write for TraceFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.check()?;
        // SAFETY: pwrite of a valid buffer to a descriptor checked to name the trace.
        let n = unsafe {
            libc::pwrite(
                self.fd,
                buf.as_ptr().cast(),
                buf.len(),
                self.pos as libc::off_t,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        self.pos += n as u64;
        Ok(n as usize)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for TraceFile {
    fn drop(&mut self) {
        if self.owned && self.names_trace(self.fd) {
            // SAFETY: the descriptor was checked to still be ours.
            unsafe { libc::close(self.fd) };
        }
    }
}

/// Takes an exclusive `flock` on `fd` without waiting; false when another process holds it.
pub fn lock(fd: RawFd) -> bool {
    // SAFETY: flock on a descriptor the caller owns.
    unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// The highest free descriptor number below both the soft `RLIMIT_NOFILE` and 1024, close-on-
/// exec, holding `file`; the file's own (low) number when none is free up there.
fn move_high(file: File) -> RawFd {
    let fd = file.into_raw_fd();
    // SAFETY: getrlimit into a zeroed struct.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur
    } else {
        0
    };
    let top = soft.min(1024) as RawFd;
    // F_DUPFD_CLOEXEC returns the lowest free number at or above its argument: start just under
    // the limit and step down past numbers the program holds (a few tries: above them all
    // usually means free).
    for want in (fd + 1..top).rev().take(64) {
        // SAFETY: duplicating a descriptor this function owns.
        let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, want) };
        if high >= 0 {
            // SAFETY: the low duplicate is ours and no longer needed.
            unsafe { libc::close(fd) };
            return high;
        }
    }
    fd
}
