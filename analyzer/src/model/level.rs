//! Request level or segment level (docs/architecture.md, "Two levels of capture"), and the
//! warning a what-if replay of a segment-level trace deserves.

use super::capture::{Capture, CaptureLevel};
use serde::Serialize;
use vramtrace_format::{Event, MemoryKind, Metadata, Op};

/// The level, how it was known, and what to tell the user.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LevelReport {
    pub level: CaptureLevel,
    /// True when the writer declared the level; false when it was inferred from the events.
    pub declared: bool,
    /// Printed with every replay of this trace when set.
    pub warning: Option<String>,
    /// How the requests were seen, which picks each model's validated band; `None` when the
    /// level is unknown.
    pub capture: Option<Capture>,
}

impl LevelReport {
    /// The level as every command shows it (docs/definitions.md, "Capture level"):
    /// `request (declared by the recorder)`, `request (inferred from the calls)`, `unknown`.
    pub fn shown(&self) -> String {
        match (self.level, self.declared) {
            (CaptureLevel::Unknown, _) => "unknown".to_string(),
            (l, true) => format!("{} (declared by the recorder)", l.name()),
            (l, false) => format!("{} (inferred from the calls)", l.name()),
        }
    }
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
        capture: Capture::of_trace(metadata, facts.torch_allocs, level),
    }
}

/// The allocator configuration PyTorch reads, as recorded: `PYTORCH_ALLOC_CONF` where the
/// program's environment has it (empty or not), else the older `PYTORCH_CUDA_ALLOC_CONF`
/// (`AllocatorConfig::instance`, pytorch/pytorch `c10/core/AllocatorConfig.cpp`, 2.9 and later;
/// earlier releases read only `PYTORCH_CUDA_ALLOC_CONF`); the first value of a name, as
/// `getenv` finds it. `None` when neither is set.
pub fn pytorch_alloc_conf(metadata: &Metadata) -> Option<&str> {
    let var = |name: &str| {
        metadata
            .environment
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    var("PYTORCH_ALLOC_CONF").or_else(|| var("PYTORCH_CUDA_ALLOC_CONF"))
}

/// The allocator the program ran under, as far as the trace tells: `pytorch native` with its
/// recorded configuration (`pytorch native expandable_segments:True`) when PyTorch's tracker
/// reported its requests, `pytorch cudaMallocAsync` under that back-end; empty when unknown.
pub fn allocator_as_run(metadata: &Metadata, torch_tracker: bool) -> String {
    let conf = pytorch_alloc_conf(metadata).unwrap_or_default();
    let name = if conf.contains("cudaMallocAsync") {
        "pytorch cudaMallocAsync"
    } else if torch_tracker {
        "pytorch native"
    } else {
        return String::new();
    };
    let options: Vec<&str> = conf
        .split(',')
        .map(str::trim)
        .filter(|o| !o.is_empty() && !o.starts_with("backend:"))
        .collect();
    if options.is_empty() {
        name.to_string()
    } else {
        format!("{name} {}", options.join(","))
    }
}

fn infer(metadata: &Metadata, facts: &LevelFacts) -> CaptureLevel {
    let conf = pytorch_alloc_conf(metadata).unwrap_or_default();
    if facts.torch_allocs > 0
        || conf.contains("cudaMallocAsync")
        || facts.pool_allocs > facts.device_allocs
    {
        return CaptureLevel::Request;
    }
    if conf.contains("expandable_segments:True") && facts.vmm_maps > 0 {
        return CaptureLevel::Segment;
    }
    // PyTorch's native allocator asks the driver only for 2 MiB multiples (2 MiB small
    // segments, 20 MiB large ones, 2 MiB-rounded big ones); a program's own buffers are not
    // all such multiples. Beside its segments, libraries of a PyTorch process (cuBLAS, cuDNN,
    // NCCL) make a few plain allocations of their own (six in every H200 run: samples/README.md),
    // so with a PyTorch configuration in the environment three in four are enough.
    let torch = pytorch_alloc_conf(metadata).is_some();
    let (n, multiples) = (facts.device_allocs, facts.device_allocs_2mib_multiple);
    if n >= 4 && (multiples == n || (torch && 4 * multiples >= 3 * n)) {
        return CaptureLevel::Segment;
    }
    // JAX's `platform` allocator maps one VMM allocation per buffer: those are the requests.
    let xla_platform = metadata
        .environment
        .iter()
        .any(|(k, v)| k == "XLA_PYTHON_CLIENT_ALLOCATOR" && v == "platform");
    if xla_platform && facts.vmm_maps > 0 {
        return CaptureLevel::Request;
    }
    // No framework in the environment: a program calling the driver itself, whose
    // allocations are its buffers (a library's own pool would hide them; that is not
    // recognisable from the events).
    let framework = metadata
        .environment
        .iter()
        .any(|(k, _)| k.starts_with("PYTORCH_") || k.starts_with("XLA_") || k.starts_with("TF_"));
    if !framework && n + facts.pool_allocs > 0 {
        return CaptureLevel::Request;
    }
    CaptureLevel::Unknown
}

/// Facts about the events that tell a request-level trace from a segment-level one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LevelFacts {
    pub device_allocs: u64,
    pub pool_allocs: u64,
    pub vmm_maps: u64,
    /// `cuMemAlloc*` sizes that are whole multiples of 2 MiB.
    pub device_allocs_2mib_multiple: u64,
    /// `torch.alloc` events: PyTorch's tracker reported the program's tensors.
    pub torch_allocs: u64,
}

/// Gathers [`LevelFacts`] one event at a time.
#[derive(Debug, Clone, Default)]
pub struct LevelStats(LevelFacts);

impl LevelStats {
    pub fn see(&mut self, e: &Event, op: Op, kind: MemoryKind) {
        self.see_call(op, kind, e.size);
    }

    /// One successful call that is not an imported allocator record (the calls the model
    /// takes as requests), by its operation, memory kind and size.
    pub fn see_call(&mut self, op: Op, kind: MemoryKind, size: u64) {
        match (op, kind) {
            (Op::Alloc, MemoryKind::Device) => {
                self.0.device_allocs += 1;
                if size > 0 && size.is_multiple_of(2 << 20) {
                    self.0.device_allocs_2mib_multiple += 1;
                }
            }
            (Op::Alloc, MemoryKind::Pool) => self.0.pool_allocs += 1,
            (Op::Alloc, MemoryKind::TorchBlock) => self.0.torch_allocs += 1,
            (Op::Map, MemoryKind::Vmm) => self.0.vmm_maps += 1,
            _ => {}
        }
    }

    /// Adds the facts of `other` (gathered over other events).
    pub fn add(&mut self, other: LevelStats) {
        let (a, b) = (&mut self.0, other.0);
        a.device_allocs += b.device_allocs;
        a.pool_allocs += b.pool_allocs;
        a.vmm_maps += b.vmm_maps;
        a.device_allocs_2mib_multiple += b.device_allocs_2mib_multiple;
        a.torch_allocs += b.torch_allocs;
    }

    pub fn into_facts(self) -> LevelFacts {
        self.0
    }
}

/// What a trace's calls say about the allocator it ran under, gathered event by event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Calls {
    /// The process's requests went through the stream-ordered pool (a successful
    /// `cuMemAllocAsync`-family call) rather than plain `cuMemAlloc`.
    pub pool: bool,
    /// PyTorch's caching allocator reported to the recorder through its trace tracker (the
    /// recorder attached to it): the program ran PyTorch.
    pub torch_tracker: bool,
}

impl Calls {
    pub fn see(&mut self, e: &Event) {
        let kind = e.api.kind();
        self.pool |= e.succeeded() && kind == MemoryKind::Pool;
        self.torch_tracker |= matches!(kind, MemoryKind::TorchBlock | MemoryKind::TorchSegment);
    }

    /// Adds what `other` shows (of other events).
    #[inline]
    pub fn add(&mut self, other: Calls) {
        self.pool |= other.pool;
        self.torch_tracker |= other.torch_tracker;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytorch_reads_its_new_variable_first_even_when_empty() {
        let env = |vars: &[(&str, &str)]| Metadata {
            environment: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Metadata::default()
        };
        let both = env(&[
            ("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync"),
            ("PYTORCH_ALLOC_CONF", "expandable_segments:True"),
        ]);
        assert_eq!(pytorch_alloc_conf(&both), Some("expandable_segments:True"));
        let old = env(&[("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")]);
        assert_eq!(pytorch_alloc_conf(&old), Some("max_split_size_mb:128"));
        let empty_new = env(&[
            ("PYTORCH_ALLOC_CONF", ""),
            ("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync"),
        ]);
        assert_eq!(pytorch_alloc_conf(&empty_new), Some(""));
        assert_eq!(
            pytorch_alloc_conf(&env(&[("CUDA_VISIBLE_DEVICES", "0")])),
            None
        );
    }

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
    fn pytorchs_segments_beside_a_few_library_allocations_are_segment_level() {
        let m = Metadata {
            environment: vec![("PYTORCH_CUDA_ALLOC_CONF".into(), String::new())],
            ..Metadata::default()
        };
        // torch-mlp-native.vramtrace: 43 segments and the libraries' 6 allocations.
        let facts = LevelFacts {
            device_allocs: 49,
            device_allocs_2mib_multiple: 43,
            ..LevelFacts::default()
        };
        assert_eq!(detect_level(&m, &facts).level, CaptureLevel::Segment);
        // The same shape without PyTorch: a program's own cudaMalloc calls.
        assert_eq!(
            detect_level(&Metadata::default(), &facts).level,
            CaptureLevel::Request
        );
    }

    #[test]
    fn the_allocator_as_run_names_pytorch_and_its_options() {
        let with = |conf: &str| Metadata {
            environment: vec![("PYTORCH_CUDA_ALLOC_CONF".into(), conf.into())],
            ..Metadata::default()
        };
        assert_eq!(
            allocator_as_run(&with("expandable_segments:True"), true),
            "pytorch native expandable_segments:True"
        );
        assert_eq!(allocator_as_run(&with(""), true), "pytorch native");
        assert_eq!(
            allocator_as_run(&with("backend:cudaMallocAsync"), false),
            "pytorch cudaMallocAsync"
        );
        assert_eq!(allocator_as_run(&Metadata::default(), false), "");
        let facts = LevelFacts {
            torch_allocs: 3,
            device_allocs: 3,
            device_allocs_2mib_multiple: 3,
            ..LevelFacts::default()
        };
        assert_eq!(detect_level(&with(""), &facts).level, CaptureLevel::Request);
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
