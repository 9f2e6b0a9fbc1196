//! The hook table as data: every wrapped driver function by its exact exported name, its index
//! ([`Hook`]) and the event it records. Nothing here names a wrapper: the wrappers' addresses
//! are `hooks::resolvers::WRAPPERS`, built from the same list ([`for_each_hook`]), so the
//! modules that only need a hook's name or event (the journal, the `dlsym` trampoline, the
//! real-function slots) sit below the hooks.

use std::ffi::CStr;
use vramtrace_format::Api;

/// Calls `$m!` with the list of hooks, `module::name => event`, the module being the child of
/// `hooks` that defines the wrapper. The one list of the hook set: the table below and the
/// wrappers' addresses are both built from it.
macro_rules! for_each_hook {
    ($m:ident) => {
        $m! {
            resolvers::cuGetProcAddress => None,
            resolvers::cuGetProcAddress_v2 => None,
            resolvers::cudaGetDriverEntryPoint => None,
            resolvers::cudaGetDriverEntryPoint_ptsz => None,
            resolvers::cudaGetDriverEntryPointByVersion => None,
            resolvers::cudaGetDriverEntryPointByVersion_ptsz => None,

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
    };
}
pub(crate) use for_each_hook;

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

        /// How many functions are wrapped.
        pub const COUNT: usize = [$(Hook::$name),*].len();

        /// The exact exported names, indexed by [`Hook`].
        pub static NAMES: [&CStr; COUNT] = [$(cstr(concat!(stringify!($name), "\0"))),*];

        /// The event each records, if it records one, indexed by [`Hook`].
        pub static APIS: [Option<Api>; COUNT] = [$($api),*];
    };
}

for_each_hook!(table);

/// The hook whose exported name is exactly `name` (bytes without the NUL).
pub fn find(name: &[u8]) -> Option<usize> {
    NAMES.iter().position(|n| n.to_bytes() == name)
}
