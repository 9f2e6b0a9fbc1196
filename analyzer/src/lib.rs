//! The vramtrace analyzer: everything the `vramtrace` command does, as a library.
//!
//! # Design constraints
//!
//! The library is sans-IO: it takes decoded traces and returns data, reading the traced
//! program's files only through [`symbolize::ModuleFiles`]. The `vramtrace` binary
//! (`src/bin/vramtrace/`, one file per command) opens files, prints, and maps the library's typed
//! errors to exit codes.
//!
//! # Layers of the analyzer library
//!
//! A module imports only modules of its own layer or of the layers above it, and no files
//! import each other in a circle (docs/architecture.md describes each layer; the test
//! `tests/layers.rs` reads the imports and checks this table against that one):
//!
//! | layer | modules | what they are |
//! |---|---|---|
//! | 1 | `units`, `sums`, `job`, `limits`, `terminal`, `completeness`, `symbolize` | foundations |
//! | 2 | `model`, `interop`, `backward`, `driver_count` | request streams and the allocation table every view reads; other tools' formats; autograd's allocations named; the driver's count of a process's memory against what the trace names |
//! | 3 | `policy` | the allocator models |
//! | 4 | `replay`, `tune`, `device_replay` | replays of the models |
//! | 5 | `info`, `failures`, `summary`, `diff`, `answers`, `oom_story`, `report` | the views; the report as data sections computed once, which its page and its charts only read |

pub mod answers;
pub mod backward;
pub mod completeness;
#[cfg(feature = "device")]
pub mod device_replay;
pub mod diff;
pub mod driver_count;
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
