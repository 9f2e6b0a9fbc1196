//! Memory over time: live requested bytes and each policy's reserved bytes, their
//! peaks marked, the lower bound, and the capacity when one was given.

use super::style::{self, ByteUnit, LegendEntry, Mark, MemoryAxes, TimeUnit};
use super::{Svg, svg};
use crate::report::data::{Buckets, Peak, Section, Series, SeriesBuilder};
use crate::report::trace::Instance;
use crate::sums::Live;
use crate::units::bytes;
use plotters::prelude::*;

/// Live requested bytes of `instance` over `buckets`, its peak, and the index of the step after
/// which it first peaked (`None` when nothing was allocated).
pub fn requested(instance: &Instance, buckets: Buckets) -> (Series, Peak, Option<usize>) {
    let mut series = SeriesBuilder::new(buckets);
    let (mut live, mut peak, mut at) = (Live::default(), Peak::default(), None);
    for (i, step) in instance.steps.iter().enumerate() {
        let a = &instance.allocations[step.allocation()];
        if step.is_free() {
            live.sub(a.size);
        } else {
            live.add(a.size);
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

/// Points of a downsampled series, one per bucket at its middle, held at most at `top`.
pub(super) fn points(
    series: &[u64],
    buckets: Buckets,
    tu: TimeUnit,
    bu: ByteUnit,
    top: u64,
) -> Vec<(f64, f64)> {
    series
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let mid = buckets.mid_ns(i);
            (tu.of(mid), bu.of(v.min(top)))
        })
        .collect()
}

pub struct MemoryOverTime;

impl super::Chart for MemoryOverTime {
    fn name(&self) -> &'static str {
        "memory-over-time"
    }
    fn caption(&self) -> &'static str {
        "Black: bytes the program had live. Coloured: bytes each allocator policy would hold \
         from the driver. Dots mark each peak; the dashed grey line is the lower bound. Each \
         line shows the highest value within each of 600 time slices, so no peak is hidden."
    }
    fn scope(&self) -> super::Scope {
        super::Scope::Section
    }
    fn render(&self, at: &super::Target) -> Svg {
        render(at.section(), at.buckets())
    }
}

pub fn render(section: &Section, buckets: Buckets) -> Svg {
    let capacity = section.capacity;
    let data_max = style::byte_axis_top(
        section.peak.bytes,
        section.policies.iter().map(|p| p.peak_reserved.bytes),
    );
    // A capacity far above the data would flatten every curve: then it is only named.
    let capacity_drawn = capacity.filter(|&c| c as f64 <= data_max as f64 * 1.5);
    let y_max = capacity_drawn.unwrap_or(0).max(data_max);
    // Lines above the axis run along its top; their legend line says so.
    let y_top = (y_max as f64 * 1.08) as u64;
    let off = |peak: u64| if peak > y_top { " (off chart)" } else { "" };
    let axes = MemoryAxes::new(buckets.span_ns, y_max);
    let (tu, bu) = (axes.time, axes.bytes);
    let title = format!("Memory over time: {}", section.label());
    let policies = section.policies.len();
    let ooms = section.policies.iter().filter(|p| p.oom.is_some()).count();
    let legend_lines =
        usize::from(policies > 0) + policies + 3 + usize::from(capacity.is_some()) + ooms;
    svg(
        (style::WIDTH, style::height_for_legend(legend_lines)),
        |root| {
            let (plot, legend) = root.split_horizontally(style::WIDTH - style::LEGEND_WIDTH);
            let x_max = tu.of(buckets.span_ns);
            let mut chart = axes.chart(&plot, &title, 0, buckets.span_ns, bu.of(y_top), "memory")?;
            let mut entries = Vec::new();
            if !section.policies.is_empty() {
                entries.push(LegendEntry::new("reserved by policy:", WHITE, Mark::Box));
            }
            for p in &section.policies {
                let color = style::policy_color(p.color);
                chart.draw_series(LineSeries::new(
                    points(&p.reserved.max, buckets, tu, bu, y_top),
                    color.stroke_width(2),
                ))?;
                entries.push(LegendEntry::new(
                    format!(
                        "{}: peak {}{}",
                        p.name,
                        bytes(p.peak_reserved.bytes),
                        off(p.peak_reserved.bytes)
                    ),
                    color,
                    Mark::Line,
                ));
            }
            chart.draw_series(LineSeries::new(
                points(&section.requested.max, buckets, tu, bu, y_top),
                style::REQUESTED.stroke_width(2),
            ))?;
            entries.push(LegendEntry::new(
                format!("requested, peak {}", bytes(section.peak.bytes)),
                style::REQUESTED,
                Mark::Line,
            ));
            let lb = bu.of(section.lower_bound());
            for piece in style::dashed_hline(0.0, x_max, lb, 40) {
                chart.draw_series(std::iter::once(PathElement::new(
                    piece,
                    style::LOWER_BOUND.stroke_width(1),
                )))?;
            }
            entries.push(LegendEntry::new(
                "lower bound (peak requested)",
                style::LOWER_BOUND,
                Mark::Dashed,
            ));
            if let Some(c) = capacity_drawn {
                for piece in style::dashed_hline(0.0, x_max, bu.of(c), 40) {
                    chart.draw_series(std::iter::once(PathElement::new(
                        piece,
                        style::DANGER.stroke_width(2),
                    )))?;
                }
            }
            if let Some(c) = capacity {
                let off = if capacity_drawn.is_some() {
                    ""
                } else {
                    " (off chart)"
                };
                entries.push(LegendEntry::new(
                    format!("capacity {}{off}", bytes(c)),
                    style::DANGER,
                    Mark::Dashed,
                ));
            }
            // Peaks: exact values, not bucket maxima.
            let mut marks = vec![(section.peak, style::REQUESTED)];
            marks.extend(
                section
                    .policies
                    .iter()
                    .map(|p| (p.peak_reserved, style::policy_color(p.color))),
            );
            for (peak, color) in marks.into_iter().filter(|m| m.0.bytes <= y_top) {
                let at = (
                    tu.of(peak.time_ns.saturating_sub(buckets.start_ns)),
                    bu.of(peak.bytes),
                );
                chart.draw_series(std::iter::once(Circle::new(at, 5, color.filled())))?;
            }
            entries.push(LegendEntry::new("peak", style::REQUESTED, Mark::Dot));
            for p in &section.policies {
                if let Some(oom) = &p.oom {
                    let x = tu.of(oom.time_ns.saturating_sub(buckets.start_ns));
                    chart.draw_series(std::iter::once(Cross::new(
                        (x, bu.of(oom.reserved.min(y_top))),
                        8,
                        style::DANGER.stroke_width(3),
                    )))?;
                    entries.push(LegendEntry::new(
                        format!("{}: out of memory", p.name),
                        style::DANGER,
                        Mark::Dot,
                    ));
                }
            }
            style::draw_legend(&legend, style::LEGEND_TOP, &entries)?;
            Ok(())
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::trace::TracePass;
    use crate::report::trace::tests::ev;
    use vramtrace_format::Api;

    #[test]
    fn requested_bytes_peak_when_the_most_is_live() {
        let pass = TracePass::from_events(vec![
            ev(Api::CuMemAlloc_v2, 0, 1, 100),
            ev(Api::CuMemAlloc_v2, 10, 2, 50),
            ev(Api::CuMemFree_v2, 20, 1, 0),
            ev(Api::CuMemAlloc_v2, 30, 3, 70),
            ev(Api::CuMemFree_v2, 40, 3, 0),
        ]);
        let buckets = Buckets::new(0, 50, 5);
        let (series, peak, at) = requested(&pass.instances[0], buckets);
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
