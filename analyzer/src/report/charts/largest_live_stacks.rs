//! The stacks holding the most memory at the peak, as bars: the icicle's widest boxes as a
//! list, named by their innermost frame, for a ticket or a paper where a flame graph is too much.

use super::style::{self, ByteUnit};
use super::{Chart, Scope, Svg, Target, svg};
use crate::report::escape::clean;
use crate::units::bytes;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Bars drawn.
const SHOWN: usize = 12;
const ROW: u32 = 30;
const NAME_WIDTH: u32 = 330;

pub struct LargestLiveStacks;

impl Chart for LargestLiveStacks {
    fn name(&self) -> &'static str {
        "largest-live-stacks"
    }
    fn caption(&self) -> &'static str {
        "The allocating stacks that held the most memory at the peak, each named by its \
         innermost frame, with their share of everything live."
    }
    fn scope(&self) -> Scope {
        Scope::Section
    }
    fn shown(&self, at: &Target) -> bool {
        !at.section().live_at_peak.stacks.is_empty()
    }
    fn render(&self, at: &Target) -> Svg {
        let x = at.section();
        let live = &x.live_at_peak;
        let stacks: Vec<_> = live.stacks.iter().take(SHOWN).collect();
        let n = stacks.len().max(1);
        let max = stacks.iter().map(|s| s.bytes).max().unwrap_or(1).max(1);
        let bu = ByteUnit::for_max(max);
        let title = format!("Largest stacks live at the peak: {}", x.label());
        svg((style::WIDTH, 100 + ROW * n as u32), |root| {
            let mut chart = ChartBuilder::on(root)
                .caption(title, (style::FONT, style::TITLE_SIZE))
                .margin(12)
                .x_label_area_size(45)
                .y_label_area_size(NAME_WIDTH)
                .build_cartesian_2d(0f64..bu.of(max) * 1.35, 0f64..n as f64)?;
            style::draw_bar_mesh(
                &mut chart,
                &format!("live at the peak ({})", bu.name),
                10,
                &|v| style::tick(*v),
            )?;
            let chars = style::fit_chars(f64::from(NAME_WIDTH) - 16.0, 13.0);
            for (i, s) in stacks.iter().enumerate() {
                let y = (n - 1 - i) as f64;
                let end = bu.of(s.bytes);
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(0.0, y + 0.2), (end, y + 0.8)],
                    style::band_color(i).filled(),
                )))?;
                let share = 100.0 * s.bytes as f64 / live.peak.bytes.max(1) as f64;
                chart.draw_series(std::iter::once(Text::new(
                    format!("{} ({share:.1}%)", bytes(s.bytes)),
                    (end + bu.of(max) * 0.01, y + 0.5),
                    (style::FONT, 13.0)
                        .into_font()
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Left, VPos::Center)),
                )))?;
                let name = s
                    .frames
                    .last()
                    .map_or("(no stack recorded)".to_string(), |f| clean(f));
                let (px, py) = chart.backend_coord(&(0.0, y + 0.5));
                root.draw(&Text::new(
                    style::truncate(&name, chars),
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
}
