//! Other tools' formats: a PyTorch memory snapshot or an RMM memory-event log read into a trace,
//! and a trace written as a PyTorch snapshot, Perfetto's trace-event JSON or an RMM log. Sans-IO:
//! documents and bytes in and out.

pub mod export_perfetto;
pub mod export_snapshot;
pub mod import_snapshot;
pub mod rmm_log;
