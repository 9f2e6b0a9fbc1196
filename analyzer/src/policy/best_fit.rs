//! `best-fit`: one coalescing arena, best fit, never returns memory.
//!
//! The reference point between no caching and an offline planner (docs/allocators.md §8):
//! every request is rounded to `alignment` and placed in the smallest free range that holds it
//! (lowest address among equals); a freed block merges with free neighbours at once. When
//! nothing fits, the block goes at the top of the arena (starting inside a free range that
//! ends there, if any), and the arena's physical backing grows to the new top in whole 2 MiB
//! pages (the VMM granularity, `docs/h200-measurements.md`). So the only waste is external
//! fragmentation plus the last partial page: no rounding classes, no streams, no segments.

use super::driver::PAGE;
use super::support::free_ranges::FreeRanges;
use super::support::slots::SlotTable;
use super::{AddressMap, Device, Policy, Refused, Span};
use super::{BuildContext, KeyInfo, OptionError, Options, PolicyInfo};

pub const INFO: PolicyInfo = PolicyInfo {
    name: "best-fit",
    summary: "one coalescing arena, best fit, grows in 2 MiB pages and never shrinks: external fragmentation only",
    keys: &[KeyInfo {
        key: "alignment",
        default: "512",
        about: "every block is rounded up to this many bytes (a power of two)",
    }],
    build,
};

fn build(o: &Options, _: &BuildContext) -> Result<Box<dyn Policy>, OptionError> {
    let alignment = o.alignment_opt("alignment")?.unwrap_or(512);
    Ok(Box::new(BestFit::new(alignment)))
}

/// The arena.
#[derive(Debug)]
pub struct BestFit {
    alignment: u64,
    base: Option<u64>,
    /// Offset of the highest byte ever handed out, plus one.
    top: u64,
    /// Bytes backed by mapped pages, from the base.
    mapped: u64,
    free: FreeRanges,
    /// Per slot: (offset, rounded size); size 0 when empty.
    live: SlotTable<(u64, u64)>,
}

impl BestFit {
    pub fn new(alignment: u64) -> BestFit {
        BestFit {
            alignment,
            base: None,
            top: 0,
            mapped: 0,
            free: FreeRanges::new(),
            live: SlotTable::default(),
        }
    }
}

impl Policy for BestFit {
    fn malloc(&mut self, slot: u32, size: u64, _: u32, driver: &mut Device) -> Result<(), Refused> {
        let rounded = size.max(1).next_multiple_of(self.alignment);
        let offset = if let Some((addr, _, _)) = self.free.best_fit(rounded) {
            self.free.take_low(addr, rounded);
            addr
        } else {
            let start = match self.free.ending_at(self.top, 0) {
                Some((addr, _, _)) => addr,
                None => self.top,
            };
            let new_top = start + rounded;
            if new_top > self.mapped {
                let pages = (new_top - self.mapped).div_ceil(PAGE);
                if !driver.map(pages, PAGE) {
                    return Err(Refused);
                }
                if self.base.is_none() {
                    self.base = Some(driver.reserve_address(1 << 40));
                }
                self.mapped += pages * PAGE;
            }
            if start < self.top {
                self.free.remove(start);
            }
            self.top = new_top;
            start
        };
        self.live.insert(slot, (offset, rounded), rounded);
        Ok(())
    }

    fn free(&mut self, slot: u32, _: &mut Device) {
        let (offset, size) = self.live.remove(slot);
        self.free.insert(offset, size, 0);
    }

    fn allocated(&self) -> u64 {
        self.live.allocated()
    }

    fn address_map_into(&self, map: &mut AddressMap) {
        let base = self.base.unwrap_or(0);
        if self.mapped > 0 {
            map.segments.push(Span {
                address: base,
                size: self.mapped,
            });
        }
        map.blocks
            .extend(self.live.spans(|&(offset, _)| base + offset));
        map.blocks.extend(self.free.blocks(base));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Driver, DriverModel};

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_freed_hole_is_reused_by_the_best_fitting_request_and_only_the_top_grows() {
        let mut p = BestFit::new(512);
        let mut d = Driver::new(DriverModel::default());
        p.malloc(0, 3 * MIB, 0, &mut d.device()).unwrap();
        p.malloc(1, MIB, 0, &mut d.device()).unwrap();
        p.malloc(2, 5 * MIB, 0, &mut d.device()).unwrap();
        assert_eq!(d.reserved(), 10 * MIB);
        p.free(0, &mut d.device());
        // 2 MiB fits the 3 MiB hole at offset 0: no growth.
        p.malloc(3, 2 * MIB, 0, &mut d.device()).unwrap();
        assert_eq!(p.live.get(3).unwrap().0, 0);
        assert_eq!(d.reserved(), 10 * MIB);
        // 2 MiB no longer fits the 1 MiB left: the top grows from 9 MiB to 11 MiB → 12 MiB mapped.
        p.malloc(4, 2 * MIB, 0, &mut d.device()).unwrap();
        assert_eq!(p.live.get(4).unwrap().0, 9 * MIB);
        assert_eq!(d.reserved(), 12 * MIB);
    }

    #[test]
    fn a_free_range_at_the_top_is_extended_not_skipped() {
        let mut p = BestFit::new(512);
        let mut d = Driver::new(DriverModel::default());
        p.malloc(0, 2 * MIB, 0, &mut d.device()).unwrap();
        p.malloc(1, 2 * MIB, 0, &mut d.device()).unwrap();
        p.free(1, &mut d.device());
        p.malloc(2, 3 * MIB, 0, &mut d.device()).unwrap();
        assert_eq!(p.live.get(2).unwrap().0, 2 * MIB);
        assert_eq!(d.reserved(), 6 * MIB);
    }
}
