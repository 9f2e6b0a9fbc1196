//! The pickler: protocol 4, no framing, containers memoized so that sharing is kept.

use super::opcode as op;
use super::value::{Document, Id, Kind, Node, StrId, Value};
use super::{Error, Result};
use std::collections::{HashMap, HashSet};

/// Pickles `doc` (its root and everything reachable) as protocol 4.
///
/// Every container, and every string longer than two bytes, is memoized when first written and referenced with `BINGET`/`LONG_BINGET`
/// afterwards, so shared frame lists stay shared and cycles through lists and dicts are written
/// as Python writes them. A tuple that contains itself (only possible in a hand-made pickle) is
/// refused, since a tuple's items must be written before the tuple exists.
pub fn write(doc: &Document<'_>) -> Result<Vec<u8>> {
    let mut w = Writer {
        doc,
        out: vec![op::PROTO, 4],
        memo: HashMap::new(),
        strings: HashMap::new(),
        open_tuples: HashSet::new(),
    };
    w.run()?;
    w.out.push(op::STOP);
    Ok(w.out)
}

enum Task<'a> {
    Value(&'a Value),
    Op(u8),
    CloseTuple(Id, usize),
}

struct Writer<'a, 'b> {
    doc: &'a Document<'b>,
    out: Vec<u8>,
    memo: HashMap<Id, u32>,
    /// Strings already written (interned, so by content): snapshot keys repeat in every entry.
    strings: HashMap<StrId, u32>,
    open_tuples: HashSet<Id>,
}

impl<'a> Writer<'a, '_> {
    fn run(&mut self) -> Result<()> {
        let mut tasks = vec![Task::Value(self.doc.root())];
        while let Some(task) = tasks.pop() {
            match task {
                Task::Op(code) => self.out.push(code),
                Task::CloseTuple(id, n) => {
                    match n {
                        1 => self.out.push(op::TUPLE1),
                        2 => self.out.push(op::TUPLE2),
                        3 => self.out.push(op::TUPLE3),
                        _ => self.out.push(op::TUPLE),
                    }
                    self.open_tuples.remove(&id);
                    self.memoize(id)?;
                }
                Task::Value(v) => self.value(v, &mut tasks)?,
            }
        }
        Ok(())
    }

    fn value(&mut self, v: &'a Value, tasks: &mut Vec<Task<'a>>) -> Result<()> {
        match v {
            Value::None => self.out.push(op::NONE),
            Value::Bool(true) => self.out.push(op::NEWTRUE),
            Value::Bool(false) => self.out.push(op::NEWFALSE),
            Value::Small(i) => self.int(i128::from(*i)),
            Value::Int(_) | Value::Wide(_) => {
                let i = self.doc.as_int(v).ok_or_else(missing)?;
                self.int(i);
            }
            Value::Float(_) => {
                let f = self.doc.as_f64(v).ok_or_else(missing)?;
                self.out.push(op::BINFLOAT);
                self.out.extend_from_slice(&f.to_be_bytes());
            }
            Value::Str(s) => {
                if let Some(&index) = self.strings.get(s) {
                    self.get(index);
                    return Ok(());
                }
                let b = self.doc.as_str(v).ok_or_else(missing)?.as_bytes();
                if b.len() < 256 {
                    self.out
                        .extend_from_slice(&[op::SHORT_BINUNICODE, b.len() as u8]);
                } else if let Ok(n) = u32::try_from(b.len()) {
                    self.out.push(op::BINUNICODE);
                    self.out.extend_from_slice(&n.to_le_bytes());
                } else {
                    self.out.push(op::BINUNICODE8);
                    self.out.extend_from_slice(&(b.len() as u64).to_le_bytes());
                }
                self.out.extend_from_slice(b);
                if b.len() > 2 {
                    let index = self.next_index()?;
                    self.out.push(op::MEMOIZE);
                    self.strings.insert(*s, index);
                }
            }
            Value::Bytes(_) => {
                let b = self.doc.as_bytes(v).ok_or_else(missing)?;
                if b.len() < 256 {
                    self.out
                        .extend_from_slice(&[op::SHORT_BINBYTES, b.len() as u8]);
                } else if let Ok(n) = u32::try_from(b.len()) {
                    self.out.push(op::BINBYTES);
                    self.out.extend_from_slice(&n.to_le_bytes());
                } else {
                    self.out.push(op::BINBYTES8);
                    self.out.extend_from_slice(&(b.len() as u64).to_le_bytes());
                }
                self.out.extend_from_slice(b);
            }
            Value::List(id) | Value::Tuple(id) | Value::Dict(id) => {
                if let Some(&index) = self.memo.get(id) {
                    self.get(index);
                    return Ok(());
                }
                let kind = self.doc.nodes.get(id.index()).map(Node::kind);
                match (v, kind) {
                    (Value::List(_), Some(Kind::List)) => {
                        let items = self.doc.items(v).ok_or_else(missing)?;
                        self.out.push(op::EMPTY_LIST);
                        self.memoize(*id)?;
                        if !items.is_empty() {
                            self.out.push(op::MARK);
                            tasks.push(Task::Op(op::APPENDS));
                            tasks.extend(items.iter().rev().map(Task::Value));
                        }
                    }
                    (Value::Dict(_), Some(Kind::Dict)) => {
                        let entries = self.doc.entries(v).ok_or_else(missing)?;
                        self.out.push(op::EMPTY_DICT);
                        self.memoize(*id)?;
                        if !entries.is_empty() {
                            self.out.push(op::MARK);
                            tasks.push(Task::Op(op::SETITEMS));
                            for (k, v) in entries.iter().rev() {
                                tasks.push(Task::Value(v));
                                tasks.push(Task::Value(k));
                            }
                        }
                    }
                    (Value::Tuple(_), Some(Kind::Tuple)) => {
                        let items = self.doc.items(v).ok_or_else(missing)?;
                        if !self.open_tuples.insert(*id) {
                            return Err(Error::Unwritable(
                                "a tuple contains itself, which pickle cannot express".into(),
                            ));
                        }
                        if items.is_empty() {
                            self.out.push(op::EMPTY_TUPLE);
                            self.open_tuples.remove(id);
                            self.memoize(*id)?;
                        } else {
                            if items.len() > 3 {
                                self.out.push(op::MARK);
                            }
                            tasks.push(Task::CloseTuple(*id, items.len()));
                            tasks.extend(items.iter().rev().map(Task::Value));
                        }
                    }
                    (_, None) => return Err(missing()),
                    _ => {
                        return Err(Error::Unwritable(format!(
                            "container {} is not a {}",
                            id.0,
                            v.type_name()
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    fn int(&mut self, i: i128) {
        if let Ok(b) = u8::try_from(i) {
            self.out.extend_from_slice(&[op::BININT1, b]);
        } else if let Ok(h) = u16::try_from(i) {
            self.out.push(op::BININT2);
            self.out.extend_from_slice(&h.to_le_bytes());
        } else if let Ok(w) = i32::try_from(i) {
            self.out.push(op::BININT);
            self.out.extend_from_slice(&w.to_le_bytes());
        } else {
            // Shortest little-endian two's complement, as Python's `encode_long`.
            let le = i.to_le_bytes();
            let mut n = 16;
            while n > 1 {
                let top = le[n - 1];
                let next_sign = le[n - 2] & 0x80;
                if (top == 0 && next_sign == 0) || (top == 0xff && next_sign != 0) {
                    n -= 1;
                } else {
                    break;
                }
            }
            self.out.extend_from_slice(&[op::LONG1, n as u8]);
            self.out.extend_from_slice(&le[..n]);
        }
    }

    fn next_index(&self) -> Result<u32> {
        u32::try_from(self.memo.len() + self.strings.len())
            .map_err(|_| Error::Unwritable("more than 2^32 memo entries".into()))
    }

    fn memoize(&mut self, id: Id) -> Result<()> {
        let index = self.next_index()?;
        self.out.push(op::MEMOIZE);
        self.memo.insert(id, index);
        Ok(())
    }

    fn get(&mut self, index: u32) {
        if let Ok(b) = u8::try_from(index) {
            self.out.extend_from_slice(&[op::BINGET, b]);
        } else {
            self.out.push(op::LONG_BINGET);
            self.out.extend_from_slice(&index.to_le_bytes());
        }
    }
}

/// A value that refers to something its document does not hold.
fn missing() -> Error {
    Error::Unwritable("a value refers to something that is not in the document".into())
}
