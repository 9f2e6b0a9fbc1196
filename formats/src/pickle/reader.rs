//! The unpickler: a loop over opcodes with a value stack, a mark stack and a memo.

use super::opcode::{self as op, code_executing, unsupported};
use super::value::{Document, Node, Value};
use super::{Error, Result};
use std::collections::HashMap;
use std::sync::Arc;

/// Caps on what one pickle may make, beyond the natural bound of its length.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Containers (lists, tuples, dicts) in the arena.
    pub max_containers: usize,
    /// Entries in the memo.
    pub max_memo: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_containers: u32::MAX as usize,
            max_memo: u32::MAX as usize,
        }
    }
}

/// Reads one pickle with default limits. Bytes after `STOP` are ignored, as Python does.
pub fn read(bytes: &[u8]) -> Result<Document> {
    read_with(bytes, Limits::default())
}

/// Reads one pickle.
pub fn read_with(bytes: &[u8], limits: Limits) -> Result<Document> {
    // Room for the containers and memo entries a snapshot holds (one per 60 to 70 bytes in the
    // ones we have seen), reserved rather than touched: it costs address space, not memory, and
    // the large arenas are not copied while they grow. Other pickles grow them as usual.
    let most = bytes.len() / 32 + 16;
    let mut doc = Document::new();
    doc.reserve(most);
    Reader {
        bytes,
        pos: 0,
        doc,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: Memo {
            dense: Vec::with_capacity(most),
            ..Memo::default()
        },
        scratch: Vec::new(),
        limits,
    }
    .run()
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    doc: Document,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: Memo,
    /// Reused for the items of APPENDS and SETITEMS, so they cost no allocation.
    scratch: Vec<Value>,
    limits: Limits,
}

/// Memo slots beyond the dense part that make it grow rather than go to the map.
const DENSE_SLACK: usize = 1 << 16;

/// The memo: pickles number their entries 0, 1, 2, … (MEMOIZE always does), so a vector
/// indexed by the number serves them; a pickle that picks far-apart numbers (PUT with any
/// value is legal) gets the rest in a map.
#[derive(Default)]
struct Memo {
    dense: Vec<Option<Value>>,
    sparse: HashMap<u32, Value>,
    len: usize,
}

impl Memo {
    fn contains(&self, index: u32) -> bool {
        self.get(index).is_some()
    }

    fn get(&self, index: u32) -> Option<&Value> {
        match self.dense.get(index as usize) {
            Some(v) => v.as_ref(),
            None => self.sparse.get(&index),
        }
    }

    fn insert(&mut self, index: u32, v: Value) {
        let i = index as usize;
        if i < self.dense.len() + DENSE_SLACK && !self.sparse.contains_key(&index) {
            if i >= self.dense.len() {
                self.dense.resize(i + 1, None);
            }
            if self.dense[i].replace(v).is_none() {
                self.len += 1;
            }
        } else if self.sparse.insert(index, v).is_none() {
            self.len += 1;
        }
    }
}

impl<'a> Reader<'a> {
    fn run(mut self) -> Result<Document> {
        loop {
            let at = self.pos as u64;
            let code = self.take(1, "an opcode")?[0];
            match code {
                op::STOP => {
                    let root = self.pop(at, "STOP")?;
                    self.doc.set_root(root);
                    return Ok(self.doc);
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
                op::NONE => self.stack.push(Value::None),
                op::NEWTRUE => self.stack.push(Value::Bool(true)),
                op::NEWFALSE => self.stack.push(Value::Bool(false)),
                op::BININT => {
                    let b = self.take(4, "BININT")?;
                    let v = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    self.stack.push(Value::Int(i128::from(v)));
                }
                op::BININT1 => {
                    let v = self.take(1, "BININT1")?[0];
                    self.stack.push(Value::Int(i128::from(v)));
                }
                op::BININT2 => {
                    let b = self.take(2, "BININT2")?;
                    let v = u16::from_le_bytes([b[0], b[1]]);
                    self.stack.push(Value::Int(i128::from(v)));
                }
                op::LONG1 => {
                    let n = usize::from(self.take(1, "LONG1")?[0]);
                    let v = self.long(at, n)?;
                    self.stack.push(v);
                }
                op::LONG4 => {
                    let n = self.i32_len(at, "LONG4")?;
                    let v = self.long(at, n)?;
                    self.stack.push(v);
                }
                op::BINFLOAT => {
                    let b = self.take(8, "BINFLOAT")?;
                    let v = f64::from_be_bytes(b.try_into().expect("8 bytes"));
                    self.stack.push(Value::Float(v));
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
                    let v = Value::List(self.node(at, Node::List(Vec::new()))?);
                    self.stack.push(v);
                }
                op::EMPTY_DICT => {
                    let v = Value::Dict(self.node(at, Node::Dict(Default::default()))?);
                    self.stack.push(v);
                }
                op::EMPTY_TUPLE => {
                    let v = Value::Tuple(self.node(at, Node::Tuple(Vec::new()))?);
                    self.stack.push(v);
                }
                op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                    let n = usize::from(code - op::TUPLE1 + 1);
                    if self.stack.len() < n + self.floor() {
                        return Err(self.malformed(at, "TUPLE1/2/3 with too few items"));
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    let v = Value::Tuple(self.node(at, Node::Tuple(items))?);
                    self.stack.push(v);
                }
                op::TUPLE => {
                    let items = self.pop_mark(at, "TUPLE")?;
                    let v = Value::Tuple(self.node(at, Node::Tuple(items))?);
                    self.stack.push(v);
                }
                op::MARK => self.marks.push(self.stack.len()),
                op::POP => {
                    if self.marks.last() == Some(&self.stack.len()) {
                        self.marks.pop();
                    } else {
                        self.pop(at, "POP")?;
                    }
                }
                op::POP_MARK => {
                    self.pop_mark(at, "POP_MARK")?;
                }
                op::DUP => {
                    let top = self.top(at, "DUP")?.clone();
                    self.stack.push(top);
                }
                op::APPEND => {
                    let item = self.pop(at, "APPEND")?;
                    self.extend_list(at, std::iter::once(item))?;
                }
                op::APPENDS => {
                    let mut items = self.pop_mark_scratch(at, "APPENDS")?;
                    let result = self.extend_list(at, items.drain(..));
                    self.scratch = items;
                    result?;
                }
                op::SETITEM => {
                    let value = self.pop(at, "SETITEM")?;
                    let key = self.pop(at, "SETITEM")?;
                    self.set_items(at, [key, value].into_iter())?;
                }
                op::SETITEMS => {
                    let mut items = self.pop_mark_scratch(at, "SETITEMS")?;
                    if items.len() % 2 != 0 {
                        return Err(self.malformed(at, "SETITEMS with an odd number of items"));
                    }
                    let result = self.set_items(at, items.drain(..));
                    self.scratch = items;
                    result?;
                }
                op::MEMOIZE => {
                    let index = u32::try_from(self.memo.len)
                        .map_err(|_| self.limit(at, "more than 2^32 memo entries"))?;
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
                op::BINGET => {
                    let index = u32::from(self.take(1, "BINGET")?[0]);
                    self.get(at, index)?;
                }
                op::LONG_BINGET => {
                    let index = self.u32_le("LONG_BINGET")?;
                    self.get(at, index)?;
                }
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

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.truncated(what));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn truncated(&self, what: &'static str) -> Error {
        Error::Truncated {
            offset: self.bytes.len() as u64,
            what,
        }
    }

    fn malformed(&self, at: u64, what: &str) -> Error {
        Error::Malformed {
            offset: at,
            what: what.to_string(),
        }
    }

    fn limit(&self, at: u64, what: &str) -> Error {
        Error::Limit {
            offset: at,
            what: what.to_string(),
        }
    }

    fn u32_le(&mut self, what: &'static str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

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
        let mut le = [fill; 16];
        le[..n].copy_from_slice(b);
        Ok(Value::Int(i128::from_le_bytes(le)))
    }

    fn unicode(&mut self, at: u64, n: usize) -> Result<()> {
        let b = self.take(n, "a string")?;
        let s = std::str::from_utf8(b)
            .map_err(|e| self.malformed(at, &format!("string is not UTF-8 ({e})")))?;
        self.stack.push(Value::Str(Arc::from(s)));
        Ok(())
    }

    fn bytes_value(&mut self, n: usize, what: &'static str) -> Result<()> {
        let b = self.take(n, what)?;
        self.stack.push(Value::Bytes(Arc::from(b)));
        Ok(())
    }

    fn node(&mut self, at: u64, node: Node) -> Result<super::Id> {
        if self.doc.containers() >= self.limits.max_containers {
            return Err(self.limit(at, "too many containers"));
        }
        Ok(self.doc.add_node(node))
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

    fn pop_mark(&mut self, at: u64, what: &str) -> Result<Vec<Value>> {
        let mark = self
            .marks
            .pop()
            .ok_or_else(|| self.malformed(at, &format!("{what} without a MARK")))?;
        Ok(self.stack.split_off(mark))
    }

    /// The values above the innermost MARK, in the reused scratch vector (give it back).
    fn pop_mark_scratch(&mut self, at: u64, what: &str) -> Result<Vec<Value>> {
        let mark = self
            .marks
            .pop()
            .ok_or_else(|| self.malformed(at, &format!("{what} without a MARK")))?;
        let mut items = std::mem::take(&mut self.scratch);
        items.clear();
        items.extend(self.stack.drain(mark..));
        Ok(items)
    }

    fn extend_list(&mut self, at: u64, items: impl Iterator<Item = Value>) -> Result<()> {
        let target = self.top(at, "APPEND")?.clone();
        match target {
            Value::List(id) => match self.doc.node_mut(id) {
                Node::List(list) => {
                    list.extend(items);
                    Ok(())
                }
                _ => unreachable!("a List value always refers to a list node"),
            },
            other => Err(self.malformed(
                at,
                &format!("APPEND(S) to a {} instead of a list", other.type_name()),
            )),
        }
    }

    fn set_items(&mut self, at: u64, items: impl Iterator<Item = Value>) -> Result<()> {
        let target = self.top(at, "SETITEM")?.clone();
        let Value::Dict(id) = target else {
            return Err(self.malformed(
                at,
                &format!("SETITEM(S) on a {} instead of a dict", target.type_name()),
            ));
        };
        let node = self.doc.node_mut(id);
        let mut it = items;
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            Document::dict_insert(node, k, v);
        }
        Ok(())
    }

    fn put(&mut self, at: u64, index: u32) -> Result<()> {
        let v = self.top(at, "PUT/MEMOIZE")?.clone();
        if self.memo.len >= self.limits.max_memo && !self.memo.contains(index) {
            return Err(self.limit(at, "too many memo entries"));
        }
        self.memo.insert(index, v);
        Ok(())
    }

    fn get(&mut self, at: u64, index: u32) -> Result<()> {
        let v =
            self.memo.get(index).cloned().ok_or_else(|| {
                self.malformed(at, &format!("memo entry {index} was never stored"))
            })?;
        self.stack.push(v);
        Ok(())
    }
}
