//! Offline symbolization: a trace's raw return addresses become function names, using the
//! module map the recorder wrote (path, load address, build-id) and blazesym over the ELF files.
//!
//! Runs on the machine that analyses the trace, so a module may be missing or a different build:
//! a file whose build-id differs from the recorded one is not used, and any frame that cannot be
//! resolved is shown as `module+0xoffset`, the offset from the module's load address as the
//! recorder defines it (the same figure the tests crate's `top_stacks` example prints). Results are
//! cached for the run, per address and per module. blazesym's symbolizer is `!Send`, so this is
//! used from one thread, on the few thousand distinct frames a report shows.

use crate::summary::short_frame;
use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer as Blaze};
use std::collections::HashMap;
use std::path::Path;
use vramtrace_format::conventions::python_frame;
use vramtrace_format::{Module, Tables};

/// Names frames of a trace's stacks.
pub struct Symbolizer<'t> {
    tables: &'t Tables,
    /// Frame id → address.
    frames: HashMap<u32, u64>,
    /// Stack id → frame ids, innermost first.
    stacks: HashMap<u32, &'t [u32]>,
    /// Module indices sorted by load address.
    modules: Vec<usize>,
    /// `None` with `--no-symbolize`.
    blaze: Option<Blaze>,
    /// Module index → the virtual address of its file offset 0, when its file is here, is the
    /// recorded build and is an ELF file; `None` when it cannot be used.
    usable: HashMap<usize, Option<u64>>,
    names: HashMap<u64, String>,
}

impl<'t> Symbolizer<'t> {
    /// `resolve: false` names every frame `module+0xoffset` without reading any file.
    pub fn new(tables: &'t Tables, resolve: bool) -> Symbolizer<'t> {
        let mut modules: Vec<usize> = (0..tables.modules.len()).collect();
        modules.sort_by_key(|&i| tables.modules[i].load_address);
        Symbolizer {
            tables,
            frames: tables.frames.iter().map(|f| (f.id, f.address)).collect(),
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

    /// The frames of `stack`, outermost first; empty for an unknown stack or none.
    pub fn stack(&mut self, stack: u32) -> Vec<String> {
        let Some(ids) = self.stacks.get(&stack).copied() else {
            return Vec::new();
        };
        ids.iter()
            .rev()
            .map(|id| match self.frames.get(id) {
                Some(&address) => self.name(address),
                None => format!("(unknown frame {id})"),
            })
            .collect()
    }

    /// The name of the code at `address`.
    pub fn name(&mut self, address: u64) -> String {
        if let Some(n) = self.names.get(&address) {
            return n.clone();
        }
        let name = self.resolve(address);
        self.names.insert(address, name.clone());
        name
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

    fn resolve(&mut self, address: u64) -> String {
        let Some(i) = self.module_of(address) else {
            return format!("{address:#x}");
        };
        let module = &self.tables.modules[i];
        let offset = address - module.load_address;
        // Frames of imported PyTorch snapshots are Python lines in synthetic modules.
        if let Some((file, line, name)) = python_frame(&module.path, offset) {
            return format!("{name} ({}:{line})", short_frame(file));
        }
        let fallback = format!("{}+{offset:#x}", base_name(&module.path));
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
                Some(Symbolized::Sym(sym)) => sym.name.to_string(),
                _ => fallback,
            },
            Err(_) => {
                self.usable.insert(i, None);
                fallback
            }
        }
    }
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
        t.modules[0].path = vramtrace_format::conventions::python_module_path(
            "/venv/lib/python3.12/site-packages/torch/nn/linear.py",
            "forward",
        );
        let mut s = Symbolizer::new(&t, true);
        assert_eq!(s.name(0x7000_0000 + 42), "forward (torch/nn/linear.py:42)");
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
