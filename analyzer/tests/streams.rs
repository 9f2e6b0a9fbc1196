//! The random request streams of the property suites (`replay_properties`,
//! `placement_properties`): one generator of valid programs, two mixes of operations.

use proptest::prelude::*;
use vramtrace::model::{Request, RequestKind, RequestStream};
use vramtrace::policy::{PolicySpec, REGISTRY, parse_specs};

pub const MIB: u64 = 1 << 20;

/// One step of a generated program.
#[derive(Debug, Clone)]
pub enum Op {
    /// Allocate `size` bytes on CUDA stream index `stream`.
    Alloc { size: u64, stream: u32 },
    /// Free one of the live objects (nothing when none is live).
    Free(prop::sample::Index),
    /// An allocation the program tries and survives failing.
    Attempt(u64),
}

/// The request stream of `ops`: frees only live objects, reuses slots as the model does
/// (the most recently freed first), times the requests 1 ns apart, and with `free_all` frees
/// every object still live at the end.
pub fn stream_of(ops: &[Op], free_all: bool) -> RequestStream {
    let mut live: Vec<(u32, u64)> = Vec::new();
    let mut free_slots: Vec<u32> = Vec::new();
    let mut next = 0;
    let mut requests = Vec::new();
    for op in ops {
        let r = match *op {
            Op::Alloc { size, stream } => {
                let slot = free_slots.pop().unwrap_or_else(|| {
                    next += 1;
                    next - 1
                });
                live.push((slot, size));
                Request::alloc(slot, size, stream)
            }
            Op::Attempt(size) => {
                let slot = free_slots.last().copied().unwrap_or(next);
                Request {
                    kind: RequestKind::Attempt,
                    ..Request::alloc(slot, size, 0)
                }
            }
            Op::Free(_) if live.is_empty() => continue,
            Op::Free(pick) => {
                let (slot, size) = live.swap_remove(pick.index(live.len()));
                free_slots.push(slot);
                Request::free(slot, size)
            }
        };
        requests.push(r);
    }
    if free_all {
        requests.extend(
            live.into_iter()
                .map(|(slot, size)| Request::free(slot, size)),
        );
    }
    for (t, r) in requests.iter_mut().enumerate() {
        r.time_ns = t as u64;
    }
    RequestStream::from_requests(requests)
}

/// Allocations in four size bands (1 B to 200 MiB) on two streams, frees, and refused attempts
/// of 1 to 300 MiB, 3 : 2 : 1.
pub fn op_with_attempts() -> impl Strategy<Value = Op> {
    let size = prop_oneof![
        1u64..=4096,
        4096u64..=MIB,
        MIB..=10 * MIB,
        10 * MIB..=200 * MIB,
    ];
    prop_oneof![
        3 => (size, 0u32..2).prop_map(|(size, stream)| Op::Alloc { size, stream }),
        2 => any::<prop::sample::Index>().prop_map(Op::Free),
        1 => (MIB..=300 * MIB).prop_map(Op::Attempt),
    ]
}

/// Allocations of 512 B to 512 MiB (log-uniform) on three streams and frees, half each.
pub fn op_log_uniform() -> impl Strategy<Value = Op> {
    (
        any::<bool>(),
        9u32..=28,
        0u64..1024,
        0u32..3,
        any::<prop::sample::Index>(),
    )
        .prop_map(|(alloc, exp, frac, stream, pick)| {
            if alloc {
                let size = (1u64 << exp) + frac * ((1u64 << exp) / 1024);
                Op::Alloc { size, stream }
            } else {
                Op::Free(pick)
            }
        })
}

/// Every registered policy with its defaults, then the specs of `extra` (options that change
/// placement).
pub fn every_policy_and(extra: &str) -> Vec<PolicySpec> {
    let mut specs: Vec<PolicySpec> = REGISTRY
        .iter()
        .map(|p| PolicySpec {
            name: p.name.into(),
            options: Vec::new(),
        })
        .collect();
    specs.extend(parse_specs(extra).unwrap());
    specs
}
