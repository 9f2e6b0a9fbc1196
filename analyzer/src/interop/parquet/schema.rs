//! The six tables and their columns. `docs/fleet.md` documents each column; the names follow
//! Perfetto's trace-processor tables (`ts`, `dur`, `upid`-free `pid`/`tid`, `rel_pc`), pprof and
//! OpenTelemetry profiles (`stack_id` with an array of frame ids, `memory_start`,
//! `memory_limit`, `build_id`, `function_name`, `filename`, `line`) where one exists.
//!
//! Unsigned driver values (addresses, sizes, handles) are stored as signed 64-bit integers with
//! the same bits: Spark and Trino have no unsigned 64-bit type. User-space addresses and sizes
//! are below 2^63, so they read as the same positive numbers.

use parquet::schema::parser::parse_message_type;
use parquet::schema::types::TypePtr;
use std::sync::{Arc, OnceLock};

/// One table: its directory name and its Parquet schema.
pub struct Table {
    pub name: &'static str,
    pub schema: TypePtr,
}

/// A table of `columns`, Parquet message-type fields.
fn table(name: &'static str, columns: &str) -> Table {
    let message = format!("message schema {{ {columns} }}");
    let schema = parse_message_type(&message).expect("the table schemas parse");
    Table {
        name,
        schema: Arc::new(schema),
    }
}

/// `events`: one row per recorded driver call, in the trace's order.
pub fn events() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| {
        table(
            "events",
            concat!(
                "required binary trace_id (STRING);",
                "required int64 seq;",
                "required int64 ts;",
                "required int64 dur;",
                "required int32 pid;",
                "required int32 tid;",
                "optional int32 device;",
                "required int64 stream;",
                "required binary api (STRING);",
                "required binary action (STRING);",
                "required binary memory_kind (STRING);",
                "required int64 address;",
                "required int64 size;",
                "optional int64 requested_size;",
                "required int64 handle;",
                "required int64 aux;",
                "required int64 flags;",
                "required int64 pool;",
                "optional int64 stack_id;",
                "required int32 result;",
            ),
        )
    })
}

/// `stacks`: one row per distinct stack, its frame ids innermost first (array form), and the
/// library that made its driver calls ([`crate::symbolize::library_of`]).
pub fn stacks() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| {
        table(
            "stacks",
            concat!(
                "required binary trace_id (STRING);",
                "required int64 stack_id;",
                "required int32 depth;",
                "required group frame_ids (LIST) { repeated group list { required int64 item; } }",
                "required binary library (STRING);",
            ),
        )
    })
}

/// `frames`: one row per distinct instruction address (native) or source line (Python).
pub fn frames() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| {
        table(
            "frames",
            concat!(
                "required binary trace_id (STRING);",
                "required int64 frame_id;",
                "required binary kind (STRING);",
                "optional int64 address;",
                "optional int64 mapping_id;",
                "optional int64 rel_pc;",
                "optional binary function_name (STRING);",
                "optional binary filename (STRING);",
                "optional int64 line;",
            ),
        )
    })
}

/// `modules`: the executables and shared libraries that were mapped (pprof's `Mapping`).
pub fn modules() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| {
        table(
            "modules",
            concat!(
                "required binary trace_id (STRING);",
                "required int64 mapping_id;",
                "required int32 pid;",
                "required binary filename (STRING);",
                "required binary build_id (STRING);",
                "required int64 memory_start;",
                "required int64 memory_limit;",
                "required int64 loaded_ts;",
                "optional int64 unloaded_ts;",
            ),
        )
    })
}

/// `traces`: one row per trace file.
pub fn traces() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| {
        table(
            "traces",
            concat!(
                "required binary trace_id (STRING);",
                "required binary path (STRING);",
                "required int64 file_bytes;",
                "required boolean complete;",
                "optional binary damage (STRING);",
                "required binary writer (STRING);",
                "required binary host (STRING);",
                "optional binary program (STRING);",
                "optional binary command_line (STRING);",
                "optional int32 pid;",
                "optional binary job_id (STRING);",
                "optional int32 rank;",
                "optional int32 local_rank;",
                "optional int32 world_size;",
                "required int32 driver_version;",
                "optional binary device_name (STRING);",
                "optional int64 device_total_memory;",
                "required binary capture_level (STRING);",
                "required boolean capture_level_declared;",
                "optional binary allocator_config (STRING);",
                "required binary environment_json (STRING);",
                "optional int64 start_time_unix_nano;",
                "optional int64 start_monotonic_ns;",
                "required int64 events;",
                "required int64 failed_calls;",
                "required int32 processes;",
                "required int32 threads;",
                "required int64 stacks;",
                "required int64 first_ts;",
                "required int64 duration_ns;",
                "required int64 peak_live_device_bytes;",
            ),
        )
    })
}

/// `policy_results`: one row per trace and replayed policy.
pub fn policy_results() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| {
        table(
            "policy_results",
            concat!(
                "required binary trace_id (STRING);",
                "required binary policy (STRING);",
                "required binary policy_name (STRING);",
                "optional int64 capacity_bytes;",
                "required int64 lower_bound_bytes;",
                "required int64 peak_requested;",
                "required int64 peak_allocated;",
                "required int64 peak_reserved;",
                "required double fragmentation_at_peak;",
                "required double ratio_to_lower_bound;",
                "required int64 device_allocs;",
                "required int64 device_frees;",
                "required int64 driver_calls;",
                "required double est_alloc_time_us;",
                "required boolean oom;",
                "optional int64 oom_ts;",
                "optional int64 fit_bytes;",
            ),
        )
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
