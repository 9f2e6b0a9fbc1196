//! Starting to record, once per process: choose the trace file, create the journal, start the
//! writer thread. [`crate::lifecycle`] decides when (the first tracked lookup or call) and owns
//! the state this changes.

use crate::clock;
use crate::config::{self, Config};
use crate::exit;
use crate::filesize;
use crate::heartbeat;
use crate::lifecycle;
use crate::ring;
use crate::stacks;
use crate::tracefile::{self, Create, TraceFile};
use crate::writer::{self, Job};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use vramtrace_format::chunk::MAGIC;
use vramtrace_format::conventions::{
    Heartbeat, heartbeat_name, process_trace_name, trace_heartbeat_name, trace_stem,
};
use vramtrace_format::journal::{self, HEADER_FIELDS_LEN, HEADER_LEN, Header, RECORD_LEN};
use vramtrace_format::{ALLOCATOR_ENV_VARS, Metadata, Process, TraceWriter, WriterOptions};

/// Starts recording if it may still start (not started, or starting on another thread, whose
/// start this waits for up to 2 s); what a hook or the tracker calls before it builds its record.
#[inline]
pub fn start_if_needed() {
    if lifecycle::may_start() {
        lifecycle::start(true, open);
    }
}

/// Starts recording if it has not started, without waiting for a start under way elsewhere.
/// The lookup paths (`dlsym`, `cuGetProcAddress`) call this: they may run with the loader's
/// lock held, which the starting thread may need.
pub fn start_soon() {
    lifecycle::start(false, open);
}

/// Opens this process's session; false when it records nothing (disabled, or a file could not
/// be made: then one warning went to stderr). Called once, through [`lifecycle::start`].
pub fn open() -> bool {
    let cfg = config::get();
    if cfg.disabled {
        return false;
    }
    // The journal's posix_fallocate and the trace's first bytes run on the program's thread.
    let guard = filesize::Guard::new();
    match open_session(cfg) {
        Ok(path) => {
            let mark = trace_heartbeat_name(clock::pid(), &path);
            heartbeat::write(&mark, &path.to_string_lossy());
            true
        }
        Err(e) => {
            guard.settle();
            let e = format!("{e}{}", filesize::note());
            let msg = format!(
                "vramtrace: cannot record process {} ({e}); it runs on unrecorded\n",
                clock::pid()
            );
            // SAFETY: write(2) of a valid buffer; the result is irrelevant.
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
            heartbeat::write(&heartbeat_name(clock::pid(), Heartbeat::Failed), &e);
            false
        }
    }
}

fn open_session(cfg: &Config) -> Result<PathBuf, String> {
    let pid = clock::pid();
    let (path, file) = trace_file(cfg, pid)?;
    let journal_path = journal::path_for(&path);
    let base = match create_journal(&journal_path, cfg.slots, pid) {
        Ok(base) => base,
        Err(e) => {
            // No empty trace beside the warning.
            let _ = std::fs::remove_file(&path);
            return Err(format!("{}: {e}", journal_path.display()));
        }
    };
    let file =
        TraceFile::new(file, path.clone()).map_err(|e| format!("{}: {e}", path.display()))?;

    let metadata = Metadata {
        writer: format!("vramtrace-recorder {}", env!("CARGO_PKG_VERSION")),
        host: hostname(),
        driver_version: 0,
        environment: ALLOCATOR_ENV_VARS
            .iter()
            .filter_map(|&k| Some((k.to_string(), std::env::var(k).ok()?)))
            .collect(),
        capture_level: if cfg.requests {
            "request".into()
        } else {
            String::new()
        },
    };
    let options = WriterOptions {
        chunk_events: (cfg.slots / 2) as u32,
        ..WriterOptions::default()
    };
    let out = std::io::BufWriter::with_capacity(1 << 20, file);
    let mut trace = TraceWriter::new(out, &metadata, options)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    trace.tables_mut().processes.push(Process {
        pid,
        // SAFETY: getppid has no preconditions.
        parent_pid: unsafe { libc::getppid() } as u32,
        command_line: command_line(),
        start_unix_ns: clock::unix_now(),
        start_monotonic_ns: clock::now(),
    });
    trace
        .flush()
        .map_err(|e| format!("{}: {e}", path.display()))?;

    crate::nvml::expect();
    writer::spawn(Job::new(
        base,
        cfg.slots,
        trace,
        path.clone(),
        journal_path,
        pid,
        metadata,
    ))
    .map_err(|e| format!("cannot start the writer thread: {e}"))?;
    lifecycle::set_owner(pid);
    stacks::start(cfg.stacks, cfg.max_depth);
    ring::attach(base, cfg.slots);
    exit::install();
    Ok(path)
}

/// The trace file of this process, opened for writing, empty.
///
/// A directory gets `PROGRAM-PID.vramtrace`. A file name goes to the first process that claims
/// it (an exclusive `flock` held for the process's life, so a stale file from an earlier run is
/// reused); any other process, and every fork child, writes `STEM-PID.vramtrace` beside it.
/// A name that exists is never truncated, except the claimed file: a process that execs keeps
/// its pid, so each later image writes `STEM-PID.2.vramtrace`, `STEM-PID.3.vramtrace`, ... and the
/// earlier image's unfinished trace and journal stay for `vramtrace record` (or the next read)
/// to merge. Nothing is written through a symbolic link, into a FIFO or a device.
fn trace_file(cfg: &Config, pid: u32) -> Result<(PathBuf, File), String> {
    let output = match &cfg.output {
        Some(p) => p.clone(),
        None => std::env::current_dir().map_err(|e| format!("current directory: {e}"))?,
    };
    let as_dir = output.as_os_str().to_string_lossy().ends_with('/') || output.is_dir();
    let (dir, stem) = if as_dir {
        std::fs::create_dir_all(&output).map_err(|e| format!("{}: {e}", output.display()))?;
        (output.clone(), program_name())
    } else {
        if !lifecycle::is_fork_child() && !earlier_image_claimed(&output, pid) {
            match claim(&output) {
                Ok(Some(f)) => return Ok((output, f)),
                Ok(None) => {}
                Err(e) => return Err(format!("{}: {e}", output.display())),
            }
        }
        let dir = output.parent().unwrap_or(Path::new("/")).to_path_buf();
        (dir, trace_stem(&output))
    };
    for image in 1..=1000 {
        let path = dir.join(process_trace_name(&stem, pid, image));
        match tracefile::open(&path, Create::New) {
            Ok(f) => return Ok((path, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
    Err(format!(
        "{}: a thousand traces of process {pid} exist",
        dir.join(process_trace_name(&stem, pid, 1)).display()
    ))
}

/// The named output file, locked and emptied; `None` when another process holds it. A file
/// that holds something other than a trace (`-o notes.txt`) is refused, never emptied.
fn claim(path: &Path) -> std::io::Result<Option<File>> {
    let f = tracefile::open(path, Create::Reuse)?;
    if !tracefile::lock(f.as_raw_fd()) {
        return Ok(None);
    }
    let mut head = [0u8; 8];
    let n = tracefile::open_regular(path, OpenOptions::new().read(true))?.read(&mut head)?;
    if n > 0 && head[..n] != MAGIC[..n] {
        return Err(std::io::Error::other(
            "exists and is not a vramtrace trace; it is left untouched",
        ));
    }
    f.set_len(0)?;
    Ok(Some(f))
}

/// True when the journal beside `path` belongs to `pid`: an earlier image of this process
/// (before an `exec`, which releases the claim's lock) wrote it and left it unfinished.
fn earlier_image_claimed(path: &Path, pid: u32) -> bool {
    let mut header = [0u8; HEADER_FIELDS_LEN];
    tracefile::open_regular(&journal::path_for(path), OpenOptions::new().read(true))
        .and_then(|mut f| f.read_exact(&mut header))
        .is_ok()
        && Header::from_bytes(&header).is_some_and(|h| h.pid == pid)
}

/// Creates the journal with all its blocks allocated (a store into a hole of a full disk would
/// be a SIGBUS in the program) and maps it.
fn create_journal(path: &Path, slots: u64, pid: u32) -> std::io::Result<*mut u8> {
    let len = HEADER_LEN + slots as usize * RECORD_LEN;
    let f = tracefile::open_regular(
        path,
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true),
    )?;
    // SAFETY: a valid descriptor; posix_fallocate writes zeros where the file system lacks
    // fallocate.
    let r = unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, len as libc::off_t) };
    if r != 0 {
        let _ = std::fs::remove_file(path);
        return Err(std::io::Error::from_raw_os_error(r));
    }
    (&f).write_all(&Header::new(pid, slots).to_bytes())?;
    // SAFETY: a fresh shared read-write mapping of `len` bytes of a file this function
    // allocated; it is never unmapped (hooks may hold its address until the process ends).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            // Prefaulted: the hooks never take a page fault on a fresh slot.
            libc::MAP_SHARED | libc::MAP_POPULATE,
            f.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error();
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    Ok(p.cast())
}

fn program_name() -> String {
    let exe = std::fs::read_link("/proc/self/exe").unwrap_or_default();
    let name: String = exe
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        "process".into()
    } else {
        name
    }
}

fn command_line() -> Vec<String> {
    std::fs::read("/proc/self/cmdline")
        .unwrap_or_default()
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}
