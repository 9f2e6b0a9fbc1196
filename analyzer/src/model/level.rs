//! Request level or segment level (DESIGN.md, "Two levels of capture"), and the warning a what-if
//! replay of a segment-level trace deserves.

pub use super::from_events::LevelFacts;
use serde::Serialize;
use vramtrace_format::Metadata;

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

/// The level, how it was known, and what to tell the user.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LevelReport {
    pub level: CaptureLevel,
    /// True when the writer declared the level; false when it was inferred from the events.
    pub declared: bool,
    /// Printed with every replay of this trace when set.
    pub warning: Option<String>,
}

const SEGMENT_WARNING: &str = "this is a segment-level trace: its allocations are a caching \
allocator's segments, not the program's buffers, so replaying them through another allocator \
stacks one cache on another and the what-if figures mislead; record with `vramtrace record \
--requests` to compare allocators";

const UNKNOWN_WARNING: &str = "the trace does not say whether it holds the program's buffers \
(request level) or a caching allocator's segments; the replay treats its allocations as \
requests";

/// Decides the level: the metadata's word when it has one, else the shape of the events.
pub fn detect_level(metadata: &Metadata, facts: &LevelFacts) -> LevelReport {
    let declared = match metadata.capture_level.as_str() {
        "request" => Some(CaptureLevel::Request),
        "segment" => Some(CaptureLevel::Segment),
        _ => None,
    };
    let level = declared.unwrap_or_else(|| infer(metadata, facts));
    let warning = match level {
        CaptureLevel::Request => None,
        CaptureLevel::Segment => Some(SEGMENT_WARNING.to_string()),
        CaptureLevel::Unknown => Some(UNKNOWN_WARNING.to_string()),
    };
    LevelReport {
        level,
        declared: declared.is_some(),
        warning,
    }
}

fn infer(metadata: &Metadata, facts: &LevelFacts) -> CaptureLevel {
    let conf = metadata
        .environment
        .iter()
        .filter(|(k, _)| k == "PYTORCH_CUDA_ALLOC_CONF" || k == "PYTORCH_ALLOC_CONF")
        .map(|(_, v)| v.as_str())
        .collect::<Vec<_>>()
        .join(",");
    if conf.contains("cudaMallocAsync") || facts.pool_allocs > facts.device_allocs {
        return CaptureLevel::Request;
    }
    if conf.contains("expandable_segments:True") && facts.vmm_maps > 0 {
        return CaptureLevel::Segment;
    }
    // PyTorch's native allocator asks the driver only for 2 MiB multiples (2 MiB small
    // segments, 20 MiB large ones, 2 MiB-rounded big ones); a program's own buffers are not
    // all such multiples.
    if facts.device_allocs >= 4 && facts.device_allocs_2mib_multiple == facts.device_allocs {
        return CaptureLevel::Segment;
    }
    CaptureLevel::Unknown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declared_level_wins_over_the_events() {
        let m = Metadata {
            capture_level: "request".into(),
            ..Metadata::default()
        };
        let facts = LevelFacts {
            device_allocs: 10,
            device_allocs_2mib_multiple: 10,
            ..LevelFacts::default()
        };
        let r = detect_level(&m, &facts);
        assert_eq!(r.level, CaptureLevel::Request);
        assert!(r.declared && r.warning.is_none());
    }

    #[test]
    fn only_2mib_multiples_from_cu_mem_alloc_look_like_segments_and_warn() {
        let facts = LevelFacts {
            device_allocs: 49,
            device_allocs_2mib_multiple: 49,
            ..LevelFacts::default()
        };
        let r = detect_level(&Metadata::default(), &facts);
        assert_eq!(r.level, CaptureLevel::Segment);
        assert!(!r.declared);
        assert!(r.warning.unwrap().contains("segment-level"));
    }

    #[test]
    fn stream_ordered_allocations_are_requests() {
        let facts = LevelFacts {
            pool_allocs: 2368,
            ..LevelFacts::default()
        };
        let r = detect_level(&Metadata::default(), &facts);
        assert_eq!(r.level, CaptureLevel::Request);
    }
}
