//! The `stacks`, `frames` and `modules` tables of one trace.
//!
//! Stacks are in array form: one row per distinct stack with its frame ids innermost first, as
//! the trace stores them and as OpenTelemetry profiles' `stack_table` and pprof's
//! `Sample.location_id` do. A parent-pointer tree (Perfetto's `stack_profile_callsite`) shares
//! prefixes, but its full stacks need a recursive query; these tables are small next to
//! `events`, and `frame_ids[1]` is the allocation site in one lookup.

use super::schema;
use crate::model::ModuleIndex;
use crate::symbolize::{NoFiles, StackNames, library_of};
use arrow_array::builder::{Int64Builder, ListBuilder};
use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use std::sync::Arc;
use vramtrace_format::Tables;
use vramtrace_format::conventions::python_frame;

fn strings(n: usize, value: &str) -> ArrayRef {
    Arc::new(StringArray::from(vec![value; n]))
}

/// `stacks`: id, depth, frame ids, and the library of the stack's native frames (named by
/// module, without reading the program's files).
pub fn stacks(trace_id: &str, tables: &Tables) -> RecordBatch {
    let mut files = NoFiles;
    let names = StackNames::new(tables, &mut files);
    let mut frames = ListBuilder::new(Int64Builder::new()).with_field(Arc::new(
        arrow_schema::Field::new("item", arrow_schema::DataType::Int64, false),
    ));
    for s in &tables.stacks {
        frames
            .values()
            .append_slice(&s.frames.iter().map(|&f| i64::from(f)).collect::<Vec<_>>());
        frames.append(true);
    }
    let n = tables.stacks.len();
    let columns: Vec<ArrayRef> = vec![
        strings(n, trace_id),
        Arc::new(Int64Array::from_iter_values(
            tables.stacks.iter().map(|s| i64::from(s.id)),
        )),
        Arc::new(Int32Array::from_iter_values(
            tables.stacks.iter().map(|s| s.frames.len() as i32),
        )),
        Arc::new(frames.finish()),
        Arc::new(StringArray::from_iter_values(
            tables.stacks.iter().map(|s| library_of(&names.named(s.id))),
        )),
    ];
    RecordBatch::try_new(schema::stacks().schema.clone(), columns)
        .expect("the columns match the stacks schema")
}

/// `frames`: native frames by module and offset (`rel_pc`), Python frames by file and line
/// (the recorder's Python frames table, and imported PyTorch snapshots' synthetic `py:`
/// modules).
pub fn frames(trace_id: &str, tables: &Tables) -> RecordBatch {
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
    let columns: Vec<ArrayRef> = vec![
        strings(n, trace_id),
        Arc::new(Int64Array::from(ids)),
        Arc::new(StringArray::from(kind)),
        Arc::new(Int64Array::from(address)),
        Arc::new(Int64Array::from(mapping)),
        Arc::new(Int64Array::from(rel_pc)),
        Arc::new(StringArray::from(function)),
        Arc::new(StringArray::from(file)),
        Arc::new(Int64Array::from(line)),
    ];
    RecordBatch::try_new(schema::frames().schema.clone(), columns)
        .expect("the columns match the frames schema")
}

/// `modules`: the mapped files (not the synthetic `py:` modules of Python frames).
pub fn modules(trace_id: &str, tables: &Tables) -> RecordBatch {
    let real: Vec<_> = tables
        .modules
        .iter()
        .filter(|m| python_frame(&m.path, 0).is_none())
        .collect();
    let n = real.len();
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let columns: Vec<ArrayRef> = vec![
        strings(n, trace_id),
        Arc::new(Int64Array::from_iter_values(
            real.iter().map(|m| i64::from(m.id)),
        )),
        Arc::new(Int32Array::from_iter_values(
            real.iter().map(|m| m.pid as i32),
        )),
        Arc::new(StringArray::from_iter_values(
            real.iter().map(|m| m.path.as_str()),
        )),
        Arc::new(StringArray::from_iter_values(
            real.iter().map(|m| hex(&m.build_id)),
        )),
        Arc::new(Int64Array::from_iter_values(
            real.iter().map(|m| m.load_address as i64),
        )),
        Arc::new(Int64Array::from_iter_values(
            real.iter()
                .map(|m| m.load_address.wrapping_add(m.size) as i64),
        )),
        Arc::new(Int64Array::from_iter_values(
            real.iter().map(|m| m.loaded_ns as i64),
        )),
        Arc::new(Int64Array::from_iter(
            real.iter().map(|m| m.unloaded_ns.map(|t| t as i64)),
        )),
    ];
    RecordBatch::try_new(schema::modules().schema.clone(), columns)
        .expect("the columns match the modules schema")
}
