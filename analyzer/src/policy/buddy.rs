//! `buddy`: a binary buddy allocator (Knowlton 1965; Knuth, TAOCP vol. 1, §2.5, "buddy
//! system").
//!
//! Every request is rounded up to a power of two of at least `min_block` bytes. A free block of
//! order `k` at offset `a` has its buddy at `a XOR 2^k`; a request takes the lowest-addressed
//! free block of the smallest sufficient order, splitting it in halves down to its order, and a
//! freed block merges with its buddy for as long as the buddy is free. The heap starts empty and
//! doubles (the old heap becomes the left half of the new one) whenever no free block is large
//! enough. Physical memory is mapped in 2 MiB pages up to the highest byte ever handed out, and
//! never unmapped: the waste measured is the power-of-two rounding plus the buddy constraint on
//! merging.

use super::driver::PAGE;
use super::support::slots::SlotTable;
use super::{AddressMap, BlockSpan, Device, Policy, Refused, Span};
use super::{BuildContext, KeyInfo, OptionError, Options, PolicyInfo};
use std::collections::BTreeSet;

pub const INFO: PolicyInfo = PolicyInfo {
    name: "buddy",
    summary: "binary buddy allocator: power-of-two blocks, split in halves, merged with their buddy; pages mapped up to the high-water mark",
    keys: &[KeyInfo {
        key: "min_block",
        default: "512",
        about: "smallest block in bytes (a power of two)",
    }],
    build,
};

fn build(o: &Options, _: &BuildContext) -> Result<Box<dyn Policy>, OptionError> {
    let min = o.alignment_opt("min_block")?.unwrap_or(512);
    Ok(Box::new(Buddy::new(min)))
}

const MAX_ORDER: usize = 62;

#[derive(Debug)]
pub struct Buddy {
    min_order: u32,
    /// log2 of the heap size; `None` while empty.
    heap_order: Option<u32>,
    /// Free blocks by order: offsets.
    free: Vec<BTreeSet<u64>>,
    /// Per live slot: (offset, order).
    live: SlotTable<(u64, u32)>,
    high_water: u64,
    mapped: u64,
    base: u64,
}

impl Buddy {
    pub fn new(min_block: u64) -> Buddy {
        Buddy {
            min_order: min_block.trailing_zeros(),
            heap_order: None,
            free: vec![BTreeSet::new(); MAX_ORDER + 1],
            live: SlotTable::default(),
            high_water: 0,
            mapped: 0,
            base: 0,
        }
    }

    fn order_for(&self, size: u64) -> Option<u32> {
        let o = size.max(1).checked_next_power_of_two()?.trailing_zeros();
        let o = o.max(self.min_order);
        (o as usize <= MAX_ORDER).then_some(o)
    }

    /// Doubles the heap until a block of `order` exists somewhere.
    fn grow(&mut self, order: u32) {
        match self.heap_order {
            None => {
                self.heap_order = Some(order);
                self.free[order as usize].insert(0);
            }
            Some(h) => {
                // The new right half is free; it merges with the old heap if that is all free.
                let right = 1u64 << h;
                self.heap_order = Some(h + 1);
                self.release(right, h);
            }
        }
    }

    /// Puts a free block back, merging with its buddy while possible.
    fn release(&mut self, mut offset: u64, mut order: u32) {
        let heap = self.heap_order.expect("a heap exists");
        while order < heap {
            let buddy = offset ^ (1u64 << order);
            if !self.free[order as usize].remove(&buddy) {
                break;
            }
            offset = offset.min(buddy);
            order += 1;
        }
        self.free[order as usize].insert(offset);
    }

    fn take(&mut self, order: u32) -> Option<u64> {
        let heap = self.heap_order?;
        let from = (order..=heap).find(|&k| !self.free[k as usize].is_empty())?;
        let offset = self.free[from as usize].pop_first()?;
        for k in (order..from).rev() {
            self.free[k as usize].insert(offset + (1u64 << k));
        }
        Some(offset)
    }
}

impl Policy for Buddy {
    fn malloc(&mut self, slot: u32, size: u64, _: u32, driver: &mut Device) -> Result<(), Refused> {
        let order = self.order_for(size).ok_or(Refused)?;
        let offset = loop {
            if let Some(o) = self.take(order) {
                break o;
            }
            if self.heap_order.is_some_and(|h| h as usize >= MAX_ORDER) {
                return Err(Refused);
            }
            self.grow(order);
        };
        let end = offset + (1u64 << order);
        if end > self.mapped {
            let pages = (end - self.mapped).div_ceil(PAGE);
            if !driver.map(pages, PAGE) {
                self.release(offset, order);
                return Err(Refused);
            }
            if self.mapped == 0 {
                self.base = driver.reserve_address(1 << 40);
            }
            self.mapped += pages * PAGE;
        }
        self.high_water = self.high_water.max(end);
        self.live.insert(slot, (offset, order), 1u64 << order);
        Ok(())
    }

    fn free(&mut self, slot: u32, _: &mut Device) {
        let (offset, order) = self.live.remove(slot);
        self.release(offset, order);
    }

    fn allocated(&self) -> u64 {
        self.live.allocated()
    }

    fn address_map_into(&self, map: &mut AddressMap) {
        if self.mapped > 0 {
            map.segments.push(Span {
                address: self.base,
                size: self.mapped,
            });
        }
        map.blocks
            .extend(self.live.spans(|&(offset, _)| self.base + offset));
        for (order, set) in self.free.iter().enumerate() {
            for &offset in set {
                // Only the mapped part of the heap is memory.
                if offset < self.mapped {
                    let size = (1u64 << order).min(self.mapped - offset);
                    map.blocks.push(BlockSpan {
                        address: self.base + offset,
                        size,
                        slot: None,
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Driver, DriverModel};

    const MIB: u64 = 1 << 20;

    #[test]
    fn requests_round_to_powers_of_two_and_buddies_merge_back() {
        let mut p = Buddy::new(512);
        let mut d = Driver::new(DriverModel::default());
        p.malloc(0, 3 * MIB, 0, &mut d.device()).unwrap(); // 4 MiB block at 0
        p.malloc(1, MIB + 1, 0, &mut d.device()).unwrap(); // 2 MiB block at 4 MiB (heap doubled to 8)
        assert_eq!(p.allocated(), 6 * MIB);
        assert_eq!(p.live.get(1).copied(), Some((4 * MIB, 21)));
        assert_eq!(d.reserved(), 6 * MIB);
        p.free(0, &mut d.device());
        p.free(1, &mut d.device());
        // Everything merged back into one 8 MiB block.
        assert_eq!(p.free[23].iter().copied().collect::<Vec<_>>(), vec![0]);
        assert!(p.free[..23].iter().all(BTreeSet::is_empty));
    }

    #[test]
    fn a_block_whose_buddy_is_live_cannot_merge() {
        let mut p = Buddy::new(512);
        let mut d = Driver::new(DriverModel::default());
        for s in 0..4 {
            p.malloc(s, MIB, 0, &mut d.device()).unwrap();
        }
        p.free(1, &mut d.device());
        p.free(2, &mut d.device());
        // Blocks 1 and 2 are free and adjacent but not buddies: 2 MiB does not fit there.
        p.malloc(4, 2 * MIB, 0, &mut d.device()).unwrap();
        assert_eq!(p.live.get(4).copied(), Some((4 * MIB, 21)));
    }
}
