//! What orders a stream-ordered pool's reuse: the host waiting for streams, events or the whole
//! device (and asking whether they are done), event records and stream waits, `_ptsz` variants
//! included (formats/SPEC.md §4.4). One small event each, without a stack: `stream` is the
//! stream, `handle` the event, `flags` the call's flags, `result` what the driver answered
//! (`CUDA_ERROR_NOT_READY` for a query of unfinished work).
//!
//! These calls come in polling loops, so their wrapper is leaner than `hook!`'s: one clock read
//! when the call returned (`time_ns`; `duration_ns` 0) and the device of the thread's recent
//! context without asking the driver ([`crate::context::recent_device`]).

use crate::cuda::{CUcontext, CUevent, CUstream};

macro_rules! hook {
    ($( $name:ident ),+ => fn $args:tt |$r:ident, $e:ident| $body:block) => {
        $( ordering_hook!($name $args |$r, $e| $body); )+
    };
}

macro_rules! ordering_hook {
    ($name:ident ($($arg:ident : $ty:ty),* $(,)?) |$r:ident, $e:ident| $body:block) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $crate::cuda::CUresult {
            type Real = unsafe extern "C" fn($($ty),*) -> $crate::cuda::CUresult;
            let hook = $crate::table::Hook::$name;
            let Some(real) = $crate::real::real(hook, $name as *const () as usize) else {
                return $crate::cuda::CUDA_ERROR_NOT_INITIALIZED;
            };
            // SAFETY: the slot holds the address of the exported driver function of exactly
            // this name, whose ABI this wrapper's signature copies from cuda.h.
            let real = unsafe { std::mem::transmute::<usize, Real>(real) };
            // SAFETY: the arguments are the caller's, passed through unchanged.
            let $r = unsafe { real($($arg),*) };
            if $crate::ring::wanted() {
                let t = $crate::clock::now();
                $crate::session::start_if_needed();
                let api = $crate::table::APIS[hook as usize];
                let mut $e = $crate::ring::record_of(api, t, t, $r);
                $e.device = $crate::context::recent_device();
                $body
                $crate::ring::push(&mut $e);
            }
            $r
        }
    };
}

hook!(cuStreamSynchronize, cuStreamSynchronize_ptsz, cuStreamQuery, cuStreamQuery_ptsz
    => fn(stream: CUstream) |_r, e| {
    e.stream = stream as u64;
});

hook!(cuCtxSynchronize => fn() |_r, _e| {});

// CUDA 13's form with the context to synchronize (NULL: the current one).
hook!(cuCtxSynchronize_v2 => fn(ctx: CUcontext) |_r, e| {
    e.handle = ctx as u64;
});

hook!(cuEventSynchronize, cuEventQuery => fn(event: CUevent) |_r, e| {
    e.handle = event as u64;
});

hook!(cuEventRecord, cuEventRecord_ptsz => fn(event: CUevent, stream: CUstream) |_r, e| {
    e.handle = event as u64;
    e.stream = stream as u64;
});

hook!(cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz => fn(
    event: CUevent,
    stream: CUstream,
    flags: u32,
) |_r, e| {
    e.handle = event as u64;
    e.stream = stream as u64;
    e.flags = u64::from(flags);
});

hook!(cuStreamWaitEvent, cuStreamWaitEvent_ptsz => fn(
    stream: CUstream,
    event: CUevent,
    flags: u32,
) |_r, e| {
    e.stream = stream as u64;
    e.handle = event as u64;
    e.flags = u64::from(flags);
});
