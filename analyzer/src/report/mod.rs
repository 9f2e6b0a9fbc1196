//! `vramtrace report`: one self-contained interactive HTML page, and SVG charts.
//!
//! Sans-IO in layers: [`trace::TracePass`] lays out the allocations of the replay model's
//! request streams; [`build`] (with [`aggregate`], and [`from_replay`] for the allocator
//! policies) turns that into [`data::ReportData`], small and already downsampled; from it
//! [`page_data`] makes the page's embedded JSON and [`page::html_page`] the page, and each chart
//! of [`charts::REGISTRY`] an SVG. [`generate::generate`] runs it all; the `vramtrace report` command
//! only reads the inputs and writes the files.

pub mod aggregate;
pub mod charts;
pub mod data;
pub mod escape;
pub mod from_replay;
pub mod generate;
pub mod job;
pub mod page;
pub mod page_data;
pub mod sections;
pub mod trace;

use data::{Buckets, ReportData, Section, TraceFacts};
use rayon::prelude::*;
use sections::{histogram, live_at_peak, memory, timeline};
use trace::{Instance, TracePass};

/// Allocator instances drawn; a trace with more shows the ones with the largest peaks.
pub const MAX_SECTIONS: usize = 8;

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
        let focus = aggregate::focus(inst, peak.time_ns, pass.first_ns, pass.last_ns);
        let (refused, refused_total) = aggregate::refused(inst);
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
            outside_by_library: Vec::new(),
            driver_count: None,
            policies: Vec::new(),
            live_at_peak,
            timeline,
            timeline_at_peak,
            focus,
            requested_focus: memory::requested(inst, focus).0,
            top: aggregate::top(inst, aggregate::TOP_ALLOCATIONS, pass.last_ns),
            stacks: aggregate::stacks(inst, at),
            refused,
            refused_total,
            windows: Vec::new(),
        });
    }
    ReportData {
        trace,
        buckets: (pass.events > 0).then_some(buckets),
        policy_names: Vec::new(),
        sections,
        sections_omitted: omitted,
        sizes: histogram::sizes(&pass.instances),
        lifetimes: histogram::lifetimes(&pass.instances),
        answers: None,
        oom_stories: Vec::new(),
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
