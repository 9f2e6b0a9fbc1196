//! The marks a process leaves for the launcher in its heartbeat directory
//! (`VRAMTRACE_HEARTBEAT`, `formats/src/conventions.rs`): which trace it writes, or why it could
//! not record or stopped recording.

use crate::config;

/// Writes the mark `name` holding `detail`, when the launcher asked for marks.
pub fn write(name: &str, detail: &str) {
    if let Some(dir) = &config::get().heartbeat {
        let _ = std::fs::write(dir.join(name), detail);
    }
}
