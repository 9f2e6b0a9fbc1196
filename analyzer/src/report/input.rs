//! What the report reads of a trace: everything but its events, which it never holds, and what
//! it needs of them, each made in a pass over the events in file order: the request model and
//! the allocation table with its rows ([`crate::model::Loader::with_rows`]), and the limits the
//! events record ([`crate::limits`]). A caller with the file streams it into these (`vramtrace
//! report` does, as `replay` streams its requests); [`ReportInput::of`] takes a decoded trace.

use crate::limits::{ProcessLimits, limits};
use crate::model::Model;
use crate::model::table::AllocationTable;
use vramtrace_format::{Trace, TraceHead};

/// A trace as the report reads it.
#[derive(Debug)]
pub struct ReportInput {
    /// The trace's metadata, tables and chunks read.
    pub head: TraceHead,
    pub model: Model,
    /// With its rows.
    pub table: AllocationTable,
    pub limits: ProcessLimits,
}

impl ReportInput {
    /// The input of a trace decoded whole, with its `model` and `table` already built from it
    /// ([`crate::model::load`]); its events are dropped here.
    pub fn of(trace: Trace, (model, table): (Model, AllocationTable)) -> ReportInput {
        let limits = limits(trace.events());
        ReportInput {
            head: trace.into_parts().0,
            model,
            table,
            limits,
        }
    }
}
