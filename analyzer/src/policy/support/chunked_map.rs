//! An ordered map kept as a list of short sorted vectors: the free-block indexes of the
//! PyTorch caching allocator's model (`policy/pytorch.rs`).
//!
//! Those indexes hold a few to a few hundred free blocks and change on almost every request
//! (a split, a merge, a reuse). At that size `std`'s `BTreeMap` hovers around one node's eleven
//! keys, splitting and merging nodes as it goes; here up to `CHUNK` entries are one vector,
//! searched by bisection down to a short window and then linearly, and shifted in place, and a
//! larger map is a sorted list of such vectors, so an update costs at most a chunk's shift and
//! a search over the chunks. `analyzer/BENCHMARKS.md` (`freeidx`) has the measurements.
//!
//! A [`Cursor`] names the place one search found, so that the entry there can be removed or
//! given a new key without a second search: the allocator's model finds a free block, then
//! takes it out or puts back the rest of it after a split, and finds a neighbour it merges
//! with, then puts the merged block in its place. A new key usually lands a few entries from
//! the old one, in the same chunk, and only the entries between the two places shift.
//!
//! Invariants: every chunk is non-empty and sorted by key, holds at most `CHUNK` entries, and
//! every key of a chunk is below every key of the next.

/// Entries a chunk holds before it splits in two.
const CHUNK: usize = 64;

/// An ordered map of `Copy` keys and values.
#[derive(Debug, Clone)]
pub struct ChunkedMap<K, V> {
    chunks: Vec<Vec<(K, V)>>,
}

/// A place in a [`ChunkedMap`]: an entry, or the end past every entry. A cursor stands for the
/// map as it was when it was made: any change to the map, its own `remove_at` or `replace_at`
/// included, leaves it meaningless but to [`ChunkedMap::at_old`]. The default is the first place.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cursor {
    chunk: usize,
    index: usize,
}

impl<K, V> Default for ChunkedMap<K, V> {
    fn default() -> Self {
        ChunkedMap { chunks: Vec::new() }
    }
}

impl<K: Ord + Copy, V: Copy> ChunkedMap<K, V> {
    /// The chunk and position of the first entry not below `key`; the chunk is
    /// `chunks.len()` when every key is below it.
    #[inline]
    fn lower_bound(&self, key: &K) -> (usize, usize) {
        // Most maps are one chunk: no search over the chunks.
        if let [c] = &self.chunks[..] {
            let p = first_not_below(c, |e| e.0 < *key);
            return if p == c.len() { (1, 0) } else { (0, p) };
        }
        let i = first_not_below(&self.chunks, |c| c[c.len() - 1].0 < *key);
        match self.chunks.get(i) {
            Some(c) => (i, first_not_below(c, |e| e.0 < *key)),
            None => (i, 0),
        }
    }

    /// The place of the first entry whose key is not below `key` (the end when there is none).
    #[inline]
    pub fn seek(&self, key: &K) -> Cursor {
        let (chunk, index) = self.lower_bound(key);
        Cursor { chunk, index }
    }

    /// [`ChunkedMap::seek`], trying `hint` first: a place of this map as it is or as it was
    /// ([`ChunkedMap::at_old`]), returned without a search when the entry there is the first
    /// not below `key` (the entry before it, if any, is below `key`).
    #[inline]
    pub fn seek_from(&self, hint: Cursor, key: &K) -> Cursor {
        if let Some(c) = self.chunks.get(hint.chunk)
            && c.get(hint.index).is_some_and(|e| e.0 >= *key)
        {
            let before = match hint.index.checked_sub(1) {
                Some(i) => c.get(i),
                None => hint
                    .chunk
                    .checked_sub(1)
                    .and_then(|p| self.chunks.get(p))
                    .and_then(|p| p.last()),
            };
            if before.is_none_or(|e| e.0 < *key) {
                return hint;
            }
        }
        self.seek(key)
    }

    /// The entry at `at`; `None` at the end.
    #[inline]
    pub fn at(&self, at: Cursor) -> Option<(K, V)> {
        self.chunks.get(at.chunk).map(|c| c[at.index])
    }

    /// The entry at `at` of a cursor that may be older than the map's last change: the entry
    /// now at that place, or `None` when the place is past the map's end or its chunk's.
    #[inline]
    pub fn at_old(&self, at: Cursor) -> Option<(K, V)> {
        self.chunks.get(at.chunk)?.get(at.index).copied()
    }

    /// The place after the entry at `at`, which is not the end.
    #[inline]
    pub fn next(&self, at: Cursor) -> Cursor {
        if at.index + 1 < self.chunks[at.chunk].len() {
            Cursor {
                index: at.index + 1,
                ..at
            }
        } else {
            Cursor {
                chunk: at.chunk + 1,
                index: 0,
            }
        }
    }

    /// Removes the entry at `at`, which is not the end; returns it.
    #[inline]
    pub fn remove_at(&mut self, at: Cursor) -> (K, V) {
        let c = &mut self.chunks[at.chunk];
        let entry = c.remove(at.index);
        if c.is_empty() {
            self.chunks.remove(at.chunk);
        }
        entry
    }

    /// Replaces the entry at `at`, which is not the end, by `key` → `value`, as removing it and
    /// then inserting them would (an entry already under `key` takes `value`). When `key`
    /// belongs in the same chunk and is not another entry's, only the entries between the old
    /// place and the new one move. Returns the new entry's place then, and otherwise a place
    /// that may hold another entry (for [`ChunkedMap::at_old`], which tells them apart).
    #[inline]
    pub fn replace_at(&mut self, at: Cursor, key: K, value: V) -> Cursor {
        let i = at.chunk;
        let (before, rest) = self.chunks.split_at_mut(i);
        let (c, after) = rest
            .split_first_mut()
            .expect("a cursor at an entry names a chunk");
        // The chunk as a slice: its entries' moves cannot then change its length or buffer,
        // which stay in registers (through the `Vec`, every store would reload them).
        let c = &mut c[..];
        // The old entry leaves a gap; walking from it towards the new key's place, each entry
        // passed moves one step into the gap, so the search and the moves are one pass over
        // the few entries between the two places.
        let mut gap = at.index;
        let fits = if key < c[gap].0 {
            while gap > 0 && c[gap - 1].0 > key {
                c[gap] = c[gap - 1];
                gap -= 1;
            }
            match gap.checked_sub(1) {
                Some(below) => c[below].0 < key,
                None => before.last().is_none_or(|p| p[p.len() - 1].0 < key),
            }
        } else {
            while gap + 1 < c.len() && c[gap + 1].0 < key {
                c[gap] = c[gap + 1];
                gap += 1;
            }
            match c.get(gap + 1) {
                Some(above) => key < above.0,
                None => after.first().is_none_or(|next| key < next[0].0),
            }
        };
        let place = Cursor {
            chunk: i,
            index: gap,
        };
        if fits {
            c[gap] = (key, value);
        } else {
            // Another entry has the key, or it belongs in another chunk.
            self.remove_at(place);
            self.insert(key, value);
        }
        place
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let (i, p) = self.lower_bound(&key);
        // Past every key, the entry goes at the end of the last chunk.
        let (i, p) = match i.checked_sub(1) {
            Some(last) if i == self.chunks.len() => (last, self.chunks[last].len()),
            None if self.chunks.is_empty() => {
                self.chunks.push(Vec::with_capacity(CHUNK + 1));
                (0, 0)
            }
            _ => (i, p),
        };
        let c = &mut self.chunks[i];
        if let Some(e) = c.get_mut(p)
            && e.0 == key
        {
            return Some(std::mem::replace(&mut e.1, value));
        }
        c.insert(p, (key, value));
        if c.len() > CHUNK {
            let mut upper = Vec::with_capacity(CHUNK + 1);
            upper.extend(c.drain(CHUNK / 2..));
            self.chunks.insert(i + 1, upper);
        }
        None
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        let (i, p) = self.lower_bound(key);
        let c = self.chunks.get_mut(i)?;
        if c[p].0 != *key {
            return None;
        }
        let (_, value) = c.remove(p);
        if c.is_empty() {
            self.chunks.remove(i);
        }
        Some(value)
    }

    /// The value of `key`.
    pub fn get(&self, key: &K) -> Option<V> {
        let (i, p) = self.lower_bound(key);
        let &(k, v) = self.chunks.get(i)?.get(p)?;
        (k == *key).then_some(v)
    }

    /// The entries whose keys are not below `key`, in ascending order.
    pub fn range_from(&self, key: &K) -> impl Iterator<Item = (K, V)> + '_ {
        let (i, p) = self.lower_bound(key);
        let (head, rest) = match self.chunks.get(i) {
            Some(c) => (&c[p..], &self.chunks[i + 1..]),
            None => (&[][..], &[][..]),
        };
        head.iter().chain(rest.iter().flatten()).copied()
    }

    /// The entries whose keys are below `key`, in descending order.
    pub fn range_below(&self, key: &K) -> impl Iterator<Item = (K, V)> + '_ {
        let (i, p) = self.lower_bound(key);
        let head = self.chunks.get(i).map_or(&[][..], |c| &c[..p]);
        let rest = &self.chunks[..i];
        head.iter()
            .rev()
            .chain(rest.iter().rev().flat_map(|c| c.iter().rev()))
            .copied()
    }

    /// Every entry in ascending order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (K, V)> + '_ {
        self.chunks.iter().flatten().copied()
    }
}

/// The number of leading items of `items` that are `below`, as `partition_point` counts them:
/// bisection down to a window of `WINDOW` items, then a linear search of the window.
fn first_not_below<T>(items: &[T], below: impl Fn(&T) -> bool) -> usize {
    const WINDOW: usize = 16;
    let (mut base, mut size) = (0, items.len());
    while size > WINDOW {
        let half = size / 2;
        if below(&items[base + half]) {
            base += half;
        }
        size -= half;
    }
    base + items[base..base + size]
        .iter()
        .position(|e| !below(e))
        .unwrap_or(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16, u8),
        Remove(u16),
        Get(u16),
        From(u16),
        Below(u16),
        /// Seek the key, then walk to the end.
        Walk(u16),
        /// Seek the key, then remove the entry there.
        RemoveAt(u16),
        /// Seek the first key, then give the entry there the second key and the value.
        ReplaceAt(u16, u16, u8),
        /// Read the place the last replacement returned, after whatever changed since.
        AtOld,
        /// Seek the first key from the place of the first key plus 0 to 2, and from the last
        /// replacement's place.
        SeekFrom(u16, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Keys from a range a few chunks wide, so that chunks fill, split and empty.
        let key = 0u16..(4 * CHUNK as u16);
        prop_oneof![
            3 => (key.clone(), any::<u8>()).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => key.clone().prop_map(Op::Remove),
            1 => key.clone().prop_map(Op::Get),
            1 => key.clone().prop_map(Op::From),
            1 => key.clone().prop_map(Op::Below),
            1 => key.clone().prop_map(Op::Walk),
            1 => key.clone().prop_map(Op::RemoveAt),
            3 => (key.clone(), key.clone(), any::<u8>()).prop_map(|(k, n, v)| Op::ReplaceAt(k, n, v)),
            1 => Just(Op::AtOld),
            2 => (key, 0u8..3).prop_map(|(k, d)| Op::SeekFrom(k, d)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn every_operation_answers_as_the_btree_map_does(ops in prop::collection::vec(op(), 0..2000)) {
            let (mut map, mut reference) = (ChunkedMap::default(), BTreeMap::new());
            let mut hint = None;
            for op in ops {
                match op {
                    Op::Insert(k, v) => prop_assert_eq!(map.insert(k, v), reference.insert(k, v)),
                    Op::Remove(k) => prop_assert_eq!(map.remove(&k), reference.remove(&k)),
                    Op::Get(k) => prop_assert_eq!(map.get(&k), reference.get(&k).copied()),
                    Op::From(k) => {
                        let want: Vec<_> = reference.range(k..).map(|(&k, &v)| (k, v)).collect();
                        prop_assert_eq!(map.range_from(&k).collect::<Vec<_>>(), want);
                    }
                    Op::Below(k) => {
                        let want: Vec<_> = reference.range(..k).rev().map(|(&k, &v)| (k, v)).collect();
                        prop_assert_eq!(map.range_below(&k).collect::<Vec<_>>(), want);
                    }
                    Op::Walk(k) => {
                        let want: Vec<_> = reference.range(k..).map(|(&k, &v)| (k, v)).collect();
                        let (mut at, mut seen) = (map.seek(&k), Vec::new());
                        while let Some(e) = map.at(at) {
                            seen.push(e);
                            at = map.next(at);
                        }
                        prop_assert_eq!(seen, want);
                    }
                    Op::RemoveAt(k) => {
                        let at = map.seek(&k);
                        let want = reference.range(k..).next().map(|(&k, &v)| (k, v));
                        prop_assert_eq!(map.at(at), want);
                        if let Some((k, v)) = want {
                            prop_assert_eq!(map.remove_at(at), (k, v));
                            reference.remove(&k);
                        }
                    }
                    Op::ReplaceAt(k, new, v) => {
                        let at = map.seek(&k);
                        if let Some((old, _)) = map.at(at) {
                            // In one chunk, a key no other entry has stays in it: the place
                            // returned is the new entry's.
                            let in_place = map.chunks.len() == 1
                                && (new == old || !reference.contains_key(&new));
                            let placed = map.replace_at(at, new, v);
                            reference.remove(&old);
                            reference.insert(new, v);
                            if in_place {
                                prop_assert_eq!(map.at_old(placed), Some((new, v)));
                            }
                            hint = Some(placed);
                        }
                    }
                    Op::SeekFrom(k, d) => {
                        let want = map.seek(&k);
                        let near = map.seek(&k.saturating_add(u16::from(d)));
                        prop_assert_eq!(map.seek_from(near, &k), want);
                        prop_assert_eq!(map.seek_from(hint.unwrap_or_default(), &k), want);
                    }
                    Op::AtOld => {
                        // An old place (the last replacement's) holds an entry or nothing,
                        // and the entry there is one of the map's.
                        if let Some((k, v)) = hint.and_then(|at| map.at_old(at)) {
                            prop_assert_eq!(reference.get(&k), Some(&v));
                        }
                    }
                }
                prop_assert!(map.chunks.iter().all(|c| !c.is_empty() && c.len() <= CHUNK));
            }
            let want: Vec<_> = reference.iter().map(|(&k, &v)| (k, v)).collect();
            prop_assert_eq!(map.iter().collect::<Vec<_>>(), want.clone());
            prop_assert_eq!(map.iter().rev().collect::<Vec<_>>(), want.into_iter().rev().collect::<Vec<_>>());
        }
    }
}
