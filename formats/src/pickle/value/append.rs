//! Appending one document to another: how the parts of a pickle read alone are joined.
//!
//! A part's containers, strings and numbers are numbered from 0 in its own document, in the
//! order it made them. Reading the whole pickle in one piece numbers them in the same order
//! after everything before the part, and a string by its first content, so appending the
//! part's tables after this document's (its strings interned here, in its order) and adding
//! each table's length to the part's indexes gives every value the number one piece gives it.
//! A part's stand-ins for containers made before it ([`super::super::reader::OUTER`]) become
//! the memo entries they stand for.

use super::{Document, Id, Node, OwnDict, StrId, Value};
use crate::pickle::reader::OUTER;
use std::cell::Cell;

/// How a part's values are numbered in the document it was appended to.
pub(crate) struct Remap {
    strs: Vec<StrId>,
    nodes: u32,
    ints: u32,
    floats: u32,
    bytes: u32,
    wide: u32,
    /// A stand-in named a memo entry that is not a container of its kind.
    failed: Cell<bool>,
}

impl Remap {
    /// `v` of the part as the joined document numbers it; `memo` holds the memo entries
    /// stand-ins name.
    pub(crate) fn value(&self, v: Value, memo: &[Value]) -> Value {
        match v {
            Value::Str(s) => Value::Str(self.strs[s.index()]),
            Value::Int(i) => Value::Int(i + self.ints),
            Value::Wide(i) => Value::Wide(i + self.wide),
            Value::Float(i) => Value::Float(i + self.floats),
            Value::Bytes(i) => Value::Bytes(i + self.bytes),
            Value::List(id) | Value::Tuple(id) | Value::Dict(id) if id.0 & OUTER != 0 => {
                match memo.get((id.0 & !OUTER) as usize) {
                    Some(&m) if std::mem::discriminant(&m) == std::mem::discriminant(&v) => m,
                    _ => {
                        self.failed.set(true);
                        Value::None
                    }
                }
            }
            Value::List(id) => Value::List(self.id(id)),
            Value::Tuple(id) => Value::Tuple(self.id(id)),
            Value::Dict(id) => Value::Dict(self.id(id)),
            Value::None | Value::Bool(_) | Value::Small(_) => v,
        }
    }

    /// One of the part's own containers.
    pub(crate) fn id(&self, id: Id) -> Id {
        Id(id.0 + self.nodes)
    }

    /// Whether a stand-in could not be replaced.
    pub(crate) fn failed(&self) -> bool {
        self.failed.get()
    }
}

impl<'a> Document<'a> {
    /// Appends `part`'s containers, strings and numbers; `None` when an arena would pass 2^32
    /// elements or a stand-in is not a container of its kind in `memo`.
    pub(crate) fn append(&mut self, part: Document<'a>, memo: &[Value]) -> Option<Remap> {
        let end = |a: usize, b: usize| u32::try_from(a.checked_add(b)?).ok();
        end(self.nodes.len(), part.nodes.len()).filter(|&n| n < OUTER)?;
        end(self.items.len(), part.items.len())?;
        end(self.keys.len(), part.keys.len())?;
        end(self.values.len(), part.values.len())?;
        end(self.key_spans.len(), part.key_spans.len())?;
        end(self.own_items.len(), part.own_items.len())?;
        end(self.own_dicts.len(), part.own_dicts.len())?;
        end(self.strs.len(), part.strs.len())?;
        let remap = Remap {
            strs: part.strs.into_iter().map(|s| self.intern(s)).collect(),
            nodes: self.nodes.len() as u32,
            ints: end(self.ints.len(), part.ints.len())? - part.ints.len() as u32,
            floats: end(self.floats.len(), part.floats.len())? - part.floats.len() as u32,
            bytes: end(self.bytes.len(), part.bytes.len())? - part.bytes.len() as u32,
            wide: end(self.wide.len(), part.wide.len())? - part.wide.len() as u32,
            failed: Cell::new(false),
        };
        let (items, keys, values) = (
            self.items.len() as u32,
            self.keys.len() as u32,
            self.values.len() as u32,
        );
        // The part's first key span is the empty one, this document's too.
        let spans = self.key_spans.len() as u32 - 1;
        let (own_items, own_dicts) = (self.own_items.len() as u32, self.own_dicts.len() as u32);
        self.nodes.extend(part.nodes.iter().map(|node| match *node {
            Node::Items { kind, start, len } => Node::Items {
                kind,
                start: start + items,
                len,
            },
            Node::OwnItems { kind, index } => Node::OwnItems {
                kind,
                index: index + own_items,
            },
            Node::Entries { keys: 0, .. } => Node::Entries { keys: 0, values: 0 },
            Node::Entries {
                keys: span,
                values: v,
            } => Node::Entries {
                keys: span + spans,
                values: v + values,
            },
            Node::OwnDict(i) => Node::OwnDict(i + own_dicts),
        }));
        self.key_spans.extend(
            part.key_spans[1..]
                .iter()
                .map(|&(start, len)| (start + keys, len)),
        );
        self.ints.extend_from_slice(&part.ints);
        self.floats.extend_from_slice(&part.floats);
        self.bytes.extend(part.bytes);
        self.wide.extend_from_slice(&part.wide);
        let re = |v: &Value| remap.value(*v, memo);
        self.items.extend(part.items.iter().map(re));
        self.keys.extend(part.keys.iter().map(re));
        self.values.extend(part.values.iter().map(re));
        self.own_items.extend(
            part.own_items
                .iter()
                .map(|own| own.iter().map(re).collect()),
        );
        for own in &part.own_dicts {
            let mut own = OwnDict {
                keys: own.keys.iter().map(re).collect(),
                values: own.values.iter().map(re).collect(),
                index: None,
            };
            own.reindex(&self.tables());
            self.own_dicts.push(own);
        }
        Some(remap)
    }
}
