//! How a free finds the allocation it ends: one key and one [`Matcher`] for every pass over a
//! trace (the allocation table's, which the views read and whose changes the replays' request
//! model follows, and the device peak's), so that all match the same frees and count the same
//! unmatched ones (docs/definitions.md, "Unmatched frees").

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::Hash;
use vramtrace_format::conventions::ALLOCATOR_SEGMENT;
use vramtrace_format::{Event, MemoryKind, Op};

/// The identity of a live allocation within its process.
///
/// VMM physical memory is found by its handle (`cuMemCreate`/`cuMemRelease`), everything else
/// by its address. PyTorch's tracker blocks (`torch.alloc`) and an imported snapshot's allocator
/// segments ([`ALLOCATOR_SEGMENT`]) have address spaces of their own: a block at the start of
/// its segment has the segment's address, and its free must not end the segment's driver call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectKey {
    pid: u32,
    by_handle: bool,
    framework: bool,
    segment: bool,
    value: u64,
}

impl ObjectKey {
    /// The key of the allocation that `e` brings in or ends.
    pub fn of(e: &Event) -> ObjectKey {
        let by_handle = matches!(e.api.op(), Op::Create | Op::Release);
        ObjectKey {
            pid: e.pid,
            by_handle,
            framework: e.api.from_framework(),
            segment: e.flags & ALLOCATOR_SEGMENT != 0,
            value: if by_handle { e.handle } else { e.address },
        }
    }
}

/// One 128-bit word to the hasher rather than five fields: foldhash folds it in at once,
/// without a sponge step per field, for a lookup made at every allocation and free.
impl Hash for ObjectKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let tag = u64::from(self.pid)
            | u64::from(self.by_handle) << 32
            | u64::from(self.framework) << 33
            | u64::from(self.segment) << 34;
        state.write_u128(u128::from(tag) << 64 | u128::from(self.value));
    }
}

/// What one event does to the allocation objects, by the rules every pass shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifetime {
    /// Nothing that holds memory (address reservations, mappings, pool settings, PyTorch's
    /// word on its segments), or a failed call that would have ended something.
    Neither,
    /// An allocation, registration or creation that succeeded.
    Birth,
    /// A free, unregistration or release that succeeded.
    End,
    /// An allocation, registration or creation that returned an error: it created nothing.
    Failed,
}

impl Lifetime {
    fn of(e: &Event) -> Lifetime {
        if e.api.kind() == MemoryKind::TorchSegment {
            return Lifetime::Neither;
        }
        let op = e.api.op();
        let born = matches!(op, Op::Alloc | Op::Register | Op::Create);
        match (e.succeeded(), born) {
            (false, true) => Lifetime::Failed,
            (false, false) => Lifetime::Neither,
            (true, true) => Lifetime::Birth,
            (true, false) if matches!(op, Op::Free | Op::Unregister | Op::Release) => Lifetime::End,
            (true, false) => Lifetime::Neither,
        }
    }
}

/// Whether `e` brings an object in (and so ends, if any, the one whose address it took).
pub(super) fn is_birth(e: &Event) -> bool {
    Lifetime::of(e) == Lifetime::Birth
}

/// What one event did to the allocation objects, as [`Matcher::apply`] matched it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Matched<T> {
    Neither,
    Failed,
    /// A new object (the one whose address or handle it took without a free was handed to
    /// `born` first).
    Born,
    Ended(T),
    /// A free of an address (or handle) the trace never saw allocated.
    Unmatched,
}

/// The hasher of the live objects (one lookup per allocation or free): fast, and seeded at
/// random, so that a crafted trace cannot aim at collisions.
type Hasher = foldhash::fast::RandomState;

/// The one per-event match of frees to allocations ([`Lifetime`] and [`ObjectKey`]), holding
/// a `T` per live object: the table's row, the request model's request, the device peak's
/// bytes. Every pass over events that follows objects goes through it, so all of them match
/// the same frees.
#[derive(Debug)]
pub(super) struct Matcher<T> {
    live: HashMap<ObjectKey, T, Hasher>,
}

impl<T> Default for Matcher<T> {
    fn default() -> Matcher<T> {
        Matcher {
            live: HashMap::default(),
        }
    }
}

impl<T> Matcher<T> {
    /// Matches the next event in file order; `born` makes the value of an object it creates,
    /// given the value of the live object whose address (or handle) the new one took without a
    /// free we saw: that object is gone (the driver hands out no address twice), and every
    /// pass ends it there, before the new one is born.
    pub(super) fn apply(&mut self, e: &Event, born: impl FnOnce(Option<T>) -> T) -> Matched<T> {
        match Lifetime::of(e) {
            Lifetime::Neither => Matched::Neither,
            Lifetime::Failed => Matched::Failed,
            Lifetime::Birth => {
                match self.live.entry(ObjectKey::of(e)) {
                    Entry::Vacant(v) => {
                        v.insert(born(None));
                    }
                    Entry::Occupied(o) => {
                        // Rare (a free the trace missed): two lookups.
                        let (key, old) = o.remove_entry();
                        self.live.insert(key, born(Some(old)));
                    }
                }
                Matched::Born
            }
            Lifetime::End => self
                .live
                .remove(&ObjectKey::of(e))
                .map_or(Matched::Unmatched, Matched::Ended),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramtrace_format::Api;

    fn event(api: Api, address: u64, handle: u64) -> Event {
        Event {
            api,
            address,
            handle,
            pid: 7,
            ..Event::new(api)
        }
    }

    #[test]
    fn a_tracker_block_and_the_driver_segment_at_its_address_are_two_objects() {
        let segment = ObjectKey::of(&event(Api::CuMemAlloc_v2, 0x1000, 0));
        let block = ObjectKey::of(&event(Api::TorchAlloc, 0x1000, 0));
        assert_ne!(segment, block);
        assert_eq!(segment, ObjectKey::of(&event(Api::CuMemFree_v2, 0x1000, 0)));
        assert_eq!(
            block,
            ObjectKey::of(&event(Api::TorchFreeCompleted, 0x1000, 0))
        );
    }

    #[test]
    fn vmm_memory_is_found_by_its_handle() {
        let created = ObjectKey::of(&event(Api::CuMemCreate, 0, 42));
        assert_eq!(
            created,
            ObjectKey::of(&event(Api::CuMemRelease, 0x1000, 42))
        );
        assert_ne!(created, ObjectKey::of(&event(Api::CuMemAlloc_v2, 42, 0)));
    }
}
