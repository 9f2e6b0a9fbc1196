//! The size and lifetime histograms of the requests: log-scale bins, each with how many
//! requests fell in it and how many bytes they asked for.

use super::style::{self, ByteUnit};
use super::{Svg, svg};
use crate::report::data::Histogram;
use crate::units::{bytes, count};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

const ROW: u32 = 26;
const LABEL_WIDTH: u32 = 130;

pub fn render(title: &str, what: &str, h: &Histogram) -> Svg {
    let rows = h.bins.len().max(1);
    let height = 110 + ROW * rows as u32;
    svg((style::WIDTH, height), |full| {
        let root = full.titled(title, (style::FONT, style::TITLE_SIZE))?;
        let (left, right) = root.split_horizontally(LABEL_WIDTH + (style::WIDTH - LABEL_WIDTH) / 2);
        let max_count = h.bins.iter().map(|b| b.count).max().unwrap_or(1).max(1);
        let max_bytes = h.bins.iter().map(|b| b.bytes).max().unwrap_or(1).max(1);
        let bu = ByteUnit::for_max(max_bytes);
        let n = rows as f64;
        let mut counts = ChartBuilder::on(&left)
            .margin(10)
            .x_label_area_size(45)
            .y_label_area_size(LABEL_WIDTH)
            .build_cartesian_2d(0f64..max_count as f64 * 1.3, 0f64..n)?;
        style::draw_bar_mesh(&mut counts, &format!("{what} (count)"), 5, &|v| {
            count(*v as u64)
        })?;
        let mut sizes = ChartBuilder::on(&right)
            .margin(10)
            .x_label_area_size(45)
            .y_label_area_size(10)
            .build_cartesian_2d(0f64..bu.of(max_bytes) * 1.3, 0f64..n)?;
        style::draw_bar_mesh(
            &mut sizes,
            &format!("bytes requested ({})", bu.name),
            5,
            &|v| style::tick(*v),
        )?;
        let value_font = (style::FONT, 12.0)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Left, VPos::Center));
        for (i, b) in h.bins.iter().enumerate() {
            let y = (rows - 1 - i) as f64;
            counts.draw_series(std::iter::once(Rectangle::new(
                [(0.0, y + 0.15), (b.count as f64, y + 0.85)],
                RGBColor(78, 121, 167).filled(),
            )))?;
            counts.draw_series(std::iter::once(Text::new(
                count(b.count),
                (b.count as f64 + max_count as f64 * 0.01, y + 0.5),
                value_font.clone(),
            )))?;
            sizes.draw_series(std::iter::once(Rectangle::new(
                [(0.0, y + 0.15), (bu.of(b.bytes), y + 0.85)],
                RGBColor(242, 142, 43).filled(),
            )))?;
            sizes.draw_series(std::iter::once(Text::new(
                bytes(b.bytes),
                (bu.of(b.bytes) + bu.of(max_bytes) * 0.01, y + 0.5),
                value_font.clone(),
            )))?;
            let (px, py) = counts.backend_coord(&(0.0, y + 0.5));
            // backend_coord is in whole-image pixels: draw on the whole image.
            full.draw(&Text::new(
                b.label.clone(),
                (px - 8, py),
                (style::FONT, 13.0)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Right, VPos::Center)),
            ))?;
        }
        Ok(())
    })
}
