//! Which loaded module an instruction address falls in.

use vramtrace_format::{Module, Tables};

/// A trace's modules sorted by load address, for address lookups.
pub struct ModuleIndex<'a> {
    modules: Vec<&'a Module>,
}

impl<'a> ModuleIndex<'a> {
    pub fn new(tables: &'a Tables) -> ModuleIndex<'a> {
        let mut modules: Vec<&Module> = tables.modules.iter().collect();
        modules.sort_unstable_by_key(|m| (m.load_address, m.size, m.path.as_str()));
        ModuleIndex { modules }
    }

    /// The module containing `address` and the offset into it.
    pub fn module_at(&self, address: u64) -> Option<(&'a Module, u64)> {
        let i = self.modules.partition_point(|m| m.load_address <= address);
        let m = *self.modules.get(i.checked_sub(1)?)?;
        let offset = address - m.load_address;
        (offset < m.size.max(1)).then_some((m, offset))
    }
}
