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
    /// Whether an allocation's `size` is what the program asked for (a request-level trace).
    sizes_are_requests: bool,
    /// `api`, `action` and `memory_kind`.
    vocabularies: &'static [Vocabulary; 3],
    /// The stored values of the buffered rows, per storage column.
    columns: [Vec<u64>; COLUMNS],
}

impl EventColumns {
    pub fn new(trace_id: &str, sizes_are_requests: bool) -> EventColumns {
        EventColumns {
            trace_id: ByteArray::from(trace_id),
            sizes_are_requests,
            vocabularies: VOCABULARIES.get_or_init(|| {
                [
                    Vocabulary::new(Api::ALL.iter().map(|a| (a.id(), a.name().to_string()))),
                    Vocabulary::new(Api::ALL.iter().map(|a| (a.id(), serde_name(a.op())))),
                    Vocabulary::new(Api::ALL.iter().map(|a| (a.id(), serde_name(a.kind())))),
                ]
            }),
            columns: Default::default(),
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
        let col = |i: usize| self.columns[i].iter().copied();
        let i64s = |i: usize| col(i).map(|v| v as i64);
        let i32s = |i: usize| col(i).map(|v| v as i32);
        let api_ids: Vec<u16> = col(c::API).map(|v| v as u16).collect();
        let sizes = &self.columns[c::SIZE];
        let flags = &self.columns[c::FLAGS];
        g.byte_arrays(&vec![self.trace_id.clone(); n])?;
        g.i64s(i64s(c::SEQ))?;
        g.i64s(i64s(c::TIME))?;
        g.i64s(i64s(c::DURATION))?;
        g.i32s(i32s(c::PID))?;
        g.i32s(i32s(c::TID))?;
        g.opt_i32s(col(c::DEVICE).map(|v| {
            let d = unzigzag(v) as i32;
            (d != NO_DEVICE).then_some(d)
        }))?;
        g.i64s(i64s(c::STREAM))?;
        for v in self.vocabularies {
            g.byte_arrays(&v.column(&api_ids))?;
        }
        g.i64s(i64s(c::ADDRESS))?;
        g.i64s(i64s(c::SIZE))?;
        g.opt_i64s((0..n).map(|i| {
            let api = Api::from_id(api_ids[i]).expect("api ids are validated at decode");
            let request = self.sizes_are_requests
                && api.op() == Op::Alloc
                && flags[i] & ALLOCATOR_SEGMENT == 0;
            request.then_some(sizes[i] as i64)
        }))?;
        g.i64s(i64s(c::HANDLE))?;
        g.i64s(i64s(c::AUX))?;
        g.i64s(i64s(c::FLAGS))?;
        g.i64s(i64s(c::POOL))?;
        g.opt_i64s(col(c::STACK).map(|v| (v != u64::from(NO_STACK)).then_some(v as i64)))?;
        g.i32s(i32s(c::RESULT))?;
        for c in &mut self.columns {
            c.clear();
        }
        Ok(())
    }
}

fn extend(out: &mut Vec<u64>, col: &Column, n: usize) {
    match col {
        Column::Linear { start, step } => {
            out.extend((0..n as u64).map(|i| start.wrapping_add(i.wrapping_mul(*step as u64))))
        }
        Column::Values(v) => out.extend_from_slice(v),
        Column::Narrow(v) => out.extend(v.iter().map(|&x| u64::from(x))),
    }
}
