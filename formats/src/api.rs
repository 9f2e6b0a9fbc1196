//! The hooked CUDA driver functions, by their exact exported names.
//!
//! The list follows the hook set of `docs/interposition.md` §7. Each function has a
//! stable numeric id that the file format stores; the table is append-only: ids are never reused
//! or renumbered, and a reader refuses an id it does not know (the file was written by a newer
//! recorder).

use serde::{Deserialize, Serialize};

/// What a call does to memory, independent of which exact entry point made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Creates a live object at `address` of `size` bytes (or a handle, for arrays).
    Alloc,
    /// Ends the object that starts at `address`.
    Free,
    /// Reserves a virtual address range; no physical memory.
    Reserve,
    /// Returns a virtual address range.
    Unreserve,
    /// Creates a physical allocation identified by `handle`.
    Create,
    /// Releases a physical allocation handle.
    Release,
    /// Maps `size` bytes of `handle` at `address`.
    Map,
    /// Unmaps `size` bytes at `address`.
    Unmap,
    /// Takes one more reference to a physical allocation handle.
    Retain,
    /// Page-locks existing host memory.
    Register,
    /// Undoes [`Op::Register`].
    Unregister,
    /// Creates a stream-ordered memory pool.
    PoolCreate,
    /// Destroys a stream-ordered memory pool.
    PoolDestroy,
    /// Trims a pool or the graph memory of a device, or empties a framework allocator's cache.
    Trim,
    /// The program gave memory back to its framework's allocator, which may keep it in use
    /// until work queued on other streams is done ([`Op::Free`] follows when it is reusable).
    FreeRequested,
    /// Sets or reports a bound on the memory a process may hold (a framework allocator's cap,
    /// the device's total and free bytes); creates and ends nothing.
    Limit,
    /// The host waited for (or asked about) work queued on a stream, an event or the whole
    /// device: what lets a stream-ordered pool see frees complete. Creates and ends nothing.
    Synchronize,
    /// Recorded an event into a stream (a point in its order others can wait for).
    Record,
    /// Made a stream wait for an event recorded on another stream.
    Wait,
}

impl Op {
    /// Whether a call of this kind brings memory in (allocates, reserves, creates, maps, retains,
    /// registers, makes a pool): the events the recorder takes a stack for, and the ones the
    /// analyzer attributes; a free, unmap or release is attributed through the call it ends.
    pub const fn brings_in(self) -> bool {
        matches!(
            self,
            Op::Alloc
                | Op::Reserve
                | Op::Create
                | Op::Map
                | Op::Retain
                | Op::Register
                | Op::PoolCreate
        )
    }
}

/// The kind of memory a call allocates or frees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryKind {
    /// `cuMemAlloc`/`cuMemAllocPitch`: plain device memory.
    Device,
    /// `cuMemAllocManaged`: unified memory.
    Managed,
    /// Stream-ordered allocations from a memory pool.
    Pool,
    /// Virtual memory management: physical handles, reservations and mappings.
    Vmm,
    /// Page-locked host memory allocated by the driver.
    PinnedHost,
    /// Existing host memory registered with the driver.
    RegisteredHost,
    /// CUDA arrays and mipmapped arrays.
    Array,
    /// Memory of another process opened through IPC.
    Ipc,
    /// Memory imported from another API (Vulkan, D3D, ...).
    External,
    /// Memory owned by CUDA graph allocation nodes.
    Graph,
    /// Multicast objects.
    Multicast,
    /// A block PyTorch's caching allocator handed to the program (a tensor's storage), as the
    /// allocator's trace tracker reported it: one request.
    TorchBlock,
    /// Memory PyTorch's caching allocator took from or gave back to the driver (a segment, or
    /// a mapping of an expandable segment), as its trace tracker reported it.
    TorchSegment,
    /// What bounds a process's device memory: the device's total and free bytes, PyTorch's
    /// memory fraction, and the releases of its cache (`empty_cache`). No memory of its own.
    Limits,
    /// Synchronizations, event records and stream waits: the order between streams and the
    /// host that decides when a stream-ordered pool may reuse a free. No memory of its own.
    Ordering,
}

macro_rules! apis {
    ($( $variant:ident = $id:literal, $name:literal, $op:ident, $kind:ident; )*) => {
        /// One hooked driver entry point. The discriminant is the id stored in trace files.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u16)]
        #[allow(non_camel_case_types)]
        pub enum Api {
            $( #[doc = concat!("`", $name, "`")] $variant = $id, )*
        }

        /// One more than the largest id: the length of the tables below.
        const IDS: usize = {
            let mut n = 0;
            $( if $id + 1 > n { n = $id + 1; } )*
            n
        };

        /// Each function's operation and memory kind, by id (an id of no function holds a
        /// placeholder that no [`Api`] reads).
        const OP_KIND: [(Op, MemoryKind); IDS] = {
            let mut t = [(Op::Alloc, MemoryKind::Device); IDS];
            $( t[$id] = (Op::$op, MemoryKind::$kind); )*
            t
        };

        /// The function of each id, if any.
        const BY_ID: [Option<Api>; IDS] = {
            let mut t = [None; IDS];
            $( t[$id] = Some(Api::$variant); )*
            t
        };

        impl Api {
            /// Every known function, in id order.
            pub const ALL: &'static [Api] = &[$(Api::$variant),*];

            /// One more than the largest id: the length of a table indexed by id.
            pub const IDS: usize = IDS;

            /// The exact exported symbol name, for example `cuMemAlloc_v2`.
            pub const fn name(self) -> &'static str {
                match self { $(Api::$variant => $name,)* }
            }

            /// What the call does.
            // `op`, `kind` and `from_id` are asked of every event, several times, across
            // crates: written as a load from a table rather than a `match` (which LLVM turned
            // into the same table behind a call it did not inline everywhere), they inline as
            // one load wherever they are asked.
            #[inline]
            pub const fn op(self) -> Op {
                OP_KIND[self as usize].0
            }

            /// Which kind of memory the call concerns.
            #[inline]
            pub const fn kind(self) -> MemoryKind {
                OP_KIND[self as usize].1
            }

            /// The function with this stored id, if this version knows it.
            #[inline]
            pub const fn from_id(id: u16) -> Option<Api> {
                if (id as usize) < IDS {
                    BY_ID[id as usize]
                } else {
                    None
                }
            }

            /// The function with this exact exported name.
            pub fn from_name(name: &str) -> Option<Api> {
                match name { $($name => Some(Api::$variant),)* _ => None }
            }
        }
    };
}

apis! {
    CuMemAlloc_v2 = 1, "cuMemAlloc_v2", Alloc, Device;
    CuMemAllocPitch_v2 = 2, "cuMemAllocPitch_v2", Alloc, Device;
    CuMemAllocManaged = 3, "cuMemAllocManaged", Alloc, Managed;
    CuMemFree_v2 = 4, "cuMemFree_v2", Free, Device;

    CuMemAllocAsync = 10, "cuMemAllocAsync", Alloc, Pool;
    CuMemAllocAsync_ptsz = 11, "cuMemAllocAsync_ptsz", Alloc, Pool;
    CuMemAllocFromPoolAsync = 12, "cuMemAllocFromPoolAsync", Alloc, Pool;
    CuMemAllocFromPoolAsync_ptsz = 13, "cuMemAllocFromPoolAsync_ptsz", Alloc, Pool;
    CuMemFreeAsync = 14, "cuMemFreeAsync", Free, Pool;
    CuMemFreeAsync_ptsz = 15, "cuMemFreeAsync_ptsz", Free, Pool;
    CuMemPoolCreate = 16, "cuMemPoolCreate", PoolCreate, Pool;
    CuMemPoolDestroy = 17, "cuMemPoolDestroy", PoolDestroy, Pool;
    CuMemPoolTrimTo = 18, "cuMemPoolTrimTo", Trim, Pool;
    CuMemPoolImportPointer = 19, "cuMemPoolImportPointer", Alloc, Ipc;

    CuMemCreate = 30, "cuMemCreate", Create, Vmm;
    CuMemRelease = 31, "cuMemRelease", Release, Vmm;
    CuMemMap = 32, "cuMemMap", Map, Vmm;
    CuMemUnmap = 33, "cuMemUnmap", Unmap, Vmm;
    CuMemAddressReserve = 34, "cuMemAddressReserve", Reserve, Vmm;
    CuMemAddressFree = 35, "cuMemAddressFree", Unreserve, Vmm;
    CuMemImportFromShareableHandle = 36, "cuMemImportFromShareableHandle", Create, Ipc;
    CuMemRetainAllocationHandle = 37, "cuMemRetainAllocationHandle", Retain, Vmm;
    CuMemMapArrayAsync = 38, "cuMemMapArrayAsync", Map, Array;
    CuMemMapArrayAsync_ptsz = 39, "cuMemMapArrayAsync_ptsz", Map, Array;
    CuMulticastCreate = 40, "cuMulticastCreate", Create, Multicast;

    CuMemAllocHost_v2 = 50, "cuMemAllocHost_v2", Alloc, PinnedHost;
    CuMemHostAlloc = 51, "cuMemHostAlloc", Alloc, PinnedHost;
    CuMemFreeHost = 52, "cuMemFreeHost", Free, PinnedHost;
    CuMemHostRegister_v2 = 53, "cuMemHostRegister_v2", Register, RegisteredHost;
    CuMemHostUnregister = 54, "cuMemHostUnregister", Unregister, RegisteredHost;

    CuArrayCreate_v2 = 60, "cuArrayCreate_v2", Alloc, Array;
    CuArray3DCreate_v2 = 61, "cuArray3DCreate_v2", Alloc, Array;
    CuMipmappedArrayCreate = 62, "cuMipmappedArrayCreate", Alloc, Array;
    CuArrayDestroy = 63, "cuArrayDestroy", Free, Array;
    CuMipmappedArrayDestroy = 64, "cuMipmappedArrayDestroy", Free, Array;

    CuIpcOpenMemHandle_v2 = 70, "cuIpcOpenMemHandle_v2", Alloc, Ipc;
    CuIpcCloseMemHandle = 71, "cuIpcCloseMemHandle", Free, Ipc;
    CuExternalMemoryGetMappedBuffer = 72, "cuExternalMemoryGetMappedBuffer", Alloc, External;
    CuDestroyExternalMemory = 73, "cuDestroyExternalMemory", Free, External;

    CuGraphAddMemAllocNode = 80, "cuGraphAddMemAllocNode", Alloc, Graph;
    CuGraphAddMemFreeNode = 81, "cuGraphAddMemFreeNode", Free, Graph;
    CuDeviceGraphMemTrim = 82, "cuDeviceGraphMemTrim", Trim, Graph;

    // Not driver calls: PyTorch's caching allocator, through its trace tracker (one event per
    // `TraceEntry`, formats/SPEC.md §4.2).
    TorchAlloc = 100, "torch.alloc", Alloc, TorchBlock;
    TorchFreeRequested = 101, "torch.free_requested", FreeRequested, TorchBlock;
    TorchFreeCompleted = 102, "torch.free_completed", Free, TorchBlock;
    TorchSegmentAlloc = 103, "torch.segment_alloc", Alloc, TorchSegment;
    TorchSegmentFree = 104, "torch.segment_free", Free, TorchSegment;
    TorchSegmentMap = 105, "torch.segment_map", Map, TorchSegment;
    TorchSegmentUnmap = 106, "torch.segment_unmap", Unmap, TorchSegment;
    // Not driver calls either: what bounded the process's memory (formats/SPEC.md §4.3).
    TorchSetMemoryFraction = 107, "torch.set_memory_fraction", Limit, Limits;
    TorchEmptyCache = 108, "torch.empty_cache", Trim, Limits;
    DeviceMemory = 109, "device.memory", Limit, Limits;
    DriverProcessMemory = 110, "driver.process_memory", Limit, Limits;

    // Driver calls again, from 120: what orders a stream-ordered pool's reuse (formats/SPEC.md
    // §4.4).
    CuStreamSynchronize = 120, "cuStreamSynchronize", Synchronize, Ordering;
    CuStreamSynchronize_ptsz = 121, "cuStreamSynchronize_ptsz", Synchronize, Ordering;
    CuCtxSynchronize = 122, "cuCtxSynchronize", Synchronize, Ordering;
    CuEventSynchronize = 123, "cuEventSynchronize", Synchronize, Ordering;
    CuStreamQuery = 124, "cuStreamQuery", Synchronize, Ordering;
    CuStreamQuery_ptsz = 125, "cuStreamQuery_ptsz", Synchronize, Ordering;
    CuEventQuery = 126, "cuEventQuery", Synchronize, Ordering;
    CuEventRecord = 127, "cuEventRecord", Record, Ordering;
    CuEventRecord_ptsz = 128, "cuEventRecord_ptsz", Record, Ordering;
    CuEventRecordWithFlags = 129, "cuEventRecordWithFlags", Record, Ordering;
    CuEventRecordWithFlags_ptsz = 130, "cuEventRecordWithFlags_ptsz", Record, Ordering;
    CuStreamWaitEvent = 131, "cuStreamWaitEvent", Wait, Ordering;
    CuStreamWaitEvent_ptsz = 132, "cuStreamWaitEvent_ptsz", Wait, Ordering;
    CuCtxSynchronize_v2 = 133, "cuCtxSynchronize_v2", Synchronize, Ordering;
}

impl Api {
    /// The stored id.
    pub const fn id(self) -> u16 {
        self as u16
    }

    /// True for events a framework's allocator reported rather than a driver call.
    #[inline]
    pub fn from_framework(self) -> bool {
        matches!(
            self.kind(),
            MemoryKind::TorchBlock | MemoryKind::TorchSegment
        )
    }

    /// True for the synchronizations, event records and stream waits (formats/SPEC.md §4.4).
    pub fn orders(self) -> bool {
        self.kind() == MemoryKind::Ordering
    }

    /// True for the `_ptsz` variants, which use the per-thread default stream for stream 0.
    pub fn per_thread_stream(self) -> bool {
        self.name().ends_with("_ptsz")
    }
}

impl std::fmt::Display for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Api {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Api {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Api::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown CUDA API `{name}`")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_round_trip_and_are_unique() {
        let mut ids = std::collections::HashSet::new();
        for &api in Api::ALL {
            assert!(ids.insert(api.id()), "duplicate id {}", api.id());
            assert_eq!(Api::from_id(api.id()), Some(api));
            assert_eq!(Api::from_name(api.name()), Some(api));
        }
        assert_eq!(Api::from_id(0), None);
        assert_eq!(Api::from_name("cuMemAlloc"), None);
    }

    #[test]
    fn every_stored_id_reads_as_the_function_of_that_id_or_none() {
        for id in 0..=u16::MAX {
            let known = Api::ALL.iter().copied().find(|a| a.id() == id);
            assert_eq!(Api::from_id(id), known, "id {id}");
        }
    }

    #[test]
    fn ptsz_variants_are_recognised() {
        assert!(Api::CuMemAllocAsync_ptsz.per_thread_stream());
        assert!(!Api::CuMemAllocAsync.per_thread_stream());
        assert_eq!(Api::CuMemFreeAsync_ptsz.op(), Op::Free);
        assert_eq!(Api::CuMemFreeAsync_ptsz.kind(), MemoryKind::Pool);
    }

    #[test]
    fn torch_events_are_framework_events_with_their_own_ids() {
        assert_eq!(Api::from_id(100), Some(Api::TorchAlloc));
        assert_eq!(
            Api::from_name("torch.segment_unmap"),
            Some(Api::TorchSegmentUnmap)
        );
        assert!(Api::TorchFreeCompleted.from_framework());
        assert!(!Api::CuMemAlloc_v2.from_framework());
        assert_eq!(Api::from_id(108), Some(Api::TorchEmptyCache));
        assert_eq!(Api::TorchEmptyCache.op(), Op::Trim);
        assert_eq!(Api::DeviceMemory.kind(), MemoryKind::Limits);
        assert_eq!(Api::from_id(110), Some(Api::DriverProcessMemory));
        assert_eq!(Api::DriverProcessMemory.op(), Op::Limit);
        assert!(!Api::TorchSetMemoryFraction.from_framework());
        assert_eq!(Api::TorchFreeRequested.op(), Op::FreeRequested);
    }

    #[test]
    fn ordering_calls_are_driver_calls_with_their_own_ops() {
        assert_eq!(
            Api::from_name("cuStreamSynchronize"),
            Some(Api::CuStreamSynchronize)
        );
        assert_eq!(Api::from_id(132), Some(Api::CuStreamWaitEvent_ptsz));
        assert!(Api::CuEventQuery.orders() && !Api::CuEventQuery.from_framework());
        assert!(!Api::CuMemFreeAsync.orders());
        assert_eq!(Api::CuEventRecord_ptsz.op(), Op::Record);
        assert_eq!(Api::CuStreamWaitEvent.op(), Op::Wait);
        assert_eq!(Api::CuCtxSynchronize.op(), Op::Synchronize);
        assert!(Api::CuStreamQuery_ptsz.per_thread_stream());
    }
}
