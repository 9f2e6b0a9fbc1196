//! What the interactive page needs beyond the charts, aggregated from one allocator instance so
//! its size does not grow with the trace: where in time memory moves, the largest allocations
//! (the rest are summarized by the live total), and what each allocating stack did.

use super::data::{AllocationRecord, Buckets, Refused, StackUse};
use super::trace::Instance;
use std::collections::HashMap;

/// Allocations drawn one by one in the page's timeline (memory_viz draws 15,000 by default).
pub const TOP_ALLOCATIONS: usize = 8_000;
/// Share of the allocations and frees the focus window holds.
pub const FOCUS_SHARE: f64 = 0.95;
/// Buckets of the finer level of detail over the focus window.
pub const FOCUS_BUCKETS: usize = 4_000;
/// Refused requests listed one by one.
pub const MAX_REFUSED: usize = 2_000;

/// The shortest stretch of time holding [`FOCUS_SHARE`] of the steps, widened to hold
/// `peak_ns` and by 2% either side, clamped to `[first_ns, last_ns]`: where memory moves, not
/// the idle start of a program loading its data.
pub fn focus(instance: &Instance, peak_ns: u64, first_ns: u64, last_ns: u64) -> Buckets {
    let times: Vec<u64> = instance.steps.iter().map(|s| s.time_ns).collect();
    let n = times.len();
    if n < 2 {
        return Buckets::new(first_ns, last_ns, FOCUS_BUCKETS);
    }
    let k = ((n as f64 * FOCUS_SHARE).ceil() as usize).clamp(1, n);
    // Steps are in call order, so their times never decrease: a sliding window of k steps.
    let (mut a, mut b) = (times[0], times[n - 1]);
    for i in 0..=n - k {
        let (x, y) = (times[i], times[i + k - 1]);
        if y - x < b - a {
            (a, b) = (x, y);
        }
    }
    let (a, b) = (a.min(peak_ns), b.max(peak_ns));
    let pad = (b - a) / 50 + 1;
    let a = a.saturating_sub(pad).max(first_ns);
    let b = (b + pad).min(last_ns).max(a + 1);
    Buckets::new(a, b, FOCUS_BUCKETS)
}

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

/// Per allocating stack: allocations, bytes, bytes live right after step `peak_step`, refusals;
/// most bytes at the peak first, then most bytes.
pub fn stacks(instance: &Instance, peak_step: Option<usize>) -> Vec<StackUse> {
    let p = peak_step.map_or(u32::MAX, |p| p as u32);
    let mut by: HashMap<u32, StackUse> = HashMap::new();
    for a in &instance.allocations {
        let e = by.entry(a.stack).or_insert(StackUse {
            stack: a.stack,
            ..StackUse::default()
        });
        e.allocations += 1;
        e.bytes = e.bytes.saturating_add(a.size);
        if a.birth_step <= p && a.death_step > p {
            e.bytes_at_peak = e.bytes_at_peak.saturating_add(a.size);
        }
    }
    for r in &instance.refused {
        by.entry(r.stack)
            .or_insert(StackUse {
                stack: r.stack,
                ..StackUse::default()
            })
            .refused += 1;
    }
    let mut v: Vec<StackUse> = by.into_values().collect();
    v.sort_by(|a, b| {
        (b.bytes_at_peak, b.bytes, b.refused)
            .cmp(&(a.bytes_at_peak, a.bytes, a.refused))
            .then(a.stack.cmp(&b.stack))
    });
    v
}

/// The first [`MAX_REFUSED`] refusals, and how many there were.
pub fn refused(instance: &Instance) -> (Vec<Refused>, u64) {
    let v = instance
        .refused
        .iter()
        .take(MAX_REFUSED)
        .map(|r| Refused {
            time_ns: r.time_ns,
            size: r.size,
            stack: r.stack,
        })
        .collect();
    (v, instance.refused.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::trace::TracePass;
    use crate::report::trace::tests::ev;
    use vramtrace_format::Api;

    #[test]
    fn the_focus_skips_an_idle_start_but_keeps_the_peak() {
        // One allocation at 0, then a burst of 100 steps between 1,000,000 and 1,000,990.
        let mut events = vec![ev(Api::CuMemAlloc_v2, 0, 1, 1 << 20)];
        for i in 0..50u64 {
            events.push(ev(Api::CuMemAlloc_v2, 1_000_000 + 20 * i, 0x100 + i, 10));
            events.push(ev(Api::CuMemFree_v2, 1_000_010 + 20 * i, 0x100 + i, 0));
        }
        let pass = TracePass::from_events(events);
        let f = focus(&pass.instances[0], 1_000_000, 0, 1_000_990);
        assert!(f.start_ns > 900_000, "{f:?}");
        assert!(f.start_ns + f.span_ns >= 1_000_900, "{f:?}");
        let with_peak = focus(&pass.instances[0], 0, 0, 1_000_990);
        assert_eq!(with_peak.start_ns, 0);
    }

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

    #[test]
    fn stacks_count_what_is_live_at_the_peak() {
        let mut a = ev(Api::CuMemAlloc_v2, 0, 1, 100);
        a.stack = 3;
        let mut b = ev(Api::CuMemAlloc_v2, 1, 2, 10);
        b.stack = 4;
        let mut free_b = ev(Api::CuMemFree_v2, 2, 2, 0);
        free_b.stack = 4;
        let pass = TracePass::from_events(vec![a, b, free_b]);
        let s = stacks(&pass.instances[0], Some(1));
        assert_eq!((s[0].stack, s[0].bytes_at_peak), (3, 100));
        assert_eq!(
            (s[1].stack, s[1].bytes_at_peak, s[1].allocations),
            (4, 10, 1)
        );
    }
}
