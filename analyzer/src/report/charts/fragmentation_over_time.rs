//! Fragmentation over time per policy: 1 − allocated / reserved, the share of what the
//! policy holds from the driver that no live block uses.

use super::style::{self, LegendEntry, Mark, TimeUnit};
use super::{Svg, svg};
use crate::report::data::{Buckets, PolicyResult, Section};
use plotters::prelude::*;

/// Fragmentation in percent at the end of each bucket; `None` where nothing was reserved.
pub fn percent(p: &PolicyResult) -> Vec<Option<f64>> {
    p.reserved
        .last
        .iter()
        .zip(&p.allocated.last)
        .map(|(&r, &a)| (r > 0).then(|| 100.0 * (1.0 - a.min(r) as f64 / r as f64)))
        .collect()
}

pub struct FragmentationOverTime;

impl super::Chart for FragmentationOverTime {
    fn name(&self) -> &'static str {
        "fragmentation-over-time"
    }
    fn caption(&self) -> &'static str {
        "The share of each policy's reserved memory that holds no live block, over time."
    }
    fn scope(&self) -> super::Scope {
        super::Scope::Section
    }
    fn shown(&self, at: &super::Target) -> bool {
        !at.section().policies.is_empty()
    }
    fn render(&self, at: &super::Target) -> Svg {
        render(at.section(), at.buckets())
    }
}

pub fn render(section: &Section, buckets: Buckets) -> Svg {
    let tu = TimeUnit::for_span(buckets.span_ns);
    let title = format!("Fragmentation over time: {}", section.label());
    let height = style::height_for_legend(section.policies.len().max(1));
    svg((style::WIDTH, height), |root| {
        let (plot, legend) = root.split_horizontally(style::WIDTH - style::LEGEND_WIDTH);
        let x_max = tu.of(buckets.span_ns);
        let mut chart = style::time_chart(
            &plot,
            &title,
            0f64..x_max,
            0f64..100f64,
            tu.name,
            "reserved but not allocated (%)",
        )?;
        let mut entries = Vec::new();
        for p in &section.policies {
            let color = style::policy_color(p.color);
            // Gaps (nothing reserved) split the line rather than drawing a false zero.
            let mut run: Vec<(f64, f64)> = Vec::new();
            let values = percent(p);
            for (i, v) in values.iter().enumerate() {
                let x = tu.of(buckets.mid_ns(i));
                match v {
                    Some(v) => run.push((x, *v)),
                    None if !run.is_empty() => {
                        chart.draw_series(LineSeries::new(
                            std::mem::take(&mut run),
                            color.stroke_width(2),
                        ))?;
                    }
                    None => {}
                }
            }
            if !run.is_empty() {
                chart.draw_series(LineSeries::new(run, color.stroke_width(2)))?;
            }
            entries.push(LegendEntry::new(
                format!(
                    "{}: {:.1}% at peak",
                    p.name,
                    100.0 * p.fragmentation_at_peak
                ),
                color,
                Mark::Line,
            ));
        }
        if entries.is_empty() {
            entries.push(LegendEntry::new(
                "no policy was replayed",
                style::REST,
                Mark::Box,
            ));
        }
        style::draw_legend(&legend, style::LEGEND_TOP, &entries)?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::data::Series;

    #[test]
    fn fragmentation_is_the_unallocated_share_of_reserved() {
        let p = PolicyResult {
            reserved: Series {
                max: vec![0, 100, 200],
                last: vec![0, 100, 200],
            },
            allocated: Series {
                max: vec![0, 100, 50],
                last: vec![0, 75, 50],
            },
            ..PolicyResult::default()
        };
        assert_eq!(percent(&p), vec![None, Some(25.0), Some(75.0)]);
    }
}
