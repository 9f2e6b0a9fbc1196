//! Live requested bytes over time: the black line of the memory chart, and the peak every other
//! section is taken at.

use crate::report::data::{Buckets, Peak, Series, SeriesBuilder};
use crate::report::trace::Instance;
use crate::sums::Live;

/// Live requested bytes of `instance` over `buckets`, its peak, and the index of the step after
/// which it first peaked (`None` when nothing was allocated).
pub fn requested(instance: &Instance, buckets: Buckets) -> (Series, Peak, Option<usize>) {
    let mut series = SeriesBuilder::new(buckets);
    let (mut live, mut peak, mut at) = (Live::default(), Peak::default(), None);
    for (i, step) in instance.steps().enumerate() {
        if step.is_free {
            live.sub(step.size);
        } else {
            live.add(step.size);
            if live.bytes() > peak.bytes || at.is_none() {
                peak = Peak {
                    time_ns: step.time_ns,
                    bytes: live.bytes(),
                };
                at = Some(i);
            }
        }
        series.step(step.time_ns, live.bytes());
    }
    (series.finish(), peak, at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::trace::tests::{ev, load};
    use vramtrace_format::Api;

    #[test]
    fn requested_bytes_peak_when_the_most_is_live() {
        let loaded = load(&[
            ev(Api::CuMemAlloc_v2, 0, 1, 100),
            ev(Api::CuMemAlloc_v2, 10, 2, 50),
            ev(Api::CuMemFree_v2, 20, 1, 0),
            ev(Api::CuMemAlloc_v2, 30, 3, 70),
            ev(Api::CuMemFree_v2, 40, 3, 0),
        ]);
        let buckets = Buckets::new(0, 50, 5);
        let (series, peak, at) = requested(&loaded.pass().instances[0], buckets);
        assert_eq!(
            peak,
            Peak {
                time_ns: 10,
                bytes: 150
            }
        );
        assert_eq!(at, Some(1));
        assert_eq!(series.max, vec![100, 150, 150, 120, 120]);
        assert_eq!(series.last, vec![100, 150, 50, 120, 50]);
    }
}
