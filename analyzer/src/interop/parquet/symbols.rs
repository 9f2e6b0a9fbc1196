//! The `stacks`, `frames` and `modules` tables of one trace.
//!
//! Stacks are in array form: one row per distinct stack with its frame ids innermost first, as
//! the trace stores them and as OpenTelemetry profiles' `stack_table` and pprof's
//! `Sample.location_id` do. A parent-pointer tree (Perfetto's `stack_profile_callsite`) shares
//! prefixes, but its full stacks need a recursive query; these tables are small next to
//! `events`, and `frame_ids[1]` is the allocation site in one lookup.

use super::write::RowGroup;
use crate::model::ModuleIndex;
use crate::symbolize::{NoFiles, StackNames, library_of};
use parquet::errors::ParquetError;
use std::io::Write;
use vramtrace_format::conventions::python_frame;
use vramtrace_format::{Module, Tables};

/// `stacks`: id, depth, frame ids, and the library of the stack's native frames (named by
/// module, without reading the program's files).
pub fn stacks<W: Write + Send>(
    g: &mut RowGroup<'_, W>,
    trace_id: &str,
    tables: &Tables,
) -> Result<(), ParquetError> {
    let mut files = NoFiles;
    let names = StackNames::new(tables, &mut files);
    let s = || tables.stacks.iter();
    let frames: Vec<Vec<i64>> = s()
        .map(|s| s.frames.iter().map(|&f| i64::from(f)).collect())
        .collect();
    g.texts(s().map(|_| trace_id))?;
    g.i64s(s().map(|s| i64::from(s.id)))?;
    g.i32s(s().map(|s| s.frames.len() as i32))?;
    g.i64_lists(frames.iter().map(Vec::as_slice))?;
    g.texts(s().map(|s| library_of(&names.named(s.id))))
}

/// `frames`: native frames by module and offset (`rel_pc`), Python frames by file and line
/// (the recorder's Python frames table, and imported PyTorch snapshots' synthetic `py:`
/// modules).
pub fn frames<W: Write + Send>(
    g: &mut RowGroup<'_, W>,
    trace_id: &str,
    tables: &Tables,
) -> Result<(), ParquetError> {
    let names = ModuleIndex::new(tables);
    let n = tables.frames.len() + tables.python_frames.len();
    let mut ids = Vec::with_capacity(n);
    let mut kind = Vec::with_capacity(n);
    let mut address = Vec::with_capacity(n);
    let mut mapping = Vec::with_capacity(n);
    let mut rel_pc = Vec::with_capacity(n);
    let mut function = Vec::with_capacity(n);
    let mut file = Vec::with_capacity(n);
    let mut line = Vec::with_capacity(n);
    for f in &tables.frames {
        ids.push(i64::from(f.id));
        let at = names.module_at(f.address);
        match at.and_then(|(m, off)| python_frame(&m.path, off)) {
            Some((filename, lineno, name)) => {
                kind.push("python");
                address.push(None);
                mapping.push(None);
                rel_pc.push(None);
                function.push(Some(name.to_string()));
                file.push(Some(filename.to_string()));
                line.push(Some(lineno as i64));
            }
            None => {
                kind.push("native");
                address.push(Some(f.address as i64));
                mapping.push(at.map(|(m, _)| i64::from(m.id)));
                rel_pc.push(at.map(|(_, off)| off as i64));
                function.push(None);
                file.push(None);
                line.push(None);
            }
        }
    }
    for f in &tables.python_frames {
        ids.push(i64::from(f.id));
        kind.push("python");
        address.push(None);
        mapping.push(None);
        rel_pc.push(None);
        function.push(Some(f.function.clone()));
        file.push(Some(f.file.clone()));
        line.push(Some(i64::from(f.line)));
    }
    g.texts((0..n).map(|_| trace_id))?;
    g.i64s(ids)?;
    g.texts(kind)?;
    g.opt_i64s(address)?;
    g.opt_i64s(mapping)?;
    g.opt_i64s(rel_pc)?;
    g.opt_texts(function.iter().map(Option::as_deref))?;
    g.opt_texts(file.iter().map(Option::as_deref))?;
    g.opt_i64s(line)
}

/// `modules`: the mapped files (not the synthetic `py:` modules of Python frames).
pub fn real_modules(tables: &Tables) -> Vec<&Module> {
    tables
        .modules
        .iter()
        .filter(|m| python_frame(&m.path, 0).is_none())
        .collect()
}

/// `modules`: the [`real_modules`].
pub fn modules<W: Write + Send>(
    g: &mut RowGroup<'_, W>,
    trace_id: &str,
    real: &[&Module],
) -> Result<(), ParquetError> {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let m = || real.iter();
    g.texts(m().map(|_| trace_id))?;
    g.i64s(m().map(|m| i64::from(m.id)))?;
    g.i32s(m().map(|m| m.pid as i32))?;
    g.texts(m().map(|m| m.path.as_str()))?;
    let build_ids: Vec<String> = m().map(|m| hex(&m.build_id)).collect();
    g.texts(build_ids.iter().map(String::as_str))?;
    g.i64s(m().map(|m| m.load_address as i64))?;
    g.i64s(m().map(|m| m.load_address.wrapping_add(m.size) as i64))?;
    g.i64s(m().map(|m| m.loaded_ns as i64))?;
    g.opt_i64s(m().map(|m| m.unloaded_ns.map(|t| t as i64)))
}
