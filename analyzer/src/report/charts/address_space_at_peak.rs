//! A policy's address space when its reserved bytes peaked: one row per segment held
//! from the driver, its blocks coloured allocated or free, so fragmentation is something to see.
//!
//! Rows share one byte axis (a short segment is a short row). Blocks narrower than a pixel are
//! binned per pixel: a pixel mostly allocated is drawn allocated, mostly free drawn free, and a
//! mix of both in between; runs of equal pixels become one rectangle, so the SVG stays small
//! whatever the number of blocks.

use crate::sums::SaturatingSum;
use super::style::{self, ByteUnit, LegendEntry, Mark};
use super::{Svg, svg};
use crate::report::data::{AddressLayout, PolicyResult, Section};
use crate::units::{bytes, count};
use plotters::prelude::*;

/// Segments drawn; the largest are kept when a policy holds more.
pub const MAX_ROWS: usize = 40;
const ROW: u32 = 18;
/// Horizontal resolution of the binning, about the plot's width in pixels.
const PIXELS: usize = 720;

/// What one pixel-wide piece of a row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    Allocated,
    Free,
    Mixed,
}

/// A row as runs of `(start, end, fill)` in bytes from the segment's start, `pixel` bytes per
/// pixel.
pub fn runs(size: u64, allocated: &[(u64, u64)], pixel: f64) -> Vec<(u64, u64, Fill)> {
    let pixels = ((size as f64 / pixel).ceil() as usize).max(1);
    let mut covered = vec![0f64; pixels];
    for &(offset, len) in allocated {
        let (a, end) = (offset as f64, (offset + len).min(size) as f64);
        if end <= a {
            continue;
        }
        let first = ((a / pixel) as usize).min(pixels - 1);
        let last = ((end / pixel) as usize).min(pixels - 1);
        for (p, c) in covered.iter_mut().enumerate().take(last + 1).skip(first) {
            let lo = a.max(p as f64 * pixel);
            let hi = end.min((p + 1) as f64 * pixel);
            if hi > lo {
                *c += hi - lo;
            }
        }
    }
    let mut out: Vec<(u64, u64, Fill)> = Vec::new();
    for (p, c) in covered.iter().enumerate() {
        let start = (p as f64 * pixel) as u64;
        let end = (((p + 1) as f64 * pixel) as u64).min(size);
        let width = (end - start).max(1) as f64;
        let fill = match c / width {
            f if f >= 0.95 => Fill::Allocated,
            f if f <= 0.05 => Fill::Free,
            _ => Fill::Mixed,
        };
        match out.last_mut() {
            Some(last) if last.2 == fill => last.1 = end,
            _ => out.push((start, end, fill)),
        }
    }
    out
}

fn mixed_color() -> RGBColor {
    RGBColor(150, 140, 130)
}

pub struct AddressSpaceAtPeak;

impl super::Chart for AddressSpaceAtPeak {
    fn name(&self) -> &'static str {
        "address-space-at-peak"
    }
    fn caption(&self) -> &'static str {
        "A policy's address space when its reserved memory peaked: each row one segment it held \
         from the driver, blue where blocks were in use, orange where memory was free but held \
         (fragmentation)."
    }
    fn scope(&self) -> super::Scope {
        super::Scope::Policy
    }
    /// Offline bounds have no address space to show.
    fn shown(&self, at: &super::Target) -> bool {
        !at.policy().address_map.segments.is_empty()
    }
    fn render(&self, at: &super::Target) -> Svg {
        render(at.section(), at.policy())
    }
}

pub fn render(section: &Section, policy: &PolicyResult) -> Svg {
    let layout: &AddressLayout = &policy.address_map;
    let mut rows: Vec<usize> = (0..layout.segments.len()).collect();
    rows.sort_by(|&a, &b| {
        layout.segments[b]
            .size
            .cmp(&layout.segments[a].size)
            .then(a.cmp(&b))
    });
    rows.truncate(MAX_ROWS);
    rows.sort_by_key(|&i| layout.segments[i].address);
    let n = rows.len().max(1);
    // Tall enough for the legend however few the rows.
    let height = (130 + ROW * n as u32).max(280);
    let max = rows
        .iter()
        .map(|&i| layout.segments[i].size)
        .max()
        .unwrap_or(1)
        .max(1);
    let bu = ByteUnit::for_max(max);
    let reserved = layout.segments.iter().map(|s| s.size).saturating_sum();
    let allocated = layout
        .segments
        .iter()
        .flat_map(|s| s.allocated.iter().map(|b| b.1))
        .saturating_sum();
    let title = format!(
        "Address space of {} at its peak reserved: {}",
        super::escape::clean(&policy.name),
        section.label()
    );
    svg((style::WIDTH, height), |root| {
        let (plot, legend) = root.split_horizontally(style::WIDTH - style::LEGEND_WIDTH);
        let mut chart = ChartBuilder::on(&plot)
            .caption(title, (style::FONT, 18.0))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(40)
            .build_cartesian_2d(0f64..bu.of(max), 0f64..n as f64)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc(format!("offset in the segment ({})", bu.name))
            .y_desc("segments by address")
            .x_label_formatter(&|v| style::tick(*v))
            .axis_desc_style((style::FONT, style::LABEL_SIZE))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()?;
        let pixel = max as f64 / PIXELS as f64;
        for (r, &i) in rows.iter().enumerate() {
            let s = &layout.segments[i];
            let y = (n - 1 - r) as f64;
            for (a, b, fill) in runs(s.size, &s.allocated, pixel) {
                let color = match fill {
                    Fill::Allocated => style::ALLOCATED,
                    Fill::Free => style::FREE,
                    Fill::Mixed => mixed_color(),
                };
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(bu.of(a), y + 0.12), (bu.of(b), y + 0.88)],
                    color.filled(),
                )))?;
            }
        }
        if layout.segments.is_empty() {
            chart.draw_series(std::iter::once(Text::new(
                "no segment held at the peak",
                (bu.of(max) * 0.05, 0.5),
                (style::FONT, 14.0).into_font().color(&BLACK),
            )))?;
        }
        let mut entries = vec![
            LegendEntry::new("allocated block", style::ALLOCATED, Mark::Box),
            LegendEntry::new("free (cached) block", style::FREE, Mark::Box),
            LegendEntry::new("pixel with both", mixed_color(), Mark::Box),
            LegendEntry::new(
                format!("{} segments", count(layout.segments.len() as u64)),
                style::policy_color(policy.color),
                Mark::Dot,
            ),
            LegendEntry::new(
                format!("reserved {}", bytes(reserved)),
                style::policy_color(policy.color),
                Mark::Dot,
            ),
            LegendEntry::new(
                format!("allocated {}", bytes(allocated)),
                style::ALLOCATED,
                Mark::Dot,
            ),
        ];
        if layout.segments.len() > rows.len() {
            entries.push(LegendEntry::new(
                format!("{} largest shown", rows.len()),
                style::REST,
                Mark::Dot,
            ));
        }
        style::draw_legend(&legend, style::LEGEND_TOP, &entries)?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_merge_into_runs_and_slivers_become_mixed_pixels() {
        // A whole segment in blocks ending on pixel edges stays one run.
        let third = 1000.0 / 3.0;
        assert_eq!(
            runs(1000, &[(0, 1000)], third),
            vec![(0, 1000, Fill::Allocated)]
        );
        // 10 pixels of 100 bytes: allocated 0..300, a 10-byte sliver at 500, free elsewhere.
        let got = runs(1000, &[(0, 300), (500, 10)], 100.0);
        assert_eq!(
            got,
            vec![
                (0, 300, Fill::Allocated),
                (300, 500, Fill::Free),
                (500, 600, Fill::Mixed),
                (600, 1000, Fill::Free),
            ]
        );
    }
}
