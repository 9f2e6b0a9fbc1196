//! How a free finds the allocation it ends: one key for every pass over a trace (the
//! allocation table's [`super::table::Matcher`], which the views, the device peak and the
//! replays' [`super::ModelBuilder`] all go through), so that all match the same frees and count
//! the same unmatched ones (docs/definitions.md, "Unmatched frees").

use vramtrace_format::conventions::ALLOCATOR_SEGMENT;
use vramtrace_format::{Event, Op};

/// The identity of a live allocation within its process.
///
/// VMM physical memory is found by its handle (`cuMemCreate`/`cuMemRelease`), everything else
/// by its address. PyTorch's tracker blocks (`torch.alloc`) and an imported snapshot's allocator
/// segments ([`ALLOCATOR_SEGMENT`]) have address spaces of their own: a block at the start of
/// its segment has the segment's address, and its free must not end the segment's driver call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
