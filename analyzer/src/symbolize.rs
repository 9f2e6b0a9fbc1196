//! Offline symbolization: a trace's raw return addresses become function names, using the
//! module map the recorder wrote (path, load address, build-id).
//!
//! Sans-IO: the traced program's files are read through [`ModuleFiles`], which the caller
//! implements (the model is samply-symbols' `FileAndPathHelper`); the `vramtrace` binary reads
//! ELF files with blazesym, [`NoFiles`] reads nothing. A frame that cannot be resolved is shown
//! as `module+0xoffset`, the offset from the module's load address as the recorder defines it
//! (the same figure the tests crate's `top_stacks` example prints). Names are cached for the run,
//! per address; a report asks for the few thousand distinct frames it shows.

use crate::summary::short_frame;
use std::collections::HashMap;
use vramtrace_format::conventions::python_frame;
use vramtrace_format::{Module, Tables};

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

/// Names frames of a trace's stacks.
pub struct Symbolizer<'t, 'f> {
    tables: &'t Tables,
    /// Frame id → address.
    frames: HashMap<u32, u64>,
    /// Stack id → frame ids, innermost first.
    stacks: HashMap<u32, &'t [u32]>,
    /// Module indices sorted by load address.
    modules: Vec<usize>,
    files: &'f mut dyn ModuleFiles,
    names: HashMap<u64, String>,
}

impl<'t, 'f> Symbolizer<'t, 'f> {
    /// Names the frames of `tables`, reading the modules' files through `files`.
    pub fn new(tables: &'t Tables, files: &'f mut dyn ModuleFiles) -> Symbolizer<'t, 'f> {
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
            files,
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
        self.files
            .function_at(module, offset)
            .unwrap_or_else(|| format!("{}+{offset:#x}", base_name(&module.path)))
    }
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
        assert_eq!(s.name(0x7000_0000 + 42), "forward (torch/nn/linear.py:42)");
        drop(s);
        assert_eq!(files.0, 0);
    }
}
