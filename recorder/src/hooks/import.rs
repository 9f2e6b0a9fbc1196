//! Memory of other processes (IPC) and other APIs (external memory): mapped here, owned
//! elsewhere.

use super::{hook, ok};
use crate::cuda::{CUDA_EXTERNAL_MEMORY_BUFFER_DESC, CUdeviceptr, CUipcMemHandle};
use std::ffi::c_void;

hook!(cuIpcOpenMemHandle_v2 => fn(dptr: *mut CUdeviceptr, handle: CUipcMemHandle, flags: u32) |r, e| {
    let _ = handle;
    e.flags = u64::from(flags);
    if ok(r, dptr) { e.address = *dptr; }
});

hook!(cuIpcCloseMemHandle => fn(dptr: CUdeviceptr) |_r, e| {
    e.address = dptr;
});

// `handle` the external memory object, `aux` the offset into it.
hook!(cuExternalMemoryGetMappedBuffer => fn(
    dptr: *mut CUdeviceptr,
    ext_mem: *mut c_void,
    desc: *const CUDA_EXTERNAL_MEMORY_BUFFER_DESC,
) |r, e| {
    e.handle = ext_mem as u64;
    if !desc.is_null() {
        let d = *desc;
        e.size = d.size;
        e.aux = d.offset;
    }
    if ok(r, dptr) { e.address = *dptr; }
});

hook!(cuDestroyExternalMemory => fn(ext_mem: *mut c_void) |_r, e| {
    e.handle = ext_mem as u64;
});
