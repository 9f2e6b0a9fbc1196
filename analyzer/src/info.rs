//! What `vramtrace info` reports about a trace: its shape, not its analysis.

use crate::model::{Capture, CaptureLevel, LevelStats, allocator_as_run, detect_level};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use vramtrace_format::conventions::ALLOCATOR_SEGMENT;
use vramtrace_format::{Api, CUDA_SUCCESS, Column, EventBatch, MemoryKind, Op, TraceHead};

/// The facts `info` prints. Field names are a contract (docs/architecture.md, "Output contracts").
#[derive(Debug, Clone, Serialize)]
pub struct TraceInfo {
    pub format_version: u16,
    /// False when the file was recovered from a truncated or damaged file.
    pub complete: bool,
    /// What was wrong with an incomplete file, with the byte offset.
    pub damage: Option<String>,
    pub writer: String,
    pub host: String,
    pub driver_version: u32,
    /// `request`, `segment` or empty when unknown: the writer's word, else inferred from the
    /// events ([`crate::model::detect_level`]), as every command decides it (`summary` too).
    pub capture_level: String,
    /// The level as every command's text shows it ([`crate::model::LevelReport::shown`]).
    pub capture_level_shown: String,
    /// How the requests were seen ([`crate::model::Capture`]); `null` when unknown.
    pub capture: Option<Capture>,
    /// The allocator the program ran under with its configuration, as far as the trace tells
    /// (`pytorch native expandable_segments:True`); empty when unknown.
    pub allocator: String,
    pub environment: BTreeMap<String, String>,
    pub events: u64,
    pub failed_calls: u64,
    /// Exported function name → number of calls.
    pub by_api: BTreeMap<String, u64>,
    pub processes: Vec<ProcessInfo>,
    pub threads: u64,
    pub streams: u64,
    pub devices: Vec<DeviceInfo>,
    pub stacks: u64,
    pub modules: u64,
    pub chunks: u64,
    pub first_time_ns: u64,
    pub duration_ns: u64,
    pub file_bytes: u64,
    pub bytes_per_event: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProcessInfo {
    pub pid: u32,
    pub parent_pid: u32,
    pub command_line: Vec<String>,
    pub events: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DeviceInfo {
    pub ordinal: i32,
    pub name: String,
    pub total_memory: u64,
    pub compute_capability: String,
}

/// What `info` counts from the events, one batch at a time: the counts of several batches add
/// up ([`EventTally::add`]), so batches can be counted in parallel and dropped as they go.
#[derive(Debug, Clone)]
pub struct EventTally {
    events: u64,
    failed_calls: u64,
    /// Calls by stored api id.
    by_api: Vec<u64>,
    tids: BTreeSet<u32>,
    streams: BTreeSet<u64>,
    per_pid: BTreeMap<u32, u64>,
    /// The earliest call entry and the latest call return (`u64::MAX` and 0 before any).
    first: u64,
    last: u64,
    /// What decides the capture level, as the model gathers it.
    level: LevelStats,
}

impl EventTally {
    /// The counts of one batch, column by column.
    pub fn of(batch: &EventBatch) -> EventTally {
        let n = batch.len();
        let mut t = EventTally {
            events: n as u64,
            first: u64::MAX,
            ..EventTally::default()
        };
        batch.column_named("result").for_each(n, |r| {
            t.failed_calls += u64::from(r != u64::from(CUDA_SUCCESS))
        });
        batch.column_named("api").for_each(n, |id| {
            let id = id as usize;
            if id >= t.by_api.len() {
                t.by_api.resize(id + 1, 0);
            }
            t.by_api[id] += 1;
        });
        // Threads, streams and processes come in runs: a set is touched once per run.
        each_run(batch.column_named("tid"), n, |tid, _| {
            t.tids.insert(tid as u32);
        });
        each_run(batch.column_named("stream"), n, |s, _| {
            t.streams.insert(s);
        });
        each_run(batch.column_named("pid"), n, |pid, len| {
            *t.per_pid.entry(pid as u32).or_default() += len;
        });
        let (time, took) = (
            batch.column_named("time_ns"),
            batch.column_named("duration_ns"),
        );
        time.for_each(n, |v| t.first = t.first.min(v));
        let (api, result, size, flags) = (
            batch.column_named("api"),
            batch.column_named("result"),
            batch.column_named("size"),
            batch.column_named("flags"),
        );
        // What each api id of the batch does, looked up once per id rather than per event.
        let calls: Vec<Option<(Op, MemoryKind)>> = (0..t.by_api.len())
            .map(|id| {
                let a = u16::try_from(id).ok().and_then(Api::from_id)?;
                Some((a.op(), a.kind()))
            })
            .collect();
        for i in 0..n {
            // The calls the model takes as requests: successful, not an imported record.
            let Some(&Some((op, kind))) = calls.get(api.get(i) as usize) else {
                continue;
            };
            if result.get(i) == u64::from(CUDA_SUCCESS) && flags.get(i) & ALLOCATOR_SEGMENT == 0 {
                t.level.see_call(op, kind, size.get(i));
            }
        }
        let mut i = 0;
        took.for_each(n, |d| {
            t.last = t.last.max(time.get(i).saturating_add(d));
            i += 1;
        });
        t
    }

    /// Adds the counts of `other`.
    pub fn add(&mut self, other: EventTally) {
        self.events += other.events;
        self.failed_calls += other.failed_calls;
        if other.by_api.len() > self.by_api.len() {
            self.by_api.resize(other.by_api.len(), 0);
        }
        for (n, m) in self.by_api.iter_mut().zip(other.by_api) {
            *n += m;
        }
        self.tids.extend(other.tids);
        self.streams.extend(other.streams);
        for (pid, n) in other.per_pid {
            *self.per_pid.entry(pid).or_default() += n;
        }
        self.first = self.first.min(other.first);
        self.last = self.last.max(other.last);
        self.level.add(other.level);
    }
}

impl Default for EventTally {
    fn default() -> EventTally {
        EventTally {
            events: 0,
            failed_calls: 0,
            by_api: Vec::new(),
            tids: BTreeSet::new(),
            streams: BTreeSet::new(),
            per_pid: BTreeMap::new(),
            first: u64::MAX,
            last: 0,
            level: LevelStats::default(),
        }
    }
}

/// Calls `f(value, run length)` for each run of equal values of the first `n` of `column`.
fn each_run(column: &Column, n: usize, mut f: impl FnMut(u64, u64)) {
    let mut run: Option<(u64, u64)> = None;
    column.for_each(n, |v| match &mut run {
        Some((value, len)) if *value == v => *len += 1,
        _ => {
            if let Some((value, len)) = run.replace((v, 1)) {
                f(value, len);
            }
        }
    });
    if let Some((value, len)) = run {
        f(value, len);
    }
}

impl TraceInfo {
    /// The facts of a streamed trace: its head, and the tally of all its event batches.
    pub fn of(head: &TraceHead, tally: EventTally) -> TraceInfo {
        let (m, t, layout) = (&head.metadata, &head.tables, &head.layout);
        let EventTally {
            events,
            failed_calls,
            by_api: api_counts,
            mut tids,
            mut streams,
            per_pid,
            first,
            last,
            level,
        } = tally;
        let by_api: BTreeMap<String, u64> = api_counts
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n > 0)
            .map(|(id, &n)| {
                let api = u16::try_from(id).ok().and_then(Api::from_id);
                let api = api.expect("batches hold only known api ids");
                (api.name().to_string(), n)
            })
            .collect();
        let torch_tracker = by_api.contains_key(Api::TorchAlloc.name());
        let level = detect_level(m, &level.into_facts());
        tids.extend(t.threads.iter().map(|th| th.tid));
        streams.extend(t.streams.iter().map(|s| s.handle));
        let mut processes: Vec<ProcessInfo> = t
            .processes
            .iter()
            .map(|p| ProcessInfo {
                pid: p.pid,
                parent_pid: p.parent_pid,
                command_line: p.command_line.clone(),
                events: per_pid.get(&p.pid).copied().unwrap_or(0),
            })
            .collect();
        for (&pid, &events) in &per_pid {
            if !processes.iter().any(|p| p.pid == pid) {
                processes.push(ProcessInfo {
                    pid,
                    parent_pid: 0,
                    command_line: Vec::new(),
                    events,
                });
            }
        }
        let file_bytes = layout.file_bytes;
        TraceInfo {
            format_version: layout.version,
            complete: layout.complete,
            damage: layout.damage.clone(),
            writer: m.writer.clone(),
            host: m.host.clone(),
            driver_version: m.driver_version,
            capture_level: match level.level {
                CaptureLevel::Unknown => String::new(),
                known => known.name().to_string(),
            },
            capture_level_shown: level.shown(),
            capture: level.capture,
            allocator: allocator_as_run(m, torch_tracker),
            environment: m.environment.iter().cloned().collect(),
            events,
            failed_calls,
            by_api,
            processes,
            threads: tids.len() as u64,
            streams: streams.len() as u64,
            devices: t
                .devices
                .iter()
                .map(|d| DeviceInfo {
                    ordinal: d.ordinal,
                    name: d.name.clone(),
                    total_memory: d.total_memory,
                    compute_capability: format!(
                        "{}.{}",
                        d.compute_capability.0, d.compute_capability.1
                    ),
                })
                .collect(),
            stacks: t.stacks.len() as u64,
            modules: t.modules.len() as u64,
            chunks: layout.chunks.len() as u64,
            first_time_ns: if events == 0 { 0 } else { first },
            duration_ns: last.saturating_sub(if events == 0 { last } else { first }),
            file_bytes,
            bytes_per_event: if events == 0 {
                0.0
            } else {
                file_bytes as f64 / events as f64
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramtrace_format::{
        Event, Metadata, ReadOptions, TraceWriter, WriterOptions, synthetic::pytorch_like,
    };

    fn info_with_chunks(events: &[Event], chunk_events: u32) -> TraceInfo {
        let options = WriterOptions {
            chunk_events,
            ..WriterOptions::default()
        };
        let mut w = TraceWriter::new(Vec::new(), &Metadata::default(), options).unwrap();
        for e in events {
            w.push(e).unwrap();
        }
        let bytes = w.finish().unwrap();
        let mut tally = EventTally::default();
        let head = TraceHead::stream(
            &bytes,
            ReadOptions::default(),
            |b| EventTally::of(&b),
            |t| tally.add(t),
        )
        .unwrap();
        TraceInfo::of(&head, tally)
    }

    #[test]
    fn counts_do_not_depend_on_chunking_and_match_the_events_one_by_one() {
        let mut events = pytorch_like(40, 3).events;
        // A failed call, another process and a late long call, so every count is exercised.
        events[5].result = 2;
        events[9].pid = 77;
        events[9].tid = 78;
        events[20].duration_ns = 1 << 40;
        let whole = info_with_chunks(&events, 1 << 16);
        let small = info_with_chunks(&events, 7);
        assert!(small.chunks > whole.chunks);
        let facts = |i: &TraceInfo| {
            let pids: Vec<_> = i.processes.iter().map(|p| (p.pid, p.events)).collect();
            let span = (i.first_time_ns, i.duration_ns, i.threads, i.streams);
            (i.events, i.failed_calls, i.by_api.clone(), pids, span)
        };
        assert_eq!(facts(&whole), facts(&small));
        let mut by_api = BTreeMap::new();
        for e in &events {
            *by_api.entry(e.api.name().to_string()).or_insert(0u64) += 1;
        }
        let first = events.iter().map(|e| e.time_ns).min().unwrap();
        let last = events
            .iter()
            .map(|e| e.time_ns + e.duration_ns)
            .max()
            .unwrap();
        let tids: BTreeSet<u32> = events.iter().map(|e| e.tid).collect();
        let streams: BTreeSet<u64> = events.iter().map(|e| e.stream).collect();
        assert_eq!(whole.by_api, by_api);
        assert_eq!(whole.failed_calls, 1);
        assert_eq!(
            (whole.first_time_ns, whole.duration_ns),
            (first, last - first)
        );
        assert_eq!(whole.threads, tids.len() as u64);
        assert_eq!(whole.streams, streams.len() as u64);
        let others = whole.processes.iter().find(|p| p.pid == 77).unwrap();
        assert_eq!(others.events, 1);
    }
}
