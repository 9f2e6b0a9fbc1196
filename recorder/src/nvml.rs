//! The driver's own count of this process's device memory, read through NVML (the NVIDIA
//! Management Library, `libnvidia-ml.so.1`, opened with `dlopen`, never linked): what the
//! `driver.process_memory` events carry (formats/SPEC.md §4.3), so that the analyzer can check
//! the memory a trace names against it (docs/definitions.md, "driver's count").
//!
//! The figure is NVML's `usedGpuMemory` of this process in
//! `nvmlDeviceGetComputeRunningProcesses_v3` (NVIDIA's `nvml.h`: `nvmlProcessInfo_t`, four
//! fields), on the NVML device with the CUDA device's UUID (`nvmlDeviceGetHandleByUUID`: CUDA's
//! ordinals follow `CUDA_VISIBLE_DEVICES`, NVML's indices do not). In a PID namespace (a
//! container) NVML lists the host's pids: when this pid is not listed but exactly one process
//! is, and this process holds a context on the device, that process is this one.
//!
//! NVML is opened and initialised once, by the writer thread ([`load`]), never on the hook path;
//! [`expect`] marks it as on its way before the writer starts, so that a context made in the
//! first moments waits for it ([`wait_ready`]) instead of going uncounted. Without NVML (no
//! library, an `nvmlInit_v2` that fails, `VRAMTRACE_NVML=off`, a fork child) nothing is
//! recorded, and the analyzer says the count is missing. Every NVML error only leaves a count
//! out.

use crate::clock;
use crate::config;
use crate::context;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

const NONE: u8 = 0;
const LOADING: u8 = 1;
const READY: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(NONE);
/// `nvmlDeviceGetComputeRunningProcesses_v3` and `nvmlDeviceGetHandleByUUID`; 0 before [`load`].
static GET_PROCESSES: AtomicUsize = AtomicUsize::new(0);
static HANDLE_BY_UUID: AtomicUsize = AtomicUsize::new(0);
/// NVML's device handle per CUDA ordinal, found on first use (0: not yet).
static HANDLES: [AtomicUsize; 64] = [const { AtomicUsize::new(0) }; 64];

/// `nvmlProcessInfo_t` as `nvmlDeviceGetComputeRunningProcesses_v3` fills it.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

/// Processes read per device at most (NVML answers "insufficient size" beyond: no count).
const MAX_PROCESSES: usize = 64;
/// `NVML_VALUE_NOT_AVAILABLE`: NVML does not know the figure (some virtualized set-ups).
const NOT_AVAILABLE: u64 = u64::MAX;

type Init = unsafe extern "C" fn() -> c_int;
type GetProcesses = unsafe extern "C" fn(*mut c_void, *mut c_uint, *mut ProcessInfo) -> c_int;
type HandleByUuid = unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> c_int;

/// Marks NVML as about to be loaded by the writer thread, when the configuration asks for it.
/// Runs when the session opens, before the writer starts.
pub fn expect() {
    let state = if config::get().nvml.is_some() {
        LOADING
    } else {
        NONE
    };
    STATE.store(state, Ordering::Release);
}

/// Opens and initialises NVML. Writer thread only, once. A library that cannot be opened is
/// a machine without NVIDIA's driver, unless `VRAMTRACE_NVML` named it: that, and an NVML that
/// does not initialise, get one line on stderr.
pub fn load() {
    let Some(lib) = config::get().nvml.as_deref() else {
        STATE.store(NONE, Ordering::Release);
        return;
    };
    let why = match open(lib) {
        Ok(()) => {
            STATE.store(READY, Ordering::Release);
            return;
        }
        Err(_) if lib.to_bytes() == config::DEFAULT_NVML.as_bytes() => None,
        Err(why) => Some(why),
    };
    STATE.store(NONE, Ordering::Release);
    if let Some(why) = why {
        let msg = format!(
            "vramtrace: NVML ({}) {why}: the driver's count of process {}'s memory is not \
             recorded\n",
            lib.to_string_lossy(),
            clock::pid()
        );
        // SAFETY: write(2) of a valid buffer.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
    }
}

/// Opens `lib` and initialises NVML; why not, when it does not.
fn open(lib: &std::ffi::CStr) -> Result<(), &'static str> {
    // SAFETY: dlopen of a library by name; RTLD_LOCAL keeps its symbols out of the program's
    // lookups. The handle is kept for the life of the process.
    let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err("cannot be opened");
    }
    // SAFETY: dlsym with a valid handle and names.
    let (init, processes, by_uuid) = unsafe {
        (
            libc::dlsym(h, c"nvmlInit_v2".as_ptr()) as usize,
            libc::dlsym(h, c"nvmlDeviceGetComputeRunningProcesses_v3".as_ptr()) as usize,
            libc::dlsym(h, c"nvmlDeviceGetHandleByUUID".as_ptr()) as usize,
        )
    };
    if [init, processes, by_uuid].contains(&0) {
        return Err("lacks the functions the recorder uses");
    }
    // SAFETY: NVML's `nvmlReturn_t nvmlInit_v2(void)`.
    if unsafe { std::mem::transmute::<usize, Init>(init)() } != 0 {
        return Err("does not initialise");
    }
    GET_PROCESSES.store(processes, Ordering::Release);
    HANDLE_BY_UUID.store(by_uuid, Ordering::Release);
    Ok(())
}

/// Waits (at most 2 s, while the writer thread lives) for [`load`] to finish; true when NVML
/// answers.
pub fn wait_ready() -> bool {
    let deadline = clock::now().saturating_add(2_000_000_000);
    loop {
        match STATE.load(Ordering::Acquire) {
            READY => return true,
            LOADING if clock::now() < deadline && crate::lifecycle::writer_alive() => {
                let pause = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 1_000_000,
                };
                // SAFETY: nanosleep with a valid timespec.
                unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
            }
            _ => return false,
        }
    }
}

/// True when NVML was loaded and answers.
pub fn ready() -> bool {
    STATE.load(Ordering::Acquire) == READY
}

/// A fork child does not use its parent's NVML.
pub fn after_fork_in_child() {
    STATE.store(NONE, Ordering::Release);
}

/// The bytes the driver counts this process holding on CUDA device `device`, or `None` when
/// NVML does not say. A process NVML does not list holds 0; with `holds_context`, a sole
/// listed process is this one (see the module's header).
pub fn process_bytes(device: i32, holds_context: bool) -> Option<u64> {
    if !ready() {
        return None;
    }
    let handle = handle(device)?;
    let get = GET_PROCESSES.load(Ordering::Acquire);
    let mut list = [ProcessInfo::default(); MAX_PROCESSES];
    let mut count = MAX_PROCESSES as c_uint;
    // SAFETY: NVML's function of this ABI, with a device handle it gave and a buffer of
    // `count` entries.
    let r = unsafe {
        std::mem::transmute::<usize, GetProcesses>(get)(handle, &mut count, list.as_mut_ptr())
    };
    if r != 0 {
        return None;
    }
    let listed = list.get(..count as usize)?;
    let pid = clock::pid();
    let mine = listed.iter().find(|p| p.pid == pid).or_else(|| {
        listed
            .first()
            .filter(|_| holds_context && listed.len() == 1)
    });
    match mine {
        Some(p) => (p.used_gpu_memory != NOT_AVAILABLE).then_some(p.used_gpu_memory),
        None => (!holds_context).then_some(0),
    }
}

/// NVML's handle of CUDA device `device`, found by its UUID.
fn handle(device: i32) -> Option<*mut c_void> {
    let slot = HANDLES.get(usize::try_from(device).ok()?)?;
    let known = slot.load(Ordering::Acquire);
    if known != 0 {
        return Some(known as *mut c_void);
    }
    let uuid = context::device_uuid(device)?;
    // `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, NUL-terminated, without allocating.
    let mut text = [0u8; 41];
    let digits = uuid.iter().enumerate().flat_map(|(i, b)| {
        let dash = matches!(i, 4 | 6 | 8 | 10).then_some(b'-');
        let hex = |n: u8| if n < 10 { b'0' + n } else { b'a' + n - 10 };
        dash.into_iter().chain([hex(b >> 4), hex(b & 0xf)])
    });
    for (slot, c) in text.iter_mut().zip(b"GPU-".iter().copied().chain(digits)) {
        *slot = c;
    }
    let mut h: *mut c_void = std::ptr::null_mut();
    let by_uuid = HANDLE_BY_UUID.load(Ordering::Acquire);
    // SAFETY: NVML's function of this ABI with a NUL-terminated UUID and a valid out-pointer.
    let r = unsafe {
        std::mem::transmute::<usize, HandleByUuid>(by_uuid)(text.as_ptr().cast(), &mut h)
    };
    if r != 0 || h.is_null() {
        return None;
    }
    slot.store(h as usize, Ordering::Release);
    Some(h)
}
