//! `cuda-async` on a trace that records its orderings (formats/SPEC.md §4.4): the stream-ordered
//! pool whose reuse follows the program's synchronizations, event records and stream waits.
//!
//! The rules, from the CUDA driver API's pool attributes (`CU_MEMPOOL_ATTR_REUSE_*`,
//! <https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TYPES.html>) and the H200 probes of
//! `samples/workloads/probes/pool_rules.py` (docs/validation.md, "The stream-ordered pool from its
//! synchronizations"):
//!
//! - A free on stream S is *pending*: S reuses it at once (stream order), preferring it to older
//!   memory (best fit among S's pending frees, ties to the earliest freed).
//! - It becomes *settled* when the host sees S's work complete up to it: a synchronization of S,
//!   of the device, of an event recorded on S after it, or a query that answered done. A wait
//!   of stream T for such an event lets T reuse it too (`ReuseFollowEventDependencies`); this
//!   model settles it then. Settled memory serves any stream (placement: `fit`).
//! - Another stream's pending free is reused only when GPU progress has completed it
//!   (`ReuseAllowOpportunistic`), which the trace cannot see: the latest-completion bound (the
//!   default) never does, the earliest-completion bound (`reuse_allow_opportunistic=true`)
//!   always does. Where both agree the prediction is a point.
//! - When the pool cannot grow, another stream's pending free is taken with an inserted wait
//!   (`ReuseAllowInternalDependencies`), then the free end of the arena above the release
//!   threshold is given back and growth retried (PyTorch synchronizes and retries).
//! - At every synchronization the free end of the arena above `ReleaseThreshold` goes back to
//!   the driver; `empty_cache` (`cudaDeviceSynchronize` + `cudaMemPoolTrimTo(pool, 0)`) settles
//!   every free and gives back the whole free end.
//!
//! Growth is the unordered model's (32 MiB steps of one address-contiguous arena,
//! `cuda_async.rs`).
//!
//! **What it misses** (docs/validation.md, "The pool's placement, read off its real
//! addresses"): on the H200 (`samples/workloads/probes/pool_merge.py`) a free merges with a free
//! neighbour only when both are incomplete on one stream or both complete, and it completes when
//! the GPU passes it, without any host synchronization. This model completes frees at the
//! recorded synchronizations only, so between them a stream's frees merge more than the real
//! pool's: its peaks are low. The GPU's progress is not in the trace; replays that complete each
//! free a fixed host-time lag after it (`samples/workloads/h200/pool_placement.py`) move the
//! peaks by up to 40% between lags of 1 and 10 ms, and no lag is within 5% on every workload.

use super::driver::Call;
use super::stream_pool::{Config, Fit, Live, arena_map};
use super::support::slots::SlotTable;
use super::{AddressMap, BlockSpan, Device, Policy, Refused};
use crate::model::{NO_STREAM, Order};
use std::collections::BTreeMap;

/// Who may reuse a free range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// Freed on this stream, not yet known complete.
    Pending(u32),
    /// Known complete: any stream.
    Settled,
}

#[derive(Debug, Clone, Copy)]
struct Range {
    size: u64,
    owner: Owner,
    /// The free order of its earliest and latest free (ranges of one owner merge).
    first: u64,
    last: u64,
}

/// The default pool of one device, ordered by the trace.
#[derive(Debug)]
pub struct OrderedPool {
    cfg: Config,
    base: Option<u64>,
    /// Bytes of the arena (a multiple of the chunk).
    reserved: u64,
    free: BTreeMap<u64, Range>,
    live: SlotTable<Live>,
    /// Frees so far: the free order.
    frees: u64,
    /// Per event: the stream it was last recorded on and the frees made before that record.
    events: Vec<Option<(u32, u64)>>,
}

impl OrderedPool {
    pub fn new(cfg: Config) -> OrderedPool {
        OrderedPool {
            cfg,
            base: None,
            reserved: 0,
            free: BTreeMap::new(),
            live: SlotTable::default(),
            frees: 0,
            events: Vec::new(),
        }
    }

    /// Frees `[offset, offset + r.size)`, merging with neighbours of the same owner.
    fn insert(&mut self, offset: u64, mut r: Range) {
        let mut start = offset;
        if !self.cfg.coalesce_pending && matches!(r.owner, Owner::Pending(_)) {
            self.free.insert(offset, r);
            return;
        }
        if let Some((&a, &p)) = self.free.range(..offset).next_back()
            && a + p.size == offset
            && p.owner == r.owner
        {
            self.free.remove(&a);
            start = a;
            r = merged(p, r);
        }
        let end = start + r.size;
        if let Some(&n) = self.free.get(&end)
            && n.owner == r.owner
        {
            self.free.remove(&end);
            r = merged(r, n);
        }
        self.free.insert(start, r);
    }

    /// The range that serves `size` bytes for `stream` among those `usable` admits: best fit,
    /// ties to the earliest freed, for pending ranges; `fit` among settled ones.
    fn find(&self, size: u64, usable: impl Fn(Owner) -> bool, fit: Fit) -> Option<u64> {
        let fits = self
            .free
            .iter()
            .filter(|(_, r)| r.size >= size && usable(r.owner));
        match fit {
            Fit::First => fits.map(|(&a, _)| a).next(),
            Fit::Last => fits.map(|(&a, _)| a).last(),
            Fit::Best => fits
                .min_by_key(|(a, r)| (r.size, r.first, **a))
                .map(|(&a, _)| a),
            Fit::Worst => fits
                .max_by_key(|(a, r)| (r.size, u64::MAX - **a))
                .map(|(&a, _)| a),
        }
    }

    /// Takes `size` bytes from the low end of the free range at `offset`.
    fn take(&mut self, offset: u64, size: u64) {
        let r = self.free.remove(&offset).expect("a free range starts here");
        if r.size > size {
            self.free.insert(
                offset + size,
                Range {
                    size: r.size - size,
                    ..r
                },
            );
        }
    }

    /// The free range at the arena's end: (offset, owner).
    fn tail(&self) -> Option<(u64, Owner)> {
        let (&a, r) = self.free.iter().next_back()?;
        (a + r.size == self.reserved).then_some((a, r.owner))
    }

    /// Grows the arena for `size` bytes on `stream`, extending the free end when `stream` may
    /// use it.
    fn grow(&mut self, size: u64, stream: u32, driver: &mut Device) -> Option<u64> {
        let start = match self.tail() {
            Some((a, owner)) if self.usable_by(stream, owner) => a,
            _ => self.reserved,
        };
        let bytes = (start + size)
            .saturating_sub(self.reserved)
            .next_multiple_of(self.cfg.chunk);
        if !driver.hold(bytes) {
            return None;
        }
        if self.base.is_none() {
            self.base = Some(driver.reserve_address(1 << 40));
        }
        if start < self.reserved {
            self.free.remove(&start);
        }
        self.reserved += bytes;
        if start + size < self.reserved {
            self.insert(
                start + size,
                Range {
                    size: self.reserved - start - size,
                    owner: Owner::Settled,
                    first: self.frees,
                    last: self.frees,
                },
            );
        }
        Some(start)
    }

    /// Whether `stream` may take a range of `owner` without waiting.
    fn usable_by(&self, stream: u32, owner: Owner) -> bool {
        match owner {
            Owner::Settled => true,
            Owner::Pending(s) => s == stream || self.cfg.opportunistic,
        }
    }

    /// Settles the pending frees `which` admits (stream, free order), merging them with
    /// settled neighbours; then gives back what lies above the release threshold.
    fn settle(&mut self, which: impl Fn(u32, u64) -> bool, driver: &mut Device) {
        let done: Vec<(u64, Range)> = self
            .free
            .iter()
            .filter(|(_, r)| matches!(r.owner, Owner::Pending(s) if which(s, r.last)))
            .map(|(&a, &r)| (a, r))
            .collect();
        for (a, r) in done {
            self.free.remove(&a);
            self.insert(
                a,
                Range {
                    owner: Owner::Settled,
                    ..r
                },
            );
        }
        self.trim(self.cfg.release_threshold, driver);
    }

    /// Gives back whole chunks of the settled free end of the arena above `keep` bytes.
    fn trim(&mut self, keep: u64, driver: &mut Device) {
        if keep >= self.reserved {
            return;
        }
        let Some((start, Owner::Settled)) = self.tail() else {
            return;
        };
        let to = start
            .max(keep)
            .next_multiple_of(self.cfg.chunk)
            .min(self.reserved);
        if to >= self.reserved {
            return;
        }
        let r = self.free.remove(&start).expect("the tail is free");
        if to > start {
            self.free.insert(
                start,
                Range {
                    size: to - start,
                    ..r
                },
            );
        }
        driver.release(self.reserved - to);
        self.reserved = to;
    }
}

/// One range of two adjacent ones of one owner, `low` first.
fn merged(low: Range, high: Range) -> Range {
    Range {
        size: low.size + high.size,
        owner: low.owner,
        first: low.first.min(high.first),
        last: low.last.max(high.last),
    }
}

impl Policy for OrderedPool {
    fn malloc(
        &mut self,
        slot: u32,
        size: u64,
        stream: u32,
        driver: &mut Device,
    ) -> Result<(), Refused> {
        let rounded = self.cfg.rounded(size);
        let own = |o: Owner| o == Owner::Pending(stream);
        let other = |o: Owner| matches!(o, Owner::Pending(s) if s != stream);
        let found = self
            .find(rounded, own, self.cfg.pending_fit)
            .or_else(|| self.find(rounded, |o| o == Owner::Settled, self.cfg.fit))
            .or_else(|| {
                self.cfg
                    .opportunistic
                    .then(|| self.find(rounded, other, Fit::Best))
                    .flatten()
            });
        let offset = if let Some(a) = found {
            self.take(a, rounded);
            a
        } else if let Some(a) = self.grow(rounded, stream, driver) {
            a
        } else if let Some(a) = self
            .cfg
            .internal_dependencies
            .then(|| self.find(rounded, other, Fit::Best))
            .flatten()
        {
            self.take(a, rounded);
            a
        } else {
            // PyTorch synchronizes the device and retries: every free settles.
            driver.count_retry();
            self.settle(|_, _| true, driver);
            if let Some(a) = self.find(rounded, |o| o == Owner::Settled, self.cfg.fit) {
                self.take(a, rounded);
                a
            } else {
                self.trim(0, driver);
                self.grow(rounded, stream, driver).ok_or(Refused)?
            }
        };
        self.live.insert(
            slot,
            Live {
                offset,
                size: rounded,
                stream,
            },
            rounded,
        );
        driver.count_alloc(Call::MallocAsync, size);
        Ok(())
    }

    fn free(&mut self, slot: u32, driver: &mut Device) {
        let l = self.live.remove(slot);
        driver.count_free(Call::FreeAsync, l.size);
        self.frees += 1;
        self.insert(
            l.offset,
            Range {
                size: l.size,
                owner: Owner::Pending(l.stream),
                first: self.frees,
                last: self.frees,
            },
        );
    }

    fn empty_cache(&mut self, driver: &mut Device) {
        self.settle(|_, _| true, driver);
        self.trim(0, driver);
    }

    fn order(&mut self, order: Order, stream: u32, event: u32, driver: &mut Device) {
        let e = event as usize;
        let recorded = self.events.get(e).copied().flatten();
        match order {
            Order::Device => self.settle(|_, _| true, driver),
            Order::Stream => self.settle(|s, _| s == stream, driver),
            Order::Event | Order::Wait => {
                if let Some((on, mark)) = recorded {
                    self.settle(|s, last| s == on && last <= mark, driver);
                }
            }
            Order::Record => {
                if self.events.len() <= e {
                    self.events.resize(e + 1, None);
                }
                self.events[e] = (stream != NO_STREAM).then_some((stream, self.frees));
            }
        }
    }

    fn allocated(&self) -> u64 {
        self.live.allocated()
    }

    fn address_map_into(&self, map: &mut AddressMap) {
        let base = self.base.unwrap_or(0);
        let free = self.free.iter().map(|(&a, r)| BlockSpan {
            address: base + a,
            size: r.size,
            slot: None,
        });
        arena_map(map, base, self.reserved, &self.live, free);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Driver, DriverModel};

    const MIB: u64 = 1 << 20;

    struct Run {
        pool: OrderedPool,
        driver: Driver,
    }

    impl Run {
        fn new(cfg: Config) -> Run {
            Run {
                pool: OrderedPool::new(cfg),
                driver: Driver::new(DriverModel::default()),
            }
        }
        fn malloc(&mut self, slot: u32, mib: u64, stream: u32) -> u64 {
            self.pool
                .malloc(slot, mib * MIB, stream, &mut self.driver.device())
                .unwrap();
            self.pool.live.get(slot).unwrap().offset / MIB
        }
        fn free(&mut self, slot: u32) {
            self.pool.free(slot, &mut self.driver.device());
        }
        fn order(&mut self, order: Order, stream: u32, event: u32) {
            self.pool
                .order(order, stream, event, &mut self.driver.device());
        }
        fn reserved_mib(&self) -> u64 {
            self.driver.reserved() / MIB
        }
    }

    /// Probes `same_stream_busy` and `cross_*`: 64 MiB freed on stream 0, asked again on
    /// stream 0 or 1 after each ordering.
    /// Orderings as (order, stream, event), then the stream that asks and the MiB reserved after.
    type Case = (&'static [(Order, u32, u32)], u32, u64);

    #[test]
    fn another_stream_reuses_a_free_only_once_an_ordering_covers_it() {
        let cases: [Case; 7] = [
            (&[], 0, 64),                                           // same stream: at once
            (&[], 1, 128),                                          // other stream: the pool grows
            (&[(Order::Record, 0, 0), (Order::Wait, 1, 0)], 1, 64), // wait_stream
            (&[(Order::Stream, 0, 0)], 1, 64), // stream synchronize / query done
            (&[(Order::Device, NO_STREAM, 0)], 1, 64), // device synchronize
            (
                &[(Order::Record, 0, 0), (Order::Event, NO_STREAM, 0)],
                1,
                64,
            ), // event synchronize
            (&[(Order::Stream, 1, 0)], 1, 128), // another stream's sync: no
        ];
        for (orders, stream, reserved) in cases {
            let mut r = Run::new(Config::default());
            r.malloc(0, 64, 0);
            r.free(0);
            for &(o, s, e) in orders {
                r.order(o, s, e);
            }
            r.malloc(1, 64, stream);
            assert_eq!(
                r.reserved_mib(),
                reserved,
                "{orders:?} then stream {stream}"
            );
        }
    }

    #[test]
    fn an_event_recorded_before_a_free_does_not_cover_it() {
        let mut r = Run::new(Config::default());
        r.malloc(0, 64, 0);
        r.order(Order::Record, 0, 0);
        r.free(0);
        r.order(Order::Event, NO_STREAM, 0);
        r.malloc(1, 64, 1);
        assert_eq!(r.reserved_mib(), 128);
    }

    /// The earliest-completion bound: GPU progress completed every free.
    #[test]
    fn opportunistic_reuse_takes_another_streams_pending_free() {
        let mut r = Run::new(Config {
            opportunistic: true,
            ..Config::default()
        });
        r.malloc(0, 64, 0);
        r.free(0);
        r.malloc(1, 64, 1);
        assert_eq!(r.reserved_mib(), 64);
    }

    /// Probe `pending_first`: settled 16 MiB frees at 0 and 64, pending 32 MiB at 24 and 16 MiB
    /// at 88; three 16 MiB requests take the pending 16, then the pending 32 twice.
    #[test]
    fn a_streams_pending_frees_are_reused_before_settled_ones() {
        let mut r = Run::new(Config::default());
        let sizes = [16, 8, 32, 8, 16, 8, 16];
        let at: Vec<u64> = (0..7).map(|i| r.malloc(i, sizes[i as usize], 0)).collect();
        assert_eq!(at, [0, 16, 24, 56, 64, 80, 88]);
        r.free(0);
        r.free(4);
        r.order(Order::Device, NO_STREAM, 0);
        r.free(2);
        r.free(6);
        let got: Vec<u64> = (10..13).map(|s| r.malloc(s, 16, 0)).collect();
        assert_eq!(got, [88, 24, 40]);
    }

    /// Probe `ties`: six 16 MiB blocks, the 4th freed before the 2nd: the 4th serves.
    #[test]
    fn among_equal_pending_frees_the_earliest_freed_serves() {
        let mut r = Run::new(Config::default());
        for i in 0..6 {
            r.malloc(i, 16, 0);
        }
        r.free(3);
        r.free(1);
        assert_eq!(r.malloc(9, 16, 0), 48);
    }

    #[test]
    fn a_synchronization_gives_back_the_free_end_above_the_release_threshold() {
        let mut r = Run::new(Config {
            release_threshold: 0,
            ..Config::default()
        });
        r.malloc(0, 100, 0);
        r.malloc(1, 100, 0);
        r.free(1);
        assert_eq!(r.reserved_mib(), 224, "pending: kept");
        r.order(Order::Stream, 0, 0);
        assert_eq!(
            r.reserved_mib(),
            128,
            "settled: back to the chunk holding the live 100 MiB"
        );
        // PyTorch's threshold (none): kept after the synchronization; empty_cache gives it back.
        let mut r = Run::new(Config::default());
        r.malloc(0, 100, 0);
        r.free(0);
        r.order(Order::Device, NO_STREAM, 0);
        assert_eq!(r.reserved_mib(), 128);
        r.pool.empty_cache(&mut r.driver.device());
        assert_eq!(r.reserved_mib(), 0);
    }

    #[test]
    fn when_growth_fails_another_streams_pending_free_is_taken_with_a_wait() {
        let mut pool = OrderedPool::new(Config::default());
        let mut d = Driver::new(DriverModel { capacity: 64 * MIB });
        pool.malloc(0, 64 * MIB, 0, &mut d.device()).unwrap();
        pool.free(0, &mut d.device());
        pool.malloc(1, 64 * MIB, 1, &mut d.device()).unwrap();
        assert_eq!(d.reserved(), 64 * MIB);
        let mut pool = OrderedPool::new(Config {
            internal_dependencies: false,
            ..Config::default()
        });
        let mut d = Driver::new(DriverModel { capacity: 64 * MIB });
        pool.malloc(0, 64 * MIB, 0, &mut d.device()).unwrap();
        pool.free(0, &mut d.device());
        // Without the inserted wait: PyTorch's retry synchronizes, the free settles and serves.
        pool.malloc(1, 64 * MIB, 1, &mut d.device()).unwrap();
        assert_eq!((d.reserved(), d.retries()), (64 * MIB, 1));
    }
}
