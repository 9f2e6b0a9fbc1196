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

use crate::model::{Model, ObjectKind};
use vramtrace_format::{MemoryKind, Metadata, Tables};

/// The recorded configuration of a loaded trace.
pub fn recorded_of(model: &Model, metadata: &Metadata, tables: &Tables) -> Recorded {
    let uses_pool = model
        .objects
        .iter()
        .any(|o| o.kind == ObjectKind::Device(MemoryKind::Pool));
    recorded(metadata, tables, uses_pool)
}
