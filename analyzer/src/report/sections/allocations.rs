//! The allocations the page draws one by one; the rest are summarized by the live total, so
//! the page's size does not grow with the trace.

use crate::report::data::AllocationRecord;
use crate::report::largest::Largest;
use crate::report::trace::{Allocation, Instance};
use std::cmp::Reverse;

/// Allocations drawn one by one in the page's timeline (memory_viz draws 15,000 by default).
pub const TOP_ALLOCATIONS: usize = 8_000;

/// The allocations drawn one by one, in allocation order: half of `n` those covering the most
/// area (size × lifetime, as the page's timeline draws them), the rest the largest of the others
/// (ties: the earlier). Long-lived tensors and short huge ones both make it.
///
/// One walk over the allocations with two bounded heaps: the `n / 2` of the most area, and the
/// `n` largest, which hold the largest of the others whichever of them the first kept.
pub fn top(instance: &Instance, n: usize, last_ns: u64) -> Vec<AllocationRecord> {
    let half = n / 2;
    let mut by_area = Largest::new(half);
    let mut by_size = Largest::new(n);
    for a in instance.allocations() {
        let area =
            u128::from(a.size) * u128::from(a.death_ns.min(last_ns).saturating_sub(a.birth_ns) + 1);
        by_area.push((area, Reverse(a.index)), a);
        by_size.push((a.size, Reverse(a.index)), a);
    }
    let mut kept: Vec<Allocation> = if instance.allocation_count as usize > n {
        let mut by_area: Vec<Allocation> = by_area.into_vec().into_iter().map(|k| k.1).collect();
        by_area.sort_unstable_by_key(|a| a.index);
        let in_area = |i: u32| by_area.binary_search_by_key(&i, |a| a.index).is_ok();
        let mut rest: Vec<((u64, Reverse<u32>), Allocation)> = by_size
            .into_vec()
            .into_iter()
            .filter(|k| !in_area(k.1.index))
            .collect();
        rest.sort_unstable_by_key(|k| Reverse(k.0));
        rest.truncate(n - half);
        by_area
            .into_iter()
            .chain(rest.into_iter().map(|k| k.1))
            .collect()
    } else {
        by_size.into_vec().into_iter().map(|k| k.1).collect()
    };
    kept.sort_unstable_by_key(|a| a.index);
    kept.into_iter()
        .map(|a| AllocationRecord {
            index: a.index,
            size: a.size,
            birth_ns: a.birth_ns,
            death_ns: a.death_ns,
            stack: a.stack,
            stream: a.stream,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::trace::tests::{ev, load};
    use vramtrace_format::Api;

    #[test]
    fn the_largest_and_longest_allocations_are_kept_in_allocation_order() {
        let loaded = load(&[
            ev(Api::CuMemAlloc_v2, 0, 1, 5),
            ev(Api::CuMemAlloc_v2, 1, 2, 50),
            ev(Api::CuMemAlloc_v2, 2, 3, 7),
            ev(Api::CuMemAlloc_v2, 3, 4, 60),
        ]);
        // 60 B alive 0..3 covers the most area, 50 B is the largest of the rest.
        let t = top(&loaded.pass().instances[0], 2, 3);
        assert_eq!(t.iter().map(|a| a.index).collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(t[0].death_ns, u64::MAX);
    }

    #[test]
    fn the_kept_allocations_are_those_a_sort_of_them_all_would_keep() {
        // Sizes and lifetimes that repeat, so that ties are broken by the index; frees out of
        // allocation order, so that the walk meets the allocations out of it too.
        let mut events = Vec::new();
        for i in 0..200u64 {
            events.push(ev(Api::CuMemAlloc_v2, i, 0x1000 + i, 1 + i * 7 % 13));
        }
        for i in (0..200u64).filter(|i| i % 3 != 0).rev() {
            events.push(ev(Api::CuMemFree_v2, 200 + i * 11 % 17, 0x1000 + i, 0));
        }
        events.sort_by_key(|e| e.time_ns);
        let loaded = load(&events);
        let inst = loaded.pass().instances[0];
        let last_ns = 250;
        let mut all: Vec<Allocation> = inst.allocations().collect();
        all.sort_by_key(|a| a.index);
        let area = |a: &Allocation| {
            u128::from(a.size) * u128::from(a.death_ns.min(last_ns).saturating_sub(a.birth_ns) + 1)
        };
        for n in [1, 2, 9, 40, 199, 200, 300] {
            let mut by_area = all.clone();
            by_area.sort_by_key(|a| (Reverse(area(a)), a.index));
            let mut expected: Vec<u32> = by_area.iter().take(n / 2).map(|a| a.index).collect();
            let mut rest: Vec<&Allocation> = by_area.iter().skip(n / 2).collect();
            rest.sort_by_key(|a| (Reverse(a.size), a.index));
            expected.extend(rest.iter().take(n - n / 2).map(|a| a.index));
            expected.sort_unstable();
            let got: Vec<u32> = top(&inst, n, last_ns).iter().map(|a| a.index).collect();
            assert_eq!(got, expected, "n = {n}");
        }
    }
}
