//! The allocations the page draws one by one; the rest are summarized by the live total, so
//! the page's size does not grow with the trace.

use crate::report::data::AllocationRecord;
use crate::report::trace::Instance;

/// Allocations drawn one by one in the page's timeline (memory_viz draws 15,000 by default).
pub const TOP_ALLOCATIONS: usize = 8_000;

/// The allocations drawn one by one, in allocation order: half of `n` those covering the most
/// area (size × lifetime, as the page's timeline draws them), the rest the largest of the others
/// (ties: the earlier). Long-lived tensors and short huge ones both make it.
pub fn top(instance: &Instance, n: usize, last_ns: u64) -> Vec<AllocationRecord> {
    let all = &instance.allocations;
    let mut order: Vec<u32> = (0..all.len() as u32).collect();
    if order.len() > n {
        let area = |i: u32| {
            let a = &all[i as usize];
            u128::from(a.size) * u128::from(a.death_ns.min(last_ns).saturating_sub(a.birth_ns) + 1)
        };
        let half = n / 2;
        order.select_nth_unstable_by_key(half, |&i| (std::cmp::Reverse(area(i)), i));
        let (by_area, rest) = order.split_at_mut(half);
        let more = n - half;
        rest.select_nth_unstable_by_key(more - 1, |&i| {
            (std::cmp::Reverse(all[i as usize].size), i)
        });
        let mut kept = by_area.to_vec();
        kept.extend_from_slice(&rest[..more]);
        order = kept;
    }
    order.sort_unstable();
    order
        .into_iter()
        .map(|i| {
            let a = &instance.allocations[i as usize];
            AllocationRecord {
                index: i,
                size: a.size,
                birth_ns: a.birth_ns,
                death_ns: a.death_ns,
                stack: a.stack,
                stream: a.stream,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::trace::TracePass;
    use crate::report::trace::tests::ev;
    use vramtrace_format::Api;

    #[test]
    fn the_largest_and_longest_allocations_are_kept_in_allocation_order() {
        let pass = TracePass::from_events(vec![
            ev(Api::CuMemAlloc_v2, 0, 1, 5),
            ev(Api::CuMemAlloc_v2, 1, 2, 50),
            ev(Api::CuMemAlloc_v2, 2, 3, 7),
            ev(Api::CuMemAlloc_v2, 3, 4, 60),
        ]);
        // 60 B alive 0..3 covers the most area, 50 B is the largest of the rest.
        let t = top(&pass.instances[0], 2, 3);
        assert_eq!(t.iter().map(|a| a.index).collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(t[0].death_ns, u64::MAX);
    }
}
