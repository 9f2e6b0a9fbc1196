//! What `vramtrace summary` reports: peaks, counts, size classes, the stacks that hold memory at
//! the peak, leaks and failed allocations, per process and device, as the trace itself saw them.
//!
//! Sans-IO: [`Summary::of`] takes a decoded trace and returns data. No allocator is modelled:
//! *requested* and *reserved* here are what the recorded program and driver did
//! (docs/architecture.md, "Definitions"), not a policy's prediction. It reads a walk of the
//! trace's changes (`summary/tally.rs`): its allocation table's rows ([`AllocationTable`]), as
//! `diff`, the failure sites and the exporters do, or a pass over its events that keeps none
//! ([`Summary::streamed`], the report's); stacks are named and ranked by `symbolize`.

mod tally;

use crate::driver_count::{CUDA_CONTEXT, DriverCount};
use crate::failures::FailureSite;
use crate::model::table::{AllocationTable, Object};
use crate::model::{CaptureLevel, Model, RequestKind, RequestStream, StepPass, StreamKey, load};
use crate::sums::SaturatingSum;
use crate::symbolize::{
    ModuleFiles, NoFiles, StackBytes, StackNames, Symbolizer, TOP_STACKS, library_of,
    top_counted_stacks, top_stacks,
};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
pub use tally::SIZE_CLASSES;
use tally::{GroupAcc, Tally};
use vramtrace_format::{Event, MemoryKind, Tables, Trace};

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SizeClass {
    pub class: &'static str,
    pub min_bytes: u64,
    pub count: u64,
    pub bytes: u64,
}

/// Everything `summary` prints.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    /// `request`, `segment`, or empty: the metadata's word, else inferred from the events
    /// ([`crate::model::detect_level`]).
    pub capture_level: String,
    /// The level as every command's text shows it ([`crate::model::LevelReport::shown`]).
    #[serde(skip)]
    pub capture_level_shown: String,
    /// True when the allocator's requests and its own segments are both present (a PyTorch tracker
    /// trace, an imported snapshot).
    pub has_allocator_segments: bool,
    pub events: u64,
    pub failed_allocations: u64,
    /// Frees of memory the trace never saw allocated.
    pub unmatched_frees: u64,
    pub groups: Vec<GroupSummary>,
}

/// One process on one device (`device` −1: host memory).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GroupSummary {
    pub pid: u32,
    pub device: i32,
    /// Everything requested on the device, memory outside the allocator's pool included.
    pub peak_requested: u64,
    /// The peak of the requests an allocator serves (the replays' lower bound), when the
    /// process also allocated outside the pool (docs/definitions.md); `null` otherwise.
    pub pool_peak_requested: Option<u64>,
    pub peak_requested_time_ns: u64,
    pub peak_reserved: u64,
    pub peak_reserved_time_ns: u64,
    pub allocations: u64,
    pub frees: u64,
    pub failed: u64,
    pub by_kind: Vec<KindSummary>,
    pub by_stream: Vec<StreamSummary>,
    /// Stacks holding the most requested bytes at the moment requested bytes peaked.
    pub top_stacks_at_peak: Vec<StackBytes>,
    /// The memory outside the pool ([`crate::model::Outside`]: driver calls beside the
    /// framework's allocator) by the library that made it ([`crate::symbolize::library_of`]),
    /// the most held at once first; left out when there is none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outside_by_library: Vec<LibraryMemory>,
    /// The driver's own count of the process's memory against what the trace names
    /// ([`crate::driver_count`]); `null` when the recorder had no NVML to ask.
    pub driver_count: Option<DriverCount>,
    pub leaks: Leaks,
    /// Failed allocations grouped by site, in the order they first failed.
    pub failures: Vec<FailureSite>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KindSummary {
    pub kind: MemoryKind,
    /// Allocator segments of an imported snapshot, listed apart from the requests.
    pub allocator_segments: bool,
    pub peak_live: u64,
    pub allocations: u64,
    pub frees: u64,
    pub failed: u64,
    pub bytes_allocated: u64,
    pub size_classes: Vec<SizeClass>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StreamSummary {
    pub stream: u64,
    pub peak_live: u64,
    pub allocations: u64,
}

/// Requested memory still live when the trace ends (at exit for a recorded program; at the
/// moment of the dump for a snapshot).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Leaks {
    pub bytes: u64,
    pub count: u64,
    pub stacks: Vec<StackBytes>,
}

/// One library's memory outside the pool, in one process on one device.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LibraryMemory {
    pub library: String,
    pub allocations: u64,
    /// The bytes it allocated, summed.
    pub bytes: u64,
    /// The most of its bytes live at once.
    pub peak_bytes: u64,
    /// Where its largest allocation (the first of that size) came from in the program: the
    /// user's frame ([`Symbolizer::site_index`]) among the stack's Python frames; `null`
    /// without Python frames.
    pub site: Option<String>,
}

/// The set-aside requests of `stream` ([`RequestStream::outside_requests`]) by library, the
/// largest peak first (ties by name).
fn outside_by_library(stream: &RequestStream, names: &StackNames) -> Vec<LibraryMemory> {
    // Per library: its figures, its live bytes, and its largest allocation's size and stack.
    let mut by: BTreeMap<&'static str, (LibraryMemory, u64, (u64, u32))> = BTreeMap::new();
    let mut of_slot: HashMap<u32, (&'static str, u64)> = HashMap::new();
    for r in &stream.outside_requests {
        match r.kind {
            RequestKind::Alloc => {
                let library = library_of(&names.named(r.stack));
                of_slot.insert(r.slot, (library, r.size));
                let (m, live, largest) = by.entry(library).or_insert_with(|| {
                    let m = LibraryMemory {
                        library: library.to_string(),
                        allocations: 0,
                        bytes: 0,
                        peak_bytes: 0,
                        site: None,
                    };
                    (m, 0, (0, r.stack))
                });
                if r.size > largest.0 {
                    *largest = (r.size, r.stack);
                }
                m.allocations += 1;
                m.bytes = m.bytes.saturating_add(r.size);
                *live = live.saturating_add(r.size);
                m.peak_bytes = m.peak_bytes.max(*live);
            }
            RequestKind::Free => {
                if let Some((library, size)) = of_slot.remove(&r.slot)
                    && let Some((_, live, _)) = by.get_mut(library)
                {
                    *live = live.saturating_sub(size);
                }
            }
            _ => {}
        }
    }
    let mut list: Vec<LibraryMemory> = by
        .into_values()
        .map(|(mut m, _, (_, stack))| {
            let python: Vec<_> = names
                .named(stack)
                .into_iter()
                .filter(|f| f.python)
                .collect();
            m.site = Symbolizer::site_index(&python).map(|i| python[i].text());
            m
        })
        .collect();
    by_peak(&mut list);
    list
}

/// The largest peak first (ties by name).
fn by_peak(list: &mut [LibraryMemory]) {
    list.sort_by(|a, b| {
        b.peak_bytes
            .cmp(&a.peak_bytes)
            .then(a.library.cmp(&b.library))
    });
}

/// The contexts' own memory as a library outside the pool, when the driver's counts measured it.
fn context_row(count: &DriverCount) -> Option<LibraryMemory> {
    let bytes = count.context_bytes.filter(|&b| b > 0)?;
    Some(LibraryMemory {
        library: CUDA_CONTEXT.to_string(),
        allocations: count.contexts,
        bytes,
        peak_bytes: bytes,
        site: None,
    })
}

impl Summary {
    pub fn of(trace: &Trace) -> Summary {
        Summary::with_top(trace, TOP_STACKS)
    }

    /// Like [`Summary::of`], ranking `top` stacks at each peak (`diff` wants them all).
    pub fn with_top(trace: &Trace, top: usize) -> Summary {
        Summary::with_files(trace, top, &mut NoFiles)
    }

    /// Like [`Summary::with_top`], naming native frames from the modules' files as `report`
    /// does (the binary passes its ELF reader).
    pub fn with_files(trace: &Trace, top: usize, files: &mut dyn ModuleFiles) -> Summary {
        let (model, table) = load(trace);
        Summary::with_table(&trace.tables, &table, &model, top, files)
    }

    /// Like [`Summary::with_files`], with the trace's request model and allocation table
    /// already built ([`load`]; `report` builds them once for all its parts); `tables` are the
    /// trace's, which name the stacks.
    pub fn with_table(
        tables: &Tables,
        table: &AllocationTable,
        model: &Model,
        top: usize,
        files: &mut dyn ModuleFiles,
    ) -> Summary {
        let names = StackNames::new(tables, files);
        let mut tally = Tally::new(&names, table.start_ns);
        table.walk(&mut tally);
        let live: Vec<Object> = table.live_at_end().collect();
        Summary::tallied(tally, &live, table, model, &names, top)
    }

    /// Like [`Summary::with_table`], from a pass over the trace's events that keeps no row
    /// ([`StepPass`]): `table` is a first pass's, whose rows are not read (it may keep none),
    /// and `events` hands its argument every event of the trace once more, in file order, each
    /// as the first pass read it (its stack named alike); what it returns ends the pass.
    pub fn streamed<E>(
        tables: &Tables,
        table: &AllocationTable,
        model: &Model,
        top: usize,
        files: &mut dyn ModuleFiles,
        events: impl FnOnce(&mut dyn FnMut(&Event)) -> Result<(), E>,
    ) -> Result<Summary, E> {
        let names = StackNames::new(tables, files);
        let mut pass = StepPass::new(table.shape, Tally::new(&names, table.start_ns));
        events(&mut |e| pass.push(e))?;
        let (tally, live) = pass.finish();
        Ok(Summary::tallied(tally, &live, table, model, &names, top))
    }

    /// The summary of what the walk counted, `live` being the objects live at the end; `table`
    /// gives the trace's totals (its rows are not read).
    fn tallied(
        tally: Tally,
        live: &[Object],
        table: &AllocationTable,
        model: &Model,
        names: &StackNames,
        top: usize,
    ) -> Summary {
        let Tally {
            groups,
            failures: sites,
            driver_counts: counts,
        } = tally;
        // Leaks: requested objects still live at the end.
        let mut leaks: HashMap<(u32, i32), Vec<Object>> = HashMap::new();
        for o in live.iter().filter(|o| o.requested) {
            leaks.entry((o.pid, o.device)).or_default().push(*o);
        }

        let mut failures: HashMap<(u32, i32), Vec<FailureSite>> = HashMap::new();
        for f in sites.finish() {
            failures.entry((f.pid, f.device)).or_default().push(f);
        }

        let mut driver_counts = counts.finish();
        let at_peak = stacks_at_peaks(&groups, &leaks, names, top);

        let mut groups: Vec<GroupSummary> = groups
            .into_iter()
            .map(|((pid, device), g)| {
                let leaked = leaks.remove(&(pid, device)).unwrap_or_default();
                GroupSummary {
                    pid,
                    device,
                    peak_requested: g.peak.requested,
                    pool_peak_requested: None,
                    peak_requested_time_ns: g.peak_time.0,
                    peak_reserved: g.peak.reserved,
                    peak_reserved_time_ns: g.peak_time.1,
                    allocations: g.allocations,
                    frees: g.frees,
                    failed: g.failed,
                    by_kind: g
                        .kinds
                        .into_iter()
                        .map(|((kind, segment), k)| KindSummary {
                            kind,
                            allocator_segments: segment,
                            peak_live: k.peak,
                            allocations: k.allocations,
                            frees: k.frees,
                            failed: k.failed,
                            bytes_allocated: k.bytes,
                            size_classes: SIZE_CLASSES
                                .iter()
                                .zip(k.classes)
                                .filter(|(_, (n, _))| *n > 0)
                                .map(|(&(min, class), (count, bytes))| SizeClass {
                                    class,
                                    min_bytes: min,
                                    count,
                                    bytes,
                                })
                                .collect(),
                        })
                        .collect(),
                    by_stream: g
                        .streams
                        .into_iter()
                        .map(|(stream, (_, peak, n))| StreamSummary {
                            stream,
                            peak_live: peak,
                            allocations: n,
                        })
                        .collect(),
                    top_stacks_at_peak: at_peak.get(&(pid, device)).cloned().unwrap_or_default(),
                    outside_by_library: Vec::new(),
                    driver_count: driver_counts.remove(&(pid, device)),
                    leaks: Leaks {
                        bytes: leaked.iter().map(|o| o.size).saturating_sum(),
                        count: leaked.len() as u64,
                        stacks: top_stacks(leaked.iter().map(Object::stack_bytes), names, top),
                    },
                    failures: failures.remove(&(pid, device)).unwrap_or_default(),
                }
            })
            .collect();
        let level = match model.level.level {
            CaptureLevel::Unknown => "",
            known => known.name(),
        };
        for g in &mut groups {
            let key = Some(StreamKey {
                pid: g.pid,
                device: g.device,
            });
            if let Some(stream) = model
                .streams
                .iter()
                .find(|s| s.key == key && s.outside.allocations > 0)
            {
                g.pool_peak_requested = Some(stream.lower_bound());
                g.outside_by_library = outside_by_library(stream, names);
            }
            if let Some(row) = g.driver_count.as_ref().and_then(context_row) {
                g.outside_by_library.push(row);
                by_peak(&mut g.outside_by_library);
            }
        }
        Summary {
            capture_level: level.to_string(),
            capture_level_shown: model.level.shown(),
            has_allocator_segments: table.split_levels(),
            events: table.events,
            failed_allocations: table.failures.len() as u64,
            unmatched_frees: table.unmatched_frees,
            groups,
        }
    }
}

/// The stacks live at each group's peak, ranked; `leaks` are the requested objects live at the
/// end, by group.
fn stacks_at_peaks(
    groups: &BTreeMap<(u32, i32), GroupAcc>,
    leaks: &HashMap<(u32, i32), Vec<Object>>,
    names: &StackNames,
    top: usize,
) -> HashMap<(u32, i32), Vec<StackBytes>> {
    groups
        .iter()
        .filter(|(_, g)| g.peak.requested > 0)
        .map(|(key, g)| {
            let live = leaks.get(key).map_or(&[][..], Vec::as_slice);
            let stacks = top_counted_stacks(g.stacks_at_peak(live), names, top);
            (*key, stacks)
        })
        .collect()
}

#[cfg(test)]
mod tests;
