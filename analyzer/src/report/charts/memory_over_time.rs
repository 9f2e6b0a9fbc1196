//! Memory over time: live requested bytes and each policy's reserved bytes, their
//! peaks marked, the lower bound, and the capacity when one was given.

use super::style::{self, ByteUnit, LegendEntry, Mark, TimeAxis};
use super::{Svg, svg};
use crate::report::data::{Buckets, Section};
use crate::units::bytes;
use plotters::prelude::*;

/// Points of a downsampled series, one per bucket at its middle, held at most at `top`.
fn points(
    series: &[u64],
    buckets: Buckets,
    time: TimeAxis,
    bu: ByteUnit,
    top: u64,
) -> Vec<(f64, f64)> {
    series
        .iter()
        .enumerate()
        .map(|(i, &v)| (time.bucket(buckets, i), bu.of(v.min(top))))
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
    let (time, bu) = (TimeAxis::over(buckets), ByteUnit::for_max(y_max));
    let title = format!("Memory over time: {}", section.label());
    let policies = section.policies.len();
    let ooms = section.policies.iter().filter(|p| p.oom.is_some()).count();
    let legend_lines =
        usize::from(policies > 0) + policies + 3 + usize::from(capacity.is_some()) + ooms;
    svg(
        (style::WIDTH, style::height_for_legend(legend_lines)),
        |root| {
            let (plot, legend) = root.split_horizontally(style::WIDTH - style::LEGEND_WIDTH);
            let x_max = time.end();
            let mut chart = time.memory_chart(&plot, &title, bu, bu.of(y_top), "memory")?;
            let mut entries = Vec::new();
            if !section.policies.is_empty() {
                entries.push(LegendEntry::new("reserved by policy:", WHITE, Mark::Box));
            }
            for p in &section.policies {
                let color = style::policy_color(p.color);
                chart.draw_series(LineSeries::new(
                    points(&p.reserved.max, buckets, time, bu, y_top),
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
                points(&section.requested.max, buckets, time, bu, y_top),
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
                    time.x(peak.time_ns.saturating_sub(buckets.start_ns)),
                    bu.of(peak.bytes),
                );
                chart.draw_series(std::iter::once(Circle::new(at, 5, color.filled())))?;
            }
            entries.push(LegendEntry::new("peak", style::REQUESTED, Mark::Dot));
            for p in &section.policies {
                if let Some(oom) = &p.oom {
                    let x = time.x(oom.time_ns.saturating_sub(buckets.start_ns));
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
