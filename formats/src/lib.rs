//! The vramtrace event model and the `.vramtrace` file format.
//!
//! # Overview
//!
//! A trace is a file header followed by self-contained chunks: metadata, table deltas and event
//! chunks, then an index and a trailer once the writer finishes. Event chunks store their events
//! column by column (LEB128 varints, deltas, run-free linear columns) compressed with zstd, each
//! with a CRC-32, so a reader maps the file and decodes chunks in parallel, detects corruption
//! with its byte offset, and recovers a file whose writer died up to its last complete chunk.
//! `formats/SPEC.md` specifies every byte.
//!
//! # Design constraints
//!
//! No CUDA, no unwinding, no command line: the recorder and the analyzer both depend on this
//! crate. All byte-level encoding lives in `codec`.
//!
//! # Example
//!
//! ```
//! use vramtrace_format::{Api, Event, Metadata, ReadOptions, Trace, TraceWriter, WriterOptions};
//!
//! let mut w = TraceWriter::new(Vec::new(), &Metadata::default(), WriterOptions::default())?;
//! w.push(&Event { seq: 1, address: 0x7f00_0000_0000, size: 4096, ..Event::new(Api::CuMemAlloc_v2) })?;
//! let bytes = w.finish()?;
//!
//! let trace = Trace::from_bytes(&bytes, ReadOptions::default())?;
//! assert!(trace.layout.complete);
//! assert_eq!(trace.events().next().unwrap().size, 4096);
//! # Ok::<(), vramtrace_format::Error>(())
//! ```

mod api;
pub mod chunk;
pub mod codec;
mod column;
pub mod conventions;
pub mod cuda_result;
#[cfg(feature = "synthetic")]
pub mod dense;
mod error;
mod event;
pub mod huge_pages;
pub mod journal;
mod metadata;
#[cfg(feature = "pickle")]
pub mod pickle;
mod reader;
pub mod replace;
#[cfg(feature = "synthetic")]
pub mod synthetic;
mod tables;
#[cfg(test)]
mod testing;
mod torch_trace;
mod writer;

pub use api::{Api, MemoryKind, Op};
pub use column::{COLUMN_NAMES, COLUMNS, Column, ColumnBuilder, EventBatch};
pub use error::{Error, Result};
pub use event::{CUDA_SUCCESS, Event, NO_DEVICE, NO_STACK};
pub use metadata::{ALLOCATOR_ENV_VARS, Metadata};
pub use reader::{EventChunks, Layout, MappedFile, ReadOptions, Trace, TraceHead};
pub use tables::{
    Device, Frame, FrameRef, Module, Pool, Process, PythonFrame, Stack, Stream, Tables, Thread,
};
pub use torch_trace::{EntryLayout, TORCH_LAYOUTS, TorchLayout, parse_torch_version};
pub use writer::{TraceWriter, WriterOptions};
