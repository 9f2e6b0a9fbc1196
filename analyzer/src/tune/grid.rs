//! What `tune` tries: every framework's selectable allocator settings, as policy specs, each
//! with the exact line that selects it; and the bounds no selectable setting can beat.
//!
//! The PyTorch grid follows the keys of `PYTORCH_CUDA_ALLOC_CONF` that change where device
//! memory goes (`c10/cuda/CUDAAllocatorConfig.cpp`; docs/definitions.md lists the values
//! tried and why). Combinations PyTorch ignores or that cannot differ are not tried: the
//! split rounding (`max_non_split_rounding_mb`) without `max_split_size_mb`,
//! `garbage_collection_threshold` without a memory fraction, the caching allocator's keys
//! under `backend:cudaMallocAsync`, and `max_split_size_mb` with expandable segments (PyTorch
//! then grows reserved memory without bound, pytorch/pytorch PR #193400).

use super::framework::Framework;
use crate::policy::alloc_conf::alloc_conf_of;
use crate::policy::{BOUNDS, PolicySpec, preallocates};
use crate::units::bytes;
use serde::Serialize;

/// Whether a user can pick a candidate, or it only bounds what any allocator could do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Setting,
    /// Offline planners and the lower bound: no framework offers them.
    Bound,
}

/// One thing to replay.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    pub framework: Framework,
    pub spec: PolicySpec,
    pub role: Role,
    /// The shell line, or the code, that selects it.
    pub select: String,
    /// Reserves a fixed share of the device up front (BFC without growth, an RMM arena): its
    /// peak is that share, whatever the program does.
    pub preallocates: bool,
}

/// What the grid depends on besides the framework.
#[derive(Debug, Clone, Copy)]
pub struct GridContext {
    /// The memory fraction the recorded run set, kept in every PyTorch candidate (a cap is the
    /// user's decision, not a saving).
    pub memory_fraction: Option<f64>,
    /// The largest lower bound over streams, for pool sizes that avoid growth.
    pub lower_bound: u64,
}

fn spec(name: &str, options: &[(&str, String)]) -> PolicySpec {
    PolicySpec {
        name: name.into(),
        options: options
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
    }
}

/// `roundup_power2_divisions` values tried (none, powers of two, and two per-size lists: the
/// PyTorch documentation's example, and fine steps for small tensors only).
pub const ROUNDUP: &[&str] = &[
    "2",
    "4",
    "8",
    "16",
    "[256:1,512:2,1024:4,>:8]",
    "[64:4,>:1]",
];
/// `max_split_size_mb` values tried.
pub const MAX_SPLIT_MB: &[u64] = &[64, 128, 256, 512, 1024];
/// `max_non_split_rounding_mb` values tried beside the default 20, with a split size.
pub const NON_SPLIT_ROUNDING_MB: &[u64] = &[64, 256];
/// `garbage_collection_threshold` values tried, with a memory fraction.
pub const GC_THRESHOLD: &[&str] = &["0.6", "0.8", "0.95"];
/// `XLA_PYTHON_CLIENT_MEM_FRACTION` values tried with preallocation.
pub const XLA_FRACTIONS: &[&str] = &["0.75", "0.9", "0.5", "0.25", "0.1"];

fn pytorch(ctx: &GridContext) -> Vec<PolicySpec> {
    let fraction = ctx.memory_fraction.map(|f| f.to_string());
    let with_fraction = |mut s: PolicySpec| {
        if let Some(f) = &fraction {
            s.options.push(("memory_fraction".into(), f.clone()));
        }
        s
    };
    let mut out = Vec::new();
    let roundups = std::iter::once(None).chain(ROUNDUP.iter().map(|r| Some(r.to_string())));
    for roundup in roundups {
        let r: Vec<(&str, String)> = roundup
            .iter()
            .map(|v| ("roundup_power2_divisions", v.clone()))
            .collect();
        out.push(with_fraction(spec("pytorch", &r)));
        out.push(with_fraction(spec("pytorch-expandable", &r)));
        for &split in MAX_SPLIT_MB {
            let mut o = vec![("max_split_size_mb", split.to_string())];
            o.extend(r.iter().cloned());
            out.push(with_fraction(spec("pytorch", &o)));
            for &n in NON_SPLIT_ROUNDING_MB {
                let mut o = o.clone();
                o.insert(1, ("max_non_split_rounding_mb", n.to_string()));
                out.push(with_fraction(spec("pytorch", &o)));
            }
        }
    }
    // Garbage collection runs only under a memory fraction below 1 (PyTorch 2.11's
    // `allowed_memory_maximum`): the configured one, else whatever fraction the program sets
    // itself (requests of its stream). Without either the threshold changes nothing.
    for name in ["pytorch", "pytorch-expandable"] {
        for t in GC_THRESHOLD {
            out.push(with_fraction(spec(
                name,
                &[("garbage_collection_threshold", t.to_string())],
            )));
        }
    }
    out.push(spec("cuda-async", &[]));
    out
}

fn jax() -> Vec<PolicySpec> {
    let mut out: Vec<PolicySpec> = XLA_FRACTIONS
        .iter()
        .map(|f| {
            spec(
                "bfc",
                &[
                    ("allow_growth", "false".into()),
                    ("memory_fraction", f.to_string()),
                ],
            )
        })
        .collect();
    out.push(spec("bfc", &[("allow_growth", "true".into())]));
    out.push(spec("cuda-malloc", &[]));
    out.push(spec("cuda-async", &[]));
    out
}

fn tensorflow() -> Vec<PolicySpec> {
    let tf = |growth: bool| {
        spec(
            "bfc",
            &[
                ("allow_growth", growth.to_string()),
                ("garbage_collection", "true".into()),
                ("memory_fraction", "1".into()),
            ],
        )
    };
    vec![tf(false), tf(true), spec("cuda-async", &[])]
}

fn cuda(ctx: &GridContext) -> Vec<PolicySpec> {
    let pool = ctx
        .lower_bound
        .checked_next_multiple_of(256 << 20)
        .unwrap_or(u64::MAX)
        .max(256 << 20);
    vec![
        spec("cuda-malloc", &[]),
        spec("cuda-async", &[]),
        spec("cuda-async", &[("release_threshold", "0".into())]),
        spec("rmm-pool", &[]),
        spec("rmm-pool", &[("initial_pool_size", pool.to_string())]),
        spec("rmm-arena", &[]),
        spec("rmm-binning", &[]),
    ]
}

/// Every setting of `framework` that `tune` tries, the recorded one not necessarily among them.
pub fn settings(framework: Framework, ctx: &GridContext) -> Vec<Candidate> {
    let specs = match framework {
        Framework::PyTorch => pytorch(ctx),
        Framework::Jax => jax(),
        Framework::TensorFlow => tensorflow(),
        Framework::Cuda => cuda(ctx),
    };
    specs.into_iter().map(|s| candidate(framework, s)).collect()
}

/// The bounds: what no allocator can beat, and what an offline planner knowing every lifetime
/// reaches.
pub fn bounds() -> Vec<Candidate> {
    BOUNDS
        .iter()
        .map(|name| Candidate {
            framework: Framework::Cuda,
            spec: spec(name, &[]),
            role: Role::Bound,
            select: "not selectable: the best any allocator could do".into(),
            preallocates: false,
        })
        .collect()
}

/// `spec` as a candidate of `framework`, with its selection line.
pub fn candidate(framework: Framework, spec: PolicySpec) -> Candidate {
    let preallocates = preallocates(&spec);
    Candidate {
        select: select_line(framework, &spec),
        framework,
        spec,
        role: Role::Setting,
        preallocates,
    }
}

/// Single-quotes a shell word when it holds characters the shell would read (`>` in a
/// divisions list is a redirection).
fn shell_word(v: &str) -> String {
    if v.chars()
        .all(|c| c.is_ascii_alphanumeric() || ",:._-".contains(c))
    {
        v.to_string()
    } else {
        format!("'{}'", v.replace('\'', r"'\''"))
    }
}

/// The line that selects `spec` in `framework`.
pub fn select_line(framework: Framework, spec: &PolicySpec) -> String {
    let opt = |k: &str| {
        spec.options
            .iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    match (framework, spec.name.as_str()) {
        (Framework::PyTorch, _) => match alloc_conf_of(spec) {
            Some(conf) if conf.is_empty() => "unset PYTORCH_CUDA_ALLOC_CONF".into(),
            Some(conf) => format!("export PYTORCH_CUDA_ALLOC_CONF={}", shell_word(&conf)),
            None => format!("not a PyTorch setting ({spec})"),
        },
        (Framework::Jax, "bfc") if opt("allow_growth").as_deref() == Some("true") => {
            "export XLA_PYTHON_CLIENT_PREALLOCATE=false".into()
        }
        (Framework::Jax, "bfc") => format!(
            "export XLA_PYTHON_CLIENT_PREALLOCATE=true XLA_PYTHON_CLIENT_MEM_FRACTION={}",
            opt("memory_fraction").unwrap_or_else(|| "0.75".into())
        ),
        (Framework::Jax, "cuda-malloc") => "export XLA_PYTHON_CLIENT_ALLOCATOR=platform".into(),
        (Framework::Jax, "cuda-async") => "export XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async".into(),
        (Framework::TensorFlow, "cuda-async") => "export TF_GPU_ALLOCATOR=cuda_malloc_async".into(),
        (Framework::TensorFlow, "bfc") if opt("allow_growth").as_deref() == Some("true") => {
            "export TF_FORCE_GPU_ALLOW_GROWTH=true".into()
        }
        (Framework::TensorFlow, "bfc") => "unset TF_GPU_ALLOCATOR TF_FORCE_GPU_ALLOW_GROWTH".into(),
        (_, "cuda-malloc") => "cudaMalloc / cudaFree per buffer (no pool)".into(),
        (_, "cuda-async") => match opt("release_threshold") {
            Some(t) => format!(
                "cudaMallocAsync / cudaFreeAsync on the default pool, \
                 cudaMemPoolAttrReleaseThreshold = {t} (CUDA's default 0)"
            ),
            None => "cudaMallocAsync / cudaFreeAsync, cudaMemPoolSetAttribute(pool, \
                     cudaMemPoolAttrReleaseThreshold, UINT64_MAX)"
                .into(),
        },
        (_, "rmm-pool") => match opt("initial_pool_size") {
            Some(n) => format!(
                "rmm.reinitialize(pool_allocator=True, initial_pool_size={n})  # {}",
                bytes(n.parse().unwrap_or(0))
            ),
            None => "rmm.reinitialize(pool_allocator=True, initial_pool_size=0)".into(),
        },
        (_, "rmm-arena") => "rmm.mr.set_current_device_resource(rmm.mr.ArenaMemoryResource(\
                             rmm.mr.CudaMemoryResource()))"
            .into(),
        (_, "rmm-binning") => "rmm.mr.set_current_device_resource(rmm.mr.BinningMemoryResource(\
                               rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource()), 18, 22))"
            .into(),
        _ => format!("--policy '{spec}'"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::resolve;

    #[test]
    fn every_candidate_builds_and_pytorch_ones_paste_back_to_themselves() {
        let ctx = GridContext {
            memory_fraction: None,
            lower_bound: 3 << 30,
        };
        for f in [
            Framework::PyTorch,
            Framework::Jax,
            Framework::TensorFlow,
            Framework::Cuda,
        ] {
            for c in settings(f, &ctx) {
                resolve(&c.spec.to_string()).unwrap();
                if f == Framework::PyTorch {
                    let conf = c
                        .select
                        .strip_prefix("export PYTORCH_CUDA_ALLOC_CONF=")
                        .map(|v| v.trim_matches('\''))
                        .unwrap_or("");
                    let back = resolve(&format!("PYTORCH_CUDA_ALLOC_CONF={conf}")).unwrap();
                    assert_eq!(back[0], c.spec, "{}", c.select);
                }
            }
        }
    }

    #[test]
    fn the_pytorch_grid_skips_combinations_pytorch_ignores() {
        let ctx = GridContext {
            memory_fraction: None,
            lower_bound: 0,
        };
        let grid = settings(Framework::PyTorch, &ctx);
        let has = |c: &Candidate, k: &str| c.spec.options.iter().any(|(key, _)| key == k);
        // 7 roundings × (native, expandable, 5 splits × 3 roundings) + 6 gc + async.
        assert_eq!(grid.len(), 7 * (2 + 5 * 3) + 6 + 1);
        assert!(
            grid.iter()
                .all(|c| !has(c, "max_non_split_rounding_mb") || has(c, "max_split_size_mb"))
        );
        // Without a configured fraction the collection runs under the program's own (PyTorch
        // 2.11 collects only below a fraction of 1): no candidate names a fraction of 1.
        assert!(grid.iter().all(|c| !has(c, "memory_fraction")));
        assert!(
            grid.iter()
                .all(|c| c.spec.name != "pytorch-expandable" || !has(c, "max_split_size_mb"))
        );
        let divisions = grid.iter().find(|c| c.select.contains('[')).unwrap();
        assert!(divisions.select.contains("='"), "{}", divisions.select);
    }
}
