//! The dictionary-encoded string columns keyed by API id: `api`, `action`, `memory_kind`.

use bytes::Bytes;
use parquet::data_type::ByteArray;
use serde::Serialize;

/// The distinct strings of one column and, per API id, the key of its string.
pub struct Vocabulary {
    values: Vec<ByteArray>,
    key_of_id: Vec<usize>,
}

impl Vocabulary {
    /// `pairs` maps each API id to its string. The strings are kept for the rest of the
    /// process (the vocabularies are built once): a static byte array is cloned without the
    /// reference count a shared one updates, once per event and column.
    pub fn new(pairs: impl IntoIterator<Item = (u16, String)>) -> Vocabulary {
        let mut strings: Vec<String> = Vec::new();
        let mut key_of_id = Vec::new();
        for (id, s) in pairs {
            let key = match strings.iter().position(|x| *x == s) {
                Some(k) => k,
                None => {
                    strings.push(s);
                    strings.len() - 1
                }
            };
            let id = usize::from(id);
            if key_of_id.len() <= id {
                key_of_id.resize(id + 1, 0);
            }
            key_of_id[id] = key;
        }
        Vocabulary {
            values: strings
                .into_iter()
                .map(|s| ByteArray::from(Bytes::from_static(s.leak().as_bytes())))
                .collect(),
            key_of_id,
        }
    }

    /// The column for events with these API ids (ids known to [`Self::new`]), into `out`
    /// (emptied first): shared byte arrays, which the writer's dictionary encoder turns into
    /// keys.
    pub fn column(&self, ids: &[u16], out: &mut Vec<ByteArray>) {
        out.clear();
        out.extend(
            ids.iter()
                .map(|&id| self.values[self.key_of_id[usize::from(id)]].clone()),
        );
    }
}

/// The snake_case name serde gives a unit variant (`Op::Alloc` → `alloc`), the same word
/// `summary --json` and the other JSON outputs use.
pub fn serde_name(value: impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        other => unreachable!("a unit variant serializes as a string, got {other:?}"),
    }
}
