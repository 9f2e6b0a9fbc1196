//! How a free finds the allocation it ends: one key and one [`Matcher`] for every pass over a
//! trace (the allocation table's, which the views read and whose changes the replays' request
//! model follows, and the device peak's), so that all match the same frees and count the same
//! unmatched ones (docs/definitions.md, "Unmatched frees").

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use std::hash::BuildHasher;
use vramtrace_format::conventions::ALLOCATOR_SEGMENT;
use vramtrace_format::{Api, Event, MemoryKind, Op};

/// The identity of a live allocation within its process.
///
/// VMM physical memory is found by its handle (`cuMemCreate`/`cuMemRelease`), everything else
/// by its address. PyTorch's tracker blocks (`torch.alloc`) and an imported snapshot's allocator
/// segments ([`ALLOCATOR_SEGMENT`]) have address spaces of their own: a block at the start of
/// its segment has the segment's address, and its free must not end the segment's driver call.
///
/// Held as one 128-bit word (the process and the three address-space bits above the address or
/// handle): one comparison, and one word to the hasher, for a lookup made at every allocation
/// and free.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct ObjectKey(u128);

/// What of an object's key its function decides: whether it is found by its handle, and
/// whether it lives in a framework's address space (both as the key's bits, ready to be
/// combined with the process's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct KeyKind {
    by_handle: bool,
    bits: u64,
}

impl KeyKind {
    pub(super) fn of(api: Api) -> KeyKind {
        let by_handle = matches!(api.op(), Op::Create | Op::Release);
        KeyKind {
            by_handle,
            bits: u64::from(by_handle) << 32 | u64::from(api.from_framework()) << 33,
        }
    }
}

impl ObjectKey {
    /// The key of the allocation that `e`, whose function's part of the key is `kind`, brings
    /// in or ends.
    #[inline]
    fn with(e: &Event, kind: KeyKind) -> ObjectKey {
        let tag = u64::from(e.pid) | kind.bits | u64::from(e.flags & ALLOCATOR_SEGMENT != 0) << 34;
        let value = if kind.by_handle { e.handle } else { e.address };
        ObjectKey(u128::from(tag) << 64 | u128::from(value))
    }
}

/// What one event does to the allocation objects, by the rules every pass shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lifetime {
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
    pub(super) fn of(e: &Event) -> Lifetime {
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
///
/// A [`HashTable`] rather than a `HashMap`: its entry finds the key or the slot for it in one
/// probe, where `HashMap`'s vacant entry probes again to insert, at every allocation.
#[derive(Debug)]
pub(super) struct Matcher<T> {
    live: HashTable<(ObjectKey, T)>,
    hasher: Hasher,
}

impl<T> Default for Matcher<T> {
    fn default() -> Matcher<T> {
        Matcher {
            live: HashTable::new(),
            hasher: Hasher::default(),
        }
    }
}

impl<T> Matcher<T> {
    /// Matches the next event in file order, whose [`Lifetime`] is `lifetime` and whose key's
    /// [`KeyKind`] is `key` (the answers of [`super::rules`]); `born` makes the value of an
    /// object it creates, given the value of the live object whose address (or handle) the new
    /// one took without a free we saw: that object is gone (the driver hands out no address
    /// twice), and every pass ends it there, before the new one is born.
    #[inline]
    pub(super) fn apply(
        &mut self,
        e: &Event,
        (lifetime, key): (Lifetime, KeyKind),
        born: impl FnOnce(Option<T>) -> T,
    ) -> Matched<T> {
        let key = match lifetime {
            Lifetime::Neither => return Matched::Neither,
            Lifetime::Failed => return Matched::Failed,
            Lifetime::Birth | Lifetime::End => ObjectKey::with(e, key),
        };
        let hasher = &self.hasher;
        let hash = hasher.hash_one(key);
        let same = |(k, _): &(ObjectKey, T)| *k == key;
        if lifetime == Lifetime::End {
            return match self.live.find_entry(hash, same) {
                Ok(o) => Matched::Ended(o.remove().0.1),
                Err(_) => Matched::Unmatched,
            };
        }
        match self.live.entry(hash, same, |(k, _)| hasher.hash_one(k)) {
            Entry::Vacant(v) => {
                v.insert((key, born(None)));
            }
            Entry::Occupied(o) => {
                // Rare (a free the trace missed).
                let ((_, old), v) = o.remove();
                v.insert((key, born(Some(old))));
            }
        }
        Matched::Born
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl ObjectKey {
        fn of(e: &Event) -> ObjectKey {
            ObjectKey::with(e, KeyKind::of(e.api))
        }
    }

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
