//! Other tools' formats: a PyTorch memory snapshot read into a trace, and a trace written as a
//! PyTorch snapshot, as Perfetto's trace-event JSON, or as Parquet tables for query engines.
//! Sans-IO: documents and bytes in and out (Parquet: into the writers it is given).

pub mod export_perfetto;
pub mod export_snapshot;
pub mod import_snapshot;
pub mod parquet;
