//! The autograd node an engine thread is evaluating: the name of a backward allocation that has
//! no Python frame (`docs/python-frames.md`, "Backward passes").
//!
//! PyTorch runs a CUDA backward pass on one engine thread per device, which it names
//! `pt_autograd_<device>` (`Engine::thread_init`), and which runs no Python. Around each node
//! it evaluates, the engine sets a thread-local `std::shared_ptr<Node>` (`NodeGuard` in
//! `Engine::thread_main`, pytorch/pytorch `torch/csrc/autograd/engine.cpp`), which
//! `libtorch_cpu.so` exports a getter of: `std::shared_ptr<Node>
//! torch::autograd::get_current_node()` (`torch/csrc/autograd/function.cpp`), mangled
//! `_ZN5torch8autograd16get_current_nodeEv`. It reads the calling thread's own thread-local: no
//! GIL, no lock, no allocation on a thread whose thread-local exists (an engine thread's: the
//! guard made it). Its result is a `shared_ptr`, not trivially copyable, so the Itanium C++ ABI
//! returns it through a hidden pointer the caller passes first (the `sret` argument), and the
//! caller owns the reference it holds.
//!
//! On the hook path ([`node_word`], for a capture that found no Python frame): on an engine
//! thread only, one call of the getter, the node's first word (its vtable: a polymorphic object
//! starts with it, Itanium ABI), and the reference given back by a decrement of the use count
//! of libstdc++'s control block (`_Sp_counted_base`: its vtable, then `_M_use_count` and
//! `_M_weak_count`, two `int`s). The engine's guard holds a reference to the node for as long
//! as the node runs on this thread, so the reference given back is never the last; a count of
//! 1 would be (the decrement would destroy the node on the hook path), and is left as it is.
//! The stack's word is the vtable's address, tagged ([`NODE_TAG`]).
//!
//! Off the hook path ([`node_type`], the writer thread, once per distinct vtable): the word
//! before the vtable's first slot is the class's `std::type_info`, whose second word is its
//! mangled name (Itanium ABI, as `torch` reads the allocator's), which
//! `vramtrace_format::conventions::autograd_node_name` turns into the node's name.

use crate::{elfsym, modules, thread};
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};

/// Marks a stack word as an autograd node's vtable address: bit 63 clear (not a Python
/// frame's first word, `python::TAG`), bit 62 set (native return addresses are user-space
/// addresses, below 2^47).
pub const NODE_TAG: u64 = 1 << 62;

/// [`thread::PerThread::engine`]: one of PyTorch's autograd engine threads.
pub const ENGINE: u8 = 1;
/// [`thread::PerThread::engine`]: another thread.
pub const OTHER: u8 = 2;

/// How PyTorch names its autograd engine threads (engine.cpp, `Engine::thread_init`).
const ENGINE_NAME: &[u8] = b"pt_autograd_";

/// `get_current_node`'s address, 0 while not found.
static GETTER: AtomicUsize = AtomicUsize::new(0);
/// The loader counters the getter was last looked for at (`adds << 32 | subs`, truncated).
static LOOKED_AT: AtomicU64 = AtomicU64::new(u64::MAX);

/// libstdc++'s `std::shared_ptr<Node>`: the object, then the control block.
#[repr(C)]
struct SharedPtr {
    node: *const u64,
    control: *const u8,
}

/// `std::shared_ptr<Node> get_current_node()`, its result through the hidden pointer.
type Getter = unsafe extern "C" fn(*mut SharedPtr);

/// The tagged vtable address of the node the calling thread's autograd engine evaluates, if it
/// is an engine thread and a node runs. The hook path.
#[inline]
pub fn node_word() -> Option<u64> {
    let t = thread::this();
    let engine = match t.engine.get() {
        0 => {
            let e = if named_as_engine() { ENGINE } else { OTHER };
            t.engine.set(e);
            e
        }
        e => e,
    };
    if engine != ENGINE {
        return None;
    }
    let getter = getter()?;
    let mut current = SharedPtr {
        node: std::ptr::null(),
        control: std::ptr::null(),
    };
    // SAFETY: libtorch_cpu's `get_current_node`, which writes a `shared_ptr` into the hidden
    // result pointer (its only argument).
    unsafe { getter(&mut current) };
    if current.node.is_null() {
        return None;
    }
    // SAFETY: a live polymorphic `Node` (the engine's guard holds it), whose first word is its
    // vtable pointer.
    let vtable = unsafe { current.node.read() };
    if !current.control.is_null() {
        // SAFETY: the live control block of the reference we hold; `_M_use_count` is the `int`
        // after its vtable pointer, only ever changed atomically in a threaded process.
        let uses = unsafe { &*(current.control.add(8) as *const AtomicI32) };
        let _ = uses.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
            (n > 1).then_some(n - 1)
        });
    }
    let plausible = vtable != 0 && vtable.is_multiple_of(8) && vtable < 1 << 47;
    plausible.then_some(NODE_TAG | vtable)
}

/// Whether the calling thread has the name PyTorch gives its engine threads (one system call,
/// once per thread).
fn named_as_engine() -> bool {
    let mut name = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL included.
    unsafe {
        libc::prctl(
            libc::PR_GET_NAME,
            name.as_mut_ptr() as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    name.starts_with(ENGINE_NAME)
}

/// The getter, looked for in `libtorch_cpu.so` when it is not known and the loader's counters
/// moved since the last look (once per `dlopen`, not per allocation).
fn getter() -> Option<Getter> {
    let known = GETTER.load(Ordering::Relaxed);
    let p = if known != 0 {
        known
    } else {
        let (adds, subs) = modules::generation();
        let generation = adds << 32 | (subs & 0xffff_ffff);
        if LOOKED_AT.swap(generation, Ordering::Relaxed) == generation {
            return None;
        }
        let found = find_getter()?;
        GETTER.store(found, Ordering::Relaxed);
        found
    };
    // SAFETY: the address of `get_current_node`, which has this signature.
    Some(unsafe { std::mem::transmute::<usize, Getter>(p) })
}

#[cold]
fn find_getter() -> Option<usize> {
    let dlsym = elfsym::real_dlsym()?;
    // SAFETY: RTLD_NOLOAD only finds an object that is already loaded; the name is a C string.
    let handle = unsafe {
        libc::dlopen(
            c"libtorch_cpu.so".as_ptr(),
            libc::RTLD_NOLOAD | libc::RTLD_LAZY,
        )
    };
    if handle.is_null() {
        return None;
    }
    // SAFETY: glibc's dlsym with a live handle and a C string.
    let p = unsafe { dlsym(handle, c"_ZN5torch8autograd16get_current_nodeEv".as_ptr()) };
    // SAFETY: balances the reference the dlopen above took; the object stays loaded by torch.
    unsafe { libc::dlclose(handle) };
    (!p.is_null()).then_some(p as usize)
}

/// The mangled type name of the class whose vtable is at `vtable` (a [`node_word`] without its
/// tag), reading only memory that `mapped` says lies in a loaded object. The writer thread.
pub fn node_type(vtable: u64, mapped: impl Fn(u64) -> bool) -> Option<String> {
    let word = |at: u64| -> Option<u64> {
        // SAFETY: inside a loaded object's segments, 8-byte aligned.
        (at.is_multiple_of(8) && mapped(at) && mapped(at + 7))
            .then(|| unsafe { (at as *const u64).read() })
    };
    let type_info = word(vtable.checked_sub(8)?)?;
    let name = word(type_info.checked_add(8)?)?;
    let mut bytes = Vec::new();
    for at in name..name.saturating_add(512) {
        if !mapped(at) {
            return None;
        }
        // SAFETY: inside a loaded object's segments.
        match unsafe { (at as *const u8).read() } {
            0 => break,
            b => bytes.push(b),
        }
    }
    if bytes.len() == 512 {
        return None;
    }
    // A type_info's name may start with `*` (a type local to its object, GCC).
    let bytes = bytes.strip_prefix(b"*").unwrap_or(&bytes);
    Some(String::from_utf8_lossy(bytes).into_owned())
}
