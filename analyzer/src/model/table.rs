//! The allocation table: one pass over a trace's events gives one row per allocation object
//! (its call, address, size, stream, stack, birth and end), the failed allocation calls
//! and the count of unmatched frees, which every view of the recorded trace reads (`summary`,
//! the failure sites, `diff`, the Perfetto and PyTorch-snapshot exports), so that each gives the
//! same figure the same value. Modelled on bytehound's one loaded `Data` (`cli-core/src/data.rs`:
//! one `Allocation` per object, with its deallocation, read by every exporter).
//!
//! Columnar: one vector per field, rows in the order the objects were born. Frees are matched
//! to allocations by [`ObjectKey`] (docs/definitions.md, "Unmatched frees"). Which bytes count
//! as *requested* and which as *reserved* depends on the trace's [`Shape`], which only the whole
//! event list shows: rows keep the facts it is decided from and [`AllocationTable::object`]
//! answers under the shape the pass found.

use super::level::{Calls, LevelFacts, LevelStats};
use super::lifetimes::{Matched, Matcher};
use super::rules::Rules;
use std::collections::{BTreeSet, HashMap};
use vramtrace_format::conventions::ALLOCATOR_SEGMENT;
use vramtrace_format::{Api, Event, MemoryKind, NO_DEVICE, Op, Trace};

/// The hasher of the running totals (one lookup per step): fast, and seeded at random as the
/// model's, so that a crafted trace cannot aim at collisions.
type Hasher = foldhash::fast::RandomState;

/// The end index of a row still live when the trace ends.
const LIVE: u64 = u64::MAX;

/// A row's flags: its call came from a framework's tracker; its event carried
/// [`ALLOCATOR_SEGMENT`]; it ended because its address was handed out again without a free.
const FRAMEWORK: u8 = 1;
const FLAGGED: u8 = 2;
const REPLACED: u8 = 4;

/// One allocation object, as the views read it.
///
/// Accounting rules, the same in every command:
/// - Device memory (`cuMemAlloc*`, managed, stream-ordered pools, arrays, graph allocations,
///   and VMM physical handles from `cuMemCreate`) and pinned or registered host memory (device
///   [`NO_DEVICE`]) count; memory opened from another process or API (IPC, external,
///   multicast) is listed by kind but counts in neither total, since another owner holds it.
/// - In a recorded trace every counted byte is both *requested* and *reserved*: the driver saw
///   exactly what the program asked for (under a caching allocator those "requests" are its
///   segments, which `capture_level` says).
/// - In an imported PyTorch snapshot the program's requests and the allocator's segments are
///   both present; segments (events flagged [`ALLOCATOR_SEGMENT`]) count only as reserved and
///   requests only as requested.
/// - A trace recorded with PyTorch's tracker is split the same way: `torch.alloc` blocks are
///   the requests, the driver calls what the process reserved (PyTorch's segments and memory
///   taken past PyTorch); `torch.segment_*` events repeat those driver calls and count in
///   neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Object {
    pub pid: u32,
    pub device: i32,
    pub kind: MemoryKind,
    pub address: u64,
    pub size: u64,
    pub stack: u32,
    pub stream: u64,
    pub time_ns: u64,
    /// An allocator segment (of an imported snapshot, or a driver call beside PyTorch's
    /// tracker) rather than a program request.
    pub segment: bool,
    pub requested: bool,
    pub reserved: bool,
}

impl Object {
    /// The fields [`Shape::object`] fills in, unset.
    const UNCLASSIFIED: Object = Object {
        pid: 0,
        device: 0,
        kind: MemoryKind::Device,
        address: 0,
        size: 0,
        stack: 0,
        stream: 0,
        time_ns: 0,
        segment: false,
        requested: false,
        reserved: false,
    };

    /// The object the allocation event `e` makes, as the row it makes reads under `shape`
    /// ([`AllocationTable::object`]).
    pub fn born_at(e: &Event, shape: Shape) -> Object {
        shape.object(
            e.api,
            row_flags(e),
            Object {
                pid: e.pid,
                device: e.device,
                address: row_address(e),
                size: e.size,
                stack: e.stack,
                stream: e.stream,
                time_ns: e.time_ns,
                ..Object::UNCLASSIFIED
            },
        )
    }

    /// Its stack and bytes, what [`crate::symbolize::top_stacks`] counts.
    pub fn stack_bytes(&self) -> (u32, u64) {
        (self.stack, self.size)
    }
}

/// Per-(process, device) live bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub requested: u64,
    pub reserved: u64,
}

impl Totals {
    /// Counts `o` in, born (`add`), or out, ended.
    pub(super) fn account(&mut self, o: &Object, add: bool) {
        let apply = |v: &mut u64, on: bool| {
            if on {
                *v = if add {
                    v.saturating_add(o.size)
                } else {
                    v.saturating_sub(o.size)
                };
            }
        };
        apply(&mut self.requested, o.requested);
        apply(&mut self.reserved, o.reserved);
    }
}

/// Which request and segment events a trace holds: what the accounting rules split on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Shape {
    /// Driver calls only: every counted byte is requested and reserved.
    #[default]
    Plain,
    /// An imported PyTorch snapshot: requests beside segment events ([`ALLOCATOR_SEGMENT`]).
    Snapshot,
    /// PyTorch's tracker: `torch.alloc` requests beside the driver calls.
    Tracker,
}

impl Shape {
    pub const ALL: [Shape; 3] = [Shape::Plain, Shape::Snapshot, Shape::Tracker];

    /// The shape a trace has whose events showed a tracker block, or a segment event.
    pub fn of(tracker: bool, snapshot: bool) -> Shape {
        match (tracker, snapshot) {
            (true, _) => Shape::Tracker,
            (false, true) => Shape::Snapshot,
            (false, false) => Shape::Plain,
        }
    }

    /// Whether `e` shows a tracker block and whether it shows a segment event.
    pub fn shown_by(e: &Event) -> (bool, bool) {
        (
            e.api.kind() == MemoryKind::TorchBlock,
            e.flags & ALLOCATOR_SEGMENT != 0,
        )
    }

    /// True when the trace carries both request and allocator-segment events.
    pub fn split_levels(self) -> bool {
        self != Shape::Plain
    }

    /// `o`, made by a call of `api` with the row's `flags`, classified under this shape: its
    /// kind, its device (none for host memory), whether it is a segment and what it counts as.
    fn object(self, api: Api, flags: u8, o: Object) -> Object {
        let kind = api.kind();
        let (segment, requested, reserved) =
            self.classify(kind, flags & FRAMEWORK != 0, flags & FLAGGED != 0);
        Object {
            device: if is_host(kind) { NO_DEVICE } else { o.device },
            kind,
            segment,
            requested,
            reserved,
            ..o
        }
    }

    /// Whether an object of `kind`, from a framework's tracker or not, flagged
    /// [`ALLOCATOR_SEGMENT`] or not, is a segment, and whether it counts as requested and as
    /// reserved, under this shape.
    pub fn classify(self, kind: MemoryKind, framework: bool, flagged: bool) -> (bool, bool, bool) {
        let segment = if self == Shape::Tracker {
            !framework
        } else {
            flagged
        };
        let counted = !matches!(
            kind,
            MemoryKind::Ipc | MemoryKind::External | MemoryKind::Multicast
        );
        let split = self.split_levels();
        (
            segment,
            counted && !(split && segment),
            counted && (!split || segment),
        )
    }
}

/// Host memory: pinned by the driver or registered with it, on no device.
pub(crate) fn is_host(kind: MemoryKind) -> bool {
    matches!(kind, MemoryKind::PinnedHost | MemoryKind::RegisteredHost)
}

/// The [`FRAMEWORK`] and [`FLAGGED`] flags of the row an allocation event makes.
fn row_flags(e: &Event) -> u8 {
    (if e.api.from_framework() { FRAMEWORK } else { 0 })
        | if e.flags & ALLOCATOR_SEGMENT != 0 {
            FLAGGED
        } else {
            0
        }
}

/// The address (or, for VMM physical memory, the handle) of the object an allocation event
/// makes.
fn row_address(e: &Event) -> u64 {
    if e.api.op() == Op::Create {
        e.handle
    } else {
        e.address
    }
}

/// A failed allocation call, with its index among the trace's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    pub index: u64,
    pub event: Event,
}

/// The driver's count of a process's memory, with its event's index among the trace's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverCountEvent {
    pub index: u64,
    pub event: Event,
}

/// What follows the pass's changes as [`TableBuilder`] makes them, in call order, from the
/// same matched frees as the rows: the replay's request model is built this way
/// ([`super::Loader`]), in the pass that builds the table, with or without its rows.
pub trait Follow {
    /// What the follower keeps of a live object, handed back at its end.
    type Live;
    /// An object was born at `e`.
    fn born(&mut self, e: &Event) -> Self::Live;
    /// The object `born` ended at `e`: freed by it, or replaced by the allocation `e` made at
    /// its address (or handle) without a free seen, shown before that allocation's `born`.
    fn ended(&mut self, born: Self::Live, e: &Event);
    /// An allocation call that failed ([`AllocationTable::failures`]).
    fn failed(&mut self, e: &Event);
    /// A mark: a limit, an ordering call or PyTorch's word on a segment (`is_mark` in
    /// [`super::rules`]).
    fn marked(&mut self, e: &Event);
}

/// Following nothing: the table alone.
impl Follow for () {
    type Live = ();
    fn born(&mut self, _: &Event) {}
    fn ended(&mut self, _: (), _: &Event) {}
    fn failed(&mut self, _: &Event) {}
    fn marked(&mut self, _: &Event) {}
}

/// One pass's table of a trace's allocations.
///
/// A pass that keeps no row ([`TableBuilder::new`], for a caller that needs only what its
/// follower builds) leaves the totals and lists here and no row: [`AllocationTable::len`] is 0.
#[derive(Debug, Clone, Default)]
pub struct AllocationTable {
    /// Every event of the trace, counted.
    pub events: u64,
    /// The time of the trace's first event (docs/definitions.md, "Time").
    pub start_ns: u64,
    /// The processes of every event, in pid order.
    pub pids: BTreeSet<u32>,
    pub shape: Shape,
    /// Frees of addresses (or handles) the trace never saw allocated, for example memory
    /// allocated before recording began.
    pub unmatched_frees: u64,
    /// The failed allocation calls, in call order.
    pub failures: Vec<Failure>,
    /// The program's calls of any kind that returned an error (not counting limits, ordering
    /// calls, PyTorch's word on its segments or an imported snapshot's records).
    pub failed_calls: u64,
    /// The driver's counts of a process's memory (`driver.process_memory`, formats/SPEC.md
    /// §4.3), in call order.
    pub driver_counts: Vec<DriverCountEvent>,
    /// What the calls the replay takes as requests show of the capture level
    /// ([`super::detect_level`]).
    pub level_facts: LevelFacts,
    /// What the calls show of the allocator the program ran under, beside the recorded
    /// configuration in the metadata (`tune::recorded`).
    pub calls: Calls,
    pid: Vec<u32>,
    /// The device of the row's call, as recorded (host memory's too).
    device: Vec<i32>,
    api: Vec<Api>,
    flags: Vec<u8>,
    address: Vec<u64>,
    size: Vec<u64>,
    stack: Vec<u32>,
    stream: Vec<u64>,
    birth: Vec<u64>,
    birth_ns: Vec<u64>,
    /// The index of the event that ended the row, or [`LIVE`].
    end: Vec<u64>,
    end_ns: Vec<u64>,
    /// Rows in the order they ended.
    ends: Vec<u32>,
}

/// The lane a request of `e` is served on: its CUDA stream, except that a block of one of
/// PyTorch's private memory pools (a CUDA graph capture, `torch.cuda.MemPool`) counts as a
/// stream of its own: PyTorch never hands a block of one pool to a request of another, just
/// as it never shares blocks between streams.
pub(super) fn lane(e: &Event) -> u64 {
    if e.api.kind() != MemoryKind::TorchBlock || (e.pool == 0 && e.handle == 0) {
        return e.stream;
    }
    let pool = e.pool.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ e.handle.rotate_left(32);
    e.stream ^ pool | 1 << 63
}

/// Builds an [`AllocationTable`] from events pushed one at a time in file order, showing each
/// change to a [`Follow`]er as it makes it.
#[derive(Debug)]
pub struct TableBuilder<F: Follow = ()> {
    table: AllocationTable,
    /// Each live object's row and what the follower keeps of it.
    live: Matcher<(u32, F::Live)>,
    level: LevelStats,
    tracker: bool,
    snapshot: bool,
    /// The process of the last event, already in the table's `pids`: events come in long runs
    /// of one process.
    last_pid: Option<u32>,
    follow: F,
    /// Whether the rows are kept (else only the totals and lists: a caller that needs only
    /// what `follow` builds holds no row).
    rows: bool,
    rules: &'static Rules,
}

impl Default for TableBuilder {
    fn default() -> TableBuilder {
        TableBuilder::new((), true)
    }
}

impl<F: Follow> TableBuilder<F> {
    /// A builder showing its changes to `follow`, keeping the rows when `rows`.
    pub fn new(follow: F, rows: bool) -> TableBuilder<F> {
        TableBuilder {
            table: AllocationTable::default(),
            live: Matcher::default(),
            level: LevelStats::default(),
            tracker: false,
            snapshot: false,
            last_pid: None,
            follow,
            rows,
            rules: Rules::get(),
        }
    }

    /// Takes the next event in file order.
    pub fn push(&mut self, e: &Event) {
        let t = &mut self.table;
        let index = t.events;
        if index == 0 {
            t.start_ns = e.time_ns;
        }
        t.events += 1;
        if self.last_pid != Some(e.pid) {
            t.pids.insert(e.pid);
            self.last_pid = Some(e.pid);
        }
        // Every test below that the event's function and result decide, in one load.
        let o = self.rules.of(e);
        t.calls.add(o.calls);
        // An imported snapshot's record of what the real caching allocator did is no call of
        // the program's, nor a mark.
        let program = e.flags & ALLOCATOR_SEGMENT == 0;
        let (tracker, snapshot) = Shape::shown_by(e);
        self.tracker |= tracker;
        self.snapshot |= snapshot;
        if o.driver_count {
            t.driver_counts.push(DriverCountEvent { index, event: *e });
        }
        let mark = o.is_mark(e);
        if program && !mark {
            if o.level {
                self.level.see_call(o.op, o.kind, e.size);
            }
            t.failed_calls += u64::from(o.failed_call);
        }
        let row = t.pid.len() as u32;
        let follow = &mut self.follow;
        let mut replaced = None;
        let matched = self.live.apply(e, (o.lifetime, o.key), |old| {
            if let Some((old_row, live)) = old {
                // The address (or handle) was handed out again without a free we saw: the old
                // object is gone, and ends first.
                follow.ended(live, e);
                replaced = Some(old_row);
            }
            (row, follow.born(e))
        });
        match matched {
            Matched::Neither => {}
            Matched::Failed => {
                t.failures.push(Failure { index, event: *e });
                follow.failed(e);
            }
            Matched::Born if self.rows => {
                if let Some(old) = replaced {
                    t.end_row(old, index, e.time_ns);
                    t.flags[old as usize] |= REPLACED;
                }
                t.push_row(e, index);
            }
            Matched::Born => {}
            Matched::Ended((row, live)) => {
                follow.ended(live, e);
                if self.rows {
                    t.end_row(row, index, e.time_ns);
                }
            }
            Matched::Unmatched => t.unmatched_frees += 1,
        }
        // After the event's change, as a walk of the table in call order would meet it.
        if mark {
            follow.marked(e);
        }
    }

    /// The follower, as the events pushed so far left it.
    pub fn follower(&self) -> &F {
        &self.follow
    }

    /// The follower, for a caller that tells it of the next event before pushing it.
    pub fn follower_mut(&mut self) -> &mut F {
        &mut self.follow
    }

    /// The table of the events pushed so far, its shape not yet found ([`TableBuilder::finish`]
    /// finds it).
    pub fn pushed(&self) -> &AllocationTable {
        &self.table
    }

    /// The table of every event pushed, and the follower.
    pub fn finish(self) -> (AllocationTable, F) {
        let table = AllocationTable {
            shape: Shape::of(self.tracker, self.snapshot),
            level_facts: self.level.into_facts(),
            ..self.table
        };
        (table, self.follow)
    }
}

impl AllocationTable {
    /// The table of `trace`, in one pass over its events.
    pub fn of(trace: &Trace) -> AllocationTable {
        AllocationTable::from_events(trace.events())
    }

    /// The table of events in file order.
    pub fn from_events(events: impl IntoIterator<Item = Event>) -> AllocationTable {
        let mut b = TableBuilder::default();
        events.into_iter().for_each(|e| b.push(&e));
        b.finish().0
    }

    fn push_row(&mut self, e: &Event, index: u64) {
        self.pid.push(e.pid);
        self.device.push(e.device);
        self.api.push(e.api);
        self.flags.push(row_flags(e));
        self.address.push(row_address(e));
        self.size.push(e.size);
        self.stack.push(e.stack);
        self.stream.push(e.stream);
        self.birth.push(index);
        self.birth_ns.push(e.time_ns);
        self.end.push(LIVE);
        self.end_ns.push(LIVE);
    }

    fn end_row(&mut self, row: u32, index: u64, time_ns: u64) {
        self.end[row as usize] = index;
        self.end_ns[row as usize] = time_ns;
        self.ends.push(row);
    }

    /// How many allocation objects the trace holds.
    pub fn len(&self) -> usize {
        self.pid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pid.is_empty()
    }

    /// True when the trace carries both request and allocator-segment events.
    pub fn split_levels(&self) -> bool {
        self.shape.split_levels()
    }

    /// Row `row` as the views read it, born at its allocation's time.
    pub fn object(&self, row: usize) -> Object {
        self.shape.object(
            self.api[row],
            self.flags[row],
            Object {
                pid: self.pid[row],
                device: self.device[row],
                address: self.address[row],
                size: self.size[row],
                stack: self.stack[row],
                stream: self.stream[row],
                time_ns: self.birth_ns[row],
                ..Object::UNCLASSIFIED
            },
        )
    }

    /// When row `row` ended (its free's time, or that of the allocation that took its address
    /// without a free), `None` while live at the end.
    pub fn end_ns(&self, row: usize) -> Option<u64> {
        (self.end[row] != LIVE).then_some(self.end_ns[row])
    }

    /// The rows live just after the event of index `index`.
    pub fn live_after(&self, index: u64) -> impl Iterator<Item = Object> + '_ {
        let born = self.birth.partition_point(|&b| b <= index);
        (0..born)
            .filter(move |&r| self.end[r] > index)
            .map(|r| self.object(r))
    }

    /// The rows live when the trace ends.
    pub fn live_at_end(&self) -> impl Iterator<Item = Object> + '_ {
        (0..self.len())
            .filter(|&r| self.end[r] == LIVE)
            .map(|r| self.object(r))
    }

    /// Hands `reader` every change to live memory in call order, and every driver's count
    /// where it falls among them: what a pass that keeps no row hands it too
    /// ([`super::StepPass`]).
    pub fn walk(&self, reader: &mut impl Stepper) {
        let mut steps = self.steps();
        let mut counts = self.driver_counts.iter().peekable();
        loop {
            // A count changes nothing: the totals it reads are those after every earlier step.
            let next = steps.next_index();
            while let Some(c) = counts.next_if(|c| c.index < next) {
                reader.counted(c, &steps);
            }
            let Some(step) = steps.next() else { break };
            reader.step(step, &steps);
        }
    }

    /// The changes to live memory in call order, with the running totals.
    pub fn steps(&self) -> Steps<'_> {
        Steps {
            table: self,
            born: 0,
            ended: 0,
            failed: 0,
            totals: HashMap::default(),
        }
    }
}

/// One change to live memory, with the index of its event among the trace's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'t> {
    /// An object was born at its time (`Object::time_ns`).
    Alloc { object: Object, index: u64 },
    /// An object was freed at `time_ns`.
    Free {
        object: Object,
        time_ns: u64,
        index: u64,
    },
    /// An object ended at `time_ns` because its address was handed out again without a free;
    /// the allocation that took it follows at the same event.
    Replaced {
        object: Object,
        time_ns: u64,
        index: u64,
    },
    /// A failed allocation call: it created and ended nothing.
    Failed(&'t Failure),
}

impl Step<'_> {
    /// When its event happened.
    pub fn time_ns(&self) -> u64 {
        match self {
            Step::Alloc { object, .. } => object.time_ns,
            Step::Free { time_ns, .. } | Step::Replaced { time_ns, .. } => *time_ns,
            Step::Failed(f) => f.event.time_ns,
        }
    }

    /// The index of its event among the trace's.
    pub fn index(&self) -> u64 {
        match self {
            Step::Alloc { index, .. } | Step::Free { index, .. } | Step::Replaced { index, .. } => {
                *index
            }
            Step::Failed(f) => f.index,
        }
    }
}

/// Where a walk of a trace's changes in call order stands, just after the step it gave last.
pub trait Moment {
    /// Live bytes of one process and device.
    fn totals(&self, pid: u32, device: i32) -> Totals;
    /// Hands `each` every object live just after the event of index `index`, the last step's.
    /// Not to be read at a [`Step::Replaced`]: the allocation that follows it at the same event
    /// is born already in the rows' walk, not yet in a pass without rows.
    fn live(&self, index: u64, each: &mut dyn FnMut(Object));
}

/// A reader of a trace's changes in call order ([`AllocationTable::walk`]), told of each with
/// the moment just after it.
pub trait Stepper {
    /// A change to live memory.
    fn step(&mut self, step: Step<'_>, now: &dyn Moment);
    /// A driver's count of a process's memory, which changed nothing.
    fn counted(&mut self, count: &DriverCountEvent, now: &dyn Moment);
}

impl Moment for Steps<'_> {
    fn totals(&self, pid: u32, device: i32) -> Totals {
        Steps::totals(self, pid, device)
    }

    fn live(&self, index: u64, each: &mut dyn FnMut(Object)) {
        self.table.live_after(index).for_each(each);
    }
}

/// The table's changes in call order ([`AllocationTable::steps`]), keeping per-(process,
/// device) totals of live bytes.
pub struct Steps<'t> {
    table: &'t AllocationTable,
    born: usize,
    ended: usize,
    failed: usize,
    totals: HashMap<(u32, i32), Totals, Hasher>,
}

impl<'t> Steps<'t> {
    /// Live bytes of one process and device after the steps given so far.
    pub fn totals(&self, pid: u32, device: i32) -> Totals {
        self.totals.get(&(pid, device)).copied().unwrap_or_default()
    }

    /// The change the event of index `index` made, when it made one, for a caller that walks
    /// the events beside the steps (a replaced object's end is passed over).
    pub fn at(&mut self, index: u64) -> Option<Step<'t>> {
        let mut change = None;
        while self.next_index() == index {
            change = self.next().filter(|s| !matches!(s, Step::Replaced { .. }));
        }
        change
    }

    /// Takes every step up to and including the event of index `index`, for a caller that
    /// reads the totals after an event that changed nothing (a driver's count).
    pub fn through(&mut self, index: u64) {
        while self.next_index() <= index {
            self.next();
        }
    }

    /// The index of the next step's event, [`LIVE`] after the last.
    fn next_index(&self) -> u64 {
        let t = self.table;
        let birth = t.birth.get(self.born).copied().unwrap_or(LIVE);
        let end = t.ends.get(self.ended).map_or(LIVE, |&r| t.end[r as usize]);
        let fail = t.failures.get(self.failed).map_or(LIVE, |f| f.index);
        birth.min(end).min(fail)
    }

    fn account(&mut self, o: &Object, add: bool) {
        self.totals
            .entry((o.pid, o.device))
            .or_default()
            .account(o, add);
    }
}

impl<'t> Iterator for Steps<'t> {
    type Item = Step<'t>;

    fn next(&mut self) -> Option<Step<'t>> {
        let t = self.table;
        let birth = t.birth.get(self.born).copied().unwrap_or(LIVE);
        let end_row = t.ends.get(self.ended).map(|&r| r as usize);
        let end = end_row.map_or(LIVE, |r| t.end[r]);
        let failure = t.failures.get(self.failed);
        let fail = failure.map_or(LIVE, |f| f.index);
        // An end at a birth's index is the object that birth replaced: it goes first.
        if let Some(r) = end_row.filter(|_| end <= birth && end < fail) {
            self.ended += 1;
            let object = t.object(r);
            self.account(&object, false);
            return Some(if t.flags[r] & REPLACED != 0 {
                Step::Replaced {
                    object,
                    time_ns: t.end_ns[r],
                    index: end,
                }
            } else {
                Step::Free {
                    object,
                    time_ns: t.end_ns[r],
                    index: end,
                }
            });
        }
        if birth < fail {
            let object = t.object(self.born);
            self.born += 1;
            self.account(&object, true);
            return Some(Step::Alloc {
                object,
                index: birth,
            });
        }
        let f = failure?;
        self.failed += 1;
        Some(Step::Failed(f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(api: Api, address: u64, size: u64, result: u32) -> Event {
        Event {
            pid: 1,
            device: 0,
            address,
            size,
            result,
            ..Event::new(api)
        }
    }

    fn table(events: &[Event]) -> AllocationTable {
        let mut b = TableBuilder::default();
        events.iter().for_each(|e| b.push(e));
        b.finish().0
    }

    #[test]
    fn steps_follow_call_order_and_a_reused_address_ends_the_old_object_first() {
        let t = table(&[
            ev(Api::CuMemAlloc_v2, 0x1000, 100, 0),
            ev(Api::CuMemAlloc_v2, 0, 1 << 40, 2),
            ev(Api::CuMemAlloc_v2, 0x1000, 30, 0),
            ev(Api::CuMemFree_v2, 0x1000, 0, 0),
            ev(Api::CuMemFree_v2, 0x9000, 0, 0),
        ]);
        assert_eq!((t.len(), t.unmatched_frees, t.failures.len()), (2, 1, 1));
        let mut steps = t.steps();
        let mut seen = Vec::new();
        while let Some(s) = steps.next() {
            let what = match s {
                Step::Alloc { object, .. } => ("alloc", object.size),
                Step::Free { object, .. } => ("free", object.size),
                Step::Replaced { object, .. } => ("replaced", object.size),
                Step::Failed(f) => ("failed", f.event.size),
            };
            seen.push((what, steps.totals(1, 0).reserved));
        }
        assert_eq!(
            seen,
            [
                (("alloc", 100), 100),
                (("failed", 1 << 40), 100),
                (("replaced", 100), 0),
                (("alloc", 30), 30),
                (("free", 30), 0),
            ]
        );
        assert_eq!(t.live_after(0).map(|o| o.size).collect::<Vec<_>>(), [100]);
        assert_eq!(t.live_after(2).map(|o| o.size).collect::<Vec<_>>(), [30]);
        assert_eq!(t.live_at_end().count(), 0);
    }

    #[test]
    fn a_snapshots_segments_count_as_reserved_and_its_requests_as_requested() {
        let mut segment = ev(Api::CuMemAlloc_v2, 0x1000, 20 << 20, 0);
        segment.flags = ALLOCATOR_SEGMENT;
        let t = table(&[segment, ev(Api::CuMemAllocAsync, 0x1000, 3 << 20, 0)]);
        assert_eq!(t.shape, Shape::Snapshot);
        let (s, r) = (t.object(0), t.object(1));
        assert_eq!((s.segment, s.requested, s.reserved), (true, false, true));
        assert_eq!((r.segment, r.requested, r.reserved), (false, true, false));
    }
}
