//! The one-row-per-trace `traces` table and the per-trace, per-policy `policy_results` table.

use super::schema;
use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use std::sync::Arc;

/// One `traces` row (`docs/fleet.md` describes each column).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceRow {
    pub trace_id: String,
    pub path: String,
    pub file_bytes: u64,
    pub complete: bool,
    pub damage: Option<String>,
    pub writer: String,
    pub host: String,
    pub program: Option<String>,
    pub command_line: Option<String>,
    pub pid: Option<u32>,
    pub job_id: Option<String>,
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    pub driver_version: u32,
    pub device_name: Option<String>,
    pub device_total_memory: Option<u64>,
    pub capture_level: String,
    pub capture_level_declared: bool,
    pub allocator_config: Option<String>,
    pub environment_json: String,
    pub start_time_unix_nano: Option<u64>,
    /// `CLOCK_MONOTONIC` at the same instant: `ts` converts to wall clock through the pair.
    pub start_monotonic_ns: Option<u64>,
    pub events: u64,
    pub failed_calls: u64,
    pub processes: u32,
    pub threads: u32,
    pub stacks: u64,
    pub first_ts: u64,
    pub duration_ns: u64,
    pub peak_live_device_bytes: u64,
}

/// One `policy_results` row: a policy's replay of a trace, summed over its request streams.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyResult {
    /// The policy with its options, as `--policy` takes it (`pytorch:max_split_size_mb=128`).
    pub policy: String,
    /// The policy's name alone (`pytorch`).
    pub policy_name: String,
    /// `None` when unlimited.
    pub capacity_bytes: Option<u64>,
    pub lower_bound_bytes: u64,
    pub peak_requested: u64,
    pub peak_allocated: u64,
    pub peak_reserved: u64,
    pub fragmentation_at_peak: f64,
    pub ratio_to_lower_bound: f64,
    pub device_allocs: u64,
    pub device_frees: u64,
    pub est_alloc_time_us: f64,
    /// When the first out-of-memory happened (`ts` of the request), if one did.
    pub oom_ts: Option<u64>,
    /// The smallest device it runs on without running out of memory (`vramtrace fit`), when
    /// asked for.
    pub fit_bytes: Option<u64>,
}

fn i64s(v: impl Iterator<Item = u64>) -> ArrayRef {
    Arc::new(Int64Array::from_iter_values(v.map(|x| x as i64)))
}

fn opt_i64s(v: impl Iterator<Item = Option<u64>>) -> ArrayRef {
    Arc::new(Int64Array::from_iter(v.map(|x| x.map(|x| x as i64))))
}

fn opt_i32s(v: impl Iterator<Item = Option<u32>>) -> ArrayRef {
    Arc::new(Int32Array::from_iter(v.map(|x| x.map(|x| x as i32))))
}

fn texts<'a>(v: impl Iterator<Item = &'a str>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(v))
}

fn opt_texts<'a>(v: impl Iterator<Item = Option<&'a str>>) -> ArrayRef {
    Arc::new(StringArray::from_iter(v))
}

/// The `traces` rows.
pub fn traces(rows: &[TraceRow]) -> RecordBatch {
    let r = || rows.iter();
    let columns: Vec<ArrayRef> = vec![
        texts(r().map(|t| t.trace_id.as_str())),
        texts(r().map(|t| t.path.as_str())),
        i64s(r().map(|t| t.file_bytes)),
        Arc::new(BooleanArray::from_iter(r().map(|t| Some(t.complete)))),
        opt_texts(r().map(|t| t.damage.as_deref())),
        texts(r().map(|t| t.writer.as_str())),
        texts(r().map(|t| t.host.as_str())),
        opt_texts(r().map(|t| t.program.as_deref())),
        opt_texts(r().map(|t| t.command_line.as_deref())),
        opt_i32s(r().map(|t| t.pid)),
        opt_texts(r().map(|t| t.job_id.as_deref())),
        opt_i32s(r().map(|t| t.rank)),
        opt_i32s(r().map(|t| t.local_rank)),
        opt_i32s(r().map(|t| t.world_size)),
        Arc::new(Int32Array::from_iter_values(
            r().map(|t| t.driver_version as i32),
        )),
        opt_texts(r().map(|t| t.device_name.as_deref())),
        opt_i64s(r().map(|t| t.device_total_memory)),
        texts(r().map(|t| t.capture_level.as_str())),
        Arc::new(BooleanArray::from_iter(
            r().map(|t| Some(t.capture_level_declared)),
        )),
        opt_texts(r().map(|t| t.allocator_config.as_deref())),
        texts(r().map(|t| t.environment_json.as_str())),
        opt_i64s(r().map(|t| t.start_time_unix_nano)),
        opt_i64s(r().map(|t| t.start_monotonic_ns)),
        i64s(r().map(|t| t.events)),
        i64s(r().map(|t| t.failed_calls)),
        Arc::new(Int32Array::from_iter_values(
            r().map(|t| t.processes as i32),
        )),
        Arc::new(Int32Array::from_iter_values(r().map(|t| t.threads as i32))),
        i64s(r().map(|t| t.stacks)),
        i64s(r().map(|t| t.first_ts)),
        i64s(r().map(|t| t.duration_ns)),
        i64s(r().map(|t| t.peak_live_device_bytes)),
    ];
    RecordBatch::try_new(schema::traces().schema.clone(), columns)
        .expect("the columns match the traces schema")
}

/// The `policy_results` rows of one trace.
pub fn policy_results(trace_id: &str, rows: &[PolicyResult]) -> RecordBatch {
    let r = || rows.iter();
    let f64s = |f: fn(&PolicyResult) -> f64| -> ArrayRef {
        Arc::new(Float64Array::from_iter_values(r().map(f)))
    };
    let columns: Vec<ArrayRef> = vec![
        texts(r().map(|_| trace_id)),
        texts(r().map(|p| p.policy.as_str())),
        texts(r().map(|p| p.policy_name.as_str())),
        opt_i64s(r().map(|p| p.capacity_bytes)),
        i64s(r().map(|p| p.lower_bound_bytes)),
        i64s(r().map(|p| p.peak_requested)),
        i64s(r().map(|p| p.peak_allocated)),
        i64s(r().map(|p| p.peak_reserved)),
        f64s(|p| p.fragmentation_at_peak),
        f64s(|p| p.ratio_to_lower_bound),
        i64s(r().map(|p| p.device_allocs)),
        i64s(r().map(|p| p.device_frees)),
        i64s(r().map(|p| p.device_allocs + p.device_frees)),
        f64s(|p| p.est_alloc_time_us),
        Arc::new(BooleanArray::from_iter(
            r().map(|p| Some(p.oom_ts.is_some())),
        )),
        opt_i64s(r().map(|p| p.oom_ts)),
        opt_i64s(r().map(|p| p.fit_bytes)),
    ];
    RecordBatch::try_new(schema::policy_results().schema.clone(), columns)
        .expect("the columns match the policy_results schema")
}
