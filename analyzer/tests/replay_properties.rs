//! Invariants of every policy on random request streams (proptest).

use crate::streams::{MIB, every_policy_and, op_with_attempts, stream_of};
use proptest::prelude::*;
use vramtrace::model::{RequestKind, RequestStream};
use vramtrace::policy::{BuildContext, Driver, DriverModel, PolicySpec, build};
use vramtrace::replay::replay_all;

/// Every registered policy with its defaults, plus the PyTorch options that change placement.
fn specs() -> Vec<PolicySpec> {
    every_policy_and(
        "pytorch:max_split_size_mb=64,roundup_power2_divisions=[2:1,8:4,>:2],\
         pytorch:garbage_collection_threshold=0.5,memory_fraction=0.5,\
         pytorch-expandable:max_split_size_mb=32,roundup_power2_divisions=4",
    )
}

/// Drives one policy request by request and checks the invariants after each.
fn check_policy(
    stream: &RequestStream,
    spec: &PolicySpec,
    capacity: u64,
) -> Result<(), TestCaseError> {
    let mut policy = build(spec, &BuildContext { stream, capacity }).unwrap();
    let mut driver = Driver::new(DriverModel { capacity });
    let mut requested = 0u64;
    for (i, r) in stream.requests.iter().enumerate() {
        match r.kind {
            RequestKind::Alloc => {
                if policy
                    .malloc(r.slot, r.size, r.stream, &mut driver.device())
                    .is_err()
                {
                    // An OOM is only allowed when the device is really limited.
                    prop_assert!(capacity != u64::MAX, "{spec}: OOM without a capacity");
                    return Ok(());
                }
                requested += r.size;
            }
            RequestKind::Free => {
                policy.free(r.slot, &mut driver.device());
                requested -= r.size;
            }
            RequestKind::Attempt => {
                driver.set_frozen(true);
                policy.attempt(r.slot, r.size, r.stream, &mut driver.device());
                driver.set_frozen(false);
            }
            RequestKind::EmptyCache => policy.empty_cache(&mut driver.device()),
            RequestKind::MemoryFraction => policy.set_memory_fraction(r.fraction()),
            RequestKind::Order(o) => policy.order(o, r.stream, r.slot, &mut driver.device()),
        }
        let (allocated, reserved) = (policy.allocated(), driver.reserved());
        prop_assert!(
            reserved >= allocated && allocated >= requested,
            "{spec} after request {i}: reserved {reserved} allocated {allocated} requested {requested}"
        );
        let map = policy.address_map();
        let mut used: Vec<_> = map.blocks.iter().filter(|b| b.slot.is_some()).collect();
        used.sort_by_key(|b| b.address);
        for w in used.windows(2) {
            prop_assert!(
                w[0].address + w[0].size <= w[1].address,
                "{spec} after request {i}: live blocks overlap: {:?}",
                (w[0], w[1])
            );
        }
        let block_bytes: u64 = used.iter().map(|b| b.size).sum();
        prop_assert_eq!(block_bytes, allocated, "{} after request {}", spec, i);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_policy_keeps_blocks_apart_and_reserved_over_allocated_over_requested(
        ops in prop::collection::vec(op_with_attempts(), 1..120),
    ) {
        let stream = stream_of(&ops, false);
        for spec in specs() {
            check_policy(&stream, &spec, u64::MAX)?;
        }
    }

    #[test]
    fn under_a_capacity_every_request_is_served_or_reported_as_oom(
        ops in prop::collection::vec(op_with_attempts(), 1..120),
        capacity_mib in 1u64..600,
    ) {
        let stream = stream_of(&ops, false);
        let specs = specs();
        let capacity = capacity_mib * MIB;
        let results = replay_all(std::slice::from_ref(&stream), &specs, &[capacity]).unwrap();
        let lb = stream.lower_bound();
        for r in &results {
            let o = &r.outcome;
            match &o.oom {
                None => prop_assert_eq!(o.requests, stream.requests.len()),
                Some(oom) => {
                    prop_assert_eq!(oom.request_index, o.requests);
                    prop_assert_eq!(stream.requests[oom.request_index].kind, RequestKind::Alloc);
                    prop_assert!(oom.reserved <= capacity);
                }
            }
            prop_assert!(o.peak_reserved <= capacity);
            if o.oom.is_none() {
                prop_assert!(o.peak_reserved >= lb, "{} beat the lower bound", specs[r.policy]);
            }
            check_policy(&stream, &specs[r.policy], capacity)?;
        }
    }

    #[test]
    fn one_thread_and_four_threads_give_the_same_results(
        ops in prop::collection::vec(op_with_attempts(), 1..200),
    ) {
        let streams = vec![stream_of(&ops, false), stream_of(&ops[ops.len() / 2..], false)];
        let specs = specs();
        let caps = [u64::MAX, 300 * MIB];
        let run = |threads| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| replay_all(&streams, &specs, &caps).unwrap())
        };
        prop_assert_eq!(run(1), run(4));
    }
}
