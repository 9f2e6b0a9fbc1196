//! What the two models of CUDA's stream-ordered pool share (docs/allocators.md §6): the pool's
//! settings, which the `cuda-async` policy parses, the blocks it hands out, and the arena's
//! address map. `cuda_async` keeps a free list per stream; `ordered_pool` follows the recorded
//! synchronizations.

use super::support::slots::SlotTable;
use super::{AddressMap, BlockSpan, Span};

const MIB: u64 = 1 << 20;

/// Which free range serves a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    Best,
    First,
    Worst,
    Last,
}

#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub chunk: u64,
    pub alignment: u64,
    pub release_threshold: u64,
    pub opportunistic: bool,
    pub internal_dependencies: bool,
    pub fit: Fit,
    pub large_alignment: u64,
    pub small_max: u64,
    pub pending_fit: Fit,
    pub coalesce_pending: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            chunk: 32 * MIB,
            alignment: 512,
            release_threshold: u64::MAX,
            opportunistic: false,
            internal_dependencies: true,
            fit: Fit::First,
            large_alignment: 512,
            small_max: MIB,
            pending_fit: Fit::Best,
            coalesce_pending: true,
        }
    }
}

impl Config {
    /// A request's size as the pool hands it out: rounded up to the alignment of its class
    /// (small or large), at least one unit.
    pub fn rounded(&self, size: u64) -> u64 {
        let unit = if size > self.small_max {
            self.large_alignment
        } else {
            self.alignment
        };
        size.max(1).next_multiple_of(unit)
    }
}

/// A block handed out: its offset in the arena, its rounded size, the stream that asked.
#[derive(Debug, Clone, Copy, Default)]
pub struct Live {
    pub offset: u64,
    pub size: u64,
    pub stream: u32,
}

/// Appends to `map` the address map of an arena at `base` of `reserved` bytes: one segment,
/// the `live` blocks and the `free` ranges.
pub fn arena_map(
    map: &mut AddressMap,
    base: u64,
    reserved: u64,
    live: &SlotTable<Live>,
    free: impl Iterator<Item = BlockSpan>,
) {
    if reserved > 0 {
        map.segments.push(Span {
            address: base,
            size: reserved,
        });
    }
    map.blocks.extend(live.spans(|l| base + l.offset));
    map.blocks.extend(free);
}
