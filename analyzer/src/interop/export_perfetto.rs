//! A trace as Chrome trace-event JSON, which ui.perfetto.dev and chrome://tracing open.
//!
//! Format: the "JSON Object Format" of the Trace Event Format document (Google,
//! "Trace Event Format", docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):
//! `{"traceEvents": [...], "displayTimeUnit": "ns"}` with `ts` in microseconds.
//!
//! What is written:
//! - one process per traced process (`M` `process_name` metadata);
//! - per process and device one counter track (`C`) with two series, `requested` and
//!   `reserved` bytes (the allocation table's definitions, [`crate::model::table::Object`]), a
//!   point at every change;
//! - an instant event (`i`, process scope) at every failed allocation, with its size, result
//!   (by name), the live bytes at that moment and the stack: category `oom` and a name starting
//!   `OOM:` only for `CUDA_ERROR_OUT_OF_MEMORY`, category `failed_allocation` otherwise.
//!
//! `analyzer/tests/perfetto.schema.json` is the schema the output is checked against in CI.

use crate::model::table::{AllocationTable, Step};
use crate::symbolize::{NoFiles, StackNames};
use serde_json::json;
use std::io::{self, Write};
use vramtrace_format::Trace;
use vramtrace_format::cuda_result::{describe_result, is_out_of_memory};

/// What an export wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerfettoReport {
    pub counter_points: u64,
    pub instants: u64,
    pub processes: u64,
}

fn track_name(device: i32) -> String {
    if device < 0 {
        "host memory".to_string()
    } else {
        format!("GPU {device} memory")
    }
}

/// Writes `trace` as trace-event JSON to `out`.
pub fn write<W: Write>(trace: &Trace, mut out: W) -> io::Result<PerfettoReport> {
    let mut files = NoFiles;
    let names = StackNames::new(&trace.tables, &mut files);
    let table = AllocationTable::of(trace);
    let t0 = table.start_ns;
    let ts = |t: u64| t.saturating_sub(t0) as f64 / 1000.0;
    let mut report = PerfettoReport::default();
    let mut first = true;
    let mut emit = |out: &mut W, v: serde_json::Value| -> io::Result<()> {
        out.write_all(if first { b"\n" } else { b",\n" })?;
        first = false;
        serde_json::to_writer(&mut *out, &v)?;
        Ok(())
    };
    out.write_all(b"{\"displayTimeUnit\":\"ns\",\"otherData\":")?;
    serde_json::to_writer(
        &mut out,
        &json!({
            "producer": format!("vramtrace {}", env!("CARGO_PKG_VERSION")),
            "capture_level": trace.metadata.capture_level,
            "start_monotonic_ns": t0,
        }),
    )?;
    out.write_all(b",\"traceEvents\":[")?;

    for &pid in &table.pids {
        let cmd = trace
            .tables
            .processes
            .iter()
            .find(|p| p.pid == pid)
            .map(|p| p.command_line.join(" "))
            .unwrap_or_default();
        let name = if cmd.is_empty() {
            format!("pid {pid}")
        } else {
            format!("pid {pid}: {cmd}")
        };
        emit(
            &mut out,
            json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}),
        )?;
        report.processes += 1;
    }

    let mut steps = table.steps();
    while let Some(step) = steps.next() {
        match step {
            Step::Alloc { object: o, .. } | Step::Free { object: o, .. } => {
                let t = steps.totals(o.pid, o.device);
                emit(
                    &mut out,
                    json!({
                        "name": track_name(o.device), "ph": "C", "ts": ts(step.time_ns()),
                        "pid": o.pid, "tid": 0,
                        "args": {"requested": t.requested, "reserved": t.reserved},
                    }),
                )?;
                report.counter_points += 1;
            }
            Step::Failed(f) => {
                let e = &f.event;
                let t = steps.totals(e.pid, e.device);
                // Only an out-of-memory result is an OOM; others are named by their result.
                let (name, cat) = if is_out_of_memory(e.result) {
                    (
                        format!("OOM: {} of {}", e.api, crate::units::bytes(e.size)),
                        "oom",
                    )
                } else {
                    (
                        format!(
                            "failed: {} of {}, {}",
                            e.api,
                            crate::units::bytes(e.size),
                            describe_result(e.result)
                        ),
                        "failed_allocation",
                    )
                };
                emit(
                    &mut out,
                    json!({
                        "name": name,
                        "cat": cat, "ph": "i", "s": "p", "ts": ts(e.time_ns),
                        "pid": e.pid, "tid": e.tid,
                        "args": {
                            "size": e.size, "result": e.result,
                            "result_name": describe_result(e.result), "device": e.device,
                            "stream": format!("{:#x}", e.stream),
                            "live_requested": t.requested, "live_reserved": t.reserved,
                            "stack": names.frames(e.stack),
                        },
                    }),
                )?;
                report.instants += 1;
            }
            Step::Replaced { .. } => {}
        }
    }
    out.write_all(b"\n]}\n")?;
    out.flush()?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramtrace_format::{Api, Event, Metadata, ReadOptions, TraceWriter, WriterOptions};

    fn trace(events: &[Event]) -> Trace {
        let mut w =
            TraceWriter::new(Vec::new(), &Metadata::default(), WriterOptions::default()).unwrap();
        for e in events {
            w.push(e).unwrap();
        }
        Trace::from_bytes(&w.finish().unwrap(), ReadOptions::default()).unwrap()
    }

    #[test]
    fn counters_follow_live_bytes_and_ooms_are_instants() {
        let ev = |seq, api, address, size, result| Event {
            seq,
            time_ns: 1_000_000 + seq * 1500,
            pid: 7,
            device: 0,
            address,
            size,
            result,
            ..Event::new(api)
        };
        let t = trace(&[
            ev(1, Api::CuMemAlloc_v2, 0x1000, 4096, 0),
            ev(2, Api::CuMemAlloc_v2, 0, 1 << 40, 2),
            ev(3, Api::CuMemFree_v2, 0x1000, 0, 0),
        ]);
        let mut buf = Vec::new();
        let r = write(&t, &mut buf).unwrap();
        assert_eq!(
            r,
            PerfettoReport {
                counter_points: 2,
                instants: 1,
                processes: 1
            }
        );
        let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        assert_eq!(events[1]["args"]["requested"], 4096);
        assert_eq!(events[1]["ts"], 0.0);
        assert_eq!(events[2]["ph"], "i");
        assert_eq!(events[2]["ts"], 1.5);
        assert_eq!(events[3]["args"]["reserved"], 0);
        assert_eq!(events.len(), 4);
    }
}
