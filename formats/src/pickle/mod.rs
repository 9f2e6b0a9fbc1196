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
//! # Opcodes
//!
//! Codes and arguments are those of CPython's `Lib/pickle.py` (the opcode table, and the
//! `_Unpickler.load_*` method of each) and `Modules/_pickle.c` (`load_*`), documented opcode by
//! opcode in `Lib/pickletools.py` (python/cpython, main). What each does here, as there:
//! `PROTO n` checks the protocol (2 to 5 accepted); `FRAME n` (8-byte length) only groups
//! opcodes for buffered reads, so its length is checked against the bytes left and otherwise
//! ignored; `MARK` pushes the stack height; `POP` drops the top value or, on an empty frame,
//! the innermost mark (`load_pop`); `POP_MARK` drops back to the mark; `DUP` copies the top;
//! `NONE`, `NEWTRUE`, `NEWFALSE`; `BININT` (4 bytes signed), `BININT1` (1 byte unsigned),
//! `BININT2` (2 bytes unsigned), `LONG1`/`LONG4` (a 1- or 4-byte length, then little-endian
//! two's complement; up to 16 bytes read here); `BINFLOAT` (8 bytes big-endian);
//! `SHORT_BINUNICODE`, `BINUNICODE`, `BINUNICODE8` (UTF-8 of a 1-, 4- or 8-byte length) and
//! `SHORT_BINSTRING`/`BINSTRING` (Python 2 `str`: read as UTF-8, where Python 3 by default
//! accepts only ASCII); `SHORT_BINBYTES`, `BINBYTES`, `BINBYTES8`, `BYTEARRAY8` (all read as
//! bytes); `EMPTY_LIST`, `EMPTY_DICT`,
//! `EMPTY_TUPLE`; `APPEND`/`APPENDS` (to the list below the value or the mark), `SETITEM`/
//! `SETITEMS` (key-value pairs into the dict below them, a repeated key keeping its first
//! place); `TUPLE` (from the mark), `TUPLE1/2/3`; the memo: `MEMOIZE` (index = the memo's
//! size), `BINPUT`/`LONG_BINPUT`/`PUT` (1-byte, 4-byte, decimal-line index) and
//! `BINGET`/`LONG_BINGET`/`GET`; `STOP` returns the top. Text protocols 0 and 1 (`INT`, `LONG`,
//! `FLOAT`, `STRING`, `UNICODE`, `LIST`, `DICT`) and sets (`EMPTY_SET`, `ADDITEMS`,
//! `FROZENSET`) are refused as unsupported: `pickle.dump` writes none of them for a snapshot.
//!
//! The document is compact ([`Document`]: 8-byte values, containers as spans of three arenas,
//! strings borrowed from the input and interned, equal lists sharing their items and dicts of
//! equal keys their keys), which makes
//! reading several times faster than CPython's `pickle.load` of the same file
//! (analyzer/BENCHMARKS.md, "Snapshot to page").
//!
//! # Invariants
//!
//! - Shared objects stay shared: every container is a node of [`Document`] and every reference
//!   to it, first or through the memo, is the same [`Id`] (two equal lists that are different
//!   Python objects keep two ids, even where they share their items).
//! - Bounded work and memory: a length prefix is checked against the bytes that remain before
//!   anything is allocated, the memo is a vector with a map beside it for indexes far beyond
//!   its end (a huge `LONG_BINPUT` index costs nothing), and the
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
mod parallel;
mod reader;
mod split;
mod value;
mod writer;

pub use reader::{Limits, MEMORY_BASE, MEMORY_PER_BYTE, memory_spent, read, read_with};
pub use value::{Document, Entries, Id, StrId, Value};
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
