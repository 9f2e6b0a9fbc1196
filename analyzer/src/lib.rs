//! The vramtrace analyzer: everything the `vramtrace` command does, as a library.
//!
//! # Design constraints
//!
//! The library is sans-IO: it takes decoded traces and returns data, reading the traced
//! program's files only through [`symbolize::ModuleFiles`]. The `vramtrace` binary
//! (`src/bin/vramtrace/`, one file per command) opens files, prints, and maps the library's typed
//! errors to exit codes.
//!
//! # Layers
//!
//! Each module imports only those below it:
//!
//! - `units`, `sums` (sums of sizes that cannot wrap), `job` (the ranks of one job),
//!   `completeness` (whether a file holds every event); then `model` (request streams from
//!   events, the live-memory `Ledger`) and `interop` (other tools' formats, the Parquet tables);
//! - `policy` (the `Policy` trait, the simulated driver, the allocator models, the registry);
//! - `replay` (the engine over `policy`, parallel runs, the result tables of `replay` and `fit`);
//! - the views: `info`, `summary`, `diff`, `symbolize`, `report`.

pub mod answers;
pub mod completeness;
#[cfg(feature = "device")]
pub mod device_replay;
pub mod diff;
pub mod failures;
pub mod info;
pub mod interop;
pub mod job;
pub mod limits;
pub mod model;
pub mod oom_story;
pub mod policy;
pub mod replay;
pub mod report;
pub mod summary;
pub mod sums;
pub mod symbolize;
pub mod terminal;
pub mod tune;
pub mod units;
