//! The one trait every allocator model implements.

use super::device::Device;
use super::layout::AddressMap;
use crate::model::Order;

/// The driver refused and the policy's own retry path (freeing its cache, unmapping pages, ...)
/// could not make room: the program would see an out-of-memory error here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused;

/// An allocator model, driven one request at a time by the engine.
///
/// A policy gets physical memory only through the [`Device`] it is handed (the allocation calls
/// of the replay's [`super::Driver`], never its controls), so reserved bytes, call counts and
/// their cost are measured the same way for every policy. Objects are named by
/// slot ([`crate::model::Request`]); a policy's state must stay proportional to the live set.
/// Implementations must be deterministic: the same requests give the same placements.
pub trait Policy: Send {
    /// Serves `size` bytes for `slot` on CUDA stream index `stream`, running the policy's own
    /// retry path before giving up.
    fn malloc(
        &mut self,
        slot: u32,
        size: u64,
        stream: u32,
        driver: &mut Device,
    ) -> Result<(), Refused>;

    /// Ends the object in `slot`, which this policy served.
    fn free(&mut self, slot: u32, driver: &mut Device);

    /// An allocation the program tried and survived failing
    /// ([`crate::model::RequestKind::Attempt`]): by default served and given back at once, so
    /// a refusal runs the policy's retry path as it did in the program. Returns whether it was
    /// served.
    fn attempt(&mut self, slot: u32, size: u64, stream: u32, driver: &mut Device) -> bool {
        let served = self.malloc(slot, size, stream, driver).is_ok();
        if served {
            self.free(slot, driver);
        }
        served
    }

    /// The program emptied its allocator's cache (`torch.cuda.empty_cache()`): a policy with
    /// a cache gives back what that call gives back; by default nothing happens.
    fn empty_cache(&mut self, _driver: &mut Device) {}

    /// The program capped its allocator's reserved memory at `fraction` of the device
    /// (`torch.cuda.set_per_process_memory_fraction`): a policy with such a cap applies it; by
    /// default it is ignored.
    fn set_memory_fraction(&mut self, _fraction: f64) {}

    /// The program ordered its streams ([`crate::model::Order`]: a synchronization, an event
    /// `event` recorded on or waited for by `stream`): what a stream-ordered pool's reuse
    /// follows. Other allocators reuse by their own bookkeeping and ignore it.
    fn order(&mut self, _order: Order, _stream: u32, _event: u32, _driver: &mut Device) {}

    /// Bytes of the blocks handed out and not yet freed (after the policy's rounding).
    fn allocated(&self) -> u64;

    /// Writes where everything is now into `map`, which comes empty: the ranges held from the
    /// driver and the blocks inside them, in the policy's own order. Readers sort what they
    /// need, so the report's state log, which reads a map after every request of its windows
    /// into buffers it reuses, pays for no sort and no allocation it does not use; it compares
    /// each map with the one before from both ends, so an order that stays the same from one
    /// request to the next (by address or by slot) keeps that comparison short.
    fn address_map_into(&self, map: &mut AddressMap);

    /// [`Policy::address_map_into`], into a map of its own.
    fn address_map(&self) -> AddressMap {
        let mut map = AddressMap::default();
        self.address_map_into(&mut map);
        map
    }
}
