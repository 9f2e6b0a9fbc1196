//! The allocation timeline zoomed on the moments around the peak
//! ([`crate::report::sections::timeline::ZOOM_STEPS`] steps either side), when that window is a small
//! part of the trace.

use super::allocation_timeline::render;
use super::{Chart, Scope, Svg, Target};

pub struct TimelineAroundPeak;

impl Chart for TimelineAroundPeak {
    fn name(&self) -> &'static str {
        "timeline-around-peak"
    }
    fn caption(&self) -> &'static str {
        "The allocation timeline, zoomed on the moments around the peak."
    }
    fn scope(&self) -> Scope {
        Scope::Section
    }
    fn shown(&self, at: &Target) -> bool {
        !at.section().timeline_at_peak.times_ns.is_empty()
    }
    fn render(&self, at: &Target) -> Svg {
        let x = at.section();
        render(
            &format!("Allocation timeline around the peak: {}", x.label()),
            &x.timeline_at_peak,
        )
    }
}
