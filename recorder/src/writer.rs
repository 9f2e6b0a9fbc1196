//! The writer thread: drains the journal into trace chunks, learns table entries, finalizes.
//!
//! It is the only code that encodes, compresses, allocates per event or touches the trace file.
//! It frees journal slots only after the chunk holding their events was written (`flush`), which
//! is what makes the journal a complete crash record (see `ring`).

use crate::context;
use crate::driver_count::Sampler;
use crate::filesize;
use crate::heartbeat;
use crate::lifecycle;
use crate::nvml;
use crate::ring;
use crate::stacks::TableWriter;
use crate::threadnames;
use crate::tracefile::{self, TraceFile};
use std::collections::HashSet;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use vramtrace_format::conventions::{Heartbeat, heartbeat_name};
use vramtrace_format::journal::Record;
use vramtrace_format::{
    Api, Device, Event, MemoryKind, Metadata, Op, Pool, Stream, Thread, TraceWriter,
};

/// How long chunks may wait in memory before they are written (their events are already safe
/// in the journal; this bounds how much a reader of a live trace lags).
const FLUSH_EVERY: Duration = Duration::from_millis(250);

/// A journal mapping handed to the writer thread.
struct Base(*mut u8);
// SAFETY: the mapping is process-wide shared memory accessed through atomics and slots that
// the protocol in `ring` hands over between threads.
unsafe impl Send for Base {}

/// Everything the writer thread owns.
pub struct Job {
    base: Base,
    capacity: u64,
    trace: Option<TraceWriter<BufWriter<TraceFile>>>,
    trace_path: PathBuf,
    journal_path: PathBuf,
    pid: u32,
    threads: HashSet<u32>,
    devices: HashSet<i32>,
    streams: HashSet<(u64, i32)>,
    pools: HashSet<u64>,
    metadata: Metadata,
    last_seen: Option<(u32, i32, u64, u64, bool, bool)>,
    stacks: TableWriter,
    driver_counts: Sampler,
    broken: bool,
}

impl Job {
    pub fn new(
        base: *mut u8,
        capacity: u64,
        trace: TraceWriter<BufWriter<TraceFile>>,
        trace_path: PathBuf,
        journal_path: PathBuf,
        pid: u32,
        metadata: Metadata,
    ) -> Job {
        Job {
            base: Base(base),
            capacity,
            trace: Some(trace),
            trace_path,
            journal_path,
            pid,
            threads: HashSet::new(),
            devices: HashSet::new(),
            streams: HashSet::new(),
            pools: HashSet::new(),
            metadata,
            last_seen: None,
            stacks: TableWriter::new(pid),
            driver_counts: Sampler::default(),
            broken: false,
        }
    }
}

/// Starts the writer thread.
pub fn spawn(job: Job) -> std::io::Result<()> {
    lifecycle::writer_starting();
    let spawned = std::thread::Builder::new()
        .name("vramtrace-writer".into())
        .spawn(move || {
            // Every write of the trace runs here: a SIGXFSZ it raises stays with this thread.
            let _blocked = filesize::Guard::new();
            lifecycle::writer_running();
            let mut job = job;
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run()));
            lifecycle::writer_ended(true);
        });
    if spawned.is_err() {
        lifecycle::writer_ended(false);
    }
    spawned.map(drop)
}

impl Job {
    fn run(&mut self) {
        nvml::load();
        // SAFETY: the journal mapping stays mapped for the life of the process.
        let (next, drained) = unsafe { ring::cursors(self.base.0) };
        let mut cursor = drained.load(Ordering::Acquire);
        let mut flushed = cursor;
        let mut last_flush = Instant::now();
        loop {
            let finalize = lifecycle::finalize_requested();
            if finalize {
                self.driver_counts.at_end(&self.devices);
                // No new events from here on; let the hooks already past the check publish.
                ring::detach();
                let deadline = Instant::now() + Duration::from_millis(200);
                while Instant::now() < deadline {
                    let end = next.load(Ordering::Acquire);
                    cursor = self.drain(cursor, end);
                    if cursor == end {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            if let Some(t) = self.trace.as_mut() {
                self.stacks.poll(t.tables_mut());
            }
            if !finalize {
                self.driver_counts.poll(&self.devices);
            }
            let before = cursor;
            cursor = self.drain(cursor, next.load(Ordering::Acquire));
            let pending = cursor - flushed;
            if pending > 0
                && (finalize || pending >= self.capacity / 2 || last_flush.elapsed() >= FLUSH_EVERY)
            {
                self.write(|t| t.flush());
                drained.store(cursor, Ordering::Release);
                flushed = cursor;
                last_flush = Instant::now();
            }
            if finalize {
                self.finish();
                return;
            }
            // Drain in batches, not continuously: a writer that polls the cursors and reads each
            // record right after it was written keeps pulling those cache lines away from the
            // hooks, which then pay a miss on every event. Sleep unless the ring is filling up.
            let backlog = next.load(Ordering::Relaxed).saturating_sub(cursor);
            if cursor == before || backlog < self.capacity / 4 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Moves the published records from `cursor` up to `end` into the trace writer (stopping at
    /// the first slot not yet published, or when half the ring is pending); returns the new
    /// cursor.
    fn drain(&mut self, mut cursor: u64, end: u64) -> u64 {
        let flushed_limit = cursor + self.capacity / 2;
        while cursor < end && cursor < flushed_limit {
            // SAFETY: the slot's record is stable once its seq is published, until `drained`
            // passes it.
            let rec: Record = unsafe {
                let (seq, rec) = ring::slot(self.base.0, self.capacity, cursor);
                if seq.load(Ordering::Acquire) != cursor + 1 {
                    break;
                }
                std::ptr::read(rec)
            };
            cursor += 1;
            if let Some(e) = rec.to_event() {
                self.learn(&e);
                self.write(|t| t.push(&e));
            }
        }
        cursor
    }

    /// Adds the table entries an event refers to that the trace does not have yet.
    fn learn(&mut self, e: &Event) {
        if let Some(trace) = self.trace.as_mut() {
            self.stacks.learn(e.stack, trace.tables_mut());
        }
        // Most events repeat the previous one's thread, device, stream and pool: skip the sets.
        let takes_stream = matches!(e.api.kind(), MemoryKind::Pool)
            && matches!(e.api.op(), Op::Alloc | Op::Free)
            || matches!(
                e.api,
                Api::CuMemMapArrayAsync | Api::CuMemMapArrayAsync_ptsz
            );
        let key = (
            e.tid,
            e.device,
            e.stream,
            e.pool,
            takes_stream,
            e.succeeded(),
        );
        if self.last_seen == Some(key) && e.api.op() != Op::PoolCreate {
            return;
        }
        self.last_seen = Some(key);
        let pid = self.pid;
        let Some(trace) = self.trace.as_mut() else {
            return;
        };
        let tables = trace.tables_mut();
        let mut new_metadata = false;
        if self.threads.insert(e.tid) {
            let name = threadnames::get(e.tid);
            tables.threads.push(Thread {
                tid: e.tid,
                pid,
                name,
            });
        }
        if e.device >= 0 && self.devices.insert(e.device) {
            // The driver describes the device from this thread, never from a hook; a driver
            // that does not answer leaves the ordinal alone.
            tables
                .devices
                .push(context::describe_device(e.device).unwrap_or(Device {
                    ordinal: e.device,
                    name: String::new(),
                    uuid: [0; 16],
                    total_memory: 0,
                    compute_capability: (0, 0),
                }));
            if self.metadata.driver_version == 0
                && let Some(v) = context::driver_version()
            {
                self.metadata.driver_version = v;
                new_metadata = true;
            }
        }
        if takes_stream && self.streams.insert((e.stream, e.device)) {
            tables.streams.push(Stream {
                handle: e.stream,
                device: e.device,
                per_thread_default: e.stream == 2 || (e.stream == 0 && e.api.per_thread_stream()),
            });
        }
        if e.pool != 0 && e.succeeded() && self.pools.insert(e.pool) {
            let created = e.api.op() == Op::PoolCreate;
            tables.pools.push(Pool {
                handle: e.pool,
                device: e.device,
                allocation_type: if created { e.flags as u32 } else { 0 },
                max_size: if created { e.size } else { 0 },
            });
        }
        if new_metadata {
            // A later metadata chunk replaces the first for readers.
            let metadata = self.metadata.clone();
            self.write(|t| t.set_metadata(&metadata));
        }
    }

    /// Runs a writer operation unless an earlier one failed; the first failure warns once and
    /// from then on events are discarded (the program is never disturbed).
    fn write(
        &mut self,
        op: impl FnOnce(&mut TraceWriter<BufWriter<TraceFile>>) -> vramtrace_format::Result<()>,
    ) {
        let Some(trace) = self.trace.as_mut().filter(|_| !self.broken) else {
            return;
        };
        if let Err(e) = op(trace) {
            self.fail(e);
        }
    }

    /// The first failure warns once; from then on the hooks record nothing. When the program
    /// took the trace's descriptor away (the file itself is intact), the journal stays for
    /// `vramtrace record` or the next read to merge; after a write error (a full disk) it is
    /// deleted, as merging it into the damaged trace is not known to leave no gap.
    fn fail(&mut self, e: vramtrace_format::Error) {
        self.broken = true;
        ring::detach();
        filesize::take();
        let kept = if tracefile::descriptor_lost() {
            format!(
                " (the journal {} keeps the events)",
                self.journal_path.display()
            )
        } else {
            let _ = std::fs::remove_file(&self.journal_path);
            String::new()
        };
        let why = format!(
            "cannot write {} ({e}{})",
            self.trace_path.display(),
            filesize::note()
        );
        let msg = format!(
            "vramtrace: {why}; process {} runs on, no longer recorded{kept}\n",
            self.pid,
        );
        // SAFETY: write(2) of a valid buffer.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
        // The launcher's end line says why the trace stops early.
        heartbeat::write(&heartbeat_name(self.pid, Heartbeat::Failed), &why);
    }

    /// A trace whose folder was removed while the program ran is written again, with one
    /// warning; when that fails, the warning and the launcher's end line say the trace is lost.
    fn restore(&self, file: &TraceFile) {
        let why = match file.restore_if_removed() {
            Ok(false) => return,
            Ok(true) => {
                let msg = format!(
                    "vramtrace: the folder of {} was removed while process {} ran; its trace \
                     was written again there\n",
                    self.trace_path.display(),
                    self.pid
                );
                // SAFETY: write(2) of a valid buffer.
                unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
                return;
            }
            Err(e) => format!(
                "{} was removed while process {} ran and cannot be written again ({e}): the \
                 trace is lost",
                self.trace_path.display(),
                self.pid
            ),
        };
        let msg = format!("vramtrace: {why}\n");
        // SAFETY: write(2) of a valid buffer.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
        heartbeat::write(&heartbeat_name(self.pid, Heartbeat::Failed), &why);
    }

    fn finish(&mut self) {
        self.stacks.finish();
        if let Some(trace) = self.trace.take().filter(|_| !self.broken) {
            // A process that used the driver but made no memory call leaves nothing behind.
            if trace.events_pushed() == 0 {
                drop(trace);
                let _ = std::fs::remove_file(&self.trace_path);
                let _ = std::fs::remove_file(&self.journal_path);
                lifecycle::stop();
                return;
            }
            match trace.finish() {
                Ok(out) => {
                    let _ = std::fs::remove_file(&self.journal_path);
                    if let Ok(file) = out.into_inner() {
                        self.restore(&file);
                    }
                }
                Err(e) => {
                    filesize::take();
                    let why = format!(
                        "cannot finish {} ({e}{})",
                        self.trace_path.display(),
                        filesize::note()
                    );
                    heartbeat::write(&heartbeat_name(self.pid, Heartbeat::Failed), &why);
                    let msg = format!("vramtrace: {why}\n");
                    // SAFETY: write(2) of a valid buffer.
                    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
                }
            }
        }
        lifecycle::stop();
    }
}
