//! Where every registered policy places memory, on random request streams (proptest).
//!
//! For each policy, at every step: requested <= allocated <= reserved; reserved never exceeds
//! the capacity; live blocks of the address map never overlap and lie inside its segments;
//! freeing everything leaves nothing allocated; two replays give the same figures.

use crate::streams::{MIB, every_policy_and, op_log_uniform, stream_of};
use proptest::prelude::*;
use vramtrace::model::{Request, RequestStream};
use vramtrace::policy::{AddressOrder, BuildContext, DriverModel, PolicySpec, build, parse_specs};
use vramtrace::replay::{Observer, Outcome, ReplayOptions, Usage, address_map_at, driver, replay};

/// Random allocations and frees of random live objects, then every remaining object freed; at
/// least one request.
fn streams() -> impl Strategy<Value = RequestStream> {
    prop::collection::vec(op_log_uniform(), 1..120)
        .prop_map(|ops| stream_of(&ops, true))
        .prop_filter("an empty program", |s| !s.requests.is_empty())
}

struct Check {
    capacity: u64,
    steps: usize,
    violation: Option<String>,
}

impl Observer for Check {
    fn step(&mut self, index: usize, _: &Request, u: Usage) {
        self.steps += 1;
        if self.violation.is_none()
            && !(u.requested <= u.allocated
                && u.allocated <= u.reserved
                && u.reserved <= self.capacity)
        {
            self.violation = Some(format!("step {index}: {u:?} capacity {}", self.capacity));
        }
    }
}

/// Every registered policy with its defaults, and the options of the other policies that change
/// placement.
fn specs() -> Vec<PolicySpec> {
    every_policy_and(
        "bfc:allow_growth=true,garbage_collection=true,\
         cuda-async:reuse_allow_opportunistic=false,release_threshold=0,fit=best,\
         rmm-pool:initial_pool_size=64MiB,maximum_pool_size=4GiB,\
         gmlake:frag_limit=0,reuse_limit=2,\
         rmm-binning:min_size_exponent=10,max_size_exponent=24",
    )
}

fn run(spec: &PolicySpec, stream: &RequestStream, capacity: u64) -> (Outcome, Check) {
    let ctx = BuildContext { stream, capacity };
    let mut policy = build(spec, &ctx).unwrap();
    let options = ReplayOptions {
        driver: DriverModel { capacity },
        stop_after: None,
    };
    let mut check = Check {
        capacity,
        steps: 0,
        violation: None,
    };
    let (outcome, _) = replay(
        policy.as_mut(),
        stream.requests.iter().copied(),
        &options,
        &mut check,
    );
    (outcome, check)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_policy_keeps_the_byte_counts_ordered_and_ends_empty(stream in streams()) {
        for p in specs() {
            let (o, check) = run(&p, &stream, u64::MAX);
            prop_assert!(o.oom.is_none(), "{}: OOM without a capacity", p);
            prop_assert_eq!(check.steps, stream.requests.len(), "{}", p);
            prop_assert!(o.peak_reserved >= stream.lower_bound(), "{}", p);
            prop_assert_eq!(check.violation, None, "{}", p);
            let (again, _) = run(&p, &stream, u64::MAX);
            prop_assert_eq!(&o, &again, "{}: not deterministic", p);
        }
    }

    #[test]
    fn every_policy_stays_within_a_capacity_or_reports_an_oom(stream in streams(), slack in 100u64..200) {
        let capacity = stream.lower_bound() * slack / 100 + 64 * MIB;
        // A fixed arena smaller than the capacity runs out on its own.
        let fixed = parse_specs("rmm-arena:arena_size=256MiB").unwrap();
        for p in specs().into_iter().chain(fixed) {
            let (o, check) = run(&p, &stream, capacity);
            prop_assert_eq!(check.violation, None, "{}", p);
            prop_assert!(o.peak_reserved <= capacity, "{}", p);
            if let Some(oom) = &o.oom {
                prop_assert_eq!(check.steps, oom.request_index, "{}", p);
            }
        }
    }

    #[test]
    fn live_blocks_never_overlap_and_lie_in_segments(stream in streams(), at in any::<prop::sample::Index>()) {
        let index = at.index(stream.requests.len());
        let live_slots = {
            let mut live = std::collections::BTreeSet::new();
            for r in &stream.requests[..=index] {
                if r.kind == vramtrace::model::RequestKind::Alloc {
                    live.insert(r.slot);
                } else {
                    live.remove(&r.slot);
                }
            }
            live
        };
        for p in specs() {
            let ctx = BuildContext { stream: &stream, capacity: u64::MAX };
            let mut policy = build(&p, &ctx).unwrap();
            let map = address_map_at(policy.as_mut(), &stream.requests, index, driver(&stream, u64::MAX, AddressOrder::Rising));
            // A map lists its blocks in the policy's own order (`Policy::address_map_into`).
            let mut live: Vec<_> = map.blocks.iter().filter(|b| b.slot.is_some()).collect();
            live.sort_by_key(|b| b.address);
            let slots: std::collections::BTreeSet<u32> = live.iter().filter_map(|b| b.slot).collect();
            prop_assert_eq!(&slots, &live_slots, "{}: live blocks", p);
            for w in live.windows(2) {
                prop_assert!(w[0].address + w[0].size <= w[1].address, "{}: {:?} overlaps {:?}", p, w[0], w[1]);
            }
            if !map.segments.is_empty() {
                for b in &live {
                    prop_assert!(
                        map.segments.iter().any(|s| s.address <= b.address && b.address + b.size <= s.address + s.size),
                        "{}: {:?} outside every segment", p, b
                    );
                }
            }
        }
    }
}
