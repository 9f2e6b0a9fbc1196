//! Which framework's allocator a trace ran under, and the configuration it was recorded with:
//! the baseline every recommendation is measured against.
//!
//! The evidence is the trace's metadata: the allocator environment variables the recorder
//! copied (`PYTORCH_CUDA_ALLOC_CONF`, `XLA_PYTHON_CLIENT_*`, `TF_GPU_ALLOCATOR`, ...), the
//! libraries the process loaded (by their file names, never by the folders they lie in). `vramtrace record --requests` sets
//! `PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync,...`, `XLA_PYTHON_CLIENT_ALLOCATOR=platform`
//! and `TF_GPU_ALLOCATOR=cuda_malloc_async` for every program (analyzer `cmd_record`,
//! `request_level_env`), so in a request-level trace written by the recorder those values are
//! the launcher's, not the user's: the launcher's `backend:cudaMallocAsync` (always put first)
//! is taken off the PyTorch value, and the XLA and TensorFlow switches are dropped.

use crate::model::{Calls, pytorch_alloc_conf};
use crate::policy::PolicySpec;
use crate::policy::alloc_conf::spec_from_alloc_conf;
use serde::Serialize;
use vramtrace_format::{Metadata, Tables};

/// A family of allocator settings a user selects in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Framework {
    /// `PYTORCH_CUDA_ALLOC_CONF` (and `set_per_process_memory_fraction`).
    #[serde(rename = "pytorch")]
    PyTorch,
    /// JAX / XLA: `XLA_PYTHON_CLIENT_PREALLOCATE`, `_MEM_FRACTION`, `_ALLOCATOR`.
    Jax,
    /// TensorFlow: `TF_GPU_ALLOCATOR`, `TF_FORCE_GPU_ALLOW_GROWTH`.
    #[serde(rename = "tensorflow")]
    TensorFlow,
    /// A program calling CUDA itself: `cudaMalloc` or the stream-ordered pool, or RAPIDS RMM.
    Cuda,
}

impl Framework {
    pub fn name(self) -> &'static str {
        match self {
            Framework::PyTorch => "PyTorch",
            Framework::Jax => "JAX/XLA",
            Framework::TensorFlow => "TensorFlow",
            Framework::Cuda => "CUDA (no framework)",
        }
    }
}

/// The framework, the configuration the trace was recorded with, and how both were known.
#[derive(Debug, Clone, Serialize)]
pub struct Recorded {
    pub framework: Framework,
    /// How the framework was recognised, in words.
    pub evidence: String,
    /// The policy the recorded process ran under.
    pub spec: PolicySpec,
    /// A memory limit the process ran under, as the metadata states it (a fraction of the
    /// device), when it states one.
    pub memory_fraction: Option<f64>,
    /// Settings of the recorded run that were left out of [`Recorded::spec`], and why.
    pub notes: Vec<String>,
}

fn env<'m>(m: &'m Metadata, key: &str) -> Option<&'m str> {
    m.environment
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Whether the launcher's `--requests` switches are in the environment.
fn launched_for_requests(m: &Metadata) -> bool {
    m.capture_level == "request" && m.writer.starts_with("vramtrace-recorder")
}

/// The libraries by which each framework is known: prefixes of a loaded module's file name (its
/// identity), never of the folders it lies in (a Python environment in a folder named `torch`
/// holds JAX too).
const PYTORCH_LIBRARIES: &[&str] = &["libc10", "libtorch"];
const JAX_LIBRARIES: &[&str] = &[
    "libjax_common.",
    "xla_extension.",
    "xla_cuda_plugin.",
    "cuda_plugin_extension.",
];
const TENSORFLOW_LIBRARIES: &[&str] = &["libtensorflow", "_pywrap_tensorflow"];

/// The first loaded module whose file name starts with one of `libraries`, by that name.
fn loaded(tables: &Tables, libraries: &[&str]) -> Option<String> {
    tables
        .modules
        .iter()
        .filter_map(|m| m.path.rsplit('/').next())
        .find(|name| libraries.iter().any(|l| name.starts_with(l)))
        .map(str::to_string)
}

/// The framework and configuration of a trace with this `metadata` and these `tables`, whose
/// events made these `calls`.
pub fn recorded(metadata: &Metadata, tables: &Tables, calls: Calls) -> Recorded {
    let uses_pool = calls.pool;
    let launcher = launched_for_requests(metadata);
    let torch_conf = pytorch_alloc_conf(metadata);
    let xla = [
        "XLA_PYTHON_CLIENT_PREALLOCATE",
        "XLA_PYTHON_CLIENT_MEM_FRACTION",
        "XLA_CLIENT_MEM_FRACTION",
    ]
    .iter()
    .any(|k| env(metadata, k).is_some())
        || env(metadata, "XLA_PYTHON_CLIENT_ALLOCATOR")
            .is_some_and(|v| !launcher || v != "platform");
    let tf = env(metadata, "TF_FORCE_GPU_ALLOW_GROWTH").is_some()
        || env(metadata, "TF_GPU_ALLOCATOR").is_some_and(|v| !launcher || v != "cuda_malloc_async");
    let module = |n: &[&str]| loaded(tables, n);
    let mut notes = Vec::new();
    if calls.torch_tracker {
        let evidence = "PyTorch's caching allocator reported through its trace tracker".into();
        return pytorch(torch_conf, launcher, evidence, notes);
    }
    if let Some(m) = module(PYTORCH_LIBRARIES) {
        return pytorch(torch_conf, launcher, format!("loaded {m}"), notes);
    }
    if let Some(m) = module(JAX_LIBRARIES) {
        return jax(metadata, launcher, format!("loaded {m}"), notes);
    }
    if let Some(m) = module(TENSORFLOW_LIBRARIES) {
        return tensorflow(metadata, launcher, format!("loaded {m}"));
    }
    if xla {
        return jax(
            metadata,
            launcher,
            "XLA_PYTHON_CLIENT_* in its environment".into(),
            notes,
        );
    }
    if tf {
        return tensorflow(metadata, launcher, "TF_* in its environment".into());
    }
    if torch_conf.is_some() && (!launcher || uses_pool) {
        return pytorch(
            torch_conf,
            launcher,
            "PYTORCH_CUDA_ALLOC_CONF in its environment".into(),
            notes,
        );
    }
    let spec = PolicySpec {
        name: if uses_pool {
            "cuda-async"
        } else {
            "cuda-malloc"
        }
        .into(),
        options: if uses_pool {
            // CUDA's default pool gives memory back at every synchronization (threshold 0).
            vec![("release_threshold".into(), "0".into())]
        } else {
            Vec::new()
        },
    };
    if uses_pool {
        notes.push(
            "the default pool's release threshold is 0: it trims at synchronizations, which a \
             trace does not record"
                .into(),
        );
    }
    Recorded {
        framework: Framework::Cuda,
        evidence: if uses_pool {
            "cuMemAllocAsync calls and no framework in the metadata".into()
        } else {
            "plain cuMemAlloc calls and no framework in the metadata".into()
        },
        spec,
        memory_fraction: None,
        notes,
    }
}

fn pytorch(
    conf: Option<&str>,
    launcher: bool,
    evidence: String,
    mut notes: Vec<String>,
) -> Recorded {
    let mut conf = conf.unwrap_or("").trim().to_string();
    if launcher && let Some(rest) = conf.strip_prefix("backend:cudaMallocAsync") {
        notes.push(
            "recorded with `vramtrace record --requests`, which set backend:cudaMallocAsync; \
             the baseline is the rest of the recorded PYTORCH_CUDA_ALLOC_CONF"
                .into(),
        );
        conf = rest.trim_start_matches(',').to_string();
    }
    let spec = match spec_from_alloc_conf(&conf, None) {
        Ok(spec) => spec,
        Err(e) => {
            notes.push(format!(
                "the recorded PYTORCH_CUDA_ALLOC_CONF `{conf}` does not parse ({e}); the \
                 baseline is the default allocator"
            ));
            spec_from_alloc_conf("", None).expect("the empty configuration parses")
        }
    };
    let memory_fraction = spec
        .options
        .iter()
        .find(|(k, _)| k == "memory_fraction")
        .and_then(|(_, v)| v.parse().ok());
    Recorded {
        framework: Framework::PyTorch,
        evidence,
        spec,
        memory_fraction,
        notes,
    }
}

fn jax(metadata: &Metadata, launcher: bool, evidence: String, mut notes: Vec<String>) -> Recorded {
    let allocator =
        env(metadata, "XLA_PYTHON_CLIENT_ALLOCATOR").filter(|v| !(launcher && *v == "platform"));
    let fraction = env(metadata, "XLA_CLIENT_MEM_FRACTION")
        .or(env(metadata, "XLA_PYTHON_CLIENT_MEM_FRACTION"))
        .and_then(|v| v.trim().parse::<f64>().ok());
    let preallocate = env(metadata, "XLA_PYTHON_CLIENT_PREALLOCATE")
        .is_none_or(|v| !v.trim().eq_ignore_ascii_case("false"));
    let spec = match allocator.map(str::trim) {
        Some("platform") => PolicySpec {
            name: "cuda-malloc".into(),
            options: Vec::new(),
        },
        Some("cuda_async") => PolicySpec {
            name: "cuda-async".into(),
            options: Vec::new(),
        },
        other => {
            if let Some(o) = other.filter(|o| *o != "default" && *o != "bfc") {
                notes.push(format!(
                    "XLA_PYTHON_CLIENT_ALLOCATOR={o} is not known; taken as BFC"
                ));
            }
            let mut options = vec![("allow_growth".to_string(), (!preallocate).to_string())];
            if let Some(f) = fraction {
                options.push(("memory_fraction".into(), f.to_string()));
            }
            PolicySpec {
                name: "bfc".into(),
                options,
            }
        }
    };
    Recorded {
        framework: Framework::Jax,
        evidence,
        spec,
        memory_fraction: fraction,
        notes,
    }
}

fn tensorflow(metadata: &Metadata, launcher: bool, evidence: String) -> Recorded {
    let async_pool = env(metadata, "TF_GPU_ALLOCATOR")
        .is_some_and(|v| v.trim() == "cuda_malloc_async" && !launcher);
    let growth = env(metadata, "TF_FORCE_GPU_ALLOW_GROWTH")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let spec = if async_pool {
        PolicySpec {
            name: "cuda-async".into(),
            options: Vec::new(),
        }
    } else {
        PolicySpec {
            name: "bfc".into(),
            options: vec![
                ("allow_growth".into(), growth.to_string()),
                ("garbage_collection".into(), "true".into()),
                ("memory_fraction".into(), "1".into()),
            ],
        }
    };
    Recorded {
        framework: Framework::TensorFlow,
        evidence,
        spec,
        memory_fraction: None,
        notes: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramtrace_format::Module;

    const POOL: Calls = Calls {
        pool: true,
        torch_tracker: false,
    };

    fn meta(env: &[(&str, &str)], level: &str, writer: &str) -> Metadata {
        Metadata {
            writer: writer.into(),
            capture_level: level.into(),
            environment: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Metadata::default()
        }
    }

    #[test]
    fn the_recorded_pytorch_setting_is_the_baseline() {
        let m = meta(
            &[(
                "PYTORCH_CUDA_ALLOC_CONF",
                "expandable_segments:True,per_process_memory_fraction:0.5",
            )],
            "request",
            "vramtrace 0.1.0 import_torch_trace",
        );
        let r = recorded(&m, &Tables::default(), POOL);
        assert_eq!(r.framework, Framework::PyTorch);
        assert_eq!(r.spec.to_string(), "pytorch-expandable:memory_fraction=0.5");
        assert_eq!(r.memory_fraction, Some(0.5));
    }

    #[test]
    fn the_launchers_request_switches_are_not_the_users_setting() {
        let m = meta(
            &[
                (
                    "PYTORCH_CUDA_ALLOC_CONF",
                    "backend:cudaMallocAsync,max_split_size_mb:256",
                ),
                ("TF_GPU_ALLOCATOR", "cuda_malloc_async"),
                ("XLA_PYTHON_CLIENT_ALLOCATOR", "platform"),
            ],
            "request",
            "vramtrace-recorder 0.1.0",
        );
        let r = recorded(&m, &Tables::default(), POOL);
        assert_eq!(r.framework, Framework::PyTorch);
        assert_eq!(r.spec.to_string(), "pytorch:max_split_size_mb=256");
        assert_eq!(r.notes.len(), 1);
    }

    #[test]
    fn jax_and_plain_cuda_programs_have_their_own_baselines() {
        let m = meta(
            &[("XLA_PYTHON_CLIENT_PREALLOCATE", "false")],
            "",
            "vramtrace-recorder",
        );
        let r = recorded(&m, &Tables::default(), Calls::default());
        assert_eq!(r.framework, Framework::Jax);
        assert_eq!(r.spec.to_string(), "bfc:allow_growth=true");
        let r = recorded(
            &meta(&[], "", "vramtrace-recorder"),
            &Tables::default(),
            Calls::default(),
        );
        assert_eq!(
            (r.framework, r.spec.to_string()),
            (Framework::Cuda, "cuda-malloc".into())
        );
    }

    fn module(path: &str) -> Module {
        Module {
            id: 0,
            pid: 1,
            path: path.into(),
            build_id: Vec::new(),
            load_address: 0,
            size: 0,
            loaded_ns: 0,
            unloaded_ns: None,
        }
    }

    #[test]
    fn a_jax_program_in_a_folder_named_torch_is_jax() {
        let venv = "/opt/torch/.venv/lib/python3.12/site-packages";
        let tables = Tables {
            modules: vec![
                module(&format!("{venv}/jaxlib/cpu_feature_guard.so")),
                module(&format!("{venv}/jaxlib/libjax_common.so")),
            ],
            ..Tables::default()
        };
        let m = meta(
            &[("XLA_PYTHON_CLIENT_ALLOCATOR", "platform")],
            "",
            "vramtrace-recorder",
        );
        let r = recorded(&m, &tables, Calls::default());
        assert_eq!(
            (r.framework, r.evidence.as_str(), r.spec.to_string()),
            (
                Framework::Jax,
                "loaded libjax_common.so",
                "cuda-malloc".into()
            )
        );
        let torch = Tables {
            modules: vec![module("/home/u/jax/torch/lib/libc10_cuda.so")],
            ..Tables::default()
        };
        assert_eq!(
            recorded(&m, &torch, Calls::default()).framework,
            Framework::PyTorch
        );
        // The tracker's attach says PyTorch whatever was loaded.
        let tracker = Calls {
            torch_tracker: true,
            ..Calls::default()
        };
        let r = recorded(&m, &tables, tracker);
        assert_eq!(
            (r.framework, r.evidence.as_str()),
            (
                Framework::PyTorch,
                "PyTorch's caching allocator reported through its trace tracker"
            )
        );
    }
}
