//! What the report reads of a trace: everything but its events, which it never holds, and what
//! it needs of them, each made in a pass over the events in file order: the request model and
//! the allocation table ([`crate::model::Loader`]), the limits the events record
//! ([`crate::limits`]), and the summary, from the table's rows or from the events walked once
//! more ([`SummaryFrom`]). A caller with the file streams it into these (`vramtrace report`
//! does, as `replay` streams its requests, and keeps no row); [`ReportInput::of`] takes a
//! decoded trace.

use crate::limits::{ProcessLimits, limits};
use crate::model::Model;
use crate::model::table::AllocationTable;
use vramtrace_format::{Event, Trace, TraceHead};

/// A trace as the report reads it.
#[derive(Debug)]
pub struct ReportInput {
    /// The trace's metadata, tables and chunks read.
    pub head: TraceHead,
    pub model: Model,
    /// With its rows when the summary reads them ([`SummaryFrom::Rows`]).
    pub table: AllocationTable,
    pub limits: ProcessLimits,
    pub summary_from: SummaryFrom,
}

/// The trace's events once more, in file order, each handed to the argument as the model's
/// pass read it; an error says why the file could not be read again.
pub type Events = Box<dyn FnOnce(&mut dyn FnMut(&Event)) -> Result<(), String> + Send>;

/// What the report's summary reads of the trace's changes.
pub enum SummaryFrom {
    /// The table's rows ([`crate::summary::Summary::with_table`]).
    Rows,
    /// A pass over the events that keeps no row ([`crate::summary::Summary::streamed`]).
    Events(Events),
}

impl std::fmt::Debug for SummaryFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SummaryFrom::Rows => "Rows",
            SummaryFrom::Events(_) => "Events",
        })
    }
}

impl ReportInput {
    /// The input of a trace decoded whole, with its `model` and `table`, rows and all, already
    /// built from it ([`crate::model::load`]); its events are dropped here.
    pub fn of(trace: Trace, (model, table): (Model, AllocationTable)) -> ReportInput {
        let limits = limits(trace.events());
        ReportInput {
            head: trace.into_parts().0,
            model,
            table,
            limits,
            summary_from: SummaryFrom::Rows,
        }
    }
}
