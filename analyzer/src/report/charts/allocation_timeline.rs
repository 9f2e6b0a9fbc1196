//! The allocation timeline in the style of PyTorch's memory_viz "active memory
//! timeline": each allocation a band stacked on those allocated before it, so the top edge is
//! the live requested bytes and a band's height is its size. The bands are collected by
//! `report::sections::timeline`; this only draws them.

use super::style::{self, ByteUnit, LegendEntry, Mark, TimeAxis};
use super::{Svg, svg};
use crate::report::data::{Band, Timeline};
use crate::units::{bytes, count};
use plotters::prelude::*;

/// The outline of a band: along its bottom at each sample, back along its top.
fn outline(b: &Band, times: &[u64], time: TimeAxis, bu: ByteUnit) -> Vec<(f64, f64)> {
    let mut bottom: Vec<(f64, f64)> = Vec::with_capacity(b.offsets.len() + 2);
    let first = b.offsets[0];
    let last = *b.offsets.last().expect("a band spans a sample");
    bottom.push((time.x(b.birth_ns), bu.of(first)));
    for (k, &off) in b.offsets.iter().enumerate() {
        bottom.push((time.x(times[b.first_sample + k]), bu.of(off)));
    }
    bottom.push((time.x(b.death_ns), bu.of(last)));
    let bottom = simplify(bottom);
    let size = bu.of(b.size);
    let mut points = bottom.clone();
    points.extend(bottom.iter().rev().map(|&(x, y)| (x, y + size)));
    points
}

/// Drops points in the middle of horizontal runs: a band that never moves is four points.
fn simplify(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(points.len());
    for (i, &p) in points.iter().enumerate() {
        let same_before = i > 0 && points[i - 1].1 == p.1;
        let same_after = i + 1 < points.len() && points[i + 1].1 == p.1;
        if !(same_before && same_after) {
            out.push(p);
        }
    }
    out
}

pub struct AllocationTimeline;

impl super::Chart for AllocationTimeline {
    fn name(&self) -> &'static str {
        "allocation-timeline"
    }
    fn caption(&self) -> &'static str {
        "Every allocation as a band, stacked in allocation order; when one is freed the bands \
         above it move down. Allocations too small or too short to see at this scale are \
         summed in the grey band, whose top follows the highest live total, so peaks show."
    }
    fn scope(&self) -> super::Scope {
        super::Scope::Section
    }
    fn render(&self, at: &super::Target) -> Svg {
        let x = at.section();
        render(&format!("Allocation timeline: {}", x.label()), &x.timeline)
    }
}

pub fn render(title: &str, t: &Timeline) -> Svg {
    let max = t.top.iter().copied().max().unwrap_or(1).max(1);
    let (time, bu) = (TimeAxis::around(&t.times_ns), ByteUnit::for_max(max));
    svg((style::WIDTH, style::HEIGHT), |root| {
        let (plot, legend) = root.split_horizontally(style::WIDTH - style::LEGEND_WIDTH);
        let mut chart = time.memory_chart(&plot, title, bu, bu.of(max) * 1.05, "live memory")?;
        for (i, b) in t.bands.iter().enumerate() {
            chart.draw_series(std::iter::once(Polygon::new(
                outline(b, &t.times_ns, time, bu),
                style::band_color(i).filled(),
            )))?;
        }
        // Everything else live, on top of the drawn bands.
        if t.rest.iter().any(|&r| r > 0) {
            let mut points: Vec<(f64, f64)> = Vec::new();
            for (j, &ns) in t.times_ns.iter().enumerate() {
                points.push((time.x(ns), bu.of(t.top[j] - t.rest[j])));
            }
            for (j, &ns) in t.times_ns.iter().enumerate().rev() {
                points.push((time.x(ns), bu.of(t.top[j])));
            }
            chart.draw_series(std::iter::once(Polygon::new(points, style::REST.filled())))?;
        }
        let entries = vec![
            LegendEntry::new(
                format!("{} largest allocations", count(t.bands.len() as u64)),
                style::band_color(0),
                Mark::Box,
            ),
            LegendEntry::new("all other live memory", style::REST, Mark::Box),
            LegendEntry::new(
                format!("{} allocations here", count(t.allocations)),
                style::REQUESTED,
                Mark::Dot,
            ),
            LegendEntry::new(
                format!("highest shown {}", bytes(max)),
                style::REQUESTED,
                Mark::Dot,
            ),
        ];
        style::draw_legend(&legend, style::LEGEND_TOP, &entries)?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_runs_are_reduced_to_their_ends() {
        let p = vec![(0.0, 1.0), (1.0, 1.0), (2.0, 1.0), (3.0, 0.0)];
        assert_eq!(simplify(p), vec![(0.0, 1.0), (2.0, 1.0), (3.0, 0.0)]);
    }
}
