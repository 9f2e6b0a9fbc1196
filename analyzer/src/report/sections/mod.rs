//! The report's data sections, each computed once from the trace pass ([`super::trace`], walks
//! over the replay model's request streams with bounded state), the policies' replays
//! ([`policies`]) and the summary ([`from_summary`]): plain data ([`super::data`]), already
//! aggregated and downsampled. The page ([`super::page_data`], [`super::page`]) and the SVG
//! charts ([`super::charts`]) both read these and compute nothing of their own.

pub mod allocations;
pub mod facts;
pub mod focus;
pub mod from_summary;
pub mod histogram;
pub mod live_at_peak;
pub mod memory;
pub mod policies;
pub mod refused;
pub mod stacks;
pub mod timeline;

use crate::report::data::{
    BUCKETS, Buckets, Peak, ReportData, Section, Series, Timeline, TraceFacts,
};
use crate::report::trace::{Instance, TracePass};
use rayon::prelude::*;

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
    let buckets = Buckets::new(pass.first_ns, pass.last_ns, BUCKETS);
    let computed: Vec<(usize, Series, Peak, Option<usize>)> = pass
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
        let focus = focus::focus(inst, peak.time_ns, pass.first_ns, pass.last_ns);
        let (refused, refused_total) = refused::refused(inst);
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
            allocations: inst.allocation_count,
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
            top: allocations::top(inst, allocations::TOP_ALLOCATIONS, pass.last_ns),
            stacks: stacks::stacks(inst, at),
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
) -> Timeline {
    let Some(p) = peak_step else {
        return Timeline::default();
    };
    let (a, b) = timeline::zoom_window(inst, p);
    if (b - a) as f64 > 0.6 * last_ns.saturating_sub(first_ns) as f64 {
        return Timeline::default();
    }
    timeline::collect(inst, first_ns, a, b)
}
