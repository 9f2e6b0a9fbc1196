//! Plain device and managed memory: `cuMemAlloc_v2`, `cuMemAllocPitch_v2`,
//! `cuMemAllocManaged`, `cuMemFree_v2`.

use super::{hook, ok};
use crate::cuda::CUdeviceptr;

// PyTorch's native allocator takes its segments with this call: the first one attaches the
// recorder's tracker to it (`torch`).
hook!(cuMemAlloc_v2 => fn(dptr: *mut CUdeviceptr, bytesize: usize) |r, e| {
    e.size = bytesize as u64;
    if ok(r, dptr) { e.address = *dptr; }
    crate::torch::attach_if_ready();
});

// `size` is pitch × height, what the allocation really takes; `aux` the pitch.
hook!(cuMemAllocPitch_v2 => fn(
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    element_size: u32,
) |r, e| {
    e.flags = u64::from(element_size);
    e.size = (width as u64).wrapping_mul(height as u64);
    if ok(r, dptr) && !pitch.is_null() {
        e.address = *dptr;
        e.aux = *pitch as u64;
        e.size = (*pitch as u64).wrapping_mul(height as u64);
    }
});

hook!(cuMemAllocManaged => fn(dptr: *mut CUdeviceptr, bytesize: usize, flags: u32) |r, e| {
    e.size = bytesize as u64;
    e.flags = u64::from(flags);
    if ok(r, dptr) { e.address = *dptr; }
});

hook!(cuMemFree_v2 => fn(dptr: CUdeviceptr) |_r, e| {
    e.address = dptr;
});
