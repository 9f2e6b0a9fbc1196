//! The plain data every chart and the page are drawn from.
//!
//! Sans-IO and independent of where the numbers came from: the trace pass
//! ([`super::trace`]) fills the parts that need no allocator, the replay adapter
//! ([`super::from_replay`]) fills [`PolicyResult`]s. Everything here is already downsampled and
//! aggregated, so its size does not grow with the trace: a 10-million-event trace gives the same
//! few thousand numbers per chart as a small one.

/// How many time buckets a series has: about one per horizontal pixel of a chart.
pub const BUCKETS: usize = 600;

/// A time axis cut into equal buckets, shared by every series of a report so charts line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buckets {
    /// `CLOCK_MONOTONIC` ns of the start of bucket 0 (the first event of the trace).
    pub start_ns: u64,
    /// Ns covered by all buckets together; at least 1.
    pub span_ns: u64,
    pub count: usize,
}

impl Default for Buckets {
    fn default() -> Buckets {
        Buckets::new(0, 1, 1)
    }
}

impl Buckets {
    pub fn new(start_ns: u64, end_ns: u64, count: usize) -> Buckets {
        Buckets {
            start_ns,
            span_ns: end_ns.saturating_sub(start_ns).max(1),
            count: count.max(1),
        }
    }

    /// The bucket `time_ns` falls in, clamped to the range.
    #[inline]
    pub fn index(&self, time_ns: u64) -> usize {
        let offset = time_ns.saturating_sub(self.start_ns);
        // 64-bit arithmetic for any trace shorter than about a year; 128-bit beyond.
        let i = match offset.checked_mul(self.count as u64) {
            Some(scaled) => scaled / self.span_ns,
            None => (offset as u128 * self.count as u128 / self.span_ns as u128) as u64,
        };
        (i as usize).min(self.count - 1)
    }

    /// Start of bucket `i`, in ns since [`Buckets::start_ns`].
    pub fn offset_ns(&self, i: usize) -> u64 {
        (self.span_ns as u128 * i as u128 / self.count as u128) as u64
    }

    /// Middle of bucket `i`, in ns since [`Buckets::start_ns`], where its point is drawn.
    pub fn mid_ns(&self, i: usize) -> u64 {
        self.offset_ns(i).midpoint(self.offset_ns(i + 1))
    }
}

/// One quantity over time, downsampled: per bucket its largest value (so no peak is lost however
/// short) and its value at the bucket's end. A bucket with no step carries the previous value.
/// A series that stops early (a replay that ran out of memory) is shorter than its buckets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Series {
    pub max: Vec<u64>,
    pub last: Vec<u64>,
}

/// Builds a [`Series`] one step at a time.
#[derive(Debug, Clone)]
pub struct SeriesBuilder {
    buckets: Buckets,
    series: Series,
    seen: Vec<bool>,
}

impl SeriesBuilder {
    pub fn new(buckets: Buckets) -> SeriesBuilder {
        SeriesBuilder {
            buckets,
            series: Series {
                max: vec![0; buckets.count],
                last: vec![0; buckets.count],
            },
            seen: vec![false; buckets.count],
        }
    }

    /// The quantity is `value` from `time_ns` on.
    #[inline]
    pub fn step(&mut self, time_ns: u64, value: u64) {
        let i = self.buckets.index(time_ns);
        if self.seen[i] {
            self.series.max[i] = self.series.max[i].max(value);
        } else {
            self.seen[i] = true;
            self.series.max[i] = value;
        }
        self.series.last[i] = value;
    }

    /// The series up to and including the bucket of `time_ns`: nothing is known after it.
    pub fn finish_at(self, time_ns: u64) -> Series {
        let end = self.buckets.index(time_ns) + 1;
        let mut s = self.finish();
        s.max.truncate(end);
        s.last.truncate(end);
        s
    }

    pub fn finish(mut self) -> Series {
        let mut previous = 0;
        for i in 0..self.buckets.count {
            if self.seen[i] {
                // The value entering the bucket was `previous`; it held until the first step.
                self.series.max[i] = self.series.max[i].max(previous);
                previous = self.series.last[i];
            } else {
                self.series.max[i] = previous;
                self.series.last[i] = previous;
            }
        }
        self.series
    }
}

/// A maximum and when it was first reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Peak {
    pub time_ns: u64,
    pub bytes: u64,
}

/// Everything a report shows.
#[derive(Debug, Clone, Default)]
pub struct ReportData {
    pub trace: TraceFacts,
    pub buckets: Option<Buckets>,
    /// Policy names in the order they were asked for; a policy's colour is its index here.
    pub policy_names: Vec<String>,
    /// One per allocator instance (process × device), largest lower bound first.
    pub sections: Vec<Section>,
    /// Instances left out of `sections` (only the largest are drawn).
    pub sections_omitted: usize,
    pub sizes: Histogram,
    pub lifetimes: Histogram,
    /// The headline's answers; `None` when the trace holds nothing to tune.
    pub answers: Option<Headline>,
    /// The story of each recorded out-of-memory error ([`crate::oom_story`]), as `summary`
    /// tells it.
    pub oom_stories: Vec<crate::oom_story::OomStory>,
}

/// The answers of [`crate::answers::Answers`], and how many settings they were chosen among.
#[derive(Debug, Clone)]
pub struct Headline {
    pub answers: crate::answers::Answers,
    /// Settings replayed for them.
    pub tried: usize,
    /// Whether that was all of `vramtrace tune`'s settings, or each backend at its defaults.
    pub grid: crate::tune::Grid,
}

/// What the trace is, for the page's header.
#[derive(Debug, Clone, Default)]
pub struct TraceFacts {
    /// The file name as given on the command line.
    pub file: String,
    pub events: u64,
    pub failed_calls: u64,
    pub duration_ns: u64,
    pub complete: bool,
    /// `request`, `segment` or `unknown`.
    pub level: String,
    /// What the level means for the what-if figures, when it matters.
    pub level_warning: Option<String>,
    pub processes: Vec<ProcessFacts>,
    pub devices: Vec<String>,
    pub writer: String,
    pub host: String,
    pub allocations: u64,
    pub unmatched_frees: u64,
    /// True when stacks were turned into names (`--no-symbolize` not given).
    pub symbolized: bool,
}

#[derive(Debug, Clone, Default)]
pub struct ProcessFacts {
    pub pid: u32,
    pub command_line: String,
}

/// One allocator instance: the device memory one process allocated on one device.
#[derive(Debug, Clone, Default)]
pub struct Section {
    pub pid: u32,
    pub device: i32,
    pub allocations: u64,
    /// The device capacity the policies were replayed under, drawn as a line; `None` for
    /// unlimited.
    pub capacity: Option<u64>,
    /// Live requested bytes (what the program asked for and had not freed).
    pub requested: Series,
    /// Its maximum: the lower bound of every allocator.
    pub peak: Peak,
    /// Plain driver allocations made beside a stream-ordered pool (libraries bypassing the
    /// framework's allocator): not in `requested`, not replayed.
    pub outside_allocations: u64,
    pub outside_peak: u64,
    /// Those allocations by the library that made them, as `summary` splits them
    /// ([`crate::summary::GroupSummary::outside_by_library`]).
    pub outside_by_library: Vec<crate::summary::LibraryMemory>,
    /// The driver's own count against what the trace names
    /// ([`crate::summary::GroupSummary::driver_count`]).
    pub driver_count: Option<crate::driver_count::DriverCount>,
    pub policies: Vec<PolicyResult>,
    pub live_at_peak: LiveAtPeak,
    /// The allocation timeline over the whole trace.
    pub timeline: Timeline,
    /// The same, zoomed on the moments around the peak.
    pub timeline_at_peak: Timeline,
    /// Where memory moves: the shortest stretch of time holding most allocations and frees,
    /// widened to hold the peak, cut into buckets of its own (a finer level of detail).
    pub focus: Buckets,
    /// Live requested bytes over [`Section::focus`].
    pub requested_focus: Series,
    /// The largest allocations, for the per-allocation view; the rest are summarized.
    pub top: Vec<AllocationRecord>,
    /// Per allocating stack, what it allocated; most bytes at the peak first.
    pub stacks: Vec<StackUse>,
    /// Allocations the driver refused that the program survived (the first few thousand).
    pub refused: Vec<Refused>,
    pub refused_total: u64,
    /// The requests whose allocator states are kept one by one (the whole stream when it is
    /// short; around the peak and at moments over the focus window otherwise).
    pub windows: Vec<EventWindow>,
}

/// One allocation of the per-allocation view.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocationRecord {
    /// Its index among the section's allocations, in allocation order.
    pub index: u32,
    pub size: u64,
    /// Absolute ns; `death_ns` is `u64::MAX` for one never freed.
    pub birth_ns: u64,
    pub death_ns: u64,
    pub stack: u32,
    pub stream: u32,
}

/// What one stack allocated over the trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StackUse {
    pub stack: u32,
    pub allocations: u64,
    pub bytes: u64,
    /// Live bytes from it at the peak.
    pub bytes_at_peak: u64,
    /// Requests from it the driver refused.
    pub refused: u64,
}

/// A request the real driver refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refused {
    pub time_ns: u64,
    pub size: u64,
    pub stack: u32,
}

impl Section {
    /// A label for headings and file names: `process 4242, GPU 0`.
    pub fn label(&self) -> String {
        let device = if self.device < 0 {
            "no device".to_string()
        } else {
            format!("GPU {}", self.device)
        };
        format!("process {}, {device}", self.pid)
    }

    pub fn lower_bound(&self) -> u64 {
        self.peak.bytes
    }
}

/// One policy's replay of one allocator instance.
#[derive(Debug, Clone, Default)]
pub struct PolicyResult {
    pub name: String,
    /// Index into [`ReportData::policy_names`].
    pub index: usize,
    /// Its colour in every chart ([`super::style::policy_color`]).
    pub color: usize,
    pub reserved: Series,
    pub allocated: Series,
    /// Per bucket, the share of reserved bytes no live block uses at its end, in percent
    /// (1 − allocated / reserved); `None` where nothing was reserved.
    pub fragmentation: Vec<Option<f64>>,
    /// Reserved bytes over the section's [`Section::focus`] buckets.
    pub reserved_focus: Series,
    /// Its address space request by request over the section's [`Section::windows`].
    pub log: Vec<WindowLog>,
    pub peak_reserved: Peak,
    pub peak_allocated: u64,
    /// 1 − allocated / reserved when reserved peaked.
    pub fragmentation_at_peak: f64,
    pub device_allocs: u64,
    pub device_frees: u64,
    pub est_alloc_time_us: f64,
    pub oom: Option<OomFacts>,
    /// Of the recorded run's refused allocations ([`Section::refused_total`]), those this
    /// policy refused too.
    pub refused_as_recorded: u64,
    /// The policy's segments and blocks when reserved peaked.
    pub address_map: AddressLayout,
}

/// Where a replay ran out of memory.
#[derive(Debug, Clone, Default)]
pub struct OomFacts {
    /// CUDA stream index of the request.
    pub stream: u32,
    pub time_ns: u64,
    pub size: u64,
    pub reserved: u64,
    /// The request's stack id in the trace.
    pub stack_id: u32,
    /// The same, symbolized, outermost frame first.
    pub stack: Vec<String>,
}

/// A policy's address space at one moment.
#[derive(Debug, Clone, Default)]
pub struct AddressLayout {
    pub segments: Vec<SegmentLayout>,
}

/// One range held from the driver and what is inside it.
#[derive(Debug, Clone, Default)]
pub struct SegmentLayout {
    pub address: u64,
    pub size: u64,
    /// Handed-out blocks as (offset from the segment's start, size), sorted; the rest is free.
    pub allocated: Vec<(u64, u64)>,
    /// For each block of `allocated`, the index of the allocation it holds among the section's
    /// allocations ([`AllocationRecord::index`]); `u32::MAX` when unknown.
    pub owners: Vec<u32>,
    /// For each block of `allocated`, the trace stack of its allocation (0: none).
    pub stacks: Vec<u32>,
}

/// Consecutive requests of a section whose allocator states the page can show one by one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventWindow {
    /// The index of its first request in the section's request stream.
    pub first: usize,
    pub events: Vec<EventFacts>,
}

/// One request of an [`EventWindow`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventFacts {
    /// Absolute ns.
    pub time_ns: u64,
    /// `b'a'` allocation, `b'f'` free, `b't'` an attempt the driver refused, `b'c'` an
    /// `empty_cache`, `b'l'` a memory fraction set, `b'o'` an ordering of streams (a
    /// synchronization, an event record or a stream wait).
    pub kind: u8,
    pub size: u64,
    /// Trace stack id.
    pub stack: u32,
    /// The allocation it makes or ends (index among the section's allocations); `u32::MAX`
    /// for an attempt.
    pub allocation: u32,
}

/// One change a request made to a policy's address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateChange {
    AddSegment {
        address: u64,
        size: u64,
    },
    RemoveSegment {
        address: u64,
    },
    /// A block handed out to `owner` (allocation index) allocated from trace stack `stack`.
    AddBlock {
        address: u64,
        size: u64,
        owner: u32,
        stack: u32,
    },
    RemoveBlock {
        address: u64,
    },
}

/// A policy's states over one [`EventWindow`]: the state before it, and each request's changes.
#[derive(Debug, Clone, Default)]
pub struct WindowLog {
    /// Index into [`Section::windows`].
    pub window: usize,
    /// The address space before the window's first request.
    pub key: AddressLayout,
    /// Per request of the window, in order, its changes; shorter than the window when the
    /// replay ran out of memory in it or the log's budget ran out.
    pub changes: Vec<Vec<StateChange>>,
}

/// What was live when requested bytes peaked, by allocating stack.
#[derive(Debug, Clone, Default)]
pub struct LiveAtPeak {
    pub peak: Peak,
    /// Largest first.
    pub stacks: Vec<LiveStack>,
}

/// Live bytes allocated from one stack.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveStack {
    /// Frame names, outermost (`main`) first; empty when the trace has no stack for it.
    pub frames: Vec<String>,
    pub bytes: u64,
}

/// Allocations stacked over time, as PyTorch's memory_viz "active memory timeline" draws them.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// Sample instants, ns since the trace's start, increasing.
    pub times_ns: Vec<u64>,
    /// The drawn allocations, each a band stacked on those born before it.
    pub bands: Vec<Band>,
    /// Per sample, the top edge: the highest live total of its slice of time, or what the
    /// bands live at the sample add up to when that is more.
    pub top: Vec<u64>,
    /// Per sample, the highest live total of its slice of time less what the bands show (too
    /// small or too short to see, or a peak between samples), drawn on top as one grey band.
    pub rest: Vec<u64>,
    /// How many allocations the window holds in all, and how many are drawn as bands.
    pub allocations: u64,
}

/// One allocation in a [`Timeline`]: its offset from the bottom at each sample it spans.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Band {
    pub size: u64,
    /// Ns since the trace's start, clamped to the window.
    pub birth_ns: u64,
    pub death_ns: u64,
    /// Index into `times_ns` of the first sample it is live at.
    pub first_sample: usize,
    /// The band's bottom at each sample from `first_sample` on.
    pub offsets: Vec<u64>,
}

/// Requests counted in log-scale bins.
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    pub bins: Vec<Bin>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bin {
    /// `≤ 4 KiB`, `1–10 ms`, `never freed`.
    pub label: String,
    pub count: u64,
    pub bytes: u64,
}
