//! The stack namer: every view's one way of naming a stack's frames. Native return addresses
//! become function names, using the module map the recorder wrote (path, load address,
//! build-id); Python frames are named by the trace itself. [`Symbolizer::site`] picks the frame a
//! user wants first: the innermost one outside the allocator plumbing ([`is_plumbing`]).
//!
//! Sans-IO: the traced program's files are read through [`ModuleFiles`], which the caller
//! implements (the model is samply-symbols' `FileAndPathHelper`); the `vramtrace` binary reads
//! ELF files with blazesym, [`NoFiles`] reads nothing. A frame that cannot be resolved is shown
//! as `module+0xoffset`, the offset from the module's load address as the recorder defines it
//! (the same figure the tests crate's `top_stacks` example prints). Names are cached for the run,
//! per address; a report asks for the few thousand distinct frames it shows.

mod names;
mod ranked;

pub use names::{NO_STACK_WHY, StackNames, short_frame};
pub use ranked::{
    CALLERS_SHOWN, ShownRow, StackBytes, TOP_STACKS, shown_rows, top_counted_stacks, top_stacks,
};

use serde::Serialize;
use std::collections::HashMap;
use vramtrace_format::conventions::{AUTOGRAD_NODE_FILE, module_of_file, python_frame};
use vramtrace_format::{FrameRef, Module, PythonFrame, Tables};

/// The `file` of the marker frame that heads a backward stack ([`crate::backward`]): it is
/// named "backward of " and the text of the frame after it, the line that called `backward()`,
/// then the autograd node its `function` names, if any ("backward of train.py:48 step
/// (MmBackward0)").
pub const BACKWARD_FILE: &str = "<backward>";

/// The name of a backward marker with no frame after it: an allocation of autograd's engine
/// thread whose `backward()` call the trace does not show.
pub const BACKWARD_UNSEEN: &str = "backward (autograd engine thread; its backward() call is not \
                                   in the trace: record with the PyTorch tracker on, the \
                                   default, to name the line)";

/// The traced program's files, as the machine that analyses the trace has them.
pub trait ModuleFiles {
    /// The name of the function at `offset` into `module` (an offset from the module's load
    /// address, as the recorder defines it), read from the module's file; `None` when the file
    /// is not here, is another build than the one recorded, or has no symbol there.
    fn function_at(&mut self, module: &Module, offset: u64) -> Option<String>;
}

/// No files: every native frame is `module+0xoffset` (`vramtrace report --no-symbolize`).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFiles;

impl ModuleFiles for NoFiles {
    fn function_at(&mut self, _: &Module, _: u64) -> Option<String> {
        None
    }
}

/// One frame of a stack, named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NamedFrame {
    /// The function (demangled) or Python `co_qualname`; empty when unknown.
    pub function: String,
    /// A Python frame's source file (as recorded); empty for native frames.
    pub file: String,
    /// A Python frame's line; 0 when unknown or native.
    pub line: u32,
    /// A native frame's object (`libc10_cuda.so`) or a Python frame's dotted module.
    pub module: String,
    /// A native frame's offset from its module's load address.
    pub offset: u64,
    pub python: bool,
    /// Allocator plumbing ([`is_plumbing`]): the CUDA libraries, PyTorch's own code, ctypes
    /// and libffi, the interpreter and the C library; not the code a user wants to see first.
    pub plumbing: bool,
}

impl NamedFrame {
    /// One line: `file:line function` for Python (the function alone for a frame with neither,
    /// such as a backward marker); the function, else `module+0xoffset`.
    pub fn text(&self) -> String {
        if self.python && self.file.is_empty() && self.line == 0 {
            return self.function.clone();
        }
        if self.python {
            return format!("{}:{} {}", self.file, self.line, self.function);
        }
        match (self.function.is_empty(), self.module.is_empty()) {
            (false, _) => self.function.clone(),
            (true, false) => format!("{}+{:#x}", self.module, self.offset),
            (true, true) => format!("{:#x}", self.offset),
        }
    }
}

/// True for frames of the allocator plumbing between the user's code and the driver: the
/// CUDA runtime and driver, PyTorch's C++ libraries (`libc10*`, `libtorch*`), ctypes and libffi,
/// the Python interpreter, the C library and this recorder; Python code under `torch/`, and the
/// standard library's `ctypes`, `threading`, `runpy` and `importlib`; and, by function name,
/// the dispatcher, allocator, interpreter and driver entry points a stack passes through
/// ([`PLUMBING_FUNCTIONS`]), which is how the C++ frames a PyTorch snapshot carries (named by
/// file and function, with no module) are told apart. The names follow PyTorch's own filter in
/// `torch/cuda/_memory_viz.py` (`_frame_filter`). Every view (the report's "hide plumbing"
/// toggle and user frame, `summary`'s sites) uses this one rule.
pub fn is_plumbing(frame: &NamedFrame) -> bool {
    let by_function = PLUMBING_FUNCTIONS
        .iter()
        .any(|p| frame.function.contains(p));
    if frame.python {
        if !is_python_source(&frame.file) {
            // A C/C++ frame recorded by the snapshot (`c10/cuda/CUDACachingAllocator.cpp`).
            return by_function || PLUMBING_FILES.iter().any(|p| frame.file.contains(p));
        }
        let m = frame.module.as_str();
        let top = m.split('.').next().unwrap_or(m);
        // By module, not by path: a virtual environment may well live in `/opt/torch/`.
        return matches!(
            top,
            "torch" | "ctypes" | "threading" | "runpy" | "importlib" | "contextlib" | "functools"
        );
    }
    let m = frame.module.as_str();
    const PREFIXES: [&str; 14] = [
        "libcudart",
        "libcuda.so",
        "libcuda-",
        "libc10",
        "libtorch",
        "libffi",
        "_ctypes",
        "libpython",
        "python3",
        "libc.so",
        "libc-",
        "ld-linux",
        "libvramtrace",
        "libcublas",
    ];
    m.is_empty() || by_function || PREFIXES.iter().any(|p| m.starts_with(p))
}

/// The library that made a driver call, from its stack's frames (innermost first): the module
/// of the innermost native frame outside the CUDA runtime, the driver and this recorder.
/// `NCCL` (`libnccl*`), `cuBLAS` (`libcublas*`, cuBLASLt too), `cuDNN` (`libcudnn*`); `CUDA
/// runtime` when no native frame lies outside them (the runtime's own memory for the context
/// and its modules); `other code` for any other module (the framework, the program); `no native
/// stack` without native frames (`--stacks python` or none).
pub fn library_of(frames: &[NamedFrame]) -> &'static str {
    const RUNTIME: [&str; 4] = ["libcudart", "libcuda.so", "libcuda-", "libvramtrace"];
    const LIBRARIES: [(&str, &str); 3] = [
        ("libnccl", "NCCL"),
        ("libcublas", "cuBLAS"),
        ("libcudnn", "cuDNN"),
    ];
    let mut native = frames.iter().filter(|f| !f.python).peekable();
    if native.peek().is_none() {
        return "no native stack";
    }
    let Some(f) = native.find(|f| !RUNTIME.iter().any(|p| f.module.starts_with(p))) else {
        return "CUDA runtime";
    };
    LIBRARIES
        .iter()
        .find(|(prefix, _)| f.module.starts_with(prefix))
        .map_or("other code", |(_, name)| name)
}

/// Function names (parts of) of the recorder, the unwinder, CPython's evaluation loop and call
/// machinery, PyTorch's dispatcher and allocator, and the CUDA runtime and driver.
const PLUMBING_FUNCTIONS: &[&str] = &[
    "vramtrace",
    "unwind::",
    "CapturedTraceback",
    "gather_with_cpp",
    "__libc_start_main",
    "PyEval_",
    "_PyEval",
    "PyObject_",
    "_PyObject_",
    "PyFunction_",
    "_PyFunction_",
    "PyVectorcall",
    "cfunction_",
    "method_vectorcall",
    "pybind11::",
    "c10::",
    "at::_ops::",
    "at::native::empty",
    "at::detail::empty",
    "at::empty",
    "torch::autograd::",
    "cudaMalloc",
    "cuMemAlloc",
    "cuMemCreate",
];

/// Source files (parts of) of PyTorch's dispatcher and of its Python bindings.
const PLUMBING_FILES: &[&str] = &["core/boxing", "/Redispatch", "torch/csrc/", "pybind11"];

/// Whether a Python frame's file is Python code (rather than a C/C++ file a snapshot names).
fn is_python_source(file: &str) -> bool {
    file.ends_with(".py") || file.ends_with(".pyc") || file.starts_with('<')
}

/// Names frames of a trace's stacks.
pub struct Symbolizer<'t, 'f> {
    tables: &'t Tables,
    /// Frame id → what it names.
    frames: HashMap<u32, FrameRef<'t>>,
    /// Stack id → frame ids, innermost first.
    stacks: HashMap<u32, &'t [u32]>,
    /// Module indices sorted by load address.
    modules: Vec<usize>,
    files: &'f mut dyn ModuleFiles,
    names: HashMap<u64, NamedFrame>,
}

impl<'t, 'f> Symbolizer<'t, 'f> {
    /// Names the frames of `tables`, reading the modules' files through `files`.
    pub fn new(tables: &'t Tables, files: &'f mut dyn ModuleFiles) -> Symbolizer<'t, 'f> {
        let mut modules: Vec<usize> = (0..tables.modules.len()).collect();
        modules.sort_by_key(|&i| tables.modules[i].load_address);
        Symbolizer {
            tables,
            frames: tables.frame_index(),
            stacks: tables
                .stacks
                .iter()
                .map(|s| (s.id, s.frames.as_slice()))
                .collect(),
            modules,
            files,
            names: HashMap::new(),
        }
    }

    /// The frames of `stack`, innermost first; empty for an unknown stack or none.
    pub fn frames(&mut self, stack: u32) -> Vec<NamedFrame> {
        let Some(ids) = self.stacks.get(&stack).copied() else {
            return Vec::new();
        };
        let mut named: Vec<NamedFrame> = ids
            .iter()
            .map(|id| match self.frames.get(id).copied() {
                Some(FrameRef::Native(address)) => self.named(address),
                Some(FrameRef::Python(p)) => python(p),
                None => NamedFrame {
                    function: format!("(unknown frame {id})"),
                    ..unknown()
                },
            })
            .collect();
        // A backward marker takes the name of the line after it (the caller of `backward()`),
        // and of the autograd node it stands for, if the recorder read one (its `function`).
        for i in (0..named.len()).rev() {
            if named[i].python && named[i].file == BACKWARD_FILE {
                let node = &named[i].function;
                let function = match (named.get(i + 1), node.is_empty()) {
                    (Some(caller), true) => format!("backward of {}", caller.text()),
                    (Some(caller), false) => format!("backward of {} ({node})", caller.text()),
                    (None, true) => BACKWARD_UNSEEN.to_string(),
                    (None, false) => {
                        BACKWARD_UNSEEN.replacen("backward (", &format!("backward ({node}; "), 1)
                    }
                };
                named[i] = NamedFrame {
                    function,
                    python: true,
                    ..unknown()
                };
            }
        }
        named
    }

    /// Where `stack` comes from in the user's code: the index, in [`Self::frames`], of the
    /// innermost frame outside the allocator plumbing ([`is_plumbing`]); the innermost frame
    /// when every frame is plumbing; `None` for no stack.
    pub fn site_index(frames: &[NamedFrame]) -> Option<usize> {
        if frames.is_empty() {
            return None;
        }
        Some(frames.iter().position(|f| !f.plumbing).unwrap_or(0))
    }

    /// The user's frame of `stack` ([`Self::site_index`]).
    pub fn site(&mut self, stack: u32) -> Option<NamedFrame> {
        let frames = self.frames(stack);
        Self::site_index(&frames).map(|i| frames[i].clone())
    }

    /// The frames of `stack` as text, outermost first; empty for an unknown stack or none.
    pub fn stack(&mut self, stack: u32) -> Vec<String> {
        self.frames(stack)
            .iter()
            .rev()
            .map(NamedFrame::text)
            .collect()
    }

    /// The name of the native code at `address`, as text.
    pub fn name(&mut self, address: u64) -> String {
        self.named(address).text()
    }

    /// The native code at `address`, named.
    pub fn named(&mut self, address: u64) -> NamedFrame {
        if let Some(n) = self.names.get(&address) {
            return n.clone();
        }
        let mut named = self.resolve(address);
        named.plumbing = is_plumbing(&named);
        self.names.insert(address, named.clone());
        named
    }

    fn module_of(&self, address: u64) -> Option<usize> {
        let m = &self.tables.modules;
        let k = self
            .modules
            .partition_point(|&i| m[i].load_address <= address);
        // The last module starting at or below the address, if the address is inside it.
        self.modules[..k]
            .iter()
            .rev()
            .take(4)
            .copied()
            .find(|&i| address < m[i].load_address.saturating_add(m[i].size.max(1)))
    }

    fn resolve(&mut self, address: u64) -> NamedFrame {
        let Some(i) = self.module_of(address) else {
            return NamedFrame {
                offset: address,
                ..unknown()
            };
        };
        let module = &self.tables.modules[i];
        let offset = address - module.load_address;
        // Frames of snapshots imported by version 1: Python lines in synthetic modules.
        if let Some((file, line, name)) = python_frame(&module.path, offset) {
            return python(&PythonFrame {
                id: 0,
                file: file.to_string(),
                function: name.to_string(),
                line: line as u32,
                module: module_of_file(file),
            });
        }
        let function = self.files.function_at(module, offset).unwrap_or_default();
        NamedFrame {
            function,
            module: base_name(&module.path).to_string(),
            offset,
            ..unknown()
        }
    }
}

fn unknown() -> NamedFrame {
    NamedFrame {
        function: String::new(),
        file: String::new(),
        line: 0,
        module: String::new(),
        offset: 0,
        python: false,
        plumbing: false,
    }
}

fn python(p: &PythonFrame) -> NamedFrame {
    if p.file == AUTOGRAD_NODE_FILE {
        // The recorder's frame for an autograd engine thread's allocation: the node, no line.
        return NamedFrame {
            function: format!("autograd node {}", p.function),
            python: true,
            ..unknown()
        };
    }
    let mut named = NamedFrame {
        function: p.function.clone(),
        file: p.file.clone(),
        line: p.line,
        module: p.module.clone(),
        python: true,
        ..unknown()
    };
    named.plumbing = is_plumbing(&named);
    named
}

/// `libtorch_cuda.so` from `/usr/lib/.../libtorch_cuda.so`.
fn base_name(path: &str) -> &str {
    path.rsplit('/')
        .next()
        .filter(|s| !s.is_empty())
        .unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramtrace_format::{Frame, Stack};

    #[test]
    fn the_library_is_the_innermost_module_past_the_cuda_runtime() {
        let native = |module: &str| NamedFrame {
            module: module.into(),
            ..unknown()
        };
        let python = NamedFrame {
            python: true,
            file: "train.py".into(),
            line: 3,
            ..unknown()
        };
        let of = |modules: &[&str]| {
            let mut frames: Vec<NamedFrame> = modules.iter().map(|m| native(m)).collect();
            frames.push(python.clone());
            library_of(&frames)
        };
        assert_eq!(
            of(&["libcudart.so.13", "libcublasLt.so.13", "libcublas.so.13"]),
            "cuBLAS"
        );
        assert_eq!(
            of(&["libcuda.so.1", "libnccl.so.2", "libtorch_cuda.so"]),
            "NCCL"
        );
        assert_eq!(
            of(&["libvramtrace_preload.so", "libcudnn_graph.so.9"]),
            "cuDNN"
        );
        assert_eq!(of(&["libcudart.so.13", "libtorch_cuda.so"]), "other code");
        assert_eq!(of(&["libcudart.so.13", "libcuda.so.1"]), "CUDA runtime");
        assert_eq!(of(&[]), "no native stack");
    }

    fn tables(path: &str, build_id: Vec<u8>) -> Tables {
        Tables {
            stacks: vec![Stack {
                id: 1,
                frames: vec![1, 2, 3],
            }],
            frames: vec![
                Frame {
                    id: 1,
                    address: 0x7000_1234,
                },
                Frame {
                    id: 2,
                    address: 0x9999,
                },
                Frame { id: 3, address: 0 },
            ],
            modules: vec![Module {
                id: 1,
                pid: 1,
                path: path.into(),
                build_id,
                load_address: 0x7000_0000,
                size: 0x10_0000,
                loaded_ns: 0,
                unloaded_ns: None,
            }],
            ..Tables::default()
        }
    }

    /// Files that name every function after its module and offset, and count the questions.
    #[derive(Default)]
    struct Named(u32);

    impl ModuleFiles for Named {
        fn function_at(&mut self, module: &Module, offset: u64) -> Option<String> {
            self.0 += 1;
            Some(format!("fn_{offset:x}_in_{}", base_name(&module.path)))
        }
    }

    #[test]
    fn unresolved_frames_are_module_plus_offset_outermost_first() {
        let t = tables("/nonexistent/libfoo.so", vec![1, 2, 3]);
        let mut files = NoFiles;
        let mut s = Symbolizer::new(&t, &mut files);
        assert_eq!(s.stack(1), vec!["0x0", "0x9999", "libfoo.so+0x1234"]);
        assert!(s.stack(77).is_empty());
        assert_eq!(s.name(0x7000_1234), "libfoo.so+0x1234");
    }

    #[test]
    fn names_come_from_the_files_once_per_address() {
        let t = tables("/lib/libfoo.so", Vec::new());
        let mut files = Named::default();
        let mut s = Symbolizer::new(&t, &mut files);
        assert_eq!(s.name(0x7000_1234), "fn_1234_in_libfoo.so");
        assert_eq!(s.name(0x7000_1234), "fn_1234_in_libfoo.so");
        // Outside every module: no file is asked.
        assert_eq!(s.name(0x9999), "0x9999");
        drop(s);
        assert_eq!(files.0, 1);
    }

    #[test]
    fn python_frames_of_imported_snapshots_are_named_by_file_and_line() {
        let mut t = tables("", Vec::new());
        t.modules[0].path = vramtrace_format::conventions::python_module_path(
            "/venv/lib/python3.12/site-packages/torch/nn/linear.py",
            "forward",
        );
        let mut files = Named::default();
        let mut s = Symbolizer::new(&t, &mut files);
        let named = s.named(0x7000_0000 + 42);
        assert_eq!(
            named.text(),
            "/venv/lib/python3.12/site-packages/torch/nn/linear.py:42 forward"
        );
        assert_eq!(named.module, "torch.nn.linear");
        assert!(named.plumbing && named.python);
        drop(s);
        assert_eq!(files.0, 0);
    }

    #[test]
    fn the_site_is_the_innermost_frame_outside_the_plumbing() {
        let mut t = tables("/usr/lib/libcudart.so.13", Vec::new());
        let py = |id, file: &str, function: &str, line| PythonFrame {
            id,
            file: file.into(),
            function: function.into(),
            line,
            module: module_of_file(file),
        };
        t.python_frames = vec![
            py(
                10,
                "/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/linear.py",
                "forward",
                134,
            ),
            py(
                11,
                "/opt/torch/.venv/lib/python3.12/site-packages/transformers/gpt2.py",
                "Block.forward",
                7,
            ),
            py(12, "/work/train.py", "step", 57),
        ];
        // libcudart frame, torch's Python frame, then the model and the script.
        t.stacks = vec![Stack {
            id: 1,
            frames: vec![1, 10, 11, 12],
        }];
        let mut files = NoFiles;
        let mut s = Symbolizer::new(&t, &mut files);
        let frames = s.frames(1);
        assert_eq!(
            frames.iter().map(|f| f.plumbing).collect::<Vec<_>>(),
            [true, true, false, false]
        );
        assert_eq!(Symbolizer::site_index(&frames), Some(2));
        assert_eq!(
            s.site(1).unwrap().text(),
            "/opt/torch/.venv/lib/python3.12/site-packages/transformers/gpt2.py:7 Block.forward"
        );
        assert_eq!(s.site(77), None);
        // A stack of plumbing alone is named by its innermost frame.
        t.stacks[0].frames = vec![1, 10];
        let mut s = Symbolizer::new(&t, &mut files);
        assert_eq!(s.site(1).unwrap().text(), "libcudart.so.13+0x1234");
    }

    #[test]
    fn the_cpp_frames_of_a_snapshot_are_plumbing_by_function_and_user_code_is_not() {
        let frame = |file: &str, function: &str, python| NamedFrame {
            function: function.into(),
            file: file.into(),
            module: if python {
                module_of_file(file)
            } else {
                String::new()
            },
            python,
            ..unknown()
        };
        let cpp = "/pytorch/c10/cuda/CUDACachingAllocator.cpp";
        assert!(is_plumbing(&frame(
            cpp,
            "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc",
            true
        )));
        assert!(is_plumbing(&frame("??", "_PyEval_EvalFrameDefault", true)));
        assert!(is_plumbing(&frame(
            "/pytorch/aten/src/ATen/core/boxing/impl/boxing.h",
            "call",
            true
        )));
        assert!(!is_plumbing(&frame("/src/model.py", "forward", true)));
        assert!(!is_plumbing(&frame(
            "/src/kernels.cpp",
            "launch_fused",
            true
        )));
        let native = NamedFrame {
            module: "trainer".into(),
            function: "train_step".into(),
            ..unknown()
        };
        assert!(!is_plumbing(&native));
        assert!(is_plumbing(&NamedFrame {
            function: "c10::impl::call_functor".into(),
            ..native
        }));
    }
}
