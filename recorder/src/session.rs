//! Starting to record, once per process: choose the trace file, create the journal, start the
//! writer thread. Runs on the first tracked lookup or call, never at load time, so tools that
//! merely inherit `LD_PRELOAD` create nothing.

use crate::clock;
use crate::config::{self, Config};
use crate::exit;
use crate::ring;
use crate::stacks;
use crate::writer::{self, Job};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};
use vramtrace_format::conventions::{Heartbeat, heartbeat_name, process_trace_name, trace_stem};
use vramtrace_format::journal::{self, HEADER_LEN, MAGIC, RECORD_LEN};
use vramtrace_format::{ALLOCATOR_ENV_VARS, Metadata, Process, TraceWriter, WriterOptions};

const NOT_STARTED: u8 = 0;
const STARTING: u8 = 1;
const RUNNING: u8 = 2;
const OFF: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(NOT_STARTED);
static STARTER: AtomicU32 = AtomicU32::new(0);
/// Set in a fork child: it must not claim its parent's file name.
static FORK_CHILD: AtomicBool = AtomicBool::new(false);
/// The process that owns the running session (0 when none).
static OWNER: AtomicU32 = AtomicU32::new(0);

/// True while recording has not started yet or is starting on some thread (a hook should then
/// build its record; `ring::push` waits for the start).
#[inline]
pub fn may_start() -> bool {
    matches!(STATE.load(Ordering::Relaxed), NOT_STARTED | STARTING)
}

/// True when this process records into a live session.
pub fn running_here() -> bool {
    STATE.load(Ordering::Acquire) == RUNNING && OWNER.load(Ordering::Relaxed) == clock::pid()
}

/// Starts recording if it has not started; true when recording. A hook calls this: while
/// another thread is starting, it waits (up to 2 s, then it gives up on its one event: the
/// starting thread might be waiting for a lock this one holds, such as the loader's).
pub fn ensure_started() -> bool {
    start(true)
}

/// Starts recording if it has not started, without waiting for a start under way elsewhere.
/// The lookup paths (`dlsym`, `cuGetProcAddress`) call this: they may run with the loader's
/// lock held, which the starting thread may need.
pub fn start_soon() {
    start(false);
}

fn start(wait: bool) -> bool {
    let mut deadline = 0;
    loop {
        match STATE.load(Ordering::Acquire) {
            RUNNING => return true,
            OFF => return false,
            NOT_STARTED => {
                if STATE
                    .compare_exchange(NOT_STARTED, STARTING, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    STARTER.store(clock::tid(), Ordering::Relaxed);
                    let ok = std::panic::catch_unwind(open).unwrap_or(false);
                    STATE.store(if ok { RUNNING } else { OFF }, Ordering::Release);
                    return ok;
                }
            }
            _ => {
                // Starting on another thread, or re-entered from `open` itself.
                if !wait || STARTER.load(Ordering::Relaxed) == clock::tid() {
                    return false;
                }
                let now = clock::now();
                if deadline == 0 {
                    deadline = now + 2_000_000_000;
                } else if now > deadline {
                    return false;
                }
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            }
        }
    }
}

/// Stops recording for good in this process (after the trace was finalized).
pub fn stop() {
    STATE.store(OFF, Ordering::Release);
}

/// Runs in a fork child: the parent's session belongs to the parent; the child starts its own
/// on its first call.
pub fn after_fork_in_child() {
    FORK_CHILD.store(true, Ordering::Relaxed);
    OWNER.store(0, Ordering::Relaxed);
    // A parent that could not record warned already; its child stays quiet and unrecorded.
    if STATE.load(Ordering::Relaxed) != OFF {
        STATE.store(NOT_STARTED, Ordering::Relaxed);
    }
}

fn open() -> bool {
    let cfg = config::get();
    if cfg.disabled {
        return false;
    }
    match open_session(cfg) {
        Ok(path) => {
            heartbeat(cfg, Heartbeat::Trace, &path.to_string_lossy());
            true
        }
        Err(e) => {
            let msg = format!(
                "vramtrace: cannot record process {} ({e}); it runs on unrecorded\n",
                clock::pid()
            );
            // SAFETY: write(2) of a valid buffer; the result is irrelevant.
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
            heartbeat(cfg, Heartbeat::Failed, &e);
            false
        }
    }
}

fn open_session(cfg: &Config) -> Result<PathBuf, String> {
    let pid = clock::pid();
    let (path, file) = trace_file(cfg, pid)?;
    let journal_path = journal::path_for(&path);
    let base = create_journal(&journal_path, cfg.slots, pid)
        .map_err(|e| format!("{}: {e}", journal_path.display()))?;

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
    OWNER.store(pid, Ordering::Relaxed);
    stacks::start(cfg.stacks, cfg.max_depth);
    ring::attach(base, cfg.slots);
    exit::install();
    Ok(path)
}

/// The trace file of this process, opened for writing.
///
/// A directory gets `PROGRAM-PID.vramtrace`. A file name goes to the first process that claims
/// it (an exclusive `flock` held for the process's life, so a stale file from an earlier run is
/// reused); any other process, and every fork child, writes `STEM-PID.vramtrace` beside it.
fn trace_file(cfg: &Config, pid: u32) -> Result<(PathBuf, File), String> {
    let output = match &cfg.output {
        Some(p) => p.clone(),
        None => std::env::current_dir().map_err(|e| format!("current directory: {e}"))?,
    };
    let as_dir = output.as_os_str().to_string_lossy().ends_with('/') || output.is_dir();
    let path = if as_dir {
        std::fs::create_dir_all(&output).map_err(|e| format!("{}: {e}", output.display()))?;
        output.join(process_trace_name(&program_name(), pid))
    } else {
        if !FORK_CHILD.load(Ordering::Relaxed)
            && let Some(f) = claim(&output)
        {
            return Ok((output, f));
        }
        output.with_file_name(process_trace_name(&trace_stem(&output), pid))
    };
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((path, file))
}

fn claim(path: &Path) -> Option<File> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .ok()?;
    // SAFETY: flock on a file descriptor this function owns.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return None;
    }
    f.set_len(0).ok()?;
    Some(f)
}

/// Creates the journal with all its blocks allocated (a store into a hole of a full disk would
/// be a SIGBUS in the program) and maps it.
fn create_journal(path: &Path, slots: u64, pid: u32) -> std::io::Result<*mut u8> {
    let len = HEADER_LEN + slots as usize * RECORD_LEN;
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(path)?;
    // SAFETY: a valid descriptor; posix_fallocate writes zeros where the file system lacks
    // fallocate.
    let r = unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, len as libc::off_t) };
    if r != 0 {
        let _ = std::fs::remove_file(path);
        return Err(std::io::Error::from_raw_os_error(r));
    }
    let mut header = [0u8; 24];
    header[..8].copy_from_slice(&MAGIC);
    header[8..12].copy_from_slice(&(RECORD_LEN as u32).to_le_bytes());
    header[12..16].copy_from_slice(&pid.to_le_bytes());
    header[16..24].copy_from_slice(&slots.to_le_bytes());
    (&f).write_all(&header)?;
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

/// Tells the launcher (through `VRAMTRACE_HEARTBEAT`) what this process did.
pub fn heartbeat(cfg: &Config, what: Heartbeat, detail: &str) {
    if let Some(dir) = &cfg.heartbeat {
        let _ = std::fs::write(dir.join(heartbeat_name(clock::pid(), what)), detail);
    }
}
