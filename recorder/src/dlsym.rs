//! The exported `dlsym`: a tail-jump trampoline that keeps the caller's identity.
//!
//! glibc resolves `RTLD_NEXT` (and the namespace of `RTLD_DEFAULT`) from the return address of
//! the `dlsym` call. A hook that forwards through an ordinary call makes itself the caller:
//! `dlsym(RTLD_NEXT, x)` from a library then finds the wrong `x`, the deadlock LLVM OpenMP's
//! `ompt_start_tool` hit under HAMi-core (PR #315). So the trampoline asks [`route`] what to do
//! and then either returns its answer or jumps to the real `dlsym` with the original arguments
//! and the original return address still on the stack.
//!
//! One unversioned export satisfies references to both `dlsym@GLIBC_2.34` and
//! `dlsym@GLIBC_2.2.5` (docs/interposition.md §5, item 1).

use crate::hooks;
use crate::lifecycle;
use crate::resolve::{real_dlsym, substitute_named};
use std::ffi::{CStr, c_char, c_void};

/// What the trampoline does next: `done == 0` jumps to `value` (the real `dlsym`) with the
/// original arguments; otherwise it returns `value`. Returned in `rax:rdx` (SysV ABI).
#[repr(C)]
pub struct Route {
    value: *mut c_void,
    done: usize,
}

/// The exported `dlsym`.
///
/// # Safety
/// Same contract as glibc's `dlsym`.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        // Keep the arguments; three pushes leave the stack 16-byte aligned for the call.
        "push rdi",
        "push rsi",
        "push rdi",
        "mov rdx, [rsp + 24]", // the caller's return address, for route's information
        "call {route}",
        "pop rdi",
        "pop rsi",
        "pop rdi",
        "test rdx, rdx",
        "jnz 2f",
        // Forward: the stack is as the caller left it, so glibc sees the caller's address.
        "jmp rax",
        "2:",
        "ret",
        route = sym route,
    )
}

const RTLD_NEXT: usize = usize::MAX; // ((void *) -1l)
const RTLD_DEFAULT: usize = 0;

/// Decides what a `dlsym` call gets. Names outside the hook table, and every `RTLD_NEXT` or
/// `RTLD_DEFAULT` lookup, go to the real `dlsym` untouched. A tracked name looked up in a
/// handle is resolved in that handle (the caller's identity plays no part there) and the
/// wrapper of that exact name is returned instead of the driver's function.
extern "C" fn route(handle: *mut c_void, name: *const c_char, _caller: usize) -> Route {
    let Some(real) = real_dlsym() else {
        return Route {
            value: std::ptr::null_mut(),
            done: 1,
        };
    };
    let forward = Route {
        value: real as *mut c_void,
        done: 0,
    };
    let h = handle as usize;
    if name.is_null() || h == RTLD_NEXT || h == RTLD_DEFAULT {
        return forward;
    }
    // SAFETY: dlsym's contract: `name` is a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
    if !bytes.starts_with(b"cu") {
        return forward;
    }
    let Some(index) = hooks::find(bytes) else {
        return forward;
    };
    // SAFETY: the caller's own arguments; dlerror state is set by this call as the caller expects.
    let p = unsafe { real(handle, name) };
    if !p.is_null() {
        lifecycle::start_soon();
    }
    Route {
        value: substitute_named(index, p),
        done: 1,
    }
}
