//! Event chunks buffered into row groups of the `events` table and written column by column.

use super::vocabulary::{Vocabulary, serde_name};
use super::write::RowGroup;
use parquet::data_type::ByteArray;
use parquet::errors::ParquetError;
use std::io::Write;
use std::sync::OnceLock;
use vramtrace_format::codec::unzigzag;
use vramtrace_format::conventions::ALLOCATOR_SEGMENT;
use vramtrace_format::{Api, COLUMNS, Column, EventBatch, NO_DEVICE, NO_STACK, Op};

/// Storage indices of the event columns (`vramtrace_format::COLUMN_NAMES`).
mod c {
    pub const SEQ: usize = 0;
    pub const TIME: usize = 1;
    pub const DURATION: usize = 2;
    pub const PID: usize = 3;
    pub const TID: usize = 4;
    pub const DEVICE: usize = 5;
    pub const API: usize = 6;
    pub const RESULT: usize = 7;
    pub const ADDRESS: usize = 8;
    pub const SIZE: usize = 9;
    pub const HANDLE: usize = 10;
    pub const AUX: usize = 11;
    pub const STREAM: usize = 12;
    pub const POOL: usize = 13;
    pub const FLAGS: usize = 14;
    pub const STACK: usize = 15;
}

/// The string columns keyed by API id, built once.
static VOCABULARIES: OnceLock<[Vocabulary; 3]> = OnceLock::new();

/// Buffers the event batches of one trace and writes them as `events` rows.
pub struct EventColumns {
    trace_id: ByteArray,
    /// `trace_id` repeated, as long as the longest row group so far: cloned once per trace,
    /// not once per row group (a shared byte array's clone and drop update its count).
    trace_ids: Vec<ByteArray>,
    /// Whether an allocation's `size` is what the program asked for (a request-level trace).
    sizes_are_requests: bool,
    /// `api`, `action` and `memory_kind`.
    vocabularies: &'static [Vocabulary; 3],
    /// The stored values of the buffered rows, per storage column, as the signed integers
    /// with the same bits that the tables hold: the 64-bit columns are written as they are.
    columns: [Vec<i64>; COLUMNS],
    /// One string column's values, its allocation reused for every string column.
    strings: Vec<ByteArray>,
}

impl EventColumns {
    pub fn new(trace_id: &str, sizes_are_requests: bool) -> EventColumns {
        EventColumns {
            trace_id: ByteArray::from(trace_id),
            trace_ids: Vec::new(),
            sizes_are_requests,
            vocabularies: VOCABULARIES.get_or_init(|| {
                [
                    Vocabulary::new(Api::ALL.iter().map(|a| (a.id(), a.name().to_string()))),
                    Vocabulary::new(Api::ALL.iter().map(|a| (a.id(), serde_name(a.op())))),
                    Vocabulary::new(Api::ALL.iter().map(|a| (a.id(), serde_name(a.kind())))),
                ]
            }),
            columns: Default::default(),
            strings: Vec::new(),
        }
    }

    /// The rows buffered.
    pub fn len(&self) -> usize {
        self.columns[c::SEQ].len()
    }

    /// Buffers the rows of `batch`.
    pub fn push(&mut self, batch: &EventBatch) {
        let n = batch.len();
        for (i, col) in self.columns.iter_mut().enumerate() {
            extend(col, batch.column(i), n);
        }
    }

    /// Writes the buffered rows as one row group and empties the buffer.
    pub fn write<W: Write + Send>(&mut self, g: &mut RowGroup<'_, W>) -> Result<(), ParquetError> {
        let n = self.len();
        if self.trace_ids.len() < n {
            self.trace_ids.resize(n, self.trace_id.clone());
        }
        let col = |i: usize| self.columns[i].as_slice();
        let i32s = |i: usize| col(i).iter().map(|&v| v as i32);
        let api_ids: Vec<u16> = col(c::API).iter().map(|&v| v as u16).collect();
        let sizes = col(c::SIZE);
        let flags = col(c::FLAGS);
        g.byte_arrays(&self.trace_ids[..n])?;
        g.i64_slice(col(c::SEQ))?;
        g.i64_slice(col(c::TIME))?;
        g.i64_slice(col(c::DURATION))?;
        g.i32s(i32s(c::PID))?;
        g.i32s(i32s(c::TID))?;
        g.opt_i32s(col(c::DEVICE).iter().map(|&v| {
            let d = unzigzag(v as u64) as i32;
            (d != NO_DEVICE).then_some(d)
        }))?;
        g.i64_slice(col(c::STREAM))?;
        for v in self.vocabularies {
            v.column(&api_ids, &mut self.strings);
            g.byte_arrays(&self.strings)?;
        }
        g.i64_slice(col(c::ADDRESS))?;
        g.i64_slice(sizes)?;
        g.opt_i64s((0..n).map(|i| {
            let api = Api::from_id(api_ids[i]).expect("api ids are validated at decode");
            let request = self.sizes_are_requests
                && api.op() == Op::Alloc
                && flags[i] as u64 & ALLOCATOR_SEGMENT == 0;
            request.then_some(sizes[i])
        }))?;
        g.i64_slice(col(c::HANDLE))?;
        g.i64_slice(col(c::AUX))?;
        g.i64_slice(flags)?;
        g.i64_slice(col(c::POOL))?;
        g.opt_i64s(
            col(c::STACK)
                .iter()
                .map(|&v| (v as u64 != u64::from(NO_STACK)).then_some(v)),
        )?;
        g.i32s(i32s(c::RESULT))?;
        for c in &mut self.columns {
            c.clear();
        }
        Ok(())
    }
}

fn extend(out: &mut Vec<i64>, col: &Column, n: usize) {
    match col {
        Column::Linear { start, step } => out
            .extend((0..n as u64).map(|i| start.wrapping_add(i.wrapping_mul(*step as u64)) as i64)),
        Column::Values(v) => out.extend(v.iter().map(|&x| x as i64)),
        Column::Narrow(v) => out.extend(v.iter().map(|&x| i64::from(x))),
    }
}
