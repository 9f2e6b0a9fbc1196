//! The hook set: one exported wrapper per tracked driver function (docs/interposition.md §7), plus
//! the resolvers and the context calls that tell which device is current.
//!
//! Each wrapper has exactly the ABI of the exported driver symbol whose name it bears, and is
//! the pointer handed out wherever the program asks for that symbol (see `resolve`).

use std::ffi::CStr;
use vramtrace_format::Api;

pub mod array;
pub mod context;
pub mod device;
pub mod graph;
pub mod host;
pub mod import;
pub mod pool;
pub mod sync;
pub mod vmm;

/// One wrapped function.
pub struct Entry {
    /// The exact exported name.
    pub name: &'static CStr,
    /// The wrapper's address.
    pub wrapper: Wrapper,
    /// The event it records, if it records one.
    pub api: Option<Api>,
}

/// A function address that may sit in a `static`.
#[derive(Clone, Copy)]
pub struct Wrapper(pub *const ());

// SAFETY: a function address is immutable and valid from any thread.
unsafe impl Sync for Wrapper {}

impl Wrapper {
    pub fn addr(self) -> usize {
        self.0 as usize
    }
}

const fn cstr(with_nul: &'static str) -> &'static CStr {
    match CStr::from_bytes_with_nul(with_nul.as_bytes()) {
        Ok(c) => c,
        Err(_) => panic!("hook names are NUL-terminated identifiers"),
    }
}

macro_rules! table {
    ($( $module:ident :: $name:ident => $api:expr ),* $(,)?) => {
        /// Every wrapped function, by its exact exported name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[allow(non_camel_case_types)]
        pub enum Hook { $($name),* }

        /// The wrappers, indexed by [`Hook`].
        pub static HOOKS: [Entry; [$(Hook::$name),*].len()] = [$(
            Entry {
                name: cstr(concat!(stringify!($name), "\0")),
                wrapper: Wrapper($module::$name as *const ()),
                api: $api,
            }
        ),*];
    };
}

use crate::resolve;

table! {
    resolve::cuGetProcAddress => None,
    resolve::cuGetProcAddress_v2 => None,
    resolve::cudaGetDriverEntryPoint => None,
    resolve::cudaGetDriverEntryPoint_ptsz => None,
    resolve::cudaGetDriverEntryPointByVersion => None,
    resolve::cudaGetDriverEntryPointByVersion_ptsz => None,

    context::cuCtxSetCurrent => None,
    context::cuCtxPushCurrent_v2 => None,
    context::cuCtxPopCurrent_v2 => None,
    context::cuCtxCreate_v2 => None,
    context::cuDevicePrimaryCtxRetain => None,

    device::cuMemAlloc_v2 => Some(Api::CuMemAlloc_v2),
    device::cuMemAllocPitch_v2 => Some(Api::CuMemAllocPitch_v2),
    device::cuMemAllocManaged => Some(Api::CuMemAllocManaged),
    device::cuMemFree_v2 => Some(Api::CuMemFree_v2),

    pool::cuMemAllocAsync => Some(Api::CuMemAllocAsync),
    pool::cuMemAllocAsync_ptsz => Some(Api::CuMemAllocAsync_ptsz),
    pool::cuMemAllocFromPoolAsync => Some(Api::CuMemAllocFromPoolAsync),
    pool::cuMemAllocFromPoolAsync_ptsz => Some(Api::CuMemAllocFromPoolAsync_ptsz),
    pool::cuMemFreeAsync => Some(Api::CuMemFreeAsync),
    pool::cuMemFreeAsync_ptsz => Some(Api::CuMemFreeAsync_ptsz),
    pool::cuMemPoolCreate => Some(Api::CuMemPoolCreate),
    pool::cuMemPoolDestroy => Some(Api::CuMemPoolDestroy),
    pool::cuMemPoolTrimTo => Some(Api::CuMemPoolTrimTo),
    pool::cuMemPoolImportPointer => Some(Api::CuMemPoolImportPointer),

    vmm::cuMemCreate => Some(Api::CuMemCreate),
    vmm::cuMemRelease => Some(Api::CuMemRelease),
    vmm::cuMemMap => Some(Api::CuMemMap),
    vmm::cuMemUnmap => Some(Api::CuMemUnmap),
    vmm::cuMemAddressReserve => Some(Api::CuMemAddressReserve),
    vmm::cuMemAddressFree => Some(Api::CuMemAddressFree),
    vmm::cuMemImportFromShareableHandle => Some(Api::CuMemImportFromShareableHandle),
    vmm::cuMemRetainAllocationHandle => Some(Api::CuMemRetainAllocationHandle),
    vmm::cuMemMapArrayAsync => Some(Api::CuMemMapArrayAsync),
    vmm::cuMemMapArrayAsync_ptsz => Some(Api::CuMemMapArrayAsync_ptsz),
    vmm::cuMulticastCreate => Some(Api::CuMulticastCreate),

    host::cuMemAllocHost_v2 => Some(Api::CuMemAllocHost_v2),
    host::cuMemHostAlloc => Some(Api::CuMemHostAlloc),
    host::cuMemFreeHost => Some(Api::CuMemFreeHost),
    host::cuMemHostRegister_v2 => Some(Api::CuMemHostRegister_v2),
    host::cuMemHostUnregister => Some(Api::CuMemHostUnregister),

    array::cuArrayCreate_v2 => Some(Api::CuArrayCreate_v2),
    array::cuArray3DCreate_v2 => Some(Api::CuArray3DCreate_v2),
    array::cuMipmappedArrayCreate => Some(Api::CuMipmappedArrayCreate),
    array::cuArrayDestroy => Some(Api::CuArrayDestroy),
    array::cuMipmappedArrayDestroy => Some(Api::CuMipmappedArrayDestroy),

    import::cuIpcOpenMemHandle_v2 => Some(Api::CuIpcOpenMemHandle_v2),
    import::cuIpcCloseMemHandle => Some(Api::CuIpcCloseMemHandle),
    import::cuExternalMemoryGetMappedBuffer => Some(Api::CuExternalMemoryGetMappedBuffer),
    import::cuDestroyExternalMemory => Some(Api::CuDestroyExternalMemory),

    graph::cuGraphAddMemAllocNode => Some(Api::CuGraphAddMemAllocNode),
    graph::cuGraphAddMemFreeNode => Some(Api::CuGraphAddMemFreeNode),
    graph::cuDeviceGraphMemTrim => Some(Api::CuDeviceGraphMemTrim),

    sync::cuStreamSynchronize => Some(Api::CuStreamSynchronize),
    sync::cuStreamSynchronize_ptsz => Some(Api::CuStreamSynchronize_ptsz),
    sync::cuCtxSynchronize => Some(Api::CuCtxSynchronize),
    sync::cuCtxSynchronize_v2 => Some(Api::CuCtxSynchronize_v2),
    sync::cuEventSynchronize => Some(Api::CuEventSynchronize),
    sync::cuStreamQuery => Some(Api::CuStreamQuery),
    sync::cuStreamQuery_ptsz => Some(Api::CuStreamQuery_ptsz),
    sync::cuEventQuery => Some(Api::CuEventQuery),
    sync::cuEventRecord => Some(Api::CuEventRecord),
    sync::cuEventRecord_ptsz => Some(Api::CuEventRecord_ptsz),
    sync::cuEventRecordWithFlags => Some(Api::CuEventRecordWithFlags),
    sync::cuEventRecordWithFlags_ptsz => Some(Api::CuEventRecordWithFlags_ptsz),
    sync::cuStreamWaitEvent => Some(Api::CuStreamWaitEvent),
    sync::cuStreamWaitEvent_ptsz => Some(Api::CuStreamWaitEvent_ptsz),
}

/// The hook whose exported name is exactly `name` (bytes without the NUL).
pub fn find(name: &[u8]) -> Option<usize> {
    HOOKS.iter().position(|e| e.name.to_bytes() == name)
}

/// The hook whose wrapper is at `addr`.
pub fn by_wrapper(addr: usize) -> Option<usize> {
    HOOKS.iter().position(|e| e.wrapper.addr() == addr)
}

/// Defines exported wrappers that call the real function, then record one event.
///
/// `|r, e| body` runs after the real call with `r` its result and `e` the journal record to
/// fill (api, times, pid, tid, device and result are already set). The body runs only when the
/// recorder is active and must not allocate, lock or panic.
macro_rules! hook {
    ($( $name:ident ),+ => fn $args:tt |$r:ident, $e:ident| $body:block) => {
        $( $crate::hooks::hook_one!($name $args |$r, $e| $body); )+
    };
}

macro_rules! hook_one {
    ($name:ident ($($arg:ident : $ty:ty),* $(,)?) |$r:ident, $e:ident| $body:block) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $crate::cuda::CUresult {
            type Real = unsafe extern "C" fn($($ty),*) -> $crate::cuda::CUresult;
            let hook = $crate::hooks::Hook::$name;
            let Some(real) = $crate::resolve::real(hook) else {
                return $crate::cuda::CUDA_ERROR_NOT_INITIALIZED;
            };
            // SAFETY: the slot holds the address of the exported driver function of exactly
            // this name, whose ABI this wrapper's signature copies from cuda.h.
            let real = unsafe { std::mem::transmute::<usize, Real>(real) };
            let wanted = $crate::ring::wanted();
            let t0 = if wanted { $crate::clock::now() } else { 0 };
            // SAFETY: the arguments are the caller's, passed through unchanged.
            let $r = unsafe { real($($arg),*) };
            if wanted {
                let t1 = $crate::clock::now();
                let mut $e = $crate::ring::record(hook, t0, t1, $r);
                #[allow(unused_unsafe)]
                // SAFETY: the body reads out-parameters the driver filled (only on success)
                // and input structs the caller passed to the driver.
                unsafe { $body }
                $crate::ring::push(&mut $e);
            }
            $r
        }
    };
}
pub(crate) use hook;
pub(crate) use hook_one;

/// True when `ptr` may be read: non-null and the call succeeded.
#[inline]
pub fn ok<T>(r: u32, ptr: *const T) -> bool {
    r == 0 && !ptr.is_null()
}
