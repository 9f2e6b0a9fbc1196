//! The `VRAMTRACE_*` environment variables, read once per process when recording starts (never
//! on the hook path). `recorder/README.md` documents them. A leaf: the settings are plain
//! values here (the stack kinds too), which the modules that act on them import.

use std::path::PathBuf;
use std::sync::OnceLock;
use vramtrace_format::conventions::env;
use vramtrace_format::journal;

/// Frames kept per stack when `VRAMTRACE_MAX_DEPTH` is not set.
pub const DEFAULT_MAX_DEPTH: usize = 64;

/// What `VRAMTRACE_STACKS` / `--stacks` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Python frames only (the default); native stacks in a process without Python.
    Python,
    /// The native frames between the driver call and the interpreter, then the Python frames.
    Mixed,
    /// Native frames only.
    Native(Mode),
}

/// How native stacks are unwound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// DWARF CFI unwinding (framehop).
    Native,
    /// Frame-pointer chain walk beyond this library.
    FramePointer,
}

/// What `VRAMTRACE_STACKS` selects: `python` (default), `mixed`, `native`, `fp`, or `none`.
fn parse_mode(value: Option<&str>) -> Option<Kind> {
    match value {
        Some("none" | "off" | "0") => None,
        Some("native") => Some(Kind::Native(Mode::Native)),
        Some("fp" | "frame-pointer" | "framepointer") => Some(Kind::Native(Mode::FramePointer)),
        Some("mixed") => Some(Kind::Mixed),
        _ => Some(Kind::Python),
    }
}

/// Ring slots when `VRAMTRACE_JOURNAL_SLOTS` is not set: 8 MiB of journal per process.
pub const DEFAULT_SLOTS: u64 = 1 << 16;

#[derive(Debug, Clone)]
pub struct Config {
    /// `VRAMTRACE_OUTPUT`: a file, or a directory (existing, or ending in `/`).
    pub output: Option<PathBuf>,
    /// `VRAMTRACE_DISABLE=1`: forward every call, record nothing.
    pub disabled: bool,
    /// `VRAMTRACE_REQUESTS=1`: the frameworks were switched to pass-through allocators.
    pub requests: bool,
    /// `VRAMTRACE_JOURNAL_SLOTS`: records in the crash journal, a power of two.
    pub slots: u64,
    /// `VRAMTRACE_HEARTBEAT`: a directory where the launcher learns which processes loaded
    /// the library and what became of their traces.
    pub heartbeat: Option<PathBuf>,
    /// `VRAMTRACE_STACKS`: `python` (default), `mixed`, `native`, `fp` (frame pointers), or
    /// `none`.
    pub stacks: Option<Kind>,
    /// `VRAMTRACE_MAX_DEPTH`: frames kept per stack, 1 to 256 (default 64).
    pub max_depth: usize,
    /// `VRAMTRACE_TORCH_TRACKER=0`: do not attach to PyTorch's caching allocator (on by
    /// default; off under `VRAMTRACE_REQUESTS`, whose back-end has no tracker).
    pub torch_tracker: bool,
    /// `VRAMTRACE_NVML`: the NVML library that gives the driver's count of the process's
    /// memory (default `libnvidia-ml.so.1`); `None` for `off`.
    pub nvml: Option<std::ffi::CString>,
}

/// The NVML library when `VRAMTRACE_NVML` is not set.
pub const DEFAULT_NVML: &str = "libnvidia-ml.so.1";

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The configuration, read from the environment on first use. A fork child keeps its parent's.
pub fn get() -> &'static Config {
    CONFIG.get_or_init(|| {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let off = |v: &std::ffi::OsStr| matches!(v.to_str(), Some("0" | "false" | "no" | "off"));
        let flag = |name: &str| var(name).is_some_and(|v| !off(&v));
        Config {
            output: var(env::OUTPUT).map(PathBuf::from),
            disabled: flag(env::DISABLE),
            requests: flag(env::REQUESTS),
            slots: var(env::JOURNAL_SLOTS)
                .and_then(|v| v.to_str()?.parse::<u64>().ok())
                .map(|n| n.clamp(1 << 10, journal::MAX_CAPACITY).next_power_of_two())
                .unwrap_or(DEFAULT_SLOTS),
            heartbeat: var(env::HEARTBEAT).map(PathBuf::from),
            stacks: parse_mode(var(env::STACKS).as_deref().and_then(|v| v.to_str())),
            max_depth: var(env::MAX_DEPTH)
                .and_then(|v| v.to_str()?.parse::<usize>().ok())
                .unwrap_or(DEFAULT_MAX_DEPTH),
            torch_tracker: var(env::TORCH_TRACKER).is_none_or(|v| !off(&v)),
            nvml: match var(env::NVML) {
                Some(v) if off(&v) => None,
                Some(v) => std::ffi::CString::new(v.into_encoded_bytes()).ok(),
                None => std::ffi::CString::new(DEFAULT_NVML).ok(),
            },
        }
    })
}
