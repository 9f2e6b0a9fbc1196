//! PyTorch's native CUDA caching allocator (`backend:native`, the default), with and without
//! expandable segments.
//!
//! Follows `pytorch/pytorch` `c10/cuda/CUDACachingAllocator.cpp`, `DeviceCachingAllocator`:
//! `malloc` (search, garbage collection, `alloc_block`, `release_available_cached_blocks`,
//! `release_cached_blocks`, then OOM), `round_size` / `roundup_power2_next_division`,
//! `get_pool`, `get_allocation_size`, `get_free_block` (with the oversize rules and the
//! "expandable size" walk), `should_split`, `alloc_found_block`, `free_block` /
//! `try_merge_blocks`, `garbage_collect_cached_blocks`, and for expandable segments
//! `find_expandable_block`, `try_allocate_expandable_block`, `map_block`, `unmap_block`,
//! `release_blocks`; options as `c10/core/AllocatorConfig.cpp` parses them
//! (`parseRoundUpPower2Divisions`, `parseMaxSplitSize`, `parseGarbageCollectionThreshold`).
//! Rules summarised with sources in `docs/allocators.md` §1 and §2.
//!
//! Where the code and the documentation (`docs/source/notes/cuda.rst`) disagree, this model
//! follows the code:
//!
//! - `roundup_power2_divisions:[B:d,...]`: a key `B` (MiB) sets the interval of sizes
//!   `[B, 2B)` MiB (`index = log2(B)`), and the first key also fills every smaller interval;
//!   `>` fills the intervals after the last key. The docs read `B` as the upper edge.
//! - Sizes below 1 MiB use interval 0, like sizes in `[1, 2)` MiB.
//! - Garbage collection runs only when a memory fraction is also set (`allowed_memory_maximum`
//!   has a value); the docs present the threshold alone.
//! - The program's own `set_per_process_memory_fraction` and `empty_cache` calls, when the
//!   trace recorded them (formats/SPEC.md §4.3), are requests of the stream
//!   ([`Policy::set_memory_fraction`], [`Policy::empty_cache`]): a fraction below 1 caps
//!   reserved bytes at `fraction × totalGlobalMem` (the recorded device total), 1 removes the
//!   cap, as 2.11's `DeviceCachingAllocator::setMemoryFraction` does; a `memory_fraction`
//!   option overrides them for the whole run.
//! - With `max_split_size_mb` and expandable segments together, the oversize rules of
//!   `get_free_block` still apply inside expandable segments: reserved memory grows without
//!   bound (PR #193400); this model reproduces that bug on purpose.
//!
//! What a trace cannot tell and is therefore not modelled: `record_stream` (cross-stream uses
//! that delay a free until an event completes; traces carry no such uses, so every free takes
//! effect at once), CUDA graph private pools, and the exact addresses
//! `cudaMalloc` returns (ties between equal-size free blocks go to the lowest simulated
//! address, which may order differently from the real one). Both show in docs/validation.md
//! ("Part 3", Q1): a varying-length transformer replays 4.5% low, and exactly with the real
//! driver's addresses scripted in; a loop with `record_stream` and `empty_cache` 3.3% low.

use super::driver::{H200_TOTAL_MEMORY, SMALL_PACKED};
use super::support::options::{Options, parse_divisions};
use super::{AddressMap, BlockSpan, Device, Policy, Refused, Span};
use super::{BuildContext, KeyInfo, OptionError, PolicyInfo};
use crate::policy::support::chunked_map::{ChunkedMap, Cursor};

const fn keys(expandable_default: &'static str) -> [KeyInfo; 7] {
    [
        KeyInfo {
            key: "max_split_size_mb",
            default: "none",
            about: "blocks this large (MiB) are never split; >= 20",
        },
        KeyInfo {
            key: "max_non_split_rounding_mb",
            default: "20",
            about: "an oversize request may take a cached block at most this much larger (MiB)",
        },
        KeyInfo {
            key: "roundup_power2_divisions",
            default: "0",
            about: "round sizes to N steps between powers of two: N, or [MiB:N,...,>:N] per interval",
        },
        KeyInfo {
            key: "garbage_collection_threshold",
            default: "0",
            about: "free old cached blocks above this fraction of the allowed memory (needs memory_fraction)",
        },
        KeyInfo {
            key: "memory_fraction",
            default: "none",
            about: "set_per_process_memory_fraction: cap on reserved memory as a fraction of the capacity (below 1 it also enables gc; 1 sets no cap, as PyTorch 2.11 does; overrides the program's own calls)",
        },
        KeyInfo {
            key: "expandable_segments",
            default: expandable_default,
            about: "grow one segment per stream by mapping pages (cuMemMap) instead of cudaMalloc",
        },
        KeyInfo {
            key: "large_segment_size_mb",
            default: "20",
            about: "kLargeBuffer: segment for 1-10 MiB requests, and the large expandable page (MiB)",
        },
    ]
}

const NATIVE_KEYS: [KeyInfo; 7] = keys("false");
const EXPANDABLE_KEYS: [KeyInfo; 7] = keys("true");

pub const INFO: PolicyInfo = PolicyInfo {
    name: "pytorch",
    summary: "PyTorch's native caching allocator (default PYTORCH_CUDA_ALLOC_CONF), streams and options",
    keys: &NATIVE_KEYS,
    build: build_native,
};

pub const EXPANDABLE_INFO: PolicyInfo = PolicyInfo {
    name: "pytorch-expandable",
    summary: "PyTorch's caching allocator with expandable_segments:True (pages mapped into one growing segment per stream)",
    keys: &EXPANDABLE_KEYS,
    build: build_expandable,
};

fn build_native(o: &Options, ctx: &BuildContext) -> Result<Box<dyn Policy>, OptionError> {
    let cfg = Config::from_options(o, false, ctx.device_memory())?;
    Ok(Box::new(PyTorchCaching::new(cfg)))
}

fn build_expandable(o: &Options, ctx: &BuildContext) -> Result<Box<dyn Policy>, OptionError> {
    let cfg = Config::from_options(o, true, ctx.device_memory())?;
    Ok(Box::new(PyTorchCaching::new(cfg)))
}

/// The fraction to give `set_per_process_memory_fraction` for a cap of `cap` bytes on a
/// device of `total`: `cap / total`, rounded up to the next `f64` where PyTorch's
/// `static_cast<size_t>(fraction * totalGlobalMem)` would otherwise give a byte less.
pub fn fraction_for_cap(cap: u64, total: u64) -> f64 {
    let mut f = cap as f64 / total as f64;
    while ((f * total as f64) as u64) < cap {
        f = f.next_up();
    }
    f
}

const MIB: u64 = 1 << 20;
const K_MIN_BLOCK_SIZE: u64 = 512;
const K_SMALL_SIZE: u64 = MIB;
const K_SMALL_BUFFER: u64 = 2 * MIB;
const K_MIN_LARGE_ALLOC: u64 = 10 * MIB;
const K_ROUND_LARGE: u64 = 2 * MIB;
const K_LARGE_BUFFER: u64 = 20 * MIB;
const NIL: u32 = u32::MAX;

/// The placement-relevant options of `PYTORCH_CUDA_ALLOC_CONF`.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `max_split_size_mb` in bytes; `u64::MAX` when unset.
    pub max_split_size: u64,
    /// `max_non_split_rounding_mb` in bytes.
    pub max_non_split_rounding: u64,
    /// `roundup_power2_divisions`, one entry per power-of-two interval from 1 MiB.
    pub divisions: [u64; 16],
    /// `garbage_collection_threshold`; 0 is off.
    pub gc_threshold: f64,
    /// `torch.cuda.set_per_process_memory_fraction` (or `per_process_memory_fraction`);
    /// `None` when none was set. One below 1 is what enables garbage collection; 1 (no cap)
    /// still overrides the program's own calls.
    pub memory_fraction: Option<f64>,
    pub expandable_segments: bool,
    /// Size of a large segment / large expandable page (`kLargeBuffer`).
    pub large_segment_size: u64,
    /// `totalGlobalMem` of the device.
    pub total_memory: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_split_size: u64::MAX,
            max_non_split_rounding: K_LARGE_BUFFER,
            divisions: [0; 16],
            gc_threshold: 0.0,
            memory_fraction: None,
            expandable_segments: false,
            large_segment_size: K_LARGE_BUFFER,
            total_memory: H200_TOTAL_MEMORY,
        }
    }
}

impl Config {
    /// Reads the policy's options; `total_memory` comes from the replay's capacity.
    pub fn from_options(
        o: &Options,
        expandable: bool,
        total_memory: u64,
    ) -> Result<Self, OptionError> {
        let mut c = Config {
            expandable_segments: o.bool("expandable_segments", expandable)?,
            total_memory,
            ..Config::default()
        };
        if let Some(mb) = o.u64_opt("max_split_size_mb", 1 << 30)? {
            if mb < K_LARGE_BUFFER / MIB {
                return Err(format!(
                    "max_split_size_mb={mb} is too small, PyTorch requires at least 20"
                )
                .into());
            }
            c.max_split_size = mb.saturating_mul(MIB);
        }
        if let Some(mb) = o.u64_opt("max_non_split_rounding_mb", 1 << 30)? {
            if mb < K_LARGE_BUFFER / MIB {
                return Err(format!(
                    "max_non_split_rounding_mb={mb} is too small, PyTorch requires at least 20"
                )
                .into());
            }
            c.max_non_split_rounding = mb.saturating_mul(MIB);
        }
        if let Some(text) = o.str_opt("roundup_power2_divisions") {
            c.divisions = parse_divisions(text)?;
        }
        c.gc_threshold = o.f64("garbage_collection_threshold", 0.0)?;
        if c.gc_threshold != 0.0 && !(c.gc_threshold > 0.0 && c.gc_threshold < 1.0) {
            return Err("garbage_collection_threshold must be in (0.0, 1.0)".into());
        }
        if o.str_opt("memory_fraction").is_some() {
            let f = o.f64("memory_fraction", 1.0)?;
            if !(0.0..=1.0).contains(&f) {
                return Err("memory_fraction must be in [0, 1]".into());
            }
            c.memory_fraction = Some(f);
        }
        if let Some(mb) = o.u64_opt("large_segment_size_mb", 1 << 30)? {
            c.large_segment_size = mb.max(1).saturating_mul(MIB);
        }
        Ok(c)
    }

    /// `allowed_memory_maximum`: set only for a fraction below 1. PyTorch 2.11's
    /// `DeviceCachingAllocator::setMemoryFraction` resets it to `std::nullopt` and gives it a
    /// value only `if (fraction < 1.0)`, and `malloc` collects garbage only when
    /// `allowed_memory_maximum.has_value()` (docs/allocators.md, "memory fraction and garbage
    /// collection"): a fraction of 1 sets no cap and no collection.
    fn allowed_maximum(&self) -> Option<u64> {
        self.memory_fraction
            .filter(|&f| f < 1.0)
            .map(|f| (f * self.total_memory as f64) as u64)
    }

    fn divisions_for(&self, size: u64) -> u64 {
        let log_size = 63 - u64::from(size.leading_zeros());
        let index = log_size.saturating_sub(20).min(15);
        self.divisions[index as usize]
    }

    /// `round_size`.
    pub fn round_size(&self, size: u64) -> u64 {
        if size < K_MIN_BLOCK_SIZE {
            return K_MIN_BLOCK_SIZE;
        }
        let divisions = self.divisions_for(size);
        if divisions > 1 && size > K_MIN_BLOCK_SIZE * divisions {
            roundup_power2_next_division(size, divisions)
        } else {
            size.next_multiple_of(K_MIN_BLOCK_SIZE)
        }
    }

    /// `get_allocation_size`: the segment `cudaMalloc`ed for a rounded request.
    pub fn allocation_size(&self, size: u64) -> u64 {
        if size <= K_SMALL_SIZE {
            K_SMALL_BUFFER
        } else if size < K_MIN_LARGE_ALLOC {
            self.large_segment_size
        } else {
            size.next_multiple_of(K_ROUND_LARGE)
        }
    }
}

/// What of a [`Config`] a replay of one request stream can see: the configuration with the
/// options that cannot matter there set to their defaults, and the size each distinct request
/// size is rounded to. Two configurations with equal `Effective`s for a stream make the same
/// calls in the same order on its replay, so every figure of the two replays is the same
/// (`tune` replays one of them; docs/definitions.md, "tune").
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    cfg: Config,
    /// `round_size` of each size given to [`Config::effective`], in that order.
    rounded: Vec<u64>,
}

impl Config {
    /// This configuration as a replay of requests of `sizes` (every size the stream asks the
    /// allocator for, attempts included) sees it. Why each option set aside cannot matter,
    /// from this model, which follows `DeviceCachingAllocator` of PyTorch's
    /// `c10/cuda/CUDACachingAllocator.cpp`:
    ///
    /// - `roundup_power2_divisions` is read only by `round_size` ([`Config::divisions_for`]),
    ///   and every later step of `malloc` sees the rounded size alone: the rounded sizes stand
    ///   for it (`[256:1,512:2,...]` on a trace whose requests stay below 512 MiB is no
    ///   rounding at all).
    /// - `max_non_split_rounding_mb` is read only by `get_free_block`'s second oversize rule,
    ///   which applies to a (rounded) request of at least `max_split_size`: below that for
    ///   every request it is never read. Without expandable segments no block is larger than
    ///   the largest segment (next item), so when the smallest such request plus the rounding
    ///   exceeds that, the rule never refuses a block, as with any larger rounding (`u64::MAX`
    ///   stands for them all).
    /// - `max_split_size_mb` without expandable segments: every block is a piece of one
    ///   segment (`alloc_found_block` splits, `try_merge_blocks` joins neighbours, both inside
    ///   a segment), and each segment is `get_allocation_size` of a rounded request. When the
    ///   largest of those and the largest request are below `max_split_size`, no request and
    ///   no block reaches it: the oversize rules of `get_free_block` never refuse a block,
    ///   `should_split`'s `size < max_split_size` always holds, and
    ///   `release_available_cached_blocks` finds no block of at least `max_split_size` to free
    ///   and returns false having done nothing, which is what it returns at once when the
    ///   option is unset. With expandable segments, free blocks grow across pages past any
    ///   segment size, so the option stays.
    /// - `garbage_collection_threshold` without a memory fraction below 1, configured or set
    ///   by the program (`program_caps`): `gc_enabled` is false
    ///   (`garbage_collect_cached_blocks` needs `allowed_memory_maximum`).
    pub fn effective(&self, sizes: &[u64], program_caps: bool) -> Effective {
        let rounded: Vec<u64> = sizes.iter().map(|&s| self.round_size(s)).collect();
        let largest_request = rounded.iter().copied().max().unwrap_or(0);
        let largest_segment = rounded
            .iter()
            .map(|&s| self.allocation_size(s))
            .max()
            .unwrap_or(0);
        let mut cfg = Config {
            divisions: [0; 16],
            ..self.clone()
        };
        // The smallest request the second oversize rule applies to.
        let oversize = rounded.iter().filter(|&&r| r >= cfg.max_split_size).min();
        match oversize {
            None => cfg.max_non_split_rounding = K_LARGE_BUFFER,
            Some(&r)
                if !cfg.expandable_segments
                    && r.saturating_add(cfg.max_non_split_rounding) > largest_segment =>
            {
                cfg.max_non_split_rounding = u64::MAX
            }
            Some(_) => {}
        }
        if !cfg.expandable_segments && largest_request.max(largest_segment) < cfg.max_split_size {
            cfg.max_split_size = u64::MAX;
        }
        // A configured fraction overrides the program's calls; without one, the program's own
        // fraction is what collection would run under.
        let capped = match cfg.memory_fraction {
            Some(_) => cfg.allowed_maximum().is_some(),
            None => program_caps,
        };
        if !capped {
            cfg.gc_threshold = 0.0;
        }
        Effective { cfg, rounded }
    }
}

/// A configuration with garbage collection as a replay without it: equal to the replay of
/// `base` whenever that replay's reserved memory peaks at no more than `peak_at_most`
/// ([`Effective::without_collection`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Uncollected {
    pub base: Effective,
    pub peak_at_most: u64,
}

impl Effective {
    /// With a garbage collection threshold (and so a memory fraction), the configurations
    /// that replay alike below a peak: first the same without the threshold, then without the
    /// threshold and the fraction. The runs read the threshold and the fraction only through
    /// `total_allocated_memory`, and make the same calls while those reads decide as they
    /// would without them: `garbage_collect_cached_blocks` does nothing at or below
    /// `threshold × allowed`, `alloc_block` refuses only above `allowed_memory_maximum`
    /// (`total_allocated_memory + size > allowed`, `size` at most the largest segment). At
    /// each such read `total_allocated_memory` is at most what the allocator held after the
    /// previous request (within a request it only drops until it grows by the one allocation
    /// that succeeds), and the driver's reserved bytes are at least it (each segment is a whole
    /// number of 2 MiB pages or one mapped range, never a packed small allocation, while
    /// `large_segment_size` exceeds the driver's [`SMALL_PACKED`]). So when the run without
    /// them peaks at or below `peak_at_most`, the run with them takes no other branch; the age
    /// counter garbage collection keeps (`get_free_blocks_calls`) feeds nothing else.
    pub fn without_collection(&self) -> Vec<Uncollected> {
        let Some(allowed) = self.cfg.allowed_maximum() else {
            return Vec::new();
        };
        if self.cfg.gc_threshold <= 0.0 || self.cfg.large_segment_size <= SMALL_PACKED {
            return Vec::new();
        }
        let threshold = (self.cfg.gc_threshold * allowed as f64) as u64;
        let largest_segment = self
            .rounded
            .iter()
            .map(|&s| self.cfg.allocation_size(s))
            .max()
            .unwrap_or(0);
        let base = |memory_fraction| Effective {
            cfg: Config {
                gc_threshold: 0.0,
                memory_fraction,
                ..self.cfg.clone()
            },
            rounded: self.rounded.clone(),
        };
        vec![
            Uncollected {
                base: base(self.cfg.memory_fraction),
                peak_at_most: threshold,
            },
            Uncollected {
                base: base(None),
                peak_at_most: threshold.min(allowed.saturating_sub(largest_segment)),
            },
        ]
    }
}

impl Effective {
    /// The class with the two size thresholds (`max_split_size_mb`, `max_non_split_rounding_mb`)
    /// set aside: classes equal here differ in those alone, and one replay's [`Thresholds`]
    /// tell which of them replay as it did.
    pub fn without_thresholds(&self) -> Effective {
        Effective {
            cfg: Config {
                max_split_size: 0,
                max_non_split_rounding: 0,
                ..self.cfg.clone()
            },
            rounded: self.rounded.clone(),
        }
    }
}

/// The values of a size threshold that decide every comparison a replay made with it as its own
/// value did: those above `low` and at most `high`. A threshold is read only as `x < threshold`
/// (its negation `x >= threshold` included), and each such comparison that came out true bounds
/// the values from below by `x`, each that came out false from above; a read that is no
/// comparison admits the value itself only ([`Agreeing::exact`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Agreeing {
    low: u64,
    high: u64,
}

impl Default for Agreeing {
    /// Before any read: every value agrees (thresholds are never 0).
    fn default() -> Agreeing {
        Agreeing {
            low: 0,
            high: u64::MAX,
        }
    }
}

impl Agreeing {
    /// `x < threshold`, recorded.
    fn less(&mut self, x: u64, threshold: u64) -> bool {
        let below = x < threshold;
        if below {
            self.low = self.low.max(x);
        } else {
            self.high = self.high.min(x);
        }
        below
    }

    /// A read that only `threshold` itself answers alike.
    fn exact(&mut self, threshold: u64) {
        self.low = threshold - 1;
        self.high = threshold;
    }

    /// Whether `value` answers every recorded comparison as the replay's own value did.
    pub fn admits(&self, value: u64) -> bool {
        self.low < value && value <= self.high
    }
}

/// What a replay's branches say of its two size thresholds. With every other option alike (equal
/// [`Effective::without_thresholds`]), a configuration whose `max_split_size` and
/// `max_non_split_rounding` both agree takes every branch this replay took, so it makes the same
/// driver calls in the same order and gives the same figures: `tune` replays it no more.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Thresholds {
    pub split: Agreeing,
    pub rounding: Agreeing,
}

impl Thresholds {
    /// Whether the configuration `cfg` takes every branch the replay took.
    pub fn admit(&self, cfg: &Config) -> bool {
        self.split.admits(cfg.max_split_size) && self.rounding.admits(cfg.max_non_split_rounding)
    }
}

/// `roundup_power2_next_division`: the next of `divisions` equal steps between the powers of
/// two around `size` (1200 with 4 divisions → 1280).
fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    let step = floor >> (63 - divisions.leading_zeros());
    if step == 0 {
        return floor << 1;
    }
    let down = size & !(step - 1);
    if down == size { size } else { down + step }
}

#[derive(Debug, Clone, Copy)]
struct Block {
    addr: u64,
    size: u64,
    prev: u32,
    next: u32,
    stream: u32,
    small: bool,
    allocated: bool,
    mapped: bool,
    exists: bool,
    /// Index of the expandable segment, or NIL.
    es: u32,
    /// The slot an allocated block serves.
    slot: u32,
    gc_base: u64,
}

#[derive(Debug, Clone, Copy)]
struct ExpandableSegment {
    base: u64,
    page: u64,
}

#[derive(Debug, Default)]
struct BlockPool {
    /// Free mapped blocks by (stream, size, address): `BlockComparatorSize`.
    free: ChunkedMap<BlockKey, u32>,
    /// Unmapped ranges of expandable segments by (stream, address): `BlockComparatorAddress`.
    unmapped: ChunkedMap<BlockKey, u32>,
    get_free_blocks_calls: u64,
    /// Where the last block split or merged in place landed in `free`, as that change left the
    /// index: a request freed right after it was served merges with the rest of its split,
    /// and finds it there without a search while nothing moved it ([`PyTorchCaching::place_of`]).
    last_placed: Cursor,
}

/// A key of the free-block indexes: a 128-bit number, ordered as that number, kept as two
/// 64-bit halves so that an index entry (key and block id) takes 24 bytes, where a `u128`'s
/// 16-byte alignment makes it 32: every split and merge moves index entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BlockKey {
    high: u64,
    low: u64,
}

impl BlockKey {
    fn number(self) -> u128 {
        (u128::from(self.high) << 64) | u128::from(self.low)
    }
}

impl Ord for BlockKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.number().cmp(&other.number())
    }
}

impl PartialOrd for BlockKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }

    fn lt(&self, other: &Self) -> bool {
        self.number() < other.number()
    }
}

/// The key of a free block: stream (its low 16 bits), size, address.
fn size_key(stream: u32, size: u64, addr: u64) -> BlockKey {
    debug_assert!(size < 1 << 48);
    BlockKey {
        high: (u64::from(stream) << 48) | size,
        low: addr,
    }
}

/// The key of an unmapped range: stream, address.
fn addr_key(stream: u32, addr: u64) -> BlockKey {
    BlockKey {
        high: u64::from(stream),
        low: addr,
    }
}

fn key_stream(key: BlockKey) -> u32 {
    (key.high >> 48) as u32
}

/// The caching allocator of one device.
#[derive(Debug)]
pub struct PyTorchCaching {
    cfg: Config,
    allowed_maximum: Option<u64>,
    blocks: Vec<Block>,
    unused_ids: Vec<u32>,
    /// [small, large].
    pools: [BlockPool; 2],
    slot_block: Vec<u32>,
    allocated: u64,
    /// `total_allocated_memory`: bytes held from the driver.
    total_allocated_memory: u64,
    segments: Vec<ExpandableSegment>,
    /// Every read of the two size thresholds so far.
    thresholds: Thresholds,
}

impl PyTorchCaching {
    pub fn new(cfg: Config) -> Self {
        PyTorchCaching {
            allowed_maximum: cfg.allowed_maximum(),
            cfg,
            blocks: Vec::new(),
            unused_ids: Vec::new(),
            pools: Default::default(),
            slot_block: Vec::new(),
            allocated: 0,
            total_allocated_memory: 0,
            segments: Vec::new(),
            thresholds: Thresholds::default(),
        }
    }

    /// The values of the two size thresholds that would have taken every branch taken so far.
    pub fn thresholds(&self) -> Thresholds {
        self.thresholds
    }

    fn gc_enabled(&self) -> bool {
        self.allowed_maximum.is_some() && self.cfg.gc_threshold > 0.0
    }

    fn new_block(&mut self, b: Block) -> u32 {
        match self.unused_ids.pop() {
            Some(id) => {
                self.blocks[id as usize] = b;
                id
            }
            None => {
                self.blocks.push(b);
                (self.blocks.len() - 1) as u32
            }
        }
    }

    fn delete(&mut self, id: u32) {
        self.blocks[id as usize].exists = false;
        self.unused_ids.push(id);
    }

    fn b(&self, id: u32) -> &Block {
        &self.blocks[id as usize]
    }

    fn bm(&mut self, id: u32) -> &mut Block {
        &mut self.blocks[id as usize]
    }

    fn pool_of(&self, id: u32) -> usize {
        usize::from(!self.b(id).small)
    }

    fn is_split(&self, id: u32) -> bool {
        self.b(id).prev != NIL || self.b(id).next != NIL
    }

    fn free_key(&self, id: u32) -> BlockKey {
        let b = self.b(id);
        size_key(b.stream, b.size, b.addr)
    }

    fn unmapped_key(&self, id: u32) -> BlockKey {
        let b = self.b(id);
        addr_key(b.stream, b.addr)
    }

    /// `BlockPool::insert_into_blocks`; at `place` when given: the place of an entry that
    /// leaves the index as this block enters it (a block split or merged into this one).
    fn insert_into_blocks(&mut self, id: u32, place: Option<Cursor>) {
        self.index_free(self.pool_of(id), id, self.free_key(id), place);
    }

    /// [`PyTorchCaching::insert_into_blocks`] where the caller has the block's pool and key
    /// at hand (`pool_of`, `free_key`).
    #[inline(always)]
    fn index_free(&mut self, pool: usize, id: u32, key: BlockKey, place: Option<Cursor>) {
        let pool = &mut self.pools[pool];
        self.blocks[id as usize].gc_base = pool.get_free_blocks_calls;
        match place {
            Some(at) => pool.last_placed = pool.free.replace_at(at, key, id),
            None => {
                pool.free.insert(key, id);
            }
        }
    }

    /// The place of free block `id`'s key in its pool's index; `None` when the key is not
    /// there. Two free blocks can have one key: the real driver's addresses
    /// ([`super::Driver::script_segments`]) may give two segments alive at once in the replay
    /// the same address, and the index then holds one entry for both, as an ordered map does.
    #[inline(always)]
    fn place_of(&self, id: u32) -> Option<Cursor> {
        let pool = &self.pools[self.pool_of(id)];
        let free = &pool.free;
        let key = self.free_key(id);
        // Keys are unique in the index: an entry under this key is at its place, however old
        // the cursor that finds it.
        if free.at_old(pool.last_placed).is_some_and(|(k, _)| k == key) {
            return Some(pool.last_placed);
        }
        let at = free.seek(&key);
        free.at(at).is_some_and(|(k, _)| k == key).then_some(at)
    }

    fn remove_from_blocks(&mut self, id: u32) {
        let pool = self.pool_of(id);
        let key = self.free_key(id);
        self.pools[pool].free.remove(&key);
    }

    fn expandable_size(&self, id: u32) -> u64 {
        let b = self.b(id);
        let tail = if b.next != NIL && !self.b(b.next).mapped {
            self.b(b.next).size
        } else {
            0
        };
        b.size + tail
    }

    /// `get_free_block`: the block found and its place in the index, where it still is.
    fn get_free_block(&mut self, pool: usize, stream: u32, size: u64) -> Option<(u32, Cursor)> {
        if self.gc_enabled() {
            self.pools[pool].get_free_blocks_calls += 1;
        }
        let free = &self.pools[pool].free;
        // The block at `at` when it is of this stream.
        let of_stream = |at: Cursor| {
            free.at(at)
                .and_then(|(k, id)| (key_stream(k) == stream).then_some(id))
        };
        // A request like the one just freed finds the block its merge put back.
        let mut at = free.seek_from(self.pools[pool].last_placed, &size_key(stream, size, 0));
        let mut found = of_stream(at)?;
        if self.b(found).es != NIL {
            if self.cfg.expandable_segments {
                // Best fit by the size a block can grow to, so requests steer away from the
                // segment's growing tail.
                while self.b(found).es != NIL {
                    let after = free.next(at);
                    match of_stream(after) {
                        Some(next) if self.expandable_size(next) < self.expandable_size(found) => {
                            (at, found) = (after, next);
                        }
                        _ => break,
                    }
                }
            } else {
                while self.b(found).es != NIL {
                    at = free.next(at);
                    found = of_stream(at)?;
                }
            }
        }
        let block_size = self.b(found).size;
        let (max_split, rounding) = (self.cfg.max_split_size, self.cfg.max_non_split_rounding);
        // Oversize blocks are not handed to small requests, nor to large ones they exceed by
        // too much (`block_size >= size + rounding`; the block is at least `size`).
        let t = &mut self.thresholds;
        if t.split.less(size, max_split) {
            if !t.split.less(block_size, max_split) {
                return None;
            }
        } else if !t.rounding.less(block_size - size, rounding) {
            return None;
        }
        Some((found, at))
    }

    /// `should_split`.
    fn should_split(&mut self, id: u32, size: u64) -> bool {
        let remaining = self.b(id).size - size;
        if self.b(id).small || self.cfg.expandable_segments {
            remaining >= K_MIN_BLOCK_SIZE
        } else {
            // The split size decides only where the rest is worth keeping: read it there.
            remaining > K_SMALL_SIZE && self.thresholds.split.less(size, self.cfg.max_split_size)
        }
    }

    /// `alloc_block`.
    fn alloc_block(
        &mut self,
        small: bool,
        stream: u32,
        size: u64,
        alloc_size: u64,
        driver: &mut Device,
    ) -> Option<u32> {
        if let Some(max) = self.allowed_maximum
            && self.total_allocated_memory + alloc_size > max
        {
            return None;
        }
        if self.cfg.expandable_segments {
            return self.try_allocate_expandable_block(small, stream, size, driver);
        }
        let addr = driver.malloc(alloc_size)?;
        self.total_allocated_memory += alloc_size;
        Some(self.new_block(Block {
            addr,
            size: alloc_size,
            prev: NIL,
            next: NIL,
            stream,
            small,
            allocated: false,
            mapped: true,
            exists: true,
            es: NIL,
            slot: NIL,
            gc_base: 0,
        }))
    }

    /// `release_block`: `cudaFree` of a whole unsplit segment.
    fn release_block(&mut self, id: u32, driver: &mut Device) {
        let (addr, size) = (self.b(id).addr, self.b(id).size);
        driver.free(addr, size);
        self.total_allocated_memory -= size;
        self.remove_from_blocks(id);
        self.delete(id);
    }

    /// `release_available_cached_blocks`: free one oversize block big enough, else the largest
    /// oversize blocks until their sum is.
    fn release_available_cached_blocks(
        &mut self,
        pool: usize,
        stream: u32,
        size: u64,
        driver: &mut Device,
    ) -> bool {
        let max_split = self.cfg.max_split_size;
        // Unset, nothing is released; set, what is depends on its value.
        self.thresholds.split.exact(max_split);
        if max_split == u64::MAX {
            return false;
        }
        let key_size = size.max(max_split);
        let key = size_key(stream, key_size, 0);
        let hit = self.pools[pool].free.range_from(&key).next();
        if let Some((k, id)) = hit
            && key_stream(k) == stream
            && self.b(id).es == NIL
        {
            self.release_block(id, driver);
            return true;
        }
        let mut released = 0;
        let mut victims = Vec::new();
        for (k, id) in self.pools[pool].free.range_below(&key) {
            let b = self.b(id);
            if released >= key_size || b.size < max_split || key_stream(k) != stream {
                break;
            }
            if b.es == NIL {
                released += b.size;
                victims.push(id);
            }
        }
        for id in victims {
            self.release_block(id, driver);
        }
        released >= key_size
    }

    /// `release_cached_blocks` / `empty_cache`: every unsplit cached segment back to the
    /// driver, every fully free page of expandable segments unmapped.
    fn release_cached_blocks(&mut self, driver: &mut Device) {
        for pool in [1, 0] {
            self.release_blocks(pool, driver);
        }
    }

    /// `release_blocks`.
    fn release_blocks(&mut self, pool: usize, driver: &mut Device) {
        let ids: Vec<u32> = self.pools[pool].free.iter().map(|(_, id)| id).collect();
        let mut to_unmap = Vec::new();
        for id in ids {
            if self.b(id).es != NIL {
                to_unmap.push(id);
            } else if !self.is_split(id) {
                self.release_block(id, driver);
            }
        }
        for id in to_unmap {
            self.unmap_block(id, driver);
            if !self.is_split(id) {
                // `release_expandable_segment`: nothing is mapped any more.
                let key = self.unmapped_key(id);
                self.pools[pool].unmapped.remove(&key);
                self.delete(id);
            }
        }
    }

    /// `garbage_collect_cached_blocks`: free the oldest unsplit large cached blocks until
    /// reserved memory is back under the threshold.
    fn garbage_collect(&mut self, driver: &mut Device) {
        let Some(allowed) = self.allowed_maximum else {
            return;
        };
        let threshold = (self.cfg.gc_threshold * allowed as f64) as u64;
        if self.total_allocated_memory <= threshold {
            return;
        }
        let target = self.total_allocated_memory - threshold;
        let calls = self.pools[1].get_free_blocks_calls;
        let age = |b: &Block| calls - b.gc_base;
        let (mut total_age, mut count) = (0u64, 0u64);
        for (_, id) in self.pools[1].free.iter() {
            if !self.is_split(id) {
                total_age += age(self.b(id));
                count += 1;
            }
        }
        if count == 0 {
            return;
        }
        let (mut reclaimed, mut freed) = (0u64, true);
        while reclaimed < target && freed && count > 0 {
            let age_threshold = total_age as f64 / count as f64;
            freed = false;
            let ids: Vec<u32> = self.pools[1].free.iter().map(|(_, id)| id).collect();
            for id in ids {
                let b = *self.b(id);
                if !self.is_split(id) && b.es == NIL && age(&b) as f64 >= age_threshold {
                    freed = true;
                    reclaimed += b.size;
                    total_age -= age(&b);
                    count -= 1;
                    self.release_block(id, driver);
                }
            }
        }
    }

    /// `try_merge_blocks`'s test: whether `src` is a block, free, and in the same state as
    /// `dst`.
    fn mergeable(&self, dst: u32, src: u32) -> bool {
        src != NIL && !self.b(src).allocated && self.b(src).mapped == self.b(dst).mapped
    }

    /// `try_merge_blocks` of an unmapped range `dst` out of the index: absorb its neighbour
    /// `src` when that is an unmapped range too.
    fn try_merge_unmapped(&mut self, dst: u32, src: u32) {
        if self.mergeable(dst, src) {
            let key = self.unmapped_key(src);
            let pool = self.pool_of(src);
            self.pools[pool].unmapped.remove(&key);
            self.absorb(dst, src);
        }
    }

    /// `free_block` of a mapped block `id` out of the index: merged with its free mapped
    /// neighbours, then indexed, in the place of a neighbour it absorbed when there is one.
    fn free_block(&mut self, id: u32) {
        let (prev, next) = (self.b(id).prev, self.b(id).next);
        let (with_prev, with_next) = (self.mergeable(id, prev), self.mergeable(id, next));
        let place = match (with_prev, with_next) {
            (false, false) => None,
            (true, false) => self.place_of(prev),
            (with_prev, true) => {
                if with_prev {
                    self.remove_from_blocks(prev);
                }
                self.place_of(next)
            }
        };
        if with_prev {
            self.absorb(id, prev);
        }
        if with_next {
            self.absorb(id, next);
        }
        self.insert_into_blocks(id, place);
    }

    /// The end of `try_merge_blocks`: `dst` takes in its neighbour `src`, which is out of every
    /// index, and `src` is deleted.
    #[inline(always)]
    fn absorb(&mut self, dst: u32, src: u32) {
        let s = *self.b(src);
        if self.b(dst).prev == src {
            let d = self.bm(dst);
            d.addr = s.addr;
            d.prev = s.prev;
            if s.prev != NIL {
                self.bm(s.prev).next = dst;
            }
        } else {
            self.bm(dst).next = s.next;
            if s.next != NIL {
                self.bm(s.next).prev = dst;
            }
        }
        self.bm(dst).size += s.size;
        self.delete(src);
    }

    /// Links `id` between `before` and `after`.
    fn splice(&mut self, id: u32, before: u32, after: u32) {
        if before != NIL {
            self.bm(before).next = id;
        }
        self.bm(id).prev = before;
        if after != NIL {
            self.bm(after).prev = id;
        }
        self.bm(id).next = after;
    }

    /// `find_expandable_block`: the lowest-address run of free and unmapped space of this
    /// stream's segment that fits `size`, or a new segment.
    fn find_expandable_block(
        &mut self,
        small: bool,
        stream: u32,
        size: u64,
        driver: &mut Device,
    ) -> u32 {
        let pool = usize::from(!small);
        let allocatable = |me: &Self, id: u32| id != NIL && !me.b(id).allocated;
        let has_space = |me: &Self, mut id: u32| {
            let mut bytes = 0;
            while bytes < size && allocatable(me, id) {
                bytes += me.b(id).size;
                id = me.b(id).next;
            }
            bytes >= size
        };
        let candidates: Vec<u32> = self.pools[pool]
            .unmapped
            .range_from(&addr_key(stream, 0))
            .take_while(|&(k, _)| k.high as u32 == stream)
            .map(|(_, id)| id)
            .collect();
        for mut c in candidates {
            if allocatable(self, self.b(c).prev) {
                c = self.b(c).prev;
            }
            if has_space(self, c) {
                return c;
            }
        }
        let page = if small {
            K_SMALL_BUFFER
        } else {
            self.cfg.large_segment_size
        };
        // Address space for 1 1/8 of the device's memory (`ExpandableSegment`).
        let total = self.cfg.total_memory;
        let handles = (total + total / 8).div_ceil(page);
        let va = handles * page;
        let base = driver.reserve_address(va);
        self.segments.push(ExpandableSegment { base, page });
        let id = self.new_block(Block {
            addr: base,
            size: va,
            prev: NIL,
            next: NIL,
            stream,
            small,
            allocated: false,
            mapped: false,
            exists: true,
            es: (self.segments.len() - 1) as u32,
            slot: NIL,
            gc_base: 0,
        });
        let key = self.unmapped_key(id);
        self.pools[pool].unmapped.insert(key, id);
        id
    }

    /// `map_block`: back the first `size` bytes (rounded up to pages) of an unmapped range.
    fn map_block(&mut self, id: u32, size: u64, driver: &mut Device) -> bool {
        let b = *self.b(id);
        let seg = self.segments[b.es as usize];
        let begin = (b.addr - seg.base) / seg.page;
        let end = (b.addr + size - seg.base).div_ceil(seg.page);
        if begin == end || !driver.map(end - begin, seg.page) {
            return false;
        }
        let mapped = (end - begin) * seg.page;
        let pool = self.pool_of(id);
        let key = self.unmapped_key(id);
        self.pools[pool].unmapped.remove(&key);
        self.bm(id).mapped = true;
        if mapped < b.size {
            let rest = self.new_block(Block {
                addr: b.addr + mapped,
                size: b.size - mapped,
                mapped: false,
                allocated: false,
                ..b
            });
            self.splice(rest, id, b.next);
            let key = self.unmapped_key(rest);
            self.pools[pool].unmapped.insert(key, rest);
            self.bm(id).size = mapped;
        }
        self.free_block(id);
        self.total_allocated_memory += mapped;
        true
    }

    /// `try_allocate_expandable_block`.
    fn try_allocate_expandable_block(
        &mut self,
        small: bool,
        stream: u32,
        size: u64,
        driver: &mut Device,
    ) -> Option<u32> {
        let mut c = self.find_expandable_block(small, stream, size, driver);
        if !self.b(c).mapped {
            let want = self.b(c).size.min(size);
            if !self.map_block(c, want, driver) {
                return None;
            }
        }
        while self.b(c).size < size {
            let remaining = size - self.b(c).size;
            let next = self.b(c).next;
            let want = remaining.min(self.b(next).size);
            if !self.map_block(next, want, driver) {
                return None;
            }
            c = next;
        }
        self.remove_from_blocks(c);
        Some(c)
    }

    /// `unmap_block`: give back the fully free pages inside a free expandable block.
    fn unmap_block(&mut self, id: u32, driver: &mut Device) {
        let b = *self.b(id);
        let seg = self.segments[b.es as usize];
        let begin = (b.addr - seg.base).div_ceil(seg.page);
        let end = (b.addr + b.size - seg.base) / seg.page;
        if begin >= end {
            return;
        }
        self.remove_from_blocks(id);
        let start = seg.base + begin * seg.page;
        let bytes = (end - begin) * seg.page;
        let before = start - b.addr;
        if before > 0 {
            let f = self.new_block(Block { size: before, ..b });
            self.splice(f, b.prev, id);
            self.insert_into_blocks(f, None);
        }
        let after = b.size - before - bytes;
        if after > 0 {
            let f = self.new_block(Block {
                addr: start + bytes,
                size: after,
                ..b
            });
            let next = self.b(id).next;
            self.splice(f, id, next);
            self.insert_into_blocks(f, None);
        }
        {
            let m = self.bm(id);
            m.addr = start;
            m.size = bytes;
            m.mapped = false;
        }
        let prev = self.b(id).prev;
        self.try_merge_unmapped(id, prev);
        let next = self.b(id).next;
        self.try_merge_unmapped(id, next);
        let key = self.unmapped_key(id);
        let pool = self.pool_of(id);
        self.pools[pool].unmapped.insert(key, id);
        self.total_allocated_memory -= bytes;
        driver.unmap(end - begin, seg.page);
    }
}

impl Policy for PyTorchCaching {
    fn malloc(
        &mut self,
        slot: u32,
        orig_size: u64,
        stream: u32,
        driver: &mut Device,
    ) -> Result<(), Refused> {
        let size = self.cfg.round_size(orig_size);
        let small = size <= K_SMALL_SIZE;
        let pool = usize::from(!small);
        // A cached block stays in the index until it is known whether it splits: its rest
        // then takes its place there.
        let (mut id, place) = match self.get_free_block(pool, stream, size) {
            Some((id, at)) => (id, Some(at)),
            None => {
                if self.gc_enabled() {
                    self.garbage_collect(driver);
                }
                let alloc_size = self.cfg.allocation_size(size);
                let mut found = self.alloc_block(small, stream, size, alloc_size, driver);
                if found.is_none()
                    && self.release_available_cached_blocks(pool, stream, size, driver)
                {
                    found = self.alloc_block(small, stream, size, alloc_size, driver);
                }
                if found.is_none() {
                    driver.count_retry();
                    self.release_cached_blocks(driver);
                    found = self.alloc_block(small, stream, size, alloc_size, driver);
                }
                (found.ok_or(Refused)?, None)
            }
        };
        let served_size = if self.should_split(id, size) {
            // `alloc_found_block`: the request takes the low end, the rest stays cached.
            let rest = id;
            let r = *self.b(rest);
            // A copy of the rest, then what differs: the served block is its low end.
            id = self.new_block(r);
            // One borrow of the table for the three blocks: no reload of it between them.
            let blocks = &mut self.blocks[..];
            let served = &mut blocks[id as usize];
            served.size = size;
            served.next = rest;
            served.stream = stream;
            served.allocated = true;
            served.slot = slot;
            if r.prev != NIL {
                blocks[r.prev as usize].next = id;
            }
            let (addr, left) = (r.addr + size, r.size - size);
            let m = &mut blocks[rest as usize];
            m.prev = id;
            m.addr = addr;
            m.size = left;
            self.index_free(pool, rest, size_key(r.stream, left, addr), place);
            size
        } else {
            if let Some(at) = place {
                self.pools[pool].free.remove_at(at);
            }
            let served = self.bm(id);
            served.allocated = true;
            served.slot = slot;
            served.size
        };
        self.allocated += served_size;
        let slot = slot as usize;
        if self.slot_block.len() <= slot {
            self.slot_block.resize(slot + 1, NIL);
        }
        self.slot_block[slot] = id;
        Ok(())
    }

    /// `emptyCache`: `release_cached_blocks`.
    fn empty_cache(&mut self, driver: &mut Device) {
        self.release_cached_blocks(driver);
    }

    /// `DeviceCachingAllocator::setMemoryFraction` of PyTorch 2.11: a cap of
    /// `fraction × totalGlobalMem` for a fraction below 1, none at 1. A fraction the options
    /// named (`memory_fraction`) stands for the whole run: the program's calls are not replayed.
    fn set_memory_fraction(&mut self, fraction: f64) {
        if self.cfg.memory_fraction.is_some() {
            return;
        }
        self.allowed_maximum =
            (fraction < 1.0).then_some((fraction * self.cfg.total_memory as f64) as u64);
    }

    fn free(&mut self, slot: u32, _driver: &mut Device) {
        let id = std::mem::replace(&mut self.slot_block[slot as usize], NIL);
        let freed = self.bm(id);
        freed.allocated = false;
        let size = freed.size;
        self.allocated -= size;
        self.free_block(id);
    }

    fn allocated(&self) -> u64 {
        self.allocated
    }

    fn address_map_into(&self, map: &mut AddressMap) {
        for (id, b) in self.blocks.iter().enumerate() {
            if !b.exists || !b.mapped {
                continue;
            }
            let slot = b.allocated.then_some(b.slot);
            map.blocks.push(BlockSpan {
                address: b.addr,
                size: b.size,
                slot,
            });
            // A segment starts where the previous block is absent or unmapped.
            if b.prev == NIL || !self.blocks[b.prev as usize].mapped {
                let mut size = 0;
                let mut cur = id as u32;
                while cur != NIL && self.blocks[cur as usize].mapped {
                    size += self.blocks[cur as usize].size;
                    cur = self.blocks[cur as usize].next;
                }
                map.segments.push(Span {
                    address: b.addr,
                    size,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Driver, DriverModel};

    fn native() -> (PyTorchCaching, Driver) {
        (
            PyTorchCaching::new(Config::default()),
            Driver::new(DriverModel::default()),
        )
    }

    fn expandable() -> (PyTorchCaching, Driver) {
        let cfg = Config {
            expandable_segments: true,
            ..Config::default()
        };
        (
            PyTorchCaching::new(cfg),
            Driver::new(DriverModel::default()),
        )
    }

    /// Allocates `sizes` into consecutive slots from `first`, then frees them.
    fn alloc_all(p: &mut PyTorchCaching, d: &mut Driver, first: u32, sizes: &[u64]) {
        for (i, &s) in sizes.iter().enumerate() {
            p.malloc(first + i as u32, s, 0, &mut d.device()).unwrap();
        }
    }

    fn free_all(p: &mut PyTorchCaching, d: &mut Driver, first: u32, n: u32) {
        for slot in first..first + n {
            p.free(slot, &mut d.device());
        }
    }

    // pytorch/devlogs 2026-06-01: eight 16 MiB blocks cannot be joined into 32 MiB ones.
    #[test]
    fn eight_16mib_freed_then_four_32mib_reserve_256mib() {
        let (mut p, mut d) = native();
        alloc_all(&mut p, &mut d, 0, &[16 * MIB; 8]);
        free_all(&mut p, &mut d, 0, 8);
        alloc_all(&mut p, &mut d, 8, &[32 * MIB; 4]);
        assert_eq!(d.reserved(), 256 * MIB);
        assert_eq!(d.device_allocs(), 12);
    }

    #[test]
    fn four_32mib_freed_then_eight_16mib_reserve_128mib() {
        let (mut p, mut d) = native();
        alloc_all(&mut p, &mut d, 0, &[32 * MIB; 4]);
        free_all(&mut p, &mut d, 0, 4);
        alloc_all(&mut p, &mut d, 4, &[16 * MIB; 8]);
        assert_eq!(d.reserved(), 128 * MIB);
        assert_eq!(p.allocated(), 128 * MIB);
    }

    #[test]
    fn a_2mib_then_a_half_mib_request_reserve_22mib_in_two_pools() {
        let (mut p, mut d) = native();
        alloc_all(&mut p, &mut d, 0, &[2 * MIB, MIB / 2]);
        assert_eq!(d.reserved(), 22 * MIB);
        let (mut p, mut d) = native();
        alloc_all(&mut p, &mut d, 0, &[2 * MIB, 2 * MIB]);
        assert_eq!(d.reserved(), 20 * MIB);
    }

    #[test]
    fn expandable_segments_map_20mib_pages_and_reuse_them_after_a_full_free() {
        let (mut p, mut d) = expandable();
        alloc_all(&mut p, &mut d, 0, &[16 * MIB; 8]);
        assert_eq!(d.reserved(), 140 * MIB);
        free_all(&mut p, &mut d, 0, 8);
        alloc_all(&mut p, &mut d, 8, &[32 * MIB; 4]);
        assert_eq!(d.reserved(), 140 * MIB);
        assert_eq!(p.allocated(), 128 * MIB);
    }

    #[test]
    fn expandable_small_pool_maps_2mib_pages() {
        let (mut p, mut d) = expandable();
        alloc_all(&mut p, &mut d, 0, &[MIB / 2, 2 * MIB]);
        assert_eq!(d.reserved(), 2 * MIB + 20 * MIB);
    }

    #[test]
    fn empty_cache_unmaps_free_pages_of_expandable_segments() {
        let (mut p, mut d) = expandable();
        alloc_all(&mut p, &mut d, 0, &[30 * MIB, 30 * MIB]);
        assert_eq!(d.reserved(), 60 * MIB);
        p.free(0, &mut d.device());
        Policy::empty_cache(&mut p, &mut d.device());
        // The first 30 MiB are free: only the first page (20 MiB) is wholly free.
        assert_eq!(d.reserved(), 40 * MIB);
        p.free(1, &mut d.device());
        Policy::empty_cache(&mut p, &mut d.device());
        assert_eq!(d.reserved(), 0);
    }

    /// PR #193400's reproducer: a 64 MiB canary, then per cycle A = 91 MiB and B = 45.5 MiB,
    /// a 2 MiB block that stays, and A and B freed. `cycle k` is after k + 1 cycles.
    fn pr_193400(cfg: Config) -> Vec<(u64, u64)> {
        let mut p = PyTorchCaching::new(cfg);
        let mut d = Driver::new(DriverModel { capacity: 16 << 30 });
        p.malloc(0, 64 * MIB, 0, &mut d.device()).unwrap();
        let mut seen = Vec::new();
        let mut slot = 1;
        for cycle in 0..=100 {
            p.malloc(slot, 91 * MIB, 0, &mut d.device()).unwrap();
            p.malloc(slot + 1, 91 * MIB / 2, 0, &mut d.device())
                .unwrap();
            p.malloc(slot + 2, 2 * MIB, 0, &mut d.device()).unwrap();
            p.free(slot, &mut d.device());
            p.free(slot + 1, &mut d.device());
            slot += 3;
            if cycle % 20 == 0 {
                seen.push((p.allocated() / MIB, d.reserved() / MIB));
            }
        }
        seen
    }

    #[test]
    fn max_split_size_with_expandable_segments_grows_as_in_pr_193400() {
        let cfg = Config {
            expandable_segments: true,
            max_split_size: 128 * MIB,
            ..Config::default()
        };
        assert_eq!(
            pr_193400(cfg),
            vec![
                (66, 220),
                (106, 2_980),
                (146, 5_760),
                (186, 8_520),
                (226, 11_300),
                (266, 14_060)
            ]
        );
    }

    #[test]
    fn either_option_alone_keeps_pr_193400_under_500mib() {
        let es = pr_193400(Config {
            expandable_segments: true,
            ..Config::default()
        });
        let split = pr_193400(Config {
            max_split_size: 128 * MIB,
            ..Config::default()
        });
        assert!(es.iter().all(|&(_, r)| r < 500), "{es:?}");
        assert!(split.iter().all(|&(_, r)| r < 500), "{split:?}");
    }

    #[test]
    fn rounding_follows_round_size() {
        let c = Config::default();
        assert_eq!(c.round_size(1), 512);
        assert_eq!(c.round_size(513), 1024);
        let four = Config {
            divisions: [4; 16],
            ..Config::default()
        };
        // The code's own example (1200 → 1280) holds for the division step alone; round_size
        // applies it only above 512 · divisions.
        assert_eq!(roundup_power2_next_division(1200, 4), 1280);
        assert_eq!(four.round_size(1200), 1536);
        assert_eq!(four.round_size(1024), 1024);
        assert_eq!(four.round_size(5 * MIB + 1), 6 * MIB);
        // Below 512 · divisions, plain 512 rounding.
        assert_eq!(four.round_size(1900), 2048);
        assert_eq!(four.round_size(2049), 2560);
    }

    #[test]
    fn segment_sizes_follow_get_allocation_size() {
        let c = Config::default();
        assert_eq!(c.allocation_size(512), 2 * MIB);
        assert_eq!(c.allocation_size(MIB + 512), 20 * MIB);
        assert_eq!(c.allocation_size(10 * MIB), 10 * MIB);
        assert_eq!(c.allocation_size(11 * MIB - 512), 12 * MIB);
    }

    #[test]
    fn blocks_are_never_reused_across_streams() {
        let (mut p, mut d) = native();
        p.malloc(0, 16 * MIB, 0, &mut d.device()).unwrap();
        p.free(0, &mut d.device());
        p.malloc(1, 16 * MIB, 1, &mut d.device()).unwrap();
        assert_eq!(d.reserved(), 32 * MIB);
        p.malloc(2, 16 * MIB, 0, &mut d.device()).unwrap();
        assert_eq!(d.reserved(), 32 * MIB);
    }

    #[test]
    fn oversize_blocks_are_not_split_and_only_serve_close_sizes() {
        let cfg = Config {
            max_split_size: 64 * MIB,
            ..Config::default()
        };
        let mut p = PyTorchCaching::new(cfg);
        let mut d = Driver::new(DriverModel::default());
        p.malloc(0, 100 * MIB, 0, &mut d.device()).unwrap();
        p.free(0, &mut d.device());
        // 30 MiB < max_split may not take the 100 MiB oversize block.
        p.malloc(1, 30 * MIB, 0, &mut d.device()).unwrap();
        assert_eq!(d.reserved(), 130 * MIB);
        // 90 MiB may (100 < 90 + 20), and takes it whole.
        p.malloc(2, 90 * MIB, 0, &mut d.device()).unwrap();
        assert_eq!(d.reserved(), 130 * MIB);
        assert_eq!(p.allocated(), 130 * MIB);
    }

    #[test]
    fn an_oom_frees_cached_segments_and_retries() {
        let mut p = PyTorchCaching::new(Config::default());
        let mut d = Driver::new(DriverModel { capacity: 64 * MIB });
        p.malloc(0, 40 * MIB, 0, &mut d.device()).unwrap();
        p.free(0, &mut d.device());
        // 50 MiB does not fit next to the cached 40 MiB: the cache is released, then it fits.
        p.malloc(1, 50 * MIB, 0, &mut d.device()).unwrap();
        assert_eq!(d.reserved(), 50 * MIB);
        assert_eq!(d.device_frees(), 1);
        assert_eq!(p.malloc(2, 20 * MIB, 0, &mut d.device()), Err(Refused));
    }

    #[test]
    fn a_memory_fraction_the_program_set_caps_reserved_memory_before_the_driver_is_asked() {
        let cfg = Config {
            total_memory: 1 << 30,
            ..Config::default()
        };
        let mut p = PyTorchCaching::new(cfg);
        let mut d = Driver::new(DriverModel::default());
        // 0.25 of 1 GiB: 256 MiB, as `fraction * totalGlobalMem`.
        p.set_memory_fraction(0.25);
        p.malloc(0, 200 * MIB, 0, &mut d.device()).unwrap();
        p.malloc(1, 40 * MIB, 0, &mut d.device()).unwrap();
        p.free(1, &mut d.device());
        // 60 MiB more would hold 300 MiB: the cached 40 MiB is released and still no room.
        assert_eq!(p.malloc(2, 60 * MIB, 0, &mut d.device()), Err(Refused));
        assert_eq!((d.reserved(), d.device_frees()), (200 * MIB, 1));
        // At 1 the cap is gone (PyTorch 2.11 sets none for a fraction of 1).
        p.set_memory_fraction(1.0);
        p.malloc(2, 60 * MIB, 0, &mut d.device()).unwrap();
        assert_eq!(d.reserved(), 260 * MIB);
    }

    #[test]
    fn a_memory_fraction_named_in_the_options_outlasts_the_programs_own_calls() {
        let cfg = Config {
            total_memory: 1 << 30,
            memory_fraction: Some(0.5),
            ..Config::default()
        };
        let mut p = PyTorchCaching::new(cfg);
        let mut d = Driver::new(DriverModel::default());
        p.set_memory_fraction(0.1);
        p.malloc(0, 400 * MIB, 0, &mut d.device()).unwrap();
        assert_eq!(p.malloc(1, 200 * MIB, 0, &mut d.device()), Err(Refused));
    }

    #[test]
    fn the_fraction_for_a_cap_gives_pytorch_that_cap_and_not_a_byte_less() {
        // The H200's totalGlobalMem under PyTorch 2.11 (docs/validation.md, "Under pressure").
        let total = 150_109_880_320u64;
        let caps = [60_817_408u64, 85_983_232, 761_266_176, 4 << 30];
        for cap in caps {
            let f = fraction_for_cap(cap, total);
            assert!((f * total as f64) as u64 >= cap, "{cap}");
            assert!((f.next_down() * total as f64) as u64 <= cap, "{cap}");
        }
        // Plain division comes out a byte short for the first two (167 of the 4,095 multiples
        // of 2 MiB below 8 GiB on this device).
        let short: Vec<u64> = caps
            .into_iter()
            .filter(|&c| (((c as f64 / total as f64) * total as f64) as u64) < c)
            .collect();
        assert_eq!(short, [60_817_408, 85_983_232]);
    }

    /// Garbage collection frees old cached blocks above the threshold, under a fraction below 1
    /// only: PyTorch 2.11's `set_per_process_memory_fraction(1.0)` leaves
    /// `allowed_memory_maximum` unset, so a threshold beside it never collects.
    #[test]
    fn collection_frees_old_cached_blocks_under_a_fraction_below_one_only() {
        let run = |fraction: f64| {
            let cfg = Config {
                gc_threshold: 0.5,
                memory_fraction: Some(fraction),
                total_memory: 100 * MIB,
                ..Config::default()
            };
            let mut p = PyTorchCaching::new(cfg);
            let mut d = Driver::new(DriverModel::default());
            p.malloc(0, 30 * MIB, 0, &mut d.device()).unwrap();
            p.malloc(1, 30 * MIB, 0, &mut d.device()).unwrap();
            p.free(0, &mut d.device());
            p.free(1, &mut d.device());
            p.malloc(2, 34 * MIB, 0, &mut d.device()).unwrap();
            d.reserved()
        };
        // Reserved 60 MiB > 50% of ~100 MiB: below 1 the next miss collects the cached blocks
        // first; at 1 nothing is collected, and nothing caps.
        assert!(run(1.0 - f64::EPSILON) <= 64 * MIB);
        assert_eq!(run(1.0), 60 * MIB + 34 * MIB);
    }

    /// Whether the two indexes hold exactly the free blocks, each under its key: every free
    /// mapped block in `free`, every unmapped range in `unmapped`, nothing else.
    fn indexes_match_the_blocks(p: &PyTorchCaching) -> bool {
        let mut free: Vec<(usize, BlockKey, u32)> = Vec::new();
        let mut unmapped = Vec::new();
        for (id, b) in p.blocks.iter().enumerate() {
            let id = id as u32;
            if !b.exists || b.allocated {
                continue;
            }
            if b.mapped {
                free.push((p.pool_of(id), p.free_key(id), id));
            } else {
                unmapped.push((p.pool_of(id), p.unmapped_key(id), id));
            }
        }
        let indexed = |map: fn(&BlockPool) -> &ChunkedMap<BlockKey, u32>| {
            let mut all: Vec<(usize, BlockKey, u32)> = Vec::new();
            for (pool, bp) in p.pools.iter().enumerate() {
                all.extend(map(bp).iter().map(|(k, id)| (pool, k, id)));
            }
            all
        };
        free.sort_unstable();
        unmapped.sort_unstable();
        indexed(|bp| &bp.free) == free && indexed(|bp| &bp.unmapped) == unmapped
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 48, ..Default::default() })]

        /// Splits, merges and reuses keep the free-block indexes equal to the blocks, with and
        /// without expandable segments, on two streams, with the cache emptied now and then.
        #[test]
        fn the_indexes_follow_every_split_and_merge(
            expandable in proptest::prelude::any::<bool>(),
            ops in proptest::collection::vec((0u32..24, 0u64..(40 << 20), 0u32..2), 1..400),
        ) {
            let mut p = PyTorchCaching::new(Config { expandable_segments: expandable, ..Config::default() });
            let mut d = Driver::new(DriverModel::default());
            let mut live = [false; 24];
            for (slot, size, stream) in ops {
                if live[slot as usize] {
                    p.free(slot, &mut d.device());
                    live[slot as usize] = false;
                } else if size % 97 == 0 {
                    Policy::empty_cache(&mut p, &mut d.device());
                } else {
                    // Sizes from 512 B to 40 MiB, most of them small.
                    let size = (size >> (size % 13)).max(1);
                    p.malloc(slot, size, stream, &mut d.device()).unwrap();
                    live[slot as usize] = true;
                }
                proptest::prop_assert!(indexes_match_the_blocks(&p));
            }
        }
    }

    proptest::proptest! {
        /// The two-halves keys order the indexes as the 128-bit numbers `stream << 112 |
        /// size << 64 | addr` and `stream << 64 | addr` do, streams above 16 bits included.
        #[test]
        fn keys_order_as_their_128_bit_numbers(
            a in (proptest::prelude::any::<u32>(), 0u64..(1 << 48), proptest::prelude::any::<u64>()),
            b in (proptest::prelude::any::<u32>(), 0u64..(1 << 48), proptest::prelude::any::<u64>()),
            same_stream in proptest::prelude::any::<bool>(),
        ) {
            let b = if same_stream { (a.0, b.1, b.2) } else { b };
            let number = |(stream, size, addr): (u32, u64, u64)| {
                (u128::from(stream) << 112) | (u128::from(size) << 64) | u128::from(addr)
            };
            let (ka, kb) = (size_key(a.0, a.1, a.2), size_key(b.0, b.1, b.2));
            proptest::prop_assert_eq!(ka.cmp(&kb), number(a).cmp(&number(b)));
            proptest::prop_assert_eq!(ka < kb, number(a) < number(b));
            proptest::prop_assert_eq!(ka == kb, number(a) == number(b));
            proptest::prop_assert_eq!(key_stream(ka), (number(a) >> 112) as u32);
            let address = |(stream, _, addr): (u32, u64, u64)| (u128::from(stream) << 64) | u128::from(addr);
            let (ua, ub) = (addr_key(a.0, a.2), addr_key(b.0, b.2));
            proptest::prop_assert_eq!(ua.cmp(&ub), address(a).cmp(&address(b)));
            proptest::prop_assert_eq!(ua < ub, address(a) < address(b));
        }
    }

    /// 40 MiB, freed, then 20 MiB (from the cached 40 MiB block, split) and 50 MiB: the replay
    /// with `max_split_size` of `split_mb` (MiB) and the split rounding `rounding_mb`; its
    /// reserved bytes and thresholds.
    fn thresholds_of(split_mb: Option<u64>, rounding_mb: u64) -> (u64, Thresholds) {
        let cfg = Config {
            max_split_size: split_mb.map_or(u64::MAX, |m| m * MIB),
            max_non_split_rounding: rounding_mb * MIB,
            ..Config::default()
        };
        let (mut p, mut d) = (
            PyTorchCaching::new(cfg),
            Driver::new(DriverModel::default()),
        );
        alloc_all(&mut p, &mut d, 0, &[40 * MIB]);
        free_all(&mut p, &mut d, 0, 1);
        alloc_all(&mut p, &mut d, 1, &[20 * MIB, 50 * MIB]);
        (d.reserved(), p.thresholds())
    }

    #[test]
    fn thresholds_that_a_replay_admits_replay_as_it_did_and_the_others_do_not() {
        // Unset: every size compared with it (the 20 MiB request and the 40 MiB block it
        // took; no block is split when the rest is under 1 MiB, and 50 MiB found no block) is
        // below it, so any split size above 40 MiB takes the same branches.
        let (reserved, t) = thresholds_of(None, 20);
        let admitted = |m: u64, r: u64| {
            t.admit(&Config {
                max_split_size: m * MIB,
                max_non_split_rounding: r * MIB,
                ..Config::default()
            })
        };
        assert!(admitted(41, 20) && admitted(1024, 256));
        assert_eq!(thresholds_of(Some(41), 256).0, reserved);
        // At 40 MiB the cached block is oversize for a 20 MiB request: a new segment.
        assert!(!admitted(40, 20));
        assert_ne!(thresholds_of(Some(40), 20).0, reserved);
        // A 30 MiB split size refuses the 40 MiB block to the 20 MiB request, as any split
        // size above 20 MiB and at most 40 MiB does.
        let (_, t30) = thresholds_of(Some(30), 20);
        assert!(t30.split.admits(21 * MIB) && !t30.split.admits(41 * MIB));
    }
}
