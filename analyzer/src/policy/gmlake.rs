//! `gmlake`: GMLake's virtual-memory stitching (Guo et al., ASPLOS '24, arXiv 2401.08156), on a
//! PyTorch-style caching allocator.
//!
//! Follows `intelligent-machine-learning/glake` `GMLake/src/CUDACachingAllocator.cpp`
//! (`malloc`: best fit, then `get_fused_fragmented_blocks`, then new physical blocks, then
//! release of cached blocks and stitching again) and `GMLake/include/cuda_vmm_allocator.h`
//! (`granularitySize` 2 MiB physical blocks); knobs from `GMLake/docs/GMLake-tutorial.md`
//! (`fragLimit`, `reuseLimit`); docs/allocators.md §7. A model of the algorithm, not of the
//! whole file:
//!
//! - Requests are rounded up to 512 B. Those of at most 1 MiB use PyTorch's small pool
//!   unchanged: 2 MiB `cudaMalloc` segments, best fit per stream, split, coalesced on free.
//! - Larger requests take whole 2 MiB physical pages. A free block is a run of pages mapped
//!   contiguously in one virtual segment; free blocks of one segment merge.
//! - Large malloc: (1) best fit among the stream's free blocks (a stitched block only if it is
//!   at most `reuse_limit` times the request); (2) if the request is at least `frag_limit` and
//!   no single free block holds it, **stitch**: map free blocks of the stream, largest first,
//!   into one fresh virtual range (the last one split), with no new physical memory; (3) map
//!   new pages (`cuMemCreate` + `cuMemMap`); (4) when that fails, stitch whatever the size and
//!   the reuse limit; (5) unmap every free block and map again; (6) out of memory.
//! - A stitched block, once freed, stays a block of its own virtual segment (GMLake caches
//!   stitched blocks for reuse).
//!
//! Not modelled: `defragLevel` 1 (stitch only under memory pressure: `frag_limit` larger than
//! every request gives it), `autoGC` of stitched virtual ranges (virtual address space is not
//! memory), PyTorch's oversize (`max_split_size`) rules.

use super::driver::PAGE;
use super::support::free_ranges::FreeRanges;
use super::support::slots::SlotTable;
use super::{AddressMap, Device, Policy, Refused, Span};
use super::{BuildContext, KeyInfo, OptionError, Options, PolicyInfo};

const MIB: u64 = 1 << 20;
const K_MIN_BLOCK_SIZE: u64 = 512;
const K_SMALL_SIZE: u64 = MIB;
const K_SMALL_BUFFER: u64 = 2 * MIB;

pub const INFO: PolicyInfo = PolicyInfo {
    name: "gmlake",
    summary: "GMLake: PyTorch-style caching on 2 MiB physical pages, stitching free pages into one virtual block when nothing fits",
    keys: &[
        KeyInfo {
            key: "frag_limit",
            default: "512MiB",
            about: "stitch only for requests at least this large (fragLimit; tutorial default 512 MiB)",
        },
        KeyInfo {
            key: "reuse_limit",
            default: "10",
            about: "a cached stitched block serves a request only if at most this many times larger (reuseLimit)",
        },
        KeyInfo {
            key: "stitch",
            default: "true",
            about: "vmmDefragment: false turns stitching off (the PyTorch-like base alone)",
        },
    ],
    build,
};

fn build(o: &Options, _: &BuildContext) -> Result<Box<dyn Policy>, OptionError> {
    Ok(Box::new(GmLake::new(Config {
        frag_limit: o.size_opt("frag_limit")?.unwrap_or(512 * MIB),
        reuse_limit: o.f64("reuse_limit", 10.0)?.max(1.0),
        stitch: o.bool("stitch", true)?,
    })))
}

#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub frag_limit: u64,
    pub reuse_limit: f64,
    pub stitch: bool,
}

/// A virtual segment: a 2 MiB small-pool segment, or a run of mapped pages.
#[derive(Debug, Clone, Copy)]
struct Segment {
    addr: u64,
    size: u64,
    small: bool,
    stitched: bool,
    live: bool,
}

#[derive(Debug, Clone, Copy, Default)]
struct Live {
    addr: u64,
    size: u64,
    segment: u32,
    stream: u32,
    small: bool,
}

#[derive(Debug)]
pub struct GmLake {
    cfg: Config,
    segments: Vec<Segment>,
    /// Free blocks per stream: [small, large].
    free: Vec<[FreeRanges; 2]>,
    live: SlotTable<Live>,
}

impl GmLake {
    pub fn new(cfg: Config) -> GmLake {
        GmLake {
            cfg,
            segments: Vec::new(),
            free: Vec::new(),
            live: SlotTable::default(),
        }
    }

    fn lists(&mut self, stream: u32) -> &mut [FreeRanges; 2] {
        let s = stream as usize;
        if self.free.len() <= s {
            self.free.resize_with(s + 1, Default::default);
        }
        &mut self.free[s]
    }

    fn new_segment(&mut self, addr: u64, size: u64, small: bool, stitched: bool) -> u32 {
        self.segments.push(Segment {
            addr,
            size,
            small,
            stitched,
            live: true,
        });
        (self.segments.len() - 1) as u32
    }

    fn malloc_small(&mut self, size: u64, stream: u32, d: &mut Device) -> Option<(u64, u32)> {
        if let Some((a, _, seg)) = self.lists(stream)[0].best_fit(size) {
            self.lists(stream)[0].take_low(a, size);
            return Some((a, seg));
        }
        let mut addr = d.malloc(K_SMALL_BUFFER);
        if addr.is_none() {
            self.release_cached(d);
            addr = d.malloc(K_SMALL_BUFFER);
        }
        let addr = addr?;
        let seg = self.new_segment(addr, K_SMALL_BUFFER, true, false);
        self.lists(stream)[0].insert(addr + size, K_SMALL_BUFFER - size, seg);
        Some((addr, seg))
    }

    fn best_fit_large(&mut self, size: u64, stream: u32) -> Option<(u64, u32)> {
        let (a, len, seg) = self.lists(stream)[1].best_fit(size)?;
        if self.segments[seg as usize].stitched && len as f64 > self.cfg.reuse_limit * size as f64 {
            return None;
        }
        self.lists(stream)[1].take_low(a, size);
        Some((a, seg))
    }

    /// `get_fused_fragmented_blocks`: free blocks of the stream, largest first, mapped into one
    /// new virtual range of `size` bytes.
    /// Unless `pressed` (growth failed), only when no single free block holds the request: a
    /// block that does but was refused by the reuse limit is not cut up instead.
    fn stitch(
        &mut self,
        size: u64,
        stream: u32,
        pressed: bool,
        d: &mut Device,
    ) -> Option<(u64, u32)> {
        let list = &self.lists(stream)[1];
        if list.bytes() < size || (!pressed && list.best_fit(size).is_some()) {
            return None;
        }
        let mut need = size;
        while need > 0 {
            let list = &mut self.lists(stream)[1];
            let (a, len, _) = list.worst_fit(1).expect("enough free bytes remain");
            let used = len.min(need);
            list.take_low(a, used);
            need -= used;
        }
        let addr = d.reserve_address(size);
        Some((addr, self.new_segment(addr, size, false, true)))
    }

    fn map_new(&mut self, size: u64, d: &mut Device) -> Option<(u64, u32)> {
        if !d.map(size / PAGE, PAGE) {
            return None;
        }
        let addr = d.reserve_address(size);
        Some((addr, self.new_segment(addr, size, false, false)))
    }

    /// Frees every free block: unmaps free large pages, `cudaFree`s free small segments.
    fn release_cached(&mut self, d: &mut Device) {
        for s in 0..self.free.len() {
            let large: Vec<_> = self.free[s][1].iter().collect();
            for (a, len, _) in large {
                self.free[s][1].remove(a);
                d.unmap(len / PAGE, PAGE);
            }
            let small: Vec<_> = self.free[s][0].iter().collect();
            for (a, len, seg) in small {
                if len == K_SMALL_BUFFER {
                    self.free[s][0].remove(a);
                    d.free(a, K_SMALL_BUFFER);
                    self.segments[seg as usize].live = false;
                }
            }
        }
        // A large segment with nothing mapped left is gone.
        let mut mapped = vec![false; self.segments.len()];
        for l in self.live.blocks().filter(|l| l.size > 0) {
            mapped[l.segment as usize] = true;
        }
        for (seg, m) in self.segments.iter_mut().zip(mapped) {
            if !seg.small && !m {
                seg.live = false;
            }
        }
    }

    fn malloc_large(&mut self, size: u64, stream: u32, d: &mut Device) -> Option<(u64, u32)> {
        if let Some(r) = self.best_fit_large(size, stream) {
            return Some(r);
        }
        if self.cfg.stitch
            && size >= self.cfg.frag_limit
            && let Some(r) = self.stitch(size, stream, false, d)
        {
            return Some(r);
        }
        if let Some(r) = self.map_new(size, d) {
            return Some(r);
        }
        if self.cfg.stitch
            && let Some(r) = self.stitch(size, stream, true, d)
        {
            return Some(r);
        }
        self.release_cached(d);
        self.map_new(size, d)
    }
}

impl Policy for GmLake {
    fn malloc(
        &mut self,
        slot: u32,
        size: u64,
        stream: u32,
        driver: &mut Device,
    ) -> Result<(), Refused> {
        let rounded = size.max(1).next_multiple_of(K_MIN_BLOCK_SIZE);
        let small = rounded <= K_SMALL_SIZE;
        let (size, found) = if small {
            (rounded, self.malloc_small(rounded, stream, driver))
        } else {
            let pages = rounded.next_multiple_of(PAGE);
            (pages, self.malloc_large(pages, stream, driver))
        };
        let (addr, segment) = found.ok_or(Refused)?;
        self.live.insert(
            slot,
            Live {
                addr,
                size,
                segment,
                stream,
                small,
            },
            size,
        );
        Ok(())
    }

    fn free(&mut self, slot: u32, _: &mut Device) {
        let l = self.live.remove(slot);
        let pool = usize::from(!l.small);
        self.lists(l.stream)[pool].insert(l.addr, l.size, l.segment);
    }

    fn allocated(&self) -> u64 {
        self.live.allocated()
    }

    fn address_map_into(&self, map: &mut AddressMap) {
        for s in self.segments.iter().filter(|s| s.live) {
            map.segments.push(Span {
                address: s.addr,
                size: s.size,
            });
        }
        map.blocks.extend(self.live.spans(|l| l.addr));
        for list in self.free.iter().flatten() {
            map.blocks.extend(list.blocks(0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::best_fit::BestFit;
    use crate::policy::{Driver, DriverModel};

    fn stitching(frag_limit: u64) -> GmLake {
        GmLake::new(Config {
            frag_limit,
            reuse_limit: 10.0,
            stitch: true,
        })
    }

    /// Two free 4 MiB blocks with live blocks around them, then an 8 MiB request.
    fn holes_then_8mib(p: &mut dyn Policy) -> u64 {
        let mut d = Driver::new(DriverModel::default());
        for (slot, mib) in [(0, 4), (1, 2), (2, 4), (3, 2)] {
            p.malloc(slot, mib * MIB, 0, &mut d.device()).unwrap();
        }
        p.free(0, &mut d.device());
        p.free(2, &mut d.device());
        p.malloc(4, 8 * MIB, 0, &mut d.device()).unwrap();
        d.reserved()
    }

    #[test]
    fn stitching_serves_from_free_pages_where_best_fit_must_grow() {
        assert_eq!(holes_then_8mib(&mut stitching(0)), 12 * MIB);
        assert_eq!(holes_then_8mib(&mut BestFit::new(512)), 20 * MIB);
        // Below the fragment limit, GMLake grows like the others.
        assert_eq!(holes_then_8mib(&mut stitching(512 * MIB)), 20 * MIB);
    }

    #[test]
    fn a_stitched_block_is_reused_only_within_the_reuse_limit() {
        let mut p = stitching(0);
        let mut d = Driver::new(DriverModel::default());
        for (slot, mib) in [(0, 12), (1, 2), (2, 12), (3, 2)] {
            p.malloc(slot, mib * MIB, 0, &mut d.device()).unwrap();
        }
        p.free(0, &mut d.device());
        p.free(2, &mut d.device());
        p.malloc(4, 24 * MIB, 0, &mut d.device()).unwrap(); // stitched from both holes
        p.free(4, &mut d.device());
        assert_eq!(d.reserved(), 28 * MIB);
        // 2 MiB: the only free block is the stitched 24 MiB, 12x the request: not reused.
        p.malloc(5, 2 * MIB, 0, &mut d.device()).unwrap();
        assert_eq!(d.reserved(), 30 * MIB);
        // 4 MiB: 6x, within the limit.
        p.malloc(6, 4 * MIB, 0, &mut d.device()).unwrap();
        assert_eq!(d.reserved(), 30 * MIB);
    }

    #[test]
    fn an_oom_unmaps_cached_pages_and_maps_again() {
        let mut p = GmLake::new(Config {
            frag_limit: u64::MAX,
            reuse_limit: 10.0,
            stitch: false,
        });
        let mut d = Driver::new(DriverModel { capacity: 10 * MIB });
        p.malloc(0, 6 * MIB, 0, &mut d.device()).unwrap();
        p.free(0, &mut d.device());
        p.malloc(1, 8 * MIB, 0, &mut d.device()).unwrap();
        assert_eq!(d.reserved(), 8 * MIB);
    }
}
