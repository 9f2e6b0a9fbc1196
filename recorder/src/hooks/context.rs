//! Which device is current, learnt from the context calls themselves: the hook path never asks
//! the driver (`cuCtxGetCurrent` inside a hook would be a CUDA call on the hot path, and before
//! `cuInit` an error).
//!
//! Contexts are mapped to devices when they are created or retained; setting or pushing a
//! context makes its device the calling thread's. A thread that never set one (or popped back to
//! an unknown one) is attributed to the device any thread made current last: exact for
//! single-device programs, and multi-device frameworks set the context on every thread.

use super::Hook;
use crate::cuda::{CUDA_SUCCESS, CUcontext, CUdevice, CUresult};
use crate::resolve;
use std::cell::Cell;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

const SLOTS: usize = 256;

static CONTEXTS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static DEVICES: [AtomicI32; SLOTS] = [const { AtomicI32::new(-1) }; SLOTS];
static LAST_DEVICE: AtomicI32 = AtomicI32::new(-1);

thread_local! {
    static CURRENT: Cell<i32> = const { Cell::new(-1) };
}

/// The device of the calling thread's current context, or of the last one any thread set, or -1.
#[inline]
pub fn current_device() -> i32 {
    match CURRENT.with(Cell::get) {
        -1 => LAST_DEVICE.load(Ordering::Relaxed),
        d => d,
    }
}

fn remember(ctx: CUcontext, device: CUdevice) {
    let key = ctx as u64;
    if key == 0 {
        return;
    }
    let start = (key >> 4) as usize % SLOTS;
    for i in 0..SLOTS {
        let slot = (start + i) % SLOTS;
        match CONTEXTS[slot].compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                DEVICES[slot].store(device, Ordering::Release);
                return;
            }
            Err(k) if k == key => {
                DEVICES[slot].store(device, Ordering::Release);
                return;
            }
            Err(_) => {}
        }
    }
}

fn device_of(ctx: CUcontext) -> i32 {
    let key = ctx as u64;
    if key == 0 {
        return -1;
    }
    let start = (key >> 4) as usize % SLOTS;
    for i in 0..SLOTS {
        let slot = (start + i) % SLOTS;
        match CONTEXTS[slot].load(Ordering::Acquire) {
            0 => return -1,
            k if k == key => return DEVICES[slot].load(Ordering::Acquire),
            _ => {}
        }
    }
    -1
}

fn make_current(ctx: CUcontext) {
    let d = device_of(ctx);
    CURRENT.with(|c| c.set(d));
    if d >= 0 {
        LAST_DEVICE.store(d, Ordering::Relaxed);
    }
}

macro_rules! real_or_fail {
    ($hook:expr, $ty:ty) => {{
        let Some(real) = resolve::real($hook) else {
            return crate::cuda::CUDA_ERROR_NOT_INITIALIZED;
        };
        // SAFETY: the slot holds the exported driver function of this exact name and ABI.
        unsafe { std::mem::transmute::<usize, $ty>(real) }
    }};
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    let real = real_or_fail!(
        Hook::cuCtxSetCurrent,
        unsafe extern "C" fn(CUcontext) -> CUresult
    );
    // SAFETY: forwarded unchanged.
    let r = unsafe { real(ctx) };
    if r == CUDA_SUCCESS {
        make_current(ctx);
    }
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxPushCurrent_v2(ctx: CUcontext) -> CUresult {
    let real = real_or_fail!(
        Hook::cuCtxPushCurrent_v2,
        unsafe extern "C" fn(CUcontext) -> CUresult
    );
    // SAFETY: forwarded unchanged.
    let r = unsafe { real(ctx) };
    if r == CUDA_SUCCESS {
        make_current(ctx);
    }
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) -> CUresult {
    let real = real_or_fail!(
        Hook::cuCtxPopCurrent_v2,
        unsafe extern "C" fn(*mut CUcontext) -> CUresult
    );
    // SAFETY: forwarded unchanged.
    let r = unsafe { real(pctx) };
    if r == CUDA_SUCCESS {
        // The context now current is the one below on the stack, which this thread may never
        // have named: fall back to the process-wide guess.
        CURRENT.with(|c| c.set(-1));
    }
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v2(
    pctx: *mut CUcontext,
    flags: u32,
    dev: CUdevice,
) -> CUresult {
    let real = real_or_fail!(
        Hook::cuCtxCreate_v2,
        unsafe extern "C" fn(*mut CUcontext, u32, CUdevice) -> CUresult
    );
    // SAFETY: forwarded unchanged.
    let r = unsafe { real(pctx, flags, dev) };
    if r == CUDA_SUCCESS && !pctx.is_null() {
        // SAFETY: the driver filled the out-parameter on success.
        let ctx = unsafe { *pctx };
        remember(ctx, dev);
        make_current(ctx);
    }
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    let real = real_or_fail!(
        Hook::cuDevicePrimaryCtxRetain,
        unsafe extern "C" fn(*mut CUcontext, CUdevice) -> CUresult
    );
    // SAFETY: forwarded unchanged.
    let r = unsafe { real(pctx, dev) };
    if r == CUDA_SUCCESS && !pctx.is_null() {
        // SAFETY: the driver filled the out-parameter on success.
        remember(unsafe { *pctx }, dev);
    }
    r
}
