//! Which policy specs replay a request stream identically, known before replaying it.
//!
//! A replay is deterministic: the same policy behaviour on the same stream, capacity and driver
//! address order makes the same driver calls and gives the same figures. Two specs of one
//! [`ReplayClass`] for a stream behave the same on it, so a search over many settings replays
//! one spec of each class and gives its outcome to the others. Only PyTorch's caching
//! allocator, the policy with a grid of options, has classes wider than one spec (why each
//! option can be set aside: [`crate::policy::pytorch::Config::effective`]); any other spec is
//! its own class.

use super::driver::MAX_REQUEST;
use super::pytorch::{self, Config, Effective};
use super::{BuildContext, PolicyError, PolicySpec, options_of, rejected};
use crate::model::{RequestKind, RequestStream};

/// What of a request stream decides the class of a spec on it, read from the stream once for
/// all the specs of a search.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamFacts {
    /// The distinct sizes the stream asks its allocator for (allocations and attempts),
    /// ascending. Requests larger than [`MAX_REQUEST`] never reach a policy (the engine refuses
    /// them).
    sizes: Vec<u64>,
    /// Whether the program sets a memory fraction below 1 itself (a request of the stream),
    /// which turns garbage collection on as a configured one does.
    program_caps: bool,
}

impl StreamFacts {
    pub fn of(stream: &RequestStream) -> StreamFacts {
        let mut sizes: Vec<u64> = stream
            .requests
            .iter()
            .filter(|r| r.kind != RequestKind::Free && r.size <= MAX_REQUEST)
            .map(|r| r.size)
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        let program_caps = stream
            .requests
            .iter()
            .any(|r| r.kind == RequestKind::MemoryFraction && r.fraction() < 1.0);
        StreamFacts {
            sizes,
            program_caps,
        }
    }
}

/// What a replay of one stream can see of a spec: equal classes, equal replays.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayClass {
    /// PyTorch's caching allocator, with or without expandable segments.
    PyTorch(Effective),
    /// Any other policy: the spec as written.
    Spec(PolicySpec),
}

/// The class of `spec` on the stream of `ctx`, whose [`StreamFacts`] are `facts`; the error
/// [`crate::policy::build`] gives for a spec it cannot build.
pub fn replay_class(
    spec: &PolicySpec,
    ctx: &BuildContext,
    facts: &StreamFacts,
) -> Result<ReplayClass, PolicyError> {
    Ok(match caching_config(spec, ctx)? {
        Some(cfg) => ReplayClass::PyTorch(cfg.effective(&facts.sizes, facts.program_caps)),
        None => ReplayClass::Spec(spec.clone()),
    })
}

/// The configuration [`crate::policy::build`] gives PyTorch's caching allocator for `spec` on
/// the stream of `ctx`; `None` for a spec of another policy.
pub fn caching_config(
    spec: &PolicySpec,
    ctx: &BuildContext,
) -> Result<Option<Config>, PolicyError> {
    let (info, options) = options_of(spec)?;
    let expandable = if info.name == pytorch::INFO.name {
        false
    } else if info.name == pytorch::EXPANDABLE_INFO.name {
        true
    } else {
        return Ok(None);
    };
    Config::from_options(&options, expandable, ctx.device_memory())
        .map(Some)
        .map_err(|e| rejected(spec, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Request, RequestStream};
    use crate::policy::parse_specs;

    const MIB: u64 = 1 << 20;

    fn stream(sizes: &[u64]) -> RequestStream {
        let requests = sizes
            .iter()
            .enumerate()
            .flat_map(|(i, &size)| {
                let slot = i as u32;
                [Request::alloc(slot, size, 0), Request::free(slot, size)]
            })
            .collect();
        RequestStream::from_requests(requests)
    }

    fn class(spec: &str, s: &RequestStream) -> ReplayClass {
        let spec = &parse_specs(spec).unwrap()[0];
        let ctx = BuildContext {
            stream: s,
            capacity: 80 << 30,
        };
        replay_class(spec, &ctx, &StreamFacts::of(s)).unwrap()
    }

    #[test]
    fn options_no_request_reaches_are_set_aside() {
        // Largest request 30 MiB: segments of at most 30 MiB, below a 64 MiB split size.
        let s = stream(&[3 * MIB + 5, 30 * MIB, 700]);
        let plain = class("pytorch", &s);
        assert_eq!(class("pytorch:max_split_size_mb=64", &s), plain);
        assert_eq!(
            class(
                "pytorch:max_split_size_mb=64,max_non_split_rounding_mb=256",
                &s
            ),
            plain
        );
        // The documentation's per-size list rounds nothing below 512 MiB.
        assert_eq!(
            class(
                "pytorch:roundup_power2_divisions=[256:1,512:2,1024:4,>:8]",
                &s
            ),
            plain
        );
        assert_eq!(class("pytorch:garbage_collection_threshold=0.6", &s), plain);
        // 4 divisions round 3 MiB + 5 up to 3.5 MiB: another replay.
        assert_ne!(class("pytorch:roundup_power2_divisions=4", &s), plain);
        // Without a split size expandable segments stay another allocator.
        assert_ne!(class("pytorch-expandable", &s), plain);
        assert_eq!(
            class("pytorch:expandable_segments=true", &s),
            class("pytorch-expandable", &s)
        );
    }

    #[test]
    fn options_a_request_or_segment_reaches_stay() {
        let s = stream(&[100 * MIB, 3 * MIB]);
        let plain = class("pytorch", &s);
        let split = class("pytorch:max_split_size_mb=64", &s);
        assert_ne!(split, plain);
        // No block is larger than the 100 MiB segment, less than 20 MiB above the smallest
        // oversize request: no split rounding can refuse a block.
        assert_eq!(
            class(
                "pytorch:max_split_size_mb=64,max_non_split_rounding_mb=256",
                &s
            ),
            split
        );
        // A 128 MiB split size is above every request and segment here.
        assert_eq!(class("pytorch:max_split_size_mb=128", &s), plain);
        // Here 70 MiB + 64 MiB still fits in a 200 MiB block, 70 MiB + 256 MiB does not.
        let wide = stream(&[70 * MIB, 200 * MIB]);
        let rounding = |r: u64| {
            class(
                &format!("pytorch:max_split_size_mb=64,max_non_split_rounding_mb={r}"),
                &wide,
            )
        };
        assert_ne!(rounding(20), rounding(64));
        assert_ne!(rounding(64), rounding(256));
        assert_eq!(rounding(256), rounding(1024));
        // With expandable segments free blocks outgrow any segment: the split size stays,
        // and only the split rounding no request reaches is set aside.
        let es = class("pytorch-expandable:max_split_size_mb=128", &s);
        assert_ne!(es, class("pytorch-expandable", &s));
        assert_eq!(
            class(
                "pytorch-expandable:max_split_size_mb=128,max_non_split_rounding_mb=64",
                &s
            ),
            es
        );
        // A memory fraction turns garbage collection on.
        assert_ne!(
            class(
                "pytorch:garbage_collection_threshold=0.6,memory_fraction=0.9",
                &s
            ),
            class("pytorch:memory_fraction=0.9", &s)
        );
    }

    /// Collection runs under a fraction below 1, the configured one or the program's own; a
    /// configured fraction of 1 sets none (PyTorch 2.11).
    #[test]
    fn a_threshold_counts_under_the_programs_own_fraction_and_not_under_a_fraction_of_one() {
        let plain = stream(&[30 * MIB, 3 * MIB]);
        let gc = "pytorch:garbage_collection_threshold=0.6";
        assert_eq!(class(gc, &plain), class("pytorch", &plain));
        assert_eq!(
            class(&format!("{gc},memory_fraction=1"), &plain),
            class("pytorch:memory_fraction=1", &plain)
        );
        let mut capped = plain.clone();
        capped.requests.insert(
            0,
            Request {
                size: 0.5f64.to_bits(),
                kind: crate::model::RequestKind::MemoryFraction,
                ..Request::alloc(0, 0, 0)
            },
        );
        assert_ne!(class(gc, &capped), class("pytorch", &capped));
    }

    #[test]
    fn garbage_collection_replays_as_without_it_below_its_threshold() {
        let s = stream(&[30 * MIB, 3 * MIB]);
        let pytorch = |spec: &str| match class(spec, &s) {
            ReplayClass::PyTorch(e) => e,
            other => panic!("{other:?}"),
        };
        let gc = pytorch("pytorch:garbage_collection_threshold=0.5,memory_fraction=0.5");
        let [kept, none] = &gc.without_collection()[..] else {
            panic!("two bases")
        };
        assert_eq!(
            ReplayClass::PyTorch(kept.base.clone()),
            class("pytorch:memory_fraction=0.5", &s)
        );
        assert_eq!(
            ReplayClass::PyTorch(none.base.clone()),
            class("pytorch", &s)
        );
        // Half of the fraction's 40 GiB of the 80 GiB capacity; the fraction's own limit less
        // the largest segment is higher.
        assert_eq!((kept.peak_at_most, none.peak_at_most), (20 << 30, 20 << 30));
        let tight = pytorch("pytorch:garbage_collection_threshold=0.9999,memory_fraction=0.5");
        let bases = tight.without_collection();
        assert_eq!(bases[1].peak_at_most, (40 << 30) - 30 * MIB);
        assert!(bases[0].peak_at_most > bases[1].peak_at_most);
        assert!(
            pytorch("pytorch:memory_fraction=0.9")
                .without_collection()
                .is_empty()
        );
    }

    #[test]
    fn other_policies_are_their_own_class_and_bad_specs_fail_as_build_does() {
        let s = stream(&[MIB]);
        assert_eq!(
            class("cuda-async", &s),
            ReplayClass::Spec(parse_specs("cuda-async").unwrap()[0].clone())
        );
        let bad = &parse_specs("pytorch:max_split_size_mb=3").unwrap()[0];
        let ctx = BuildContext {
            stream: &s,
            capacity: u64::MAX,
        };
        let expected = crate::policy::build(bad, &ctx).err().unwrap().to_string();
        let got = replay_class(bad, &ctx, &StreamFacts::of(&s)).unwrap_err();
        assert_eq!(got.to_string(), expected);
    }
}
