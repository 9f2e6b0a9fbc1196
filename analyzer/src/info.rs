//! What `vramtrace info` reports about a trace: its shape, not its analysis.

use crate::live_peak::LivePeak;
use crate::model::allocator_as_run;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use vramtrace_format::{Api, Trace};

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
    /// `request`, `segment`, or empty when the writer did not say; `request` too when
    /// PyTorch's trace tracker reported the program's tensors (`torch.alloc` events).
    pub capture_level: String,
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

impl TraceInfo {
    pub fn of(trace: &Trace) -> TraceInfo {
        let mut by_api = BTreeMap::new();
        let mut failed_calls = 0;
        let mut tids = BTreeSet::new();
        let mut streams = BTreeSet::new();
        let mut per_pid: BTreeMap<u32, u64> = BTreeMap::new();
        let (mut first, mut last) = (u64::MAX, 0);
        for e in trace.events() {
            *by_api.entry(e.api.name().to_string()).or_insert(0u64) += 1;
            failed_calls += u64::from(!e.succeeded());
            tids.insert(e.tid);
            streams.insert(e.stream);
            *per_pid.entry(e.pid).or_default() += 1;
            first = first.min(e.time_ns);
            last = last.max(e.time_ns.saturating_add(e.duration_ns));
        }
        let t = &trace.tables;
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
        let torch_tracker = by_api.contains_key(Api::TorchAlloc.name());
        let events = trace.event_count();
        let file_bytes = trace.layout.file_bytes;
        let m = &trace.metadata;
        TraceInfo {
            format_version: trace.layout.version,
            complete: trace.layout.complete,
            damage: trace.layout.damage.clone(),
            writer: m.writer.clone(),
            host: m.host.clone(),
            driver_version: m.driver_version,
            capture_level: match m.capture_level.as_str() {
                "" if torch_tracker => "request".to_string(),
                l => l.to_string(),
            },
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
            chunks: trace.layout.chunks.len() as u64,
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

/// The most device memory the process held at once, by the driver calls themselves
/// ([`LivePeak`]).
pub fn peak_live_device_bytes(trace: &Trace) -> u64 {
    LivePeak::of(trace.events())
}
