//! Where in time memory moves: the window the page's finer level of detail covers, and the
//! replays sample finer over.

use crate::report::data::Buckets;
use crate::report::trace::Instance;

/// Share of the allocations and frees the focus window holds.
pub const FOCUS_SHARE: f64 = 0.95;
/// Buckets of the finer level of detail over the focus window.
pub const FOCUS_BUCKETS: usize = 4_000;

/// The shortest stretch of time holding [`FOCUS_SHARE`] of the steps, widened to hold
/// `peak_ns` and by 2% either side, clamped to `[first_ns, last_ns]`: where memory moves, not
/// the idle start of a program loading its data.
pub fn focus(instance: &Instance, peak_ns: u64, first_ns: u64, last_ns: u64) -> Buckets {
    let n = instance.step_count;
    if n < 2 {
        return Buckets::new(first_ns, last_ns, FOCUS_BUCKETS);
    }
    let times = instance.steps().map(|s| s.time_ns);
    let k = ((n as f64 * FOCUS_SHARE).ceil() as usize).clamp(1, n);
    // Steps are in call order, so their times never decrease: a sliding window of k steps,
    // its two ends two cursors over the same steps. The first window is as short as the
    // whole trace's steps only when it spans them all, so it stands for them at the start.
    let mut windows = times.clone().zip(times.skip(k - 1));
    let (mut a, mut b) = windows.next().expect("k is at most the steps");
    for (x, y) in windows {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::trace::tests::{ev, load};
    use vramtrace_format::Api;

    #[test]
    fn the_focus_skips_an_idle_start_but_keeps_the_peak() {
        // One allocation at 0, then a burst of 100 steps between 1,000,000 and 1,000,990.
        let mut events = vec![ev(Api::CuMemAlloc_v2, 0, 1, 1 << 20)];
        for i in 0..50u64 {
            events.push(ev(Api::CuMemAlloc_v2, 1_000_000 + 20 * i, 0x100 + i, 10));
            events.push(ev(Api::CuMemFree_v2, 1_000_010 + 20 * i, 0x100 + i, 0));
        }
        let loaded = load(&events);
        let pass = loaded.pass();
        let f = focus(&pass.instances[0], 1_000_000, 0, 1_000_990);
        assert!(f.start_ns > 900_000, "{f:?}");
        assert!(f.start_ns + f.span_ns >= 1_000_900, "{f:?}");
        let with_peak = focus(&pass.instances[0], 0, 0, 1_000_990);
        assert_eq!(with_peak.start_ns, 0);
    }
}
