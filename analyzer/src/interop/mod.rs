//! Other tools' formats: a PyTorch memory snapshot read into a trace, and a trace written as a
//! PyTorch snapshot or as Perfetto's trace-event JSON. Sans-IO: documents and bytes in and out.

pub mod export_perfetto;
pub mod export_snapshot;
pub mod import_snapshot;
