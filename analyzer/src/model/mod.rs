//! From API events to what a replay needs: memory objects and, per (process, device), the
//! request stream an allocator policy serves.
//!
//! Sans-IO: everything here takes decoded events and returns data.

mod level;
mod objects;
mod request;

pub use level::{CaptureLevel, LevelFacts, LevelReport, detect_level};
pub use objects::{LevelStats, MemoryObject, Model, ObjectKind};
pub use request::{Outside, Request, RequestKind, RequestStream, StreamKey};
