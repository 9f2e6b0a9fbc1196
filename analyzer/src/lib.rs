//! The vramtrace analyzer: everything the `vramtrace` command does, as a library.
//!
//! # Design constraints
//!
//! The core (trace facts, models, replay, metrics, chart data) is sans-IO: it takes decoded
//! traces and returns data. Only the `cmd_*` modules and `main.rs` open files and print.

#[cfg(feature = "device")]
pub mod device_replay;
pub mod diff;
pub mod export_perfetto;
pub mod export_snapshot;
pub mod import_snapshot;
pub mod info;
pub mod job;
pub mod live_peak;
pub mod model;
pub mod parquet;
pub mod policy;
pub mod replay;
pub mod report;
pub mod summary;
pub mod symbolize;
pub mod units;
