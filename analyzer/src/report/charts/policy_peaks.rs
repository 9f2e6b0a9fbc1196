//! Policy comparison: each policy's peak reserved bytes against the lower bound, with
//! its driver calls and their estimated time.

use super::style::{self, ByteUnit};
use super::{Svg, svg};
use crate::report::data::Section;
use crate::units::{bytes, count};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Height of one policy's row.
const ROW: u32 = 46;
const NAME_WIDTH: u32 = 190;

/// The text written after a policy's bar.
pub fn bar_label(peak: u64, lower_bound: u64, calls: u64, est_us: f64, oom: bool) -> String {
    let over = if lower_bound > 0 {
        format!(
            " ({:+.1}%)",
            100.0 * (peak as f64 / lower_bound as f64 - 1.0)
        )
    } else {
        String::new()
    };
    let time = crate::units::duration((est_us * 1e3) as u64);
    let oom = if oom { ", OUT OF MEMORY" } else { "" };
    format!(
        "{}{over}, {} driver calls ≈ {time}{oom}",
        bytes(peak),
        count(calls)
    )
}

pub struct PolicyPeaks;

impl super::Chart for PolicyPeaks {
    fn name(&self) -> &'static str {
        "policy-peaks"
    }
    fn caption(&self) -> &'static str {
        "The GPU memory each policy needs (its peak reserved) against the lower bound, with the \
         driver calls it makes and their estimated time."
    }
    fn scope(&self) -> super::Scope {
        super::Scope::Section
    }
    fn shown(&self, at: &super::Target) -> bool {
        !at.section().policies.is_empty()
    }
    fn render(&self, at: &super::Target) -> Svg {
        render(at.section())
    }
}

pub fn render(section: &Section) -> Svg {
    let n = section.policies.len().max(1);
    let height = 110 + ROW * n as u32;
    let max = style::byte_axis_top(
        section.lower_bound(),
        section.policies.iter().map(|p| p.peak_reserved.bytes),
    );
    let bu = ByteUnit::for_max(max);
    let title = format!(
        "Peak reserved per policy against the lower bound: {}",
        section.label()
    );
    svg((style::WIDTH, height), |root| {
        // Room right of the longest bar for its label.
        let x_max = bu.of(max) * 1.75;
        let mut chart = ChartBuilder::on(root)
            .caption(title, (style::FONT, style::TITLE_SIZE))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(NAME_WIDTH)
            // Half a row on top for the lower bound's label.
            .build_cartesian_2d(0f64..x_max, 0f64..n as f64 + 0.5)?;
        style::draw_bar_mesh(
            &mut chart,
            &format!("peak reserved ({})", bu.name),
            10,
            &|v| style::tick(*v),
        )?;
        let name_chars = style::fit_chars(f64::from(NAME_WIDTH) - 16.0, 14.0);
        for (i, p) in section.policies.iter().enumerate() {
            let color = style::policy_color(p.color);
            let y = (n - 1 - i) as f64;
            // An outlier's bar is cut short, with a white gap for the break.
            let cut = p.peak_reserved.bytes > max;
            let end = if cut {
                bu.of(max) * 1.12
            } else {
                bu.of(p.peak_reserved.bytes)
            };
            chart.draw_series(std::iter::once(Rectangle::new(
                [(0.0, y + 0.2), (end, y + 0.8)],
                color.filled(),
            )))?;
            if cut {
                let gap = bu.of(max) * 1.05;
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(gap, y + 0.1), (gap + bu.of(max) * 0.015, y + 0.9)],
                    WHITE.filled(),
                )))?;
            }
            chart.draw_series(std::iter::once(Text::new(
                bar_label(
                    p.peak_reserved.bytes,
                    section.lower_bound(),
                    p.device_allocs + p.device_frees,
                    p.est_alloc_time_us,
                    p.oom.is_some(),
                ),
                (end + bu.of(max) * 0.01, y + 0.5),
                (style::FONT, 13.0)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Left, VPos::Center)),
            )))?;
            let (px, py) = chart.backend_coord(&(0.0, y + 0.5));
            root.draw(&Text::new(
                style::truncate(&super::escape::clean(&p.name), name_chars),
                (px - 8, py),
                (style::FONT, 14.0)
                    .into_font()
                    .color(&color)
                    .pos(Pos::new(HPos::Right, VPos::Center)),
            ))?;
        }
        if section.policies.is_empty() {
            chart.draw_series(std::iter::once(Text::new(
                "no policy was replayed",
                (bu.of(max) * 0.05, 0.5),
                (style::FONT, 14.0).into_font().color(&BLACK),
            )))?;
        }
        let lb = bu.of(section.lower_bound());
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(lb, 0.0), (lb, n as f64 + 0.5)],
            style::LOWER_BOUND.stroke_width(2),
        )))?;
        chart.draw_series(std::iter::once(Text::new(
            format!("lower bound {}", bytes(section.lower_bound())),
            (lb + bu.of(max) * 0.01, n as f64 + 0.25),
            (style::FONT, 13.0)
                .into_font()
                .color(&style::LOWER_BOUND)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        )))?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_labels_say_how_far_above_the_bound_a_policy_is() {
        assert_eq!(
            bar_label(3 << 30, 2 << 30, 1234, 5600.0, false),
            "3.00 GiB (+50.0%), 1,234 driver calls ≈ 5.60 ms"
        );
        assert!(bar_label(1, 1, 0, 0.0, true).ends_with("OUT OF MEMORY"));
    }
}
