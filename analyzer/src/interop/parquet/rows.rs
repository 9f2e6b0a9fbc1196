//! The one-row-per-trace `traces` table and the per-trace, per-policy `policy_results` table.

use super::write::RowGroup;
use parquet::errors::ParquetError;
use std::io::Write;

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

/// Writes the `traces` rows.
pub fn traces<W: Write + Send>(
    g: &mut RowGroup<'_, W>,
    rows: &[TraceRow],
) -> Result<(), ParquetError> {
    let r = || rows.iter();
    let i64s = |f: fn(&TraceRow) -> u64| r().map(move |t| f(t) as i64);
    let opt_i32s = |f: fn(&TraceRow) -> Option<u32>| r().map(move |t| f(t).map(|x| x as i32));
    g.texts(r().map(|t| t.trace_id.as_str()))?;
    g.texts(r().map(|t| t.path.as_str()))?;
    g.i64s(i64s(|t| t.file_bytes))?;
    g.bools(r().map(|t| t.complete))?;
    g.opt_texts(r().map(|t| t.damage.as_deref()))?;
    g.texts(r().map(|t| t.writer.as_str()))?;
    g.texts(r().map(|t| t.host.as_str()))?;
    g.opt_texts(r().map(|t| t.program.as_deref()))?;
    g.opt_texts(r().map(|t| t.command_line.as_deref()))?;
    g.opt_i32s(opt_i32s(|t| t.pid))?;
    g.opt_texts(r().map(|t| t.job_id.as_deref()))?;
    g.opt_i32s(opt_i32s(|t| t.rank))?;
    g.opt_i32s(opt_i32s(|t| t.local_rank))?;
    g.opt_i32s(opt_i32s(|t| t.world_size))?;
    g.i32s(r().map(|t| t.driver_version as i32))?;
    g.opt_texts(r().map(|t| t.device_name.as_deref()))?;
    g.opt_i64s(r().map(|t| t.device_total_memory.map(|x| x as i64)))?;
    g.texts(r().map(|t| t.capture_level.as_str()))?;
    g.bools(r().map(|t| t.capture_level_declared))?;
    g.opt_texts(r().map(|t| t.allocator_config.as_deref()))?;
    g.texts(r().map(|t| t.environment_json.as_str()))?;
    g.opt_i64s(r().map(|t| t.start_time_unix_nano.map(|x| x as i64)))?;
    g.opt_i64s(r().map(|t| t.start_monotonic_ns.map(|x| x as i64)))?;
    g.i64s(i64s(|t| t.events))?;
    g.i64s(i64s(|t| t.failed_calls))?;
    g.i32s(r().map(|t| t.processes as i32))?;
    g.i32s(r().map(|t| t.threads as i32))?;
    g.i64s(i64s(|t| t.stacks))?;
    g.i64s(i64s(|t| t.first_ts))?;
    g.i64s(i64s(|t| t.duration_ns))?;
    g.i64s(i64s(|t| t.peak_live_device_bytes))
}

/// Writes the `policy_results` rows of one trace.
pub fn policy_results<W: Write + Send>(
    g: &mut RowGroup<'_, W>,
    trace_id: &str,
    rows: &[PolicyResult],
) -> Result<(), ParquetError> {
    let r = || rows.iter();
    let i64s = |f: fn(&PolicyResult) -> u64| r().map(move |p| f(p) as i64);
    let opt_i64s = |f: fn(&PolicyResult) -> Option<u64>| r().map(move |p| f(p).map(|x| x as i64));
    g.texts(r().map(|_| trace_id))?;
    g.texts(r().map(|p| p.policy.as_str()))?;
    g.texts(r().map(|p| p.policy_name.as_str()))?;
    g.opt_i64s(opt_i64s(|p| p.capacity_bytes))?;
    g.i64s(i64s(|p| p.lower_bound_bytes))?;
    g.i64s(i64s(|p| p.peak_requested))?;
    g.i64s(i64s(|p| p.peak_allocated))?;
    g.i64s(i64s(|p| p.peak_reserved))?;
    g.f64s(r().map(|p| p.fragmentation_at_peak))?;
    g.f64s(r().map(|p| p.ratio_to_lower_bound))?;
    g.i64s(i64s(|p| p.device_allocs))?;
    g.i64s(i64s(|p| p.device_frees))?;
    g.i64s(i64s(|p| p.device_allocs + p.device_frees))?;
    g.f64s(r().map(|p| p.est_alloc_time_us))?;
    g.bools(r().map(|p| p.oom_ts.is_some()))?;
    g.opt_i64s(opt_i64s(|p| p.oom_ts))?;
    g.opt_i64s(opt_i64s(|p| p.fit_bytes))
}
