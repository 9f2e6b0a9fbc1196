//! Fragmentation over time per policy: 1 − allocated / reserved, the share of what the
//! policy holds from the driver that no live block uses.

use super::style::{self, LegendEntry, Mark, TimeAxis};
use super::{Svg, svg};
use crate::report::data::{Buckets, Section};
use plotters::prelude::*;

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
    let time = TimeAxis::over(buckets);
    let title = format!("Fragmentation over time: {}", section.label());
    let height = style::height_for_legend(section.policies.len().max(1));
    svg((style::WIDTH, height), |root| {
        let (plot, legend) = root.split_horizontally(style::WIDTH - style::LEGEND_WIDTH);
        let mut chart = time.chart(
            &plot,
            &title,
            0f64..100f64,
            "reserved but not allocated (%)",
        )?;
        let mut entries = Vec::new();
        for p in &section.policies {
            let color = style::policy_color(p.color);
            // Gaps (nothing reserved) split the line rather than drawing a false zero.
            let mut run: Vec<(f64, f64)> = Vec::new();
            for (i, v) in p.fragmentation.iter().enumerate() {
                let x = time.bucket(buckets, i);
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
