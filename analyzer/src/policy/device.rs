//! The device as a policy sees it: the allocation calls of the replay's [`Driver`], and nothing
//! of the engine's controls over it (freezing it, scripting its addresses, logging its calls).

use super::driver::{Call, Driver};

/// A policy's handle on the simulated driver for one call of the engine.
pub struct Device<'a> {
    driver: &'a mut Driver,
}

impl Driver {
    /// The handle a policy is given.
    pub fn device(&mut self) -> Device<'_> {
        Device { driver: self }
    }
}

impl Device<'_> {
    /// Bytes of device memory the process may hold; `u64::MAX` for no limit.
    #[inline]
    pub fn capacity(&self) -> u64 {
        self.driver.capacity()
    }

    /// Physical bytes held.
    #[inline]
    pub fn reserved(&self) -> u64 {
        self.driver.reserved()
    }

    /// `cudaMalloc` ([`Driver::malloc`]).
    #[inline]
    pub fn malloc(&mut self, size: u64) -> Option<u64> {
        self.driver.malloc(size)
    }

    /// `cudaFree` ([`Driver::free`]).
    #[inline]
    pub fn free(&mut self, address: u64, size: u64) {
        self.driver.free(address, size)
    }

    /// `cuMemAddressReserve` ([`Driver::reserve_address`]).
    #[inline]
    pub fn reserve_address(&mut self, size: u64) -> u64 {
        self.driver.reserve_address(size)
    }

    /// `cuMemCreate` + `cuMemMap` ([`Driver::map`]).
    #[inline]
    pub fn map(&mut self, pages: u64, page: u64) -> bool {
        self.driver.map(pages, page)
    }

    /// `cuMemUnmap` + `cuMemRelease` ([`Driver::unmap`]).
    #[inline]
    pub fn unmap(&mut self, pages: u64, page: u64) {
        self.driver.unmap(pages, page)
    }

    /// Memory held without a counted call ([`Driver::hold`]).
    #[inline]
    pub fn hold(&mut self, bytes: u64) -> bool {
        self.driver.hold(bytes)
    }

    /// Gives back what [`Device::hold`] took.
    #[inline]
    pub fn release(&mut self, bytes: u64) {
        self.driver.release(bytes)
    }

    /// Counts one allocating call ([`Driver::count_alloc`]).
    #[inline]
    pub fn count_alloc(&mut self, call: Call, bytes: u64) {
        self.driver.count_alloc(call, bytes)
    }

    /// Counts one freeing call ([`Driver::count_free`]).
    #[inline]
    pub fn count_free(&mut self, call: Call, bytes: u64) {
        self.driver.count_free(call, bytes)
    }

    /// Counts one retry after emptying the cache ([`Driver::count_retry`]).
    #[inline]
    pub fn count_retry(&mut self) {
        self.driver.count_retry()
    }
}
