//! A coalescing map of free address ranges with a best-fit index: the free list that `best-fit`,
//! `bfc`, `rmm-pool`, `cuda-async` and `gmlake` share.
//!
//! Ranges carry a region id and merge only with contiguous neighbours of the same region, which
//! is how BFC keeps chunks inside their region (`openxla/xla` `xla/tsl/framework/bfc_allocator.cc`,
//! `TryToCoalesce`) and RMM keeps upstream blocks apart (`rapidsai/rmm`
//! `cpp/include/rmm/mr/detail/coalescing_free_list.hpp`, `insert`: a block merges with its
//! successor only if that is not the head of another upstream allocation).
//!
//! Invariants: ranges never overlap; no two ranges of one region touch (they would have merged);
//! the size index holds exactly the ranges of the address index.

use crate::policy::BlockSpan;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    size: u64,
    region: u32,
}

/// Free ranges, by address and by (size, address).
#[derive(Debug, Clone, Default)]
pub struct FreeRanges {
    by_addr: BTreeMap<u64, Range>,
    by_size: BTreeSet<(u64, u64)>,
    bytes: u64,
}

/// One free range: `(address, size, region)`.
pub type Free = (u64, u64, u32);

impl FreeRanges {
    pub fn new() -> FreeRanges {
        FreeRanges::default()
    }

    /// Total free bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.by_addr.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_addr.is_empty()
    }

    fn put(&mut self, addr: u64, size: u64, region: u32) {
        self.by_addr.insert(addr, Range { size, region });
        self.by_size.insert((size, addr));
        self.bytes += size;
    }

    /// Removes the range that starts at `addr`, which must exist.
    pub fn remove(&mut self, addr: u64) -> Free {
        let r = self
            .by_addr
            .remove(&addr)
            .expect("a free range starts here");
        self.by_size.remove(&(r.size, addr));
        self.bytes -= r.size;
        (addr, r.size, r.region)
    }

    /// Frees `[addr, addr + size)` of `region`, merging it with free neighbours of the same
    /// region; returns the merged range.
    pub fn insert(&mut self, addr: u64, size: u64, region: u32) -> Free {
        debug_assert!(size > 0);
        let (mut start, mut len) = (addr, size);
        if let Some((&a, &r)) = self.by_addr.range(..addr).next_back() {
            debug_assert!(a + r.size <= addr, "free ranges overlap");
            if a + r.size == addr && r.region == region {
                self.remove(a);
                start = a;
                len += r.size;
            }
        }
        if let Some((&a, &r)) = self.by_addr.range(addr + size..).next()
            && a == addr + size
            && r.region == region
        {
            self.remove(a);
            len += r.size;
        }
        self.put(start, len, region);
        (start, len, region)
    }

    /// The smallest range of at least `size` bytes, the lowest address among equals.
    pub fn best_fit(&self, size: u64) -> Option<Free> {
        let &(len, addr) = self.by_size.range((size, 0)..).next()?;
        Some((addr, len, self.by_addr[&addr].region))
    }

    /// The largest range, if it holds `size` bytes.
    pub fn worst_fit(&self, size: u64) -> Option<Free> {
        let &(len, addr) = self.by_size.last()?;
        (len >= size).then(|| (addr, len, self.by_addr[&addr].region))
    }

    /// The highest-addressed range of at least `size` bytes (linear in the number of ranges).
    pub fn last_fit(&self, size: u64) -> Option<Free> {
        self.by_addr
            .iter()
            .rev()
            .find(|(_, r)| r.size >= size)
            .map(|(&a, r)| (a, r.size, r.region))
    }

    /// The lowest-addressed range of at least `size` bytes (linear in the number of ranges).
    pub fn first_fit(&self, size: u64) -> Option<Free> {
        self.by_addr
            .iter()
            .find(|(_, r)| r.size >= size)
            .map(|(&a, r)| (a, r.size, r.region))
    }

    /// The range that ends exactly at `end` in `region`, if free.
    pub fn ending_at(&self, end: u64, region: u32) -> Option<Free> {
        let (&a, &r) = self.by_addr.range(..end).next_back()?;
        (a + r.size == end && r.region == region).then_some((a, r.size, r.region))
    }

    /// Takes `size` bytes from the low end of the free range at `addr`; the rest stays free.
    pub fn take_low(&mut self, addr: u64, size: u64) {
        let (a, len, region) = self.remove(addr);
        debug_assert!(len >= size);
        if len > size {
            self.put(a + size, len - size, region);
        }
    }

    /// Free ranges in address order.
    pub fn iter(&self) -> impl Iterator<Item = Free> + '_ {
        self.by_addr.iter().map(|(&a, r)| (a, r.size, r.region))
    }

    /// The free ranges as cached blocks of an address map, offsets counted from `base`.
    pub fn blocks(&self, base: u64) -> impl Iterator<Item = BlockSpan> + '_ {
        self.iter().map(move |(offset, size, _)| BlockSpan {
            address: base + offset,
            size,
            slot: None,
        })
    }

    /// Moves every range of `other` into `self`, merging as [`FreeRanges::insert`] does.
    pub fn absorb(&mut self, other: &mut FreeRanges) {
        for (a, s, r) in std::mem::take(other).iter() {
            self.insert(a, s, r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_of_one_region_merge_and_others_do_not() {
        let mut f = FreeRanges::new();
        f.insert(0, 100, 0);
        f.insert(200, 100, 0);
        assert_eq!(f.insert(100, 100, 0), (0, 300, 0));
        assert_eq!(f.len(), 1);
        f.insert(300, 50, 1);
        assert_eq!(f.len(), 2);
        assert_eq!(f.bytes(), 350);
    }

    #[test]
    fn best_fit_takes_the_smallest_then_the_lowest_address() {
        let mut f = FreeRanges::new();
        f.insert(1000, 64, 0);
        f.insert(0, 32, 0);
        f.insert(500, 32, 0);
        assert_eq!(f.best_fit(30), Some((0, 32, 0)));
        assert_eq!(f.best_fit(33), Some((1000, 64, 0)));
        assert_eq!(f.best_fit(65), None);
        assert_eq!(f.first_fit(33), Some((1000, 64, 0)));
        f.take_low(1000, 40);
        assert_eq!(f.best_fit(20), Some((1040, 24, 0)));
    }
}
