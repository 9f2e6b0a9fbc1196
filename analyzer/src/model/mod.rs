//! From API events to what a replay needs: per (process, device), the request stream an
//! allocator policy serves.
//!
//! Sans-IO: everything here takes decoded events and returns data.

mod capture;
pub mod device;
mod from_table;
mod level;
mod lifetimes;
pub mod live;
mod modules;
mod ordering;
mod request;
mod rules;
mod step_pass;
pub mod table;

pub use capture::{Capture, CaptureLevel};
pub use from_table::{Growing, Loader, Model, load};
pub use level::{
    Calls, LevelFacts, LevelReport, LevelStats, allocator_as_run, detect_level, pytorch_alloc_conf,
};
pub use modules::ModuleIndex;
pub use request::{
    NO_STREAM, Order, Outside, Request, RequestKind, RequestStream, StreamKey, Tally,
};
pub use step_pass::StepPass;
