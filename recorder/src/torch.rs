//! PyTorch's own allocator events, with its allocator unchanged: a trace tracker attached to the
//! CUDA caching allocator (`docs/torch-tracker.md` has the route and what proved it on a GPU).
//!
//! PyTorch's caching allocator calls every attached `AllocatorTraceTracker`
//! (`std::function<void(const TraceEntry&)>`) for every allocation, free and segment action, with
//! its memory history off too (pytorch/pytorch `c10/cuda/CUDACachingAllocator.cpp`,
//! `record_trace`). The attach function is an inline header function over a virtual method, so
//! the recorder calls that method through the vtable of the object behind the exported
//! `c10::cuda::CUDACachingAllocator::allocator` pointer, passing a `std::function` it builds by
//! hand (libstdc++: two words of functor storage, then the manager and the invoker; the
//! Itanium C++ ABI passes it by address and the caller destroys it). Slots and offsets come
//! from [`TORCH_LAYOUTS`], chosen by the version in the wheel's `torch/version.py`.
//!
//! # When
//!
//! On the hooks of the driver calls that PyTorch's allocator makes for its segments
//! (`cuMemAlloc_v2`, `cuMemAddressReserve`, `cuMemMap`: [`attach_if_ready`]). Until
//! `libc10_cuda.so` is found, a hook compares the loader's load counters with the last ones it
//! saw (one `dl_iterate_phdr` step) and, when they moved, looks for the library
//! (`dlopen(RTLD_NOLOAD)`), the pointer and the version; an unknown version gets one warning line
//! and the process is recorded from its driver calls alone. Once found, the first such hook that
//! finds the allocator initialized attaches. PyTorch's first tensor needs a segment, and the
//! allocator reports that segment only after the driver call returned, so the tracker sees the
//! first segment and every tensor. The attach takes the allocator's per-device locks, which the
//! hooking thread may already hold (they are recursive); a second thread that arrives meanwhile
//! does not wait, it goes on.
//!
//! # The callback
//!
//! It runs on the allocating thread under the allocator's lock: no GIL, no Python, no lock, no
//! allocation. It decodes the entry and pushes one journal record, with a stack for the
//! events that bring memory in, exactly as a driver hook does.
//!
//! A tensor gives three entries, and the recording cost of an allocation-heavy program is
//! mostly their number (recorder/BENCHMARKS.md). Its `free()` reports `FREE_REQUESTED`, then,
//! when the block has no uses on other streams, `FREE_COMPLETED` of the same block at once (in
//! `free_block`, same call, same lock). The callback therefore holds a `free_requested` back
//! in a thread-local slot, and writes it together with that `free_completed` as one record: a
//! `torch.free_completed` with the flag `WITH_FREE_REQUEST` (formats/SPEC.md §4.2). Any other
//! next entry on the thread writes the held one first, on its own, with its own time.
//!
//! What holding back costs in durability (the journal's promise, `ring`, is per record):
//! a held `free_requested` is in no journal record until the thread's next tracker entry. Only
//! a request whose completion PyTorch deferred (the block has uses on other streams:
//! `record_stream`) stays held after `free()` returns, at most one per thread. Such a request
//! is lost when the process is killed (`SIGKILL`, a fatal signal) or the thread ends before the
//! thread's next entry; at a normal exit the exiting thread's is written ([`release_held`]).
//! A `free_completed`, the event the replay frees at, is never held. A kill between the two
//! entries of one `free()` loses the request of a free that did not complete.

use crate::held::take_held;
use crate::hot::HOT;
use crate::stamps::{self, Part};
use crate::{config, elfsym, modules, ring, session, thread};
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use vramtrace_format::conventions::WITH_FREE_REQUEST;
use vramtrace_format::journal::Record;
use vramtrace_format::{Api, EntryLayout, Event, TORCH_LAYOUTS, TorchLayout, parse_torch_version};

/// Not seen yet (or not loaded).
const UNSEEN: u8 = 0;
/// Found and of a known version; not attached yet.
const FOUND: u8 = 1;
/// One hook is looking or attaching.
const BUSY: u8 = 2;
const ATTACHED: u8 = 3;
/// Never in this process: unknown version, another back-end, or switched off.
const OFF: u8 = 4;

static STATE: AtomicU8 = AtomicU8::new(UNSEEN);
/// Address of the `std::atomic<CUDAAllocator*>` in `libc10_cuda.so`.
static ALLOCATOR: AtomicUsize = AtomicUsize::new(0);
/// Index into [`TORCH_LAYOUTS`].
static LAYOUT: AtomicUsize = AtomicUsize::new(0);
/// The loader counters [`discover`] last looked at (`adds << 32 | subs`, truncated).
static SEEN_GENERATION: AtomicU64 = AtomicU64::new(u64::MAX);

/// libstdc++'s `std::function<void(const TraceEntry&)>`: `_Any_data` (two words), then
/// `_M_manager` and `_M_invoker`.
#[repr(C)]
struct StdFunction {
    storage: [usize; 2],
    manager: Option<Manager>,
    invoker: Invoker,
}

/// `bool _M_manager(_Any_data& dest, const _Any_data& source, _Manager_operation op)`.
type Manager = unsafe extern "C" fn(*mut [usize; 2], *const [usize; 2], c_int) -> bool;
/// `void _M_invoker(const _Any_data& functor, const TraceEntry& entry)`.
type Invoker = unsafe extern "C" fn(*const [usize; 2], *const u8);

/// libstdc++ `_Manager_operation` values.
const GET_TYPE_INFO: c_int = 0;
const GET_FUNCTOR_PTR: c_int = 1;
const CLONE_FUNCTOR: c_int = 2;
const DESTROY_FUNCTOR: c_int = 3;

/// Our functor is stateless and stored in place: a clone copies the two words, a destroy does
/// nothing, and it has no type_info to give.
unsafe extern "C" fn manage(dest: *mut [usize; 2], source: *const [usize; 2], op: c_int) -> bool {
    // SAFETY: libstdc++ passes valid `_Any_data` storage for both operands.
    unsafe {
        match op {
            GET_TYPE_INFO => (*dest)[0] = 0,
            GET_FUNCTOR_PTR => (*dest)[0] = source as usize,
            CLONE_FUNCTOR => *dest = *source,
            _ => {}
        }
    }
    false
}

/// The tracker: one `TraceEntry` in, one journal record out, except that a `free_requested` is
/// held back on its thread (`thread::PerThread`) until the next entry there, so that it and the `free_completed` of
/// the same block that PyTorch's `free()` reports right after it (no uses on other streams)
/// become one record ([`WITH_FREE_REQUEST`]). Any other next entry publishes it on its own
/// first, with its own time.
unsafe extern "C" fn invoke(_functor: *const [usize; 2], entry: *const u8) {
    if entry.is_null() || !ring::wanted() {
        return;
    }
    stamps::begin(Part::Decode);
    session::start_if_needed();
    let layout = EntryLayout::from_word(HOT.torch_entry.load(Ordering::Relaxed));
    // SAFETY: the allocator passes a live `TraceEntry`, `size_of` bytes for this version (0
    // before a version was found: an empty slice, which decodes to nothing).
    let bytes = unsafe { std::slice::from_raw_parts(entry, usize::from(layout.size_of)) };
    let Some(e) = layout.decode(bytes) else {
        stamps::end();
        return;
    };
    if crate::bench::has(crate::bench::RECORD) {
        stamps::end();
        return;
    }
    stamps::enter(Part::Held);
    if let Some(mut held) = take_held() {
        if e.api == Api::TorchFreeCompleted && same_block(&held, &e) {
            held.api = e.api.id();
            held.flags |= WITH_FREE_REQUEST;
            ring::push(&mut held);
            stamps::end();
            return;
        }
        ring::push(&mut held);
    }
    stamps::enter(Part::Clock);
    let now = crate::clock::now();
    stamps::enter(Part::Record);
    let mut rec = ring::record_of(Some(e.api), now, now, e.result);
    rec.device = e.device;
    rec.address = e.address;
    rec.size = e.size;
    rec.stream = e.stream;
    rec.pool = e.pool;
    rec.handle = e.handle;
    rec.aux = e.aux;
    if e.api == Api::TorchFreeRequested {
        let t = thread::this();
        t.held.set(rec);
        t.has_held.set(true);
    } else {
        ring::push(&mut rec);
        stamps::enter(Part::Exit);
        if e.result != 0 {
            crate::torch_limits::after_oom();
        }
    }
    stamps::end();
}

/// Whether entry `e` is about the block of the held `free_requested` record.
fn same_block(held: &Record, e: &Event) -> bool {
    (
        held.address,
        held.size,
        held.device,
        held.stream,
        held.pool,
        held.handle,
    ) == (e.address, e.size, e.device, e.stream, e.pool, e.handle)
}

/// On the hooks of driver allocations: finds PyTorch and attaches the tracker once it can be.
#[inline]
pub fn attach_if_ready() {
    if matches!(STATE.load(Ordering::Relaxed), UNSEEN | FOUND) {
        attach_now();
    }
}

#[cold]
fn attach_now() {
    let from = STATE.load(Ordering::Acquire);
    if !matches!(from, UNSEEN | FOUND)
        || STATE
            .compare_exchange(from, BUSY, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    let mut state = from;
    if state == UNSEEN {
        state = discover();
    }
    if state == FOUND {
        // SAFETY: ALLOCATOR and LAYOUT were published (FOUND) for this libc10_cuda.so.
        state = unsafe { try_attach() };
    }
    STATE.store(state, Ordering::Release);
}

/// Looks for `libc10_cuda.so` when the loader's counters moved: FOUND (pointer and layout
/// published), OFF (refused, warned), or UNSEEN (not loaded yet).
fn discover() -> u8 {
    let cfg = config::get();
    if cfg.requests || !cfg.torch_tracker {
        return OFF;
    }
    let (adds, subs) = modules::generation();
    let generation = adds << 32 | (subs & 0xffff_ffff);
    if SEEN_GENERATION.swap(generation, Ordering::Relaxed) == generation {
        return UNSEEN;
    }
    // SAFETY: RTLD_NOLOAD only finds an object that is already loaded; the name is a C string.
    let handle = unsafe {
        libc::dlopen(
            c"libc10_cuda.so".as_ptr(),
            libc::RTLD_NOLOAD | libc::RTLD_LAZY,
        )
    };
    if handle.is_null() {
        return UNSEEN;
    }
    let found = find(handle);
    // SAFETY: balances the reference the dlopen above took; the object stays loaded by torch.
    unsafe { libc::dlclose(handle) };
    match found {
        Ok((cell, layout)) => {
            ALLOCATOR.store(cell, Ordering::Relaxed);
            LAYOUT.store(layout, Ordering::Relaxed);
            if let Some(l) = TORCH_LAYOUTS.get(layout) {
                HOT.torch_entry.store(l.entry.to_word(), Ordering::Relaxed);
            }
            FOUND
        }
        Err(why) => {
            let msg = format!(
                "vramtrace: {why}; recording PyTorch's segments from the driver calls only \
                 (`vramtrace record --requests` records one event per tensor)\n"
            );
            // SAFETY: write(2) of a valid buffer; the result is irrelevant.
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
            OFF
        }
    }
}

/// The allocator pointer's address and the layout of the loaded `libc10_cuda.so`.
fn find(handle: *mut c_void) -> Result<(usize, usize), String> {
    let dlsym = elfsym::real_dlsym().ok_or("no dlsym")?;
    let symbol = TORCH_LAYOUTS
        .iter()
        .map(|l| l.allocator_symbol)
        .find_map(|name| {
            let name = std::ffi::CString::new(name).ok()?;
            // SAFETY: glibc's dlsym with a live handle and a C string.
            let p = unsafe { dlsym(handle, name.as_ptr()) };
            (!p.is_null()).then_some(p)
        })
        .ok_or("libc10_cuda.so exports no CUDA allocator pointer")?;
    // SAFETY: dladdr fills `info` for an address inside a loaded object.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    if unsafe { libc::dladdr(symbol, &mut info) } == 0 || info.dli_fname.is_null() {
        return Err("cannot tell where libc10_cuda.so was loaded from".into());
    }
    // SAFETY: dladdr's file name is a C string owned by the loader.
    let lib = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy();
    let root = std::path::Path::new(lib.as_ref())
        .parent()
        .and_then(|d| d.parent())
        .ok_or("libc10_cuda.so has no parent folder")?;
    let text = ["version.py", "build-version"]
        .iter()
        .find_map(|f| std::fs::read_to_string(root.join(f)).ok())
        .ok_or_else(|| format!("cannot tell the version of PyTorch in {}", root.display()))?;
    let version = parse_torch_version(&text)
        .ok_or_else(|| format!("cannot read the version of PyTorch in {}", root.display()))?;
    let layout = TorchLayout::for_version(version).ok_or_else(|| {
        let known: Vec<&str> = TORCH_LAYOUTS.iter().map(|l| l.version_prefix).collect();
        format!(
            "PyTorch {version} is not a version whose allocator tracker this recorder knows ({})",
            known.join(", ")
        )
    })?;
    let index = TORCH_LAYOUTS
        .iter()
        .position(|l| std::ptr::eq(l, layout))
        .unwrap_or(0);
    Ok((symbol as usize, index))
}

/// # Safety
/// [`ALLOCATOR`] is the address of the exported allocator pointer of a `libc10_cuda.so` whose
/// version has the layout [`LAYOUT`].
unsafe fn try_attach() -> u8 {
    let Some(layout) = TORCH_LAYOUTS.get(LAYOUT.load(Ordering::Relaxed)) else {
        return OFF;
    };
    // SAFETY: the exported object is a `std::atomic<CUDAAllocator*>`: a pointer, read atomically.
    let allocator = unsafe {
        (*(ALLOCATOR.load(Ordering::Relaxed) as *const AtomicPtr<c_void>)).load(Ordering::Acquire)
    };
    if allocator.is_null() {
        return FOUND;
    }
    // SAFETY: a polymorphic object starts with its vtable pointer; the word before the vtable's
    // first slot is its `std::type_info`, whose second word is the mangled name (Itanium ABI).
    let (vtable, name) = unsafe {
        let vtable = *(allocator as *const *const usize);
        let type_info = *vtable.sub(1) as *const usize;
        (vtable, CStr::from_ptr(*type_info.add(1) as *const c_char))
    };
    let name = name.to_bytes();
    if name.strip_prefix(b"*").unwrap_or(name) != layout.native_type_name.as_bytes() {
        // Another back-end (cudaMallocAsync, a pluggable allocator): its driver calls say it all.
        return OFF;
    }
    type Initialized = unsafe extern "C" fn(*mut c_void) -> bool;
    type Attach = unsafe extern "C" fn(*mut c_void, *mut StdFunction);
    // SAFETY: the slots of this version's `CUDAAllocator` vtable (TORCH_LAYOUTS), called with
    // `this` first as the Itanium ABI passes it.
    unsafe {
        let initialized: Initialized = std::mem::transmute(*vtable.add(layout.slot_initialized));
        if !initialized(allocator) {
            return FOUND;
        }
        let attach: Attach = std::mem::transmute(*vtable.add(layout.slot_attach));
        let mut tracker = StdFunction {
            storage: [0; 2],
            manager: Some(manage),
            invoker: invoke,
        };
        attach(allocator, &mut tracker);
        // The caller destroys a by-value argument (left empty if the callee moved from it).
        if let Some(m) = tracker.manager {
            m(&mut tracker.storage, &tracker.storage, DESTROY_FUNCTOR);
        }
        crate::torch_limits::at_attach(allocator, vtable, layout);
    }
    ATTACHED
}
