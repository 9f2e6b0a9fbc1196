//! Where a pickle can be read in parts: a walk over its opcodes that builds no values.
//!
//! Python's pickler writes a list as `EMPTY_LIST`, then its items in batches of at most 1,000
//! between a `MARK` and an `APPENDS`, and a dict likewise with `SETITEMS` (`Lib/pickle.py`,
//! `_batch_appends`, `_batch_setitems`; `Modules/_pickle.c`, `batch_list`, `batch_dict`): a
//! snapshot's trace is a list of 215 such batches of trace entries. What lies between a `MARK`
//! and the `APPENDS`, `SETITEMS` or `TUPLE` that pops it only pushes values above the mark (the
//! reader refuses any opcode that reaches below the innermost mark), so it can be read alone,
//! from an empty stack, and its values put where the mark is. Such a batch is a part.
//!
//! A part may refer to the memo entries made before it. The walk records where each one was
//! made: the opcode of the value a `MEMOIZE` or `PUT` stored, when that opcode made the value
//! (a string, a new list, dict or tuple), so that a part can read the string again or stand in
//! for the container until the parts are joined. Pickles whose memo is not numbered 0, 1, 2,
//! ... in order, as Python's pickler numbers it (`Pickler.memoize`), are not split.

use super::opcode as op;

/// Marks nested deeper than this are not a snapshot's; such a pickle is read in one piece.
const MAX_DEPTH: usize = 1 << 10;

/// A memo entry whose value was not made by the opcode before it (a part cannot use it).
pub(super) const OPAQUE: u32 = u32::MAX;

/// How a pickle is read in parts.
#[derive(Debug)]
pub(super) struct Plan {
    /// The parts, in order.
    pub(super) parts: Vec<Part>,
    /// For each memo index, the offset of the opcode that made its value, or [`OPAQUE`].
    pub(super) made_at: Vec<u32>,
}

/// The items of one batch: the bytes `start..end` (after its `MARK`, up to the opcode that
/// pops it), whose first memo entry is `memo_base`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Part {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) memo_base: u32,
}

/// An open mark: the stack height it protects, where its items start and what the walk knew
/// then.
struct Mark {
    height: usize,
    start: usize,
    memo_base: u32,
    /// Whether a part was taken inside it (it is then not a part itself).
    holds_part: bool,
}

/// The parts of `bytes` of at least `min_part` bytes each, outermost batches that hold no
/// other such batch; `None` when the pickle is not one this walk understands (it is then read
/// in one piece, which also reports whatever is wrong with it).
pub(super) fn plan(bytes: &[u8], min_part: usize) -> Option<Plan> {
    // Offsets are kept in 32 bits.
    u32::try_from(bytes.len()).ok()?;
    let mut parts = Vec::new();
    let mut made_at: Vec<u32> = Vec::new();
    let mut marks: Vec<Mark> = Vec::new();
    let mut height = 0usize;
    let mut pos = 0usize;
    // The offset of the previous opcode when it made a new value a memo entry can stand for.
    let mut made: Option<u32> = None;
    loop {
        let at = pos;
        let code = *bytes.get(pos)?;
        pos += 1;
        // A little-endian length or index of `n` bytes at `pos`.
        let le = |n: usize| -> Option<usize> {
            let mut w = [0u8; 8];
            w[..n].copy_from_slice(bytes.get(pos..pos + n)?);
            usize::try_from(u64::from_le_bytes(w)).ok()
        };
        let skip = match code {
            op::PROTO | op::BININT1 | op::BINPUT | op::BINGET => 1,
            op::BININT2 => 2,
            op::BININT | op::LONG_BINPUT | op::LONG_BINGET => 4,
            op::FRAME | op::BINFLOAT => 8,
            op::LONG1 | op::SHORT_BINUNICODE | op::SHORT_BINSTRING | op::SHORT_BINBYTES => {
                1 + le(1)?
            }
            op::LONG4 | op::BINUNICODE | op::BINSTRING | op::BINBYTES => 4usize.checked_add(le(4)?)?,
            op::BINUNICODE8 | op::BINBYTES8 | op::BYTEARRAY8 => 8usize.checked_add(le(8)?)?,
            _ => 0,
        };
        let mut now_made = None;
        match code {
            op::STOP => break,
            op::PROTO | op::FRAME => {}
            op::SHORT_BINUNICODE
            | op::BINUNICODE
            | op::BINUNICODE8
            | op::SHORT_BINSTRING
            | op::BINSTRING
            | op::EMPTY_LIST
            | op::EMPTY_DICT
            | op::EMPTY_TUPLE => {
                height += 1;
                now_made = Some(at as u32);
            }
            op::NONE
            | op::NEWTRUE
            | op::NEWFALSE
            | op::BININT
            | op::BININT1
            | op::BININT2
            | op::LONG1
            | op::LONG4
            | op::BINFLOAT
            | op::SHORT_BINBYTES
            | op::BINBYTES
            | op::BINBYTES8
            | op::BYTEARRAY8
            | op::DUP
            | op::BINGET
            | op::LONG_BINGET => height += 1,
            op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                height = height.checked_sub(usize::from(code - op::TUPLE1))?;
                now_made = Some(at as u32);
            }
            op::MARK => {
                if marks.len() >= MAX_DEPTH {
                    return None;
                }
                marks.push(Mark {
                    height,
                    start: pos,
                    memo_base: u32::try_from(made_at.len()).ok()?,
                    holds_part: false,
                });
            }
            op::POP if marks.last().is_some_and(|m| m.height == height) => {
                close(&mut marks, None)?;
            }
            op::POP | op::APPEND => height = height.checked_sub(1)?,
            op::SETITEM => height = height.checked_sub(2)?,
            op::POP_MARK => height = close(&mut marks, None)?,
            op::APPENDS | op::SETITEMS => {
                height = close(&mut marks, Some((at, min_part, &mut parts)))?;
            }
            op::TUPLE => {
                height = close(&mut marks, Some((at, min_part, &mut parts)))? + 1;
                now_made = Some(at as u32);
            }
            op::MEMOIZE | op::BINPUT | op::LONG_BINPUT => {
                let index = match code {
                    op::MEMOIZE => made_at.len(),
                    _ => le(skip)?,
                };
                // A snapshot makes a memo entry per 33 bytes and the walk keeps 4 bytes for
                // each: past one per 2 bytes the pickle is not a snapshot's.
                if index != made_at.len() || made_at.len() >= bytes.len() / 2 {
                    return None;
                }
                made_at.push(made.unwrap_or(OPAQUE));
            }
            // The text opcodes `PUT` and `GET` are protocol 0's, which Python's pickler writes
            // for protocols 0 and 1 only.
            _ => return None,
        }
        pos = pos.checked_add(skip)?;
        made = now_made;
    }
    Some(Plan { parts, made_at })
}

/// Pops the innermost mark, returning its height; `batch` (the closing opcode's offset, the
/// smallest part and the parts) when the opcode closes a batch, which becomes a part when it
/// is large enough and holds none.
fn close(marks: &mut Vec<Mark>, batch: Option<(usize, usize, &mut Vec<Part>)>) -> Option<usize> {
    let mark = marks.pop()?;
    let mut holds_part = mark.holds_part;
    if let Some((end, min_part, parts)) = batch
        && !holds_part
        && end - mark.start >= min_part
    {
        parts.push(Part {
            start: mark.start,
            end,
            memo_base: mark.memo_base,
        });
        holds_part = true;
    }
    if let Some(outer) = marks.last_mut() {
        outer.holds_part |= holds_part;
    }
    Some(mark.height)
}
