//! Other tools' formats: a PyTorch memory snapshot or an RMM memory-event log read into a trace,
//! and a trace written as a PyTorch snapshot, Perfetto's trace-event JSON, an RMM log, or
//! Parquet tables for query engines. Sans-IO: documents and bytes in and out (Parquet: into
//! the writers it is given).

pub mod export_perfetto;
pub mod export_snapshot;
pub mod import_snapshot;
pub mod parquet;
pub mod rmm_log;
