//! Handing out wrappers in place of the real functions: the driver's and the runtime's
//! resolvers (`cuGetProcAddress*`, `cudaGetDriverEntryPoint*`), wrapped, and the substitution the
//! `dlsym` trampoline uses too. The wrappers' addresses live here, beside the resolvers that hand
//! them out; the real functions behind them are `real`'s.
//!
//! Every pointer the driver hands out for a tracked function is the exact address of the
//! exported symbol of that name (observed on driver 580, docs/interposition.md §0), so `dladdr`
//! identifies it, and the wrapper with exactly that name, hence that ABI (`_v2`, `_ptsz`, ...),
//! replaces it. Tables are keyed by function pointer, never by library name: programs load the
//! driver as `libcuda.so.1`, `libcuda.so` or through a symlink.

#![allow(non_snake_case)]

use super::{array, context, device, graph, host, import, pool, sync, vmm};
use crate::cuda::{CUDA_ERROR_NOT_INITIALIZED, CUresult};
use crate::hooks::resolvers;
use crate::real::{adopt, is_real, real};
use crate::session;
use crate::table::{COUNT, Hook, find, for_each_hook};
use std::ffi::{CStr, c_char, c_int, c_void};

/// A function address that may sit in a `static`.
#[derive(Clone, Copy)]
pub struct Wrapper(pub *const ());

// SAFETY: a function address is immutable and valid from any thread.
unsafe impl Sync for Wrapper {}

impl Wrapper {
    pub fn addr(self) -> usize {
        self.0 as usize
    }
}

macro_rules! wrappers {
    ($( $module:ident :: $name:ident => $api:expr ),* $(,)?) => {
        /// The wrappers' addresses, indexed by [`Hook`]: the pointers handed out in place of the
        /// driver's.
        pub static WRAPPERS: [Wrapper; COUNT] = [$(Wrapper($module::$name as *const ())),*];
    };
}

for_each_hook!(wrappers);

/// The hook whose wrapper is at `addr`.
pub fn by_wrapper(addr: usize) -> Option<usize> {
    WRAPPERS.iter().position(|w| w.addr() == addr)
}

/// The wrapper to hand out for `p`, the driver's answer to a lookup of hook `index` by name;
/// `p` itself when it is not the function the wrapper forwards to.
pub fn substitute_named(index: usize, p: *mut c_void) -> *mut c_void {
    let wrapper = WRAPPERS[index];
    let addr = p as usize;
    if addr == 0 || addr == wrapper.addr() || by_wrapper(addr).is_some() {
        return p;
    }
    if adopt(index, addr) == addr {
        wrapper.0 as *mut c_void
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
    if let Some(i) = is_real(addr) {
        return WRAPPERS[i].0 as *mut c_void;
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
        session::start_soon();
        // SAFETY: the caller's out-parameter, which the resolver just filled.
        unsafe { *pfn = substitute(*pfn) };
    }
}

macro_rules! real_or {
    ($hook:ident, $ty:ty, $fail:expr) => {{
        let Some(real) = real(Hook::$hook, $hook as *const () as usize) else {
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
        cuGetProcAddress,
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
        cuGetProcAddress_v2,
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
            let real = real_or!($name, EntryPoint, CUDA_ERROR_INITIALIZATION);
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
            let real = real_or!($name, EntryPointByVersion, CUDA_ERROR_INITIALIZATION);
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
