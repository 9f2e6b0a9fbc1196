//! The unpickled value tree, compact: 8-byte values, containers as spans of shared arenas,
//! strings borrowed from the pickle and interned.
//!
//! A snapshot of 630,000 trace entries holds over a million dicts and lists. Giving each its own
//! heap vector, each string its own reference-counted copy and each value 32 bytes made reading
//! memory-bound (875 MB of RSS for a 79 MB pickle, a third of the time in page faults). Here a
//! [`Value`] is 8 bytes and `Copy` (ints beyond 32 bits and floats are indexes into tables of
//! their own, as strings are); the items of every list and tuple are one span of a single
//! arena, and a dict is a span of keys in one arena and a span of as many values in another (a
//! container that grows after another was made moves to a vector of its own, once); a string is
//! an index into a table of strings borrowed from the input bytes, one per distinct content, so
//! that comparing two keys is comparing two numbers. Equal spans are shared: lists and tuples of
//! equal items share their items (each trace entry of a snapshot has a list of its own, and
//! most of these lists repeat another's frames), and dicts of equal keys share their keys
//! (every trace entry has the same eight, so a dict entry costs its value alone: 8 bytes, not
//! 16, which is a third of the memory a snapshot's document touches). Sharing a span is safe
//! because a span only ever grows in place at the end of its arena, past every span's elements,
//! and a dict's values, which change in place, are never shared.
//!
//! Dict keys are kept apart from values rather than in `(key, value)` pairs for that sharing,
//! much as CPython shares one key table between the instance dicts of a class (PEP 412,
//! "Key-Sharing Dictionary"; `Objects/dictobject.c`).

use std::borrow::Cow;
use std::collections::HashMap;

mod append;

pub(crate) use append::Remap;

/// A container's index in its [`Document`]. Two references to one Python object have one `Id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id(pub(crate) u32);

impl Id {
    /// The arena index, dense from 0 to [`Document::containers`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A string's index in its [`Document`]: equal indexes are equal contents, and the other way
/// round (strings are interned by content).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StrId(pub(crate) u32);

impl StrId {
    /// Dense from 0 to [`Document::strings`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One Python value, 8 bytes. Strings, bytes, ints beyond 32 bits, floats and containers are
/// indexes into the owning [`Document`], which reads them ([`Document::as_str`],
/// [`Document::as_int`], [`Document::items`], ...). Equal values are equal Python objects
/// for strings and the other scalars inline; containers, ints beyond 32 bits, floats and bytes
/// compare by identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Value {
    None,
    Bool(bool),
    /// Python ints that fit 32 bits signed.
    Small(i32),
    /// Python ints that fit 64 bits signed (and not 32): an index into the document's ints.
    Int(u32),
    /// Python ints of 65 to 128 bits (wider ones are refused when read).
    Wide(u32),
    Float(u32),
    Str(StrId),
    Bytes(u32),
    List(Id),
    Tuple(Id),
    Dict(Id),
}

impl Value {
    /// The container this value refers to, if it is one.
    pub fn id(&self) -> Option<Id> {
        match *self {
            Value::List(id) | Value::Tuple(id) | Value::Dict(id) => Some(id),
            _ => None,
        }
    }

    /// The value as one number: its kind in the top byte, its payload below.
    pub(crate) fn bits(&self) -> u64 {
        let (kind, payload) = match *self {
            Value::None => (0, 0),
            Value::Bool(b) => (1, u32::from(b)),
            Value::Small(i) => (2, i as u32),
            Value::Int(i) => (3, i),
            Value::Wide(i) => (4, i),
            Value::Float(i) => (5, i),
            Value::Str(s) => (6, s.0),
            Value::Bytes(i) => (7, i),
            Value::List(id) => (8, id.0),
            Value::Tuple(id) => (9, id.0),
            Value::Dict(id) => (10, id.0),
        };
        (kind << 56) | u64::from(payload)
    }

    /// Python's type name, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Small(_) | Value::Int(_) | Value::Wide(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Tuple(_) => "tuple",
            Value::Dict(_) => "dict",
        }
    }
}

/// A dict key as a hashable value, for the index of a large dict: by content for scalars
/// (interned strings by index), by identity for containers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    None,
    Int(i128),
    Float(u64),
    Str(StrId),
    Bytes(Vec<u8>),
    Id(Id),
}

/// Spans remembered for sharing, at most, in each of the two maps (items and keys; about 32 MiB
/// of map each), whatever the pickle.
const MAX_SHARED_SPANS: usize = 1 << 20;

/// Dicts up to this many entries are searched by a scan; larger ones get a hash index. A
/// snapshot holds a million small dicts, for which an index each would triple the memory.
const SCAN_LIMIT: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    List,
    Tuple,
    Dict,
}

/// Where a container's items or entries are.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Node {
    /// A list or tuple: `len` items of the items arena from `start`.
    Items { kind: Kind, start: u32, len: u32 },
    /// A list or tuple with a vector of its own (an index into the document's own items).
    OwnItems { kind: Kind, index: u32 },
    /// A dict: the keys of key span `keys` (an index into the document's key spans), as many
    /// values of the values arena from `values`. Naming the span, not its start and length,
    /// keeps a node 12 bytes: a snapshot has 360,000 of them.
    Entries { keys: u32, values: u32 },
    /// A dict with vectors of its own (an index into the document's own dicts).
    OwnDict(u32),
}

impl Node {
    pub(crate) fn kind(&self) -> Kind {
        match *self {
            Node::Items { kind, .. } | Node::OwnItems { kind, .. } => kind,
            Node::Entries { .. } | Node::OwnDict(_) => Kind::Dict,
        }
    }
}

/// A dict that grew after other containers were made: its entries, and a hash index once it
/// is large.
#[derive(Debug, Clone, Default)]
pub(crate) struct OwnDict {
    keys: Vec<Value>,
    values: Vec<Value>,
    index: Option<HashMap<Key, usize>>,
}

/// A dict's entries, in insertion order: its keys and, at the same positions, their values.
#[derive(Debug, Clone, Copy)]
pub struct Entries<'d> {
    keys: &'d [Value],
    values: &'d [Value],
}

impl<'d> Entries<'d> {
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn keys(&self) -> &'d [Value] {
        self.keys
    }

    pub fn values(&self) -> &'d [Value] {
        self.values
    }

    /// The `(key, value)` pairs.
    pub fn iter(&self) -> std::iter::Zip<std::slice::Iter<'d, Value>, std::slice::Iter<'d, Value>> {
        self.keys.iter().zip(self.values)
    }
}

impl<'d> IntoIterator for Entries<'d> {
    type Item = (&'d Value, &'d Value);
    type IntoIter = std::iter::Zip<std::slice::Iter<'d, Value>, std::slice::Iter<'d, Value>>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Why an arena could not take more: it would pass 2^32 elements.
#[derive(Debug)]
pub(crate) struct Full;

/// A whole unpickled object: the root value and the arenas of containers, strings and wide
/// ints it refers to. `'a` is the pickle's bytes, which the strings borrow.
///
/// Build one to write a pickle with [`Document::new_list`], [`Document::push`],
/// [`Document::new_dict`], [`Document::insert`], [`Document::new_tuple`],
/// [`Document::new_str`], [`Document::new_int`] and [`Document::set_root`]; a container
/// referenced from several places is written once and referenced through the memo, as Python
/// does.
#[derive(Debug, Clone)]
pub struct Document<'a> {
    pub(crate) nodes: Vec<Node>,
    items: Vec<Value>,
    /// Dict keys: spans shared by dicts of equal keys.
    keys: Vec<Value>,
    /// Dict values: one span per dict, never shared.
    values: Vec<Value>,
    own_items: Vec<Vec<Value>>,
    /// Spans of the items arena by the hash of their items, to share equal ones.
    spans: HashMap<u64, (u32, u32), foldhash::fast::RandomState>,
    /// The spans of the keys arena that dicts name, `(start, len)`; the first is empty.
    key_spans: Vec<(u32, u32)>,
    /// Spans of distinct keys by the hash of their keys, to share equal ones.
    key_spans_by_hash: HashMap<u64, u32, foldhash::fast::RandomState>,
    /// The key span of the last new dict, tried before `key_spans_by_hash`.
    last_keys: u32,
    own_dicts: Vec<OwnDict>,
    ints: Vec<i64>,
    floats: Vec<f64>,
    strs: Vec<Cow<'a, str>>,
    str_ids: HashMap<Cow<'a, str>, StrId, foldhash::fast::RandomState>,
    bytes: Vec<Cow<'a, [u8]>>,
    wide: Vec<i128>,
    root: Value,
}

impl Default for Document<'_> {
    fn default() -> Self {
        Document::new()
    }
}

impl<'a> Document<'a> {
    /// An empty document whose root is `None`.
    pub fn new() -> Document<'a> {
        Document {
            nodes: Vec::new(),
            items: Vec::new(),
            keys: Vec::new(),
            values: Vec::new(),
            own_items: Vec::new(),
            spans: HashMap::default(),
            key_spans: vec![(0, 0)],
            key_spans_by_hash: HashMap::default(),
            last_keys: 0,
            own_dicts: Vec::new(),
            ints: Vec::new(),
            floats: Vec::new(),
            strs: Vec::new(),
            str_ids: HashMap::default(),
            bytes: Vec::new(),
            wide: Vec::new(),
            root: Value::None,
        }
    }

    /// An empty document with room for a pickle of `len` bytes (the arenas grow by doubling
    /// otherwise, copying what they hold each time).
    pub(crate) fn with_capacity_for(len: usize) -> Document<'a> {
        let mut d = Document::new();
        // A snapshot holds about one container per 50 bytes, one list item per 8, one dict
        // value per 11 and one wide int per 32 (the frame references and the trace entries'
        // fields; a real GPT-2 training snapshot of 215,000 entries: 18.9 MB, 360,000
        // containers, 1.73 M dict entries), and few distinct keys; a snapshot of shorter
        // tracebacks is denser (7 bytes a dict value, 29 a wide int). Reserving is cheap (pages
        // untouched are never faulted in); growing past the reservation copies the arena.
        d.nodes.reserve(len / 48);
        d.items.reserve(len / 8);
        d.values.reserve(len / 6);
        d.ints.reserve(len / 16);
        crate::huge_pages::advise_huge_pages(&mut d.nodes);
        crate::huge_pages::advise_huge_pages(&mut d.items);
        crate::huge_pages::advise_huge_pages(&mut d.values);
        crate::huge_pages::advise_huge_pages(&mut d.ints);
        d
    }

    pub fn root(&self) -> &Value {
        &self.root
    }

    pub fn set_root(&mut self, root: Value) {
        self.root = root;
    }

    /// Number of containers: every [`Id`] indexes below it.
    pub fn containers(&self) -> usize {
        self.nodes.len()
    }

    /// The number of items or entries of container `id`.
    pub(crate) fn len_of(&self, id: Id) -> usize {
        match self.nodes[id.index()] {
            Node::Items { len, .. } => len as usize,
            Node::OwnItems { index, .. } => self.own_items[index as usize].len(),
            Node::Entries { keys, .. } => self.key_spans[keys as usize].1 as usize,
            Node::OwnDict(i) => self.own_dicts[i as usize].keys.len(),
        }
    }

    /// Whether `other` holds the same values as this document: the same containers by
    /// index with the same items or entries, the same strings by index, the same numbers,
    /// the same root (however their arenas share spans).
    #[cfg(test)]
    pub(crate) fn same_as(&self, other: &Document) -> bool {
        let values = |d: &Document, i: usize| {
            let id = Id(i as u32);
            match d.nodes[i].kind() {
                Kind::Dict => {
                    let e = d.entries(&Value::Dict(id)).expect("a dict");
                    (Kind::Dict, e.keys().to_vec(), e.values().to_vec())
                }
                kind => (
                    kind,
                    d.items(&Value::List(id)).expect("items").to_vec(),
                    vec![],
                ),
            }
        };
        let bits = |f: &[f64]| f.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        self.nodes.len() == other.nodes.len()
            && (0..self.nodes.len()).all(|i| values(self, i) == values(other, i))
            && self.strs == other.strs
            && self.ints == other.ints
            && self.wide == other.wide
            && bits(&self.floats) == bits(&other.floats)
            && self.bytes == other.bytes
            && self.root == other.root
    }

    /// Number of distinct strings: every [`StrId`] indexes below it.
    pub fn strings(&self) -> usize {
        self.strs.len()
    }

    fn add(&mut self, kind: Kind) -> Id {
        let id = Id(u32::try_from(self.nodes.len()).expect("fewer than 2^32 containers"));
        self.nodes.push(match kind {
            Kind::Dict => Node::Entries { keys: 0, values: 0 },
            kind => Node::Items {
                kind,
                start: 0,
                len: 0,
            },
        });
        id
    }

    /// What container `id` is, if it is one of this document's.
    fn kind_of(&self, id: Id) -> Option<Kind> {
        self.nodes.get(id.index()).map(Node::kind)
    }

    pub(crate) fn add_node(&mut self, kind: Kind) -> Id {
        self.add(kind)
    }

    pub fn new_list(&mut self) -> Value {
        Value::List(self.add(Kind::List))
    }

    pub fn new_dict(&mut self) -> Value {
        Value::Dict(self.add(Kind::Dict))
    }

    pub fn new_tuple(&mut self, items: Vec<Value>) -> Value {
        let id = self.add(Kind::Tuple);
        self.extend_items(id, &items)
            .expect("fewer than 2^32 items");
        Value::Tuple(id)
    }

    /// The string `s`, interned.
    pub fn new_str(&mut self, s: &str) -> Value {
        Value::Str(self.intern(Cow::Owned(s.to_string())))
    }

    /// An int of up to 128 bits.
    pub fn new_int(&mut self, v: impl Into<i128>) -> Value {
        let v = v.into();
        if let Ok(v) = i32::try_from(v) {
            Value::Small(v)
        } else if let Ok(v) = i64::try_from(v) {
            self.ints.push(v);
            Value::Int(self.ints.len() as u32 - 1)
        } else {
            self.wide.push(v);
            Value::Wide(self.wide.len() as u32 - 1)
        }
    }

    pub fn new_float(&mut self, f: f64) -> Value {
        self.floats.push(f);
        Value::Float(self.floats.len() as u32 - 1)
    }

    pub fn new_bytes(&mut self, b: &[u8]) -> Value {
        self.bytes_value(Cow::Owned(b.to_vec()))
    }

    pub(crate) fn bytes_value(&mut self, b: Cow<'a, [u8]>) -> Value {
        self.bytes.push(b);
        Value::Bytes(self.bytes.len() as u32 - 1)
    }

    /// The index of `s`, adding it when no string of that content is there yet.
    pub(crate) fn intern(&mut self, s: Cow<'a, str>) -> StrId {
        if let Some(&id) = self.str_ids.get(&*s) {
            return id;
        }
        let id = StrId(u32::try_from(self.strs.len()).expect("fewer than 2^32 strings"));
        self.strs.push(s.clone());
        self.str_ids.insert(s, id);
        id
    }

    /// Appends to a list; false when `list` is not a list of this document.
    pub fn push(&mut self, list: &Value, item: Value) -> bool {
        match *list {
            Value::List(id) if self.kind_of(id) == Some(Kind::List) => {
                self.extend_items(id, &[item]).is_ok()
            }
            _ => false,
        }
    }

    /// Sets `dict[key] = value`; false when `dict` is not a dict of this document.
    pub fn insert(&mut self, dict: &Value, key: Value, value: Value) -> bool {
        match *dict {
            Value::Dict(id) if self.kind_of(id) == Some(Kind::Dict) => {
                self.insert_pairs(id, &[key, value]).is_ok()
            }
            _ => false,
        }
    }

    /// `dict[key] = value` with a string key.
    pub fn set(&mut self, dict: &Value, key: &str, value: Value) -> bool {
        let key = self.new_str(key);
        self.insert(dict, key, value)
    }

    /// `dict[key] = value` with a string key and a string value.
    pub fn set_str(&mut self, dict: &Value, key: &str, value: &str) -> bool {
        let value = self.new_str(value);
        self.set(dict, key, value)
    }

    /// `dict[key] = value` with a string key and an int value.
    pub fn set_int(&mut self, dict: &Value, key: &str, value: impl Into<i128>) -> bool {
        let value = self.new_int(value);
        self.set(dict, key, value)
    }

    /// Appends `new` to the items of list or tuple `id`; returns how many items already there
    /// were copied (when the list moved to a vector of its own).
    pub(crate) fn extend_items(&mut self, id: Id, new: &[Value]) -> Result<usize, Full> {
        let at = self.items.len();
        let node = &mut self.nodes[id.index()];
        if let Node::Items { len: 0, .. } = node
            && new.len() >= 2
        {
            let hash = hash_of(new, 1);
            if let Some(&(start, len)) = self.spans.get(&hash)
                && self.items[start as usize..][..len as usize] == *new
            {
                let Node::Items {
                    start: s, len: l, ..
                } = node
                else {
                    unreachable!("matched above")
                };
                (*s, *l) = (start, len);
                return Ok(0);
            }
            if self.spans.len() < MAX_SHARED_SPANS
                && let (Ok(start), Ok(len)) = (u32::try_from(at), u32::try_from(new.len()))
            {
                self.spans.insert(hash, (start, len));
            }
        }
        match node {
            Node::Items { start, len, .. }
                if *len == 0 || *start as usize + *len as usize == at =>
            {
                if *len == 0 {
                    *start = u32::try_from(at).map_err(|_| Full)?;
                }
                *len = u32::try_from(*len as usize + new.len()).map_err(|_| Full)?;
                u32::try_from(at + new.len()).map_err(|_| Full)?;
                self.items.extend_from_slice(new);
                Ok(0)
            }
            Node::Items { kind, start, len } => {
                let copied = *len as usize;
                let mut own = self.items[*start as usize..][..copied].to_vec();
                own.extend_from_slice(new);
                *node = Node::OwnItems {
                    kind: *kind,
                    index: u32::try_from(self.own_items.len()).map_err(|_| Full)?,
                };
                self.own_items.push(own);
                Ok(copied)
            }
            Node::OwnItems { index, .. } => {
                self.own_items[*index as usize].extend_from_slice(new);
                Ok(0)
            }
            Node::Entries { .. } | Node::OwnDict(_) => {
                unreachable!("the reader extends only the lists and tuples it made")
            }
        }
    }

    /// Sets the `(key, value)` pairs of the flat `kv` (key, value, key, value...) in dict `id`,
    /// in order: a key already there keeps its place and takes the new value, as in Python.
    /// Returns how many entries already there were copied (when the dict moved to vectors of
    /// its own).
    pub(crate) fn insert_pairs(&mut self, id: Id, kv: &[Value]) -> Result<usize, Full> {
        let n = kv.len() / 2;
        let t = Tables {
            ints: &self.ints,
            wide: &self.wide,
            floats: &self.floats,
            bytes: &self.bytes,
        };
        let node = &mut self.nodes[id.index()];
        let (keys_end, values_end) = (self.keys.len(), self.values.len());
        u32::try_from(keys_end + n).map_err(|_| Full)?;
        u32::try_from(values_end + n).map_err(|_| Full)?;
        let pairs = kv.chunks_exact(2);
        if let Node::Entries { keys: 0, .. } = node
            && (2..=SCAN_LIMIT).contains(&n)
        {
            // A new dict: its keys are a span seen before (most often the last new dict's), or,
            // when distinct, a new one.
            let same = |span: u32| {
                let (start, len) = self.key_spans[span as usize];
                let keys = &self.keys[start as usize..][..len as usize];
                (keys.len() == n && keys.iter().zip(pairs.clone()).all(|(k, p)| *k == p[0]))
                    .then_some(span)
            };
            let mut hash = None;
            let shared = same(self.last_keys).or_else(|| {
                let h = *hash.insert(hash_of(kv, 2));
                self.key_spans_by_hash.get(&h).and_then(|&span| same(span))
            });
            let distinct = || (1..n).all(|i| (0..i).all(|j| !t.same_key(&kv[2 * j], &kv[2 * i])));
            let span = match shared {
                Some(span) => Some(span),
                None if distinct() => {
                    let span = u32::try_from(self.key_spans.len()).map_err(|_| Full)?;
                    self.key_spans.push((keys_end as u32, n as u32));
                    self.keys.extend(pairs.clone().map(|p| p[0]));
                    if self.key_spans_by_hash.len() < MAX_SHARED_SPANS
                        && let Some(h) = hash
                    {
                        self.key_spans_by_hash.insert(h, span);
                    }
                    Some(span)
                }
                None => None,
            };
            if let Some(span) = span {
                self.last_keys = span;
                self.values.extend(pairs.map(|p| p[1]));
                *node = Node::Entries {
                    keys: span,
                    values: values_end as u32,
                };
                return Ok(0);
            }
        }
        let mut copied = 0;
        if let Node::Entries { keys: span, values } = node {
            let (start, len) = self.key_spans[*span as usize];
            let at_end = len == 0
                || (start as usize + len as usize == keys_end
                    && *values as usize + len as usize == values_end);
            if at_end && len as usize + n <= SCAN_LIMIT {
                let (k0, v0) = match len {
                    0 => (keys_end, values_end),
                    _ => (start as usize, *values as usize),
                };
                for p in pairs {
                    match self.keys[k0..].iter().position(|e| t.same_key(e, &p[0])) {
                        Some(i) => self.values[v0 + i] = p[1],
                        None => {
                            self.keys.push(p[0]);
                            self.values.push(p[1]);
                        }
                    }
                }
                // The span may be another dict's too: a longer one is a span of its own.
                let grown = (self.keys.len() - k0) as u32;
                if grown != len {
                    *span = u32::try_from(self.key_spans.len()).map_err(|_| Full)?;
                    self.key_spans.push((k0 as u32, grown));
                    *values = v0 as u32;
                }
                return Ok(0);
            }
            let (keys, values) = (start, *values);
            copied = len as usize;
            let mut own = OwnDict {
                keys: self.keys[keys as usize..][..copied].to_vec(),
                values: self.values[values as usize..][..copied].to_vec(),
                index: None,
            };
            own.reindex(&t);
            *node = Node::OwnDict(u32::try_from(self.own_dicts.len()).map_err(|_| Full)?);
            self.own_dicts.push(own);
        }
        let Node::OwnDict(i) = *node else {
            unreachable!("the reader sets items only in the dicts it made")
        };
        let own = &mut self.own_dicts[i as usize];
        for p in pairs {
            own.insert(p[0], p[1], &t);
        }
        Ok(copied)
    }

    /// The items of a list or tuple.
    pub fn items(&self, v: &Value) -> Option<&[Value]> {
        let (Value::List(id) | Value::Tuple(id)) = *v else {
            return None;
        };
        match *self.nodes.get(id.index())? {
            Node::Items { start, len, .. } => Some(&self.items[start as usize..][..len as usize]),
            Node::OwnItems { index, .. } => Some(&self.own_items[index as usize]),
            Node::Entries { .. } | Node::OwnDict(_) => None,
        }
    }

    /// The entries of a dict, in insertion order.
    pub fn entries(&self, v: &Value) -> Option<Entries<'_>> {
        let Value::Dict(id) = *v else { return None };
        match *self.nodes.get(id.index())? {
            Node::Entries { keys, values } => {
                let (start, len) = self.key_spans[keys as usize];
                Some(Entries {
                    keys: &self.keys[start as usize..][..len as usize],
                    values: &self.values[values as usize..][..len as usize],
                })
            }
            Node::OwnDict(i) => {
                let own = &self.own_dicts[i as usize];
                Some(Entries {
                    keys: &own.keys,
                    values: &own.values,
                })
            }
            Node::Items { .. } | Node::OwnItems { .. } => None,
        }
    }

    /// The index of the string `s`, if the document holds it.
    pub fn str_id(&self, s: &str) -> Option<StrId> {
        self.str_ids.get(s).copied()
    }

    /// `dict[key]` for a string key; `None` when `v` is not a dict or lacks the key.
    pub fn get(&self, v: &Value, key: &str) -> Option<&Value> {
        let key = Value::Str(self.str_id(key)?);
        let entries = self.entries(v)?;
        if let (Value::Dict(id), true) = (*v, entries.len() > SCAN_LIMIT)
            && let Node::OwnDict(i) = self.nodes[id.index()]
        {
            return self.own_dicts[i as usize].get(&key, &self.tables());
        }
        let i = entries.keys.iter().position(|k| *k == key)?;
        Some(&entries.values[i])
    }

    fn tables(&self) -> Tables<'_, 'a> {
        Tables {
            ints: &self.ints,
            wide: &self.wide,
            floats: &self.floats,
            bytes: &self.bytes,
        }
    }

    /// The text of a string.
    pub fn as_str(&self, v: &Value) -> Option<&str> {
        match *v {
            Value::Str(id) => self.strs.get(id.index()).map(|s| &**s),
            _ => None,
        }
    }

    /// The text of string `id`.
    pub fn text(&self, id: StrId) -> &str {
        &self.strs[id.index()]
    }

    pub fn as_bytes(&self, v: &Value) -> Option<&[u8]> {
        match *v {
            Value::Bytes(i) => self.bytes.get(i as usize).map(|b| &**b),
            _ => None,
        }
    }

    /// An int (or a bool, as Python counts `True` as 1).
    pub fn as_int(&self, v: &Value) -> Option<i128> {
        self.tables().int(v)
    }

    /// The int as a `u64` when it fits: addresses, sizes, and stream handles that CUDA hands
    /// out as pointers (negative values are reinterpreted as their 64-bit two's complement, as
    /// PyTorch stores `cudaStream_t` in an `int64_t`).
    pub fn as_u64(&self, v: &Value) -> Option<u64> {
        match *v {
            Value::Small(i) => return Some(i64::from(i) as u64),
            Value::Int(i) => return self.ints.get(i as usize).map(|&i| i as u64),
            _ => {}
        }
        let v = self.as_int(v)?;
        u64::try_from(v)
            .ok()
            .or_else(|| i64::try_from(v).ok().map(|v| v as u64))
    }

    pub fn as_f64(&self, v: &Value) -> Option<f64> {
        match *v {
            Value::Float(f) => self.floats.get(f as usize).copied(),
            _ => self.as_int(v).map(|i| i as f64),
        }
    }

    pub fn as_bool(&self, v: &Value) -> Option<bool> {
        match *v {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }
}

/// The tables that values index, besides the containers: what comparing two keys needs.
#[derive(Clone, Copy)]
struct Tables<'t, 'a> {
    ints: &'t [i64],
    wide: &'t [i128],
    floats: &'t [f64],
    bytes: &'t [Cow<'a, [u8]>],
}

impl Tables<'_, '_> {
    fn int(&self, v: &Value) -> Option<i128> {
        match *v {
            Value::Small(i) => Some(i128::from(i)),
            Value::Int(i) => self.ints.get(i as usize).map(|&i| i128::from(i)),
            Value::Wide(i) => self.wide.get(i as usize).copied(),
            Value::Bool(b) => Some(i128::from(b)),
            _ => None,
        }
    }

    fn float_bits(&self, i: u32) -> Option<u64> {
        self.floats.get(i as usize).map(|f| f.to_bits())
    }

    /// Whether `a` and `b` are one dict key in Python. Strings are interned, so equal contents
    /// are equal indexes; an int is `Small`, `Int` or `Wide` by its value alone, so ints of two
    /// kinds always differ; floats and bytes are compared by content (Python also counts
    /// `1.0 == 1`, which snapshot keys never need and this does not do).
    fn same_key(&self, a: &Value, b: &Value) -> bool {
        match (*a, *b) {
            (Value::Str(x), Value::Str(y)) => x == y,
            (Value::Small(x), Value::Small(y)) => x == y,
            (Value::Bool(x), Value::Bool(y)) => x == y,
            (Value::Bool(x), Value::Small(y)) | (Value::Small(y), Value::Bool(x)) => {
                i32::from(x) == y
            }
            (Value::None, Value::None) => true,
            (Value::Int(x), Value::Int(y)) => {
                self.ints.get(x as usize) == self.ints.get(y as usize)
            }
            (Value::Wide(x), Value::Wide(y)) => {
                self.wide.get(x as usize) == self.wide.get(y as usize)
            }
            (Value::Float(x), Value::Float(y)) => self.float_bits(x) == self.float_bits(y),
            (Value::Bytes(x), Value::Bytes(y)) => {
                self.bytes.get(x as usize) == self.bytes.get(y as usize)
            }
            (
                Value::List(x) | Value::Tuple(x) | Value::Dict(x),
                Value::List(y) | Value::Tuple(y) | Value::Dict(y),
            ) => x == y,
            _ => false,
        }
    }

    fn key(&self, v: &Value) -> Key {
        match *v {
            Value::None => Key::None,
            Value::Float(f) => Key::Float(self.float_bits(f).unwrap_or(0)),
            Value::Str(s) => Key::Str(s),
            Value::Bytes(i) => Key::Bytes(self.bytes[i as usize].to_vec()),
            Value::List(id) | Value::Tuple(id) | Value::Dict(id) => Key::Id(id),
            // Python: True == 1 and hashes alike.
            Value::Bool(_) | Value::Small(_) | Value::Int(_) | Value::Wide(_) => {
                Key::Int(self.int(v).unwrap_or(0))
            }
        }
    }
}

impl OwnDict {
    fn reindex(&mut self, t: &Tables) {
        self.index = (self.keys.len() > SCAN_LIMIT).then(|| {
            self.keys
                .iter()
                .enumerate()
                .map(|(i, k)| (t.key(k), i))
                .collect()
        });
    }

    fn position(&self, key: &Value, t: &Tables) -> Option<usize> {
        match &self.index {
            Some(index) => index.get(&t.key(key)).copied(),
            None => self.keys.iter().position(|e| t.same_key(e, key)),
        }
    }

    /// Inserts or replaces, keeping first-insertion order as Python dicts do.
    fn insert(&mut self, key: Value, value: Value, t: &Tables) {
        if let Some(i) = self.position(&key, t) {
            self.values[i] = value;
            return;
        }
        if let Some(index) = &mut self.index {
            index.insert(t.key(&key), self.keys.len());
        }
        self.keys.push(key);
        self.values.push(value);
        if self.index.is_none() {
            self.reindex(t);
        }
    }

    fn get(&self, key: &Value, t: &Tables) -> Option<&Value> {
        self.position(key, t).map(|i| &self.values[i])
    }
}

/// A hash of every `stride`th value of `values` from the first, to find a span of equal ones.
/// Unseeded, but a crafted pickle gains nothing from collisions: a hash names one span,
/// compared once. Four lanes, so that the multiplications of one value do not wait for the
/// previous value's.
fn hash_of(values: &[Value], stride: usize) -> u64 {
    let mix = |h: u64, v: &Value| (h.rotate_left(5) ^ v.bits()).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut chunks = values.chunks_exact(4 * stride);
    let mut h = [values.len() as u64, 1, 2, 3];
    for c in &mut chunks {
        h[0] = mix(h[0], &c[0]);
        h[1] = mix(h[1], &c[stride]);
        h[2] = mix(h[2], &c[2 * stride]);
        h[3] = mix(h[3], &c[3 * stride]);
    }
    let joined = h[0] ^ h[1].rotate_left(16) ^ h[2].rotate_left(32) ^ h[3].rotate_left(48);
    chunks.remainder().iter().step_by(stride).fold(joined, mix)
}
