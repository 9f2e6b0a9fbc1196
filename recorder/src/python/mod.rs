//! Python frames: the calling thread's CPython frames, read on the hook path without the GIL.
//!
//! # Finding the interpreter ([`start`], once, when recording starts)
//!
//! The interpreter is looked up with glibc's real `dlsym` (never this library's trampoline)
//! in the global scope, which holds a `python3.X` executable that exports its symbols (the
//! usual build, and the H200 machine's 3.12.3), then in any loaded `libpython3.*.so` (an
//! embedding program, or a library loaded `RTLD_LOCAL`). `Py_Version` gives the version; the
//! offsets come from [`layout`]. A process without an interpreter records native stacks; an
//! interpreter of a version the walk does not know is refused with one line on stderr.
//!
//! # On the hook path ([`walk`])
//!
//! `PyGILState_GetThisThreadState()` is a thread-specific-storage read (`pthread_getspecific`
//! of the key CPython's GIL-state API keeps for each OS thread): it neither needs nor takes the
//! GIL, allocates nothing and returns the thread's state whether or not the thread holds the
//! GIL, which is what faulthandler relies on too (CPython `Python/traceback.c`,
//! `_Py_DumpTracebackThreads`). From there the walk follows `_PyInterpreterFrame.previous`
//! with plain loads, skipping the shim frames CPython pushes at each entry into the
//! interpreter (`FRAME_OWNED_BY_CSTACK`) and frames still being set up (CPython's
//! `_PyFrame_IsIncomplete`), and keeps two words per frame: the code object's address with the
//! instruction's index, and an identity word (see [`identity`]). No Python API is called, no
//! reference is taken, nothing is allocated: the public frame APIs return new references and
//! can allocate (DataDog dd-trace-py PR 16661 on why an allocation hook must not use them).
//!
//! The frames read are the calling thread's own, suspended below the C call that reached the
//! driver: they stay alive and unchanged while the hook runs, even with the GIL released,
//! since only their own thread pops them. Every pointer is still checked for plausibility
//! (non-null, aligned, user space) and the walk is bounded, so a corrupt chain ends the stack
//! early. Names and lines are copied once per new stack, while the code objects are certainly
//! alive ([`resolve`]).

pub mod layout;
mod linetable;
pub mod resolve;

use layout::{Layout, OWNED_BY_CSTACK, OWNED_BY_GENERATOR};
use std::ffi::{CStr, c_char, c_int, c_void};
use std::ops::Range;
use std::sync::OnceLock;

/// Bit 63 marks a Python frame's first word among a stack's words (native return addresses
/// are user-space addresses, below 2^47).
pub const TAG: u64 = 1 << 63;
/// Bits 47..63 of the first word: the instruction's index in code units (clamped).
const INDEX_SHIFT: u32 = 47;
const INDEX_MAX: u64 = (1 << 16) - 1;
const ADDRESS_MASK: u64 = (1 << INDEX_SHIFT) - 1;

/// What the hook path needs, found once.
pub struct Interpreter {
    pub layout: Layout,
    get_tstate: unsafe extern "C" fn() -> *mut c_void,
    is_initialized: unsafe extern "C" fn() -> c_int,
    /// The object holding the interpreter's evaluation loop: where `mixed` stacks stop
    /// unwinding natively and continue with Python frames.
    pub eval_range: Range<u64>,
}

static INTERPRETER: OnceLock<Option<Interpreter>> = OnceLock::new();

/// The interpreter, once [`start`] found one.
#[inline]
pub fn interpreter() -> Option<&'static Interpreter> {
    INTERPRETER.get().and_then(Option::as_ref)
}

/// Finds the interpreter (once per process; a fork child keeps its parent's). `Ok(false)`: the
/// process has none. `Err`: one it cannot read, with the line to print.
pub fn start(modules: &[crate::modules::Loaded]) -> Result<bool, String> {
    let mut refusal = None;
    let found = INTERPRETER.get_or_init(|| match find(modules) {
        Ok(i) => i,
        Err(e) => {
            refusal = Some(e);
            None
        }
    });
    match refusal {
        Some(e) => Err(e),
        None => Ok(found.is_some()),
    }
}

type Lookup<'a> = &'a dyn Fn(&CStr) -> usize;

fn find(modules: &[crate::modules::Loaded]) -> Result<Option<Interpreter>, String> {
    let Some(dlsym) = crate::elfsym::real_dlsym() else {
        return Ok(None);
    };
    // SAFETY: the real dlsym with a pseudo-handle and NUL-terminated names.
    let global = |name: &CStr| unsafe { dlsym(libc::RTLD_DEFAULT, name.as_ptr()) } as usize;
    if global(c"PyGILState_GetThisThreadState") != 0 {
        return describe(&global, modules);
    }
    for m in modules.iter().filter(|m| is_libpython(&m.path)) {
        let Ok(path) = std::ffi::CString::new(m.path.as_str()) else {
            continue;
        };
        // SAFETY: RTLD_NOLOAD only finds an object already loaded; the handle is kept (the
        // library stays loaded by its owner and the reference costs nothing).
        let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        if h.is_null() {
            continue;
        }
        // SAFETY: a valid handle and NUL-terminated names.
        let local = |name: &CStr| unsafe { dlsym(h, name.as_ptr()) } as usize;
        if local(c"PyGILState_GetThisThreadState") != 0 {
            return describe(&local, modules);
        }
    }
    if modules.iter().any(|m| is_libpython(&m.path)) || program_is_python(modules) {
        return Err(
            "vramtrace: this looks like a Python process, but the interpreter's symbols \
                    (PyGILState_GetThisThreadState) were not found; recording native stacks"
                .into(),
        );
    }
    Ok(None)
}

fn is_libpython(path: &str) -> bool {
    path.rsplit('/')
        .next()
        .is_some_and(|f| f.starts_with("libpython3") && f.contains(".so"))
}

fn program_is_python(modules: &[crate::modules::Loaded]) -> bool {
    modules
        .first()
        .and_then(|m| m.path.rsplit('/').next())
        .is_some_and(|f| f.starts_with("python"))
}

/// The interpreter behind `sym`, or the line saying why it cannot be read.
fn describe(
    sym: Lookup,
    modules: &[crate::modules::Loaded],
) -> Result<Option<Interpreter>, String> {
    let version_at = sym(c"Py_Version");
    if version_at == 0 {
        let name = match sym(c"Py_GetVersion") {
            0 => "older than 3.11".to_string(),
            f => {
                // SAFETY: Py_GetVersion returns a static NUL-terminated string; it needs no
                // GIL and this is not the hook path.
                let f: unsafe extern "C" fn() -> *const c_char = unsafe { std::mem::transmute(f) };
                let s = unsafe { CStr::from_ptr(f()) }.to_string_lossy();
                s.split_whitespace().next().unwrap_or("?").to_string()
            }
        };
        return Err(refuse(&name));
    }
    // SAFETY: `Py_Version` is a `const unsigned long` (3.11+).
    let hex = unsafe { *(version_at as *const u64) };
    let name = format!("{}.{}.{}", hex >> 24, (hex >> 16) & 0xff, (hex >> 8) & 0xff);
    let minor = ((hex >> 16) & 0xff) as u32;
    if hex >> 24 != 3 {
        return Err(refuse(&name));
    }
    let layout = match minor {
        11 | 12 => layout::hard_coded(minor),
        _ => {
            let runtime = sym(c"_PyRuntime");
            if runtime == 0 {
                return Err(refuse(&name));
            }
            // SAFETY: `_PyRuntime` starts with `_Py_DebugOffsets` on 3.13+ (its cookie is
            // checked); 73 words is the 3.13 struct's size, within `_PyRuntimeState`.
            let words = unsafe { std::slice::from_raw_parts(runtime as *const u64, 73) };
            match layout::from_debug_offsets(words) {
                Ok(l) => Some(l),
                Err(layout::Refusal::FreeThreaded) => {
                    return Err(format!(
                        "vramtrace: Python {name} is a free-threaded build: its frames are not \
                         read (no GIL keeps them still); recording native stacks"
                    ));
                }
                Err(_) => None,
            }
        }
    };
    let Some(layout) = layout else {
        return Err(refuse(&name));
    };
    let (get_tstate, is_initialized) = (
        sym(c"PyGILState_GetThisThreadState"),
        sym(c"Py_IsInitialized"),
    );
    if get_tstate == 0 || is_initialized == 0 {
        return Err(refuse(&name));
    }
    let eval = sym(c"_PyEval_EvalFrameDefault").max(get_tstate) as u64;
    let eval_range = crate::modules::find(modules, eval)
        .map(|m| m.range.clone())
        .unwrap_or(0..0);
    // SAFETY: both are the interpreter's exported functions of these signatures.
    unsafe {
        Ok(Some(Interpreter {
            layout,
            get_tstate: std::mem::transmute::<usize, unsafe extern "C" fn() -> *mut c_void>(
                get_tstate,
            ),
            is_initialized: std::mem::transmute::<usize, unsafe extern "C" fn() -> c_int>(
                is_initialized,
            ),
            eval_range,
        }))
    }
}

fn refuse(version: &str) -> String {
    format!(
        "vramtrace: Python {version}: Python frames are read for CPython 3.11 to 3.13 only; \
         recording native stacks"
    )
}

/// Whether `v` can be a pointer to an object: non-null, 8-aligned, in user space.
#[inline]
fn plausible(v: u64) -> bool {
    v >= 4096 && v & 7 == 0 && v <= ADDRESS_MASK
}

/// Reads a word at `addr`, a plausible pointer into the calling thread's live frames or their
/// code objects (see the module documentation).
#[inline]
unsafe fn word(addr: u64) -> u64 {
    // SAFETY: the caller's contract.
    unsafe { (addr as *const u64).read_unaligned() }
}

/// The identity word kept beside a frame's code address: its `co_filename` and `co_qualname`
/// pointers mixed. A code object freed and another allocated at the same address has other
/// name objects unless it is the same function of the same file again, so a stack of the new
/// function never matches an interned stack of the old one.
#[inline]
pub fn identity(filename: u64, qualname: u64) -> u64 {
    qualname ^ filename.rotate_left(29)
}

/// Writes the calling thread's Python frames, innermost first, two words each (see [`TAG`]),
/// at most `max_frames` of them; returns the words written. The hook path: no allocation, no
/// lock, no call into Python beyond the two thread-state reads.
#[inline(never)]
pub fn walk(out: &mut [u64], max_frames: usize) -> usize {
    let Some(py) = interpreter() else {
        return 0;
    };
    let l = &py.layout;
    // SAFETY: both functions only read process state (a flag, a thread-specific key).
    let tstate = unsafe {
        if (py.is_initialized)() == 0 {
            return 0;
        }
        (py.get_tstate)() as u64
    };
    if !plausible(tstate) {
        return 0;
    }
    // SAFETY (every `word` below): `tstate` is this thread's state, and each frame pointer is
    // this thread's current frame or the `previous` of one, checked plausible before use.
    let mut frame = unsafe { word(tstate + l.tstate_frame as u64) };
    if let Some(hop) = l.cframe_frame {
        if !plausible(frame) {
            return 0;
        }
        frame = unsafe { word(frame + hop as u64) };
    }
    let (mut n, mut frames) = (0, 0);
    let mut steps = 4 * max_frames + 64;
    while plausible(frame) && frames < max_frames && steps > 0 && n + 2 <= out.len() {
        steps -= 1;
        let (code, instr, previous, owner) = unsafe {
            (
                word(frame + l.frame_code as u64),
                word(frame + l.frame_instr as u64),
                word(frame + l.frame_previous as u64),
                *((frame + l.frame_owner as u64) as *const u8),
            )
        };
        if owner != OWNED_BY_CSTACK && plausible(code) {
            let start = code + l.code_adaptive as u64;
            let complete = match l.code_firsttraceable {
                Some(at) if owner != OWNED_BY_GENERATOR => {
                    // SAFETY: a live frame's code object, which the frame holds a reference to.
                    let first = unsafe { *((code + at as u64) as *const i32) };
                    instr >= start.wrapping_add(2 * first.max(0) as u64)
                }
                _ => true,
            };
            if complete {
                let index = (instr.saturating_sub(start) / 2).min(INDEX_MAX);
                // SAFETY: as above.
                let (file, name) = unsafe {
                    (
                        word(code + l.code_filename as u64),
                        word(code + l.code_qualname as u64),
                    )
                };
                if let Some([a, b]) = out.get_mut(n..n + 2) {
                    *a = TAG | index << INDEX_SHIFT | code;
                    *b = identity(file, name);
                }
                n += 2;
                frames += 1;
            }
        }
        frame = previous;
    }
    n
}

/// The code address and instruction index of a frame's first word.
pub fn split(first: u64) -> (u64, u64) {
    (first & ADDRESS_MASK, (first & !TAG) >> INDEX_SHIFT)
}
