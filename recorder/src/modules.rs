//! The module map: every ELF object the dynamic linker has loaded, with what offline
//! symbolization needs (path, GNU build-id, where file offset 0 is mapped, size) and what the
//! in-process unwinder needs (the `.eh_frame_hdr` and `.eh_frame` bytes, in place in memory).
//!
//! Built with `dl_iterate_phdr`, which takes the loader's lock and allocates here: it runs when
//! recording starts and on the writer thread, never on the hook path. The writer notices
//! `dlopen`/`dlclose` by polling the loader's own counters ([`generation`]), the way bytehound
//! reloads its address space when `dlpi_adds`/`dlpi_subs` move (koute/bytehound
//! `preload/src/unwind.rs`) and heaptrack re-emits its module list when its cache is dirty
//! (KDE/heaptrack `src/track/libheaptrack.cpp`).

use std::ffi::{CStr, c_int, c_void};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Threads of this library inside `dl_iterate_phdr` now.
static INSIDE: AtomicU32 = AtomicU32::new(0);
/// Set while a thread forks: no new `dl_iterate_phdr` starts.
static FORKING: AtomicBool = AtomicBool::new(false);

pub type Callback = unsafe extern "C" fn(*mut libc::dl_phdr_info, usize, *mut c_void) -> c_int;

/// `dl_iterate_phdr`, never across a `fork`. It holds the loader's lock while it runs; a fork
/// child gets the lock in whatever state the parent's threads had it, so a child forked while
/// the writer thread was iterating would wait forever for a lock no thread of it holds the next
/// time anything iterates the modules. [`before_fork`] waits for such calls to end first.
///
/// # Safety
///
/// As `dl_iterate_phdr`: `callback` must be sound for `data`.
pub unsafe fn iterate(callback: Callback, data: *mut c_void) {
    loop {
        INSIDE.fetch_add(1, Ordering::SeqCst);
        if !FORKING.load(Ordering::SeqCst) {
            break;
        }
        INSIDE.fetch_sub(1, Ordering::SeqCst);
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
    // SAFETY: the caller's contract.
    unsafe { libc::dl_iterate_phdr(Some(callback), data) };
    INSIDE.fetch_sub(1, Ordering::SeqCst);
}

/// `pthread_atfork` prepare handler: holds new iterations back and waits for running ones, up
/// to a second (a thread that forks while it holds the loader's lock, from a constructor that
/// `dlopen` runs, would otherwise wait for an iteration that waits for it).
pub fn before_fork() {
    FORKING.store(true, Ordering::SeqCst);
    let deadline = crate::clock::now().saturating_add(1_000_000_000);
    while INSIDE.load(Ordering::SeqCst) != 0 && crate::clock::now() < deadline {
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
}

/// After the fork, in the parent (the child's other threads are gone: nothing is inside).
pub fn after_fork(in_child: bool) {
    if in_child {
        INSIDE.store(0, Ordering::SeqCst);
    }
    FORKING.store(false, Ordering::SeqCst);
}

/// One loaded object.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// File path; the main program's comes from `/proc/self/exe`.
    pub path: String,
    /// GNU build-id note contents, empty when none.
    pub build_id: Vec<u8>,
    /// Where file offset 0 is mapped.
    pub load_address: u64,
    /// Bytes from `load_address` to the end of the last loadable segment.
    pub size: u64,
    /// The load bias (`dlpi_addr`): a stated address `s` is at `bias + s` in memory.
    pub bias: u64,
    /// The loadable segments, in memory (actual addresses).
    pub range: Range<u64>,
    /// `.eh_frame_hdr`, when the object has one: its stated address and its bytes.
    pub eh_frame_hdr: Option<(u64, &'static [u8])>,
    /// `.eh_frame`, found through `.eh_frame_hdr`: its stated address and the bytes up to the
    /// end of the segment that holds it (the exact length is not recorded anywhere in memory).
    pub eh_frame: Option<(u64, &'static [u8])>,
}

impl Loaded {
    /// Whether `address` lies in one of the object's loadable segments' span.
    pub fn contains(&self, address: u64) -> bool {
        self.range.contains(&address)
    }
}

/// The loader's load and unload counters (`dlpi_adds`, `dlpi_subs`): a pair that changes
/// whenever an object was loaded or unloaded since the last call. Cheap: it stops after the
/// first object.
pub fn generation() -> (u64, u64) {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        size: usize,
        out: *mut c_void,
    ) -> c_int {
        if size >= std::mem::size_of::<libc::dl_phdr_info>() {
            // SAFETY: the loader passes a valid info of `size` bytes; `out` is the pair below.
            unsafe {
                *(out as *mut (u64, u64)) = ((*info).dlpi_adds, (*info).dlpi_subs);
            }
        }
        1
    }
    let mut pair = (0u64, 0u64);
    // SAFETY: the callback only reads the info it is handed and writes `pair`.
    unsafe { iterate(first, (&raw mut pair).cast()) };
    pair
}

/// Every loaded object, in the loader's order (the main program first).
pub fn scan() -> Vec<Loaded> {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        out: *mut c_void,
    ) -> c_int {
        // SAFETY: the loader passes a valid info whose program headers and segments are mapped
        // for the duration of the callback; `out` is the vector below.
        unsafe {
            let list = &mut *(out as *mut Vec<Loaded>);
            if let Some(m) = describe(&*info, list.is_empty()) {
                list.push(m);
            }
        }
        0
    }
    let mut list: Vec<Loaded> = Vec::new();
    // SAFETY: the callback is panic-free and only reads loader-provided memory.
    unsafe { iterate(each, (&raw mut list).cast()) };
    list
}

/// The object described by one `dl_iterate_phdr` entry.
///
/// # Safety
/// `info` comes from `dl_iterate_phdr`, inside its callback.
unsafe fn describe(info: &libc::dl_phdr_info, first: bool) -> Option<Loaded> {
    if info.dlpi_phdr.is_null() || info.dlpi_phnum == 0 {
        return None;
    }
    // SAFETY: the loader's program header table of `dlpi_phnum` entries.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let bias = info.dlpi_addr;
    let loads = || phdrs.iter().filter(|p| p.p_type == libc::PT_LOAD);
    let lowest = loads().min_by_key(|p| p.p_vaddr)?;
    let start = bias.wrapping_add(lowest.p_vaddr);
    let end = loads()
        .map(|p| bias.wrapping_add(p.p_vaddr).wrapping_add(p.p_memsz))
        .max()?;
    let load_address = start.wrapping_sub(lowest.p_offset);
    // Readable memory of a loadable segment, as a static slice.
    let mapped = |svma: u64, len: u64| -> Option<&'static [u8]> {
        let inside = |p: &libc::Elf64_Phdr| {
            p.p_flags & libc::PF_R != 0
                && svma >= p.p_vaddr
                && matches!(
                    (svma.checked_add(len), p.p_vaddr.checked_add(p.p_filesz)),
                    (Some(a), Some(b)) if a <= b
                )
        };
        if !loads().any(inside) {
            return None;
        }
        // SAFETY: inside the file-backed part of a readable loadable segment, which stays
        // mapped while the object is loaded.
        Some(unsafe {
            std::slice::from_raw_parts(bias.wrapping_add(svma) as *const u8, len as usize)
        })
    };

    let name = if info.dlpi_name.is_null() {
        ""
    } else {
        // SAFETY: a NUL-terminated string owned by the loader.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_str()
            .unwrap_or("")
    };
    let path = if name.is_empty() && first {
        std::fs::read_link("/proc/self/exe")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    } else {
        name.to_string()
    };

    let build_id = phdrs
        .iter()
        .filter(|p| p.p_type == libc::PT_NOTE)
        .filter_map(|p| mapped(p.p_vaddr, p.p_filesz))
        .find_map(gnu_build_id)
        .unwrap_or_default();

    let mut eh_frame_hdr = None;
    let mut eh_frame = None;
    if let Some(p) = phdrs.iter().find(|p| p.p_type == libc::PT_GNU_EH_FRAME)
        && let Some(hdr) = mapped(p.p_vaddr, p.p_filesz)
    {
        eh_frame_hdr = Some((p.p_vaddr, hdr));
        eh_frame = eh_frame_address(p.p_vaddr, hdr).and_then(|svma| {
            let seg = loads().find(|s| svma >= s.p_vaddr && svma - s.p_vaddr < s.p_filesz)?;
            let len = seg.p_filesz - (svma - seg.p_vaddr);
            Some((svma, mapped(svma, len)?))
        });
    }

    Some(Loaded {
        path,
        build_id,
        load_address,
        size: end.wrapping_sub(load_address),
        bias,
        range: start..end,
        eh_frame_hdr,
        eh_frame,
    })
}

/// The `NT_GNU_BUILD_ID` descriptor in a note segment.
fn gnu_build_id(notes: &[u8]) -> Option<Vec<u8>> {
    let u32_at = |o: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(notes.get(o..o + 4)?.try_into().ok()?))
    };
    let align4 = |n: usize| n.checked_add(3).map(|n| n & !3);
    let mut at = 0usize;
    while at + 12 <= notes.len() {
        let namesz = u32_at(at)? as usize;
        let descsz = u32_at(at + 4)? as usize;
        let kind = u32_at(at + 8)?;
        let name_at = at + 12;
        let desc_at = name_at.checked_add(align4(namesz)?)?;
        let next = desc_at.checked_add(align4(descsz)?)?;
        if kind == 3 && notes.get(name_at..name_at + namesz) == Some(b"GNU\0".as_slice()) {
            return notes.get(desc_at..desc_at + descsz).map(<[u8]>::to_vec);
        }
        at = next;
    }
    None
}

/// The stated address of `.eh_frame`, from the `eh_frame_ptr` field of `.eh_frame_hdr` (LSB
/// "Linux Standard Base Core Specification", section "The .eh_frame_hdr section").
fn eh_frame_address(hdr_svma: u64, hdr: &[u8]) -> Option<u64> {
    const PCREL: u8 = 0x10;
    let (&version, rest) = hdr.split_first()?;
    if version != 1 {
        return None;
    }
    let enc = *rest.first()?;
    let field = hdr.get(4..)?;
    let value = match enc & 0x0f {
        0x00 => u64::from_le_bytes(field.get(..8)?.try_into().ok()?),
        0x03 => u64::from(u32::from_le_bytes(field.get(..4)?.try_into().ok()?)),
        0x0b => i64::from(i32::from_le_bytes(field.get(..4)?.try_into().ok()?)) as u64,
        0x0c => u64::from_le_bytes(field.get(..8)?.try_into().ok()?),
        _ => return None,
    };
    match enc & 0x70 {
        0 => Some(value),
        PCREL => Some((hdr_svma + 4).wrapping_add(value)),
        _ => None,
    }
}

/// The module holding `address`, among `modules`.
pub fn find(modules: &[Loaded], address: u64) -> Option<&Loaded> {
    modules.iter().find(|m| m.contains(address))
}

/// The actual address range of this library (`libvramtrace_preload.so`) in `modules`, whose
/// frames a captured stack leaves out.
pub fn own_range(modules: &[Loaded]) -> Range<u64> {
    let here = own_range as *const () as u64;
    find(modules, here).map_or(0..0, |m| m.range.clone())
}
