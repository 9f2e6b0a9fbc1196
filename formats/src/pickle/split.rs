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
use rayon::prelude::*;

/// Marks nested deeper than this are not a snapshot's; such a pickle is read in one piece.
const MAX_DEPTH: usize = 1 << 10;

/// Pickles up to this long are split: [`made_at`](Plan::made_at) keeps offsets in 30 bits.
const MAX_LEN: usize = (1 << 30) - 1;

/// How a pickle is read in parts.
#[derive(Debug)]
pub(super) struct Plan {
    /// The parts, in order.
    pub(super) parts: Vec<Part>,
    /// For each memo index, what made its value ([`made`]).
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

/// What made a memo entry's value, as far as a part needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Made {
    /// The string opcode at this offset.
    Str(usize),
    List,
    Dict,
    Tuple,
    /// Not the opcode before the memo entry (a part cannot use it).
    Opaque,
}

const OPAQUE: u32 = u32::MAX;
const TAG_SHIFT: u32 = 30;
const TAG_STR: u32 = 0;
const TAG_LIST: u32 = 1;
const TAG_DICT: u32 = 2;
const TAG_TUPLE: u32 = 3;

/// What an entry of [`Plan::made_at`] says.
pub(super) fn made(entry: u32) -> Made {
    if entry == OPAQUE {
        return Made::Opaque;
    }
    match entry >> TAG_SHIFT {
        TAG_STR => Made::Str((entry & ((1 << TAG_SHIFT) - 1)) as usize),
        TAG_LIST => Made::List,
        TAG_DICT => Made::Dict,
        _ => Made::Tuple,
    }
}

/// The bytes the opcode at `pos` takes, itself included; `None` when they pass the end.
#[inline(always)]
pub(super) fn opcode_len(bytes: &[u8], pos: usize) -> Option<usize> {
    let code = *bytes.get(pos)?;
    let at = |n: usize| bytes.get(pos + 1..pos + 1 + n);
    let arg = match code {
        op::PROTO | op::BININT1 | op::BINPUT | op::BINGET => 1,
        op::BININT2 => 2,
        op::BININT | op::LONG_BINPUT | op::LONG_BINGET => 4,
        op::FRAME | op::BINFLOAT => 8,
        op::LONG1 | op::SHORT_BINUNICODE | op::SHORT_BINSTRING | op::SHORT_BINBYTES => {
            1 + usize::from(at(1)?[0])
        }
        op::LONG4 | op::BINUNICODE | op::BINSTRING | op::BINBYTES => {
            4 + u32::from_le_bytes(at(4)?.try_into().ok()?) as usize
        }
        op::BINUNICODE8 | op::BINBYTES8 | op::BYTEARRAY8 => {
            usize::try_from(u64::from_le_bytes(at(8)?.try_into().ok()?))
                .ok()?
                .checked_add(8)?
        }
        _ => 0,
    };
    let n = arg.checked_add(1)?;
    (pos.checked_add(n)? <= bytes.len()).then_some(n)
}

/// The parts of `bytes` of at least `min_part` bytes each, outermost batches that hold no
/// other such batch; `None` when the pickle is not one this walk understands (it is then read
/// in one piece, which also reports whatever is wrong with it).
pub(super) fn plan(bytes: &[u8], min_part: usize) -> Option<Plan> {
    if bytes.len() > MAX_LEN {
        return None;
    }
    let walks: Vec<Option<Walk>> = frames(bytes)
        .par_iter()
        .map(|&(start, end)| walk(bytes, start, end))
        .collect();
    let mut parts = Vec::new();
    let mut made_at: Vec<u32> = Vec::new();
    let mut marks: Vec<Mark> = Vec::new();
    for w in walks {
        let w = w?;
        let base = u32::try_from(made_at.len()).ok()?;
        if w.puts
            .iter()
            .any(|&(local, index)| Some(index) != base.checked_add(local))
        {
            return None;
        }
        for &event in &w.events {
            match event {
                Event::Open { pos, memo } => {
                    if marks.len() >= MAX_DEPTH {
                        return None;
                    }
                    marks.push(Mark {
                        start: pos as usize,
                        memo_base: base.checked_add(memo)?,
                        holds_part: false,
                    });
                }
                Event::Close { pos, batch } => {
                    let mark = marks.pop()?;
                    let mut holds_part = mark.holds_part;
                    let end = pos as usize;
                    if batch && !holds_part && end - mark.start >= min_part {
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
                }
            }
        }
        made_at.extend_from_slice(&w.made_at);
        // A snapshot makes a memo entry per 33 bytes and the walk keeps 4 bytes for each:
        // past one per 2 bytes the pickle is not a snapshot's.
        if made_at.len() > bytes.len() / 2 {
            return None;
        }
        if w.stopped {
            return Some(Plan { parts, made_at });
        }
    }
    None
}

/// An open mark: where its items start, its first memo entry, whether a part was taken
/// inside it (it is then not a part itself).
struct Mark {
    start: usize,
    memo_base: u32,
    holds_part: bool,
}

/// A mark opened (its items' start, the memo entries the walk made before it) or popped (by
/// `APPENDS`, `SETITEMS` or `TUPLE`: a batch; by `POP_MARK`: not one), at the offset of the
/// opcode that pops it.
#[derive(Debug, Clone, Copy)]
enum Event {
    Open { pos: u32, memo: u32 },
    Close { pos: u32, batch: bool },
}

/// What walking `start..end` found, its memo entries numbered from 0.
struct Walk {
    events: Vec<Event>,
    made_at: Vec<u32>,
    /// `(entry, index)` for each explicit `BINPUT` or `LONG_BINPUT`.
    puts: Vec<(u32, u32)>,
    /// Whether a `STOP` ended it.
    stopped: bool,
}

/// The frames of `bytes` (`FRAME` opcodes, each followed by as many bytes as it says) and
/// what lies before and after them, in order.
fn frames(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut at = if bytes.first() == Some(&op::PROTO) {
        2
    } else {
        0
    };
    while bytes.get(at) == Some(&op::FRAME) {
        let Some(next) = opcode_len(bytes, at).and_then(|n| {
            let len = u64::from_le_bytes(bytes.get(at + 1..at + 9)?.try_into().ok()?);
            (at + n).checked_add(usize::try_from(len).ok()?)
        }) else {
            break;
        };
        if next > bytes.len() {
            break;
        }
        if at > start {
            out.push((start, at));
            start = at;
        }
        at = next;
    }
    out.push((start, bytes.len()));
    out
}

/// Walks the opcodes from `start` up to `end` or a `STOP`; `None` when one is not understood
/// or the last does not end at `end`.
fn walk(bytes: &[u8], start: usize, end: usize) -> Option<Walk> {
    let mut w = Walk {
        events: Vec::new(),
        made_at: Vec::new(),
        puts: Vec::new(),
        stopped: false,
    };
    let mut pos = start;
    // What the previous opcode made, when it made a value a memo entry can stand for.
    let mut made = OPAQUE;
    while pos < end {
        let code = bytes[pos];
        let at = pos as u32;
        let len = opcode_len(bytes, pos)?;
        let mut now_made = OPAQUE;
        match code {
            op::STOP => {
                w.stopped = true;
                return Some(w);
            }
            op::SHORT_BINUNICODE
            | op::BINUNICODE
            | op::BINUNICODE8
            | op::SHORT_BINSTRING
            | op::BINSTRING => now_made = at | (TAG_STR << TAG_SHIFT),
            op::EMPTY_LIST => now_made = at | (TAG_LIST << TAG_SHIFT),
            op::EMPTY_DICT => now_made = at | (TAG_DICT << TAG_SHIFT),
            op::EMPTY_TUPLE | op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                now_made = at | (TAG_TUPLE << TAG_SHIFT)
            }
            op::PROTO
            | op::FRAME
            | op::NONE
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
            | op::LONG_BINGET
            | op::APPEND
            | op::SETITEM => {}
            op::MARK => w.events.push(Event::Open {
                pos: at + 1,
                memo: w.made_at.len() as u32,
            }),
            op::APPENDS | op::SETITEMS => w.events.push(Event::Close {
                pos: at,
                batch: true,
            }),
            op::TUPLE => {
                w.events.push(Event::Close {
                    pos: at,
                    batch: true,
                });
                now_made = at | (TAG_TUPLE << TAG_SHIFT);
            }
            op::POP_MARK => w.events.push(Event::Close {
                pos: at,
                batch: false,
            }),
            op::MEMOIZE => w.made_at.push(made),
            op::BINPUT | op::LONG_BINPUT => {
                let mut index = [0u8; 4];
                index[..len - 1].copy_from_slice(&bytes[pos + 1..pos + len]);
                w.puts
                    .push((w.made_at.len() as u32, u32::from_le_bytes(index)));
                w.made_at.push(made);
            }
            // `POP` (see above) and the text opcodes `PUT` and `GET`, which Python's pickler
            // writes for protocols 0 and 1 only.
            _ => return None,
        }
        pos += len;
        made = now_made;
    }
    (pos == end).then_some(w)
}
