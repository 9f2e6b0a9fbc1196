//! A small, safe reader and writer for data-only Python pickles: PyTorch memory snapshots.
//!
//! `torch.cuda.memory._dump_snapshot` is `pickle.dump(snapshot, f)` at Python's default protocol
//! (pytorch/pytorch `torch/cuda/memory.py`, `_dump_snapshot`). The snapshot holds only dicts,
//! lists, tuples, str, int, float, bool and None, but it *shares* objects: one dict per unique
//! frame and one list per unique traceback, referenced from many places through the pickle memo
//! (pytorch/pytorch `torch/csrc/profiler/combined_traceback.cpp`, `py_symbolize`). serde-pickle
//! rejects or corrupts such files (docs/dependencies.md, "PyTorch snapshots"), hence this module.
//!
//! # What it accepts and refuses
//!
//! The reader understands the data opcodes of protocols 2 to 5 (containers, numbers, strings,
//! bytes, the memo, framing, marks) and refuses, with the opcode's name and byte offset, every
//! opcode that would import a name or call anything (`GLOBAL`, `STACK_GLOBAL`, `REDUCE`,
//! `BUILD`, `INST`, `OBJ`, `NEWOBJ`, `NEWOBJ_EX`, `EXT1/2/4`, `PERSID`, `BINPERSID`) and the
//! out-of-band buffer opcodes. Reading never executes anything: the result is plain data.
//!
//! # Invariants
//!
//! - Shared objects stay shared: every container is a node in [`Document`]'s arena and every
//!   reference to it, first or through the memo, is the same [`Id`].
//! - Bounded work and memory: a length prefix is checked against the bytes that remain before
//!   anything is allocated, the memo is a map (a huge `LONG_BINPUT` index costs nothing), and the
//!   reader is a loop, not a recursion, so nesting depth cannot overflow the stack. What one
//!   opcode byte can still make (a container, a memo entry, a copied value) is charged against a
//!   budget in proportion to the pickle's length ([`Limits::for_len`]) that the recorded
//!   snapshots use less than half of.
//! - No panics on any input: truncated, corrupt and hostile bytes give an [`Error`] naming the
//!   byte offset (fuzzed by `formats/fuzz`, tested at every truncation point).
//!
//! The writer emits protocol 4 without framing, using only opcodes Python itself emits, so the
//! JavaScript unpickler of pytorch.org/memory_viz reads it too (it rejects protocol 5:
//! pytorch/pytorch issue 183842).

mod opcode;
mod reader;
mod value;
mod writer;

pub use reader::{Limits, MEMORY_BASE, MEMORY_PER_BYTE, memory_spent, read, read_with};
pub use value::{Document, Id, StrId, Value};
pub use writer::write;

/// Why a pickle could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("the pickle ends at byte {offset} inside {what}")]
    Truncated { offset: u64, what: &'static str },

    #[error(
        "opcode {name} (0x{opcode:02x}) at byte {offset} would import or call Python code; \
         vramtrace reads data-only pickles such as PyTorch memory snapshots and refuses it"
    )]
    Refused {
        offset: u64,
        opcode: u8,
        name: &'static str,
    },

    #[error("unsupported pickle opcode {name} (0x{opcode:02x}) at byte {offset}")]
    Unsupported {
        offset: u64,
        opcode: u8,
        name: &'static str,
    },

    #[error("unknown pickle opcode 0x{opcode:02x} at byte {offset} (not a pickle, or corrupt)")]
    UnknownOpcode { offset: u64, opcode: u8 },

    #[error("pickle protocol {found} at byte {offset} is not supported (2 to 5 are)")]
    Protocol { offset: u64, found: u8 },

    #[error("malformed pickle at byte {offset}: {what}")]
    Malformed { offset: u64, what: String },

    #[error("the pickle exceeds a limit at byte {offset}: {what}")]
    Limit { offset: u64, what: String },

    #[error("cannot write the pickle: {0}")]
    Unwritable(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests;
