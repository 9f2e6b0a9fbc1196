//! The model of a trace: per (process, device) the request stream of its device memory, built
//! as a [`Follow`]er of the allocation table's pass ([`TableBuilder`]), from the same matched
//! frees and in the same pass as the table's rows, so that the replays read what every other
//! view reads. A caller that replays only keeps no row ([`Loader::requests_only`]).

use super::level::{LevelReport, detect_level};
use super::ordering::{has_event, has_stream, order_of};
use super::request::{
    NO_STREAM, Order, Outside, Request, RequestKind, RequestStream, Slots, StreamKey,
};
use super::table::{AllocationTable, Follow, TableBuilder, lane};
use std::collections::{HashMap, HashSet};
use vramtrace_format::conventions::{
    ALLOCATOR_SEGMENT, BEFORE_HISTORY, REMAINDER, memory_fraction,
};
use vramtrace_format::{Api, Event, MemoryKind, Metadata, Op, Trace};

/// The hasher of the model's maps: a fast one (SipHash was a fifth of the load time), seeded
/// at random so that a crafted trace cannot aim at collisions.
type Hasher = foldhash::fast::RandomState;

/// Everything the replay and the reports derive from a trace's events.
#[derive(Debug, Clone, Default)]
pub struct Model {
    /// One stream per (process, device) that allocated device memory, in key order.
    pub streams: Vec<RequestStream>,
    pub level: LevelReport,
    /// The time of the trace's first event ([`AllocationTable::start_ns`]).
    pub start_ns: u64,
}

/// `CUDA_ERROR_OUT_OF_MEMORY`.
const CUDA_ERROR_OUT_OF_MEMORY: u32 = 2;

struct Builder {
    key: StreamKey,
    requests: Vec<Request>,
    /// CUDA stream handles (see [`super::table::lane`]) in the order first seen; a request's
    /// `stream` indexes this until [`finish`] renumbers them in handle order.
    handles: Vec<u64>,
    /// Each handle's index in `handles`: requests come in runs on one stream.
    stream_ids: FirstSeen<u64>,
    /// Per handle: whether a request of a slot ([`Builder::push`]) was made on it.
    used: Vec<bool>,
    /// Whether any request of a slot was a plain driver call ([`is_driver`]): only those are
    /// ever set aside ([`finish`]).
    drivers: bool,
    /// The memory kind of each request's call, to set aside what bypassed the allocator.
    kinds: Vec<MemoryKind>,
    /// The address each `cuMemAlloc*` among the requests named, in order: those are PyTorch's
    /// segments when its tracker reported one there (VMM memory, found by its handle, is
    /// PyTorch's when the tracker reported mappings).
    driver_addresses: Vec<u64>,
    /// Segments PyTorch's tracker reported (their driver calls are no requests).
    torch_segments: HashSet<u64, Hasher>,
    /// True when the tracker reported expandable-segment mappings.
    torch_maps: bool,
    /// Bytes PyTorch reported holding from the driver, now and at most.
    torch_reserved: u64,
    torch_peak_reserved: Option<u64>,
    /// Segments (or pages) PyTorch reported giving back.
    torch_segment_frees: u64,
    /// The device's total bytes (`device.memory`), when recorded.
    device_total: Option<u64>,
    slots: Slots,
    /// The `cudaMalloc`s the real caching allocator made, as (address, bytes), in order: an
    /// imported snapshot's segment events or PyTorch's tracker's `torch.segment_alloc`s
    /// ([`RequestStream::recorded_segments`]).
    segments: Vec<(u64, u64)>,
    /// CUDA event handles, numbered in first-seen order ([`Order`]).
    events: FirstSeen<u64>,
}

/// Numbers keys in the order first seen, from 0, and remembers the last key asked: a trace's
/// events come in long runs of one process and device, and of one CUDA stream.
struct FirstSeen<K> {
    numbers: HashMap<K, u32, Hasher>,
    last: Option<(K, u32)>,
}

impl<K> Default for FirstSeen<K> {
    fn default() -> FirstSeen<K> {
        FirstSeen {
            numbers: HashMap::default(),
            last: None,
        }
    }
}

impl<K: Copy + Eq + std::hash::Hash> FirstSeen<K> {
    /// The number of `key`, and whether it was first seen now (its number is then the count of
    /// keys seen before it).
    #[inline(always)]
    fn number(&mut self, key: K) -> (u32, bool) {
        match self.last {
            Some((k, n)) if k == key => (n, false),
            _ => self.look_up(key),
        }
    }

    /// [`FirstSeen::number`] of a key other than the last one.
    fn look_up(&mut self, key: K) -> (u32, bool) {
        let next = self.numbers.len() as u32;
        let n = *self.numbers.entry(key).or_insert(next);
        self.last = Some((key, n));
        (n, n == next)
    }

    /// The number of `key`, if it was seen.
    fn get(&self, key: K) -> Option<u32> {
        self.numbers.get(&key).copied()
    }
}

/// What one request is, beside its slot and its kind: the call's time, bytes, lane and stack.
struct Call {
    time_ns: u64,
    size: u64,
    lane: u64,
    stack: u32,
}

impl Call {
    /// The call `e`, of `size` bytes (a free's are its allocation's).
    fn of(e: &Event, size: u64) -> Call {
        Call {
            time_ns: e.time_ns,
            size,
            lane: lane(e),
            stack: e.stack,
        }
    }
}

/// What the model keeps of a live object that made a request: its stream (the builder's index
/// in [`Requests::builders`]) and the index of its allocation among the stream's requests, whose
/// slot its free gives back and whose kind and bytes the free repeats. Eight bytes, moved at
/// every allocation and free with the matcher's entry.
#[derive(Debug)]
struct LiveRequest {
    builder: u32,
    request: u32,
}

/// The request streams, as the pass's changes build them ([`Follow`]).
///
/// An object of device memory (driver, pool, VMM or PyTorch block) that no
/// [`ALLOCATOR_SEGMENT`] flag marks is a request, and its free (or the allocation that took its
/// address without a free seen, just before that allocation) gives its slot back; a refused
/// allocation is an attempt; the marks are the limit, ordering and PyTorch segment requests.
#[derive(Default)]
struct Requests {
    /// One builder per (process, device), in the order first seen; [`Requests::finish`] puts
    /// them in key order.
    builders: Vec<Builder>,
    /// Each builder's index, by key.
    index: FirstSeen<StreamKey>,
}

impl Follow for Requests {
    type Live = Option<LiveRequest>;

    fn born(&mut self, e: &Event) -> Option<LiveRequest> {
        if e.flags & ALLOCATOR_SEGMENT != 0 {
            // An imported snapshot's record of what the real caching allocator did: the
            // replay predicts these, it must not replay them as requests. The addresses of
            // its `cudaMalloc`s are the real driver's, which the replay reuses.
            if e.api == Api::CuMemAlloc_v2 && e.flags & (BEFORE_HISTORY | REMAINDER) == 0 {
                self.of(stream_key(e)).segments.push((e.address, e.size));
            }
            return None;
        }
        let kind = e.api.kind();
        if !matches!(
            kind,
            MemoryKind::Device | MemoryKind::Pool | MemoryKind::Vmm | MemoryKind::TorchBlock
        ) {
            return None;
        }
        let builder = self.index_of(stream_key(e));
        let b = &mut self.builders[builder as usize];
        let request = u32::try_from(b.requests.len()).expect("fewer than 2^32 requests a stream");
        let slot = b.slots.take();
        b.push(
            kind,
            e.address,
            &Call::of(e, e.size),
            slot,
            RequestKind::Alloc,
        );
        Some(LiveRequest { builder, request })
    }

    fn ended(&mut self, born: Option<LiveRequest>, e: &Event) {
        let Some(l) = born else { return };
        let b = &mut self.builders[l.builder as usize];
        let (alloc, kind) = (b.requests[l.request as usize], b.kinds[l.request as usize]);
        b.slots.give_back(alloc.slot);
        b.push(
            kind,
            e.address,
            &Call::of(e, alloc.size),
            alloc.slot,
            RequestKind::Free,
        );
    }

    fn failed(&mut self, e: &Event) {
        attempt(self, e);
    }

    fn marked(&mut self, e: &Event) {
        see_mark(self, e);
    }
}

impl Requests {
    /// The index of the builder of stream `key`, made if it is new.
    #[inline(always)]
    fn index_of(&mut self, key: StreamKey) -> u32 {
        let (i, new) = self.index.number(key);
        if new {
            self.add(key);
        }
        i
    }

    /// A builder for stream `key`, seen for the first time.
    #[cold]
    fn add(&mut self, key: StreamKey) {
        self.builders.push(Builder::new(key));
    }

    /// The builder of stream `key`, made if it is new.
    fn of(&mut self, key: StreamKey) -> &mut Builder {
        let i = self.index_of(key);
        &mut self.builders[i as usize]
    }

    /// The builder of stream `key`, when one was made.
    fn get_mut(&mut self, key: StreamKey) -> Option<&mut Builder> {
        let i = self.index.get(key)?;
        Some(&mut self.builders[i as usize])
    }

    /// The model of the streams built; `table` is the pass's, `metadata` the trace's, for its
    /// capture level.
    fn finish(self, table: &AllocationTable, metadata: &Metadata) -> Model {
        let mut builders = self.builders;
        builders.sort_unstable_by_key(|b| b.key);
        Model {
            streams: builders
                .into_iter()
                // A stream of recorded segments alone (no request) is nothing to replay.
                .filter(|b| !b.requests.is_empty() || b.segments.is_empty())
                .map(finish)
                .collect(),
            level: detect_level(metadata, &table.level_facts),
            start_ns: table.start_ns,
        }
    }
}

/// The one stream a load has built so far ([`Loader::growing`]).
#[derive(Debug, Clone, Copy)]
pub struct Growing<'a> {
    pub key: StreamKey,
    /// The requests so far, their streams numbered in first-seen order.
    pub requests: &'a [Request],
    /// The CUDA stream handles seen so far, in first-seen order (what the requests' `stream`
    /// indexes).
    pub handles: &'a [u64],
    /// The device's total bytes, when recorded so far.
    pub device_total: Option<u64>,
}

/// The one loading path: one pass over a trace's events, in file order, builds its allocation
/// table and its request model from the same matched frees.
pub struct Loader(TableBuilder<Requests>);

impl Loader {
    /// A pass that keeps the table's rows, for a caller with views of the recorded trace.
    pub fn with_rows() -> Loader {
        Loader(TableBuilder::new(Requests::default(), true))
    }

    /// A pass that keeps no row (the table has its totals and lists, [`AllocationTable::len`]
    /// is 0): for a caller that replays only, which then holds no more than the requests.
    pub fn requests_only() -> Loader {
        Loader(TableBuilder::new(Requests::default(), false))
    }

    /// Takes the next event in file order.
    #[inline]
    pub fn push(&mut self, e: &Event) {
        self.0.push(e);
    }

    /// The request stream being built, when the events pushed so far concern one (process,
    /// device) only: what a replay running beside the load reads as it grows. Its requests and
    /// their stream indices are as first seen: [`Loader::finish`] may still set some aside and
    /// renumber the CUDA streams ([`finish`]).
    pub fn growing(&self) -> Option<Growing<'_>> {
        let [b] = &self.0.follower().builders[..] else {
            return None;
        };
        Some(Growing {
            key: b.key,
            requests: &b.requests,
            handles: &b.handles,
            device_total: b.device_total,
        })
    }

    /// The model and the table of every event pushed; `metadata` is the trace's.
    pub fn finish(self, metadata: &Metadata) -> (Model, AllocationTable) {
        let (table, requests) = self.0.finish();
        (requests.finish(&table, metadata), table)
    }
}

impl Model {
    /// Builds the model from events in call order ([`Loader::requests_only`]).
    pub fn from_events(events: impl IntoIterator<Item = Event>, metadata: &Metadata) -> Model {
        let mut loader = Loader::requests_only();
        events.into_iter().for_each(|e| loader.push(&e));
        loader.finish(metadata).0
    }
}

/// The trace's request model and its allocation table, rows and all, from one pass over its
/// events ([`Loader::with_rows`]).
pub fn load(trace: &Trace) -> (Model, AllocationTable) {
    let mut loader = Loader::with_rows();
    trace.events().for_each(|e| loader.push(&e));
    loader.finish(&trace.metadata)
}

/// A failed call `e`: a refused allocation of device memory is an attempt (its slot free again
/// at once).
fn attempt(requests: &mut Requests, e: &Event) {
    let kind = e.api.kind();
    if e.flags & ALLOCATOR_SEGMENT != 0
        || e.result != CUDA_ERROR_OUT_OF_MEMORY
        || e.api.op() != Op::Alloc
        || !matches!(
            kind,
            MemoryKind::Device | MemoryKind::Pool | MemoryKind::TorchBlock
        )
    {
        return;
    }
    let b = requests.of(stream_key(e));
    let slot = b.slots.take();
    b.slots.give_back(slot);
    b.push(
        kind,
        e.address,
        &Call::of(e, e.size),
        slot,
        RequestKind::Attempt,
    );
}

/// A mark: a limit, an ordering call or PyTorch's word on a segment.
fn see_mark(requests: &mut Requests, e: &Event) {
    let key = stream_key(e);
    match e.api.kind() {
        MemoryKind::Limits => see_limit(requests, e),
        MemoryKind::Ordering => {
            // Before any request of its (process, device) an ordering call orders no free.
            if let (Some(order), Some(b)) = (order_of(e), requests.get_mut(key)) {
                b.push_order(e, order);
            }
        }
        MemoryKind::TorchSegment => requests.of(key).see_torch_segment(e),
        // PyTorch's `empty_cache` under backend:cudaMallocAsync: a device synchronize, then
        // the pool trimmed to nothing.
        _ => {
            if let Some(b) = requests.get_mut(key) {
                b.push_limit(e, RequestKind::EmptyCache, 0);
            }
        }
    }
}

/// A §4.3 event (formats/SPEC.md): the device's total bytes, a memory fraction the program set
/// (a request of its stream, replayed in order), an `empty_cache` (a request of every stream
/// of the process: PyTorch empties the cache of every device).
fn see_limit(requests: &mut Requests, e: &Event) {
    match e.api {
        Api::DeviceMemory if e.device >= 0 => {
            requests.of(stream_key(e)).device_total = Some(e.size);
        }
        Api::TorchSetMemoryFraction if e.device >= 0 && memory_fraction(e).is_some() => {
            requests
                .of(stream_key(e))
                .push_limit(e, RequestKind::MemoryFraction, e.aux);
        }
        Api::TorchEmptyCache => {
            for b in requests.builders.iter_mut().filter(|b| b.key.pid == e.pid) {
                b.push_limit(e, RequestKind::EmptyCache, 0);
            }
        }
        _ => {}
    }
}

impl Builder {
    /// A request of no slot and no stream ([`Request::has_slot`]).
    fn push_limit(&mut self, e: &Event, kind: RequestKind, size: u64) {
        self.kinds.push(MemoryKind::Limits);
        self.requests.push(Request {
            time_ns: e.time_ns,
            size,
            slot: 0,
            stream: NO_STREAM,
            stack: e.stack,
            kind,
        });
    }

    /// A request of no slot that orders streams: its stream numbered as a request's, its event
    /// numbered in first-seen order.
    fn push_order(&mut self, e: &Event, order: Order) {
        let stream = if has_stream(order) {
            self.stream_index(e.stream)
        } else {
            NO_STREAM
        };
        let slot = if has_event(order) {
            self.events.number(e.handle).0
        } else {
            0
        };
        self.kinds.push(MemoryKind::Ordering);
        self.requests.push(Request {
            time_ns: e.time_ns,
            size: 0,
            slot,
            stream,
            stack: e.stack,
            kind: RequestKind::Order(order),
        });
    }

    fn new(key: StreamKey) -> Builder {
        Builder {
            key,
            requests: Vec::new(),
            handles: Vec::new(),
            stream_ids: FirstSeen::default(),
            used: Vec::new(),
            drivers: false,
            kinds: Vec::new(),
            driver_addresses: Vec::new(),
            torch_segments: HashSet::default(),
            torch_maps: false,
            torch_reserved: 0,
            torch_peak_reserved: None,
            torch_segment_frees: 0,
            device_total: None,
            slots: Slots::default(),
            segments: Vec::new(),
            events: FirstSeen::default(),
        }
    }

    /// A `torch.segment_*` event: its address marks the driver call that made it as PyTorch's,
    /// and its bytes move what the process really reserved. A `torch.segment_alloc` is one of
    /// the real allocator's `cudaMalloc`s, whose address the replay reuses, as an imported
    /// snapshot's.
    fn see_torch_segment(&mut self, e: &Event) {
        let op = e.api.op();
        if op == Op::Alloc && e.succeeded() {
            self.segments.push((e.address, e.size));
        }
        match op {
            Op::Alloc | Op::Map => {
                self.torch_segments.insert(e.address);
                self.torch_maps |= op == Op::Map;
                self.torch_reserved += e.size;
            }
            _ => {
                self.torch_reserved = self.torch_reserved.saturating_sub(e.size);
                self.torch_segment_frees += 1;
            }
        }
        let peak = self
            .torch_peak_reserved
            .unwrap_or(0)
            .max(self.torch_reserved);
        self.torch_peak_reserved = Some(peak);
    }

    /// Adds the request in `slot` that `call`, of `kind` and at `address`, made. Its stream is
    /// numbered in first-seen order here; the final indices follow the handles' numeric order
    /// (as PyTorch's block comparator orders streams by handle value), known only once every
    /// handle has been seen.
    #[inline(always)]
    fn push(&mut self, kind: MemoryKind, address: u64, call: &Call, slot: u32, what: RequestKind) {
        let stream = self.stream_index(call.lane);
        self.used[stream as usize] = true;
        self.drivers |= is_driver(kind);
        self.kinds.push(kind);
        if kind == MemoryKind::Device {
            self.driver_addresses.push(address);
        }
        self.requests.push(Request {
            time_ns: call.time_ns,
            size: call.size,
            slot,
            stream,
            stack: call.stack,
            kind: what,
        });
    }

    /// The first-seen index of stream `handle`.
    fn stream_index(&mut self, handle: u64) -> u32 {
        let (i, new) = self.stream_ids.number(handle);
        if new {
            self.handles.push(handle);
            self.used.push(false);
        }
        i
    }
}

/// The stream key of `e`'s (process, device).
fn stream_key(e: &Event) -> StreamKey {
    StreamKey {
        pid: e.pid,
        device: e.device,
    }
}

/// Orders the stream's requests for replay.
///
/// When a process's requests go through the stream-ordered pool (`cuMemAllocAsync`: PyTorch
/// under `backend:cudaMallocAsync`, which `vramtrace record --requests` selects, or an imported
/// snapshot), its plain `cuMemAlloc` calls come from libraries that bypass the framework's
/// allocator (cuBLAS, cuDNN and NCCL handles, the runtime): under any framework allocator they
/// would still be driver allocations of their own. Replaying them through the policy would
/// count them as tensors and misplace everything after them, so they are set aside as
/// [`Outside`] memory (measured on the H200: six such calls, 134,481,920 bytes, in every
/// PyTorch run, outside `memory_stats()`; samples/README.md).
///
/// When PyTorch's trace tracker reported the process's requests (`torch.alloc`), its driver
/// allocations are PyTorch's segments, which the replay predicts and must not replay, or
/// memory taken past PyTorch (set aside as [`Outside`], as above). A driver allocation is a
/// segment when the tracker reported a segment at its address; with expandable segments,
/// every VMM allocation is taken as PyTorch's.
///
/// Works in place: the requests are the bulk of a model's memory.
fn finish(b: Builder) -> RequestStream {
    let Builder {
        key,
        mut requests,
        handles,
        used,
        drivers,
        kinds,
        driver_addresses,
        torch_segments,
        torch_maps,
        torch_peak_reserved,
        torch_segment_frees,
        device_total,
        slots,
        segments,
        ..
    } = b;
    let mut outside = Outside::default();
    let mut outside_requests = Vec::new();
    // The streams the kept requests use: a stream that only set-aside requests used is dropped.
    // Only driver calls are set aside: without one every request stays, and the streams used
    // are those the requests of a slot named.
    let used = if drivers {
        set_aside(
            &mut requests,
            kinds,
            driver_addresses,
            &torch_segments,
            torch_maps,
            (&mut outside, &mut outside_requests),
            handles.len(),
        )
    } else {
        used
    };
    requests.shrink_to_fit();
    let mut sorted: Vec<u64> = handles
        .iter()
        .zip(&used)
        .filter(|&(_, &u)| u)
        .map(|(&h, _)| h)
        .collect();
    sorted.sort_unstable();
    // Every stream used and first seen in rising order: the numbers stand, and no ordering
    // request names an unused stream.
    if sorted != handles {
        // Set-aside requests' streams are not in `sorted`; no kept request names them.
        let index: Vec<u32> = handles
            .iter()
            .map(|h| sorted.binary_search(h).map_or(u32::MAX, |i| i as u32))
            .collect();
        for r in requests.iter_mut().filter(|r| r.stream != NO_STREAM) {
            r.stream = index[r.stream as usize];
        }
        // A synchronization of, or a wait by, a stream no kept request uses orders nothing
        // here (a record there stays: its event marks no free).
        requests.retain(|r| {
            !matches!(r.kind, RequestKind::Order(Order::Stream | Order::Wait))
                || r.stream != NO_STREAM
        });
    }
    RequestStream {
        key: Some(key),
        requests,
        cuda_streams: sorted,
        slots: slots.high_water(),
        outside,
        outside_requests,
        recorded_segments: segments,
        recorded_peak_reserved: torch_peak_reserved,
        recorded_segment_frees: torch_segment_frees,
        device_total,
    }
}

/// Sets aside, out of `requests` (one of `kinds` each, one of `driver_addresses` per
/// `cuMemAlloc`), the driver calls that bypassed the framework's allocator, counted into
/// `outside` ([`finish`] says which); returns, per one of `handles` streams, whether a kept
/// request of a slot uses it.
fn set_aside(
    requests: &mut Vec<Request>,
    kinds: Vec<MemoryKind>,
    driver_addresses: Vec<u64>,
    torch_segments: &HashSet<u64, Hasher>,
    torch_maps: bool,
    (outside, outside_requests): (&mut Outside, &mut Vec<Request>),
    handles: usize,
) -> Vec<bool> {
    let through_pool = kinds.contains(&MemoryKind::Pool);
    let through_tracker = kinds.contains(&MemoryKind::TorchBlock);
    let mut live = 0u64;
    let mut used = vec![false; handles];
    let mut kinds = kinds.into_iter();
    let mut addresses = driver_addresses.into_iter();
    requests.retain(|r| {
        let k = kinds.next().expect("one kind per request");
        let address = (k == MemoryKind::Device)
            .then(|| addresses.next().expect("one address per cuMemAlloc"));
        if matches!(k, MemoryKind::Limits | MemoryKind::Ordering) {
            return true;
        }
        let bypass = if through_tracker {
            is_driver(k)
        } else {
            through_pool && k == MemoryKind::Device
        };
        if !bypass {
            used[r.stream as usize] = true;
            return true;
        }
        if through_tracker
            && (address.is_some_and(|a| torch_segments.contains(&a))
                || k == MemoryKind::Vmm && torch_maps)
        {
            return false;
        }
        match r.kind {
            RequestKind::Alloc => {
                outside.allocations += 1;
                live = live.saturating_add(r.size);
                outside.peak_bytes = outside.peak_bytes.max(live);
            }
            RequestKind::Free => live = live.saturating_sub(r.size),
            RequestKind::Attempt
            | RequestKind::EmptyCache
            | RequestKind::MemoryFraction
            | RequestKind::Order(_) => return false,
        }
        outside_requests.push(*r);
        false
    });
    used
}

/// A plain driver allocation (`cuMemAlloc*`, VMM), as opposed to a pool's or PyTorch's.
fn is_driver(kind: MemoryKind) -> bool {
    matches!(kind, MemoryKind::Device | MemoryKind::Vmm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramtrace_format::Api;

    fn ev(api: Api, pid: u32, address: u64, size: u64, stream: u64) -> Event {
        Event {
            pid,
            device: 0,
            address,
            size,
            stream,
            ..Event::new(api)
        }
    }

    #[test]
    fn limits_become_requests_of_their_streams_and_the_device_total_is_kept() {
        use vramtrace_format::conventions::fraction_bits;
        let mut info = ev(Api::DeviceMemory, 1, 0, 150 << 30, 0);
        info.aux = 100 << 30;
        let mut fraction = ev(Api::TorchSetMemoryFraction, 1, 0, 0, 0);
        fraction.aux = fraction_bits(0.03);
        let mut other_device = ev(Api::TorchAlloc, 1, 0xf000, 64, 5);
        other_device.device = 1;
        let mut empty = ev(Api::TorchEmptyCache, 1, 0, 0, 0);
        empty.device = -1;
        let events = vec![
            info,
            fraction,
            ev(Api::TorchAlloc, 1, 0xa000, 100, 7),
            other_device,
            ev(Api::TorchFreeCompleted, 1, 0xa000, 100, 7),
            empty,
            ev(Api::TorchAlloc, 1, 0xb000, 200, 7),
        ];
        let m = Model::from_events(events, &Metadata::default());
        assert_eq!(m.streams.len(), 2);
        let s = &m.streams[0];
        assert_eq!(s.device_total, Some(150 << 30));
        let kinds: Vec<(RequestKind, u32)> =
            s.requests.iter().map(|r| (r.kind, r.stream)).collect();
        assert_eq!(
            kinds,
            [
                (RequestKind::MemoryFraction, NO_STREAM),
                (RequestKind::Alloc, 0),
                (RequestKind::Free, 0),
                (RequestKind::EmptyCache, NO_STREAM),
                (RequestKind::Alloc, 0),
            ]
        );
        assert_eq!(s.requests[0].fraction(), 0.03);
        // The limit requests name no CUDA stream: only the program's own stream is listed.
        assert_eq!(s.cuda_streams, [7]);
        // `empty_cache` empties every device's cache; the other device has no total recorded.
        let other = &m.streams[1];
        assert_eq!(other.device_total, None);
        assert_eq!(other.requests[1].kind, RequestKind::EmptyCache);
    }

    #[test]
    fn an_address_handed_out_again_without_a_free_ends_its_old_object_in_every_pass() {
        // The driver handed 0xa000 out twice: the free between was not seen.
        let events = vec![
            ev(Api::CuMemAlloc_v2, 1, 0xa000, 300, 0),
            ev(Api::CuMemAlloc_v2, 1, 0xa000, 100, 0),
            ev(Api::CuMemAlloc_v2, 1, 0xb000, 50, 0),
            ev(Api::CuMemAlloc_v2, 1, 0xc000, 200, 0),
        ];
        let m = Model::from_events(events.clone(), &Metadata::default());
        let kinds: Vec<_> = m.streams[0]
            .requests
            .iter()
            .map(|r| (r.kind, r.size))
            .collect();
        assert_eq!(
            kinds,
            [
                (RequestKind::Alloc, 300),
                (RequestKind::Free, 300),
                (RequestKind::Alloc, 100),
                (RequestKind::Alloc, 50),
                (RequestKind::Alloc, 200),
            ]
        );
        // 100 + 50 + 200 live at the end, not 650.
        assert_eq!(m.streams[0].lower_bound(), 350);
        // The table and the streaming device peak end it at the same event.
        let table = AllocationTable::from_events(events.clone());
        let mut steps = table.steps();
        steps.through(3);
        assert_eq!(steps.totals(1, 0).reserved, 350);
        let mut peak = crate::model::live::DevicePeak::default();
        events.iter().for_each(|e| peak.see(e));
        assert_eq!(peak.peak(), 350);
    }

    #[test]
    fn each_process_gets_its_own_stream_with_reused_slots() {
        let events = vec![
            ev(Api::CuMemAllocAsync, 1, 0xa000, 100, 7),
            ev(Api::CuMemAlloc_v2, 2, 0xb000, 300, 0),
            ev(Api::CuMemFreeAsync, 1, 0xa000, 0, 7),
            ev(Api::CuMemAllocAsync, 1, 0xc000, 200, 3),
            ev(Api::CuMemHostAlloc, 1, 0xd000, 4096, 0),
        ];
        let m = Model::from_events(events, &Metadata::default());
        assert_eq!(m.streams.len(), 2);
        let s = &m.streams[0];
        assert_eq!(s.key, Some(StreamKey { pid: 1, device: 0 }));
        let kinds: Vec<_> = s
            .requests
            .iter()
            .map(|r| (r.kind, r.slot, r.size))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (RequestKind::Alloc, 0, 100),
                (RequestKind::Free, 0, 100),
                (RequestKind::Alloc, 0, 200)
            ]
        );
        // Stream indices follow the handles' numeric order: 3 < 7.
        assert_eq!(s.cuda_streams, vec![3, 7]);
        assert_eq!((s.requests[0].stream, s.requests[2].stream), (1, 0));
        // Pinned host memory makes no request: process 1's stream has only its three.
        assert_eq!(s.requests.len(), 3);
    }

    #[test]
    fn streams_come_in_key_order_whatever_order_their_processes_first_appear_in() {
        let events = [
            ev(Api::CuMemAlloc_v2, 2, 0xb000, 300, 0),
            ev(Api::CuMemAlloc_v2, 1, 0xa000, 100, 0),
            ev(Api::CuMemFree_v2, 2, 0xb000, 0, 0),
            ev(Api::CuMemAlloc_v2, 1, 0xc000, 50, 0),
            ev(Api::CuMemFree_v2, 1, 0xa000, 0, 0),
        ];
        let mut loader = Loader::requests_only();
        loader.push(&events[0]);
        // One (process, device) so far: the stream a replay beside the load reads.
        let growing = loader.growing().map(|g| (g.key.pid, g.requests.len()));
        assert_eq!(growing, Some((2, 1)));
        events[1..].iter().for_each(|e| loader.push(e));
        assert!(loader.growing().is_none());
        let (m, table) = loader.finish(&Metadata::default());
        assert_eq!(table.pids.iter().copied().collect::<Vec<_>>(), [1, 2]);
        let streams: Vec<_> = m
            .streams
            .iter()
            .map(|s| {
                let requests: Vec<_> = s.requests.iter().map(|r| (r.kind, r.size)).collect();
                (s.key.map(|k| k.pid), requests)
            })
            .collect();
        assert_eq!(
            streams,
            [
                (
                    Some(1),
                    vec![
                        (RequestKind::Alloc, 100),
                        (RequestKind::Alloc, 50),
                        (RequestKind::Free, 100)
                    ]
                ),
                (
                    Some(2),
                    vec![(RequestKind::Alloc, 300), (RequestKind::Free, 300)]
                ),
            ]
        );
    }

    #[test]
    fn failed_calls_are_never_live_and_refused_allocations_become_attempts() {
        let mut refused = ev(Api::CuMemAllocAsync, 1, 0, 1 << 30, 0);
        refused.result = CUDA_ERROR_OUT_OF_MEMORY;
        let mut invalid = ev(Api::CuMemAllocAsync, 1, 0, 64, 0);
        invalid.result = 1;
        let events = [refused, invalid, ev(Api::CuMemFreeAsync, 1, 0xdead, 0, 0)];
        let mut loader = Loader::requests_only();
        events.iter().for_each(|e| loader.push(e));
        let (m, table) = loader.finish(&Metadata::default());
        assert_eq!((table.failed_calls, table.unmatched_frees), (2, 1));
        let r = &m.streams[0].requests;
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].kind, r[0].size), (RequestKind::Attempt, 1 << 30));
        assert_eq!(m.streams[0].lower_bound(), 0);
    }

    #[test]
    fn pytorch_tracker_events_are_the_requests_and_its_segments_no_requests() {
        let torch = |api: Api, address: u64, size: u64| Event {
            pid: 1,
            device: 0,
            address,
            size,
            ..Event::new(api)
        };
        let events = vec![
            ev(Api::CuMemAlloc_v2, 1, 0x1000_0000, 2 << 20, 0),
            torch(Api::TorchSegmentAlloc, 0x1000_0000, 2 << 20),
            torch(Api::TorchAlloc, 0x1000_0000, 1000),
            // cuBLAS's workspace: past PyTorch's allocator.
            ev(Api::CuMemAlloc_v2, 1, 0x2000_0000, 4 << 20, 0),
            Event {
                pool: 7,
                ..torch(Api::TorchAlloc, 0x1000_0400, 512)
            },
            torch(Api::TorchFreeRequested, 0x1000_0000, 1000),
            torch(Api::TorchFreeCompleted, 0x1000_0000, 1000),
            ev(Api::CuMemFree_v2, 1, 0x1000_0000, 0, 0),
            torch(Api::TorchSegmentFree, 0x1000_0000, 2 << 20),
        ];
        let m = Model::from_events(events, &Metadata::default());
        assert_eq!(m.streams.len(), 1);
        let s = &m.streams[0];
        let kinds: Vec<_> = s.requests.iter().map(|r| (r.kind, r.size)).collect();
        assert_eq!(
            kinds,
            [
                (RequestKind::Alloc, 1000),
                (RequestKind::Alloc, 512),
                (RequestKind::Free, 1000)
            ]
        );
        // The graph-pool block is served on a stream of its own.
        assert_ne!(s.requests[0].stream, s.requests[1].stream);
        assert_eq!(
            s.outside,
            Outside {
                allocations: 1,
                peak_bytes: 4 << 20
            }
        );
        assert_eq!(m.level.level, super::super::CaptureLevel::Request);
    }

    #[test]
    fn vmm_physical_allocations_are_tracked_by_handle() {
        let create = Event {
            handle: 42,
            ..ev(Api::CuMemCreate, 1, 0, 2 << 20, 0)
        };
        let release = Event {
            handle: 42,
            ..ev(Api::CuMemRelease, 1, 0, 0, 0)
        };
        let m = Model::from_events(vec![create, release], &Metadata::default());
        assert_eq!(m.streams[0].requests.len(), 2);
        assert_eq!(m.streams[0].requests[1].size, 2 << 20);
    }
}
