//! What every chart shares: sizes, fonts, one colour per policy, byte and time axis units, and
//! the legend, which is drawn beside the plot so it never covers data.

use crate::report::data::Buckets;
use crate::report::escape::clean;
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::ops::Range;

/// Size of a full-width chart, in SVG pixels.
pub const WIDTH: u32 = 1000;
pub const HEIGHT: u32 = 420;
/// Width kept on the right of a plot for its legend.
pub const LEGEND_WIDTH: u32 = 250;

pub const FONT: &str = "sans-serif";
pub const TITLE_SIZE: f64 = 20.0;
pub const LABEL_SIZE: f64 = 15.0;

/// Live requested bytes: what the program itself holds.
pub const REQUESTED: RGBColor = RGBColor(20, 20, 20);
/// The lower bound line.
pub const LOWER_BOUND: RGBColor = RGBColor(110, 110, 110);
/// The capacity line and OOM marks.
pub const DANGER: RGBColor = RGBColor(200, 30, 30);
/// Allocated and free blocks in the address map.
pub const ALLOCATED: RGBColor = RGBColor(51, 110, 190);
pub const FREE: RGBColor = RGBColor(240, 160, 60);
/// Memory too small or too short to draw on its own.
pub const REST: RGBColor = RGBColor(190, 190, 190);

/// Policy colours (Okabe–Ito first, readable by colour-blind readers, then more), by the
/// policy's colour index, so one policy has one colour in every chart.
const POLICY_COLORS: [RGBColor; 16] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(120, 80, 30),
    RGBColor(140, 140, 0),
    RGBColor(102, 51, 153),
    RGBColor(0, 128, 128),
    RGBColor(199, 21, 133),
    RGBColor(85, 107, 47),
    RGBColor(70, 130, 180),
    RGBColor(210, 105, 30),
    RGBColor(128, 0, 0),
    RGBColor(75, 0, 130),
];

pub fn policy_color(index: usize) -> RGBColor {
    POLICY_COLORS[index % POLICY_COLORS.len()]
}

/// `#rrggbb`, for the page's table swatches.
pub fn hex(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// Band colours for the allocation timeline: distinct neighbours, deterministic.
pub fn band_color(i: usize) -> RGBColor {
    const BANDS: [RGBColor; 10] = [
        RGBColor(78, 121, 167),
        RGBColor(242, 142, 43),
        RGBColor(225, 87, 89),
        RGBColor(118, 183, 178),
        RGBColor(89, 161, 79),
        RGBColor(237, 201, 72),
        RGBColor(176, 122, 161),
        RGBColor(255, 157, 167),
        RGBColor(156, 117, 95),
        RGBColor(186, 176, 172),
    ];
    BANDS[i % BANDS.len()]
}

/// A byte unit chosen so that the largest value reads as 1 to 1023 of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ByteUnit {
    pub name: &'static str,
    pub scale: f64,
}

impl ByteUnit {
    pub fn for_max(max: u64) -> ByteUnit {
        const UNITS: [(&str, f64); 5] = [
            ("B", 1.0),
            ("KiB", 1024.0),
            ("MiB", 1048576.0),
            ("GiB", 1073741824.0),
            ("TiB", 1099511627776.0),
        ];
        let mut pick = UNITS[0];
        for u in UNITS {
            if max as f64 >= u.1 {
                pick = u;
            }
        }
        ByteUnit {
            name: pick.0,
            scale: pick.1,
        }
    }

    pub fn of(&self, bytes: u64) -> f64 {
        bytes as f64 / self.scale
    }
}

/// A time unit for an axis spanning `span_ns`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeUnit {
    pub name: &'static str,
    pub scale: f64,
}

impl TimeUnit {
    pub fn for_span(span_ns: u64) -> TimeUnit {
        let (name, scale) = match span_ns {
            0..10_000 => ("ns", 1.0),
            10_000..10_000_000 => ("µs", 1e3),
            10_000_000..2_000_000_000 => ("ms", 1e6),
            2_000_000_000..600_000_000_000 => ("s", 1e9),
            _ => ("min", 60e9),
        };
        TimeUnit { name, scale }
    }

    pub fn of(&self, ns: u64) -> f64 {
        ns as f64 / self.scale
    }
}

/// Values above this multiple of the lower bound are drawn cut at the axis's end: a policy that
/// reserves most of the device up front (BFC, an arena) would otherwise flatten every other
/// curve into the floor.
pub const OUTLIER: f64 = 2.5;

/// The byte axis's top for values `peaks` against `lower_bound`: the largest value that is not
/// an outlier (at most [`OUTLIER`] × the lower bound), and at least the lower bound.
pub fn byte_axis_top(lower_bound: u64, peaks: impl IntoIterator<Item = u64>) -> u64 {
    let limit = lower_bound as f64 * OUTLIER;
    peaks
        .into_iter()
        .filter(|&p| lower_bound == 0 || p as f64 <= limit)
        .chain([lower_bound, 1])
        .max()
        .unwrap_or(1)
}

/// Tick label: at most three significant decimals, no trailing zeros.
pub fn tick(v: f64) -> String {
    let s = if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// How a legend entry is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mark {
    Line,
    Dashed,
    Box,
    Dot,
}

/// One line of a legend.
#[derive(Debug, Clone)]
pub struct LegendEntry {
    pub label: String,
    pub color: RGBColor,
    pub mark: Mark,
}

impl LegendEntry {
    pub fn new(label: impl Into<String>, color: RGBColor, mark: Mark) -> LegendEntry {
        LegendEntry {
            label: label.into(),
            color,
            mark,
        }
    }
}

/// Largest number of characters a label of `size` px may have to fit `width` px (the SVG
/// average sans-serif character is about 0.55 em wide, and plotters' SVG backend writes a font
/// size of `size / 1.24`).
pub fn fit_chars(width: f64, size: f64) -> usize {
    (width / (size / 1.24 * 0.55)).floor().max(0.0) as usize
}

/// `text` cut to `chars` characters with an ellipsis.
pub fn truncate(text: &str, chars: usize) -> String {
    let n = text.chars().count();
    if n <= chars {
        return text.to_string();
    }
    if chars <= 1 {
        return String::new();
    }
    let mut s: String = text.chars().take(chars - 1).collect();
    s.push('…');
    s
}

/// Vertical distance between legend lines.
const LEGEND_LINE: i32 = 20;

/// The height of a chart with a legend of `entries` lines: [`HEIGHT`], or more when the legend
/// (starting at `LEGEND_TOP`) needs it.
pub fn height_for_legend(entries: usize) -> u32 {
    HEIGHT.max(LEGEND_TOP as u32 + LEGEND_LINE as u32 * entries as u32 + 30)
}

/// Where the first legend line is, below the chart's title.
pub const LEGEND_TOP: i32 = 60;

/// Draws `entries` top-down in `area` (the strip right of the plot).
pub fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    top: i32,
    entries: &[LegendEntry],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (w, _) = area.dim_in_pixel();
    let chars = fit_chars(f64::from(w) - 40.0, 13.0);
    for (i, e) in entries.iter().enumerate() {
        let y = top + i as i32 * LEGEND_LINE;
        let x = 8;
        match e.mark {
            Mark::Line => {
                area.draw(&PathElement::new(
                    vec![(x, y), (x + 22, y)],
                    e.color.stroke_width(3),
                ))?;
            }
            Mark::Dashed => {
                for k in 0..3 {
                    area.draw(&PathElement::new(
                        vec![(x + k * 8, y), (x + k * 8 + 5, y)],
                        e.color.stroke_width(2),
                    ))?;
                }
            }
            Mark::Box => {
                area.draw(&Rectangle::new(
                    [(x, y - 6), (x + 22, y + 6)],
                    e.color.filled(),
                ))?;
            }
            Mark::Dot => {
                area.draw(&Circle::new((x + 11, y), 5, e.color.filled()))?;
            }
        }
        area.draw(&Text::new(
            truncate(&clean(&e.label), chars),
            (x + 30, y - 8),
            (FONT, 13.0).into_font().color(&BLACK),
        ))?;
    }
    Ok(())
}

/// A chart with time on x and a number on y.
pub type TimeChart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The mesh of a horizontal bar chart: vertical grid lines only, no y labels, `x_labels` labels
/// made by `format` on the x axis, described by `x_desc`.
pub fn draw_bar_mesh<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    x_desc: &str,
    x_labels: usize,
    format: &dyn Fn(&f64) -> String,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_labels(x_labels)
        .x_desc(x_desc)
        .x_label_formatter(format)
        .axis_desc_style((FONT, LABEL_SIZE))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
}

/// The time axis of the charts over time (memory, fragmentation, the allocation timelines):
/// from `from_ns` to `to_ns` since the first event, in the unit that suits `to_ns`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeAxis {
    pub unit: TimeUnit,
    pub from_ns: u64,
    pub to_ns: u64,
}

impl TimeAxis {
    /// The whole span of `buckets`, each drawn at its middle ([`TimeAxis::bucket`]).
    pub fn over(buckets: Buckets) -> TimeAxis {
        TimeAxis {
            unit: TimeUnit::for_span(buckets.span_ns),
            from_ns: 0,
            to_ns: buckets.span_ns,
        }
    }

    /// The span of sample instants `times_ns` (increasing), widened by half the interval
    /// between samples either side, so the first and the last sample's slices show whole.
    pub fn around(times_ns: &[u64]) -> TimeAxis {
        let from = times_ns.first().copied().unwrap_or(0);
        let to = times_ns.last().copied().unwrap_or(1);
        let half_step = (to - from) / (2 * times_ns.len().max(2) as u64 - 2).max(1);
        let to_ns = to + half_step;
        TimeAxis {
            unit: TimeUnit::for_span(to_ns),
            from_ns: from.saturating_sub(half_step),
            to_ns,
        }
    }

    /// Where `ns` since the first event is on the axis.
    pub fn x(&self, ns: u64) -> f64 {
        self.unit.of(ns)
    }

    /// Where the middle of bucket `i` of `buckets` is.
    pub fn bucket(&self, buckets: Buckets, i: usize) -> f64 {
        self.x(buckets.mid_ns(i))
    }

    /// The axis's end.
    pub fn end(&self) -> f64 {
        self.x(self.to_ns)
    }

    /// A chart over this axis on `area`: titled, time on x, `y` described as `y_desc` on y,
    /// light grid, ticks without trailing zeros.
    pub fn chart<'a, DB: DrawingBackend>(
        &self,
        area: &'a DrawingArea<DB, Shift>,
        title: &str,
        y: Range<f64>,
        y_desc: &str,
    ) -> Result<TimeChart<'a, DB>, DrawingAreaErrorKind<DB::ErrorType>> {
        let mut chart = ChartBuilder::on(area)
            .caption(title, (FONT, TITLE_SIZE))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(self.x(self.from_ns)..self.end(), y)?;
        chart
            .configure_mesh()
            .x_desc(format!("time since the first event ({})", self.unit.name))
            .y_desc(y_desc)
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| tick(*v))
            .axis_desc_style((FONT, LABEL_SIZE))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()?;
        Ok(chart)
    }

    /// A chart of memory over this axis: from 0 to `top` in `bytes` on y, described as
    /// `what (unit)`.
    pub fn memory_chart<'a, DB: DrawingBackend>(
        &self,
        area: &'a DrawingArea<DB, Shift>,
        title: &str,
        bytes: ByteUnit,
        top: f64,
        what: &str,
    ) -> Result<TimeChart<'a, DB>, DrawingAreaErrorKind<DB::ErrorType>> {
        self.chart(area, title, 0f64..top, &format!("{what} ({})", bytes.name))
    }
}

/// A dashed horizontal line across a chart at `y`, from `x0` to `x1`.
pub fn dashed_hline(x0: f64, x1: f64, y: f64, pieces: usize) -> Vec<Vec<(f64, f64)>> {
    let step = (x1 - x0) / (2 * pieces.max(1)) as f64;
    (0..pieces)
        .map(|k| {
            let a = x0 + 2.0 * k as f64 * step;
            vec![(a, y), (a + step, y)]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_units_keep_values_between_1_and_1024() {
        assert_eq!(ByteUnit::for_max(500).name, "B");
        assert_eq!(ByteUnit::for_max(3 << 20).name, "MiB");
        assert_eq!(ByteUnit::for_max(80 << 30).name, "GiB");
        assert_eq!(TimeUnit::for_span(50_000_000_000).name, "s");
        assert_eq!(TimeUnit::for_span(99_000_000).name, "ms");
    }

    #[test]
    fn outliers_do_not_set_the_byte_axis() {
        assert_eq!(byte_axis_top(100, [120, 150, 10_000]), 150);
        assert_eq!(byte_axis_top(100, [10_000]), 100);
        assert_eq!(byte_axis_top(0, [7, 3]), 7);
    }

    #[test]
    fn ticks_and_truncation_read_well() {
        assert_eq!(tick(1.5), "1.5");
        assert_eq!(tick(2.0), "2");
        assert_eq!(tick(123.4), "123");
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("abc", 4), "abc");
    }
}
