//! The traced program's files on this machine, for the library's symbolizer: ELF files read
//! with blazesym, used only when they are the build the trace recorded.

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer as Blaze};
use std::collections::HashMap;
use std::path::Path;
use vramtrace::symbolize::ModuleFiles;
use vramtrace_format::Module;

/// Reads the modules' ELF files (blazesym's symbolizer is `!Send`: one thread).
pub struct ElfFiles {
    blaze: Blaze,
    /// Per (path, build-id): the virtual address of the file's offset 0 when the file is here,
    /// is the recorded build and is an ELF file; `None` when it cannot be used.
    usable: HashMap<(String, Vec<u8>), Option<u64>>,
}

impl ElfFiles {
    pub fn new() -> ElfFiles {
        ElfFiles {
            blaze: Blaze::builder().enable_code_info(false).build(),
            usable: HashMap::new(),
        }
    }
}

impl ModuleFiles for ElfFiles {
    fn function_at(&mut self, module: &Module, offset: u64) -> Option<String> {
        let key = (module.path.clone(), module.build_id.clone());
        let first_vaddr = (*self.usable.entry(key.clone()).or_insert_with(|| {
            same_build(module)
                .then(|| first_load_vaddr(Path::new(&module.path)))
                .flatten()
        }))?;
        // The ELF's own virtual address, whatever the linker's file layout.
        let virtual_offset = first_vaddr.wrapping_add(offset);
        let src = Source::Elf(Elf::new(&module.path));
        match self
            .blaze
            .symbolize(&src, Input::VirtOffset(&[virtual_offset]))
        {
            Ok(v) => match v.first() {
                Some(Symbolized::Sym(sym)) => Some(sym.name.to_string()),
                _ => None,
            },
            Err(_) => {
                self.usable.insert(key, None);
                None
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

#[cfg(test)]
mod tests {
    use super::*;
    use vramtrace::symbolize::Symbolizer;
    use vramtrace_format::Tables;

    /// One module at 0x7000_0000 (1 MiB) whose file is `path`.
    fn tables(path: &str, build_id: Vec<u8>) -> Tables {
        Tables {
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
        let mut files = ElfFiles::new();
        let mut s = Symbolizer::new(&t, &mut files);
        let name = s.name(address);
        assert!(
            name.contains("a_function_the_symbolizer_must_find"),
            "{name}"
        );
        assert_eq!(a_function_the_symbolizer_must_find(), 42);
    }

    #[test]
    fn a_file_of_another_build_is_not_used() {
        // The test binary itself exists but its build-id is not [9; 20].
        let exe = std::env::current_exe().unwrap();
        let t = tables(exe.to_str().unwrap(), vec![9; 20]);
        let mut files = ElfFiles::new();
        let mut s = Symbolizer::new(&t, &mut files);
        let name = s.name(0x7000_1234);
        assert!(name.ends_with("+0x1234"), "{name}");
    }
}
