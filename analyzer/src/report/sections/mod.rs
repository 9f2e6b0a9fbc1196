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

/// What the policies' replays read of a section ([`policies::replay`]): its allocator
/// instance, capacity line, requested bytes' peak and focus window. All come from the trace
/// pass alone and cost little, so the replays, the longest part of a report's own data, can
/// start before the rest of the sections is built ([`build`]).
#[derive(Debug, Clone)]
pub struct Head {
    pub pid: u32,
    pub device: i32,
    pub capacity: Option<u64>,
    pub peak: Peak,
    pub focus: Buckets,
    /// Its index in [`TracePass::instances`].
    instance: usize,
    /// Live requested bytes over the report's buckets.
    requested: Series,
    /// The step of the peak.
    at: Option<usize>,
}

/// The report's buckets and the heads of its sections: one per allocator instance, largest
/// lower bound first, at most [`MAX_SECTIONS`].
#[derive(Debug, Clone)]
pub struct Heads {
    /// `None` for a trace without events.
    pub buckets: Option<Buckets>,
    pub sections: Vec<Head>,
    /// Instances left out.
    omitted: usize,
}

/// The heads of `pass`'s sections; `capacity` gives the capacity line of an instance (pid,
/// device).
pub fn heads(pass: &TracePass, capacity: &dyn Fn(u32, i32) -> Option<u64>) -> Heads {
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
    let sections = order
        .into_iter()
        .map(|i| {
            let inst = &pass.instances[i];
            let (_, requested, peak, at) = computed[i].clone();
            Head {
                pid: inst.pid,
                device: inst.device,
                capacity: capacity(inst.pid, inst.device),
                peak,
                focus: focus::focus(inst, peak.time_ns, pass.first_ns, pass.last_ns),
                instance: i,
                requested,
                at,
            }
        })
        .collect();
    Heads {
        buckets: (pass.events > 0).then_some(buckets),
        sections,
        omitted,
    }
}

/// The sections of a report, in the order of their `heads` (made of the same `pass`,
/// [`heads`]), without the policies' replays.
///
/// `frames` names a stack's frames, outermost first (symbolization is the caller's business).
pub fn build(
    pass: &TracePass,
    heads: &Heads,
    trace: TraceFacts,
    frames: &mut dyn FnMut(u32) -> Vec<String>,
) -> ReportData {
    let mut sections = Vec::new();
    for head in &heads.sections {
        let inst = &pass.instances[head.instance];
        let (peak, at, focus) = (head.peak, head.at, head.focus);
        let live_at_peak = live_at_peak::collect(inst, peak, at, frames);
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
            capacity: head.capacity,
            requested: head.requested.clone(),
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
        buckets: heads.buckets,
        policy_names: Vec::new(),
        sections,
        sections_omitted: heads.omitted,
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
