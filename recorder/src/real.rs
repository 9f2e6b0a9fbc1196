//! The real function behind each hook: found by name on first use, or adopted from the
//! driver's answer to a lookup the recorder substituted (`hooks::resolvers`). Keyed by the
//! hook's index in `table`, never by library name: programs load the driver as
//! `libcuda.so.1`, `libcuda.so` or through a symlink.

use crate::context;
use crate::elfsym::real_dlsym;
use crate::table::{COUNT, Hook, NAMES};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The real function behind each hook; 0 until found.
static REAL: [AtomicUsize; COUNT] = [const { AtomicUsize::new(0) }; COUNT];

/// The real function for `hook`, found on first use when no lookup went through the recorder
/// (a program linked with `-lcuda` calls the exported wrapper directly). `ours` is the hook's
/// own wrapper, which a lookup may return and which is never the real function.
#[inline]
pub fn real(hook: Hook, ours: usize) -> Option<usize> {
    match REAL[hook as usize].load(Ordering::Acquire) {
        0 => find_real(hook as usize, ours),
        p => Some(p),
    }
}

#[cold]
fn find_real(index: usize, ours: usize) -> Option<usize> {
    let dlsym = real_dlsym()?;
    let name = NAMES[index];
    // SAFETY: RTLD_NEXT from this library searches the objects loaded after it (libcuda when
    // the program links it); the name is NUL-terminated.
    let mut p = unsafe { dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    if p == 0 || p == ours {
        // libcuda loaded RTLD_LOCAL by someone: find it by name without loading it.
        for lib in [c"libcuda.so.1", c"libcuda.so"] {
            // SAFETY: RTLD_NOLOAD never loads anything; the handle is closed right after.
            let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
            if !h.is_null() {
                // SAFETY: a valid handle and a NUL-terminated name.
                p = unsafe { dlsym(h, name.as_ptr()) } as usize;
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
pub fn adopt(index: usize, p: usize) -> usize {
    match REAL[index].compare_exchange(0, p, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            if !NAMES[index].to_bytes().starts_with(b"cuda") {
                context::learn_driver(p);
            }
            p
        }
        Err(existing) => existing,
    }
}

/// The hook whose real function is at `addr`, if one was found or adopted there.
pub fn is_real(addr: usize) -> Option<usize> {
    REAL.iter().position(|r| r.load(Ordering::Acquire) == addr)
}
