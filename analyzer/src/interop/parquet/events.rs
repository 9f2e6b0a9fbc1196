//! Event chunks as Arrow record batches of the `events` table, column by column.

use super::schema;
use super::vocabulary::{Vocabulary, serde_name};
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, DictionaryArray, Int32Array, Int64Array, RecordBatch, StringArray};
use std::sync::Arc;
use vramtrace_format::codec::unzigzag;
use vramtrace_format::conventions::ALLOCATOR_SEGMENT;
use vramtrace_format::{Api, Column, EventBatch, NO_DEVICE, NO_STACK, Op};

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

/// Converts event batches of one trace.
pub struct EventColumns {
    trace_id: Arc<StringArray>,
    /// Whether an allocation's `size` is what the program asked for (a request-level trace).
    sizes_are_requests: bool,
    apis: Vocabulary,
    actions: Vocabulary,
    kinds: Vocabulary,
}

impl EventColumns {
    pub fn new(trace_id: &str, sizes_are_requests: bool) -> EventColumns {
        EventColumns {
            trace_id: Arc::new(StringArray::from(vec![trace_id])),
            sizes_are_requests,
            apis: Vocabulary::new(Api::ALL.iter().map(|a| (a.id(), a.name().to_string()))),
            actions: Vocabulary::new(Api::ALL.iter().map(|a| (a.id(), serde_name(a.op())))),
            kinds: Vocabulary::new(Api::ALL.iter().map(|a| (a.id(), serde_name(a.kind())))),
        }
    }

    /// The `events` rows of `batch`.
    pub fn batch(&self, batch: &EventBatch) -> RecordBatch {
        let n = batch.len();
        let u64s = |col: usize| -> Vec<u64> { values(batch.column(col), n) };
        let i64s = |col: usize| -> ArrayRef {
            Arc::new(Int64Array::from(
                u64s(col).into_iter().map(|v| v as i64).collect::<Vec<_>>(),
            ))
        };
        let i32s = |col: usize| -> ArrayRef {
            Arc::new(Int32Array::from(
                u64s(col).into_iter().map(|v| v as i32).collect::<Vec<_>>(),
            ))
        };
        let api_ids: Vec<u16> = u64s(c::API).into_iter().map(|v| v as u16).collect();
        let device = Int32Array::from_iter(u64s(c::DEVICE).into_iter().map(|v| {
            let d = unzigzag(v) as i32;
            (d != NO_DEVICE).then_some(d)
        }));
        let stack = Int64Array::from_iter(
            u64s(c::STACK)
                .into_iter()
                .map(|v| (v != u64::from(NO_STACK)).then_some(v as i64)),
        );
        let sizes = u64s(c::SIZE);
        let flags = u64s(c::FLAGS);
        let requested = Int64Array::from_iter((0..n).map(|i| {
            let api = Api::from_id(api_ids[i]).expect("api ids are validated at decode");
            let request = self.sizes_are_requests
                && api.op() == Op::Alloc
                && flags[i] & ALLOCATOR_SEGMENT == 0;
            request.then_some(sizes[i] as i64)
        }));
        let trace_id =
            DictionaryArray::<Int32Type>::new(Int32Array::from(vec![0; n]), self.trace_id.clone());
        let columns: Vec<ArrayRef> = vec![
            Arc::new(trace_id),
            i64s(c::SEQ),
            i64s(c::TIME),
            i64s(c::DURATION),
            i32s(c::PID),
            i32s(c::TID),
            Arc::new(device),
            i64s(c::STREAM),
            Arc::new(self.apis.keys(&api_ids)),
            Arc::new(self.actions.keys(&api_ids)),
            Arc::new(self.kinds.keys(&api_ids)),
            i64s(c::ADDRESS),
            Arc::new(Int64Array::from(
                sizes.iter().map(|&v| v as i64).collect::<Vec<_>>(),
            )),
            Arc::new(requested),
            i64s(c::HANDLE),
            i64s(c::AUX),
            Arc::new(Int64Array::from(
                flags.iter().map(|&v| v as i64).collect::<Vec<_>>(),
            )),
            i64s(c::POOL),
            Arc::new(stack),
            i32s(c::RESULT),
        ];
        RecordBatch::try_new(schema::events().schema.clone(), columns)
            .expect("the columns match the events schema")
    }
}

fn values(col: &Column, n: usize) -> Vec<u64> {
    match col {
        Column::Linear { start, step } => (0..n as u64)
            .map(|i| start.wrapping_add(i.wrapping_mul(*step as u64)))
            .collect(),
        Column::Values(v) => v.clone(),
        Column::Narrow(v) => v.iter().map(|&x| u64::from(x)).collect(),
    }
}
