//! The data the page's script draws from, as compact JSON embedded in the page.
//!
//! Everything here is already aggregated ([`super::data`]): two levels of detail per time series
//! (the whole trace, and the finer focus window where memory moves), the largest allocations as
//! columns (the rest summarized by the live total), stacks and frame names interned once, the
//! policies' segments at their peaks, and their states event by event over bounded windows of
//! requests as a starting state plus each request's changes (levels of detail for the state
//! view: every event of a short trace; around the peak and at moments over the focus window of a
//! long one). So the page stays a few MB whatever the trace's size.
//!
//! The JSON is made safe to sit inside `<script type="application/json">`: every `<` is
//! written `\u003c`, so no trace string can close the element; the script reads it with
//! `JSON.parse` and puts strings on the page only as text (`textContent`), never as markup.

use super::charts::style;
use super::data::{
    AddressLayout, Buckets, EventWindow, PolicyResult, ReportData, Section, Series, StateChange,
    WindowLog,
};
use crate::symbolize::NamedFrame;
use serde::Serialize;
use std::collections::HashMap;

/// Blocks listed in the peak address maps of all policies of a section together (each policy
/// its share); a larger map lists its largest segments.
pub const MAX_BLOCKS: usize = 160_000;

/// One trace of the page (two with `--compare`, one per rank for a directory).
#[derive(Debug, Serialize)]
pub struct Run {
    /// The trace's name as given on the command line.
    pub name: String,
    /// Interned frame names.
    pub frames: Vec<String>,
    /// Per frame: 1 when it is allocator or interpreter plumbing
    /// ([`crate::symbolize::is_plumbing`]).
    pub plumbing: Vec<u8>,
    /// Interned stacks: frame indices, outermost first. Stack 0 is "no stack recorded".
    pub stacks: Vec<Vec<u32>>,
    pub sections: Vec<SectionData>,
}

#[derive(Debug, Serialize)]
pub struct SectionData {
    pub label: String,
    pub capacity: Option<u64>,
    pub lower_bound: u64,
    /// Ns since the trace's start.
    pub peak_ns: u64,
    pub duration_ns: u64,
    /// The levels of detail: the whole trace, then the focus window.
    pub levels: Vec<Level>,
    pub policies: Vec<PolicyData>,
    /// The largest allocations, as columns.
    pub allocs: Allocs,
    /// How many allocations the section has in all.
    pub allocations: u64,
    /// Per allocating stack: [stack, allocations, bytes, bytes at peak, refused].
    pub sites: Vec<[u64; 5]>,
    /// [ns, size, stack] of each refused request listed.
    pub refused: Vec<[u64; 3]>,
    pub refused_total: u64,
    /// The requests whose allocator states the page shows one by one.
    pub windows: Vec<WindowData>,
}

/// One level of detail: bucket `i` covers `[t0 + i·dt, t0 + (i+1)·dt)` (ns since the start).
#[derive(Debug, Serialize)]
pub struct Level {
    pub t0: f64,
    pub dt: f64,
    /// Highest live requested bytes per bucket.
    pub requested: Vec<u64>,
    /// Per policy, highest reserved bytes per bucket (shorter when the replay ran out).
    pub reserved: Vec<Vec<u64>>,
}

#[derive(Debug, Serialize)]
pub struct PolicyData {
    pub name: String,
    pub color: String,
    pub peak: u64,
    pub peak_ns: u64,
    pub peak_allocated: u64,
    pub fragmentation: f64,
    pub device_allocs: u64,
    pub device_frees: u64,
    pub est_us: f64,
    /// [ns, size, reserved, stream, stack] of the request it could not serve.
    pub oom: Option<[u64; 5]>,
    /// Its segments at its peak: [address, size, [offset, size, allocation index or -1, stack]…].
    pub segments: Vec<Segment>,
    /// Blocks left out of `segments` (see [`MAX_BLOCKS`]).
    pub blocks_omitted: u64,
    /// Its states request by request over the section's windows.
    pub log: Vec<LogData>,
}

/// [address, size, [offset, size, allocation index or -1, stack]…].
pub type Segment = (u64, u64, Vec<[i64; 4]>);

/// Requests of a section whose states the page steps through ([`super::data::EventWindow`]).
#[derive(Debug, Serialize)]
pub struct WindowData {
    /// Index of the first request in the section's request stream.
    pub first: usize,
    /// Per request: ns since the start.
    pub t: Vec<u64>,
    /// Per request, one letter: `a` allocation, `f` free, `t` a refused attempt.
    pub kind: String,
    pub size: Vec<u64>,
    pub stack: Vec<u32>,
    /// The allocation it makes or ends; -1 for an attempt.
    pub alloc: Vec<i64>,
}

/// A policy's states over one window: the state before it, then each request's changes.
#[derive(Debug, Serialize)]
pub struct LogData {
    /// Index into the section's `windows`.
    pub w: usize,
    /// Addresses in `ops` are from here.
    pub base: u64,
    pub key: Vec<Segment>,
    /// Per request, how many changes of `ops` it made.
    pub n: Vec<u32>,
    /// The changes, flat: `0, address, size, allocation + 1 (0: unknown), stack` a block handed
    /// out; `1, address` a block freed; `2, address, size` a segment taken from the driver;
    /// `3, address` a segment given back.
    pub ops: Vec<u64>,
}

/// The drawn allocations as columns, in allocation order.
#[derive(Debug, Default, Serialize)]
pub struct Allocs {
    /// Index among the section's allocations.
    pub index: Vec<u32>,
    pub size: Vec<u64>,
    /// Ns since the start; `death` is -1 for one never freed.
    pub birth: Vec<u64>,
    pub death: Vec<i64>,
    pub stack: Vec<u32>,
    pub stream: Vec<u32>,
}

/// Interns frame names and stacks for one run.
struct Interner<'n> {
    names: &'n mut dyn FnMut(u32) -> Vec<NamedFrame>,
    frames: Vec<String>,
    plumbing: Vec<u8>,
    frame_ids: HashMap<String, u32>,
    stacks: Vec<Vec<u32>>,
    stack_ids: HashMap<u32, u32>,
}

impl Interner<'_> {
    /// The page index of trace stack `stack` (0 for one without frames).
    fn stack(&mut self, stack: u32) -> u32 {
        if let Some(&i) = self.stack_ids.get(&stack) {
            return i;
        }
        let names = (self.names)(stack);
        let i = if names.is_empty() {
            0
        } else {
            // Innermost first from the namer; outermost first on the page.
            let ids: Vec<u32> = names
                .into_iter()
                .rev()
                .map(|f| {
                    let next = self.frames.len() as u32;
                    *self.frame_ids.entry(f.text()).or_insert_with(|| {
                        self.frames.push(f.text());
                        self.plumbing.push(u8::from(f.plumbing));
                        next
                    })
                })
                .collect();
            self.stacks.push(ids);
            self.stacks.len() as u32 - 1
        };
        self.stack_ids.insert(stack, i);
        i
    }
}

/// The page data of one report; `frames` names a trace stack's frames, innermost first
/// ([`crate::symbolize::Symbolizer::frames`]).
pub fn run(name: &str, data: &ReportData, frames: &mut dyn FnMut(u32) -> Vec<NamedFrame>) -> Run {
    let mut interner = Interner {
        names: frames,
        frames: Vec::new(),
        plumbing: Vec::new(),
        frame_ids: HashMap::new(),
        stacks: vec![Vec::new()],
        stack_ids: HashMap::new(),
    };
    let start = data.buckets.map_or(0, |b| b.start_ns);
    let buckets = data.buckets.unwrap_or_default();
    let sections = data
        .sections
        .iter()
        .map(|x| section(x, start, buckets, &mut interner))
        .collect();
    Run {
        name: name.to_string(),
        frames: interner.frames,
        plumbing: interner.plumbing,
        stacks: interner.stacks,
        sections,
    }
}

fn level(b: Buckets, start: u64, requested: &Series, policies: Vec<&Series>) -> Level {
    Level {
        t0: b.start_ns.saturating_sub(start) as f64,
        dt: b.span_ns as f64 / b.count as f64,
        requested: requested.max.clone(),
        reserved: policies.into_iter().map(|s| s.max.clone()).collect(),
    }
}

fn section(x: &Section, start: u64, buckets: Buckets, st: &mut Interner) -> SectionData {
    let rel = |t: u64| t.saturating_sub(start);
    let mut allocs = Allocs::default();
    for a in &x.top {
        allocs.index.push(a.index);
        allocs.size.push(a.size);
        allocs.birth.push(rel(a.birth_ns));
        allocs.death.push(if a.death_ns == u64::MAX {
            -1
        } else {
            rel(a.death_ns) as i64
        });
        allocs.stack.push(st.stack(a.stack));
        allocs.stream.push(a.stream);
    }
    let levels = vec![
        level(
            buckets,
            start,
            &x.requested,
            x.policies.iter().map(|p| &p.reserved).collect(),
        ),
        level(
            x.focus,
            start,
            &x.requested_focus,
            x.policies.iter().map(|p| &p.reserved_focus).collect(),
        ),
    ];
    let share = MAX_BLOCKS / x.policies.len().max(1);
    let policies = x
        .policies
        .iter()
        .map(|p| policy(p, &rel, st, share))
        .collect();
    let sites = x
        .stacks
        .iter()
        .map(|s| {
            [
                u64::from(st.stack(s.stack)),
                s.allocations,
                s.bytes,
                s.bytes_at_peak,
                s.refused,
            ]
        })
        .collect();
    let refused = x
        .refused
        .iter()
        .map(|r| [rel(r.time_ns), r.size, u64::from(st.stack(r.stack))])
        .collect();
    SectionData {
        label: x.label(),
        capacity: x.capacity,
        lower_bound: x.lower_bound(),
        peak_ns: rel(x.peak.time_ns),
        duration_ns: buckets.span_ns,
        levels,
        policies,
        allocs,
        allocations: x.allocations,
        sites,
        refused,
        refused_total: x.refused_total,
        windows: x.windows.iter().map(|w| window(w, &rel, st)).collect(),
    }
}

fn window(w: &EventWindow, rel: &impl Fn(u64) -> u64, st: &mut Interner) -> WindowData {
    WindowData {
        first: w.first,
        t: w.events.iter().map(|e| rel(e.time_ns)).collect(),
        kind: w.events.iter().map(|e| char::from(e.kind)).collect(),
        size: w.events.iter().map(|e| e.size).collect(),
        stack: w.events.iter().map(|e| st.stack(e.stack)).collect(),
        alloc: w
            .events
            .iter()
            .map(|e| {
                if e.allocation == u32::MAX {
                    -1
                } else {
                    i64::from(e.allocation)
                }
            })
            .collect(),
    }
}

fn log(l: &WindowLog, st: &mut Interner) -> LogData {
    let base = l
        .key
        .segments
        .iter()
        .map(|s| s.address)
        .chain(l.changes.iter().flatten().map(|c| match *c {
            StateChange::AddSegment { address, .. }
            | StateChange::RemoveSegment { address }
            | StateChange::AddBlock { address, .. }
            | StateChange::RemoveBlock { address } => address,
        }))
        .min()
        .unwrap_or(0);
    let mut ops = Vec::new();
    for c in l.changes.iter().flatten() {
        match *c {
            StateChange::AddBlock {
                address,
                size,
                owner,
                stack,
            } => ops.extend([
                0,
                address - base,
                size,
                if owner == u32::MAX {
                    0
                } else {
                    u64::from(owner) + 1
                },
                u64::from(st.stack(stack)),
            ]),
            StateChange::RemoveBlock { address } => ops.extend([1, address - base]),
            StateChange::AddSegment { address, size } => ops.extend([2, address - base, size]),
            StateChange::RemoveSegment { address } => ops.extend([3, address - base]),
        }
    }
    LogData {
        w: l.window,
        base,
        key: segments(&l.key, st, usize::MAX).0,
        n: l.changes.iter().map(|c| c.len() as u32).collect(),
        ops,
    }
}

fn policy(
    p: &PolicyResult,
    rel: &impl Fn(u64) -> u64,
    st: &mut Interner,
    max_blocks: usize,
) -> PolicyData {
    let log = p.log.iter().map(|l| log(l, st)).collect();
    let (segments, omitted) = segments(&p.address_map, st, max_blocks);
    PolicyData {
        name: p.name.clone(),
        color: style::hex(style::policy_color(p.color)),
        peak: p.peak_reserved.bytes,
        peak_ns: rel(p.peak_reserved.time_ns),
        peak_allocated: p.peak_allocated,
        fragmentation: p.fragmentation_at_peak,
        device_allocs: p.device_allocs,
        device_frees: p.device_frees,
        est_us: p.est_alloc_time_us,
        oom: p.oom.as_ref().map(|o| {
            [
                rel(o.time_ns),
                o.size,
                o.reserved,
                u64::from(o.stream),
                u64::from(st.stack(o.stack_id)),
            ]
        }),
        segments,
        blocks_omitted: omitted,
        log,
    }
}

/// A layout's segments for the page, the largest first kept when there are more than
/// `max_blocks` blocks; and how many blocks were left out.
fn segments(layout: &AddressLayout, st: &mut Interner, max_blocks: usize) -> (Vec<Segment>, u64) {
    let mut order: Vec<usize> = (0..layout.segments.len()).collect();
    order.sort_by_key(|&i| {
        let s = &layout.segments[i];
        (std::cmp::Reverse(s.size), s.address)
    });
    let (mut listed, mut omitted) = (0usize, 0u64);
    let mut keep = vec![false; order.len()];
    for i in order {
        let n = layout.segments[i].allocated.len();
        if listed + n <= max_blocks {
            listed += n;
            keep[i] = true;
        } else {
            omitted += n as u64;
        }
    }
    let segments = layout
        .segments
        .iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|(s, _)| {
            let blocks = s
                .allocated
                .iter()
                .zip(s.owners.iter().chain(std::iter::repeat(&u32::MAX)))
                .zip(s.stacks.iter().chain(std::iter::repeat(&0)))
                .map(|((&(off, size), &owner), &stack)| {
                    let stack = st.stack(stack);
                    let owner = if owner == u32::MAX {
                        -1
                    } else {
                        i64::from(owner)
                    };
                    [off as i64, size as i64, owner, i64::from(stack)]
                })
                .collect();
            (s.address, s.size, blocks)
        })
        .collect();
    (segments, omitted)
}

/// `value` as JSON that can sit inside a `<script>` element.
pub fn script_json(value: &impl Serialize) -> String {
    serde_json::to_string(value)
        .expect("page data serializes")
        .replace('<', "\\u003c")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_string_can_close_the_script_element() {
        let s = script_json(&vec!["</script><script>alert(1)</script>".to_string()]);
        assert!(!s.contains('<'));
        let back: Vec<String> = serde_json::from_str(&s).unwrap();
        assert_eq!(back[0], "</script><script>alert(1)</script>");
    }

    #[test]
    fn stacks_and_frames_are_interned_once() {
        let mut calls = 0;
        let named = |f: &str| NamedFrame {
            function: f.into(),
            file: String::new(),
            line: 0,
            module: "trainer".into(),
            offset: 0,
            python: false,
            plumbing: f == "c10::alloc",
        };
        let mut names = |s: u32| {
            calls += 1;
            match s {
                1 => vec![named("c10::alloc"), named("f"), named("main")],
                2 => vec![named("g"), named("main")],
                _ => Vec::new(),
            }
        };
        let mut i = Interner {
            names: &mut names,
            frames: Vec::new(),
            plumbing: Vec::new(),
            frame_ids: HashMap::new(),
            stacks: vec![Vec::new()],
            stack_ids: HashMap::new(),
        };
        assert_eq!(i.stack(1), 1);
        assert_eq!(i.stack(2), 2);
        assert_eq!(i.stack(1), 1);
        assert_eq!(i.stack(9), 0);
        assert_eq!(i.frames, vec!["main", "f", "c10::alloc", "g"]);
        assert_eq!(i.plumbing, vec![0, 0, 1, 0]);
        assert_eq!(i.stacks[2], vec![0, 3]);
        drop(i);
        assert_eq!(calls, 3);
    }
}
