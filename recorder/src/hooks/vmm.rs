//! Virtual memory management: physical handles, address reservations, mappings, multicast.

use super::{hook, ok};
use crate::cuda::{
    CUdeviceptr, CUmemAllocationProp, CUmemGenericAllocationHandle, CUmulticastObjectProp,
    CUstream, LOCATION_DEVICE,
};
use std::ffi::c_void;

// `handle` the new physical allocation; `flags` encodes the properties: allocation type in
// bits 0-7, location type in bits 8-15, requested handle types from bit 16; `aux` the call's own
// flags argument. `device` is the location when it is a device, else -1.
hook!(cuMemCreate => fn(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: u64,
) |r, e| {
    e.size = size as u64;
    e.aux = flags;
    if !prop.is_null() {
        let p = *prop;
        e.flags = u64::from(p.type_ & 0xff)
            | (u64::from(p.location.type_ & 0xff) << 8)
            | (u64::from(p.requestedHandleTypes & 0xffff) << 16);
        e.device = if p.location.type_ == LOCATION_DEVICE { p.location.id } else { -1 };
    }
    if ok(r, handle) { e.handle = *handle; }
});

hook!(cuMemRelease => fn(handle: CUmemGenericAllocationHandle) |_r, e| {
    e.handle = handle;
});

hook!(cuMemMap => fn(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: u64,
) |_r, e| {
    e.address = ptr;
    e.size = size as u64;
    e.aux = offset as u64;
    e.handle = handle;
    e.flags = flags;
    crate::torch::attach_if_ready();
});

hook!(cuMemUnmap => fn(ptr: CUdeviceptr, size: usize) |_r, e| {
    e.address = ptr;
    e.size = size as u64;
});

// `aux` the alignment; `handle` the requested fixed address (0 when none).
hook!(cuMemAddressReserve => fn(
    ptr: *mut CUdeviceptr,
    size: usize,
    alignment: usize,
    addr: CUdeviceptr,
    flags: u64,
) |r, e| {
    e.size = size as u64;
    e.aux = alignment as u64;
    e.handle = addr;
    e.flags = flags;
    if ok(r, ptr) { e.address = *ptr; }
    // PyTorch's expandable segments start here (`torch`).
    crate::torch::attach_if_ready();
});

hook!(cuMemAddressFree => fn(ptr: CUdeviceptr, size: usize) |_r, e| {
    e.address = ptr;
    e.size = size as u64;
});

// `aux` the OS handle (a file descriptor or a pointer), `flags` its CUmemAllocationHandleType.
hook!(cuMemImportFromShareableHandle => fn(
    handle: *mut CUmemGenericAllocationHandle,
    os_handle: *mut c_void,
    handle_type: u32,
) |r, e| {
    e.aux = os_handle as u64;
    e.flags = u64::from(handle_type);
    if ok(r, handle) { e.handle = *handle; }
});

hook!(cuMemRetainAllocationHandle => fn(
    handle: *mut CUmemGenericAllocationHandle,
    addr: *mut c_void,
) |r, e| {
    e.address = addr as u64;
    if ok(r, handle) { e.handle = *handle; }
});

// `aux` the number of CUarrayMapInfo entries.
hook!(cuMemMapArrayAsync, cuMemMapArrayAsync_ptsz => fn(
    map_info_list: *mut c_void,
    count: u32,
    stream: CUstream,
) |_r, e| {
    let _ = map_info_list;
    e.aux = u64::from(count);
    e.stream = stream as u64;
});

// `aux` the number of devices, `flags` the handle types.
hook!(cuMulticastCreate => fn(
    mc_handle: *mut CUmemGenericAllocationHandle,
    prop: *const CUmulticastObjectProp,
) |r, e| {
    if !prop.is_null() {
        let p = *prop;
        e.size = p.size as u64;
        e.flags = p.handleTypes;
        e.aux = u64::from(p.numDevices);
    }
    if ok(r, mc_handle) { e.handle = *mc_handle; }
});
