//! The request stream: the allocations and frees one allocator instance would have served.

use serde::Serialize;

/// Which allocator instance a stream belongs to: each process has its own allocator per device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct StreamKey {
    pub pid: u32,
    pub device: i32,
}

/// Whether a request asks for memory or gives it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestKind {
    Alloc,
    Free,
    /// An allocation the driver refused (the program may have survived it: a library catching
    /// the out-of-memory error and taking another path, as cuDNN does for workspaces). A policy
    /// tries it without getting new memory from the driver: it may serve it from its cache (and
    /// gives it back at once), else its retry path runs (freeing cache) as it did in the
    /// program. Its slot is free again right after.
    Attempt,
    /// The program emptied its allocator's cache (`torch.cuda.empty_cache()`); no slot.
    EmptyCache,
    /// The program capped its allocator's reserved memory at a fraction of the device
    /// (`torch.cuda.set_per_process_memory_fraction`): `size` holds the fraction's `f64` bits
    /// ([`Request::fraction`]); no slot.
    MemoryFraction,
    /// What orders the program's streams (formats/SPEC.md §4.4): what lets a stream-ordered
    /// pool reuse a free on another stream, or tells it that a free is complete. No slot:
    /// `slot` numbers the CUDA event concerned ([`Order`]).
    Order(Order),
}

/// What an [`RequestKind::Order`] request says. Events are numbered per request stream in
/// first-seen order (`slot`); a record replaces the event's earlier record, as in CUDA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Order {
    /// The host saw the whole device's work complete (`cuCtxSynchronize`); no stream, no event.
    Device,
    /// The host saw `stream`'s work complete (`cuStreamSynchronize`, or `cuStreamQuery`
    /// answering done); no event.
    Stream,
    /// The host saw event `slot` complete (`cuEventSynchronize`, or `cuEventQuery` answering
    /// done): the work of its stream up to its record; no stream.
    Event,
    /// Event `slot` recorded on `stream` ([`NO_STREAM`]: a stream no request of this stream
    /// uses).
    Record,
    /// `stream` waits for event `slot` (`cuStreamWaitEvent`).
    Wait,
}

/// One allocation or free, in the order the program made them.
///
/// Objects are named by `slot`, a small integer that is reused once its object is freed (like a
/// file descriptor), so policies index plain vectors by it and their memory stays proportional
/// to the live set, not to the trace length. A free carries the size of the object it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub time_ns: u64,
    pub size: u64,
    pub slot: u32,
    /// Index into [`RequestStream::cuda_streams`]; indices follow the handles' numeric order.
    pub stream: u32,
    pub stack: u32,
    pub kind: RequestKind,
}

/// `stream` of a request that is served on no stream ([`RequestKind::EmptyCache`],
/// [`RequestKind::MemoryFraction`]).
pub const NO_STREAM: u32 = u32::MAX;

impl Request {
    /// True for the requests that ask for or give back memory of a slot (not a limit, a cache
    /// release or an ordering).
    pub fn has_slot(&self) -> bool {
        matches!(
            self.kind,
            RequestKind::Alloc | RequestKind::Free | RequestKind::Attempt
        )
    }

    /// The fraction a [`RequestKind::MemoryFraction`] request sets.
    pub fn fraction(&self) -> f64 {
        f64::from_bits(self.size)
    }

    pub fn alloc(slot: u32, size: u64, stream: u32) -> Request {
        Request {
            time_ns: 0,
            size,
            slot,
            stream,
            stack: 0,
            kind: RequestKind::Alloc,
        }
    }

    pub fn free(slot: u32, size: u64) -> Request {
        Request {
            time_ns: 0,
            size,
            slot,
            stream: 0,
            stack: 0,
            kind: RequestKind::Free,
        }
    }
}

/// The requests of one (process, device), ready to replay.
#[derive(Debug, Clone, Default)]
pub struct RequestStream {
    pub key: Option<StreamKey>,
    pub requests: Vec<Request>,
    /// CUDA stream handles, sorted; a request's `stream` indexes this.
    pub cuda_streams: Vec<u64>,
    /// One more than the largest slot used: the most objects ever live at once.
    pub slots: u32,
    /// Device memory this process took from the driver past its allocator, not replayed.
    pub outside: Outside,
    /// The requests counted in `outside`, in order (their stacks say which library made them:
    /// `summary`'s `outside_by_library`).
    pub outside_requests: Vec<Request>,
    /// The `cudaMalloc`s the real caching allocator made, in order, as (address, bytes), when
    /// the trace records them (an imported PyTorch snapshot, or the `torch.segment_alloc`s of
    /// PyTorch's tracker); empty otherwise. A replay hands
    /// these addresses out while its own segment sizes follow them.
    pub recorded_segments: Vec<(u64, u64)>,
    /// The peak of what the process's own allocator reported holding from the driver
    /// (PyTorch's `torch.segment_*` events), when the trace has it: what a replay with the
    /// policy of the recorded allocator should reproduce.
    pub recorded_peak_reserved: Option<u64>,
    /// How many segments (or pages) that allocator gave back to the driver
    /// (`torch.segment_free` / `torch.segment_unmap`): PyTorch's `num_device_free`.
    pub recorded_segment_frees: u64,
    /// The device's total bytes as the driver reported them (`device.memory`), when recorded:
    /// what PyTorch multiplies a memory fraction by.
    pub device_total: Option<u64>,
}

/// Plain driver allocations made beside a stream-ordered-pool request stream (see
/// `Model::from_events`): held by the process under any allocator, so not replayed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Outside {
    pub allocations: u64,
    /// The most of these bytes live at once.
    pub peak_bytes: u64,
}

impl RequestStream {
    /// A stream from requests built by hand (tests, benchmarks): slots and streams are taken
    /// as given.
    pub fn from_requests(requests: Vec<Request>) -> RequestStream {
        let slots = requests.iter().map(|r| r.slot + 1).max().unwrap_or(0);
        let streams = requests.iter().map(|r| r.stream + 1).max().unwrap_or(1);
        RequestStream {
            key: None,
            requests,
            cuda_streams: (0..u64::from(streams)).collect(),
            slots,
            outside: Outside::default(),
            outside_requests: Vec::new(),
            recorded_segments: Vec::new(),
            recorded_peak_reserved: None,
            recorded_segment_frees: 0,
            device_total: None,
        }
    }

    /// The lower bound of every allocator: the largest sum of live requested bytes.
    pub fn lower_bound(&self) -> u64 {
        self.tally().lower_bound
    }

    /// The figures of the requests that one pass over them gives ([`Tally`]).
    pub fn tally(&self) -> Tally {
        let mut t = Tally::default();
        let mut live = 0u64;
        for (i, r) in self.requests.iter().enumerate() {
            match r.kind {
                RequestKind::Alloc => {
                    t.allocations += 1;
                    live = live.saturating_add(r.size);
                    if live > t.lower_bound {
                        (t.lower_bound, t.peak_at) = (live, Some(i));
                    }
                }
                RequestKind::Free => live = live.saturating_sub(r.size),
                RequestKind::Attempt => t.attempts += 1,
                RequestKind::MemoryFraction => t.memory_fraction = Some(r.fraction()),
                RequestKind::EmptyCache | RequestKind::Order(_) => {}
            }
        }
        t
    }

    /// What was live when the requested bytes first reached their peak
    /// ([`RequestStream::lower_bound`]), as (stack, bytes) per object.
    pub fn live_at_peak(&self) -> Vec<(u32, u64)> {
        match self.tally().peak_at {
            Some(at) => self.live_before(at + 1),
            None => Vec::new(),
        }
    }

    /// What was live just before request `index`, as (stack, bytes) per object.
    pub fn live_before(&self, index: usize) -> Vec<(u32, u64)> {
        let mut objects: Vec<Option<(u32, u64)>> = vec![None; self.slots as usize];
        for r in self.requests[..index].iter().filter(|r| r.has_slot()) {
            let Some(o) = objects.get_mut(r.slot as usize) else {
                continue;
            };
            match r.kind {
                RequestKind::Alloc => *o = Some((r.stack, r.size)),
                RequestKind::Free => *o = None,
                _ => {}
            }
        }
        objects.into_iter().flatten().collect()
    }

    /// The last memory fraction the program set ([`RequestKind::MemoryFraction`]), if any.
    pub fn memory_fraction(&self) -> Option<f64> {
        self.tally().memory_fraction
    }

    /// This stream without the program's own memory fraction calls
    /// ([`RequestKind::MemoryFraction`]): what `fit` replays, since the smallest limit is what
    /// it looks for. Borrowed when the stream has none.
    pub fn without_memory_fraction(&self) -> std::borrow::Cow<'_, RequestStream> {
        if self
            .requests
            .iter()
            .all(|r| r.kind != RequestKind::MemoryFraction)
        {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut s = self.clone();
        s.requests.retain(|r| r.kind != RequestKind::MemoryFraction);
        std::borrow::Cow::Owned(s)
    }

    pub fn allocations(&self) -> usize {
        self.tally().allocations
    }
}

/// What one pass over a stream's requests counts ([`RequestStream::tally`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tally {
    /// The largest sum of live requested bytes ([`RequestStream::lower_bound`]).
    pub lower_bound: u64,
    /// The request that first reached it (`None` when nothing was allocated).
    pub peak_at: Option<usize>,
    /// [`RequestKind::Alloc`] requests.
    pub allocations: usize,
    /// [`RequestKind::Attempt`] requests: the allocations the recorded run was refused.
    pub attempts: u64,
    /// The last memory fraction the program set ([`RequestKind::MemoryFraction`]), if any.
    pub memory_fraction: Option<f64>,
}

/// Hands out slots, lowest-recently-freed first.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    free: Vec<u32>,
    next: u32,
}

impl Slots {
    pub(crate) fn take(&mut self) -> u32 {
        self.free.pop().unwrap_or_else(|| {
            self.next += 1;
            self.next - 1
        })
    }

    pub(crate) fn give_back(&mut self, slot: u32) {
        self.free.push(slot);
    }

    pub(crate) fn high_water(&self) -> u32 {
        self.next
    }
}
