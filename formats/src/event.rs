//! One recorded driver call.

use crate::api::Api;
use serde::{Deserialize, Serialize};

/// `device` of an event that concerns no device (host memory) or whose device is unknown.
pub const NO_DEVICE: i32 = -1;

/// `stack` of an event recorded without a stack.
pub const NO_STACK: u32 = 0;

/// `CUDA_SUCCESS`.
pub const CUDA_SUCCESS: u32 = 0;

/// One hooked call, after it returned.
///
/// Field meanings per function are listed in `formats/SPEC.md` ("Event fields per function");
/// in short: `address` is the pointer the call produced or consumed, `size` its byte count,
/// `handle` a second object (a VMM allocation handle, an array, an external memory object), and
/// `aux` one extra number (pitch, alignment, map offset, trim target).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Per-file sequence number, increasing in call-return order across all threads.
    pub seq: u64,
    /// `CLOCK_MONOTONIC` nanoseconds when the call was entered.
    pub time_ns: u64,
    /// How long the real call took, in nanoseconds.
    pub duration_ns: u64,
    /// Operating-system process id.
    pub pid: u32,
    /// Operating-system thread id.
    pub tid: u32,
    /// Device ordinal, or [`NO_DEVICE`].
    pub device: i32,
    /// The exact function called.
    pub api: Api,
    /// The `CUresult` it returned; 0 is success.
    pub result: u32,
    /// The pointer produced or consumed (0 when none).
    pub address: u64,
    /// Bytes concerned (0 when the call carries no size).
    pub size: u64,
    /// A second object: VMM handle, array, external memory, graph node.
    pub handle: u64,
    /// One extra number whose meaning depends on `api`.
    pub aux: u64,
    /// `CUstream` handle; 0 is the legacy default stream.
    pub stream: u64,
    /// `CUmemoryPool` handle; 0 when none or the device's default pool.
    pub pool: u64,
    /// The call's flags argument, or an encoding of its allocation properties.
    pub flags: u64,
    /// Stack id in the stack table, or [`NO_STACK`].
    pub stack: u32,
}

impl Event {
    /// An event with every field zero or "none", for building events field by field.
    pub fn new(api: Api) -> Event {
        Event {
            seq: 0,
            time_ns: 0,
            duration_ns: 0,
            pid: 0,
            tid: 0,
            device: NO_DEVICE,
            api,
            result: CUDA_SUCCESS,
            address: 0,
            size: 0,
            handle: 0,
            aux: 0,
            stream: 0,
            pool: 0,
            flags: 0,
            stack: NO_STACK,
        }
    }

    /// True when the driver returned `CUDA_SUCCESS`. Failed calls never create or end memory.
    pub fn succeeded(&self) -> bool {
        self.result == CUDA_SUCCESS
    }
}
