//! The bands of the allocation timeline (`charts::allocation_timeline` draws them): each
//! allocation a band stacked on those allocated before it, so the top edge is the live
//! requested bytes and a band's height is its size.
//!
//! Downsampled to stay light: the stack is sampled at [`SAMPLES`] instants, only allocations
//! live at one of them can be seen at all, and of those the [`MAX_BANDS`] with the largest area
//! (size × samples spanned) are drawn as bands; everything else live is one grey band on top,
//! reaching the highest live total of each sample's slice of time, so no peak is lost.
//! Drawn bands sit at the bottom and keep their order, as in memory_viz, so a band moves only
//! when a drawn band below it ends.

use crate::report::data::{Band, Buckets, SeriesBuilder, Timeline};
use crate::report::largest::Largest;
use crate::report::trace::Instance;
use crate::sums::Live;
use std::cmp::Reverse;

pub const SAMPLES: usize = 500;
pub const MAX_BANDS: usize = 300;
/// Steps either side of the peak in the zoomed timeline.
pub const ZOOM_STEPS: usize = 1500;

/// The timeline of `instance` between `from_ns` and `to_ns` (absolute), with times stored
/// relative to `origin_ns`.
pub fn collect(instance: &Instance, origin_ns: u64, from_ns: u64, to_ns: u64) -> Timeline {
    let span = to_ns.saturating_sub(from_ns).max(1);
    let samples: Vec<u64> = (0..SAMPLES)
        .map(|j| from_ns + ((2 * j as u128 + 1) * span as u128 / (2 * SAMPLES) as u128) as u64)
        .collect();
    // The highest live total within each sample's slice of time: the top edge, so that peaks
    // shorter than a slice still show, as in the memory chart.
    let mut top = SeriesBuilder::new(Buckets::new(from_ns, to_ns, SAMPLES));
    let (mut live, mut started) = (Live::default(), false);
    for step in instance.steps() {
        let time_ns = step.time_ns;
        if time_ns >= to_ns {
            break;
        }
        if time_ns >= from_ns && !started {
            top.step(from_ns, live.bytes());
            started = true;
        }
        if step.is_free {
            live.sub(step.size);
        } else {
            live.add(step.size);
        }
        if started {
            top.step(time_ns, live.bytes());
        }
    }
    if !started {
        top.step(from_ns, live.bytes());
    }
    let total = top.finish().max;
    // Allocations live at one sample at least, scored by the area they would cover (ties:
    // the earlier).
    let mut allocations = 0u64;
    let mut candidates = Largest::new(MAX_BANDS);
    for a in instance.allocations() {
        if a.birth_ns >= to_ns || a.death_ns <= from_ns {
            continue;
        }
        allocations += 1;
        let j0 = samples.partition_point(|&t| t < a.birth_ns);
        let j1 = samples.partition_point(|&t| t < a.death_ns);
        if j1 > j0 && a.size > 0 {
            let area = u128::from(a.size) * (j1 - j0) as u128;
            candidates.push((area, Reverse(a.index)), (a, j0, j1));
        }
    }
    let mut candidates = candidates.into_vec();
    candidates.sort_by_key(|c| c.1.0.index);
    let mut bands: Vec<Band> = candidates
        .iter()
        .map(|&(_, (a, j0, j1))| Band {
            size: a.size,
            birth_ns: a.birth_ns.max(from_ns) - origin_ns,
            death_ns: a.death_ns.min(to_ns) - origin_ns,
            first_sample: j0,
            offsets: vec![0; j1 - j0],
        })
        .collect();
    let mut stacked = vec![0u64; SAMPLES];
    for b in &mut bands {
        for (k, off) in b.offsets.iter_mut().enumerate() {
            let j = b.first_sample + k;
            *off = stacked[j];
            stacked[j] = stacked[j].saturating_add(b.size);
        }
    }
    Timeline {
        times_ns: samples.iter().map(|t| t - origin_ns).collect(),
        rest: total
            .iter()
            .zip(&stacked)
            .map(|(t, s)| t.saturating_sub(*s))
            .collect(),
        top: total.iter().zip(&stacked).map(|(t, s)| *t.max(s)).collect(),
        bands,
        allocations,
    }
}

/// The window of `ZOOM_STEPS` steps either side of step `peak_step`, in absolute ns.
pub fn zoom_window(instance: &Instance, peak_step: usize) -> (u64, u64) {
    let a = peak_step.saturating_sub(ZOOM_STEPS);
    let b = (peak_step + ZOOM_STEPS).min(instance.step_count - 1);
    let time = |i: usize| instance.steps().nth(i).expect("the peak is a step").time_ns;
    let (a, b) = (time(a), time(b));
    (a, b.max(a + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::trace::tests::{ev, load};
    use vramtrace_format::Api;

    #[test]
    fn bands_stack_in_birth_order_and_move_down_when_one_below_ends() {
        let loaded = load(&[
            ev(Api::CuMemAlloc_v2, 0, 1, 100),
            ev(Api::CuMemAlloc_v2, 1, 2, 50),
            ev(Api::CuMemFree_v2, 500, 1, 0),
            ev(Api::CuMemFree_v2, 1000, 2, 0),
        ]);
        let t = collect(&loaded.pass().instances[0], 0, 0, 1000);
        assert_eq!(t.bands.len(), 2);
        assert_eq!(t.allocations, 2);
        let second = &t.bands[1];
        assert_eq!(second.size, 50);
        assert_eq!(second.offsets[0], 100);
        assert_eq!(*second.offsets.last().unwrap(), 0);
        // Only the slice in which the first one ends had more live than its sample shows.
        assert_eq!(t.rest.iter().filter(|&&r| r > 0).count(), 1);
        assert_eq!((t.top[0], *t.top.last().unwrap()), (150, 50));
    }

    #[test]
    fn the_bands_drawn_are_those_of_the_most_area_the_earlier_on_ties() {
        // 500 allocations made before the first sample and live to the end, of two sizes: the
        // 250 larger ones are drawn, and the 50 earliest of the smaller.
        let mut events: Vec<_> = (0..500u64)
            .map(|i| ev(Api::CuMemAlloc_v2, i, 0x1000 + i, 10 + i % 2))
            .collect();
        events.extend((0..500u64).map(|i| ev(Api::CuMemFree_v2, 1_000_000, 0x1000 + i, 0)));
        let loaded = load(&events);
        let t = collect(&loaded.pass().instances[0], 0, 0, 1_000_000);
        assert_eq!(t.allocations, 500);
        let births: Vec<u64> = t.bands.iter().map(|b| b.birth_ns).collect();
        let expected: Vec<u64> = (0..500u64).filter(|i| i % 2 == 1 || *i < 100).collect();
        assert_eq!(births.len(), MAX_BANDS);
        assert_eq!(births, expected);
    }
}
