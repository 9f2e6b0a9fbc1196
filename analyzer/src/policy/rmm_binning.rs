//! `rmm-binning`: RAPIDS RMM's `binning_memory_resource`, power-of-two bins of
//! `fixed_size_memory_resource` over a `pool_memory_resource`.
//!
//! Follows `rapidsai/rmm` `include/rmm/mr/device/binning_memory_resource.hpp` (constructor with
//! `min_size_exponent`/`max_size_exponent`, `get_resource`: `lower_bound` over the bins, else
//! upstream) and `fixed_size_memory_resource.hpp` (`default_blocks_to_preallocate = 128`,
//! `expand_pool`: one upstream allocation of 128 blocks, split into blocks; free lists per
//! stream, no splitting, no coalescing); docs/allocators.md §5.
//!
//! A request goes to the smallest bin at least its size (a 1 B request takes a whole block of
//! the smallest bin), or, above the largest bin, straight to the upstream pool
//! ([`super::rmm_pool::Pool`], the usual RAPIDS set-up). A bin takes a free block from its own
//! stream's list, then from another stream's, then carves 128 new blocks out of the pool.
//! Blocks never go back to the pool.
//!
//! Every bin **preallocates** its first 128 blocks when it is made (`fixed_size_memory_resource`'s
//! constructor inserts `blocks_from_upstream` on the legacy default stream), smallest bin first,
//! so the pool holds 128 × (sum of the bin sizes) before the first request is served: 992 MiB
//! for the default bins, in pool growths of 32, 64, 128, 256 and 512 MiB. Measured against real
//! RMM 26.10 on an H200 (docs/validation.md, "Part 3", RMM): without this the model grew the
//! bins lazily and reserved −10% to +68% of what RMM's statistics showed; with it, exactly.

use super::rmm_pool::{ALIGNMENT, Pool};
use super::support::slots::SlotTable;
use super::{AddressMap, BlockSpan, Device, Policy, Refused};
use super::{BuildContext, KeyInfo, OptionError, Options, PolicyInfo};

const BLOCKS_TO_PREALLOCATE: u64 = 128;

pub const INFO: PolicyInfo = PolicyInfo {
    name: "rmm-binning",
    summary: "RAPIDS RMM binning_memory_resource: power-of-two fixed-size bins (128 blocks per refill) over an RMM pool for larger requests",
    keys: &[
        KeyInfo {
            key: "min_size_exponent",
            default: "18",
            about: "smallest bin is 2^this bytes (256 KiB)",
        },
        KeyInfo {
            key: "max_size_exponent",
            default: "22",
            about: "largest bin is 2^this bytes (4 MiB); larger requests go to the pool",
        },
        KeyInfo {
            key: "initial_pool_size",
            default: "0",
            about: "the upstream pool's initial size",
        },
    ],
    build,
};

fn build(o: &Options, _: &BuildContext) -> Result<Box<dyn Policy>, OptionError> {
    let min = o.u64_opt("min_size_exponent", 63)?.unwrap_or(18);
    let max = o.u64_opt("max_size_exponent", 63)?.unwrap_or(22);
    if min > max || max > 40 {
        return Err(format!(
            "bins 2^{min}..2^{max}: need min_size_exponent <= max_size_exponent <= 40"
        )
        .into());
    }
    let initial = o.size_opt("initial_pool_size")?.unwrap_or(0);
    Ok(Box::new(RmmBinning::new(min as u32, max as u32, initial)))
}

#[derive(Debug)]
struct Bin {
    block: u64,
    /// Free blocks per stream.
    free: Vec<Vec<u64>>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Live {
    addr: u64,
    size: u64,
    stream: u32,
    /// Bin index, or `u32::MAX` for the pool.
    bin: u32,
}

const POOL: u32 = u32::MAX;

#[derive(Debug)]
pub struct RmmBinning {
    bins: Vec<Bin>,
    /// Whether the bins took their first blocks (RMM does it at construction; here at the
    /// first request, which a replay cannot tell apart).
    primed: bool,
    pool: Pool,
    live: SlotTable<Live>,
}

impl RmmBinning {
    pub fn new(min_exp: u32, max_exp: u32, initial_pool: u64) -> RmmBinning {
        RmmBinning {
            bins: (min_exp..=max_exp)
                .map(|e| Bin {
                    block: 1 << e,
                    free: Vec::new(),
                })
                .collect(),
            primed: false,
            pool: Pool::new(initial_pool, None),
            live: SlotTable::default(),
        }
    }

    /// Carves 128 new blocks of bin `b` out of the pool into `stream`'s list.
    fn refill(&mut self, b: usize, stream: u32, driver: &mut Device) -> Option<()> {
        let block = self.bins[b].block;
        let chunk = self
            .pool
            .allocate(block * BLOCKS_TO_PREALLOCATE, stream, driver)?;
        let s = stream as usize;
        let free = &mut self.bins[b].free;
        if free.len() <= s {
            free.resize_with(s + 1, Vec::new);
        }
        // Lowest address handed out first.
        free[s].extend((0..BLOCKS_TO_PREALLOCATE).rev().map(|i| chunk + i * block));
        Some(())
    }

    fn bin_alloc(&mut self, b: usize, stream: u32, driver: &mut Device) -> Option<u64> {
        let s = stream as usize;
        let bin = &mut self.bins[b];
        if bin.free.len() <= s {
            bin.free.resize_with(s + 1, Vec::new);
        }
        if let Some(a) = bin.free[s].pop() {
            return Some(a);
        }
        if let Some(other) = bin.free.iter_mut().find(|l| !l.is_empty()) {
            return other.pop();
        }
        self.refill(b, stream, driver)?;
        self.bins[b].free[s].pop()
    }
}

impl Policy for RmmBinning {
    fn malloc(
        &mut self,
        slot: u32,
        size: u64,
        stream: u32,
        driver: &mut Device,
    ) -> Result<(), Refused> {
        if !self.primed {
            for b in 0..self.bins.len() {
                self.refill(b, 0, driver).ok_or(Refused)?;
            }
            self.primed = true;
        }
        let b = self.bins.partition_point(|bin| bin.block < size);
        let live = if b < self.bins.len() {
            let addr = self.bin_alloc(b, stream, driver).ok_or(Refused)?;
            Live {
                addr,
                size: self.bins[b].block,
                stream,
                bin: b as u32,
            }
        } else {
            let aligned = size.next_multiple_of(ALIGNMENT);
            let addr = self.pool.allocate(aligned, stream, driver).ok_or(Refused)?;
            Live {
                addr,
                size: aligned,
                stream,
                bin: POOL,
            }
        };
        self.live.insert(slot, live, live.size);
        Ok(())
    }

    fn free(&mut self, slot: u32, _: &mut Device) {
        let l = self.live.remove(slot);
        if l.bin == POOL {
            self.pool.deallocate(l.addr, l.size, l.stream);
        } else {
            let bin = &mut self.bins[l.bin as usize];
            let s = l.stream as usize;
            if bin.free.len() <= s {
                bin.free.resize_with(s + 1, Vec::new);
            }
            bin.free[s].push(l.addr);
        }
    }

    fn allocated(&self) -> u64 {
        self.live.allocated()
    }

    fn address_map_into(&self, map: &mut AddressMap) {
        self.pool.layout(map);
        map.blocks.extend(self.live.spans(|l| l.addr));
        for bin in &self.bins {
            for &address in bin.free.iter().flatten() {
                map.blocks.push(BlockSpan {
                    address,
                    size: bin.block,
                    slot: None,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Driver, DriverModel};

    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;

    #[test]
    fn the_bins_preallocate_128_blocks_each_then_refill_by_128() {
        let mut p = RmmBinning::new(18, 22, 0);
        let mut d = Driver::new(DriverModel::default());
        p.malloc(0, 1, 0, &mut d.device()).unwrap();
        // 128 × (256 KiB + … + 4 MiB) = 992 MiB in five pool growths (32, 64, 128, 256, 512),
        // what real RMM 26.10 took from upstream before its first request.
        assert_eq!(d.reserved(), 992 * MIB);
        assert_eq!(d.device_allocs(), 5);
        // A 1 B request takes a 256 KiB block.
        assert_eq!(p.allocated(), 256 * KIB);
        // 127 more come from the preallocated blocks; the 129th refills the bin from the pool,
        // which doubles (max(32 MiB, 992 MiB)).
        for slot in 1..128 {
            p.malloc(slot, 200 * KIB, 0, &mut d.device()).unwrap();
        }
        assert_eq!(d.reserved(), 992 * MIB);
        p.malloc(128, 256 * KIB, 0, &mut d.device()).unwrap();
        assert_eq!(d.reserved(), 1984 * MIB);
    }

    #[test]
    fn requests_above_the_largest_bin_go_to_the_pool() {
        let mut p = RmmBinning::new(18, 22, 0);
        let mut d = Driver::new(DriverModel::default());
        p.malloc(0, 5 * MIB, 0, &mut d.device()).unwrap();
        // The bins' 992 MiB, then the pool doubles for the 5 MiB request.
        assert_eq!(d.reserved(), 1984 * MIB);
        p.free(0, &mut d.device());
        p.malloc(1, 5 * MIB, 0, &mut d.device()).unwrap();
        assert_eq!(d.reserved(), 1984 * MIB);
    }
}
