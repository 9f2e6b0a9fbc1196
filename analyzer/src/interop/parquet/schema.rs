//! The six tables and their columns. `docs/fleet.md` documents each column; the names follow
//! Perfetto's trace-processor tables (`ts`, `dur`, `upid`-free `pid`/`tid`, `rel_pc`), pprof and
//! OpenTelemetry profiles (`stack_id` with an array of frame ids, `memory_start`,
//! `memory_limit`, `build_id`, `function_name`, `filename`, `line`) where one exists.
//!
//! Unsigned driver values (addresses, sizes, handles) are stored as signed 64-bit integers with
//! the same bits: Spark and Trino have no unsigned 64-bit type. User-space addresses and sizes
//! are below 2^63, so they read as the same positive numbers.

use arrow_schema::{DataType, Field, Schema, SchemaRef};
use std::sync::{Arc, OnceLock};

/// One table: its directory name and its Arrow schema.
pub struct Table {
    pub name: &'static str,
    pub schema: SchemaRef,
}

fn dict() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

fn col(name: &str, t: DataType, nullable: bool) -> Field {
    Field::new(name, t, nullable)
}

fn schema(fields: Vec<Field>) -> SchemaRef {
    Arc::new(Schema::new(fields))
}

/// `events`: one row per recorded driver call, in the trace's order.
pub fn events() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| Table {
        name: "events",
        schema: schema(vec![
            col("trace_id", dict(), false),
            col("seq", DataType::Int64, false),
            col("ts", DataType::Int64, false),
            col("dur", DataType::Int64, false),
            col("pid", DataType::Int32, false),
            col("tid", DataType::Int32, false),
            col("device", DataType::Int32, true),
            col("stream", DataType::Int64, false),
            col("api", dict(), false),
            col("action", dict(), false),
            col("memory_kind", dict(), false),
            col("address", DataType::Int64, false),
            col("size", DataType::Int64, false),
            col("requested_size", DataType::Int64, true),
            col("handle", DataType::Int64, false),
            col("aux", DataType::Int64, false),
            col("flags", DataType::Int64, false),
            col("pool", DataType::Int64, false),
            col("stack_id", DataType::Int64, true),
            col("result", DataType::Int32, false),
        ]),
    })
}

/// `stacks`: one row per distinct stack, its frame ids innermost first (array form), and the
/// library that made its driver calls ([`crate::symbolize::library_of`]).
pub fn stacks() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| Table {
        name: "stacks",
        schema: schema(vec![
            col("trace_id", DataType::Utf8, false),
            col("stack_id", DataType::Int64, false),
            col("depth", DataType::Int32, false),
            col(
                "frame_ids",
                DataType::List(Arc::new(Field::new("item", DataType::Int64, false))),
                false,
            ),
            col("library", DataType::Utf8, false),
        ]),
    })
}

/// `frames`: one row per distinct instruction address (native) or source line (Python).
pub fn frames() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| Table {
        name: "frames",
        schema: schema(vec![
            col("trace_id", DataType::Utf8, false),
            col("frame_id", DataType::Int64, false),
            col("kind", DataType::Utf8, false),
            col("address", DataType::Int64, true),
            col("mapping_id", DataType::Int64, true),
            col("rel_pc", DataType::Int64, true),
            col("function_name", DataType::Utf8, true),
            col("filename", DataType::Utf8, true),
            col("line", DataType::Int64, true),
        ]),
    })
}

/// `modules`: the executables and shared libraries that were mapped (pprof's `Mapping`).
pub fn modules() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| Table {
        name: "modules",
        schema: schema(vec![
            col("trace_id", DataType::Utf8, false),
            col("mapping_id", DataType::Int64, false),
            col("pid", DataType::Int32, false),
            col("filename", DataType::Utf8, false),
            col("build_id", DataType::Utf8, false),
            col("memory_start", DataType::Int64, false),
            col("memory_limit", DataType::Int64, false),
            col("loaded_ts", DataType::Int64, false),
            col("unloaded_ts", DataType::Int64, true),
        ]),
    })
}

/// `traces`: one row per trace file.
pub fn traces() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| Table {
        name: "traces",
        schema: schema(vec![
            col("trace_id", DataType::Utf8, false),
            col("path", DataType::Utf8, false),
            col("file_bytes", DataType::Int64, false),
            col("complete", DataType::Boolean, false),
            col("damage", DataType::Utf8, true),
            col("writer", DataType::Utf8, false),
            col("host", DataType::Utf8, false),
            col("program", DataType::Utf8, true),
            col("command_line", DataType::Utf8, true),
            col("pid", DataType::Int32, true),
            col("job_id", DataType::Utf8, true),
            col("rank", DataType::Int32, true),
            col("local_rank", DataType::Int32, true),
            col("world_size", DataType::Int32, true),
            col("driver_version", DataType::Int32, false),
            col("device_name", DataType::Utf8, true),
            col("device_total_memory", DataType::Int64, true),
            col("capture_level", DataType::Utf8, false),
            col("capture_level_declared", DataType::Boolean, false),
            col("allocator_config", DataType::Utf8, true),
            col("environment_json", DataType::Utf8, false),
            col("start_time_unix_nano", DataType::Int64, true),
            col("start_monotonic_ns", DataType::Int64, true),
            col("events", DataType::Int64, false),
            col("failed_calls", DataType::Int64, false),
            col("processes", DataType::Int32, false),
            col("threads", DataType::Int32, false),
            col("stacks", DataType::Int64, false),
            col("first_ts", DataType::Int64, false),
            col("duration_ns", DataType::Int64, false),
            col("peak_live_device_bytes", DataType::Int64, false),
        ]),
    })
}

/// `policy_results`: one row per trace and replayed policy.
pub fn policy_results() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| Table {
        name: "policy_results",
        schema: schema(vec![
            col("trace_id", DataType::Utf8, false),
            col("policy", DataType::Utf8, false),
            col("policy_name", DataType::Utf8, false),
            col("capacity_bytes", DataType::Int64, true),
            col("lower_bound_bytes", DataType::Int64, false),
            col("peak_requested", DataType::Int64, false),
            col("peak_allocated", DataType::Int64, false),
            col("peak_reserved", DataType::Int64, false),
            col("fragmentation_at_peak", DataType::Float64, false),
            col("ratio_to_lower_bound", DataType::Float64, false),
            col("device_allocs", DataType::Int64, false),
            col("device_frees", DataType::Int64, false),
            col("driver_calls", DataType::Int64, false),
            col("est_alloc_time_us", DataType::Float64, false),
            col("oom", DataType::Boolean, false),
            col("oom_ts", DataType::Int64, true),
            col("fit_bytes", DataType::Int64, true),
        ]),
    })
}

/// Every table, in the order `export` writes them.
pub fn all() -> [&'static Table; 6] {
    [
        events(),
        stacks(),
        frames(),
        modules(),
        traces(),
        policy_results(),
    ]
}
