//! PyTorch's `PYTORCH_CUDA_ALLOC_CONF` and the policy specs it stands for, both ways.
//!
//! The string is `key:value,key:value` (PyTorch's `c10/core/AllocatorConfig.cpp`,
//! `AcceleratorAllocatorConfig::parseArgs`, and `c10/cuda/CUDAAllocatorConfig.cpp`), a list
//! value in square brackets (`roundup_power2_divisions:[256:1,>:4]`). The keys map to options
//! of the `pytorch` and `pytorch-expandable` policies; `backend:cudaMallocAsync` selects the
//! `cuda-async` policy with PyTorch's pool settings (PyTorch then ignores the caching
//! allocator's keys, with a warning, and so does this parser); `per_process_memory_fraction`
//! (PyTorch 2.9+, the same as `torch.cuda.set_per_process_memory_fraction`) becomes
//! `memory_fraction`. Keys that do not change where device memory goes
//! (`release_lock_on_cudamalloc`, `pinned_*`, `graph_capture_record_stream_reuse`) are
//! accepted and ignored; any other key is an error, as it is for PyTorch.

use super::support::options::split_outside_brackets;
use super::{PolicySpec, SpecSyntax, find};

/// The policy PyTorch's native allocator is, without and with expandable segments.
const NATIVE: &str = "pytorch";
const EXPANDABLE: &str = "pytorch-expandable";
/// PyTorch's `backend:cudaMallocAsync`: CUDA's stream-ordered pool with PyTorch's settings.
const ASYNC: &str = "cuda-async";

/// Keys that become a policy option of the same name.
const PLACEMENT_KEYS: &[&str] = &[
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "roundup_power2_divisions",
    "garbage_collection_threshold",
    "large_segment_size_mb",
];

/// Keys PyTorch accepts that do not change device-memory placement.
const IGNORED_PREFIXES: &[&str] = &[
    "release_lock_on_cudamalloc",
    "pinned_",
    "graph_capture_record_stream_reuse",
];

/// Whether `key` is a `PYTORCH_CUDA_ALLOC_CONF` key.
pub fn is_conf_key(key: &str) -> bool {
    PLACEMENT_KEYS.contains(&key)
        || IGNORED_PREFIXES.iter().any(|p| key.starts_with(p))
        || matches!(
            key,
            "expandable_segments" | "backend" | "per_process_memory_fraction"
        )
}

fn is_pytorch(name: &str) -> bool {
    name == NATIVE || name == EXPANDABLE
}

/// Applies one `key:value` of the allocator configuration to `spec`.
fn apply(spec: &mut PolicySpec, key: &str, value: &str) -> Result<(), String> {
    let (key, value) = (key.trim(), value.trim());
    if spec.name == ASYNC && key != "backend" {
        // PyTorch's cudaMallocAsync back-end ignores the caching allocator's keys.
        return Ok(());
    }
    match key {
        "backend" => match value {
            "native" => {}
            "cudaMallocAsync" => {
                spec.name = ASYNC.into();
                spec.options.clear();
            }
            _ => return Err(format!("backend:{value}: not native or cudaMallocAsync")),
        },
        "expandable_segments" => {
            spec.name = match value.to_ascii_lowercase().as_str() {
                "true" => EXPANDABLE.into(),
                "false" => NATIVE.into(),
                _ => return Err(format!("expandable_segments:{value}: not True or False")),
            };
            spec.options.retain(|(k, _)| k != "expandable_segments");
        }
        "per_process_memory_fraction" => spec
            .options
            .push(("memory_fraction".into(), value.to_string())),
        k if PLACEMENT_KEYS.contains(&k) => spec.options.push((k.into(), value.to_string())),
        k if is_conf_key(k) => {}
        k => {
            return Err(format!(
                "`{k}` is not a PYTORCH_CUDA_ALLOC_CONF key (known: {}, expandable_segments, \
                 backend, per_process_memory_fraction)",
                PLACEMENT_KEYS.join(", ")
            ));
        }
    }
    Ok(())
}

/// The policy a `PYTORCH_CUDA_ALLOC_CONF` value configures (an empty value is the default
/// allocator), with `memory_fraction` set when the process called
/// `set_per_process_memory_fraction` with `fraction`.
pub fn spec_from_alloc_conf(conf: &str, fraction: Option<&str>) -> Result<PolicySpec, SpecSyntax> {
    let mut spec = PolicySpec {
        name: NATIVE.into(),
        options: Vec::new(),
    };
    for item in split_outside_brackets(conf, ',') {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let (key, value) = item.split_once(':').ok_or_else(|| {
            SpecSyntax::AllocConf(format!(
                "`{item}` in the allocator configuration is not KEY:VALUE"
            ))
        })?;
        apply(&mut spec, key, value).map_err(SpecSyntax::AllocConf)?;
    }
    if let Some(f) = fraction.map(str::trim).filter(|f| !f.is_empty())
        && spec.name != ASYNC
    {
        spec.options.push(("memory_fraction".into(), f.into()));
    }
    Ok(spec)
}

/// The `PYTORCH_CUDA_ALLOC_CONF` value that selects `spec`, or `None` when `spec` is not a
/// PyTorch setting. Options left at their defaults are left out; `memory_fraction` is written
/// as `per_process_memory_fraction`.
pub fn alloc_conf_of(spec: &PolicySpec) -> Option<String> {
    let mut items = Vec::new();
    match spec.name.as_str() {
        ASYNC if spec.options.is_empty() => return Some("backend:cudaMallocAsync".into()),
        EXPANDABLE => items.push("expandable_segments:True".to_string()),
        NATIVE => {}
        _ => return None,
    }
    for (k, v) in &spec.options {
        match k.as_str() {
            "expandable_segments" => {
                if v.eq_ignore_ascii_case("true") && spec.name == NATIVE {
                    items.insert(0, "expandable_segments:True".into());
                }
            }
            "memory_fraction" => items.push(format!("per_process_memory_fraction:{v}")),
            k => items.push(format!("{k}:{v}")),
        }
    }
    Some(items.join(","))
}

/// What a spec sets that the allocator it models ignores, in words: PyTorch collects garbage
/// only under a per-process memory fraction, so `garbage_collection_threshold` without
/// `memory_fraction` changes nothing (`CUDACachingAllocator.cpp`, `garbage_collect_cached_blocks`
/// runs only when `set_fraction`). `None` when every option takes effect.
pub fn ignored_options(spec: &PolicySpec) -> Option<String> {
    let has = |k: &str| spec.options.iter().any(|(key, _)| key == k);
    (is_pytorch(&spec.name) && has("garbage_collection_threshold") && !has("memory_fraction")).then(
        || {
            format!(
                "{spec}: garbage_collection_threshold does nothing without memory_fraction \
                 (PyTorch collects only under torch.cuda.set_per_process_memory_fraction); add \
                 memory_fraction=F to replay it"
            )
        },
    )
}

/// Rewrites a `--policy` list written in the allocator-configuration syntax into the policy
/// syntax (`NAME:KEY=VALUE,...`), then parses it. Accepted besides that syntax:
///
/// - `PYTORCH_CUDA_ALLOC_CONF=VALUE` or `PYTORCH_ALLOC_CONF=VALUE`: one policy;
/// - `pytorch:max_split_size_mb:128` (a policy, then `key:value` options);
/// - `expandable_segments:True,max_split_size_mb:128` (an allocator configuration alone).
pub fn parse_policy_list(text: &str) -> Result<Vec<PolicySpec>, SpecSyntax> {
    let trimmed = text.trim();
    for var in ["PYTORCH_CUDA_ALLOC_CONF=", "PYTORCH_ALLOC_CONF="] {
        if let Some(conf) = trimmed.strip_prefix(var) {
            return Ok(vec![spec_from_alloc_conf(conf, None)?]);
        }
    }
    let mut specs: Vec<PolicySpec> = Vec::new();
    // Whether the last spec may take further `key:value` items: it was written as an allocator
    // configuration.
    let mut open = false;
    // The last spec, when it was written as NAME[:KEY=VALUE,...] and configures PyTorch: a
    // `key:value` item after it is refused as ambiguous.
    let mut written: Option<String> = None;
    for item in split_outside_brackets(trimmed, ',') {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let parts = split_outside_brackets(item, ':');
        let conf_item = parts.len() == 2 && !item.contains('=') && is_conf_key(parts[0].trim());
        if conf_item {
            if let Some(spec) = &written {
                let name = &specs.last().expect("written names the last spec").name;
                let option = format!("{}={}", parts[0].trim(), parts[1].trim());
                let join = if spec.contains(':') { ',' } else { ':' };
                return Err(SpecSyntax::Ambiguous {
                    written: format!("{spec},{item}"),
                    one: format!("{spec}{join}{option}"),
                    two: format!("{spec},{name}:{option}"),
                });
            }
            let continues = open
                && specs
                    .last()
                    .is_some_and(|s| is_pytorch(&s.name) || s.name == ASYNC);
            if !continues {
                specs.push(PolicySpec {
                    name: NATIVE.into(),
                    options: Vec::new(),
                });
            }
            let spec = specs.last_mut().expect("pushed above");
            apply(spec, parts[0], parts[1]).map_err(SpecSyntax::AllocConf)?;
            open = true;
            continue;
        }
        let env_first = parts.len() == 3
            && !item.contains('=')
            && find(parts[0].trim()).is_some_and(|p| is_pytorch(p.name));
        if env_first {
            let mut spec = PolicySpec {
                name: parts[0].trim().into(),
                options: Vec::new(),
            };
            apply(&mut spec, parts[1], parts[2]).map_err(SpecSyntax::AllocConf)?;
            specs.push(spec);
            open = true;
            written = None;
            continue;
        }
        // The policy syntax: parse this item alone, continuing the last spec for `KEY=VALUE`.
        let continues = parts.len() == 1 && item.contains('=');
        if continues {
            let spec = specs
                .last_mut()
                .ok_or_else(|| SpecSyntax::OptionWithoutPolicy(item.to_string()))?;
            let (k, v) = item.split_once('=').expect("contains =");
            spec.options.push((k.trim().into(), v.trim().into()));
        } else {
            specs.extend(super::parse_specs(item)?);
        }
        open = false;
        written = specs
            .last()
            .filter(|s| is_pytorch(&s.name) || s.name == ASYNC)
            .map(ToString::to_string);
    }
    if specs.is_empty() {
        return Err(SpecSyntax::Empty);
    }
    Ok(specs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str) -> Vec<String> {
        parse_policy_list(text)
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn an_alloc_conf_becomes_the_policy_it_configures() {
        let s = spec_from_alloc_conf(
            "expandable_segments:True,roundup_power2_divisions:[256:1,>:4],backend:native",
            Some("0.5"),
        )
        .unwrap();
        assert_eq!(
            s.to_string(),
            "pytorch-expandable:roundup_power2_divisions=[256:1,>:4],memory_fraction=0.5"
        );
        assert_eq!(
            spec_from_alloc_conf("", None).unwrap().to_string(),
            "pytorch"
        );
        assert_eq!(
            spec_from_alloc_conf("backend:cudaMallocAsync,max_split_size_mb:64", None)
                .unwrap()
                .to_string(),
            "cuda-async"
        );
        assert!(spec_from_alloc_conf("max_split:64", None).is_err());
    }

    #[test]
    fn the_conf_line_of_a_spec_parses_back_to_the_same_spec() {
        for conf in [
            "",
            "expandable_segments:True",
            "max_split_size_mb:128,max_non_split_rounding_mb:64",
            "expandable_segments:True,roundup_power2_divisions:[256:1,512:2,>:8]",
            "garbage_collection_threshold:0.8,per_process_memory_fraction:0.9",
            "backend:cudaMallocAsync",
        ] {
            let spec = spec_from_alloc_conf(conf, None).unwrap();
            assert_eq!(alloc_conf_of(&spec).unwrap(), conf, "{spec}");
        }
        let bfc = PolicySpec {
            name: "bfc".into(),
            options: Vec::new(),
        };
        assert_eq!(alloc_conf_of(&bfc), None);
    }

    #[test]
    fn policy_lists_take_the_env_syntax_too() {
        assert_eq!(
            names("pytorch:max_split_size_mb:128"),
            ["pytorch:max_split_size_mb=128"]
        );
        assert_eq!(
            names("pytorch:max_split_size_mb:128,roundup_power2_divisions:[256:1,>:4],cuda-malloc"),
            [
                "pytorch:max_split_size_mb=128,roundup_power2_divisions=[256:1,>:4]",
                "cuda-malloc"
            ]
        );
        assert_eq!(
            names("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,max_split_size_mb:64"),
            ["pytorch-expandable:max_split_size_mb=64"]
        );
        assert_eq!(
            names("expandable_segments:True,garbage_collection_threshold:0.6,lower-bound"),
            [
                "pytorch-expandable:garbage_collection_threshold=0.6",
                "lower-bound"
            ]
        );
        assert_eq!(
            names("pytorch:max_split_size_mb=128,roundup_power2_divisions=4,cuda-malloc"),
            [
                "pytorch:max_split_size_mb=128,roundup_power2_divisions=4",
                "cuda-malloc"
            ]
        );
        assert_eq!(names("backend:cudaMallocAsync"), ["cuda-async"]);
        assert!(parse_policy_list("pytorch:max_split:128").is_err());
    }

    #[test]
    fn a_collection_threshold_without_a_memory_fraction_is_named_as_ignored() {
        let list = parse_policy_list(
            "pytorch:garbage_collection_threshold=0.6,\
             pytorch:garbage_collection_threshold=0.6,memory_fraction=0.9",
        )
        .unwrap();
        assert_eq!(
            ignored_options(&list[0]).unwrap(),
            "pytorch:garbage_collection_threshold=0.6: garbage_collection_threshold does nothing \
             without memory_fraction (PyTorch collects only under \
             torch.cuda.set_per_process_memory_fraction); add memory_fraction=F to replay it"
        );
        assert_eq!(ignored_options(&list[1]), None);
    }

    #[test]
    fn a_conf_item_after_a_policy_name_is_refused_as_ambiguous() {
        let e = parse_policy_list("pytorch,max_split_size_mb:128").unwrap_err();
        assert_eq!(
            e.to_string(),
            "`pytorch,max_split_size_mb:128` is ambiguous: write `pytorch:max_split_size_mb=128` \
             for one policy with that option, or `pytorch,pytorch:max_split_size_mb=128` for two \
             policies"
        );
        // Written whole in one syntax, the same options still parse.
        assert_eq!(
            names("pytorch,pytorch:max_split_size_mb=128"),
            ["pytorch", "pytorch:max_split_size_mb=128"]
        );
        assert_eq!(
            names("max_split_size_mb:128,expandable_segments:True"),
            ["pytorch-expandable:max_split_size_mb=128"]
        );
    }
}
