//! The few CUDA driver types the wrappers read, laid out as in `cuda.h` (CUDA 12/13).
//!
//! Hand-written rather than taken from cudarc: the wrappers need a dozen plain structs, and
//! keeping them here pins their layout to what the driver ABI guarantees (these structs have
//! been append-only since they were introduced).

#![allow(non_camel_case_types, non_snake_case, dead_code)]

use std::ffi::c_void;

pub type CUresult = u32;
pub type CUdeviceptr = u64;
pub type CUstream = *mut c_void;
pub type CUevent = *mut c_void;
pub type CUmemoryPool = *mut c_void;
pub type CUcontext = *mut c_void;
pub type CUdevice = i32;
pub type CUmemGenericAllocationHandle = u64;

pub const CUDA_SUCCESS: CUresult = 0;
/// Returned by a wrapper whose real function cannot be found (no driver loaded).
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;

/// `CU_MEM_LOCATION_TYPE_DEVICE`.
pub const LOCATION_DEVICE: u32 = 1;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmemLocation {
    pub type_: u32,
    pub id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmemAllocationProp {
    pub type_: u32,
    pub requestedHandleTypes: u32,
    pub location: CUmemLocation,
    pub win32HandleMetaData: *mut c_void,
    pub compressionType: u8,
    pub gpuDirectRDMACapable: u8,
    pub usage: u16,
    pub reserved: [u8; 4],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmemPoolProps {
    pub allocType: u32,
    pub handleTypes: u32,
    pub location: CUmemLocation,
    pub win32SecurityAttributes: *mut c_void,
    pub maxSize: usize,
    pub usage: u16,
    pub reserved: [u8; 54],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUDA_ARRAY_DESCRIPTOR {
    pub Width: usize,
    pub Height: usize,
    pub Format: u32,
    pub NumChannels: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUDA_ARRAY3D_DESCRIPTOR {
    pub Width: usize,
    pub Height: usize,
    pub Depth: usize,
    pub Format: u32,
    pub NumChannels: u32,
    pub Flags: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUDA_MEM_ALLOC_NODE_PARAMS {
    pub poolProps: CUmemPoolProps,
    pub accessDescs: *const c_void,
    pub accessDescCount: usize,
    pub bytesize: usize,
    pub dptr: CUdeviceptr,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUDA_EXTERNAL_MEMORY_BUFFER_DESC {
    pub offset: u64,
    pub size: u64,
    pub flags: u32,
    pub reserved: [u32; 16],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmulticastObjectProp {
    pub numDevices: u32,
    pub size: usize,
    pub handleTypes: u64,
    pub flags: u64,
}

/// `CUipcMemHandle`, passed by value (in memory, per the x86-64 SysV ABI).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUipcMemHandle {
    pub reserved: [u8; 64],
}

/// Bytes per element of a `CUarray_format`, for array size estimates (1 for unknown formats).
pub fn array_format_bytes(format: u32) -> u64 {
    match format {
        0x01 | 0x08 => 1,        // UNSIGNED_INT8, SIGNED_INT8
        0x02 | 0x09 | 0x10 => 2, // UNSIGNED_INT16, SIGNED_INT16, HALF
        0x03 | 0x0a | 0x20 => 4, // UNSIGNED_INT32, SIGNED_INT32, FLOAT
        _ => 1,
    }
}

/// Bytes of an array of `w × h × d` elements (zero dimensions count as 1).
pub fn array_bytes(w: usize, h: usize, d: usize, format: u32, channels: u32) -> u64 {
    (w.max(1) as u64)
        .wrapping_mul(h.max(1) as u64)
        .wrapping_mul(d.max(1) as u64)
        .wrapping_mul(u64::from(channels.max(1)))
        .wrapping_mul(array_format_bytes(format))
}
