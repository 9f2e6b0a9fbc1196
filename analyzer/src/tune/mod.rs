//! `tune`: which allocator setting a program should run with, measured on its own trace.
//!
//! Sans-IO: takes the model and the trace's metadata, returns the ranked answer as data.
//! [`framework`] finds the recorded configuration (the baseline), [`grid`] lists what a user
//! can select, [`search`] replays them all in parallel and ranks them.

pub mod framework;
pub mod grid;
pub mod search;

pub use framework::{Framework, Recorded, recorded};
pub use grid::{Candidate, Role};
pub use search::{Row, Tune, TuneOptions, Unjudged, tune};

use vramtrace_format::{MemoryKind, Trace};

/// The recorded configuration of a trace.
pub fn recorded_of(trace: &Trace) -> Recorded {
    let uses_pool = trace
        .events()
        .any(|e| e.succeeded() && e.api.kind() == MemoryKind::Pool);
    recorded(&trace.metadata, &trace.tables, uses_pool)
}
