//! What the trace is, for the page's header: its file, events, duration, capture level,
//! processes, devices and how it was written.

use crate::model::Model;
use crate::report::data::{ProcessFacts, TraceFacts};
use crate::report::trace::TracePass;
use crate::units::bytes;
use vramtrace_format::TraceHead;

/// The facts of `trace` shown as `file`; `symbolized` when its stacks are named from the
/// program's files.
pub fn of(
    file: &str,
    symbolized: bool,
    trace: &TraceHead,
    pass: &TracePass,
    model: &Model,
) -> TraceFacts {
    let m = &trace.metadata;
    TraceFacts {
        file: file.to_string(),
        events: pass.events,
        failed_calls: pass.failed_calls,
        duration_ns: pass.last_ns.saturating_sub(pass.first_ns),
        complete: trace.layout.complete,
        level: model.level.shown(),
        level_warning: model.level.warning.clone(),
        processes: trace
            .tables
            .processes
            .iter()
            .map(|p| ProcessFacts {
                pid: p.pid,
                command_line: p.command_line.join(" "),
            })
            .collect(),
        devices: trace
            .tables
            .devices
            .iter()
            .map(|d| format!("GPU {}: {} ({})", d.ordinal, d.name, bytes(d.total_memory)))
            .collect(),
        writer: m.writer.clone(),
        host: m.host.clone(),
        allocations: pass.allocations(),
        unmatched_frees: pass.unmatched_frees,
        symbolized,
    }
}
