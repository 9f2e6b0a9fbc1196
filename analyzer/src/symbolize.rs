//! The stack namer: every view's one way of naming a stack's frames. Native return addresses
//! become function names, using the module map the recorder wrote (path, load address,
//! build-id) and blazesym over the ELF files; Python frames are named by the trace itself.
//! [`Symbolizer::site`] picks the frame a user wants first: the innermost one outside the
//! allocator plumbing ([`is_plumbing`]).
//!
//! Runs on the machine that analyses the trace, so a module may be missing or a different build:
//! a file whose build-id differs from the recorded one is not used, and any frame that cannot be
//! resolved is shown as `module+0xoffset`, the offset from the module's load address as the
//! recorder defines it (the same figure the tests crate's `top_stacks` example prints). Results are
//! cached for the run, per address and per module. blazesym's symbolizer is `!Send`, so this is
//! used from one thread, on the few thousand distinct frames a report shows.

use crate::import_snapshot::python_frame;
use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer as Blaze};
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;
use vramtrace_format::{FrameRef, Module, PythonFrame, Tables};

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
    /// One line: `file:line function` for Python, `function (module)` or `module+0xoffset`.
    pub fn text(&self) -> String {
        if self.python {
            return format!("{}:{} {}", self.file, self.line, self.function);
        }
        match (self.function.is_empty(), self.module.is_empty()) {
            (false, false) => format!("{} ({})", self.function, self.module),
            (false, true) => self.function.clone(),
            (true, false) => format!("{}+{:#x}", self.module, self.offset),
            (true, true) => format!("{:#x}", self.offset),
        }
    }
}

/// True for frames of the allocator plumbing between the user's code and the driver: the
/// CUDA runtime and driver, PyTorch's C++ libraries (`libc10*`, `libtorch*`), ctypes and libffi,
/// the Python interpreter, the C library and this recorder; Python code under `torch/`, and the
/// standard library's `ctypes`, `threading`, `runpy` and `importlib`.
pub fn is_plumbing(frame: &NamedFrame) -> bool {
    if frame.python {
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
    m.is_empty() || PREFIXES.iter().any(|p| m.starts_with(p))
}

/// Names frames of a trace's stacks.
pub struct Symbolizer<'t> {
    tables: &'t Tables,
    /// Frame id → what it names.
    frames: HashMap<u32, FrameRef<'t>>,
    /// Stack id → frame ids, innermost first.
    stacks: HashMap<u32, &'t [u32]>,
    /// Module indices sorted by load address.
    modules: Vec<usize>,
    /// `None` with `--no-symbolize`.
    blaze: Option<Blaze>,
    /// Module index → the virtual address of its file offset 0, when its file is here, is the
    /// recorded build and is an ELF file; `None` when it cannot be used.
    usable: HashMap<usize, Option<u64>>,
    names: HashMap<u64, NamedFrame>,
}

impl<'t> Symbolizer<'t> {
    /// `resolve: false` names every native frame `module+0xoffset` without reading any file.
    pub fn new(tables: &'t Tables, resolve: bool) -> Symbolizer<'t> {
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
            blaze: resolve.then(|| Blaze::builder().enable_code_info(false).build()),
            usable: HashMap::new(),
            names: HashMap::new(),
        }
    }

    /// The frames of `stack`, innermost first; empty for an unknown stack or none.
    pub fn frames(&mut self, stack: u32) -> Vec<NamedFrame> {
        let Some(ids) = self.stacks.get(&stack).copied() else {
            return Vec::new();
        };
        ids.iter()
            .map(|id| match self.frames.get(id).copied() {
                Some(FrameRef::Native(address)) => self.named(address),
                Some(FrameRef::Python(p)) => python(p),
                None => NamedFrame {
                    function: format!("(unknown frame {id})"),
                    ..unknown()
                },
            })
            .collect()
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
                module: vramtrace_format::python::module_of_file(file),
            });
        }
        let fallback = NamedFrame {
            module: base_name(&module.path).to_string(),
            offset,
            ..unknown()
        };
        if self.blaze.is_none() {
            return fallback;
        }
        let Some(first_vaddr) = *self.usable.entry(i).or_insert_with(|| {
            same_build(module)
                .then(|| first_load_vaddr(Path::new(&module.path)))
                .flatten()
        }) else {
            return fallback;
        };
        // The ELF's own virtual address, whatever the linker's file layout.
        let virtual_offset = first_vaddr.wrapping_add(offset);
        let blaze = self.blaze.as_ref().expect("checked above");
        let src = Source::Elf(Elf::new(&module.path));
        match blaze.symbolize(&src, Input::VirtOffset(&[virtual_offset])) {
            Ok(v) => match v.first() {
                Some(Symbolized::Sym(sym)) => NamedFrame {
                    function: sym.name.to_string(),
                    ..fallback
                },
                _ => fallback,
            },
            Err(_) => {
                self.usable.insert(i, None);
                fallback
            }
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

/// True when the module's file is here and, if a build-id was recorded, has that build-id.
fn same_build(module: &Module) -> bool {
    let path = Path::new(&module.path);
    if !path.is_file() {
        return false;
    }
    if module.build_id.is_empty() {
        return true;
    }
    matches!(
        blazesym::helper::read_elf_build_id(path),
        Ok(Some(id)) if id.as_ref() == module.build_id.as_slice()
    )
}

/// `p_vaddr − p_offset` of the lowest `PT_LOAD` segment of an ELF64 little-endian file: what
/// turns an offset from the recorder's `load_address` (the lowest segment's address less its
/// file offset, recorder/src/modules.rs) into the ELF's own virtual address. 0 for most shared
/// libraries and PIE executables, 0x400000 for classic executables, a page or more for some
/// lld layouts.
fn first_load_vaddr(path: &Path) -> Option<u64> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let mut header = [0u8; 64];
    f.read_exact(&mut header).ok()?;
    // ELF magic, 64-bit, little-endian.
    if &header[..4] != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let phoff = u64_at(&header, 32);
    let phentsize = usize::from(u16_at(&header, 54));
    let phnum = usize::from(u16_at(&header, 56));
    if phentsize < 56 || phnum == 0 || phnum > 4096 {
        return None;
    }
    let mut table = vec![0u8; phentsize * phnum];
    f.seek(SeekFrom::Start(phoff)).ok()?;
    f.read_exact(&mut table).ok()?;
    table
        .chunks_exact(phentsize)
        .filter(|ph| u32::from_le_bytes(ph[..4].try_into().unwrap()) == 1)
        .map(|ph| (u64_at(ph, 16), u64_at(ph, 8)))
        .min()
        .map(|(vaddr, offset)| vaddr.wrapping_sub(offset))
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

    #[test]
    fn unresolved_frames_are_module_plus_offset_outermost_first() {
        let t = tables("/nonexistent/libfoo.so", vec![1, 2, 3]);
        let mut s = Symbolizer::new(&t, true);
        assert_eq!(s.stack(1), vec!["0x0", "0x9999", "libfoo.so+0x1234"]);
        assert!(s.stack(77).is_empty());
        let mut off = Symbolizer::new(&t, false);
        assert_eq!(off.name(0x7000_1234), "libfoo.so+0x1234");
    }

    #[inline(never)]
    fn a_function_the_symbolizer_must_find() -> u64 {
        std::hint::black_box(42)
    }

    #[test]
    fn frames_in_a_binary_that_is_here_get_their_function_names() {
        let exe = std::env::current_exe().unwrap();
        // Where this test binary's file offset 0 is mapped, as the recorder writes it.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let base = maps
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 6 && f[2] == "00000000" && Path::new(f[5]) == exe)
                    .then(|| u64::from_str_radix(f[0].split('-').next().unwrap(), 16).unwrap())
            })
            .expect("the test binary is mapped");
        let build_id = blazesym::helper::read_elf_build_id(&exe)
            .unwrap()
            .map(|b| b.to_vec())
            .unwrap_or_default();
        let mut t = tables(exe.to_str().unwrap(), build_id);
        t.modules[0].load_address = base;
        t.modules[0].size = 1 << 40;
        let address = a_function_the_symbolizer_must_find as *const () as u64 + 4;
        let mut s = Symbolizer::new(&t, true);
        let name = s.name(address);
        assert!(
            name.contains("a_function_the_symbolizer_must_find"),
            "{name}"
        );
        assert_eq!(a_function_the_symbolizer_must_find(), 42);
    }

    #[test]
    fn python_frames_of_imported_snapshots_are_named_by_file_and_line() {
        let mut t = tables("", Vec::new());
        t.modules[0].path = crate::import_snapshot::python_module_path(
            "/venv/lib/python3.12/site-packages/torch/nn/linear.py",
            "forward",
        );
        let mut s = Symbolizer::new(&t, true);
        let named = s.named(0x7000_0000 + 42);
        assert_eq!(
            named.text(),
            "/venv/lib/python3.12/site-packages/torch/nn/linear.py:42 forward"
        );
        assert_eq!(named.module, "torch.nn.linear");
        assert!(named.plumbing);
    }

    #[test]
    fn a_file_of_another_build_is_not_used() {
        // The test binary itself exists but its build-id is not [9; 20].
        let exe = std::env::current_exe().unwrap();
        let t = tables(exe.to_str().unwrap(), vec![9; 20]);
        let mut s = Symbolizer::new(&t, true);
        let name = s.name(0x7000_1234);
        assert!(name.ends_with("+0x1234"), "{name}");
    }
}
