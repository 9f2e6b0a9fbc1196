//! Stream-ordered allocation and memory pools, `_ptsz` variants included.

use super::{hook, ok};
use crate::cuda::{CUdeviceptr, CUmemPoolProps, CUmemoryPool, CUstream, LOCATION_DEVICE};
use std::ffi::c_void;

hook!(cuMemAllocAsync, cuMemAllocAsync_ptsz => fn(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    stream: CUstream,
) |r, e| {
    e.size = bytesize as u64;
    e.stream = stream as u64;
    if ok(r, dptr) { e.address = *dptr; }
});

hook!(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz => fn(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    pool: CUmemoryPool,
    stream: CUstream,
) |r, e| {
    e.size = bytesize as u64;
    e.pool = pool as u64;
    e.stream = stream as u64;
    if ok(r, dptr) { e.address = *dptr; }
});

hook!(cuMemFreeAsync, cuMemFreeAsync_ptsz => fn(dptr: CUdeviceptr, stream: CUstream) |_r, e| {
    e.address = dptr;
    e.stream = stream as u64;
});

// `pool` is the new pool, `size` its maxSize, `flags` its allocation type; `device` its location.
hook!(cuMemPoolCreate => fn(pool: *mut CUmemoryPool, props: *const CUmemPoolProps) |r, e| {
    if !props.is_null() {
        let p = *props;
        e.flags = u64::from(p.allocType);
        e.size = p.maxSize as u64;
        if p.location.type_ == LOCATION_DEVICE { e.device = p.location.id; }
    }
    if ok(r, pool) { e.pool = *pool as u64; }
});

hook!(cuMemPoolDestroy => fn(pool: CUmemoryPool) |_r, e| {
    e.pool = pool as u64;
});

hook!(cuMemPoolTrimTo => fn(pool: CUmemoryPool, min_bytes_to_keep: usize) |_r, e| {
    e.pool = pool as u64;
    e.aux = min_bytes_to_keep as u64;
});

hook!(cuMemPoolImportPointer => fn(
    ptr_out: *mut CUdeviceptr,
    pool: CUmemoryPool,
    share_data: *mut c_void,
) |r, e| {
    let _ = share_data;
    e.pool = pool as u64;
    if ok(r, ptr_out) { e.address = *ptr_out; }
});
