//! The SVG charts (`vramtrace report --svg`), for papers and tickets: one file per chart, named
//! for what it shows, each a [`Chart`] listed once in [`REGISTRY`].
//!
//! A new chart is one file here (a unit struct implementing [`Chart`], with its caption) and one
//! line in the `charts!` list below, which declares the module and puts the chart in
//! [`REGISTRY`]; nothing else names it. The registry is a slice of trait objects, as the
//! allocator policies' registry (`policy::REGISTRY`) and ripgrep's `Flag` list are.
//!
//! A chart draws, with plotters' SVG backend, the data sections that [`super::sections`]
//! computed, which the page reads too ([`Target`]: the report, one section, one policy of it);
//! it computes no figure of its own. The sections are already aggregated, so a chart's size
//! does not grow with the trace.

pub mod histogram;
pub mod style;

use super::data::{Buckets, PolicyResult, ReportData, Section};
use super::escape;
use plotters::coord::Shift;
use plotters::prelude::*;
use rayon::prelude::*;

/// A rendered chart, or why it could not be drawn.
pub type Svg = Result<String, String>;

/// What a chart is drawn for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Once per report.
    Trace,
    /// Once per allocator instance (process × device).
    Section,
    /// Once per replayed policy of each instance.
    Policy,
}

/// The data one drawing of a chart sees.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub data: &'a ReportData,
    pub section: Option<&'a Section>,
    pub policy: Option<&'a PolicyResult>,
}

impl Target<'_> {
    /// The report's time buckets (a single empty bucket for a trace without events).
    pub fn buckets(&self) -> Buckets {
        self.data.buckets.unwrap_or(Buckets::new(0, 1, 1))
    }

    /// The section; charts of [`Scope::Section`] and [`Scope::Policy`] always have one.
    pub fn section(&self) -> &Section {
        self.section
            .expect("a section chart is drawn for a section")
    }

    /// The policy; charts of [`Scope::Policy`] always have one.
    pub fn policy(&self) -> &PolicyResult {
        self.policy.expect("a policy chart is drawn for a policy")
    }
}

/// One chart of the report.
pub trait Chart: Sync {
    /// The file stem, in kebab case (`memory-over-time`).
    fn name(&self) -> &'static str;
    /// One or two sentences saying what the chart shows and how to read it.
    fn caption(&self) -> &'static str;
    fn scope(&self) -> Scope;
    /// Whether there is something to draw for `at` (default: always).
    fn shown(&self, at: &Target) -> bool {
        let _ = at;
        true
    }
    fn render(&self, at: &Target) -> Svg;
}

/// Declares each chart's module and lists the chart in [`REGISTRY`], in this order.
macro_rules! charts {
    ($($module:ident :: $chart:ident),* $(,)?) => {
        $(pub mod $module;)*
        /// Every chart, in the order they are listed and written.
        pub const REGISTRY: &[&dyn Chart] = &[$(&$module::$chart),*];
    };
}

charts! {
    memory_over_time::MemoryOverTime,
    policy_peaks::PolicyPeaks,
    fragmentation_over_time::FragmentationOverTime,
    live_at_peak::LiveAtPeakChart,
    allocation_timeline::AllocationTimeline,
    timeline_around_peak::TimelineAroundPeak,
    address_space_at_peak::AddressSpaceAtPeak,
    request_sizes::RequestSizes,
    request_lifetimes::RequestLifetimes,
    largest_live_stacks::LargestLiveStacks,
}

/// One drawn chart and the file it is written to.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub name: &'static str,
    pub caption: &'static str,
    /// Index into [`ReportData::sections`]; `None` for whole-trace charts.
    pub section: Option<usize>,
    /// Index into the section's policies, for per-policy charts.
    pub policy: Option<usize>,
    pub file: String,
    pub svg: String,
}

/// Draws every chart of `registry` that has something to show, in parallel; in registry order,
/// then section, then policy.
pub fn render_all(data: &ReportData, registry: &[&dyn Chart]) -> Result<Vec<Rendered>, String> {
    let many = data.sections.len() > 1;
    let mut jobs: Vec<(&dyn Chart, Option<usize>, Option<usize>)> = Vec::new();
    for &chart in registry {
        match chart.scope() {
            Scope::Trace => jobs.push((chart, None, None)),
            Scope::Section => jobs.extend((0..data.sections.len()).map(|s| (chart, Some(s), None))),
            Scope::Policy => {
                for (s, section) in data.sections.iter().enumerate() {
                    jobs.extend((0..section.policies.len()).map(|p| (chart, Some(s), Some(p))));
                }
            }
        }
    }
    let target = |s: Option<usize>, p: Option<usize>| {
        let section = s.map(|s| &data.sections[s]);
        Target {
            data,
            section,
            policy: p.and_then(|p| section.map(|x| &x.policies[p])),
        }
    };
    jobs.retain(|&(chart, s, p)| chart.shown(&target(s, p)));
    jobs.par_iter()
        .map(|&(chart, s, p)| {
            let at = target(s, p);
            let prefix = match at.section {
                Some(x) if many => format!("p{}-gpu{}-", x.pid, x.device),
                _ => String::new(),
            };
            let suffix = at
                .policy
                .map(|p| format!("-{}", escape::file_stem(&p.name)))
                .unwrap_or_default();
            let svg = chart
                .render(&at)
                .map_err(|e| format!("drawing {}: {e}", chart.name()))?;
            Ok(Rendered {
                name: chart.name(),
                caption: chart.caption(),
                section: s,
                policy: p,
                file: format!("{prefix}{}{suffix}.svg", chart.name()),
                svg,
            })
        })
        .collect()
}

/// Renders one SVG into a string with plotters' SVG backend (no fonts needed: text is left to
/// the viewer as `font-family="sans-serif"`).
pub fn svg(
    size: (u32, u32),
    draw: impl FnOnce(
        &DrawingArea<SVGBackend, Shift>,
    ) -> Result<(), DrawingAreaErrorKind<std::io::Error>>,
) -> Svg {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        draw(&root).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_names_are_unique_kebab_case_and_captioned() {
        let mut names: Vec<&str> = REGISTRY.iter().map(|c| c.name()).collect();
        for c in REGISTRY {
            let n = c.name();
            assert!(
                n.chars().all(|ch| ch.is_ascii_lowercase() || ch == '-'),
                "{n}"
            );
            assert!(c.caption().ends_with('.'), "{n}: {}", c.caption());
        }
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before);
    }

    #[test]
    fn a_chart_added_to_a_registry_is_drawn_and_named_for_it() {
        struct Blank;
        impl Chart for Blank {
            fn name(&self) -> &'static str {
                "blank"
            }
            fn caption(&self) -> &'static str {
                "Nothing."
            }
            fn scope(&self) -> Scope {
                Scope::Trace
            }
            fn render(&self, _: &Target) -> Svg {
                svg((10, 10), |_| Ok(()))
            }
        }
        let data = ReportData::default();
        let drawn = render_all(&data, &[&Blank]).unwrap();
        assert_eq!(drawn.len(), 1);
        assert_eq!(drawn[0].file, "blank.svg");
        assert!(drawn[0].svg.contains("<svg"));
    }
}
