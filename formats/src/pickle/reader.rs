//! The unpickler: a loop over opcodes with a value stack, a mark stack and a memo.
//!
//! Each opcode does what CPython's `Modules/_pickle.c` (`load_*`) does with it, on the compact
//! [`Document`]: a container's items go from the stack into the document's arena in one copy
//! (`APPENDS`, `SETITEMS`, `TUPLE`), a string is checked as UTF-8 and interned without being
//! copied, and the memo is a vector indexed by the memo index (Python's pickler numbers its memo
//! entries 0, 1, 2, ...; an index far beyond them goes to a map, so a huge `LONG_BINPUT` index
//! costs nothing).

use super::opcode::{self as op, code_executing, unsupported};
use super::split::{Made, Part, made, opcode_len};
use super::value::{Document, Full, Id, Kind, Node, Remap, StrId, Value};
use super::{Error, Result, parallel};
use std::borrow::Cow;
use std::collections::HashMap;

/// Caps on what one pickle may make, beyond the natural bound of its length.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Containers (lists, tuples, dicts) in the arena.
    pub max_containers: usize,
    /// Entries in the memo.
    pub max_memo: usize,
    /// Bytes of memory the values, containers and memo entries made may take, at most.
    pub max_memory: usize,
}

/// Memory the reader may spend regardless of the pickle's length.
pub const MEMORY_BASE: usize = 16 << 20;
/// Memory the reader may spend per byte of pickle, beyond [`MEMORY_BASE`].
///
/// One opcode byte can make a container (20 bytes of memory with its value), a memo entry
/// (`MEMOIZE`) or a mark (`MARK`, 16 bytes each with their vectors' slack) or a copy of a value
/// (`DUP`, 8 bytes), so without a budget 50 MB of `EMPTY_LIST`s took gigabytes. The recorded
/// PyTorch snapshots under `samples/snapshots/` spend about 6 bytes per pickle byte (most of it
/// the values that memo references push, two bytes each); the test
/// `real_snapshots_stay_far_inside_the_memory_budget` keeps them under half of this.
pub const MEMORY_PER_BYTE: usize = 14;
/// Containers allowed regardless of the pickle's length.
pub const CONTAINERS_BASE: usize = 1 << 16;
/// Pickle bytes per container, beyond [`CONTAINERS_BASE`]: the recorded snapshots hold one
/// container per 40 bytes (a dict per frame and block, a list per traceback).
pub const BYTES_PER_CONTAINER: usize = 8;

impl Limits {
    /// The default limits for a pickle of `len` bytes.
    pub fn for_len(len: usize) -> Limits {
        Limits {
            max_containers: CONTAINERS_BASE + len / BYTES_PER_CONTAINER,
            max_memo: u32::MAX as usize,
            max_memory: MEMORY_BASE.saturating_add(len.saturating_mul(MEMORY_PER_BYTE)),
        }
    }
}

/// Reads one pickle with default limits. Bytes after `STOP` are ignored, as Python does.
pub fn read(bytes: &[u8]) -> Result<Document<'_>> {
    read_with(bytes, Limits::for_len(bytes.len()))
}

/// The memory the reader charged for reading `bytes` (what [`Limits::max_memory`] bounds).
pub fn memory_spent(bytes: &[u8]) -> Result<usize> {
    let mut r = Reader::new(bytes, Limits::for_len(bytes.len()));
    r.step_all()?;
    Ok(r.spent)
}

/// Reads one pickle: a large one in parts on rayon's threads where it can
/// ([`parallel`]), with the same result and the same error as in one piece.
pub fn read_with(bytes: &[u8], limits: Limits) -> Result<Document<'_>> {
    if bytes.len() >= parallel::MIN_LEN && rayon::current_num_threads() >= parallel::MIN_THREADS {
        return parallel::read(bytes, limits, parallel::MIN_PART);
    }
    read_serial(bytes, limits)
}

/// Reads one pickle in one piece, on this thread.
pub(super) fn read_serial(bytes: &[u8], limits: Limits) -> Result<Document<'_>> {
    let mut r = Reader::new(bytes, limits);
    r.step_all()?;
    Ok(r.doc)
}

/// One part of a pickle read alone ([`read_part`]), to be joined by [`read_joined`].
pub(super) struct PartRead<'a> {
    part: Part,
    doc: Document<'a>,
    /// The values it pushed, bottom first.
    values: Vec<Value>,
    /// The memo entries it made, from `part.memo_base` on.
    memo: Vec<Value>,
    spent: usize,
    regrown: Vec<Id>,
}

/// Reads `part` of `bytes` alone: from an empty stack, its own memo entries from
/// `part.memo_base` on, those before it found through `made_at` ([`super::split::Plan`]): a
/// string is read again where it was made, a container is a stand-in (its memo index with
/// [`OUTER`] set) that only [`read_joined`] replaces. Any opcode the stand-in would change
/// (appending to it, setting its items) fails the part. Its limits are its share of `limits`
/// by length.
pub(super) fn read_part<'a>(
    bytes: &'a [u8],
    part: Part,
    made_at: &[u32],
    limits: Limits,
) -> Result<PartRead<'a>> {
    // A part's bytes bound what it makes (a container per byte at most), and its memory to
    // four times what the budget allows a byte, so that the parts read at once stay within a
    // few budgets; the joining checks the whole.
    let len = part.end - part.start;
    let limits = Limits {
        max_containers: limits.max_containers.min(OUTER as usize),
        max_memo: limits.max_memo,
        max_memory: limits
            .max_memory
            .min(len.saturating_mul(4 * MEMORY_PER_BYTE)),
    };
    let mut r = Reader::sized(bytes, limits, len);
    r.pos = part.start;
    r.stop = part.end;
    r.memo_base = part.memo_base;
    r.made_at = Some(made_at);
    if r.step_all()? || !r.marks.is_empty() || !r.sparse_memo.is_empty() {
        return Err(r.unsplittable(part.end as u64));
    }
    Ok(PartRead {
        part,
        doc: r.doc,
        values: r.stack,
        memo: r.memo,
        spent: r.spent,
        regrown: r.regrown,
    })
}

/// Reads `bytes` with `parts` read already (`None` for one that failed), in order: the opcodes between them as one piece
/// does, each part's document appended where its bytes are and its values pushed where its
/// mark is. Fails on anything one piece might do otherwise, so that the caller reads it in
/// one piece then: an error, a limit passed, memory beyond the budget that one piece could
/// have charged.
pub(super) fn read_joined<'a>(
    bytes: &'a [u8],
    limits: Limits,
    parts: impl IntoIterator<Item = Option<PartRead<'a>>>,
) -> Result<Document<'a>> {
    let mut r = Reader::new(bytes, limits);
    for part in parts {
        let Some(part) = part else {
            return Err(r.unsplittable(r.pos as u64));
        };
        r.stop = part.part.start;
        if r.step_all()? {
            return Err(r.unsplittable(r.pos as u64));
        }
        r.join(part)?;
    }
    r.stop = usize::MAX;
    if !r.step_all()? {
        return Err(r.unsplittable(r.pos as u64));
    }
    // One piece charges the same but for the copies of containers that grow after others
    // were made, at most once each and at most its final length; a part's arenas grow at
    // least as much, so it shares no less, but which containers one piece copies depends on
    // its spans, so the bound takes every container that grew twice.
    r.regrown.sort_unstable();
    r.regrown.dedup();
    let copies: usize = r
        .regrown
        .iter()
        .map(|&id| r.doc.len_of(id) * ENTRY_COST)
        .sum();
    if r.spent.saturating_add(copies) > limits.max_memory {
        return Err(r.unsplittable(r.pos as u64));
    }
    Ok(r.doc)
}

/// Set in the index of a part's stand-in for a container made before the part
/// ([`read_part`]); below it, a part's own containers.
pub(super) const OUTER: u32 = 1 << 31;

/// Memo strings of the parts before a part that it keeps at hand, by memo index modulo this.
const OUTER_STRINGS: usize = 256;

/// What the reader charges, in bytes: a value pushed (its stack slot, then its place in a
/// container's arena; the copy made when a container moves to a vector of its own is charged
/// when it is made), a container, a memo or dict entry (a dict entry is two values already
/// charged when pushed, so this is the vectors' slack), a string.
const VALUE_COST: usize = std::mem::size_of::<Value>();
const NODE_COST: usize = std::mem::size_of::<Node>();
const ENTRY_COST: usize = 2 * std::mem::size_of::<Value>();
const MARK_COST: usize = 2 * std::mem::size_of::<usize>();
const STRING_COST: usize = 4 * std::mem::size_of::<Cow<'static, str>>();

struct Reader<'a, 'p> {
    bytes: &'a [u8],
    pos: usize,
    doc: Document<'a>,
    stack: Vec<Value>,
    marks: Vec<usize>,
    /// Memo entries 0, 1, 2, ... as Python numbers them.
    memo: Vec<Value>,
    /// Memo entries far beyond the dense ones (only a hand-made pickle has them).
    sparse_memo: HashMap<u32, Value>,
    limits: Limits,
    /// Bytes of memory charged so far (see [`Limits::max_memory`]).
    spent: usize,
    /// The last string read and its index: a snapshot writes one string again and again as
    /// objects of their own, which Python's pickler does not share (every trace entry's
    /// `compile_context`, `"N/A"`), and the same bytes need neither the UTF-8 check nor the
    /// interning's hash again.
    last_string: Option<(&'a [u8], StrId)>,
    /// Where [`Reader::step_all`] pauses: the end of a part, or the start of the next part
    /// for [`read_joined`]; past the end when the whole pickle is read in one piece.
    stop: usize,
    /// The memo index of `memo[0]`: a part's first.
    memo_base: u32,
    /// For a part, where the memo entries before it were made ([`super::split::Plan`]).
    made_at: Option<&'p [u32]>,
    /// Strings of memo entries before a part, as [`Reader::outer`] last found them.
    outer_strings: Vec<(u32, StrId)>,
    /// Containers extended when not empty: the ones that can have been copied.
    regrown: Vec<Id>,
}

impl<'a, 'p> Reader<'a, 'p> {
    fn new(bytes: &'a [u8], limits: Limits) -> Reader<'a, 'p> {
        Reader::sized(bytes, limits, bytes.len())
    }

    /// A reader with room for `len` bytes of `bytes`.
    fn sized(bytes: &'a [u8], limits: Limits, len: usize) -> Reader<'a, 'p> {
        // A snapshot memoizes about one value per 32 bytes (the GPT-2 training snapshot of
        // analyzer/BENCHMARKS.md: 576,246 in 18.9 MB); past the reservation the memo is copied.
        let mut memo = Vec::with_capacity(len / 24);
        crate::huge_pages::advise_huge_pages(&mut memo);
        Reader {
            bytes,
            pos: 0,
            doc: Document::with_capacity_for(len),
            stack: Vec::new(),
            marks: Vec::new(),
            memo,
            sparse_memo: HashMap::new(),
            limits,
            spent: 0,
            last_string: None,
            stop: usize::MAX,
            memo_base: 0,
            made_at: None,
            outer_strings: Vec::new(),
            regrown: Vec::new(),
        }
    }

    /// Runs opcodes up to and including `STOP` (true) or up to `self.stop` (false).
    fn step_all(&mut self) -> Result<bool> {
        loop {
            if self.pos == self.stop {
                return Ok(false);
            }
            let at = self.pos as u64;
            if self.spent > self.limits.max_memory {
                return Err(self.limit(
                    at,
                    &format!(
                        "the pickle would take more than {} MiB of memory to read",
                        self.limits.max_memory >> 20
                    ),
                ));
            }
            let code = self.take(1, "an opcode")?[0];
            match code {
                op::STOP => {
                    let root = self.pop(at, "STOP")?;
                    self.doc.set_root(root);
                    return Ok(true);
                }
                op::PROTO => {
                    let v = self.take(1, "PROTO")?[0];
                    if !(2..=5).contains(&v) {
                        return Err(Error::Protocol {
                            offset: at,
                            found: v,
                        });
                    }
                }
                op::FRAME => {
                    // Framing only groups opcodes for buffered reads; the whole pickle is in
                    // memory, so the frame length is checked and otherwise ignored.
                    let len = self.u64_le("FRAME")?;
                    if len > self.remaining() as u64 {
                        return Err(self.truncated("a FRAME"));
                    }
                }
                op::NONE => self.push(Value::None),
                op::NEWTRUE => self.push(Value::Bool(true)),
                op::NEWFALSE => self.push(Value::Bool(false)),
                op::BININT => {
                    let b = self.take(4, "BININT")?;
                    let v = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    self.push(Value::Small(v));
                }
                op::BININT1 => {
                    let v = self.take(1, "BININT1")?[0];
                    self.push(Value::Small(i32::from(v)));
                }
                op::BININT2 => {
                    let b = self.take(2, "BININT2")?;
                    let v = u16::from_le_bytes([b[0], b[1]]);
                    self.push(Value::Small(i32::from(v)));
                }
                op::LONG1 => {
                    let n = usize::from(self.take(1, "LONG1")?[0]);
                    let v = self.long(at, n)?;
                    self.push(v);
                }
                op::LONG4 => {
                    let n = self.i32_len(at, "LONG4")?;
                    let v = self.long(at, n)?;
                    self.push(v);
                }
                op::BINFLOAT => {
                    let b = self.take(8, "BINFLOAT")?;
                    let v = f64::from_be_bytes(b.try_into().expect("8 bytes"));
                    self.spent += VALUE_COST;
                    let v = self.doc.new_float(v);
                    self.push(v);
                }
                op::SHORT_BINUNICODE => {
                    let n = usize::from(self.take(1, "SHORT_BINUNICODE")?[0]);
                    self.unicode(at, n)?;
                }
                op::BINUNICODE => {
                    let n = self.u32_le("BINUNICODE")? as usize;
                    self.unicode(at, n)?;
                }
                op::BINUNICODE8 => {
                    let n = self.u64_len("BINUNICODE8")?;
                    self.unicode(at, n)?;
                }
                op::SHORT_BINSTRING => {
                    // Python 2 `str`; Python 3 decodes it as ASCII by default.
                    let n = usize::from(self.take(1, "SHORT_BINSTRING")?[0]);
                    self.unicode(at, n)?;
                }
                op::BINSTRING => {
                    let n = self.i32_len(at, "BINSTRING")?;
                    self.unicode(at, n)?;
                }
                op::SHORT_BINBYTES => {
                    let n = usize::from(self.take(1, "SHORT_BINBYTES")?[0]);
                    self.bytes_value(n, "SHORT_BINBYTES")?;
                }
                op::BINBYTES => {
                    let n = self.u32_le("BINBYTES")? as usize;
                    self.bytes_value(n, "BINBYTES")?;
                }
                op::BINBYTES8 | op::BYTEARRAY8 => {
                    let n = self.u64_len("BINBYTES8")?;
                    self.bytes_value(n, "BINBYTES8")?;
                }
                op::EMPTY_LIST => {
                    let v = Value::List(self.node(at, Kind::List)?);
                    self.push(v);
                }
                op::EMPTY_DICT => {
                    let v = Value::Dict(self.node(at, Kind::Dict)?);
                    self.push(v);
                }
                op::EMPTY_TUPLE => {
                    let v = Value::Tuple(self.node(at, Kind::Tuple)?);
                    self.push(v);
                }
                op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                    let n = usize::from(code - op::TUPLE1 + 1);
                    if self.stack.len() < n + self.floor() {
                        return Err(self.malformed(at, "TUPLE1/2/3 with too few items"));
                    }
                    self.tuple(at, self.stack.len() - n)?;
                }
                op::TUPLE => {
                    let mark = self.pop_mark(at, "TUPLE")?;
                    self.tuple(at, mark)?;
                }
                op::MARK => {
                    self.spent += MARK_COST;
                    self.marks.push(self.stack.len());
                }
                op::POP => {
                    if self.marks.last() == Some(&self.stack.len()) {
                        self.marks.pop();
                    } else {
                        self.pop(at, "POP")?;
                    }
                }
                op::POP_MARK => {
                    let mark = self.pop_mark(at, "POP_MARK")?;
                    self.stack.truncate(mark);
                }
                op::DUP => {
                    let top = *self.top(at, "DUP")?;
                    self.push(top);
                }
                op::APPEND => {
                    self.top(at, "APPEND")?;
                    self.extend_list(at, self.stack.len() - 1)?;
                }
                op::APPENDS => {
                    let mark = self.pop_mark(at, "APPENDS")?;
                    self.extend_list(at, mark)?;
                }
                op::SETITEM => {
                    if self.stack.len() < self.floor() + 2 {
                        return Err(self.malformed(at, "SETITEM on an empty stack"));
                    }
                    self.set_items(at, self.stack.len() - 2)?;
                }
                op::SETITEMS => {
                    let mark = self.pop_mark(at, "SETITEMS")?;
                    if !(self.stack.len() - mark).is_multiple_of(2) {
                        return Err(self.malformed(at, "SETITEMS with an odd number of items"));
                    }
                    self.set_items(at, mark)?;
                }
                op::MEMOIZE => {
                    let index = u32::try_from(self.memo.len() + self.sparse_memo.len())
                        .ok()
                        .and_then(|n| n.checked_add(self.memo_base))
                        .ok_or_else(|| self.limit(at, "more than 2^32 memo entries"))?;
                    self.put(at, index)?;
                }
                op::BINPUT => {
                    let index = u32::from(self.take(1, "BINPUT")?[0]);
                    self.put(at, index)?;
                }
                op::LONG_BINPUT => {
                    let index = self.u32_le("LONG_BINPUT")?;
                    self.put(at, index)?;
                }
                op::PUT => {
                    let index = self.decimal_line(at, "PUT")?;
                    self.put(at, index)?;
                }
                op::BINGET | op::LONG_BINGET => self.gets(code)?,
                op::GET => {
                    let index = self.decimal_line(at, "GET")?;
                    self.get(at, index)?;
                }
                _ => {
                    if let Some(name) = code_executing(code) {
                        return Err(Error::Refused {
                            offset: at,
                            opcode: code,
                            name,
                        });
                    }
                    if let Some(name) = unsupported(code) {
                        return Err(Error::Unsupported {
                            offset: at,
                            opcode: code,
                            name,
                        });
                    }
                    return Err(Error::UnknownOpcode {
                        offset: at,
                        opcode: code,
                    });
                }
            }
        }
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    #[inline(always)]
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.truncated(what));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[cold]
    #[inline(never)]
    fn truncated(&self, what: &'static str) -> Error {
        Error::Truncated {
            offset: self.bytes.len() as u64,
            what,
        }
    }

    #[cold]
    #[inline(never)]
    fn malformed(&self, at: u64, what: &str) -> Error {
        Error::Malformed {
            offset: at,
            what: what.to_string(),
        }
    }

    #[cold]
    #[inline(never)]
    fn limit(&self, at: u64, what: &str) -> Error {
        Error::Limit {
            offset: at,
            what: what.to_string(),
        }
    }

    #[inline(always)]
    fn u32_le(&mut self, what: &'static str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    #[inline]
    fn u64_le(&mut self, what: &'static str) -> Result<u64> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    /// A u64 length prefix that must fit the bytes that remain.
    fn u64_len(&mut self, what: &'static str) -> Result<usize> {
        let n = self.u64_le(what)?;
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.remaining())
            .ok_or_else(|| self.truncated(what))
    }

    /// A signed 32-bit length prefix (LONG4, BINSTRING).
    fn i32_len(&mut self, at: u64, what: &'static str) -> Result<usize> {
        let n = self.u32_le(what)? as i32;
        usize::try_from(n).map_err(|_| self.malformed(at, &format!("{what} with length {n}")))
    }

    /// The decimal argument of the text opcodes PUT and GET, ending in a newline.
    fn decimal_line(&mut self, at: u64, what: &'static str) -> Result<u32> {
        let rest = &self.bytes[self.pos..];
        let end = rest
            .iter()
            .take(12)
            .position(|&b| b == b'\n')
            .ok_or_else(|| {
                if rest.len() < 12 {
                    self.truncated(what)
                } else {
                    self.malformed(at, &format!("{what} without a short decimal argument"))
                }
            })?;
        let text = std::str::from_utf8(&rest[..end]).ok();
        let index = text
            .and_then(|t| t.parse::<u32>().ok())
            .ok_or_else(|| self.malformed(at, &format!("{what} argument is not a memo index")))?;
        self.pos += end + 1;
        Ok(index)
    }

    /// LONG1/LONG4: little-endian two's complement of `n` bytes.
    #[inline(always)]
    fn long(&mut self, at: u64, n: usize) -> Result<Value> {
        if n > self.remaining() {
            return Err(self.truncated("a LONG"));
        }
        if n > 16 {
            return Err(self.limit(
                at,
                &format!("an integer of {n} bytes (at most 16 are read)"),
            ));
        }
        let b = self.take(n, "a LONG")?;
        let fill = if b.last().is_some_and(|&x| x & 0x80 != 0) {
            0xff
        } else {
            0
        };
        self.spent += 2 * VALUE_COST;
        if n <= 8 {
            // Addresses, sizes and times: 64 bits at most.
            let mut le = [fill; 8];
            le[..n].copy_from_slice(b);
            return Ok(self.doc.new_int(i64::from_le_bytes(le)));
        }
        let mut le = [fill; 16];
        le[..n].copy_from_slice(b);
        Ok(self.doc.new_int(i128::from_le_bytes(le)))
    }

    #[inline(always)]
    fn unicode(&mut self, at: u64, n: usize) -> Result<()> {
        let b = self.take(n, "a string")?;
        if let Some((last, id)) = self.last_string
            && last == b
        {
            self.push(Value::Str(id));
            return Ok(());
        }
        let s = std::str::from_utf8(b)
            .map_err(|e| self.malformed(at, &format!("string is not UTF-8 ({e})")))?;
        let before = self.doc.strings();
        let id = self.doc.intern(Cow::Borrowed(s));
        if self.doc.strings() > before {
            self.spent += STRING_COST;
        }
        self.last_string = Some((b, id));
        self.push(Value::Str(id));
        Ok(())
    }

    fn bytes_value(&mut self, n: usize, what: &'static str) -> Result<()> {
        let b = self.take(n, what)?;
        self.spent += STRING_COST;
        let v = self.doc.bytes_value(Cow::Borrowed(b));
        self.push(v);
        Ok(())
    }

    fn node(&mut self, at: u64, kind: Kind) -> Result<Id> {
        if self.doc.containers() >= self.limits.max_containers {
            return Err(self.limit(
                at,
                &format!(
                    "more than {} containers (one per {BYTES_PER_CONTAINER} bytes of pickle \
                     is the most a snapshot needs)",
                    self.limits.max_containers
                ),
            ));
        }
        self.spent += NODE_COST;
        Ok(self.doc.add_node(kind))
    }

    #[inline(always)]
    fn push(&mut self, v: Value) {
        self.spent += VALUE_COST;
        self.stack.push(v);
    }

    /// The stack height below which the innermost MARK protects the values.
    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn pop(&mut self, at: u64, what: &str) -> Result<Value> {
        if self.stack.len() <= self.floor() {
            return Err(self.malformed(at, &format!("{what} on an empty stack")));
        }
        Ok(self.stack.pop().expect("checked non-empty"))
    }

    fn top(&self, at: u64, what: &str) -> Result<&Value> {
        if self.stack.len() <= self.floor() {
            return Err(self.malformed(at, &format!("{what} on an empty stack")));
        }
        Ok(self.stack.last().expect("checked non-empty"))
    }

    /// Pops the innermost MARK: the values from the returned height up are its items.
    fn pop_mark(&mut self, at: u64, what: &str) -> Result<usize> {
        self.marks
            .pop()
            .ok_or_else(|| self.malformed(at, &format!("{what} without a MARK")))
    }

    #[cold]
    #[inline(never)]
    fn full(&self, at: u64) -> Error {
        self.limit(at, "more than 2^32 items in all containers")
    }

    /// Makes a tuple of the values from stack height `from` up, replacing them.
    fn tuple(&mut self, at: u64, from: usize) -> Result<()> {
        let id = self.node(at, Kind::Tuple)?;
        self.doc
            .extend_items(id, &self.stack[from..])
            .map_err(|Full| self.full(at))?;
        self.stack.truncate(from);
        self.push(Value::Tuple(id));
        Ok(())
    }

    /// Appends the values from stack height `from` up to the list below them.
    fn extend_list(&mut self, at: u64, from: usize) -> Result<()> {
        if from <= self.floor() {
            return Err(self.malformed(at, "APPEND on an empty stack"));
        }
        match self.stack[from - 1] {
            Value::List(id) => {
                self.own(at, id)?;
                let copied = self
                    .doc
                    .extend_items(id, &self.stack[from..])
                    .map_err(|Full| self.full(at))?;
                self.spent += copied * VALUE_COST;
                self.stack.truncate(from);
                Ok(())
            }
            other => Err(self.malformed(
                at,
                &format!("APPEND(S) to a {} instead of a list", other.type_name()),
            )),
        }
    }

    /// Sets the key-value pairs from stack height `from` up in the dict below them.
    fn set_items(&mut self, at: u64, from: usize) -> Result<()> {
        if from <= self.floor() {
            return Err(self.malformed(at, "SETITEM on an empty stack"));
        }
        let Value::Dict(id) = self.stack[from - 1] else {
            return Err(self.malformed(
                at,
                &format!(
                    "SETITEM(S) on a {} instead of a dict",
                    self.stack[from - 1].type_name()
                ),
            ));
        };
        self.own(at, id)?;
        self.spent += (self.stack.len() - from) / 2 * ENTRY_COST;
        let copied = self
            .doc
            .insert_pairs(id, &self.stack[from..])
            .map_err(|Full| self.full(at))?;
        self.spent += copied * ENTRY_COST;
        self.stack.truncate(from);
        Ok(())
    }

    /// Checks that container `id` is one this reader may change (not a part's stand-in for
    /// an earlier one), noting it when it grows again.
    #[inline(always)]
    fn own(&mut self, at: u64, id: Id) -> Result<()> {
        if id.index() >= self.doc.containers() {
            return Err(self.unsplittable(at));
        }
        if self.doc.len_of(id) > 0 {
            self.regrown.push(id);
        }
        Ok(())
    }

    /// An opcode a part cannot read alone, or parts that cannot be joined: the pickle is then
    /// read in one piece, which gives its real result.
    #[cold]
    #[inline(never)]
    fn unsplittable(&self, at: u64) -> Error {
        self.malformed(at, "the pickle cannot be read in parts here")
    }

    fn put(&mut self, at: u64, index: u32) -> Result<()> {
        let v = *self.top(at, "PUT/MEMOIZE")?;
        let Some(i) = index.checked_sub(self.memo_base) else {
            return Err(self.unsplittable(at));
        };
        let i = i as usize;
        let known = i < self.memo.len() || self.sparse_memo.contains_key(&index);
        if !known && self.memo.len() + self.sparse_memo.len() >= self.limits.max_memo {
            return Err(self.limit(at, "too many memo entries"));
        }
        self.spent += ENTRY_COST;
        if i < self.memo.len() {
            if self.made_at.is_some() {
                return Err(self.unsplittable(at));
            }
            self.memo[i] = v;
        } else if i == self.memo.len() {
            // The dense entry replaces a sparse one of the same index.
            if !self.sparse_memo.is_empty() {
                self.sparse_memo.remove(&index);
            }
            self.memo.push(v);
        } else {
            self.sparse_memo.insert(index, v);
        }
        Ok(())
    }

    /// `BINGET` or `LONG_BINGET` (`code`, just read), and the run of them that follows in one
    /// loop rather than one dispatch each: seven opcodes in ten of a snapshot are memo
    /// references (frames in their lists, a dict's keys). Each opcode is checked as the main
    /// loop checks it, the memory budget first.
    #[inline(always)]
    fn gets(&mut self, mut code: u8) -> Result<()> {
        loop {
            let at = self.pos as u64 - 1;
            let index = if code == op::BINGET {
                u32::from(self.take(1, "BINGET")?[0])
            } else {
                self.u32_le("LONG_BINGET")?
            };
            self.get(at, index)?;
            match self.bytes.get(self.pos) {
                Some(&next @ (op::BINGET | op::LONG_BINGET))
                    if self.spent <= self.limits.max_memory && self.pos != self.stop =>
                {
                    self.pos += 1;
                    code = next;
                }
                _ => return Ok(()),
            }
        }
    }

    #[inline(always)]
    fn get(&mut self, at: u64, index: u32) -> Result<()> {
        let v = match self.memo.get(index.wrapping_sub(self.memo_base) as usize) {
            Some(v) => *v,
            None => match self.sparse_memo.get(&index) {
                Some(v) => *v,
                None => self.outer(at, index)?,
            },
        };
        self.push(v);
        Ok(())
    }

    /// Memo entry `index` of a part, made before it: a string read again where it was made, a
    /// stand-in for a container ([`read_part`]).
    #[inline(never)]
    fn outer(&mut self, at: u64, index: u32) -> Result<Value> {
        let made = match self.made_at {
            Some(made_at) if index < self.memo_base => made(made_at[index as usize]),
            _ => {
                return Err(self.malformed(at, &format!("memo entry {index} was never stored")));
            }
        };
        let stand_in = Id(index | OUTER);
        if index >= OUTER {
            return Err(self.unsplittable(at));
        }
        Ok(match made {
            Made::List => Value::List(stand_in),
            Made::Dict => Value::Dict(stand_in),
            Made::Tuple => Value::Tuple(stand_in),
            Made::Opaque => return Err(self.unsplittable(at)),
            Made::Str(made) => {
                let slot = index as usize % OUTER_STRINGS;
                if self.outer_strings.is_empty() {
                    self.outer_strings = vec![(u32::MAX, StrId(0)); OUTER_STRINGS];
                }
                if self.outer_strings[slot].0 == index {
                    return Ok(Value::Str(self.outer_strings[slot].1));
                }
                // The opcode, its length, then the string.
                let header = match self.bytes[made] {
                    op::SHORT_BINUNICODE | op::SHORT_BINSTRING => 2,
                    op::BINUNICODE | op::BINSTRING => 5,
                    _ => 9,
                };
                let end = opcode_len(self.bytes, made).map_or(made, |n| made + n);
                let b = self
                    .bytes
                    .get(made + header..end)
                    .ok_or_else(|| self.unsplittable(at))?;
                let s = std::str::from_utf8(b).map_err(|_| self.unsplittable(at))?;
                let before = self.doc.strings();
                let id = self.doc.intern(Cow::Borrowed(s));
                if self.doc.strings() > before {
                    self.spent += STRING_COST;
                }
                self.outer_strings[slot] = (index, id);
                Value::Str(id)
            }
        })
    }

    /// Appends a part read alone to what this reader has read, which ends where the part
    /// starts: its document (its values renumbered), its values onto the stack, its memo
    /// entries into the memo, its charges to the budget.
    fn join(&mut self, part: PartRead<'a>) -> Result<()> {
        let at = part.part.start as u64;
        // The part was read from an empty stack, as the items of the mark just pushed.
        if self.memo.len() != part.part.memo_base as usize
            || !self.sparse_memo.is_empty()
            || self.marks.last() != Some(&self.stack.len())
        {
            return Err(self.unsplittable(at));
        }
        let remap: Remap = self
            .doc
            .append(part.doc, &self.memo)
            .ok_or_else(|| self.unsplittable(at))?;
        if self.doc.containers() > self.limits.max_containers
            || self.memo.len() + part.memo.len() > self.limits.max_memo
        {
            return Err(self.unsplittable(at));
        }
        self.stack
            .extend(part.values.iter().map(|&v| remap.value(v, &self.memo)));
        let memo: Vec<Value> = part
            .memo
            .iter()
            .map(|&v| remap.value(v, &self.memo))
            .collect();
        self.memo.extend(memo);
        self.regrown
            .extend(part.regrown.iter().map(|&id| remap.id(id)));
        if remap.failed() {
            return Err(self.unsplittable(at));
        }
        self.spent += part.spent;
        self.pos = part.part.end;
        Ok(())
    }
}
