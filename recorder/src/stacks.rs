//! Native stacks: captured on the hook path, interned into stack ids, turned into the trace's
//! `stacks`, `frames` and `modules` tables by the writer thread.
//!
//! # On the hook path ([`capture`])
//!
//! A hook that brings memory in (an allocation, a mapping, a pool, a registration) unwinds its
//! thread ([`unwind::capture`]) and looks the frames up in its thread's intern table, a hash of
//! the frames to a stack id (heaptrack and bytehound intern per thread too: KDE/heaptrack
//! `src/track/tracetree.h`, koute/bytehound `preload/src/unwind.rs`). A known stack costs a
//! hash and one comparison; in `python` mode the thread's recent stacks are looked at first
//! (`State::recent`), where a stack met again costs a hash of its first words and one
//! comparison. A stack new to the thread is looked up next in the process-wide
//! intern table (lock-free: one atomic word of hash and id per slot), so that threads running the
//! same code share one id; one new to the process is copied once into the process-wide stack
//! arena, an append-only anonymous mapping, and published in that table. Its id is the next
//! number of a global counter, so ids are small and dense and an event's record refers to the
//! stack by it. The record is published
//! after the arena entry, so the writer thread always finds the stack of an event it drains.
//! Frees, unmaps and releases carry no stack: the memory they end is attributed through the
//! call that created it, and leaving them out halves the cost.
//!
//! Nothing here allocates, locks, prints or reads the environment on the hook path. What needs
//! memory (framehop's cache, the intern table) lives in per-thread blocks that the writer thread
//! allocates ahead of need; a thread claims a free one on its first capture, and the writer
//! hands the blocks of threads that ended to new threads (it looks for them whenever a thread
//! finds no free block, before it makes more). A thread that finds none waits for
//! the writer to make more, once, for as long as the writer keeps turning (a loaded machine
//! only slows it down), and records [`NO_STACK`] only when the writer made no turn for 2 s
//! (it may be waiting for a lock this thread holds) or the pool is full. The wait is long
//! because a loaded machine can leave the writer unscheduled for a tenth of a second (the
//! 100 ms it was lost stacks of a burst of threads on a 2-core machine under a parallel build);
//! only a thread that holds a lock the writer needs ever waits it out, once.
//!
//! # The module list
//!
//! The unwinder reads an immutable [`Snapshot`] of the loaded objects. The writer thread builds
//! a new one when the loader's load/unload counters move and swaps it in; each thread announces
//! the snapshot it is reading in its block (a hazard pointer), and the writer frees an old
//! snapshot once no block announces it.

use crate::autograd;
use crate::bench;
use crate::clock;
use crate::config::{Kind, Mode};
use crate::hot::HOT;
use crate::lifecycle;
use crate::modules::{self, Loaded};
use crate::python;
use crate::stamps::{self, Part};
use crate::thread;
use crate::unwind::{self, Bounds, Cache, Snapshot};
use std::cell::UnsafeCell;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use vramtrace_format::conventions::{AUTOGRAD_NODE_FILE, autograd_node_name};
use vramtrace_format::{Api, Frame, Module, NO_STACK, PythonFrame, Stack, Tables};

/// The most `VRAMTRACE_MAX_DEPTH` may ask for.
pub const MAX_DEPTH_LIMIT: usize = 256;

const OFF: u8 = 0;
const NATIVE: u8 = 1;
const FRAME_POINTER: u8 = 2;
const PYTHON: u8 = 3;
const MIXED: u8 = 4;

/// Words a captured stack may take: in `mixed`, up to the depth in native frames and the depth
/// again in Python frames of two words each.
const MAX_WORDS: usize = 3 * MAX_DEPTH_LIMIT;

/// The unwinder the hooks read; null before [`start`].
static SNAPSHOT: AtomicPtr<Snapshot> = AtomicPtr::new(std::ptr::null_mut());
/// Captures that recorded no stack for want of a block or of arena space.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// The stack arena: entry = one word holding the frame count, then the frames.
static ARENA: AtomicPtr<u64> = AtomicPtr::new(std::ptr::null_mut());
/// Words of the arena handed out.
static ARENA_USED: AtomicU64 = AtomicU64::new(0);
/// Arena capacity in words (256 MiB of address space, touched only as it fills).
const ARENA_WORDS: u64 = 32 << 20;
/// Stack id → word offset of its arena entry.
static INDEX: AtomicPtr<u32> = AtomicPtr::new(std::ptr::null_mut());
/// The next stack id (ids start at 1; 0 is [`NO_STACK`]).
static NEXT_ID: AtomicU32 = AtomicU32::new(1);
const MAX_IDS: u32 = 4 << 20;

/// The process-wide intern table: `hash >> 32 << 32 | id` per slot, 0 when empty.
static SHARED: AtomicPtr<AtomicU64> = AtomicPtr::new(std::ptr::null_mut());
/// Its slots (a power of two; 8 MiB of address space, touched as it fills).
const SHARED_SLOTS: usize = 1 << 20;

/// Slots of a thread's intern table (a power of two).
const TABLE_SLOTS: usize = 1 << 14;
/// Slots probed for a stack; a new one takes the first empty one, or the last.
const PROBES: usize = 16;
/// Slots of a thread's recent stacks (a power of two; [`State::recent`]).
const RECENT_SLOTS: usize = 16;
/// Words of a stack that choose its slot among the recent ones ([`recent_key`]).
const RECENT_PREFIX: usize = 16;
/// Blocks the writer keeps ready for threads that have none yet, at least; half as many again
/// as are in use, so that a program that starts threads in bursts finds them ready.
const SPARE_BLOCKS: usize = 8;
const POOL_CAPACITY: usize = 1024;
/// How long a new thread waits for a block when none is free and the writer makes no turn.
const CLAIM_WAIT_NS: u64 = 2_000_000_000;
/// Turns of the writer's pool upkeep ([`top_up_pool`]): what a waiting thread watches.
static TOP_UPS: AtomicU64 = AtomicU64::new(0);
/// Set by a thread that found no free block: the writer makes more at once.
static STARVED: AtomicBool = AtomicBool::new(false);

/// A thread's private stack-capture state.
struct Block {
    /// The thread that owns it (its tid), 0 when free.
    owner: AtomicU32,
    /// The snapshot the owner is unwinding with, null when it is not unwinding.
    hazard: AtomicPtr<Snapshot>,
    /// Set while the owner captures: a signal handler that allocates in the middle of a capture
    /// on the same thread gets no stack rather than a second `&mut` to `state`.
    busy: AtomicBool,
    /// Touched only by the owner.
    state: UnsafeCell<State>,
}

// SAFETY: `state` is only touched by the thread that won `owner` (see `thread_block`), and
// not re-entered (`busy`); the other fields are atomics.
unsafe impl Sync for Block {}

struct State {
    cache: Cache,
    bounds: Bounds,
    /// `(hash, id, arena offset)`, `id == 0` when empty. The offset is the stack's arena entry,
    /// so that a lookup compares with it without reading the process-wide index first: on a
    /// cold cache the slot, the index and the entry were three misses, each waiting for the
    /// one before it (`recorder/BENCHMARKS.md`, "Python frames, cold").
    table: Box<[(u64, u32, u32)]>,
    used: usize,
    /// The thread's recent stacks, looked at first: `(key, id, arena offset)` per slot, `id
    /// == 0` when empty, the slot and the key from the stack's first words and its length
    /// ([`recent_key`]). A training step allocates from a few lines over and over (a loop over
    /// a model's layers), and then a capture costs one comparison of its words with the arena
    /// entry: no hash of the whole stack, and none of the large table's slots (a dependent
    /// cache miss in a program's cold caches; these four lines stay warm). A stack with another
    /// key is told apart without reading the arena. `python` stacks only: a native stack's
    /// first words are the allocator's own frames, the same in every stack of a PyTorch
    /// program, so the key would tell little apart.
    recent: [(u64, u32, u32); RECENT_SLOTS],
    /// Where a capture's words go (made with the block: zeroing 6 KiB on the stack at every
    /// capture cost about 100 ns).
    words: Box<[u64]>,
}

impl Block {
    fn new() -> Block {
        Block {
            owner: AtomicU32::new(0),
            hazard: AtomicPtr::new(std::ptr::null_mut()),
            busy: AtomicBool::new(false),
            state: UnsafeCell::new(State {
                cache: Cache::default(),
                bounds: Bounds::default(),
                table: vec![(0u64, 0u32, 0u32); TABLE_SLOTS].into_boxed_slice(),
                used: 0,
                recent: [(0, 0, 0); RECENT_SLOTS],
                words: vec![0u64; MAX_WORDS].into_boxed_slice(),
            }),
        }
    }
}

/// Every block made so far; appended to by the writer (and [`start`]) only.
static POOL: [AtomicPtr<Block>; POOL_CAPACITY] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; POOL_CAPACITY];
static POOL_LEN: AtomicUsize = AtomicUsize::new(0);

/// Prepares stack capture; runs once per process when recording starts (and again in a fork
/// child, which keeps its parent's arena and blocks). Capture stays off if anything fails.
pub fn start(kind: Option<Kind>, max_depth: usize) {
    let Some(kind) = kind else {
        HOT.stack_mode.store(OFF, Ordering::Release);
        return;
    };
    if ARENA.load(Ordering::Acquire).is_null() {
        let (Some(arena), Some(index), Some(shared)) = (
            reserve::<u64>(ARENA_WORDS as usize),
            reserve::<u32>(MAX_IDS as usize),
            reserve::<AtomicU64>(SHARED_SLOTS),
        ) else {
            return;
        };
        SHARED.store(shared, Ordering::Release);
        INDEX.store(index, Ordering::Release);
        ARENA.store(arena, Ordering::Release);
    }
    top_up_pool(false);
    let list = modules::scan();
    if SNAPSHOT.load(Ordering::Acquire).is_null() {
        let snapshot = Box::new(Snapshot::new(&list, modules::own_range(&list)));
        SNAPSHOT.store(Box::into_raw(snapshot), Ordering::Release);
    }
    HOT.max_depth.store(
        max_depth.clamp(1, MAX_DEPTH_LIMIT) as u16,
        Ordering::Relaxed,
    );
    let python = |m: u8| match python::start(&list) {
        Ok(true) => m,
        Ok(false) => NATIVE,
        Err(line) => {
            let line = format!("{line}\n");
            // SAFETY: write(2) of a valid buffer.
            unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
            NATIVE
        }
    };
    let m = match kind {
        Kind::Native(Mode::Native) => NATIVE,
        Kind::Native(Mode::FramePointer) => FRAME_POINTER,
        Kind::Python => python(PYTHON),
        Kind::Mixed => python(MIXED),
    };
    HOT.stack_mode.store(m, Ordering::Release);
}

/// An anonymous mapping of `len` zeroed `T`s that takes memory only as it is touched.
fn reserve<T>(len: usize) -> Option<*mut T> {
    // SAFETY: a fresh private anonymous mapping; never unmapped (hooks may hold addresses in it
    // until the process ends).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len * std::mem::size_of::<T>(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p.cast())
}

/// Whether events of `api` carry a stack ([`vramtrace_format::Op::brings_in`]).
fn wants(api: Option<Api>) -> bool {
    api.is_some_and(|a| a.op().brings_in())
}

/// The stack id for an event of `api` on the calling thread, or [`NO_STACK`]. The hook path:
/// no allocation, lock, print or environment read; never panics across the hook.
#[inline]
pub fn capture(api: Option<Api>) -> u32 {
    if !wants(api) {
        return NO_STACK;
    }
    // The caller started recording first (`session::start_if_needed`): a program linked with
    // -lcuda makes its first call without a lookup before it, and its first event has a stack too.
    let mode = HOT.stack_mode.load(Ordering::Acquire);
    if mode == OFF || bench::has(bench::STACK) {
        return NO_STACK;
    }
    let caller = mode == PYTHON && names_caller(api);
    match std::panic::catch_unwind(|| capture_with(mode, caller)) {
        Ok(id) => id,
        Err(_) => {
            // A bug in unwinding must not cost the program more than its stacks.
            HOT.stack_mode.store(OFF, Ordering::Relaxed);
            NO_STACK
        }
    }
}

/// Whether a `python` stack of an event of `api` starts with its caller's native frame: for the
/// driver calls a library makes itself (NCCL's buffers, cuBLAS's and cuDNN's workspaces, a
/// caching allocator's segments), whose Python line alone does not say which library holds the
/// memory. Not for PyTorch's tracker events (PyTorch's own) nor for stream-ordered allocations
/// (a pass-through allocator's tensors, one per request: the cost would be paid per tensor).
fn names_caller(api: Option<Api>) -> bool {
    api.is_some_and(|a| !a.from_framework() && a.kind() != vramtrace_format::MemoryKind::Pool)
}

/// Native frames looked at for the caller of a driver call in `python` mode: the runtime's
/// frames (`cudaMalloc` and what it calls) come first.
const CALLER_DEPTH: usize = 6;

#[inline(never)]
fn capture_with(mode: u8, caller: bool) -> u32 {
    let Some(block) = thread_block() else {
        DROPPED.fetch_add(1, Ordering::Relaxed);
        return NO_STACK;
    };
    if block.busy.swap(true, Ordering::Acquire) {
        return NO_STACK;
    }
    let id = capture_in(block, mode, caller);
    block.busy.store(false, Ordering::Release);
    id
}

/// With `caller` (`python` mode only), the stack starts with one native frame: the innermost
/// outside the CUDA driver and runtime, which names the library that made the call.
fn capture_in(block: &Block, mode: u8, caller: bool) -> u32 {
    // SAFETY: only the owner touches its block's state (`thread_block`), once at a time (`busy`).
    let state = unsafe { &mut *block.state.get() };
    let mut words = std::mem::take(&mut state.words);
    let frames = &mut words[..];
    let depth = usize::from(HOT.max_depth.load(Ordering::Relaxed)).min(MAX_DEPTH_LIMIT);
    let mut n = 0;
    // `python` reads no native frame but its caller's: no snapshot to announce otherwise (two
    // sequentially consistent stores saved on the default path).
    if mode != PYTHON || caller {
        // Announce the snapshot before using it; re-check that it is still current, so the
        // writer, which swaps first and scans the announcements after, never frees it under us.
        let snapshot = loop {
            let p = SNAPSHOT.load(Ordering::SeqCst);
            block.hazard.store(p, Ordering::SeqCst);
            if SNAPSHOT.load(Ordering::SeqCst) == p {
                break p;
            }
        };
        let (unwind_mode, stop) = match mode {
            FRAME_POINTER => (Mode::FramePointer, 0..0),
            PYTHON | MIXED => (
                Mode::Native,
                python::interpreter().map_or(0..0, |p| p.eval_range.clone()),
            ),
            _ => (Mode::Native, 0..0),
        };
        // SAFETY: announced above; the writer frees a snapshot only when no block announces it.
        if let Some(snapshot) = unsafe { snapshot.as_ref() } {
            n = unwind::capture(
                snapshot,
                &mut state.cache,
                &mut state.bounds,
                unwind_mode,
                &stop,
                frames
                    .get_mut(..if caller { CALLER_DEPTH } else { depth })
                    .unwrap_or(&mut []),
            );
            if caller {
                // Keep the caller alone; the innermost frame when every one is CUDA's.
                let seen = frames.get(..n).unwrap_or(&[]);
                let pick = seen
                    .iter()
                    .find(|&&a| !snapshot.in_cuda(a))
                    .or(seen.first());
                let pick = pick.copied();
                n = 0;
                if let (Some(at), Some(slot)) = (pick, frames.first_mut()) {
                    *slot = at;
                    n = 1;
                }
            }
        }
        block.hazard.store(std::ptr::null_mut(), Ordering::Release);
    }
    if mode == PYTHON || mode == MIXED {
        let outer = stamps::enter(Part::Walk);
        let walked = if bench::has(bench::WALK) {
            0
        } else {
            python::walk(frames.get_mut(n..).unwrap_or(&mut []), depth)
        };
        stamps::enter(Part::Node);
        // No Python frame: on an autograd engine thread, the node it evaluates names the
        // allocation (a backward pass's gradients).
        if walked == 0
            && !bench::has(bench::NODE | bench::WALK)
            && let Some(node) = autograd::node_word()
            && let Some(slot) = frames.get_mut(n)
        {
            *slot = node;
            n += 1;
        }
        n += walked;
        stamps::enter(outer);
    }
    let outer = stamps::enter(Part::Intern);
    let id = if n == 0 || bench::has(bench::INTERN) {
        NO_STACK
    } else {
        // The recent stacks' key is a stack's first words: a native stack's are the
        // allocator's own frames, the same in every stack of a PyTorch program.
        intern(state, frames.get(..n).unwrap_or(&[]), mode == PYTHON)
    };
    stamps::enter(outer);
    state.words = words;
    id
}

/// This thread's block, claiming a free one on first use (or after a fork, where the block the
/// thread-local points to belongs to a thread of the parent). When every block is taken (a
/// burst of new threads), the thread waits for the writer thread to make more, once, as a full
/// journal makes it wait for the writer: as long as the writer keeps turning, or up to
/// [`CLAIM_WAIT_NS`] after its last turn (and no longer once the pool is full).
fn thread_block() -> Option<&'static Block> {
    let tid = clock::tid();
    let mine = thread::this().stack_block.get() as *const Block;
    // SAFETY: blocks are leaked, never freed.
    if let Some(b) = unsafe { mine.as_ref() }
        && b.owner.load(Ordering::Relaxed) == tid
    {
        return Some(b);
    }
    let mut deadline = clock::now().saturating_add(CLAIM_WAIT_NS);
    let mut turns = TOP_UPS.load(Ordering::Acquire);
    loop {
        if let Some(b) = claim(tid) {
            thread::this().stack_block.set((b as *const Block).cast());
            return Some(b);
        }
        let now = clock::now();
        let turned = TOP_UPS.load(Ordering::Acquire);
        if turned != turns && POOL_LEN.load(Ordering::Acquire) < POOL_CAPACITY {
            turns = turned;
            deadline = now.saturating_add(CLAIM_WAIT_NS);
        }
        if !lifecycle::writer_alive() || now > deadline {
            return None;
        }
        STARVED.store(true, Ordering::Release);
        // Sleep rather than spin: the writer needs the processor to make the blocks.
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 200_000,
        };
        // SAFETY: nanosleep with a valid timespec.
        unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
    }
}

/// A free block, now owned by `tid`.
fn claim(tid: u32) -> Option<&'static Block> {
    let len = POOL_LEN.load(Ordering::Acquire);
    POOL.iter()
        .take(len)
        // SAFETY: pool entries below POOL_LEN are leaked blocks.
        .filter_map(|slot| unsafe { slot.load(Ordering::Acquire).as_ref() })
        .find(|b| {
            b.owner
                .compare_exchange(0, tid, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        })
}

/// The id of `frames`, adding the stack to the arena when this thread has not seen it; with
/// `recent`, looking among the thread's recent stacks first.
fn intern(state: &mut State, frames: &[u64], recent: bool) -> u32 {
    if !recent {
        return look_up(state, frames).0;
    }
    let key = recent_key(frames);
    // The product's top bits depend on every bit of the key.
    let slot = (key.wrapping_mul(HASH_K) >> (64 - RECENT_SLOTS.trailing_zeros())) as usize;
    if let Some(&(k, id, at)) = state.recent.get(slot)
        && id != 0
        && k == key
        && entry_at(at).map(|(words, _)| words) == Some(frames)
    {
        return id;
    }
    let (id, at) = look_up(state, frames);
    if let (Some(at), Some(recent)) = (at, state.recent.get_mut(slot)) {
        *recent = (key, id, at);
    }
    id
}

/// The key of a stack among a thread's recent stacks: its first [`RECENT_PREFIX`] words (eight
/// Python frames: an allocating library line and the callers that tell its uses apart, e.g. the
/// attention's and the MLP's calls of one `Linear.forward`), hashed, and its length.
fn recent_key(frames: &[u64]) -> u64 {
    hash(frames.get(..RECENT_PREFIX).unwrap_or(frames)) ^ (frames.len() as u64) << 48
}

/// The id of `frames` and its arena offset (unknown for another thread's stack whose index
/// entry cannot be read), from the thread's table, the process-wide one, or a new entry.
fn look_up(state: &mut State, frames: &[u64]) -> (u32, Option<u32>) {
    let hash = hash(frames);
    let mask = TABLE_SLOTS - 1;
    let home = hash as usize & mask;
    // Where the new stack goes: the first empty slot of the probe window, else the window's
    // last slot (its stack, if seen again, is added again under a new id).
    let mut slot = (home + PROBES - 1) & mask;
    for probe in 0..PROBES {
        let i = (home + probe) & mask;
        let Some(&(h, id, at)) = state.table.get(i) else {
            break;
        };
        if id == 0 {
            slot = i;
            break;
        }
        if h == hash && entry_at(at).map(|(words, _)| words) == Some(frames) {
            return (id, Some(at));
        }
    }
    let (id, at) = match shared_find(hash, frames) {
        Some(id) => match offset_of(id) {
            Some(at) => (id, at),
            None => return (id, None),
        },
        None => {
            let Some((id, at)) = append(frames) else {
                DROPPED.fetch_add(1, Ordering::Relaxed);
                return (NO_STACK, None);
            };
            shared_insert(hash, id);
            (id, at)
        }
    };
    if state.used * 4 >= TABLE_SLOTS * 3 {
        // Three quarters full: forget and start over (a stack seen again gets a new id, which
        // is only a duplicate entry in the trace's table).
        state.table.fill((0, 0, 0));
        state.used = 0;
        slot = home;
    }
    if let Some(entry) = state.table.get_mut(slot) {
        if entry.1 == 0 {
            state.used += 1;
        }
        *entry = (hash, id, at);
    }
    (id, Some(at))
}

/// The process-wide table's slots, when stack capture started.
fn shared_slots() -> Option<&'static [AtomicU64]> {
    let p = SHARED.load(Ordering::Acquire);
    // SAFETY: a zeroed mapping of SHARED_SLOTS atomics, never unmapped.
    (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p, SHARED_SLOTS) })
}

/// The slot word for stack `id` of hash `hash`.
fn shared_word(hash: u64, id: u32) -> u64 {
    hash >> 32 << 32 | u64::from(id)
}

/// The id another thread gave `frames` (hash `hash`), if it published one.
fn shared_find(hash: u64, frames: &[u64]) -> Option<u32> {
    let slots = shared_slots()?;
    let home = hash as usize & (SHARED_SLOTS - 1);
    for probe in 0..PROBES {
        let word = slots
            .get((home + probe) & (SHARED_SLOTS - 1))?
            .load(Ordering::Acquire);
        if word == 0 {
            return None;
        }
        let id = word as u32;
        if word >> 32 == hash >> 32 && stack_frames(id) == Some(frames) {
            return Some(id);
        }
    }
    None
}

/// Publishes stack `id` (already in the arena) for other threads; a full probe window leaves it
/// unshared (a thread that meets it adds it again under a new id).
fn shared_insert(hash: u64, id: u32) {
    let Some(slots) = shared_slots() else {
        return;
    };
    let home = hash as usize & (SHARED_SLOTS - 1);
    let word = shared_word(hash, id);
    for probe in 0..PROBES {
        let Some(slot) = slots.get((home + probe) & (SHARED_SLOTS - 1)) else {
            return;
        };
        if slot
            .compare_exchange(0, word, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// FxHash's multiplier (rustc-hash).
const HASH_K: u64 = 0x51_7c_c1_b7_27_22_0a_95;

fn hash(frames: &[u64]) -> u64 {
    // FxHash's multiply-rotate (rustc-hash), enough to spread return addresses, in four
    // independent lanes: one chain's multiply latency per word cost about 100 ns for a
    // 60-word Python stack; four chains run side by side.
    let step = |h: u64, f: u64| (h.rotate_left(5) ^ f).wrapping_mul(HASH_K);
    let mut lanes = [frames.len() as u64, 1, 2, 3];
    let mut words = frames.chunks_exact(4);
    for w in &mut words {
        for (lane, &f) in lanes.iter_mut().zip(w) {
            *lane = step(*lane, f);
        }
    }
    for (lane, &f) in lanes.iter_mut().zip(words.remainder()) {
        *lane = step(*lane, f);
    }
    let h = lanes.iter().fold(0, |h, &lane| step(h, lane));
    h ^ (h >> 29)
}

/// Copies a new stack into the arena, with the names of its Python frames
/// ([`python::resolve`]); its id and arena offset, or `None` when the arena is full.
fn append(frames: &[u64]) -> Option<(u32, u32)> {
    let arena = ARENA.load(Ordering::Acquire);
    let index = INDEX.load(Ordering::Acquire);
    if arena.is_null() || index.is_null() {
        return None;
    }
    let names = python::resolve::names_len(frames).min(u32::MAX as usize >> 1);
    let words = frames.len() as u64 + 1 + names.div_ceil(8) as u64;
    let at = ARENA_USED.fetch_add(words, Ordering::Relaxed);
    if at + words > ARENA_WORDS {
        return None;
    }
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    if id >= MAX_IDS {
        return None;
    }
    // SAFETY: words `at..at + words` of the arena and slot `id` of the index were handed to
    // this thread alone by the two counters; both are inside their mappings (checked above).
    // The event that carries `id` is published after these stores (`ring::push`).
    unsafe {
        let entry = arena.add(at as usize);
        std::ptr::copy_nonoverlapping(frames.as_ptr(), entry.add(1), frames.len());
        let tail = std::slice::from_raw_parts_mut(entry.add(1 + frames.len()).cast::<u8>(), names);
        let written = python::resolve::write_names(frames, tail);
        entry.write(frames.len() as u64 | (written as u64) << 32);
        index.add(id as usize).write(at as u32);
    }
    Some((id, at as u32))
}

/// The words of stack `id`, once the event carrying it was published.
fn stack_frames(id: u32) -> Option<&'static [u64]> {
    stack_entry(id).map(|(words, _)| words)
}

/// The words of stack `id` and the names of its Python frames.
fn stack_entry(id: u32) -> Option<(&'static [u64], &'static [u8])> {
    entry_at(offset_of(id)?)
}

/// The arena offset of stack `id`'s entry, once the event carrying it was published.
fn offset_of(id: u32) -> Option<u32> {
    let index = INDEX.load(Ordering::Acquire);
    if index.is_null() || id == 0 || id >= MAX_IDS || id >= NEXT_ID.load(Ordering::Acquire) {
        return None;
    }
    // SAFETY: `id` was handed out and is below MAX_IDS, so inside the index; its
    // slot was written before any event carrying it was published, and is never changed.
    Some(unsafe { index.add(id as usize).read() })
}

/// The words and names of the arena entry at offset `at` (an offset [`append`] gave out).
fn entry_at(at: u32) -> Option<(&'static [u64], &'static [u8])> {
    let arena = ARENA.load(Ordering::Acquire);
    let at = u64::from(at);
    if arena.is_null() || at >= ARENA_WORDS {
        return None;
    }
    // SAFETY: the entry at `at` was written before its offset was handed to anyone (the
    // index, a thread's table); entries are never changed. Offsets and lengths are checked
    // against the arena's size before the slice is made.
    unsafe {
        let head = arena.add(at as usize).read();
        let (len, names) = (head & 0xffff_ffff, head >> 32);
        if len > MAX_WORDS as u64 || at + 1 + len + names.div_ceil(8) > ARENA_WORDS {
            return None;
        }
        let words = arena.add(at as usize + 1);
        Some((
            std::slice::from_raw_parts(words, len as usize),
            std::slice::from_raw_parts(words.add(len as usize).cast::<u8>(), names as usize),
        ))
    }
}

/// Makes blocks until enough are free ([`SPARE_BLOCKS`], more after a thread found none),
/// taking back the blocks of threads that ended first, so that the pool grows only with the
/// threads alive at once, not with every thread the program ever started.
/// Writer thread and [`start`] only.
fn top_up_pool(starved: bool) {
    let counts = || {
        let len = POOL_LEN.load(Ordering::Acquire);
        let free = POOL
            .iter()
            .take(len)
            // SAFETY: pool entries below POOL_LEN are leaked blocks.
            .filter_map(|s| unsafe { s.load(Ordering::Acquire).as_ref() })
            .filter(|b| b.owner.load(Ordering::Relaxed) == 0)
            .count();
        let want = SPARE_BLOCKS + (len - free) / 2 + if starved { SPARE_BLOCKS } else { 0 };
        (len, free, want)
    };
    let (mut len, mut free, mut want) = counts();
    if free < want {
        reclaim_blocks();
        (len, free, want) = counts();
    }
    for i in len..(len + want.saturating_sub(free)).min(POOL_CAPACITY) {
        let block = Box::into_raw(Box::new(Block::new()));
        if let Some(slot) = POOL.get(i) {
            slot.store(block, Ordering::Release);
            POOL_LEN.store(i + 1, Ordering::Release);
        }
    }
    TOP_UPS.fetch_add(1, Ordering::Release);
}

/// Frees the blocks of threads that have ended (and, in a fork child, of the parent's threads).
fn reclaim_blocks() {
    let pid = clock::pid() as libc::pid_t;
    for slot in POOL.iter().take(POOL_LEN.load(Ordering::Acquire)) {
        // SAFETY: pool entries below POOL_LEN are leaked blocks.
        let Some(b) = (unsafe { slot.load(Ordering::Acquire).as_ref() }) else {
            continue;
        };
        let owner = b.owner.load(Ordering::Acquire);
        if owner == 0 {
            continue;
        }
        // SAFETY: signal 0 only checks that the thread exists in this process.
        let gone = unsafe { libc::syscall(libc::SYS_tgkill, pid, owner as libc::pid_t, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            // A dead thread cannot be unwinding; a live one never holds a block whose owner is
            // another tid (it re-claims first).
            // A fork child also inherits blocks that a parent thread was capturing with.
            b.hazard.store(std::ptr::null_mut(), Ordering::SeqCst);
            b.busy.store(false, Ordering::Relaxed);
            b.owner.store(0, Ordering::Release);
        }
    }
}

/// True when some block announces `snapshot`.
fn announced(snapshot: *mut Snapshot) -> bool {
    POOL.iter()
        .take(POOL_LEN.load(Ordering::Acquire))
        // SAFETY: pool entries below POOL_LEN are leaked blocks.
        .filter_map(|s| unsafe { s.load(Ordering::Acquire).as_ref() })
        .any(|b| b.hazard.load(Ordering::SeqCst) == snapshot)
}

/// The writer thread's side: new stacks, frames and modules into the trace's tables, the
/// module list kept current, blocks made and reclaimed, old snapshots freed.
pub struct TableWriter {
    pid: u32,
    /// Loaded objects as of the last scan, each with its module id.
    modules: Vec<(Loaded, u32)>,
    next_module: u32,
    generation: (u64, u64),
    /// Native address → frame id.
    frames: HashMap<u64, u32>,
    /// A Python frame's two words → frame id (the same id space as `frames`).
    python_words: HashMap<(u64, u64), u32>,
    /// (file, function, line) → frame id: frames of one line share an entry.
    python_lines: HashMap<(String, String, u32), u32>,
    /// An autograd node's vtable address → frame id.
    nodes: HashMap<u64, u32>,
    next_frame: u32,
    stacks: HashSet<u32>,
    retired: Vec<*mut Snapshot>,
    last_upkeep: Option<Instant>,
    warned: bool,
}

// SAFETY: the retired snapshots are owned by this value alone (swapped out of `SNAPSHOT`).
unsafe impl Send for TableWriter {}

impl TableWriter {
    pub fn new(pid: u32) -> TableWriter {
        TableWriter {
            pid,
            modules: Vec::new(),
            next_module: 1,
            generation: (0, 0),
            frames: HashMap::new(),
            python_words: HashMap::new(),
            python_lines: HashMap::new(),
            nodes: HashMap::new(),
            next_frame: 1,
            stacks: HashSet::new(),
            retired: Vec::new(),
            last_upkeep: None,
            warned: false,
        }
    }

    /// Periodic work; call it from every turn of the writer loop.
    pub fn poll(&mut self, tables: &mut Tables) {
        if HOT.stack_mode.load(Ordering::Acquire) == OFF {
            return;
        }
        if modules::generation() != self.generation {
            self.rescan(tables);
        }
        let due = self
            .last_upkeep
            .is_none_or(|t| t.elapsed() >= Duration::from_millis(200));
        top_up_pool(STARVED.swap(false, Ordering::AcqRel));
        if due {
            self.last_upkeep = Some(Instant::now());
            reclaim_blocks();
            self.retired.retain(|&s| {
                if announced(s) {
                    return true;
                }
                // SAFETY: swapped out of SNAPSHOT by `rescan` and announced by no block: no
                // thread can reach it any more.
                drop(unsafe { Box::from_raw(s) });
                false
            });
        }
    }

    /// Adds the stack of `stack_id` (an event's) and its new frames, if not written yet. Called
    /// for every event the writer drains.
    pub fn learn(&mut self, stack_id: u32, tables: &mut Tables) {
        // A thread waits for a block: do not make it wait for the end of a long drain.
        if STARVED.load(Ordering::Relaxed) {
            top_up_pool(STARVED.swap(false, Ordering::AcqRel));
        }
        if stack_id == NO_STACK || self.stacks.contains(&stack_id) {
            return;
        }
        let Some((addresses, names)) = stack_entry(stack_id) else {
            return;
        };
        let mut names = python::resolve::Names::new(names);
        self.stacks.insert(stack_id);
        let mut ids = Vec::with_capacity(addresses.len());
        let mut unknown = false;
        let mut words = addresses.iter().copied();
        while let Some(address) = words.next() {
            if address & python::TAG != 0 {
                let Some(identity) = words.next() else {
                    break;
                };
                let named = names.next();
                ids.push(self.python_frame(address, identity, named, tables));
                continue;
            }
            if address & autograd::NODE_TAG != 0 {
                ids.push(self.node_frame(address & !autograd::NODE_TAG, tables));
                continue;
            }
            let next = self.next_frame;
            let id = *self.frames.entry(address).or_insert_with(|| {
                tables.frames.push(Frame { id: next, address });
                unknown |= !self.modules.iter().any(|(m, _)| m.contains(address));
                next
            });
            if id == next {
                self.next_frame += 1;
            }
            ids.push(id);
        }
        tables.stacks.push(Stack {
            id: stack_id,
            frames: ids,
        });
        // A library loaded moments ago: list it now rather than at the next turn.
        if unknown && modules::generation() != self.generation {
            self.rescan(tables);
        }
    }

    /// The frame id of a Python frame's words, resolving them on first sight.
    fn python_frame(
        &mut self,
        first: u64,
        identity: u64,
        named: Option<python::resolve::Named>,
        tables: &mut Tables,
    ) -> u32 {
        if let Some(&id) = self.python_words.get(&(first, identity)) {
            return id;
        }
        let named = named.unwrap_or(python::resolve::Named {
            file: String::new(),
            function: String::new(),
            line: 0,
        });
        let id = self.line_frame((named.file, named.function, named.line), tables);
        self.python_words.insert((first, identity), id);
        id
    }

    /// The frame id of a Python-frame entry `(file, function, line)`, added on first sight.
    fn line_frame(&mut self, key: (String, String, u32), tables: &mut Tables) -> u32 {
        if let Some(&id) = self.python_lines.get(&key) {
            return id;
        }
        let id = self.next_frame;
        self.next_frame += 1;
        tables.python_frames.push(PythonFrame {
            id,
            module: vramtrace_format::conventions::module_of_file(&key.0),
            file: key.0.clone(),
            function: key.1.clone(),
            line: key.2,
        });
        self.python_lines.insert(key, id);
        id
    }

    /// The frame id of the autograd node whose class has the vtable at `vtable`, named on first
    /// sight ([`autograd::node_type`]): a Python-frame entry by the trace's convention
    /// ([`AUTOGRAD_NODE_FILE`]), `function` the node's name (empty when the vtable cannot be
    /// read).
    fn node_frame(&mut self, vtable: u64, tables: &mut Tables) -> u32 {
        if let Some(&id) = self.nodes.get(&vtable) {
            return id;
        }
        let mapped =
            |modules: &[(Loaded, u32)], at: u64| modules.iter().any(|(m, _)| m.contains(at));
        if !mapped(&self.modules, vtable) && modules::generation() != self.generation {
            self.rescan(tables);
        }
        let function = autograd::node_type(vtable, |at| mapped(&self.modules, at))
            .map(|t| autograd_node_name(&t))
            .unwrap_or_default();
        let id = self.line_frame((AUTOGRAD_NODE_FILE.to_string(), function, 0), tables);
        self.nodes.insert(vtable, id);
        id
    }

    /// Warns once on stderr if stacks were left out.
    pub fn finish(&mut self) {
        let dropped = DROPPED.load(Ordering::Relaxed);
        if dropped > 0 && !self.warned {
            self.warned = true;
            let msg = format!(
                "vramtrace: {dropped} events of process {} were recorded without a stack \
                 (more threads or distinct stacks than the recorder had room for)\n",
                self.pid
            );
            // SAFETY: write(2) of a valid buffer.
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
        }
    }

    /// Reads the module list again: new objects go into the table, and the hooks get an
    /// unwinder that knows them.
    fn rescan(&mut self, tables: &mut Tables) {
        self.generation = modules::generation();
        let list = modules::scan();
        let now = clock::now();
        let mut kept = Vec::with_capacity(list.len());
        for m in &list {
            let known = self
                .modules
                .iter()
                .find(|(k, _)| k.load_address == m.load_address && k.path == m.path)
                .map(|(_, id)| *id);
            let id = known.unwrap_or_else(|| {
                let id = self.next_module;
                self.next_module += 1;
                tables.modules.push(Module {
                    id,
                    pid: self.pid,
                    path: m.path.clone(),
                    build_id: m.build_id.clone(),
                    load_address: m.load_address,
                    size: m.size,
                    loaded_ns: now,
                    unloaded_ns: None,
                });
                id
            });
            kept.push((m.clone(), id));
        }
        // Unloaded objects drop out of the list; the format has no way yet to record when
        // (a table entry cannot be amended), so their `unloaded_ns` stays empty.
        self.modules = kept;
        let snapshot = Box::into_raw(Box::new(Snapshot::new(&list, modules::own_range(&list))));
        let old = SNAPSHOT.swap(snapshot, Ordering::SeqCst);
        if !old.is_null() {
            self.retired.push(old);
        }
    }
}
