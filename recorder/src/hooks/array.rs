//! CUDA arrays. `handle` is the array; `size` is width × height × depth × channels × element
//! bytes of level 0, a lower bound of what the driver takes (it pads and tiles); `flags` holds
//! the format in bits 0-15 and the channel count from bit 16.

use super::{hook, ok};
use crate::cuda::{CUDA_ARRAY_DESCRIPTOR, CUDA_ARRAY3D_DESCRIPTOR, array_bytes};
use std::ffi::c_void;

hook!(cuArrayCreate_v2 => fn(handle: *mut *mut c_void, desc: *const CUDA_ARRAY_DESCRIPTOR) |r, e| {
    if !desc.is_null() {
        let d = *desc;
        e.size = array_bytes(d.Width, d.Height, 1, d.Format, d.NumChannels);
        e.flags = u64::from(d.Format) | (u64::from(d.NumChannels) << 16);
    }
    if ok(r, handle) { e.handle = *handle as u64; }
});

hook!(cuArray3DCreate_v2 => fn(
    handle: *mut *mut c_void,
    desc: *const CUDA_ARRAY3D_DESCRIPTOR,
) |r, e| {
    if !desc.is_null() {
        let d = *desc;
        e.size = array_bytes(d.Width, d.Height, d.Depth, d.Format, d.NumChannels);
        e.flags = u64::from(d.Format) | (u64::from(d.NumChannels) << 16);
    }
    if ok(r, handle) { e.handle = *handle as u64; }
});

// `size` is the base level only; `aux` the level count.
hook!(cuMipmappedArrayCreate => fn(
    handle: *mut *mut c_void,
    desc: *const CUDA_ARRAY3D_DESCRIPTOR,
    levels: u32,
) |r, e| {
    if !desc.is_null() {
        let d = *desc;
        e.size = array_bytes(d.Width, d.Height, d.Depth, d.Format, d.NumChannels);
        e.flags = u64::from(d.Format) | (u64::from(d.NumChannels) << 16);
    }
    e.aux = u64::from(levels);
    if ok(r, handle) { e.handle = *handle as u64; }
});

hook!(cuArrayDestroy => fn(handle: *mut c_void) |_r, e| {
    e.handle = handle as u64;
});

hook!(cuMipmappedArrayDestroy => fn(handle: *mut c_void) |_r, e| {
    e.handle = handle as u64;
});
