//! Replay on a real GPU: the ground truth for the `cuda-async` and `cuda-malloc` models and for
//! the driver's cost table.
//!
//! A request stream is replayed twice on device 0, through the CUDA driver API loaded at run
//! time by `cudarc` (`chelsea0x3b/cudarc`, `src/driver/result.rs`: `malloc_async`,
//! `free_async`, `malloc_sync`, `free_sync`, `mem_pool::get_attribute`; feature
//! `dynamic-loading`, so the crate builds on machines without CUDA):
//!
//! 1. **Stream-ordered pool**: every allocation is `cuMemAllocAsync` on the stream the trace
//!    used (one created stream per traced stream handle; handle 0 is the legacy default stream,
//!    which is PyTorch's default), every free `cuMemFreeAsync` on the stream of its allocation,
//!    as PyTorch's `CUDAMallocAsyncAllocator.cpp` (`mallocAsync`, `free_impl`) does. The default
//!    pool is configured as PyTorch configures it (`lazy_init_device`): release threshold
//!    `UINT64_MAX`; the reuse flags stay at their default (all on). The pool is trimmed and its
//!    high-water marks reset first, so `CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH` afterwards is this
//!    replay's peak.
//! 2. **Plain `cuMemAlloc_v2` / `cuMemFree_v2`**, with `cuMemGetInfo` after every allocation:
//!    the device memory the driver really took at the peak (granularity included).
//!
//! Each allocating and freeing call is timed alone (host wall clock around the one call), so
//! the per-call latency excludes the bookkeeping. No kernel runs: a stream's frees are complete
//! as soon as the driver looks, which is the most reuse the pool can find; a real program's
//! pending kernels can only delay reuse across streams.
//!
//! Sans-IO apart from the GPU itself: takes a request stream, returns figures.

use crate::model::{RequestKind, RequestStream};
use cudarc::driver::{result, sys};
use serde::Serialize;
use std::time::Instant;

/// Why a device replay could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    #[error("no CUDA driver (libcuda.so) could be loaded on this machine")]
    NoDriver,
    #[error("CUDA driver: {call} failed with {code:?}")]
    Driver {
        call: &'static str,
        code: sys::CUresult,
    },
    #[error(
        "request {index}: {call} of {size} bytes failed with {code:?} (the trace needs more memory than this GPU has free)"
    )]
    OutOfMemory {
        index: usize,
        call: &'static str,
        size: u64,
        code: sys::CUresult,
    },
}

fn check(call: &'static str, r: sys::CUresult) -> Result<(), DeviceError> {
    match r {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        code => Err(DeviceError::Driver { call, code }),
    }
}

/// Latency of one kind of call, in microseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    pub calls: usize,
    pub median_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
    /// Median per size class: `<=1MiB`, `<=20MiB`, `<=256MiB`, `>256MiB` (classes with calls).
    pub median_by_size_us: Vec<(String, f64)>,
}

const SIZE_CLASSES: [(u64, &str); 4] = [
    (1 << 20, "<=1MiB"),
    (20 << 20, "<=20MiB"),
    (256 << 20, "<=256MiB"),
    (u64::MAX, ">256MiB"),
];

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

impl Latency {
    fn from_samples(samples: &[(u64, f64)]) -> Latency {
        let mut all: Vec<f64> = samples.iter().map(|s| s.1).collect();
        all.sort_by(f64::total_cmp);
        let mut by_size = Vec::new();
        let mut lower = 0;
        for (upper, name) in SIZE_CLASSES {
            let mut class: Vec<f64> = samples
                .iter()
                .filter(|s| s.0 > lower && s.0 <= upper)
                .map(|s| s.1)
                .collect();
            lower = upper;
            if class.is_empty() {
                continue;
            }
            class.sort_by(f64::total_cmp);
            by_size.push((name.to_string(), quantile(&class, 0.5)));
        }
        Latency {
            calls: all.len(),
            median_us: quantile(&all, 0.5),
            p90_us: quantile(&all, 0.9),
            p99_us: quantile(&all, 0.99),
            mean_us: all.iter().sum::<f64>() / all.len().max(1) as f64,
            median_by_size_us: by_size,
        }
    }
}

/// A change of the memory held, right after the allocation at `index` of `size` bytes.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Growth {
    pub index: usize,
    pub size: u64,
    pub held: u64,
}

/// At most this many growth steps are kept per pass (the first ones: the calibration data).
pub const GROWTH_KEPT: usize = 4000;

/// The stream-ordered pool's figures.
#[derive(Debug, Clone, Serialize)]
pub struct PoolPass {
    /// `CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH`.
    pub reserved_high: u64,
    /// `CU_MEMPOOL_ATTR_USED_MEM_HIGH`.
    pub used_high: u64,
    pub alloc: Latency,
    pub free: Latency,
    /// Every change of `CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT` (the first [`GROWTH_KEPT`]).
    pub reserved_steps: Vec<Growth>,
    pub seconds: f64,
}

/// Plain `cuMemAlloc`'s figures.
#[derive(Debug, Clone, Serialize)]
pub struct SyncPass {
    /// Largest drop of `cuMemGetInfo`'s free memory below its value before the replay.
    pub peak_taken: u64,
    pub alloc: Latency,
    pub free: Latency,
    /// Every change of the memory taken (the first [`GROWTH_KEPT`]).
    pub taken_steps: Vec<Growth>,
    pub seconds: f64,
}

/// Everything one device replay measured.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceReport {
    pub device: String,
    pub total_memory: u64,
    pub driver_version: i32,
    pub requests: usize,
    pub cuda_streams: usize,
    pub peak_requested: u64,
    pub pool: PoolPass,
    pub plain: SyncPass,
}

fn pool_attr(pool: sys::CUmemoryPool, attr: sys::CUmemPool_attribute) -> Result<u64, DeviceError> {
    let mut value: u64 = 0;
    // SAFETY: the pool is the device's default pool, valid for the context's life, and the
    // size attributes are cuuint64_t, which `value` is.
    let r = unsafe { sys::cuMemPoolGetAttribute(pool, attr, (&raw mut value).cast()) };
    check("cuMemPoolGetAttribute", r)?;
    Ok(value)
}

fn set_pool_attr(
    pool: sys::CUmemoryPool,
    attr: sys::CUmemPool_attribute,
    mut value: u64,
) -> Result<(), DeviceError> {
    // SAFETY: as in `pool_attr`; the driver reads a cuuint64_t.
    let r = unsafe { sys::cuMemPoolSetAttribute(pool, attr, (&raw mut value).cast()) };
    check("cuMemPoolSetAttribute", r)
}

fn free_memory() -> Result<u64, DeviceError> {
    result::mem_get_info()
        .map(|(free, _)| free as u64)
        .map_err(|e| DeviceError::Driver {
            call: "cuMemGetInfo_v2",
            code: e.0,
        })
}

/// Replays `stream` on device 0 and measures both passes.
pub fn replay_on_device(stream: &RequestStream) -> Result<DeviceReport, DeviceError> {
    use sys::CUmemPool_attribute as A;
    // SAFETY: only tries to dlopen libcuda; cudarc panics on the first call without it.
    if !unsafe { sys::is_culib_present() } {
        return Err(DeviceError::NoDriver);
    }
    result::init().map_err(|e| DeviceError::Driver {
        call: "cuInit",
        code: e.0,
    })?;
    let dev = result::device::get(0).map_err(|e| DeviceError::Driver {
        call: "cuDeviceGet",
        code: e.0,
    })?;
    // SAFETY: `dev` came from `device::get`; the primary context is retained for the process.
    let ctx = unsafe { result::primary_ctx::retain(dev) }.map_err(|e| DeviceError::Driver {
        call: "cuDevicePrimaryCtxRetain",
        code: e.0,
    })?;
    // SAFETY: `ctx` is a live primary context.
    unsafe { result::ctx::set_current(ctx) }.map_err(|e| DeviceError::Driver {
        call: "cuCtxSetCurrent",
        code: e.0,
    })?;
    let device = result::device::get_name(dev).unwrap_or_default();
    // SAFETY: `dev` is valid.
    let total_memory = unsafe { result::device::total_mem(dev) }.unwrap_or(0) as u64;
    let mut driver_version = 0;
    // SAFETY: writes one int.
    unsafe { sys::cuDriverGetVersion(&mut driver_version) };

    let streams: Vec<sys::CUstream> = stream
        .cuda_streams
        .iter()
        .map(|&handle| {
            if handle == 0 {
                Ok(result::stream::null())
            } else {
                result::stream::create(result::stream::StreamKind::NonBlocking).map_err(|e| {
                    DeviceError::Driver {
                        call: "cuStreamCreate",
                        code: e.0,
                    }
                })
            }
        })
        .collect::<Result<_, _>>()?;
    let streams = if streams.is_empty() {
        vec![result::stream::null()]
    } else {
        streams
    };

    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: writes one pool handle.
    check("cuDeviceGetDefaultMemPool", unsafe {
        sys::cuDeviceGetDefaultMemPool(&mut pool, dev)
    })?;
    set_pool_attr(pool, A::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, u64::MAX)?;
    // SAFETY: the pool is valid; nothing of it is in use yet.
    check("cuMemPoolTrimTo", unsafe { sys::cuMemPoolTrimTo(pool, 0) })?;
    set_pool_attr(pool, A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0)?;
    set_pool_attr(pool, A::CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0)?;

    let slots = stream.slots as usize;
    let mut live: Vec<(sys::CUdeviceptr, usize)> = vec![(0, 0); slots];
    let (mut allocs, mut frees) = (Vec::new(), Vec::new());
    let mut steps = Vec::new();
    let mut last_reserved = pool_attr(pool, A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?;
    let (mut requested, mut peak_requested) = (0u64, 0u64);
    let t0 = Instant::now();
    for (index, r) in stream.requests.iter().enumerate() {
        let slot = r.slot as usize;
        match r.kind {
            RequestKind::Alloc => {
                let s = streams[r.stream as usize];
                let t = Instant::now();
                // SAFETY: `s` is a stream of this context (or the null stream); the memory is
                // never touched.
                let ptr = unsafe { result::malloc_async(s, r.size as usize) };
                let us = t.elapsed().as_secs_f64() * 1e6;
                let ptr = ptr.map_err(|e| DeviceError::OutOfMemory {
                    index,
                    call: "cuMemAllocAsync",
                    size: r.size,
                    code: e.0,
                })?;
                allocs.push((r.size, us));
                live[slot] = (ptr, r.stream as usize);
                requested += r.size;
                peak_requested = peak_requested.max(requested);
                let reserved = pool_attr(pool, A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?;
                if reserved != last_reserved && steps.len() < GROWTH_KEPT {
                    steps.push(Growth {
                        index,
                        size: r.size,
                        held: reserved,
                    });
                }
                last_reserved = reserved;
            }
            // A device pool or the driver has no cache to empty and no fraction to honour.
            RequestKind::EmptyCache | RequestKind::MemoryFraction | RequestKind::Order(_) => {}
            RequestKind::Attempt => {
                // Tried and survived failing in the program: served and given back at once
                // if it fits here.
                let s = streams[r.stream as usize];
                // SAFETY: as for an allocation; freed at once on the same stream.
                if let Ok(ptr) = unsafe { result::malloc_async(s, r.size as usize) } {
                    // SAFETY: `ptr` was just allocated on `s`.
                    let _ = unsafe { result::free_async(ptr, s) };
                }
            }
            RequestKind::Free => {
                let (ptr, s) = std::mem::take(&mut live[slot]);
                let t = Instant::now();
                // SAFETY: `ptr` came from `malloc_async` on stream `s` and is freed once.
                let r2 = unsafe { result::free_async(ptr, streams[s]) };
                frees.push((r.size, t.elapsed().as_secs_f64() * 1e6));
                r2.map_err(|e| DeviceError::Driver {
                    call: "cuMemFreeAsync",
                    code: e.0,
                })?;
                requested -= r.size;
            }
        }
    }
    for &s in &streams {
        // SAFETY: a stream of this context.
        unsafe { result::stream::synchronize(s) }.map_err(|e| DeviceError::Driver {
            call: "cuStreamSynchronize",
            code: e.0,
        })?;
    }
    let pool_pass = PoolPass {
        reserved_high: pool_attr(pool, A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)?,
        used_high: pool_attr(pool, A::CU_MEMPOOL_ATTR_USED_MEM_HIGH)?,
        alloc: Latency::from_samples(&allocs),
        free: Latency::from_samples(&frees),
        reserved_steps: steps,
        seconds: t0.elapsed().as_secs_f64(),
    };
    // Whatever the trace left live goes back too, so the plain pass starts from an empty pool.
    for (ptr, s) in live.iter_mut().map(std::mem::take) {
        if ptr != 0 {
            // SAFETY: as above, each pointer once.
            let _ = unsafe { result::free_async(ptr, streams[s]) };
        }
    }
    result::ctx::synchronize().map_err(|e| DeviceError::Driver {
        call: "cuCtxSynchronize",
        code: e.0,
    })?;
    // SAFETY: nothing of the pool is in use any more.
    check("cuMemPoolTrimTo", unsafe { sys::cuMemPoolTrimTo(pool, 0) })?;

    let plain = plain_pass(stream)?;
    for &s in &streams {
        if !s.is_null() {
            // SAFETY: created above, destroyed once.
            let _ = unsafe { result::stream::destroy(s) };
        }
    }
    Ok(DeviceReport {
        device,
        total_memory,
        driver_version,
        requests: stream.requests.len(),
        cuda_streams: stream.cuda_streams.len(),
        peak_requested,
        pool: pool_pass,
        plain,
    })
}

fn plain_pass(stream: &RequestStream) -> Result<SyncPass, DeviceError> {
    let mut live: Vec<sys::CUdeviceptr> = vec![0; stream.slots as usize];
    let (mut allocs, mut frees) = (Vec::new(), Vec::new());
    let mut steps = Vec::new();
    let before = free_memory()?;
    let (mut peak_taken, mut last_taken) = (0u64, 0u64);
    let t0 = Instant::now();
    for (index, r) in stream.requests.iter().enumerate() {
        let slot = r.slot as usize;
        match r.kind {
            RequestKind::Alloc => {
                let t = Instant::now();
                // SAFETY: plain device allocation, never touched.
                let ptr = unsafe { result::malloc_sync(r.size as usize) };
                let us = t.elapsed().as_secs_f64() * 1e6;
                live[slot] = ptr.map_err(|e| DeviceError::OutOfMemory {
                    index,
                    call: "cuMemAlloc_v2",
                    size: r.size,
                    code: e.0,
                })?;
                allocs.push((r.size, us));
                let taken = before.saturating_sub(free_memory()?);
                peak_taken = peak_taken.max(taken);
                if taken != last_taken && steps.len() < GROWTH_KEPT {
                    steps.push(Growth {
                        index,
                        size: r.size,
                        held: taken,
                    });
                }
                last_taken = taken;
            }
            RequestKind::EmptyCache | RequestKind::MemoryFraction | RequestKind::Order(_) => {}
            RequestKind::Attempt => {
                // SAFETY: plain allocation, freed at once.
                if let Ok(ptr) = unsafe { result::malloc_sync(r.size as usize) } {
                    // SAFETY: `ptr` was just allocated.
                    let _ = unsafe { result::free_sync(ptr) };
                }
            }
            RequestKind::Free => {
                let ptr = std::mem::take(&mut live[slot]);
                let t = Instant::now();
                // SAFETY: `ptr` came from `malloc_sync` and is freed once.
                let r2 = unsafe { result::free_sync(ptr) };
                frees.push((r.size, t.elapsed().as_secs_f64() * 1e6));
                r2.map_err(|e| DeviceError::Driver {
                    call: "cuMemFree_v2",
                    code: e.0,
                })?;
            }
        }
    }
    for ptr in live {
        if ptr != 0 {
            // SAFETY: each pointer once.
            let _ = unsafe { result::free_sync(ptr) };
        }
    }
    Ok(SyncPass {
        peak_taken,
        alloc: Latency::from_samples(&allocs),
        free: Latency::from_samples(&frees),
        taken_steps: steps,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_quantiles_and_size_classes() {
        let samples: Vec<(u64, f64)> = (1..=100).map(|i| (i << 20, i as f64)).collect();
        let l = Latency::from_samples(&samples);
        assert_eq!(l.calls, 100);
        assert_eq!(l.median_us, 51.0);
        assert_eq!(l.p99_us, 99.0);
        assert_eq!(l.median_by_size_us[0], ("<=1MiB".to_string(), 1.0));
        assert_eq!(l.median_by_size_us[1], ("<=20MiB".to_string(), 11.0));
        assert_eq!(l.median_by_size_us.len(), 2);
    }
}
