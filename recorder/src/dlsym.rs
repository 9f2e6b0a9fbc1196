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
//! `dlsym@GLIBC_2.2.5` (docs/interposition.md §5, item 1). It forwards to the `dlsym` after
//! this library in the search order, so a second interposer preloaded after vramtrace sees every
//! lookup. An interposer preloaded *before* vramtrace takes its "real" `dlsym` with
//! `dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5")`, which an unversioned definition does not
//! satisfy (glibc's `dlvsym` asks for the version as hidden): the exported `dlvsym` answers that
//! question with this library's `dlsym`, as a versioned export would (docs/interposition.md §6).

use crate::clock;
use crate::elfsym::{DlsymFn, cached, real_dlsym, real_dlvsym};
use crate::hooks::resolvers::substitute_named;
use crate::session;
use crate::table;
use std::ffi::{CStr, c_char, c_void};
use std::sync::atomic::AtomicUsize;
use vramtrace_format::conventions::{Heartbeat, env, heartbeat_name};

static NEXT_DLSYM: AtomicUsize = AtomicUsize::new(0);

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
    let Some(real) = next_dlsym() else {
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
    let Some(index) = table::find(bytes) else {
        return forward;
    };
    // SAFETY: the caller's own arguments; dlerror state is set by this call as the caller expects.
    let p = unsafe { real(handle, name) };
    if !p.is_null() {
        session::start_soon();
    }
    Route {
        value: substitute_named(index, p),
        done: 1,
    }
}

/// The exported `dlvsym`, a trampoline like [`dlsym`] (one more argument).
///
/// # Safety
/// Same contract as glibc's `dlvsym`.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlvsym(
    handle: *mut c_void,
    name: *const c_char,
    version: *const c_char,
) -> *mut c_void {
    core::arch::naked_asm!(
        "push rdi",
        "push rsi",
        "push rdx",
        "mov rcx, [rsp + 24]", // the caller's return address
        "call {route}",
        "mov r11, rdx", // route's `done`: rdx is the third argument again below
        "pop rdx",
        "pop rsi",
        "pop rdi",
        "test r11, r11",
        "jnz 2f",
        "jmp rax",
        "2:",
        "ret",
        route = sym route_versioned,
    )
}

/// `dlvsym(RTLD_NEXT, "dlsym", V)` from an object loaded before this library, and
/// `dlvsym(RTLD_DEFAULT, "dlsym", V)`, get this library's `dlsym`: what they would get if it
/// were exported under glibc's version names. Everything else goes to glibc's `dlvsym` with
/// the caller's return address intact.
extern "C" fn route_versioned(
    handle: *mut c_void,
    name: *const c_char,
    _version: *const c_char,
    caller: usize,
) -> Route {
    let Some(real) = real_dlvsym() else {
        return Route {
            value: std::ptr::null_mut(),
            done: 1,
        };
    };
    let h = handle as usize;
    let asks_dlsym = !name.is_null()
        // SAFETY: dlvsym's contract: `name` is a NUL-terminated string.
        && unsafe { CStr::from_ptr(name) }.to_bytes() == b"dlsym";
    if asks_dlsym && (h == RTLD_DEFAULT || (h == RTLD_NEXT && loaded_before_us(caller))) {
        return Route {
            value: dlsym as *const () as *mut c_void,
            done: 1,
        };
    }
    Route {
        value: real as *mut c_void,
        done: 0,
    }
}

/// The start of the dynamic loader's `struct link_map` (`<link.h>`, a public ABI).
#[repr(C)]
struct LinkMap {
    _addr: usize,
    _name: *const c_char,
    _dynamic: *const c_void,
    next: *const LinkMap,
}

unsafe extern "C" {
    fn dladdr1(
        addr: *const c_void,
        info: *mut libc::Dl_info,
        extra: *mut *mut c_void,
        flags: libc::c_int,
    ) -> libc::c_int;
}

/// `dladdr1`'s flag for the object's link map.
const RTLD_DL_LINKMAP: libc::c_int = 2;

/// The link map of the object holding `addr`.
fn link_map_of(addr: usize) -> *const LinkMap {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    let mut map: *mut c_void = std::ptr::null_mut();
    // SAFETY: dladdr1 only reads the loader's tables and fills `info` and `map`.
    let found = unsafe { dladdr1(addr as *const c_void, &mut info, &mut map, RTLD_DL_LINKMAP) };
    if found == 0 {
        std::ptr::null()
    } else {
        map.cast()
    }
}

/// True when the object holding `caller` comes before this library in the loader's list (the
/// order of the global search: the program, the preloads in order, then their dependencies).
fn loaded_before_us(caller: usize) -> bool {
    let ours = link_map_of(dlsym as *const () as usize);
    let mut map = link_map_of(caller);
    if ours.is_null() || map.is_null() || map == ours {
        return false;
    }
    while !map.is_null() {
        if map == ours {
            return true;
        }
        // SAFETY: a link map of the loader's list; `next` is null at its end.
        map = unsafe { (*map).next };
    }
    false
}

/// Finds the C library's `dlsym` and `dlvsym` and the next `dlsym` while the process loads
/// (this library's constructor): reading the loader's list
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
        let ours = dlsym as *const () as usize;
        Some(if next == 0 || next == ours {
            real as usize
        } else {
            next
        })
    })?;
    // SAFETY: a dlsym (the C library's or an interposer's with its signature).
    Some(unsafe { std::mem::transmute::<usize, DlsymFn>(p) })
}

extern "C" fn on_load() {
    find_dlsyms();
    // Tells `vramtrace record` that the preload was loaded at all (a process that never makes
    // a CUDA lookup leaves only this mark).
    if let Some(dir) = std::env::var_os(env::HEARTBEAT) {
        let mark = std::path::Path::new(&dir).join(heartbeat_name(clock::pid(), Heartbeat::Loaded));
        let _ = std::fs::write(mark, "");
    }
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = on_load;
