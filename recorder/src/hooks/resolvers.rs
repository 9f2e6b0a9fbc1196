//! Finding the real functions, and handing out wrappers in their place.
//!
//! Every pointer the driver hands out for a tracked function is the exact address of the
//! exported symbol of that name (observed on driver 580, docs/interposition.md §0), so `dladdr`
//! identifies it, and the wrapper with exactly that name, hence that ABI (`_v2`, `_ptsz`, ...),
//! replaces it. Tables are keyed by function pointer, never by library name: programs load the
//! driver as `libcuda.so.1`, `libcuda.so` or through a symlink.

#![allow(non_snake_case)]

use crate::cuda::{CUDA_ERROR_NOT_INITIALIZED, CUresult};
use crate::elfsym;
use crate::hooks::{HOOKS, Hook, by_wrapper, context, find};
use crate::lifecycle;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
type DlvsymFn = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char) -> *mut c_void;

static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);
static REAL_DLVSYM: AtomicUsize = AtomicUsize::new(0);
static NEXT_DLSYM: AtomicUsize = AtomicUsize::new(0);

/// `slot`'s value, computed by `find` on first use (0 stays "not found" and is asked again).
fn cached(slot: &AtomicUsize, find: impl FnOnce() -> Option<usize>) -> Option<usize> {
    match slot.load(Ordering::Acquire) {
        0 => {
            let p = find()?;
            slot.store(p, Ordering::Release);
            Some(p)
        }
        p => Some(p),
    }
}

/// The C library's own `dlsym`, read from its symbol table (`elfsym`): the public `dlsym` and
/// `dlvsym` are this library's trampolines, never called from inside the recorder.
pub fn real_dlsym() -> Option<DlsymFn> {
    let p = cached(&REAL_DLSYM, || elfsym::c_library_function(c"dlsym"))?;
    // SAFETY: the C library's dlsym, which has this signature.
    Some(unsafe { std::mem::transmute::<usize, DlsymFn>(p) })
}

/// The C library's own `dlvsym`.
pub fn real_dlvsym() -> Option<DlvsymFn> {
    let p = cached(&REAL_DLVSYM, || elfsym::c_library_function(c"dlvsym"))?;
    // SAFETY: the C library's dlvsym, which has this signature.
    Some(unsafe { std::mem::transmute::<usize, DlvsymFn>(p) })
}

/// Finds the three `dlsym`s above while the process loads: reading the loader's list
/// (`dl_iterate_phdr`) later, on a thread that races a `fork`, could leave the child with the
/// loader's lock taken.
pub fn find_dlsyms() {
    let _ = (real_dlsym(), real_dlvsym(), next_dlsym());
}

/// The `dlsym` that follows this library in the search order: another interposer's (a
/// HAMi-core-style wrapper preloaded after vramtrace, which must still see every lookup), else
/// the C library's (docs/interposition.md §6).
pub fn next_dlsym() -> Option<DlsymFn> {
    let p = cached(&NEXT_DLSYM, || {
        let real = real_dlsym()?;
        // SAFETY: called from this library's code, RTLD_NEXT searches the objects after it.
        let next = unsafe { real(libc::RTLD_NEXT, c"dlsym".as_ptr()) } as usize;
        let ours = crate::dlsym::dlsym as *const () as usize;
        Some(if next == 0 || next == ours {
            real as usize
        } else {
            next
        })
    })?;
    // SAFETY: a dlsym (the C library's or an interposer's with its signature).
    Some(unsafe { std::mem::transmute::<usize, DlsymFn>(p) })
}

/// The real function behind each hook; 0 until found.
static REAL: [AtomicUsize; HOOKS.len()] = [const { AtomicUsize::new(0) }; HOOKS.len()];

/// The real function for `hook`, found on first use when no lookup went through the recorder
/// (a program linked with `-lcuda` calls the exported wrapper directly).
#[inline]
pub fn real(hook: Hook) -> Option<usize> {
    match REAL[hook as usize].load(Ordering::Acquire) {
        0 => find_real(hook as usize),
        p => Some(p),
    }
}

#[cold]
fn find_real(index: usize) -> Option<usize> {
    let dlsym = real_dlsym()?;
    let entry = &HOOKS[index];
    let ours = entry.wrapper.addr();
    // SAFETY: RTLD_NEXT from this library searches the objects loaded after it (libcuda when
    // the program links it); the name is NUL-terminated.
    let mut p = unsafe { dlsym(libc::RTLD_NEXT, entry.name.as_ptr()) } as usize;
    if p == 0 || p == ours {
        // libcuda loaded RTLD_LOCAL by someone: find it by name without loading it.
        for lib in [c"libcuda.so.1", c"libcuda.so"] {
            // SAFETY: RTLD_NOLOAD never loads anything; the handle is closed right after.
            let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
            if !h.is_null() {
                // SAFETY: a valid handle and a NUL-terminated name.
                p = unsafe { dlsym(h, entry.name.as_ptr()) } as usize;
                // SAFETY: balances the dlopen above; libcuda stays loaded by its owner.
                unsafe { libc::dlclose(h) };
                if p != 0 && p != ours {
                    break;
                }
            }
        }
    }
    if p == 0 || p == ours {
        return None;
    }
    Some(adopt(index, p))
}

/// Records `p` as the real function of hook `index` unless one is known; returns the one kept.
fn adopt(index: usize, p: usize) -> usize {
    match REAL[index].compare_exchange(0, p, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            if !HOOKS[index].name.to_bytes().starts_with(b"cuda") {
                context::learn_driver(p);
            }
            p
        }
        Err(existing) => existing,
    }
}

/// The wrapper to hand out for `p`, the driver's answer to a lookup of hook `index` by name;
/// `p` itself when it is not the function the wrapper forwards to.
pub fn substitute_named(index: usize, p: *mut c_void) -> *mut c_void {
    let entry = &HOOKS[index];
    let addr = p as usize;
    if addr == 0 || addr == entry.wrapper.addr() || by_wrapper(addr).is_some() {
        return p;
    }
    if adopt(index, addr) == addr {
        entry.wrapper.0 as *mut c_void
    } else {
        // A second copy of the driver (a stub, another namespace): leave it unrecorded rather
        // than forward its calls to the first copy.
        p
    }
}

/// The wrapper to hand out for a pointer a resolver returned, identified by its exported name.
pub fn substitute(p: *mut c_void) -> *mut c_void {
    let addr = p as usize;
    if addr == 0 || by_wrapper(addr).is_some() {
        return p;
    }
    if let Some(i) = REAL.iter().position(|r| r.load(Ordering::Acquire) == addr) {
        return HOOKS[i].wrapper.0 as *mut c_void;
    }
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the loader's tables and fills `info`.
    let found = unsafe { libc::dladdr(p, &mut info) } != 0;
    if !found || info.dli_saddr as usize != addr || info.dli_sname.is_null() {
        return p;
    }
    // SAFETY: dladdr returned a NUL-terminated symbol name owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dli_sname) };
    match find(name.to_bytes()) {
        Some(i) => substitute_named(i, p),
        None => p,
    }
}

/// Applies [`substitute`] to the pointer a resolver stored in `*pfn`, when it succeeded.
///
/// # Safety
/// `pfn` is the resolver's out-parameter (null or valid for reads and writes).
unsafe fn swap_out(ok: bool, pfn: *mut *mut c_void) {
    if ok && !pfn.is_null() {
        lifecycle::start_soon();
        // SAFETY: the caller's out-parameter, which the resolver just filled.
        unsafe { *pfn = substitute(*pfn) };
    }
}

macro_rules! real_or {
    ($hook:expr, $ty:ty, $fail:expr) => {{
        let Some(real) = real($hook) else {
            return $fail;
        };
        // SAFETY: the slot holds the exported function of this exact name and ABI.
        unsafe { std::mem::transmute::<usize, $ty>(real) }
    }};
}

/// `cuGetProcAddress` (the CUDA 11.3-11.8 ABI, still exported).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CUresult {
    let real = real_or!(
        Hook::cuGetProcAddress,
        unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CUresult,
        CUDA_ERROR_NOT_INITIALIZED
    );
    // SAFETY: forwarded unchanged; then the out-parameter the driver filled.
    unsafe {
        let r = real(symbol, pfn, version, flags);
        swap_out(r == 0, pfn);
        r
    }
}

/// `cuGetProcAddress_v2`, what CUDA 12/13 headers call `cuGetProcAddress`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CUresult {
    let real = real_or!(
        Hook::cuGetProcAddress_v2,
        unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CUresult,
        CUDA_ERROR_NOT_INITIALIZED
    );
    // SAFETY: forwarded unchanged; then the out-parameter the driver filled.
    unsafe {
        let r = real(symbol, pfn, version, flags, status);
        swap_out(r == 0, pfn);
        r
    }
}

type EntryPoint = unsafe extern "C" fn(*const c_char, *mut *mut c_void, u64, *mut c_int) -> c_int;
type EntryPointByVersion =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, u32, u64, *mut c_int) -> c_int;

/// `cudaErrorInitializationError`, for a runtime resolver whose runtime cannot be found.
const CUDA_ERROR_INITIALIZATION: c_int = 3;

macro_rules! runtime_resolver {
    ($name:ident) => {
        /// The runtime's resolver (exported by `libcudart.so`), wrapped for the pointers it returns.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            symbol: *const c_char,
            pfn: *mut *mut c_void,
            flags: u64,
            status: *mut c_int,
        ) -> c_int {
            let real = real_or!(Hook::$name, EntryPoint, CUDA_ERROR_INITIALIZATION);
            // SAFETY: forwarded unchanged; then the out-parameter the runtime filled.
            unsafe {
                let r = real(symbol, pfn, flags, status);
                swap_out(r == 0, pfn);
                r
            }
        }
    };
}

macro_rules! runtime_resolver_by_version {
    ($name:ident) => {
        /// The runtime's versioned resolver (CUDA 12.5+), wrapped for the pointers it returns.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            symbol: *const c_char,
            pfn: *mut *mut c_void,
            version: u32,
            flags: u64,
            status: *mut c_int,
        ) -> c_int {
            let real = real_or!(Hook::$name, EntryPointByVersion, CUDA_ERROR_INITIALIZATION);
            // SAFETY: forwarded unchanged; then the out-parameter the runtime filled.
            unsafe {
                let r = real(symbol, pfn, version, flags, status);
                swap_out(r == 0, pfn);
                r
            }
        }
    };
}

runtime_resolver!(cudaGetDriverEntryPoint);
runtime_resolver!(cudaGetDriverEntryPoint_ptsz);
runtime_resolver_by_version!(cudaGetDriverEntryPointByVersion);
runtime_resolver_by_version!(cudaGetDriverEntryPointByVersion_ptsz);
