//! The kind of capture a trace is: how its requests were seen. A model's validated error band
//! depends on it (docs/validation.md tables name the capture of every run), because the same
//! allocator model is exact on one capture and misses on another: PyTorch's trace tracker
//! carries the real segment addresses, a request-level hook under `cudaMallocAsync` does not.

use serde::Serialize;
use vramtrace_format::Metadata;

/// Request level or segment level (docs/architecture.md, "Two levels of capture").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CaptureLevel {
    /// One event per program-level buffer: replays answer what-if questions.
    Request,
    /// A caching allocator's segments: exact for what the process held, misleading to replay.
    Segment,
    #[default]
    Unknown,
}

impl CaptureLevel {
    /// The level's name, as the JSON outputs spell it.
    pub fn name(self) -> &'static str {
        match self {
            CaptureLevel::Request => "request",
            CaptureLevel::Segment => "segment",
            CaptureLevel::Unknown => "unknown",
        }
    }
}

/// How the requests of a trace were seen (docs/definitions.md, "Capture").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Capture {
    /// PyTorch's caching allocator reported every tensor and segment through its trace
    /// tracker (`vramtrace record`'s default with PyTorch).
    Tracker,
    /// Request-level driver hooks: every program buffer is one driver call (`vramtrace record
    /// --requests`, a pass-through allocator, JAX's platform allocator).
    Requests,
    /// A caching allocator's segments, as the driver saw them.
    Segments,
    /// An allocator's own record, imported: a PyTorch memory snapshot or memory history, an
    /// RMM or XLA log.
    Snapshot,
}

impl Capture {
    /// Every capture, in the order docs/definitions.md lists them.
    pub const ALL: [Capture; 4] = [
        Capture::Tracker,
        Capture::Requests,
        Capture::Segments,
        Capture::Snapshot,
    ];

    /// The name the JSON outputs and docs/validation.md's `Capture:` lines spell.
    pub fn name(self) -> &'static str {
        match self {
            Capture::Tracker => "tracker",
            Capture::Requests => "requests",
            Capture::Segments => "segments",
            Capture::Snapshot => "snapshot",
        }
    }

    /// The capture named `name` ([`Capture::name`]).
    pub fn from_name(name: &str) -> Option<Capture> {
        Capture::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The capture of a trace, from its writer and what its events are; `None` when its level
    /// is unknown (nothing was validated on such a trace).
    pub fn of_trace(
        metadata: &Metadata,
        torch_allocs: u64,
        level: CaptureLevel,
    ) -> Option<Capture> {
        use CaptureLevel::*;
        // The importers name themselves in the writer: `vramtrace … import (…)`,
        // `vramtrace … import_torch_trace (…)`.
        let imported = metadata.writer.split(' ').any(|w| w.starts_with("import"));
        match level {
            _ if imported => Some(Capture::Snapshot),
            _ if torch_allocs > 0 => Some(Capture::Tracker),
            Request => Some(Capture::Requests),
            Segment => Some(Capture::Segments),
            Unknown => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_is_a_tracker_capture_by_its_tensors_and_a_snapshot_by_its_importer() {
        let recorder = Metadata {
            writer: "vramtrace-recorder 0.1.0".into(),
            ..Metadata::default()
        };
        let imported = Metadata {
            writer: "vramtrace 0.1.0 import (PyTorch memory snapshot)".into(),
            ..Metadata::default()
        };
        let of = Capture::of_trace;
        assert_eq!(
            of(&recorder, 3, CaptureLevel::Request),
            Some(Capture::Tracker)
        );
        assert_eq!(
            of(&recorder, 0, CaptureLevel::Request),
            Some(Capture::Requests)
        );
        assert_eq!(
            of(&recorder, 0, CaptureLevel::Segment),
            Some(Capture::Segments)
        );
        assert_eq!(of(&recorder, 0, CaptureLevel::Unknown), None);
        assert_eq!(
            of(&imported, 0, CaptureLevel::Request),
            Some(Capture::Snapshot)
        );
        for c in Capture::ALL {
            assert_eq!(Capture::from_name(c.name()), Some(c));
        }
    }
}
