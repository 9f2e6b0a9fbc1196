//! What each allocating stack did over the trace: allocations, bytes, bytes live at the peak,
//! refusals.

use crate::report::data::StackUse;
use crate::report::trace::Instance;
use std::collections::HashMap;

/// Per allocating stack: allocations, bytes, bytes live right after step `peak_step`, refusals;
/// most bytes at the peak first, then most bytes.
pub fn stacks(instance: &Instance, peak_step: Option<usize>) -> Vec<StackUse> {
    let p = peak_step.map_or(u32::MAX, |p| p as u32);
    let mut by: HashMap<u32, StackUse> = HashMap::new();
    for a in instance.allocations() {
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
    for r in instance.refused() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::trace::tests::{ev, load};
    use vramtrace_format::Api;

    #[test]
    fn stacks_count_what_is_live_at_the_peak() {
        let mut a = ev(Api::CuMemAlloc_v2, 0, 1, 100);
        a.stack = 3;
        let mut b = ev(Api::CuMemAlloc_v2, 1, 2, 10);
        b.stack = 4;
        let mut free_b = ev(Api::CuMemFree_v2, 2, 2, 0);
        free_b.stack = 4;
        let loaded = load(&[a, b, free_b]);
        let s = stacks(&loaded.pass().instances[0], Some(1));
        assert_eq!((s[0].stack, s[0].bytes_at_peak), (3, 100));
        assert_eq!(
            (s[1].stack, s[1].bytes_at_peak, s[1].allocations),
            (4, 10, 1)
        );
    }
}
