//! The unpickled value tree: scalars inline, containers in an arena so that sharing survives.

use std::collections::HashMap;
use std::sync::Arc;

/// A container's index in its [`Document`]. Two references to one Python object have one `Id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id(pub(crate) u32);

impl Id {
    /// The arena index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One Python value. Containers are references into the owning [`Document`].
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    /// Python ints up to 128 bits (wider ones are refused when read).
    Int(i128),
    Float(f64),
    Str(Arc<str>),
    Bytes(Arc<[u8]>),
    List(Id),
    Tuple(Id),
    Dict(Id),
}

impl Value {
    pub fn str(s: &str) -> Value {
        Value::Str(Arc::from(s))
    }

    pub fn int(v: impl Into<i128>) -> Value {
        Value::Int(v.into())
    }

    pub fn as_int(&self) -> Option<i128> {
        match *self {
            Value::Int(v) => Some(v),
            Value::Bool(b) => Some(i128::from(b)),
            _ => None,
        }
    }

    /// The int as a `u64` when it fits: addresses, sizes, and stream handles that CUDA hands
    /// out as pointers (negative values are reinterpreted as their 64-bit two's complement, as
    /// PyTorch stores `cudaStream_t` in an `int64_t`).
    pub fn as_u64(&self) -> Option<u64> {
        let v = self.as_int()?;
        u64::try_from(v)
            .ok()
            .or_else(|| i64::try_from(v).ok().map(|v| v as u64))
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Float(v) => Some(v),
            Value::Int(v) => Some(v as f64),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The container this value refers to, if it is one.
    pub fn id(&self) -> Option<Id> {
        match *self {
            Value::List(id) | Value::Tuple(id) | Value::Dict(id) => Some(id),
            _ => None,
        }
    }

    /// Python's type name, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Tuple(_) => "tuple",
            Value::Dict(_) => "dict",
        }
    }
}

/// A dict key as a hashable value: by content for scalars, by identity for containers (a key
/// that is a container can only be a tuple in Python, and snapshots have none).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    None,
    Int(i128),
    Float(u64),
    Str(Arc<str>),
    Bytes(Arc<[u8]>),
    Id(Id),
}

impl Key {
    fn of(v: &Value) -> Key {
        match v {
            Value::None => Key::None,
            // Python: True == 1 and hashes alike.
            Value::Bool(b) => Key::Int(i128::from(*b)),
            Value::Int(i) => Key::Int(*i),
            Value::Float(f) => Key::Float(f.to_bits()),
            Value::Str(s) => Key::Str(s.clone()),
            Value::Bytes(b) => Key::Bytes(b.clone()),
            Value::List(id) | Value::Tuple(id) | Value::Dict(id) => Key::Id(*id),
        }
    }
}

/// Dicts up to this many entries are searched by a scan; larger ones get a hash index. A
/// snapshot holds a million small dicts, for which an index each would triple the memory.
const SCAN_LIMIT: usize = 16;

#[derive(Debug, Clone, Default)]
pub(crate) struct Dict {
    pub(crate) entries: Vec<(Value, Value)>,
    index: Option<HashMap<Key, usize>>,
}

/// `Key::of(a) == Key::of(b)` without making the keys (no reference count touched): the scan
/// of a small dict runs once per inserted key.
fn same_key(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Str(x), Value::Str(y)) => Arc::ptr_eq(x, y) || x == y,
        (Value::Int(_) | Value::Bool(_), Value::Int(_) | Value::Bool(_)) => {
            a.as_int() == b.as_int()
        }
        (Value::None, Value::None) => true,
        (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits(),
        (Value::Bytes(x), Value::Bytes(y)) => x == y,
        (
            Value::List(x) | Value::Tuple(x) | Value::Dict(x),
            Value::List(y) | Value::Tuple(y) | Value::Dict(y),
        ) => x == y,
        _ => false,
    }
}

impl Dict {
    fn position(&self, key: &Value) -> Option<usize> {
        match &self.index {
            Some(index) => index.get(&Key::of(key)).copied(),
            None => self.entries.iter().position(|(e, _)| same_key(e, key)),
        }
    }

    /// Inserts or replaces, keeping first-insertion order as Python dicts do.
    fn insert(&mut self, key: Value, value: Value) {
        if let Some(i) = self.position(&key) {
            self.entries[i].1 = value;
            return;
        }
        if let Some(index) = &mut self.index {
            index.insert(Key::of(&key), self.entries.len());
        }
        self.entries.push((key, value));
        if self.index.is_none() && self.entries.len() > SCAN_LIMIT {
            self.index = Some(
                self.entries
                    .iter()
                    .enumerate()
                    .map(|(i, (k, _))| (Key::of(k), i))
                    .collect(),
            );
        }
    }

    fn get(&self, key: &Value) -> Option<&Value> {
        self.position(key).map(|i| &self.entries[i].1)
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Node {
    List(Vec<Value>),
    Tuple(Vec<Value>),
    Dict(Dict),
}

/// A whole unpickled object: the root value and the arena of containers it refers to.
///
/// Build one to write a pickle with [`Document::new_list`], [`Document::push`],
/// [`Document::new_dict`], [`Document::insert`], [`Document::new_tuple`] and
/// [`Document::set_root`]; a container referenced from several places is written once and
/// referenced through the memo, as Python does.
#[derive(Debug, Clone)]
pub struct Document {
    pub(crate) nodes: Vec<Node>,
    root: Value,
}

impl Default for Document {
    fn default() -> Self {
        Document::new()
    }
}

impl Document {
    /// An empty document whose root is `None`.
    pub fn new() -> Document {
        Document {
            nodes: Vec::new(),
            root: Value::None,
        }
    }

    pub fn root(&self) -> &Value {
        &self.root
    }

    pub fn set_root(&mut self, root: Value) {
        self.root = root;
    }

    /// Number of containers in the arena.
    pub fn containers(&self) -> usize {
        self.nodes.len()
    }

    fn add(&mut self, node: Node) -> Id {
        let id = Id(u32::try_from(self.nodes.len()).expect("fewer than 2^32 containers"));
        self.nodes.push(node);
        id
    }

    pub fn new_list(&mut self) -> Value {
        Value::List(self.add(Node::List(Vec::new())))
    }

    pub fn new_dict(&mut self) -> Value {
        Value::Dict(self.add(Node::Dict(Dict::default())))
    }

    pub fn new_tuple(&mut self, items: Vec<Value>) -> Value {
        Value::Tuple(self.add(Node::Tuple(items)))
    }

    /// Appends to a list; false when `list` is not a list of this document.
    pub fn push(&mut self, list: &Value, item: Value) -> bool {
        match list {
            Value::List(id) => match self.nodes.get_mut(id.index()) {
                Some(Node::List(items)) => {
                    items.push(item);
                    true
                }
                _ => false,
            },
            _ => false,
        }
    }

    /// Sets `dict[key] = value`; false when `dict` is not a dict of this document.
    pub fn insert(&mut self, dict: &Value, key: Value, value: Value) -> bool {
        match dict {
            Value::Dict(id) => match self.nodes.get_mut(id.index()) {
                Some(Node::Dict(d)) => {
                    d.insert(key, value);
                    true
                }
                _ => false,
            },
            _ => false,
        }
    }

    /// `dict[key] = value` with a string key.
    pub fn set(&mut self, dict: &Value, key: &str, value: Value) -> bool {
        self.insert(dict, Value::str(key), value)
    }

    /// The items of a list or tuple.
    pub fn items(&self, v: &Value) -> Option<&[Value]> {
        match (v, v.id().and_then(|id| self.nodes.get(id.index()))) {
            (Value::List(_), Some(Node::List(items))) => Some(items),
            (Value::Tuple(_), Some(Node::Tuple(items))) => Some(items),
            _ => None,
        }
    }

    /// The `(key, value)` pairs of a dict, in insertion order.
    pub fn entries(&self, v: &Value) -> Option<&[(Value, Value)]> {
        match (v, v.id().and_then(|id| self.nodes.get(id.index()))) {
            (Value::Dict(_), Some(Node::Dict(d))) => Some(&d.entries),
            _ => None,
        }
    }

    /// `dict[key]` for a string key; `None` when `v` is not a dict or lacks the key.
    pub fn get(&self, v: &Value, key: &str) -> Option<&Value> {
        match (v, v.id().and_then(|id| self.nodes.get(id.index()))) {
            // Snapshot dicts have a handful of keys: a scan beats hashing a fresh key.
            (Value::Dict(_), Some(Node::Dict(d))) if d.entries.len() <= SCAN_LIMIT => d
                .entries
                .iter()
                .rev()
                .find(|(k, _)| k.as_str() == Some(key))
                .map(|(_, v)| v),
            (Value::Dict(_), Some(Node::Dict(d))) => d.get(&Value::str(key)),
            _ => None,
        }
    }

    pub(crate) fn node_mut(&mut self, id: Id) -> &mut Node {
        &mut self.nodes[id.index()]
    }

    pub(crate) fn dict_insert(d: &mut Node, key: Value, value: Value) -> bool {
        match d {
            Node::Dict(d) => {
                d.insert(key, value);
                true
            }
            _ => false,
        }
    }

    pub(crate) fn add_node(&mut self, node: Node) -> Id {
        self.add(node)
    }
}
