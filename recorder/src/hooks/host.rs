//! Page-locked host memory: driver-allocated and registered. `device` is -1 for all of these.

use super::{hook, ok};
use std::ffi::c_void;

hook!(cuMemAllocHost_v2 => fn(pp: *mut *mut c_void, bytesize: usize) |r, e| {
    e.size = bytesize as u64;
    e.device = -1;
    if ok(r, pp) { e.address = *pp as u64; }
});

hook!(cuMemHostAlloc => fn(pp: *mut *mut c_void, bytesize: usize, flags: u32) |r, e| {
    e.size = bytesize as u64;
    e.flags = u64::from(flags);
    e.device = -1;
    if ok(r, pp) { e.address = *pp as u64; }
});

hook!(cuMemFreeHost => fn(p: *mut c_void) |_r, e| {
    e.address = p as u64;
    e.device = -1;
});

hook!(cuMemHostRegister_v2 => fn(p: *mut c_void, bytesize: usize, flags: u32) |_r, e| {
    e.address = p as u64;
    e.size = bytesize as u64;
    e.flags = u64::from(flags);
    e.device = -1;
});

hook!(cuMemHostUnregister => fn(p: *mut c_void) |_r, e| {
    e.address = p as u64;
    e.device = -1;
});
