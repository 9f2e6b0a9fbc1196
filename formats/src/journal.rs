//! The crash journal: a file-backed ring of fixed-size event records beside a trace.
//!
//! The recorder's hooks write each event into a `MAP_SHARED` mapping of `TRACE.journal` before
//! the hooked call returns; its writer thread drains the ring into ordinary trace chunks. A store
//! into a shared file mapping lands in the kernel's page cache at once, so it outlives a
//! `SIGKILL` of the process the next instant. A slot is handed back to the hooks only after the
//! chunk holding its event was written to the trace, so after a kill every event either sits in
//! a complete chunk of the trace or is still committed in the journal. [`recover`] merges the
//! two into a finished trace. `formats/JOURNAL.md` specifies every byte.

use crate::error::{Error, Result};
use crate::event::Event;
use crate::reader::{ReadOptions, Trace};
use crate::tables::Thread;
use crate::writer::{TraceWriter, WriterOptions};
use crate::{Api, EventBatch, Metadata};
use std::path::{Path, PathBuf};

/// First eight bytes of a journal.
pub const MAGIC: [u8; 8] = *b"VTJRNL01";
/// Bytes before the first record.
pub const HEADER_LEN: usize = 4096;
/// Bytes per record.
pub const RECORD_LEN: usize = 128;
/// Byte offset of the reservation cursor (`u64`, slots handed out so far).
pub const NEXT_OFFSET: usize = 64;
/// Byte offset of the drain cursor (`u64`, slots whose events are in the trace).
pub const DRAINED_OFFSET: usize = 128;
/// Most record slots a journal has (the recorder clamps `VRAMTRACE_JOURNAL_SLOTS` to it).
pub const MAX_CAPACITY: u64 = 1 << 24;
/// Most bytes a journal has.
pub const MAX_LEN: u64 = HEADER_LEN as u64 + MAX_CAPACITY * RECORD_LEN as u64;

/// The fixed header at the start of a journal (the cursors live in their own cache lines after
/// it and are accessed atomically by the recorder).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub magic: [u8; 8],
    /// Bytes per record, [`RECORD_LEN`].
    pub record_len: u32,
    /// Process that owns the journal.
    pub pid: u32,
    /// Number of record slots; a power of two.
    pub capacity: u64,
}

/// Bytes of [`Header`] at the start of the file.
pub const HEADER_FIELDS_LEN: usize = 24;

impl Header {
    /// The header of a new journal of `capacity` record slots, owned by process `pid`.
    pub fn new(pid: u32, capacity: u64) -> Header {
        Header {
            magic: MAGIC,
            record_len: RECORD_LEN as u32,
            pid,
            capacity,
        }
    }

    /// The header as the file stores it (little-endian).
    pub fn to_bytes(&self) -> [u8; HEADER_FIELDS_LEN] {
        let mut b = [0u8; HEADER_FIELDS_LEN];
        b[..8].copy_from_slice(&self.magic);
        b[8..12].copy_from_slice(&self.record_len.to_le_bytes());
        b[12..16].copy_from_slice(&self.pid.to_le_bytes());
        b[16..24].copy_from_slice(&self.capacity.to_le_bytes());
        b
    }

    /// The header at the start of `bytes`, if they start with the journal magic.
    pub fn from_bytes(bytes: &[u8]) -> Option<Header> {
        if bytes.len() < HEADER_FIELDS_LEN || bytes[..8] != MAGIC {
            return None;
        }
        Some(Header {
            magic: MAGIC,
            record_len: u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")),
            pid: u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes")),
            capacity: u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes")),
        })
    }
}

/// One event as the hooks store it. `seq` is written last: a record counts only when its `seq`
/// is non-zero and belongs to its slot (`(seq - 1) % capacity == slot`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    pub time_ns: u64,
    pub duration_ns: u64,
    pub address: u64,
    pub size: u64,
    pub handle: u64,
    pub aux: u64,
    pub stream: u64,
    pub pool: u64,
    pub flags: u64,
    pub pid: u32,
    pub tid: u32,
    pub device: i32,
    pub result: u32,
    pub stack: u32,
    pub api: u16,
    pub reserved0: u16,
    pub reserved: [u64; 3],
}

const _: () = assert!(std::mem::size_of::<Record>() == RECORD_LEN);
const _: () = assert!(std::mem::size_of::<Header>() <= NEXT_OFFSET);

impl Record {
    /// The event, or `None` when the api id is unknown.
    pub fn to_event(&self) -> Option<Event> {
        Some(Event {
            seq: self.seq,
            time_ns: self.time_ns,
            duration_ns: self.duration_ns,
            pid: self.pid,
            tid: self.tid,
            device: self.device,
            api: Api::from_id(self.api)?,
            result: self.result,
            address: self.address,
            size: self.size,
            handle: self.handle,
            aux: self.aux,
            stream: self.stream,
            pool: self.pool,
            flags: self.flags,
            stack: self.stack,
        })
    }

    fn parse(b: &[u8]) -> Record {
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        Record {
            seq: u64_at(0),
            time_ns: u64_at(8),
            duration_ns: u64_at(16),
            address: u64_at(24),
            size: u64_at(32),
            handle: u64_at(40),
            aux: u64_at(48),
            stream: u64_at(56),
            pool: u64_at(64),
            flags: u64_at(72),
            pid: u32_at(80),
            tid: u32_at(84),
            device: u32_at(88) as i32,
            result: u32_at(92),
            stack: u32_at(96),
            api: u16::from_le_bytes([b[100], b[101]]),
            reserved0: 0,
            reserved: [0; 3],
        }
    }
}

/// The journal path that belongs to `trace`: the trace's name with `.journal` appended.
pub fn path_for(trace: &Path) -> PathBuf {
    let mut p = trace.as_os_str().to_owned();
    p.push(".journal");
    PathBuf::from(p)
}

/// The bytes of the journal at `path`, `None` when there is none. Only a regular file no longer
/// than a journal can be is read: a FIFO, a device or `/dev/zero` at that name is an error, not
/// a hang or an endless read.
pub fn load(path: &Path) -> Result<Option<Vec<u8>>> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let refuse = |what: String| Error::Io(std::io::Error::other(what));
    if !meta.is_file() {
        return Err(refuse(format!(
            "{}: not a regular file, so not a journal",
            path.display()
        )));
    }
    if meta.len() > MAX_LEN {
        return Err(refuse(format!(
            "{}: {} bytes, more than a journal can hold ({MAX_LEN})",
            path.display(),
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    use std::io::Read;
    std::fs::File::open(path)?
        .take(MAX_LEN)
        .read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

/// True when the process that owns the journal `bytes` still runs here, so its trace may still
/// be growing and must not be rewritten. A pid that was reused counts as running (the safe
/// answer: the journal is then read but left alone).
pub fn owner_running(bytes: &[u8]) -> bool {
    let Some(Header { pid, .. }) = Header::from_bytes(bytes) else {
        return false;
    };
    pid != 0 && pid != std::process::id() && Path::new("/proc").join(pid.to_string()).exists()
}

/// The header and the committed events of a journal, in `seq` order.
pub fn read(bytes: &[u8]) -> Result<(Header, Vec<Event>)> {
    let corrupt = |what: &str| Error::Corrupt {
        offset: 0,
        what: format!("journal: {what}"),
    };
    let header = Header::from_bytes(bytes)
        .filter(|_| bytes.len() >= HEADER_LEN)
        .ok_or_else(|| corrupt("no journal header"))?;
    if header.record_len as usize != RECORD_LEN || !header.capacity.is_power_of_two() {
        return Err(corrupt("unknown record size or capacity"));
    }
    let slots = ((bytes.len() - HEADER_LEN) / RECORD_LEN).min(header.capacity as usize);
    let mut events: Vec<Event> = (0..slots)
        .filter_map(|slot| {
            let at = HEADER_LEN + slot * RECORD_LEN;
            let r = Record::parse(&bytes[at..at + RECORD_LEN]);
            let owned = r.seq != 0 && (r.seq - 1) % header.capacity == slot as u64;
            if owned { r.to_event() } else { None }
        })
        .collect();
    events.sort_by_key(|e| e.seq);
    Ok((header, events))
}

/// Adds to `trace`, in memory, the events of a crash journal (its bytes, `journal` naming it in
/// the note) that come after the trace's last event; returns how many. A trace that gained
/// events is marked incomplete, with a damage note saying where they came from; the files are
/// left as they are (the journal may still belong to a running process).
pub fn extend_in_memory(
    trace: &mut Trace,
    bytes: &[u8],
    journal: &str,
    why: &str,
) -> Result<usize> {
    let (_, events) = read(bytes)?;
    let last = trace.events().map(|e| e.seq).max().unwrap_or(0);
    let mut extra: Vec<Event> = events.into_iter().filter(|e| e.seq > last).collect();
    if extra.is_empty() {
        return Ok(0);
    }
    extra.sort_by_key(|e| e.seq);
    let note = format!(
        "{} more events read from the crash journal {journal} (not merged into the file: {why})",
        extra.len()
    );
    trace.layout.complete = false;
    trace.layout.damage = Some(match trace.layout.damage.take() {
        Some(d) => format!("{d}; {note}"),
        None => note,
    });
    trace.batches.push(EventBatch::from_events(&extra));
    Ok(extra.len())
}

/// What [`recover`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Events the trace held before.
    pub from_trace: u64,
    /// Events taken from the journal.
    pub from_journal: u64,
}

/// Merges the journal beside `trace` (if any) into it, writing a finished trace in place and
/// deleting the journal. Returns `None` when there is no journal. This is for the launcher that
/// owns the recording (`vramtrace record` after its program ended); read commands never call it
/// (they add a journal's events in memory, [`extend_in_memory`]).
///
/// The file is replaced only when the result holds everything the old file held and no event
/// is missing between the two: the trace reads without salvage (at most its unfinished end is
/// dropped, whose events are still in the journal, formats/JOURNAL.md) and the journal's events
/// continue its last `seq` without a gap. A trace that does not exist or is empty is rebuilt
/// from a journal that starts at `seq` 1. Anything else (a newer format version, a damaged
/// header or middle chunk, a journal that no longer reaches back to the trace's end) is
/// [`Error::JournalNotMerged`], and both files are left as they are.
pub fn recover(trace: &Path) -> Result<Option<Recovered>> {
    let journal_path = path_for(trace);
    let Some(journal) = load(&journal_path)? else {
        return Ok(None);
    };
    let (header, journal_events) = read(&journal)?;
    let old = match std::fs::metadata(trace) {
        Ok(m) if m.len() > 0 => Some(
            Trace::open(trace, ReadOptions::default())
                .map_err(|e| Error::JournalNotMerged(format!("the trace does not read ({e})")))?,
        ),
        Ok(_) => None,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    let (metadata, mut tables, old_events) = match old {
        Some(t) => {
            let events: Vec<Event> = t.events().collect();
            (t.metadata, t.tables, events)
        }
        None => (
            Metadata {
                writer: "vramtrace journal recovery".into(),
                ..Metadata::default()
            },
            Default::default(),
            Vec::new(),
        ),
    };
    let last_seq = old_events.iter().map(|e| e.seq).max().unwrap_or(0);
    let extra: Vec<Event> = journal_events
        .into_iter()
        .filter(|e| e.seq > last_seq)
        .collect();
    if let Some(first) = extra.first().filter(|e| e.seq != last_seq + 1) {
        return Err(Error::JournalNotMerged(format!(
            "the trace's events end at seq {last_seq} and the journal's resume at seq {}, \
             so the events between are in neither",
            first.seq
        )));
    }
    let mut known: std::collections::HashSet<u32> = tables.threads.iter().map(|t| t.tid).collect();
    let mut new_tables = crate::Tables::default();
    for e in &extra {
        if known.insert(e.tid) {
            new_tables.threads.push(Thread {
                tid: e.tid,
                pid: header.pid,
                name: String::new(),
            });
        }
    }
    tables.extend(new_tables);

    crate::replace::write_replacing(trace, |file| -> Result<()> {
        let mut w = TraceWriter::new(file, &metadata, WriterOptions::default())?;
        *w.tables_mut() = tables;
        for e in old_events.iter().chain(&extra) {
            w.push(e)?;
        }
        w.finish()?;
        Ok(())
    })?;
    std::fs::remove_file(&journal_path)?;
    Ok(Some(Recovered {
        from_trace: old_events.len() as u64,
        from_journal: extra.len() as u64,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal_with(capacity: u64, records: &[(usize, Record)]) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_LEN + capacity as usize * RECORD_LEN];
        b[..HEADER_FIELDS_LEN].copy_from_slice(&Header::new(7, capacity).to_bytes());
        for (slot, r) in records {
            // SAFETY: Record is repr(C), plain integers, RECORD_LEN bytes.
            let raw: [u8; RECORD_LEN] = unsafe { std::mem::transmute(*r) };
            let at = HEADER_LEN + slot * RECORD_LEN;
            b[at..at + RECORD_LEN].copy_from_slice(&raw);
        }
        b
    }

    fn rec(seq: u64, size: u64) -> Record {
        Record {
            seq,
            size,
            api: Api::CuMemAlloc_v2.id(),
            ..Record::default()
        }
    }

    #[test]
    fn only_records_that_belong_to_their_slot_count() {
        // Slot 1 holds seq 6 (lap 2 of a 4-slot ring), slot 2 a stale seq that is not its own.
        let b = journal_with(4, &[(0, rec(5, 50)), (1, rec(6, 60)), (2, rec(9, 1))]);
        let (h, events) = read(&b).unwrap();
        assert_eq!(h.capacity, 4);
        assert_eq!(h.pid, 7);
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [5, 6]);
        assert_eq!(events[1].size, 60);
    }

    #[test]
    fn recover_appends_journal_events_the_trace_lacks() {
        let dir = std::env::temp_dir().join(format!("vt-journal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let trace = dir.join("t.vramtrace");
        // A trace whose writer died after its first chunk: no index, no trailer.
        let mut partial = Vec::new();
        {
            let mut w2 =
                TraceWriter::new(&mut partial, &Metadata::default(), WriterOptions::default())
                    .unwrap();
            w2.push(&Event {
                seq: 1,
                size: 10,
                ..Event::new(Api::CuMemAlloc_v2)
            })
            .unwrap();
            w2.flush().unwrap();
        }
        std::fs::write(&trace, &partial).unwrap();
        std::fs::write(
            path_for(&trace),
            journal_with(4, &[(0, rec(1, 10)), (1, rec(2, 20)), (2, rec(3, 30))]),
        )
        .unwrap();
        let r = recover(&trace).unwrap().unwrap();
        assert_eq!(
            r,
            Recovered {
                from_trace: 1,
                from_journal: 2
            }
        );
        let t = Trace::open(&trace, ReadOptions::default()).unwrap();
        assert!(t.layout.complete);
        let sizes: Vec<u64> = t.events().map(|e| e.size).collect();
        assert_eq!(sizes, [10, 20, 30]);
        assert!(!path_for(&trace).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A finished trace of `n` allocations (seq 1..=n) in chunks of 10 events.
    fn finished(n: u64) -> Vec<u8> {
        let options = WriterOptions {
            chunk_events: 10,
            ..WriterOptions::default()
        };
        let mut w = TraceWriter::new(Vec::new(), &Metadata::default(), options).unwrap();
        for seq in 1..=n {
            w.push(&Event {
                seq,
                size: seq,
                ..Event::new(Api::CuMemAlloc_v2)
            })
            .unwrap();
        }
        w.finish().unwrap()
    }

    /// Writes `trace` and `journal` into a fresh directory, calls [`recover`] and asserts that
    /// it refused with a message holding `why` and left both files byte for byte.
    fn refused(name: &str, trace: &[u8], journal: &[u8], why: &str) {
        let dir = std::env::temp_dir().join(format!("vt-journal-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.vramtrace");
        std::fs::write(&path, trace).unwrap();
        std::fs::write(path_for(&path), journal).unwrap();
        let err = recover(&path).unwrap_err();
        assert!(matches!(err, Error::JournalNotMerged(_)), "{err}");
        assert!(err.to_string().contains(why), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), trace);
        assert_eq!(std::fs::read(path_for(&path)).unwrap(), journal);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn recover_leaves_a_trace_of_a_newer_version_and_its_journal_as_they_are() {
        let mut trace = finished(30);
        trace[8..10].copy_from_slice(&(crate::chunk::VERSION + 1).to_le_bytes());
        let crc = crate::codec::checksum(&trace[0..12]);
        trace[12..16].copy_from_slice(&crc.to_le_bytes());
        let journal = journal_with(4, &[(0, rec(1, 1)), (1, rec(2, 2))]);
        refused("newer", &trace, &journal, "is newer than this vramtrace");
    }

    #[test]
    fn recover_leaves_a_trace_with_a_damaged_middle_chunk_as_it_is() {
        let mut trace = finished(30);
        let layout = crate::Layout::scan(&trace, ReadOptions::default()).unwrap();
        let middle = layout
            .chunks
            .iter()
            .filter(|h| h.kind == crate::chunk::ChunkKind::Events)
            .nth(1)
            .unwrap()
            .payload_offset() as usize;
        trace[middle] ^= 0x10;
        // The journal continues the trace: only the damage stops the merge.
        let journal = journal_with(4, &[(0, rec(33, 1)), (3, rec(32, 1)), (2, rec(31, 1))]);
        refused("middle", &trace, &journal, "the trace does not read");
    }

    #[test]
    fn recover_refuses_a_journal_that_no_longer_reaches_back_to_the_trace() {
        // The trace ends at seq 30; the ring has since wrapped and holds seq 37 and 38 only.
        let journal = journal_with(4, &[(0, rec(37, 1)), (1, rec(38, 1))]);
        refused(
            "gap",
            &finished(30),
            &journal,
            "end at seq 30 and the journal's resume at seq 37",
        );
    }
}
