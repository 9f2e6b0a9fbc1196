//! The shared driver model: capacity, physical granularity, and what each driver call costs.
//!
//! Calibrated from `docs/h200-measurements.md` (H200, driver 580.159.04, CUDA 13.0):
//!
//! - `cudaMalloc` granularity: requests of at most 1 MiB are packed into shared 2 MiB pages at
//!   512 B alignment; larger ones are rounded up to whole 2 MiB pages (measured with
//!   `cudaMemGetInfo` around 256 allocations of each size). How the driver picks the page for a
//!   small request is not observable; this model packs them into the most recently opened page
//!   and gives a page back when its last allocation is freed (**inferred**).
//! - Latency: the medians of 200 calls per size (table "Latency of the driver's allocation
//!   calls"), linearly interpolated in size and extrapolated past 1 GiB with the slope of the
//!   last interval.
//! - VMM (`cuMemCreate` + `cuMemMap` per page, as PyTorch's expandable segments do) was not
//!   measured: a mapped page costs what a `cudaMalloc` of the page size costs, an unmapped one
//!   what a `cudaFree` of it costs (**uncalibrated**).
//!
//! Every figure the model returns is deterministic.

use std::collections::HashMap;

pub const MIB: u64 = 1 << 20;
/// The physical page of plain `cudaMalloc` and the VMM minimum granularity on the H200.
pub const PAGE: u64 = 2 * MIB;
/// `cudaMalloc` requests at most this large share pages.
pub const SMALL_PACKED: u64 = MIB;
/// Address alignment of packed small allocations.
pub const SMALL_ALIGN: u64 = 512;
/// `totalGlobalMem` of the H200: the device memory of a replay without a capacity (for the
/// expandable segments' address reservation and the options defined as a fraction of it).
pub const H200_TOTAL_MEMORY: u64 = 150_754_820_096;
/// No request larger than this (256 TiB) can be served by any device; the engine refuses it
/// before a policy sees it, which keeps every size computation far from overflow.
pub const MAX_REQUEST: u64 = 1 << 48;

/// Medians in µs by request size, H200 (docs/h200-measurements.md).
const CUDA_MALLOC_US: &[(u64, f64)] = &[
    (512, 45.4),
    (4096, 44.6),
    (MIB, 45.2),
    (2 * MIB, 43.6),
    (20 * MIB, 44.7),
    (256 * MIB, 67.6),
    (1024 * MIB, 231.8),
];
const CUDA_FREE_US: &[(u64, f64)] = &[
    (512, 37.3),
    (4096, 36.2),
    (MIB, 36.7),
    (2 * MIB, 35.4),
    (20 * MIB, 52.8),
    (256 * MIB, 174.5),
    (1024 * MIB, 616.0),
];
const CUDA_MALLOC_ASYNC_US: &[(u64, f64)] = &[
    (512, 0.85),
    (4096, 0.80),
    (MIB, 0.74),
    (2 * MIB, 0.79),
    (20 * MIB, 0.87),
    (256 * MIB, 1.30),
    (1024 * MIB, 3.83),
];
const CUDA_FREE_ASYNC_US: &[(u64, f64)] = &[
    (512, 0.83),
    (4096, 0.82),
    (MIB, 0.81),
    (2 * MIB, 0.81),
    (20 * MIB, 0.83),
    (256 * MIB, 1.24),
    (1024 * MIB, 3.04),
];

/// Which driver call, for its cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Malloc,
    Free,
    MallocAsync,
    FreeAsync,
}

/// Estimated latency of one call of `bytes`, in microseconds.
pub fn call_cost_us(call: Call, bytes: u64) -> f64 {
    let table = match call {
        Call::Malloc => CUDA_MALLOC_US,
        Call::Free => CUDA_FREE_US,
        Call::MallocAsync => CUDA_MALLOC_ASYNC_US,
        Call::FreeAsync => CUDA_FREE_ASYNC_US,
    };
    interpolate(table, bytes)
}

fn interpolate(table: &[(u64, f64)], x: u64) -> f64 {
    let first = table[0];
    if x <= first.0 {
        return first.1;
    }
    let pair = table
        .windows(2)
        .find(|w| x <= w[1].0)
        .unwrap_or(&table[table.len() - 2..]);
    let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
    y0 + (y1 - y0) * (x as f64 - x0 as f64) / (x1 as f64 - x0 as f64)
}

/// Capacity and granularity of the simulated device.
#[derive(Debug, Clone, Copy)]
pub struct DriverModel {
    /// Bytes of device memory the process may hold; `u64::MAX` for no limit.
    pub capacity: u64,
}

impl Default for DriverModel {
    fn default() -> Self {
        DriverModel { capacity: u64::MAX }
    }
}

/// Where [`AddressOrder::Falling`] starts: half the 64-bit space, far above every address real
/// drivers return or the rising order reaches.
const FALLING_TOP: u64 = 1 << 63;

/// Where the simulated driver places each new allocation in the address space. PyTorch breaks
/// ties between equal-size free blocks by address, so the order can decide a replay
/// (docs/allocators.md, "Driver addresses").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AddressOrder {
    /// Each allocation above the previous ones.
    #[default]
    Rising,
    /// Each allocation below the previous ones.
    Falling,
}

#[derive(Debug, Clone, Copy)]
struct SmallPage {
    live: u32,
    bump: u64,
}

/// The simulated driver one policy talks to during one replay.
///
/// `reserved` is the physical memory the policy holds from it. Addresses are virtual and never
/// reused, so two live allocations can never share one by accident.
#[derive(Debug, Clone)]
pub struct Driver {
    model: DriverModel,
    reserved: u64,
    device_allocs: u64,
    device_frees: u64,
    sync_frees: u64,
    refusals: u64,
    retries: u64,
    cost_us: f64,
    next_va: u64,
    order: AddressOrder,
    small_pages: HashMap<u64, SmallPage>,
    open_small: Option<u64>,
    scripted: std::collections::VecDeque<(u64, u64)>,
    frozen: bool,
    log: Option<Vec<DriverCall>>,
}

/// One successful physical allocation or release, for comparing a policy's driver calls with
/// a recorded allocator's (`segment_alloc` / `segment_map` sequences).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverCall {
    /// `cudaMalloc` of this many bytes.
    Malloc(u64),
    Free(u64),
    /// One map operation of this many bytes (pages × page size).
    Map(u64),
    Unmap(u64),
}

impl Driver {
    /// Starts keeping every successful call, in order ([`Driver::calls`]).
    pub fn record_calls(&mut self) {
        self.log.get_or_insert_with(Vec::new);
    }

    /// The calls kept since [`Driver::record_calls`].
    pub fn calls(&self) -> &[DriverCall] {
        self.log.as_deref().unwrap_or(&[])
    }

    fn note(&mut self, call: DriverCall) {
        if let Some(log) = &mut self.log {
            log.push(call);
        }
    }

    /// While frozen, every call that would take more physical memory is refused, whatever the
    /// capacity: used for requests the real driver refused (see [`crate::model::RequestKind::
    /// Attempt`]), whose failure the replay reproduces rather than second-guesses.
    pub fn set_frozen(&mut self, frozen: bool) {
        self.frozen = frozen;
    }

    /// Replays against the `cudaMalloc`s a real driver served, as (address, bytes) in order:
    /// while the replay's large `cudaMalloc`s ask for the same sizes in the same order they get
    /// the real addresses; at the first size that differs (another configuration, another
    /// allocation sequence) the script is dropped and the model's addresses follow. Which of two
    /// equal-size free blocks PyTorch reuses depends on these addresses (docs/validation.md,
    /// "Part 3", Q1).
    pub fn script_segments(&mut self, segments: impl IntoIterator<Item = (u64, u64)>) {
        self.scripted.extend(segments);
    }

    /// Places the addresses of the allocations in `order` (rising by default); called before
    /// the first allocation. Falling addresses start high above the rising ones' start, so no
    /// range is handed out twice.
    pub fn set_address_order(&mut self, order: AddressOrder) {
        self.order = order;
        if order == AddressOrder::Falling {
            self.next_va = FALLING_TOP;
        }
    }

    pub fn new(model: DriverModel) -> Driver {
        Driver {
            model,
            reserved: 0,
            device_allocs: 0,
            device_frees: 0,
            sync_frees: 0,
            refusals: 0,
            retries: 0,
            cost_us: 0.0,
            next_va: 0x7f00_0000_0000,
            order: AddressOrder::Rising,
            small_pages: HashMap::new(),
            open_small: None,
            scripted: std::collections::VecDeque::new(),
            frozen: false,
            log: None,
        }
    }

    pub fn capacity(&self) -> u64 {
        self.model.capacity
    }

    /// Physical bytes held.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Successful allocating calls (`cudaMalloc`, one per map operation, ...).
    pub fn device_allocs(&self) -> u64 {
        self.device_allocs
    }

    pub fn device_frees(&self) -> u64 {
        self.device_frees
    }

    /// Frees that synchronize the device (`cudaFree`, `cuMemUnmap`): the program waits for
    /// all its queued work at each.
    pub fn sync_frees(&self) -> u64 {
        self.sync_frees
    }

    /// Allocating calls the device refused (no room): each sends an allocator down its retry
    /// path.
    pub fn refusals(&self) -> u64 {
        self.refusals
    }

    /// Times a policy emptied its cache and tried again after running out of memory
    /// (PyTorch's `num_alloc_retries`), as the policies report them ([`Driver::count_retry`]).
    pub fn retries(&self) -> u64 {
        self.retries
    }

    /// Counts one retry of an allocation after freeing the cache (synchronizing).
    pub fn count_retry(&mut self) {
        self.retries += 1;
    }

    /// Estimated time spent in successful driver calls. A refused call returns at once, so
    /// it is counted ([`Driver::refusals`]) but not charged: a request no device could hold
    /// costs nothing, not the extrapolated time of allocating it.
    pub fn cost_us(&self) -> f64 {
        self.cost_us
    }

    fn refuse<T>(&mut self) -> Option<T> {
        self.refusals += 1;
        None
    }

    /// Physical bytes a `cudaMalloc` of `size` takes, not counting small-page sharing.
    pub fn malloc_footprint(size: u64) -> u64 {
        if size <= SMALL_PACKED {
            size.max(1).next_multiple_of(SMALL_ALIGN)
        } else {
            size.next_multiple_of(PAGE)
        }
    }

    fn fits(&self, bytes: u64) -> bool {
        !self.frozen
            && self
                .reserved
                .checked_add(bytes)
                .is_some_and(|t| t <= self.model.capacity)
    }

    /// `cudaMalloc`: an address, or `None` when the device is full.
    pub fn malloc(&mut self, size: u64) -> Option<u64> {
        let address = if size <= SMALL_PACKED {
            match self.malloc_small(size) {
                Some(a) => a,
                None => return self.refuse(),
            }
        } else {
            let bytes = size.next_multiple_of(PAGE);
            if !self.fits(bytes) {
                return self.refuse();
            }
            self.reserved += bytes;
            match self.scripted.pop_front() {
                Some((address, recorded)) if recorded == size => address,
                Some(_) => {
                    self.scripted.clear();
                    self.reserve_address(bytes)
                }
                None => self.reserve_address(bytes),
            }
        };
        self.cost_us += call_cost_us(Call::Malloc, size);
        self.device_allocs += 1;
        self.note(DriverCall::Malloc(size));
        Some(address)
    }

    fn malloc_small(&mut self, size: u64) -> Option<u64> {
        let need = size.max(1).next_multiple_of(SMALL_ALIGN);
        let open = self
            .open_small
            .filter(|base| self.small_pages[base].bump + need <= PAGE);
        let base = match open {
            Some(base) => base,
            None => {
                if !self.fits(PAGE) {
                    return None;
                }
                self.reserved += PAGE;
                let base = self.reserve_address(PAGE);
                self.small_pages
                    .insert(base, SmallPage { live: 0, bump: 0 });
                self.open_small = Some(base);
                base
            }
        };
        let page = self.small_pages.get_mut(&base).expect("open page exists");
        let address = base + page.bump;
        page.bump += need;
        page.live += 1;
        Some(address)
    }

    /// `cudaFree` of an address `malloc` returned for `size` bytes.
    pub fn free(&mut self, address: u64, size: u64) {
        self.cost_us += call_cost_us(Call::Free, size);
        self.device_frees += 1;
        self.sync_frees += 1;
        self.note(DriverCall::Free(size));
        if size <= SMALL_PACKED {
            let base = address & !(PAGE - 1);
            let page = self
                .small_pages
                .get_mut(&base)
                .expect("a small allocation lives in a page");
            page.live -= 1;
            if page.live == 0 {
                if self.open_small == Some(base) {
                    page.bump = 0;
                } else {
                    self.small_pages.remove(&base);
                    self.reserved -= PAGE;
                }
            }
        } else {
            self.reserved -= size.next_multiple_of(PAGE);
        }
    }

    /// `cuMemAddressReserve`: virtual addresses only, 2 MiB aligned; free of charge here.
    pub fn reserve_address(&mut self, size: u64) -> u64 {
        let size = size.next_multiple_of(PAGE);
        match self.order {
            AddressOrder::Rising => {
                let address = self.next_va;
                self.next_va += size;
                address
            }
            AddressOrder::Falling => {
                self.next_va -= size;
                self.next_va
            }
        }
    }

    /// `cuMemCreate` + `cuMemMap` of `pages` pages of `page` bytes in one operation; all or
    /// nothing. Counted as one device allocation, as PyTorch's `num_device_alloc` counts one
    /// per `map_block`.
    pub fn map(&mut self, pages: u64, page: u64) -> bool {
        let bytes = pages * page;
        if !self.fits(bytes) {
            self.refusals += 1;
            return false;
        }
        self.cost_us += pages as f64 * call_cost_us(Call::Malloc, page);
        self.reserved += bytes;
        self.device_allocs += 1;
        self.note(DriverCall::Map(bytes));
        true
    }

    /// `cuMemUnmap` + `cuMemRelease` of `pages` pages, one device free.
    pub fn unmap(&mut self, pages: u64, page: u64) {
        self.cost_us += pages as f64 * call_cost_us(Call::Free, page);
        self.reserved -= pages * page;
        self.device_frees += 1;
        self.sync_frees += 1;
        self.note(DriverCall::Unmap(pages * page));
    }

    /// Physical memory held by a model that places nothing through the driver (the bounds):
    /// no call is counted.
    pub fn hold(&mut self, bytes: u64) -> bool {
        if !self.fits(bytes) {
            return false;
        }
        self.reserved += bytes;
        true
    }

    /// Gives back what [`Driver::hold`] took.
    pub fn release(&mut self, bytes: u64) {
        self.reserved -= bytes;
    }

    /// Counts one allocating call of `bytes` of the given kind (for policies whose own model
    /// decides placement, such as a stream-ordered pool's growth).
    pub fn count_alloc(&mut self, call: Call, bytes: u64) {
        self.cost_us += call_cost_us(call, bytes);
        self.device_allocs += 1;
    }

    /// Counts one freeing call.
    pub fn count_free(&mut self, call: Call, bytes: u64) {
        self.cost_us += call_cost_us(call, bytes);
        self.device_frees += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripted_segments_give_their_addresses_until_a_size_differs() {
        let mut d = Driver::new(DriverModel::default());
        d.script_segments([
            (0x7000_0000, 20 * MIB),
            (0x6000_0000, 2 * MIB),
            (0x5000_0000, 4 * MIB),
        ]);
        assert_eq!(d.malloc(20 * MIB), Some(0x7000_0000));
        assert_eq!(d.malloc(2 * MIB), Some(0x6000_0000));
        // Another size than recorded: the model's own address, and the rest of the script goes.
        let own = d.malloc(6 * MIB).unwrap();
        assert_ne!(own, 0x5000_0000);
        assert_ne!(d.malloc(4 * MIB), Some(0x5000_0000));
    }

    #[test]
    fn small_cuda_mallocs_share_one_2mib_page() {
        let mut d = Driver::new(DriverModel::default());
        let addrs: Vec<u64> = (0..256).map(|_| d.malloc(512).unwrap()).collect();
        assert_eq!(d.reserved(), PAGE);
        assert_eq!(addrs[1] - addrs[0], 512);
        for a in addrs {
            d.free(a, 512);
        }
        // The open page stays for the next small request.
        assert_eq!(d.reserved(), PAGE);
    }

    #[test]
    fn large_cuda_mallocs_round_to_2mib_pages() {
        let mut d = Driver::new(DriverModel::default());
        let a = d.malloc(MIB + 1).unwrap();
        assert_eq!(d.reserved(), PAGE);
        d.malloc(PAGE + 1).unwrap();
        assert_eq!(d.reserved(), 3 * PAGE);
        d.free(a, MIB + 1);
        assert_eq!(d.reserved(), 2 * PAGE);
        assert_eq!((d.device_allocs(), d.device_frees()), (2, 1));
    }

    #[test]
    fn a_refused_call_is_counted_but_not_charged() {
        let mut d = Driver::new(DriverModel { capacity: 4 * MIB });
        assert!(d.malloc(4 * MIB).is_some());
        let before = d.cost_us();
        assert!(d.malloc(MIB + 1).is_none());
        assert!(d.malloc(32 << 40).is_none());
        assert_eq!(d.cost_us(), before);
        assert_eq!((d.device_allocs(), d.refusals()), (1, 2));
    }

    #[test]
    fn costs_follow_the_measured_table() {
        assert_eq!(call_cost_us(Call::Malloc, 512), 45.4);
        assert_eq!(call_cost_us(Call::Free, 1024 * MIB), 616.0);
        let mid = call_cost_us(Call::Malloc, 640 * MIB);
        assert!((mid - (67.6 + 231.8) / 2.0).abs() < 1e-9);
        assert!(call_cost_us(Call::Malloc, 2048 * MIB) > 231.8);
    }
}
