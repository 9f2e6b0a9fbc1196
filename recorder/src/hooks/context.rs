//! The context calls, wrapped: they tell [`crate::context`] which context each thread made
//! current and which device a new context belongs to; around the making of a context, the
//! driver's count of the process's memory ([`driver_count`]).

use crate::context::{forget_current, make_current, remember};
use crate::cuda::{CUDA_SUCCESS, CUcontext, CUdevice, CUresult};
use crate::driver_count;
use crate::real::real;
use crate::session;
use crate::table::Hook;

macro_rules! real_or_fail {
    ($hook:ident, $ty:ty) => {{
        let Some(real) = real(Hook::$hook, $hook as *const () as usize) else {
            return crate::cuda::CUDA_ERROR_NOT_INITIALIZED;
        };
        // SAFETY: the slot holds the exported driver function of this exact name and ABI.
        unsafe { std::mem::transmute::<usize, $ty>(real) }
    }};
}

/// The driver's count of the process's memory before a context is made on `dev`
/// ([`driver_count`]; `primary`: a primary context's retain).
fn counted_before(dev: CUdevice, primary: bool) -> Option<u64> {
    session::start_if_needed();
    driver_count::before_context(dev, primary)
}

/// The counts before and after context `ctx` was made, into the trace.
fn counted_after(dev: CUdevice, ctx: CUcontext, before: Option<u64>) {
    if let Some(before) = before {
        driver_count::after_context(dev, ctx as u64, before);
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    let real = real_or_fail!(cuCtxSetCurrent, unsafe extern "C" fn(CUcontext) -> CUresult);
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
        cuCtxPushCurrent_v2,
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
        cuCtxPopCurrent_v2,
        unsafe extern "C" fn(*mut CUcontext) -> CUresult
    );
    // SAFETY: forwarded unchanged.
    let r = unsafe { real(pctx) };
    if r == CUDA_SUCCESS {
        // The context now current is the one below on the stack, which this thread may never
        // have named: fall back to the process-wide guess.
        forget_current();
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
        cuCtxCreate_v2,
        unsafe extern "C" fn(*mut CUcontext, u32, CUdevice) -> CUresult
    );
    let before = counted_before(dev, false);
    // SAFETY: forwarded unchanged.
    let r = unsafe { real(pctx, flags, dev) };
    if r == CUDA_SUCCESS && !pctx.is_null() {
        // SAFETY: the driver filled the out-parameter on success.
        let ctx = unsafe { *pctx };
        remember(ctx, dev);
        make_current(ctx);
        counted_after(dev, ctx, before);
    }
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    let real = real_or_fail!(
        cuDevicePrimaryCtxRetain,
        unsafe extern "C" fn(*mut CUcontext, CUdevice) -> CUresult
    );
    let before = counted_before(dev, true);
    // SAFETY: forwarded unchanged.
    let r = unsafe { real(pctx, dev) };
    if r == CUDA_SUCCESS && !pctx.is_null() {
        // SAFETY: the driver filled the out-parameter on success.
        let ctx = unsafe { *pctx };
        remember(ctx, dev);
        counted_after(dev, ctx, before);
    }
    r
}
