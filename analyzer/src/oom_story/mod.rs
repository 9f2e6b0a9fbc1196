//! The story of a recorded out-of-memory error, on one screen (docs/definitions.md, "OOM
//! story"): the request the allocator refused (size, stream, the user's line), what was live
//! then by line, what the allocator held cached but free, segment by segment (is it
//! fragmentation: the largest free block against the request), the limit it ran under, and
//! which selectable setting, or else which limit, would have served it, ending with the line
//! to paste.
//!
//! The refused request is the last one the trace records for its process and device (the one
//! the program died of when it did). "Would have served it" is asked of the program as far as
//! that request, with the request asked for as the program asked for it (an allocation, not an
//! attempt the real driver already refused): `tune`'s search over every selectable setting
//! under the recorded limit ([`crate::tune::tune_model`]), and when none serves it `fit`'s
//! bisection of the recorded setting ([`crate::replay::fit_one`]). No second search.

use crate::limits::{ProcessLimit, ProcessLimits};
use crate::model::device::CUDA_CONTEXT_BYTES;
use crate::model::{Model, RequestKind, RequestStream, pytorch_alloc_conf};
use crate::policy::alloc_conf::spec_from_alloc_conf;
use crate::policy::driver::H200_TOTAL_MEMORY;
use crate::policy::pytorch::fraction_for_cap;
use crate::policy::{AddressOrder, BuildContext, PolicyError, PolicySpec, build};
use crate::replay::{address_map_at, driver, fit_one};
use crate::symbolize::{StackBytes, StackNames, top_stacks};
use crate::tune::{Grid, Recorded, tune_model};
use serde::Serialize;
use vramtrace_format::{Device, Metadata};

mod text;
pub use text::render;

/// Lines of live memory shown, and segments with free cache.
pub const SHOWN: usize = 5;

/// One recorded out-of-memory error, told.
#[derive(Debug, Clone, Serialize)]
pub struct OomStory {
    pub pid: u32,
    pub device: i32,
    /// The refused request's place in its stream's requests.
    pub request_index: usize,
    /// From the trace's first event.
    pub time_ns: u64,
    pub size: u64,
    /// The CUDA stream handle it was asked on.
    pub stream: u64,
    /// The user's line ([`StackBytes::site`]'s rule); empty without a stack.
    pub site: String,
    /// The request's stack, outermost frame first.
    pub frames: Vec<String>,
    /// Requested bytes live just before it.
    pub live_requested: u64,
    /// The largest of them by the user's line (stacks that end on the same line are one).
    pub live_by_line: Vec<LineBytes>,
    /// The recorded setting's cache just before it; `None` when the trace does not say which
    /// allocator ran.
    pub cache: Option<Cache>,
    /// The limit the process ran under then, as the trace records it.
    pub limit: Option<Limit>,
    /// The limit `served_by` was replayed under: the program's recorded cap, when it is what
    /// refused the request (the device had room); `None` when the trace does not record the
    /// limit that refused it, and then no setting is named, only `smallest`.
    pub served_within: Option<u64>,
    /// Selectable settings whose replay within `served_within` serves the request, best first
    /// (tune's order), the recorded one left out.
    pub served_by: Vec<Served>,
    /// When none does: the smallest limit at which the recorded setting serves it.
    pub smallest: Option<Smallest>,
    /// The line to paste, or `None` when nothing found serves it on this device.
    pub paste: Option<String>,
}

/// Live bytes of one user line.
#[derive(Debug, Clone, Serialize)]
pub struct LineBytes {
    /// The user's line; empty for objects recorded without a stack.
    pub site: String,
    pub bytes: u64,
    pub count: u64,
}

/// `stacks` merged by their user line, most bytes first, the first [`SHOWN`].
fn by_line(stacks: Vec<StackBytes>) -> Vec<LineBytes> {
    let mut lines: Vec<LineBytes> = Vec::new();
    for s in stacks {
        match lines.iter_mut().find(|l| l.site == s.site) {
            Some(l) => {
                l.bytes += s.bytes;
                l.count += s.count;
            }
            None => lines.push(LineBytes {
                site: s.site,
                bytes: s.bytes,
                count: s.count,
            }),
        }
    }
    lines.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.site.cmp(&b.site)));
    lines.truncate(SHOWN);
    lines
}

/// The allocator's memory just before the refused request.
#[derive(Debug, Clone, Serialize)]
pub struct Cache {
    /// The policy replayed (the recorded setting), under the limits the trace records: where
    /// it records none that refused the request, the cache shown is the run's without it.
    pub policy: String,
    pub reserved: u64,
    /// Cached blocks nobody holds.
    pub cached_free: u64,
    pub largest_free_block: u64,
    /// Cached free bytes would have held the request but no single free block did.
    pub fragmentation: bool,
    /// The segments with the most free bytes, most first.
    pub segments: Vec<SegmentFree>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SegmentFree {
    pub address: u64,
    pub size: u64,
    pub free: u64,
    pub largest_free_block: u64,
}

/// The limit in force when the request was refused.
#[derive(Debug, Clone, Serialize)]
pub struct Limit {
    /// The memory fraction the program had set by then, if any.
    pub fraction: Option<f64>,
    /// `fraction × totalGlobalMem`.
    pub cap_bytes: Option<u64>,
    pub device_total: Option<u64>,
    /// Free on the device at the first refusal, as CUDA said.
    pub free_on_device: Option<u64>,
    /// The cap reached, or the device full ([`ProcessLimit::verdict`]).
    pub verdict: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Served {
    pub setting: String,
    pub select: String,
    /// Its pool peak over the run as far as the request.
    pub pool_peak_reserved: u64,
    /// Room left within [`OomStory::served_within`] at that peak.
    pub headroom: Option<u64>,
}

/// The smallest limit at which the recorded setting serves the request.
#[derive(Debug, Clone, Serialize)]
pub struct Smallest {
    pub policy: String,
    pub capacity_bytes: u64,
    /// `set_per_process_memory_fraction`'s argument for it on the recorded device.
    pub memory_fraction: Option<f64>,
}

/// The story of every (process, device) whose trace records a refused request; `limits` are
/// its events' ([`crate::limits::limits`]), `metadata` and `devices` its own.
pub fn stories(
    metadata: &Metadata,
    devices: &[Device],
    limits: &ProcessLimits,
    model: &Model,
    recorded: &Recorded,
    names: &StackNames,
) -> Result<Vec<OomStory>, PolicyError> {
    let spec = spec_from_alloc_conf(pytorch_alloc_conf(metadata).unwrap_or_default(), None).ok();
    let mut out = Vec::new();
    for stream in &model.streams {
        let Some(at) = stream
            .requests
            .iter()
            .rposition(|r| r.kind == RequestKind::Attempt)
        else {
            continue;
        };
        let key = stream.key.expect("model streams have keys");
        let r = stream.requests[at];
        let limit = limits.get(&(key.pid, key.device));
        let mut story = OomStory {
            pid: key.pid,
            device: key.device,
            request_index: at,
            time_ns: r.time_ns.saturating_sub(model.start_ns),
            size: r.size,
            stream: stream
                .cuda_streams
                .get(r.stream as usize)
                .copied()
                .unwrap_or(0),
            site: top_stacks(std::iter::once((r.stack, r.size)), names, 1)
                .pop()
                .map_or(String::new(), |s| s.site),
            frames: names.frames(r.stack),
            live_requested: stream.live_before(at).iter().map(|o| o.1).sum(),
            live_by_line: by_line(top_stacks(
                stream.live_before(at).into_iter(),
                names,
                usize::MAX,
            )),
            cache: match (&spec, torch_tracker(stream)) {
                (Some(spec), true) => Some(cache(stream, at, spec)?),
                _ => None,
            },
            limit: limit.map(|l| limit_then(l, stream, at, r.size)),
            served_within: None,
            served_by: Vec::new(),
            smallest: None,
            paste: None,
        };
        let upto = as_far_as(stream, at);
        let alone = Model {
            streams: vec![upto.clone()],
            ..model.clone()
        };
        // The program's cap refused it when it is recorded and the device had room.
        let cap = story
            .limit
            .as_ref()
            .filter(|l| l.free_on_device.is_none_or(|f| f >= r.size))
            .and_then(|l| l.cap_bytes);
        story.served_within = cap;
        if let Some(within) = cap {
            // The stream's own fraction caps every setting's replay.
            if let Some(t) = tune_model(
                devices,
                &alone,
                recorded,
                None,
                None,
                CUDA_CONTEXT_BYTES,
                Grid::Full,
            )? {
                story.served_by = t
                    .ranked
                    .iter()
                    .filter(|row| !row.oom && !row.recorded && row.pool_peak_reserved <= within)
                    .map(|row| Served {
                        setting: row.setting.clone(),
                        select: row.select.clone(),
                        pool_peak_reserved: row.pool_peak_reserved,
                        headroom: Some(within - row.pool_peak_reserved),
                    })
                    .collect();
            }
        }
        story.paste = story.served_by.first().map(|s| s.select.clone());
        if story.served_by.is_empty()
            && let Some(spec) = &spec
        {
            let fit = fit_one(&upto, spec)?;
            story.smallest = fit.min_capacity_bytes.map(|c| {
                let total = stream.device_total.unwrap_or(H200_TOTAL_MEMORY);
                Smallest {
                    policy: spec.to_string(),
                    capacity_bytes: c,
                    memory_fraction: (c < total).then(|| fraction_for_cap(c, total)),
                }
            });
            story.paste = story
                .smallest
                .as_ref()
                .and_then(|s| s.memory_fraction)
                .map(|f| format!("torch.cuda.set_per_process_memory_fraction({f})"));
        }
        out.push(story);
    }
    Ok(out)
}

/// True when PyTorch's tracker reported the stream's requests: the recorded setting is then the
/// allocator that ran, and its replay is that run's cache.
fn torch_tracker(stream: &RequestStream) -> bool {
    stream.recorded_peak_reserved.is_some()
}

/// The program as far as request `at`, which is asked as the program asked it.
fn as_far_as(stream: &RequestStream, at: usize) -> RequestStream {
    let mut s = stream.clone();
    s.requests.truncate(at + 1);
    s.requests[at].kind = RequestKind::Alloc;
    s
}

/// The recorded setting's cache after the requests before `at`.
fn cache(stream: &RequestStream, at: usize, spec: &PolicySpec) -> Result<Cache, PolicyError> {
    let capacity = stream.device_total.unwrap_or(u64::MAX);
    let mut policy = build(spec, &BuildContext { stream, capacity })?;
    let start = driver(stream, capacity, AddressOrder::Rising);
    let map = if at == 0 {
        Default::default()
    } else {
        address_map_at(policy.as_mut(), &stream.requests, at - 1, start)
    };
    let mut segments: Vec<SegmentFree> = map
        .segments
        .iter()
        .map(|seg| {
            let inside = map.blocks.iter().filter(|b| {
                b.slot.is_none()
                    && b.address >= seg.address
                    && b.address + b.size <= seg.address + seg.size
            });
            SegmentFree {
                address: seg.address,
                size: seg.size,
                free: inside.clone().map(|b| b.size).sum(),
                largest_free_block: inside.map(|b| b.size).max().unwrap_or(0),
            }
        })
        .collect();
    let cached_free = segments.iter().map(|s| s.free).sum();
    let largest = segments
        .iter()
        .map(|s| s.largest_free_block)
        .max()
        .unwrap_or(0);
    let size = stream.requests[at].size;
    segments.retain(|s| s.free > 0);
    segments.sort_by(|a, b| b.free.cmp(&a.free).then(a.address.cmp(&b.address)));
    segments.truncate(SHOWN);
    Ok(Cache {
        policy: spec.to_string(),
        reserved: map.segments.iter().map(|s| s.size).sum(),
        cached_free,
        largest_free_block: largest,
        fragmentation: cached_free >= size && largest < size,
        segments,
    })
}

/// The limit in force at request `at` of `stream`: the fraction the program had set by then.
fn limit_then(l: &ProcessLimit, stream: &RequestStream, at: usize, size: u64) -> Limit {
    let fraction = stream.requests[..at]
        .iter()
        .rev()
        .find(|r| r.kind == RequestKind::MemoryFraction)
        .map(|r| r.fraction())
        .filter(|&f| f < 1.0);
    let device_total = stream.device_total.or(l.device_total);
    Limit {
        fraction,
        cap_bytes: fraction
            .zip(device_total)
            .map(|(f, t)| (f * t as f64) as u64),
        device_total,
        free_on_device: l.free_at_first_oom,
        verdict: l.verdict(size).map(str::to_string),
    }
}
