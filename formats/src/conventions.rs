//! Trace-level conventions that the writing and the reading side both rely on, beyond the byte
//! layout `formats/SPEC.md` specifies: the bits of `Event::flags` an import or the recorder
//! sets, how a Python frame's module is named (and how version-1 imports stored Python frames),
//! the names of trace files and of the launcher's heartbeat marks, and the `VRAMTRACE_*`
//! environment variables.
//!
//! The recorder (`recorder/src/session.rs`) and the launcher (`vramtrace record`) read the
//! naming rules from here, so the file one writes is the file the other looks for.

use crate::{Api, Event};
use std::path::Path;

/// `Event::flags` bit marking an allocator segment of an imported snapshot (as opposed to a
/// program request). No driver call's flags use bit 63.
pub const ALLOCATOR_SEGMENT: u64 = 1 << 63;

/// `Event::flags` bit of an allocation added for memory that was live before the snapshot's
/// history began (a `max_entries` ring buffer): not something the allocator did while recorded.
pub const BEFORE_HISTORY: u64 = 1 << 62;

/// `Event::flags` bit of a mapping re-created for the part of an earlier mapping that a
/// partial `segment_unmap` left mapped: bookkeeping of the import, not an allocator call.
pub const REMAINDER: u64 = 1 << 61;

/// `Event::flags` bit of a `torch.free_completed` that also stands for the block's
/// `torch.free_requested`: PyTorch requested and completed the free in one call (no uses on
/// other streams), so the recorder wrote the pair as one event. The request has the same time,
/// thread, device, block, size, stream and pool (formats/SPEC.md §4.2).
pub const WITH_FREE_REQUEST: u64 = 1 << 60;

/// True for an event that stands for a PyTorch `free_requested` entry: a
/// `torch.free_requested`, or a `torch.free_completed` with [`WITH_FREE_REQUEST`].
pub fn requests_free(e: &Event) -> bool {
    e.api == Api::TorchFreeRequested
        || (e.api == Api::TorchFreeCompleted && e.flags & WITH_FREE_REQUEST != 0)
}

/// `Event::aux` of a `torch.set_memory_fraction`: the fraction, as the bits of an `f64`
/// (formats/SPEC.md §4.3).
pub fn fraction_bits(fraction: f64) -> u64 {
    fraction.to_bits()
}

/// The memory fraction a `torch.set_memory_fraction` event set, if it is one and the value is
/// a fraction (in `[0, 1]`).
pub fn memory_fraction(e: &Event) -> Option<f64> {
    let f = f64::from_bits(e.aux);
    (e.api == Api::TorchSetMemoryFraction && (0.0..=1.0).contains(&f)).then_some(f)
}

/// Module paths of Python functions in version-1 imports start with this.
const PY_PREFIX: &str = "py:";

/// The module path version-1 imports gave Python function `name` in `filename`.
///
/// Before format version 2 gave Python frames their own table (`python_frames`), an import
/// stored a snapshot frame `(filename, line, name)` as a frame of a synthetic module with this
/// path, loaded at `0xfff0_0000_0000_0000 + k * 2^24`, at offset `line` into it. Readers still
/// name such frames ([`python_frame`]); tests build such old traces with this.
pub fn python_module_path(filename: &str, name: &str) -> String {
    format!("{PY_PREFIX}{filename}\t{name}")
}

/// `(filename, line, name)` when `path` is a synthetic Python module of a version-1 import and
/// `offset` the offset of a frame into it.
pub fn python_frame(path: &str, offset: u64) -> Option<(&str, u64, &str)> {
    let (file, name) = path.strip_prefix(PY_PREFIX)?.split_once('\t')?;
    Some((file, offset, name))
}

/// The dotted module name of a Python source file, from its path alone: the part after the
/// last `site-packages/`, `dist-packages/` or `lib/pythonX.Y/` directory
/// (`/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py` → `torch.nn.modules.linear`,
/// `/usr/lib/python3.12/threading.py` → `threading`), a package's `__init__.py` naming the
/// package; otherwise the file's stem (`/work/train.py` → `train`). Empty for names that are
/// not files (`<string>`, `<frozen importlib._bootstrap>` keeps its inner name).
pub fn module_of_file(file: &str) -> String {
    if let Some(inner) = file
        .strip_prefix("<frozen ")
        .and_then(|f| f.strip_suffix('>'))
    {
        return inner.to_string();
    }
    if file.starts_with('<') {
        return String::new();
    }
    let rest = ["/site-packages/", "/dist-packages/"]
        .iter()
        .filter_map(|marker| file.rfind(marker).map(|i| &file[i + marker.len()..]))
        .min_by_key(|rest| rest.len())
        .or_else(|| stdlib_relative(file));
    let relative = match rest {
        Some(r) => r,
        None => file.rsplit('/').next().unwrap_or(file),
    };
    let stem = relative
        .strip_suffix(".py")
        .or_else(|| relative.strip_suffix(".pyc"))
        .unwrap_or(relative);
    let stem = stem.strip_suffix("/__init__").unwrap_or(stem);
    stem.trim_matches('/').replace('/', ".")
}

/// The part of `file` after `lib/pythonX.Y/`, if it lies in a standard library directory.
fn stdlib_relative(file: &str) -> Option<&str> {
    let i = file.rfind("/lib/python")?;
    let after = &file[i + "/lib/python".len()..];
    let slash = after.find('/')?;
    let version = &after[..slash];
    let is_version = !version.is_empty()
        && version
            .trim_end_matches('t')
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.');
    is_version.then(|| &after[slash + 1..])
}

/// The `file` of a Python-frame entry that names an autograd node rather than a source line: the
/// recorder's frame for an allocation made on one of PyTorch's autograd engine threads while
/// the engine evaluated that node (formats/SPEC.md §8; `recorder/src/autograd.rs`). Its
/// `function` is the node's name ([`autograd_node_name`]), its `line` 0, its `module` empty.
pub const AUTOGRAD_NODE_FILE: &str = "<autograd node>";

/// The name of an autograd node of C++ type `mangled` (an Itanium ABI type name, as its
/// `std::type_info` holds it): the demangled class name, without the
/// `torch::autograd::generated::` namespace, which is what PyTorch's `Node::name()` gives
/// (`N5torch8autograd9generated11MmBackward0E` → `MmBackward0`: a generated node's `name()`
/// is its class name; `N5torch8autograd14AccumulateGradE` → `torch::autograd::AccumulateGrad`,
/// the default `name()`, which demangles the type; pytorch/pytorch
/// `torch/csrc/autograd/function.cpp`). A name that is not a plain nested or unqualified one
/// (a template) is kept mangled.
pub fn autograd_node_name(mangled: &str) -> String {
    const GENERATED: &str = "torch::autograd::generated::";
    let Some(parts) = source_names(mangled) else {
        return mangled.to_string();
    };
    let name = parts.join("::");
    match name.strip_prefix(GENERATED) {
        Some(class) => class.to_string(),
        None => name,
    }
}

/// The source names of a mangled type name `N<len><name>...E` or `<len><name>`.
fn source_names(mangled: &str) -> Option<Vec<&str>> {
    let (mut rest, nested) = match mangled.strip_prefix('N') {
        Some(inner) => (inner.strip_suffix('E')?, true),
        None => (mangled, false),
    };
    let mut parts = Vec::new();
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let len: usize = rest.get(..digits)?.parse().ok()?;
        let name = rest.get(digits..digits + len)?;
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return None;
        }
        parts.push(name);
        rest = &rest[digits + len..];
    }
    (!parts.is_empty() && (nested || parts.len() == 1)).then_some(parts)
}

/// The extension of trace files.
pub const TRACE_EXTENSION: &str = ".vramtrace";

/// The stem that names the sibling traces of `output` (`run.vramtrace` → `run`): the file name
/// without the extension, `trace` when it has none.
pub fn trace_stem(output: &Path) -> String {
    output
        .file_name()
        .map(|n| {
            n.to_string_lossy()
                .trim_end_matches(TRACE_EXTENSION)
                .to_string()
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "trace".into())
}

/// The trace of image `image` (1 for the first) of process `pid` beside the output file whose
/// stem is `stem` (the output file itself belongs to the first process that claims it), or in
/// an output directory, where `stem` is the program's name: `STEM-PID.vramtrace`, then
/// `STEM-PID.2.vramtrace`, ... for the later images of a process that execs (it keeps its
/// pid) and for a name that already exists (never truncated).
pub fn process_trace_name(stem: &str, pid: u32, image: u32) -> String {
    if image <= 1 {
        format!("{stem}-{pid}{TRACE_EXTENSION}")
    } else {
        format!("{stem}-{pid}.{image}{TRACE_EXTENSION}")
    }
}

/// What a process tells the launcher through its heartbeat directory, one empty or one-line
/// file `PID.MARK` each ([`heartbeat_name`]), `PID.TRACE.trace` for a trace
/// ([`trace_heartbeat_name`]). The launcher takes exactly the traces these marks name: never
/// other files of a shared output directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    /// The preload library was loaded.
    Loaded,
    /// Recording started; the file holds the trace's path.
    Trace,
    /// Recording could not start, or stopped before the program ended (a failed write, the
    /// file-size limit); the file holds why.
    Failed,
}

impl Heartbeat {
    /// The mark's file extension.
    pub fn mark(self) -> &'static str {
        match self {
            Heartbeat::Loaded => "loaded",
            Heartbeat::Trace => "trace",
            Heartbeat::Failed => "failed",
        }
    }

    /// The mark of a heartbeat file name, if it is one.
    pub fn of_file(name: &str) -> Option<Heartbeat> {
        let (_, mark) = name.rsplit_once('.')?;
        [Heartbeat::Loaded, Heartbeat::Trace, Heartbeat::Failed]
            .into_iter()
            .find(|h| h.mark() == mark)
    }
}

/// The heartbeat file process `pid` writes for `what`.
pub fn heartbeat_name(pid: u32, what: Heartbeat) -> String {
    format!("{pid}.{}", what.mark())
}

/// The heartbeat file process `pid` writes when it starts writing `trace`: named after the
/// trace too, so each image of a process that execs leaves its own.
pub fn trace_heartbeat_name(pid: u32, trace: &Path) -> String {
    let name = trace.file_name().unwrap_or_default().to_string_lossy();
    format!("{pid}.{name}.{}", Heartbeat::Trace.mark())
}

/// The environment variables the recorder reads (`recorder/README.md` documents them).
pub mod env {
    /// A trace file, or a directory (existing, or ending in `/`) for one file per process.
    pub const OUTPUT: &str = "VRAMTRACE_OUTPUT";
    /// `1`: forward every call, record nothing.
    pub const DISABLE: &str = "VRAMTRACE_DISABLE";
    /// `1`: the frameworks were switched to pass-through allocators.
    pub const REQUESTS: &str = "VRAMTRACE_REQUESTS";
    /// Records in the crash journal, a power of two.
    pub const JOURNAL_SLOTS: &str = "VRAMTRACE_JOURNAL_SLOTS";
    /// The launcher's heartbeat directory.
    pub const HEARTBEAT: &str = "VRAMTRACE_HEARTBEAT";
    /// `python` (default), `mixed`, `native`, `fp` or `none`.
    pub const STACKS: &str = "VRAMTRACE_STACKS";
    /// Frames kept per stack.
    pub const MAX_DEPTH: &str = "VRAMTRACE_MAX_DEPTH";
    /// `0`: do not attach to PyTorch's caching allocator (`torch.*` events; on by default).
    pub const TORCH_TRACKER: &str = "VRAMTRACE_TORCH_TRACKER";
    /// Read by the launcher only: the recorder library, when `--preload` is not given.
    pub const PRELOAD: &str = "VRAMTRACE_PRELOAD";
    /// The NVML library the recorder asks for the driver's count of the process's memory
    /// (default `libnvidia-ml.so.1`); `off` records no such count.
    pub const NVML: &str = "VRAMTRACE_NVML";
}

/// When a `driver.process_memory` event was taken: its `flags` (formats/SPEC.md §4.3).
pub mod driver_count {
    /// The count reached a new high (sampled by the recorder's writer thread).
    pub const NEW_HIGH: u64 = 0;
    /// Right before a context was created on the device.
    pub const BEFORE_CONTEXT: u64 = 1;
    /// Right after that context was created: the difference is the context's own memory.
    pub const AFTER_CONTEXT: u64 = 2;
    /// When the trace was finished.
    pub const AT_END: u64 = 3;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn autograd_nodes_are_named_as_pytorch_names_them() {
        let named = |m| autograd_node_name(m);
        assert_eq!(
            named("N5torch8autograd9generated11MmBackward0E"),
            "MmBackward0"
        );
        assert_eq!(
            named("N5torch8autograd14AccumulateGradE"),
            "torch::autograd::AccumulateGrad"
        );
        assert_eq!(named("6PyNode"), "PyNode");
        // A template (CppNode<T>) or anything else is kept as it is.
        let template = "N5torch8autograd7CppNodeIN4test2FnEEE";
        assert_eq!(named(template), template);
        assert_eq!(named("N5torch3E"), "N5torch3E");
        assert_eq!(named(""), "");
    }

    #[test]
    fn a_free_request_is_its_own_event_or_a_flagged_completion() {
        let with = |api, flags| Event {
            flags,
            ..Event::new(api)
        };
        assert!(requests_free(&with(Api::TorchFreeRequested, 0)));
        assert!(requests_free(&with(
            Api::TorchFreeCompleted,
            WITH_FREE_REQUEST
        )));
        assert!(!requests_free(&with(Api::TorchFreeCompleted, 0)));
        // The bit means nothing on other events (a driver call's flags are its own).
        assert!(!requests_free(&with(Api::CuMemFree_v2, WITH_FREE_REQUEST)));
    }

    #[test]
    fn a_memory_fraction_is_read_back_only_from_its_own_event_and_in_range() {
        let mut e = Event::new(Api::TorchSetMemoryFraction);
        e.aux = fraction_bits(0.03);
        assert_eq!(memory_fraction(&e), Some(0.03));
        e.aux = fraction_bits(1.5);
        assert_eq!(memory_fraction(&e), None);
        let mut other = Event::new(Api::TorchEmptyCache);
        other.aux = fraction_bits(0.5);
        assert_eq!(memory_fraction(&other), None);
    }

    #[test]
    fn python_frames_round_trip_through_module_paths() {
        let path = python_module_path("/a/train.py", "forward");
        assert_eq!(
            python_frame(&path, 42),
            Some(("/a/train.py", 42, "forward"))
        );
        assert_eq!(python_frame("/usr/lib/libc.so.6", 42), None);
    }

    #[test]
    fn process_traces_are_named_stem_dash_pid_then_numbered() {
        let stem = trace_stem(Path::new("/out/run.vramtrace"));
        assert_eq!(stem, "run");
        assert_eq!(trace_stem(Path::new("/")), "trace");
        assert_eq!(process_trace_name(&stem, 42, 1), "run-42.vramtrace");
        assert_eq!(process_trace_name(&stem, 42, 2), "run-42.2.vramtrace");
    }

    #[test]
    fn heartbeat_files_name_their_mark() {
        let name = heartbeat_name(7, Heartbeat::Failed);
        assert_eq!(name, "7.failed");
        assert_eq!(Heartbeat::of_file(&name), Some(Heartbeat::Failed));
        assert_eq!(Heartbeat::of_file("7.journal"), None);
        let trace = trace_heartbeat_name(7, Path::new("/out/run-7.2.vramtrace"));
        assert_eq!(trace, "7.run-7.2.vramtrace.trace");
        assert_eq!(Heartbeat::of_file(&trace), Some(Heartbeat::Trace));
    }

    #[test]
    fn module_names_come_from_the_path() {
        let cases = [
            (
                "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py",
                "torch.nn.modules.linear",
            ),
            ("/usr/lib/python3/dist-packages/numpy/__init__.py", "numpy"),
            ("/usr/lib/python3.12/threading.py", "threading"),
            (
                "/root/.pyenv/versions/3.13.0t/lib/python3.13t/json/decoder.py",
                "json.decoder",
            ),
            ("/work/train.py", "train"),
            ("train.py", "train"),
            ("<string>", ""),
            ("<frozen importlib._bootstrap>", "importlib._bootstrap"),
        ];
        for (file, module) in cases {
            assert_eq!(module_of_file(file), module, "{file}");
        }
    }
}
