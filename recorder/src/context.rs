//! Which device an event belongs to: the device of the calling thread's current context.
//!
//! The wrappers ask the driver for the current context (`cuCtxGetCurrent`, a thread-local read
//! inside the driver) and map it to a device through a lock-free cache, asking `cuCtxGetDevice`
//! once per context. The runtime (cudart) makes its contexts current through private entry
//! points, so watching the public context calls alone leaves most events without a device
//! (measured on the H200: every event of an nvcc program). The context calls are still wrapped:
//! they fill the cache early and serve when the driver's own functions were not found
//! (`hooks::context` wraps them and tells this module). A thread
//! with no current context is attributed to the device any thread used last; host memory events
//! carry -1 regardless.

use crate::cuda::{CUDA_SUCCESS, CUcontext, CUdevice, CUresult};
use crate::elfsym;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};

const SLOTS: usize = 256;

static CONTEXTS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static DEVICES: [AtomicI32; SLOTS] = [const { AtomicI32::new(-1) }; SLOTS];
static LAST_DEVICE: AtomicI32 = AtomicI32::new(-1);

thread_local! {
    static CURRENT: Cell<i32> = const { Cell::new(-1) };
}

static GET_CURRENT: AtomicUsize = AtomicUsize::new(0);
static GET_DEVICE: AtomicUsize = AtomicUsize::new(0);
static LEARNT: AtomicBool = AtomicBool::new(false);
/// `cuDeviceGetName`, `cuDeviceTotalMem_v2`, `cuDeviceGetUuid`, `cuDeviceGetAttribute`,
/// `cuDriverGetVersion`: for the writer thread's device table, never called on the hook path.
static DESCRIBE: [AtomicUsize; 5] = [const { AtomicUsize::new(0) }; 5];
const DESCRIBE_NAMES: [&std::ffi::CStr; 5] = [
    c"cuDeviceGetName",
    c"cuDeviceTotalMem_v2",
    c"cuDeviceGetUuid",
    c"cuDeviceGetAttribute",
    c"cuDriverGetVersion",
];

type GetCurrent = unsafe extern "C" fn(*mut CUcontext) -> CUresult;
type GetDevice = unsafe extern "C" fn(*mut CUdevice) -> CUresult;

/// Finds `cuCtxGetCurrent`, `cuCtxGetDevice` and the functions that describe a device in the
/// driver, once a driver function was adopted (`real`). The driver is the loaded `libcuda.so.1`
/// (or `libcuda.so`), else the library that defines `real`: with another interposer in the
/// process, `real` may be that interposer's wrapper, whose library need not export the context
/// functions, and the recorder's own questions should not go through it anyway. Runs at lookup
/// time until it succeeds; it resolves symbols and calls no driver function.
pub fn learn_driver(real: usize) {
    if LEARNT.load(Ordering::Acquire) {
        return;
    }
    let Some(dlsym) = elfsym::real_dlsym() else {
        return;
    };
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the loader's tables.
    let own = unsafe { libc::dladdr(real as *const libc::c_void, &mut info) } != 0
        && !info.dli_fname.is_null();
    let own = if own {
        info.dli_fname
    } else {
        std::ptr::null()
    };
    for lib in [c"libcuda.so.1".as_ptr(), c"libcuda.so".as_ptr(), own] {
        if lib.is_null() {
            continue;
        }
        // SAFETY: dlopen with RTLD_NOLOAD only finds an object already loaded, and the handle
        // is closed at once; `dlsym` is the C library's, with a valid handle and names.
        unsafe {
            let h = libc::dlopen(lib, libc::RTLD_NOLOAD | libc::RTLD_LAZY);
            if h.is_null() {
                continue;
            }
            let gc = dlsym(h, c"cuCtxGetCurrent".as_ptr()) as usize;
            let gd = dlsym(h, c"cuCtxGetDevice".as_ptr()) as usize;
            if gc == 0 || gd == 0 {
                libc::dlclose(h);
                continue;
            }
            if LEARNT.swap(true, Ordering::AcqRel) {
                libc::dlclose(h);
                return;
            }
            for (slot, name) in DESCRIBE.iter().zip(DESCRIBE_NAMES) {
                slot.store(dlsym(h, name.as_ptr()) as usize, Ordering::Release);
            }
            libc::dlclose(h);
            GET_DEVICE.store(gd, Ordering::Release);
            GET_CURRENT.store(gc, Ordering::Release);
            return;
        }
    }
}

/// Forgets the driver's functions: a fork child cannot use CUDA.
pub fn after_fork_in_child() {
    GET_CURRENT.store(0, Ordering::Relaxed);
    for slot in &DESCRIBE {
        slot.store(0, Ordering::Relaxed);
    }
}

/// What the driver says about device `ordinal` (for the trace's device table), when the driver's
/// functions are known and answer. Called from the writer thread only.
pub fn describe_device(ordinal: i32) -> Option<vramtrace_format::Device> {
    let f: Vec<usize> = DESCRIBE.iter().map(|s| s.load(Ordering::Acquire)).collect();
    if f[..4].contains(&0) {
        return None;
    }
    type Name = unsafe extern "C" fn(*mut libc::c_char, i32, CUdevice) -> CUresult;
    type Total = unsafe extern "C" fn(*mut usize, CUdevice) -> CUresult;
    type Uuid = unsafe extern "C" fn(*mut [u8; 16], CUdevice) -> CUresult;
    type Attr = unsafe extern "C" fn(*mut i32, i32, CUdevice) -> CUresult;
    let mut name = [0 as libc::c_char; 256];
    let mut total = 0usize;
    let mut uuid = [0u8; 16];
    let (mut major, mut minor) = (0i32, 0i32);
    // SAFETY: the driver's exported functions of these names, with valid out-pointers; a CUdevice
    // is its ordinal. Each may fail (before cuInit): the result is then None.
    unsafe {
        if std::mem::transmute::<usize, Name>(f[0])(name.as_mut_ptr(), 255, ordinal) != 0 {
            return None;
        }
        let _ = std::mem::transmute::<usize, Total>(f[1])(&mut total, ordinal);
        let _ = std::mem::transmute::<usize, Uuid>(f[2])(&mut uuid, ordinal);
        let attr = std::mem::transmute::<usize, Attr>(f[3]);
        let _ = attr(&mut major, 75, ordinal); // COMPUTE_CAPABILITY_MAJOR
        let _ = attr(&mut minor, 76, ordinal); // COMPUTE_CAPABILITY_MINOR
    }
    // SAFETY: the driver wrote a NUL-terminated name into the buffer (its last byte stays 0).
    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) };
    Some(vramtrace_format::Device {
        ordinal,
        name: name.to_string_lossy().into_owned(),
        uuid,
        total_memory: total as u64,
        compute_capability: (major.max(0) as u32, minor.max(0) as u32),
    })
}

/// `cuDeviceGetUuid` of device `ordinal`, when known and answering. No allocation: NVML's
/// device of a CUDA device is found by it at context creation (`nvml`).
pub fn device_uuid(ordinal: i32) -> Option<[u8; 16]> {
    let f = DESCRIBE[2].load(Ordering::Acquire);
    if f == 0 {
        return None;
    }
    let mut uuid = [0u8; 16];
    type Uuid = unsafe extern "C" fn(*mut [u8; 16], CUdevice) -> CUresult;
    // SAFETY: the driver's cuDeviceGetUuid with a valid out-pointer; a CUdevice is its ordinal.
    let r = unsafe { std::mem::transmute::<usize, Uuid>(f)(&mut uuid, ordinal) };
    (r == CUDA_SUCCESS).then_some(uuid)
}

/// `cuDriverGetVersion`, when known and answering. Writer thread only.
pub fn driver_version() -> Option<u32> {
    let f = DESCRIBE[4].load(Ordering::Acquire);
    if f == 0 {
        return None;
    }
    let mut v = 0i32;
    type Version = unsafe extern "C" fn(*mut i32) -> CUresult;
    // SAFETY: the driver's cuDriverGetVersion with a valid out-pointer.
    let r = unsafe { std::mem::transmute::<usize, Version>(f)(&mut v) };
    (r == CUDA_SUCCESS && v > 0).then_some(v as u32)
}

/// The device of the calling thread's current context, else of the last one any thread used,
/// else -1.
#[inline]
pub fn current_device() -> i32 {
    let gc = GET_CURRENT.load(Ordering::Acquire);
    if gc != 0 {
        let mut ctx: CUcontext = std::ptr::null_mut();
        // SAFETY: cuCtxGetCurrent of the driver, with a valid out-pointer.
        let r = unsafe { std::mem::transmute::<usize, GetCurrent>(gc)(&mut ctx) };
        if r == CUDA_SUCCESS && !ctx.is_null() {
            let d = device_of(ctx);
            if d >= 0 {
                LAST_DEVICE.store(d, Ordering::Relaxed);
                return d;
            }
            let gd = GET_DEVICE.load(Ordering::Acquire);
            let mut dev: CUdevice = -1;
            // SAFETY: cuCtxGetDevice of the same driver, with a valid out-pointer.
            let r = unsafe { std::mem::transmute::<usize, GetDevice>(gd)(&mut dev) };
            if r == CUDA_SUCCESS && dev >= 0 {
                remember(ctx, dev);
                LAST_DEVICE.store(dev, Ordering::Relaxed);
                return dev;
            }
        }
    }
    recent_device()
}

/// The device of the thread's context as last seen by a context call, else the device any thread
/// used last: no driver call, for the events that must cost least (the orderings, `sync`).
#[inline]
pub fn recent_device() -> i32 {
    match CURRENT.with(Cell::get) {
        -1 => LAST_DEVICE.load(Ordering::Relaxed),
        d => d,
    }
}

/// Notes that `ctx` is a context of `device`.
pub fn remember(ctx: CUcontext, device: CUdevice) {
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

/// Notes that `ctx` became the calling thread's current context.
pub fn make_current(ctx: CUcontext) {
    let d = device_of(ctx);
    CURRENT.with(|c| c.set(d));
    if d >= 0 {
        LAST_DEVICE.store(d, Ordering::Relaxed);
    }
}

/// Forgets the calling thread's current context: the one now current is unknown to it.
pub fn forget_current() {
    CURRENT.with(|c| c.set(-1));
}
