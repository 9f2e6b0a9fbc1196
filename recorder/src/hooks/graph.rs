//! CUDA graph memory nodes. The memory of an allocation node exists only while the graph runs;
//! `handle` is the node, `aux` the graph.

use super::{hook, ok};
use crate::cuda::{CUDA_MEM_ALLOC_NODE_PARAMS, CUdevice, CUdeviceptr, LOCATION_DEVICE};
use std::ffi::c_void;

hook!(cuGraphAddMemAllocNode => fn(
    node: *mut *mut c_void,
    graph: *mut c_void,
    deps: *const *mut c_void,
    num_deps: usize,
    params: *mut CUDA_MEM_ALLOC_NODE_PARAMS,
) |r, e| {
    let _ = (deps, num_deps);
    e.aux = graph as u64;
    if !params.is_null() {
        let p = *params;
        e.size = p.bytesize as u64;
        if p.poolProps.location.type_ == LOCATION_DEVICE { e.device = p.poolProps.location.id; }
        if r == 0 { e.address = p.dptr; }
    }
    if ok(r, node) { e.handle = *node as u64; }
});

hook!(cuGraphAddMemFreeNode => fn(
    node: *mut *mut c_void,
    graph: *mut c_void,
    deps: *const *mut c_void,
    num_deps: usize,
    dptr: CUdeviceptr,
) |r, e| {
    let _ = (deps, num_deps);
    e.aux = graph as u64;
    e.address = dptr;
    if ok(r, node) { e.handle = *node as u64; }
});

hook!(cuDeviceGraphMemTrim => fn(device: CUdevice) |_r, e| {
    e.device = device;
});
