//! The stream-ordered pool and plain `cuMemAlloc` as oracles for `cuda-async` and `cuda-malloc`:
//! request streams replayed on an H200 with `vramtrace replay --on-device`
//! (`samples/workloads/h200/policies_device_run.sh`), the figures kept in
//! `samples/workloads/h200/policies_device_run/`, provenance in docs/validation.md, "Part 2".

use crate::util::{only_stream, repo};
use std::path::PathBuf;
use vramtrace::policy::{BuildContext, parse_specs};
use vramtrace::replay::{ReplayOptions, Timeline, replay, run};

fn root() -> PathBuf {
    repo(".")
}

fn device(name: &str) -> serde_json::Value {
    let path = root().join(format!(
        "samples/workloads/h200/policies_device_run/{name}.ondevice.json"
    ));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v[0].clone()
}

#[test]
fn cuda_async_grows_exactly_as_the_h200_pool_did_on_every_probe() {
    // The device replay runs no kernels: every free is complete when the next request comes, so
    // another stream reuses it at once (opportunistic reuse, off by default for traces of
    // running programs; docs/validation.md, "Part 3", Q2).
    let spec = &parse_specs("cuda-async:reuse_allow_opportunistic=true").unwrap()[0];
    for probe in ["probe_sizes", "probe_reuse", "probe_small", "probe_streams"] {
        let s = only_stream(&root().join(format!(
            "samples/workloads/h200/policies_device_run/{probe}.vramtrace"
        )));
        let real = device(probe);
        let mut policy = vramtrace::policy::build(
            spec,
            &BuildContext {
                stream: &s,
                capacity: u64::MAX,
            },
        )
        .unwrap();
        let mut timeline = Timeline::default();
        let (o, _) = replay(
            policy.as_mut(),
            s.requests.iter().copied(),
            &ReplayOptions::default(),
            &mut timeline,
        );
        assert_eq!(
            o.peak_reserved,
            real["pool"]["reserved_high"].as_u64().unwrap(),
            "{probe}"
        );
        // The pool's reserved memory after every request (it changes only on allocations,
        // where the device replay logged each change) against the model's.
        let steps = real["pool"]["reserved_steps"].as_array().unwrap();
        let (mut next, mut held, mut differ) = (0, 0, 0);
        for (index, r) in s.requests.iter().enumerate() {
            if next < steps.len() && steps[next]["index"].as_u64().unwrap() as usize == index {
                held = steps[next]["held"].as_u64().unwrap();
                next += 1;
            }
            if r.kind == vramtrace::model::RequestKind::Alloc
                && timeline.usage[index].reserved != held
            {
                differ += 1;
            }
        }
        // One exception, in probe_reuse: the pool served 96 MiB from two non-adjacent free
        // 64 MiB holes without growing and grew at the next request; the model grows one
        // request early (docs/validation.md, "Part 2").
        let expected = usize::from(probe == "probe_reuse");
        assert_eq!(differ, expected, "{probe}: requests where reserved differs");
    }
}

#[test]
fn cuda_malloc_is_within_1_percent_of_the_memory_plain_cu_mem_alloc_took() {
    let spec = &parse_specs("cuda-malloc").unwrap()[0];
    for w in ["mlp", "resnet", "transformer_varlen", "gpt_ckpt_varlen"] {
        let s =
            only_stream(&root().join(format!("samples/traces/h200-torch/{w}.native.vramtrace")));
        let real = device(w);
        assert_eq!(
            s.lower_bound(),
            real["peak_requested"].as_u64().unwrap(),
            "{w}: same requests"
        );
        let taken = real["plain"]["peak_taken"].as_u64().unwrap() as f64;
        let o = run(&s, spec, u64::MAX).unwrap();
        let err = (o.peak_reserved as f64 - taken).abs() / taken;
        assert!(err < 0.01, "{w}: cuda-malloc off by {:.2}%", 100.0 * err);
    }
}

/// The target is 5% of PyTorch's own `max_memory_reserved()` under
/// `backend:cudaMallocAsync`. Two workloads miss it (docs/validation.md, "Part 2"): the
/// varying-length transformer, where the real pool fragments more than any placement rule
/// tried, and gpt_ckpt_varlen, where the PyTorch run reserved 16% more than the on-device
/// replay of the very same requests (timing the replay cannot see).
const KNOWN_MISSES: [&str; 2] = ["transformer_varlen", "gpt_ckpt_varlen"];

#[test]
fn cuda_async_is_within_5_percent_of_pytorchs_cuda_malloc_async_runs_except_the_known_misses() {
    let spec = &parse_specs("cuda-async").unwrap()[0];
    let mut checked = 0;
    for w in ["mlp", "resnet", "transformer_varlen", "gpt_ckpt_varlen"] {
        let s =
            only_stream(&root().join(format!("samples/traces/h200-torch/{w}.native.vramtrace")));
        let path = root().join(format!(
            "samples/workloads/h200/policies_device_run/{w}.async.stats.json"
        ));
        let stats: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        // The cudaMallocAsync run made the same requests as the traced native run.
        assert_eq!(
            stats["max_memory_allocated"].as_u64().unwrap(),
            s.lower_bound(),
            "{w}"
        );
        let real = stats["max_memory_reserved"].as_u64().unwrap() as f64;
        let o = run(&s, spec, u64::MAX).unwrap();
        let err = (o.peak_reserved as f64 - real).abs() / real;
        assert_eq!(
            err < 0.05,
            !KNOWN_MISSES.contains(&w),
            "{w}: cuda-async off by {:.1}%",
            100.0 * err
        );
        checked += 1;
    }
    assert_eq!(checked, 4);
}
