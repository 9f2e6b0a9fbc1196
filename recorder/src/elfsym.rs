//! The C library's own `dlsym` and `dlvsym`, read from its dynamic symbol table, and kept.
//!
//! The recorder exports both names (`dlsym`, `dlvsym`), and the dynamic loader binds the
//! recorder's own references to them to those exports, so neither can be asked for the other
//! (docs/interposition.md §5, item 1). This finds the default version of a function in the
//! loaded `libc.so.6` (or `libdl.so.2`, where glibc before 2.34 keeps them) by the GNU hash
//! table of its dynamic section, the lookup `ld.so` itself does (ELF gABI "Dynamic Section";
//! the GNU hash layout of glibc `elf/dl-lookup.c`). It calls nothing that can be interposed:
//! `dl_iterate_phdr` (through `modules::iterate`, which keeps it out of a fork) and reads of
//! mapped memory.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

pub type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
pub type DlvsymFn = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char) -> *mut c_void;

static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);
static REAL_DLVSYM: AtomicUsize = AtomicUsize::new(0);

/// `slot`'s value, computed by `find` on first use (0 stays "not found" and is asked again).
pub fn cached(slot: &AtomicUsize, find: impl FnOnce() -> Option<usize>) -> Option<usize> {
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
    let p = cached(&REAL_DLSYM, || c_library_function(c"dlsym"))?;
    // SAFETY: the C library's dlsym, which has this signature.
    Some(unsafe { std::mem::transmute::<usize, DlsymFn>(p) })
}

/// The C library's own `dlvsym`.
pub fn real_dlvsym() -> Option<DlvsymFn> {
    let p = cached(&REAL_DLVSYM, || c_library_function(c"dlvsym"))?;
    // SAFETY: the C library's dlvsym, which has this signature.
    Some(unsafe { std::mem::transmute::<usize, DlvsymFn>(p) })
}

const PT_DYNAMIC: u32 = 2;
const DT_NULL: i64 = 0;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_GNU_HASH: i64 = 0x6fff_fef5;
const DT_VERSYM: i64 = 0x6fff_fff0;
/// A `versym` entry's bit for a hidden (non-default) version.
const VERSYM_HIDDEN: u16 = 0x8000;

#[repr(C)]
struct Dyn {
    tag: i64,
    val: u64,
}

#[repr(C)]
struct Sym {
    name: u32,
    info: u8,
    other: u8,
    shndx: u16,
    value: u64,
    size: u64,
}

struct Query<'a> {
    name: &'a [u8],
    found: usize,
}

/// The address of the default version of `name` defined by the loaded C library, if any.
pub fn c_library_function(name: &CStr) -> Option<usize> {
    let mut q = Query {
        name: name.to_bytes(),
        found: 0,
    };
    // SAFETY: the callback matches dl_iterate_phdr's contract and `q` outlives the call;
    // through `modules::iterate`, which never runs across a fork (a lookup not found while the
    // process loaded is asked again later, on any thread).
    unsafe { crate::modules::iterate(visit, (&raw mut q).cast()) };
    (q.found != 0).then_some(q.found)
}

unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid info and our own Query.
    let (info, q) = unsafe { (&*info, &mut *data.cast::<Query>()) };
    if info.dlpi_name.is_null() || info.dlpi_phdr.is_null() {
        return 0;
    }
    // SAFETY: the loader's NUL-terminated name of a loaded object.
    let path = unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes();
    let file = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    if !(file.starts_with(b"libc.so") || file.starts_with(b"libdl.so")) {
        return 0;
    }
    // SAFETY: the object's program headers, as the loader describes them.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let Some(dynamic) = phdrs.iter().find(|p| p.p_type == PT_DYNAMIC) else {
        return 0;
    };
    let base = info.dlpi_addr;
    // SAFETY: the dynamic section of a loaded object is mapped and ends with DT_NULL.
    match unsafe { lookup(base, (base + dynamic.p_vaddr) as *const Dyn, q.name) } {
        Some(addr) => {
            q.found = addr;
            1
        }
        None => 0,
    }
}

/// Looks `name` up in the GNU hash table of the object at `base` with dynamic section `dynamic`.
///
/// # Safety
/// `dynamic` is the mapped dynamic section of the loaded object at `base`.
unsafe fn lookup(base: u64, mut dynamic: *const Dyn, name: &[u8]) -> Option<usize> {
    let (mut strtab, mut symtab, mut gnu_hash, mut versym) = (0u64, 0u64, 0u64, 0u64);
    // SAFETY: the caller's contract; entries are read up to DT_NULL.
    unsafe {
        while (*dynamic).tag != DT_NULL {
            let slot = match (*dynamic).tag {
                DT_STRTAB => &mut strtab,
                DT_SYMTAB => &mut symtab,
                DT_GNU_HASH => &mut gnu_hash,
                DT_VERSYM => &mut versym,
                _ => {
                    dynamic = dynamic.add(1);
                    continue;
                }
            };
            // glibc relocates these addresses in place; a loader that does not leaves them
            // relative to the load address.
            let v = (*dynamic).val;
            *slot = if v < base { v + base } else { v };
            dynamic = dynamic.add(1);
        }
    }
    if strtab == 0 || symtab == 0 || gnu_hash == 0 {
        return None;
    }
    let hash = name
        .iter()
        .fold(5381u32, |h, &c| h.wrapping_mul(33).wrapping_add(c as u32));
    let table = gnu_hash as *const u32;
    // SAFETY: the GNU hash table of a loaded object: nbuckets, symoffset, bloom size, bloom
    // shift, the bloom words, the buckets, then one chain word per symbol from symoffset.
    unsafe {
        let (nbuckets, symoffset, bloom_words) = (*table, *table.add(1), *table.add(2));
        if nbuckets == 0 {
            return None;
        }
        let buckets = table.add(4 + 2 * bloom_words as usize);
        let chain = buckets.add(nbuckets as usize);
        let mut i = *buckets.add((hash % nbuckets) as usize);
        if i < symoffset {
            return None;
        }
        loop {
            let h = *chain.add((i - symoffset) as usize);
            if h | 1 == hash | 1 {
                let sym = &*(symtab as *const Sym).add(i as usize);
                let sym_name = CStr::from_ptr((strtab + sym.name as u64) as *const libc::c_char);
                let default =
                    versym == 0 || *(versym as *const u16).add(i as usize) & VERSYM_HIDDEN == 0;
                if sym_name.to_bytes() == name && sym.shndx != 0 && sym.value != 0 && default {
                    return Some((base + sym.value) as usize);
                }
            }
            if h & 1 != 0 {
                return None;
            }
            i += 1;
        }
    }
}
