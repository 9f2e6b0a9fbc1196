//! What bounded the memory of a PyTorch process (formats/SPEC.md §4.3): the device's total and
//! free bytes, the memory fraction the program set and when, and every `empty_cache`.
//!
//! PyTorch's trace tracker reports none of these: `set_per_process_memory_fraction` and
//! `empty_cache` reach the allocator through virtual methods of `CUDAAllocator`
//! (`setMemoryFraction`, `emptyCache`; pytorch/pytorch `c10/cuda/CUDACachingAllocator.h`, and
//! `c10/core/CachingDeviceAllocator.h` for `DeviceAllocator`), and the inline header functions
//! Python's bindings call go through the vtable of the object behind the exported allocator
//! pointer. So when the tracker attaches ([`at_attach`]), the recorder
//!
//! 1. writes a `device.memory` event (`cuMemGetInfo_v2`: total and free bytes);
//! 2. reads the fraction already in force (`getMemoryFraction`: a program usually sets it
//!    before its first tensor, so before the attach) and writes it if it is below 1;
//! 3. replaces the two vtable slots with wrappers that write the event and call the real
//!    method. The vtable lives in `.data.rel.ro`, read-only after relocation: the page is made
//!    writable for the two stores and given back its own protection (from `/proc/self/maps`).
//!
//! Every OOM entry of the tracker is followed by a `device.memory` event ([`after_oom`]), so a
//! full device can be told from a reached cap. The wrappers use the `C-unwind` ABI: PyTorch's
//! `setMemoryFraction` throws `c10::Error` for a fraction outside `[0, 1]`, and that exception
//! passes through the wrapper (which then writes nothing) to the Python binding that catches it.

use crate::held::release_held;
use crate::{ring, session};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use vramtrace_format::conventions::fraction_bits;
use vramtrace_format::{Api, NO_DEVICE, TorchLayout};

/// `flags` bit 0 of a `torch.set_memory_fraction` read at the attach, not seen being set.
pub const READ_AT_ATTACH: u64 = 1;

/// The real `setMemoryFraction` and `emptyCache` of the patched vtable; 0 before the patch.
static REAL_SET_FRACTION: AtomicUsize = AtomicUsize::new(0);
static REAL_EMPTY_CACHE: AtomicUsize = AtomicUsize::new(0);
/// `cuMemGetInfo_v2` of the loaded driver; 0 when not found (no `device.memory` events).
static MEM_GET_INFO: AtomicUsize = AtomicUsize::new(0);

/// `void setMemoryFraction(double fraction, c10::DeviceIndex device)`.
type SetFraction = unsafe extern "C-unwind" fn(*mut c_void, f64, i8);
/// `void emptyCache(MempoolId_t mempool_id)`: a pair of two `u64`, trivially copyable, so it
/// travels in two registers (Itanium C++ ABI, System V classification).
type EmptyCache = unsafe extern "C-unwind" fn(*mut c_void, u64, u64);
/// `double getMemoryFraction(c10::DeviceIndex device)`.
type GetFraction = unsafe extern "C-unwind" fn(*mut c_void, i8) -> f64;
/// `CUresult cuMemGetInfo_v2(size_t* free, size_t* total)`.
type MemGetInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> c_int;

/// Writes one event of `api`, after this thread's held `free_requested` (which came first).
fn write(api: Api, device: i32, fill: impl FnOnce(&mut vramtrace_format::journal::Record)) {
    if !ring::wanted() {
        return;
    }
    session::start_if_needed();
    release_held();
    let now = crate::clock::now();
    let mut rec = ring::record_of(Some(api), now, now, 0);
    rec.device = device;
    fill(&mut rec);
    ring::push(&mut rec);
}

/// A `device.memory` event for the current device, if the driver answers.
fn device_memory() {
    let p = MEM_GET_INFO.load(Ordering::Acquire);
    if p == 0 {
        return;
    }
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: `p` is the driver's cuMemGetInfo_v2, called with two valid out-pointers.
    if unsafe { std::mem::transmute::<usize, MemGetInfo>(p)(&mut free, &mut total) } != 0 {
        return;
    }
    write(Api::DeviceMemory, crate::context::current_device(), |r| {
        r.size = total as u64;
        r.aux = free as u64;
    });
}

/// After the tracker wrote an OOM entry: what the device had free then.
#[cold]
pub fn after_oom() {
    device_memory();
}

unsafe extern "C-unwind" fn set_memory_fraction(this: *mut c_void, fraction: f64, device: i8) {
    let real = REAL_SET_FRACTION.load(Ordering::Acquire);
    // SAFETY: the slot's own function, saved before the patch, with the caller's arguments.
    unsafe { std::mem::transmute::<usize, SetFraction>(real)(this, fraction, device) };
    write(Api::TorchSetMemoryFraction, i32::from(device), |r| {
        r.aux = fraction_bits(fraction)
    });
}

unsafe extern "C-unwind" fn empty_cache(this: *mut c_void, pool: u64, id: u64) {
    write(Api::TorchEmptyCache, NO_DEVICE, |r| {
        r.pool = pool;
        r.handle = id;
    });
    let real = REAL_EMPTY_CACHE.load(Ordering::Acquire);
    // SAFETY: the slot's own function, saved before the patch, with the caller's arguments.
    unsafe { std::mem::transmute::<usize, EmptyCache>(real)(this, pool, id) };
}

/// Right after the tracker attached to `allocator`, whose vtable is `vtable` with `layout`'s
/// slots: the device's memory, the fraction in force, and the two vtable slots patched.
///
/// # Safety
/// `allocator` is the live native caching allocator of a PyTorch build with `layout`, and
/// `vtable` its vtable.
pub unsafe fn at_attach(allocator: *mut c_void, vtable: *const usize, layout: &TorchLayout) {
    MEM_GET_INFO.store(find_mem_get_info(), Ordering::Release);
    device_memory();
    let device = crate::context::current_device();
    if let Ok(d) = i8::try_from(device)
        && d >= 0
    {
        // SAFETY: this version's `getMemoryFraction` slot, called with `this` and a device the
        // allocator was initialized for (it made this device's first segment).
        let get: GetFraction =
            unsafe { std::mem::transmute(*vtable.add(layout.slot_get_memory_fraction)) };
        let fraction = unsafe { get(allocator, d) };
        if fraction < 1.0 {
            write(Api::TorchSetMemoryFraction, device, |r| {
                r.aux = fraction_bits(fraction);
                r.flags = READ_AT_ATTACH;
            });
        }
    }
    // SAFETY: both slots are in this vtable (TORCH_LAYOUTS); the wrappers have their types.
    unsafe {
        patch(
            vtable.add(layout.slot_set_memory_fraction),
            set_memory_fraction as SetFraction as usize,
            &REAL_SET_FRACTION,
        );
        patch(
            vtable.add(layout.slot_empty_cache),
            empty_cache as EmptyCache as usize,
            &REAL_EMPTY_CACHE,
        );
    }
}

/// The driver's `cuMemGetInfo_v2`, looked up in the loaded `libcuda.so.1`.
fn find_mem_get_info() -> usize {
    let Some(dlsym) = crate::elfsym::real_dlsym() else {
        return 0;
    };
    // SAFETY: RTLD_NOLOAD only finds an object that is already loaded; names are C strings.
    unsafe {
        let h = libc::dlopen(
            c"libcuda.so.1".as_ptr(),
            libc::RTLD_NOLOAD | libc::RTLD_LAZY,
        );
        if h.is_null() {
            return 0;
        }
        let p = dlsym(h, c"cuMemGetInfo_v2".as_ptr()) as usize;
        libc::dlclose(h);
        p
    }
}

/// Saves the function in vtable slot `slot` into `real` and stores `ours` there.
///
/// # Safety
/// `slot` is a slot of a live vtable whose function has the type of `ours`.
unsafe fn patch(slot: *const usize, ours: usize, real: &AtomicUsize) {
    // SAFETY: the caller's slot is a readable word.
    let theirs = unsafe { *slot };
    if theirs == ours {
        return;
    }
    // SAFETY: sysconf has no preconditions.
    let page_size = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let page = slot as usize & !(page_size - 1);
    let Some(prot) = protection_of(page) else {
        return;
    };
    real.store(theirs, Ordering::Release);
    // SAFETY: `page` is a mapped page of this process (it holds the vtable); it is made
    // writable for one aligned word store, then given back its protection.
    unsafe {
        if prot & libc::PROT_WRITE == 0
            && libc::mprotect(page as *mut c_void, page_size, prot | libc::PROT_WRITE) != 0
        {
            real.store(0, Ordering::Release);
            return;
        }
        (*(slot as *const AtomicUsize)).store(ours, Ordering::Release);
        if prot & libc::PROT_WRITE == 0 {
            libc::mprotect(page as *mut c_void, page_size, prot);
        }
    }
}

/// The protection of the mapping holding `address`, from `/proc/self/maps`.
fn protection_of(address: usize) -> Option<c_int> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let (range, rest) = line.split_once(' ')?;
        let (lo, hi) = range.split_once('-')?;
        let (lo, hi) = (
            usize::from_str_radix(lo, 16).ok()?,
            usize::from_str_radix(hi, 16).ok()?,
        );
        if !(lo..hi).contains(&address) {
            return None;
        }
        let perms = rest.as_bytes();
        let mut prot = libc::PROT_NONE;
        for (i, flag) in [libc::PROT_READ, libc::PROT_WRITE, libc::PROT_EXEC]
            .into_iter()
            .enumerate()
        {
            if perms.get(i).is_some_and(|&c| c != b'-') {
                prot |= flag;
            }
        }
        Some(prot)
    })
}
