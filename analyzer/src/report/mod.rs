//! `vramtrace report`: SVG charts and one self-contained HTML page.
//!
//! Sans-IO in three layers: [`trace::TracePass`] lays out the allocations of the replay model's
//! request streams; [`build`] (and, for the allocator policies, [`from_replay`]) turns that into
//! [`data::ReportData`], small and already downsampled; each chart module renders its part of
//! the data to an SVG string and [`page::html_page`] puts them on one page.
//! [`generate::generate`] runs it all; the `vramtrace report` command only writes the files.

pub mod address_map;
pub mod data;
pub mod escape;
pub mod fragmentation;
pub mod from_replay;
pub mod generate;
pub mod histograms;
pub mod live_at_peak;
pub mod memory;
pub mod page;
pub mod policies;
pub mod style;
pub mod timeline;
pub mod trace;

use data::{Buckets, ReportData, Section, TraceFacts};
use plotters::coord::Shift;
use plotters::prelude::*;
use rayon::prelude::*;
use trace::{Instance, TracePass};

/// A rendered chart, or why it could not be drawn.
pub type Svg = Result<String, String>;

/// Allocator instances drawn; a trace with more shows the ones with the largest peaks.
pub const MAX_SECTIONS: usize = 8;

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

/// The sections of a report: one per allocator instance, largest lower bound first.
///
/// `frames` names a stack's frames, outermost first (symbolization is the caller's business).
/// `capacity` gives the capacity line of an instance (pid, device).
pub fn build(
    pass: &TracePass,
    trace: TraceFacts,
    capacity: &dyn Fn(u32, i32) -> Option<u64>,
    frames: &mut dyn FnMut(u32) -> Vec<String>,
) -> ReportData {
    let buckets = Buckets::new(pass.first_ns, pass.last_ns, data::BUCKETS);
    let computed: Vec<(usize, data::Series, data::Peak, Option<usize>)> = pass
        .instances
        .par_iter()
        .enumerate()
        .map(|(i, inst)| {
            let (series, peak, at) = memory::requested(inst, buckets);
            (i, series, peak, at)
        })
        .collect();
    let mut order: Vec<usize> = (0..computed.len()).collect();
    order.sort_by(|&a, &b| {
        computed[b]
            .2
            .bytes
            .cmp(&computed[a].2.bytes)
            .then(a.cmp(&b))
    });
    let omitted = order.len().saturating_sub(MAX_SECTIONS);
    order.truncate(MAX_SECTIONS);
    let mut sections = Vec::new();
    for i in order {
        let inst = &pass.instances[i];
        let (_, requested, peak, at) = computed[i].clone();
        let live_at_peak = live_at_peak::collect(inst, peak, at, frames);
        let (timeline, timeline_at_peak) = rayon::join(
            || {
                timeline::collect(
                    inst,
                    pass.first_ns,
                    pass.first_ns,
                    pass.last_ns.max(pass.first_ns + 1),
                )
            },
            || zoomed_timeline(inst, pass.first_ns, pass.last_ns, at),
        );
        sections.push(Section {
            pid: inst.pid,
            device: inst.device,
            allocations: inst.allocations.len() as u64,
            capacity: capacity(inst.pid, inst.device),
            requested,
            peak,
            outside_allocations: inst.outside.allocations,
            outside_peak: inst.outside.peak_bytes,
            policies: Vec::new(),
            live_at_peak,
            timeline,
            timeline_at_peak,
        });
    }
    ReportData {
        trace,
        buckets: (pass.events > 0).then_some(buckets),
        policy_names: Vec::new(),
        sections,
        sections_omitted: omitted,
        sizes: histograms::sizes(&pass.instances),
        lifetimes: histograms::lifetimes(&pass.instances),
    }
}

/// The timeline around the peak, unless that window is most of the trace anyway.
fn zoomed_timeline(
    inst: &Instance,
    first_ns: u64,
    last_ns: u64,
    peak_step: Option<usize>,
) -> data::Timeline {
    let Some(p) = peak_step else {
        return data::Timeline::default();
    };
    let (a, b) = timeline::zoom_window(inst, p);
    if (b - a) as f64 > 0.6 * last_ns.saturating_sub(first_ns) as f64 {
        return data::Timeline::default();
    }
    timeline::collect(inst, first_ns, a, b)
}

/// Which chart a [`Chart`] is, for the page's layout and text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChartKind {
    Memory,
    Fragmentation,
    Policies,
    LiveAtPeak,
    Timeline,
    TimelineAtPeak,
    AddressMap,
    Sizes,
    Lifetimes,
}

/// One rendered chart and the file it is written to.
#[derive(Debug, Clone)]
pub struct Chart {
    pub kind: ChartKind,
    /// Index into [`ReportData::sections`]; `None` for whole-trace charts.
    pub section: Option<usize>,
    /// For address maps, the policy's index in the section.
    pub policy: Option<usize>,
    pub file: String,
    pub svg: String,
}

/// Every chart of the report, in page order.
pub fn charts(data: &ReportData) -> Result<Vec<Chart>, String> {
    let many = data.sections.len() > 1;
    let mut jobs: Vec<(ChartKind, Option<usize>, Option<usize>)> = Vec::new();
    for (s, section) in data.sections.iter().enumerate() {
        let s = Some(s);
        jobs.push((ChartKind::Memory, s, None));
        if !section.policies.is_empty() {
            jobs.push((ChartKind::Policies, s, None));
            jobs.push((ChartKind::Fragmentation, s, None));
        }
        jobs.push((ChartKind::LiveAtPeak, s, None));
        jobs.push((ChartKind::Timeline, s, None));
        if !section.timeline_at_peak.times_ns.is_empty() {
            jobs.push((ChartKind::TimelineAtPeak, s, None));
        }
        for (p, policy) in section.policies.iter().enumerate() {
            // Offline bounds have no address space to show.
            if !policy.address_map.segments.is_empty() {
                jobs.push((ChartKind::AddressMap, s, Some(p)));
            }
        }
    }
    jobs.push((ChartKind::Sizes, None, None));
    jobs.push((ChartKind::Lifetimes, None, None));
    let buckets = data.buckets.unwrap_or(Buckets::new(0, 1, 1));
    jobs.par_iter()
        .map(|&(kind, s, p)| {
            let section = s.map(|s| &data.sections[s]);
            let prefix = match section {
                Some(x) if many => format!("p{}-gpu{}-", x.pid, x.device),
                _ => String::new(),
            };
            let (stem, svg) = match (kind, section) {
                (ChartKind::Memory, Some(x)) => ("memory".to_string(), memory::render(x, buckets)),
                (ChartKind::Fragmentation, Some(x)) => (
                    "fragmentation".to_string(),
                    fragmentation::render(x, buckets),
                ),
                (ChartKind::Policies, Some(x)) => ("policies".to_string(), policies::render(x)),
                (ChartKind::LiveAtPeak, Some(x)) => (
                    "live-at-peak".to_string(),
                    live_at_peak::render(x, buckets.start_ns),
                ),
                (ChartKind::Timeline, Some(x)) => (
                    "timeline".to_string(),
                    timeline::render(&format!("Allocation timeline: {}", x.label()), &x.timeline),
                ),
                (ChartKind::TimelineAtPeak, Some(x)) => (
                    "timeline-at-peak".to_string(),
                    timeline::render(
                        &format!("Allocation timeline around the peak: {}", x.label()),
                        &x.timeline_at_peak,
                    ),
                ),
                (ChartKind::AddressMap, Some(x)) => {
                    let policy = &x.policies[p.expect("an address map names its policy")];
                    (
                        format!("address-map-{}", escape::file_stem(&policy.name)),
                        address_map::render(x, policy),
                    )
                }
                (ChartKind::Sizes, _) => (
                    "sizes".to_string(),
                    histograms::render("Request sizes", "requests", &data.sizes),
                ),
                (ChartKind::Lifetimes, _) => (
                    "lifetimes".to_string(),
                    histograms::render(
                        "Request lifetimes (allocation to free)",
                        "requests",
                        &data.lifetimes,
                    ),
                ),
                (_, None) => unreachable!("section charts are made per section"),
            };
            let svg = svg.map_err(|e| format!("drawing {stem}: {e}"))?;
            Ok(Chart {
                kind,
                section: s,
                policy: p,
                file: format!("{prefix}{stem}.svg"),
                svg,
            })
        })
        .collect()
}
