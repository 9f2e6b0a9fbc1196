//! The `k` items with the largest keys of a stream, held in a bounded heap: what the report
//! keeps of a trace's allocations (the page's largest ones, the timeline's bands) without
//! holding them all.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// The `k` items with the largest keys seen so far. Keys are meant to be distinct (break ties
/// with an index), so which items are kept does not depend on the order they came in.
#[derive(Debug, Clone)]
pub struct Largest<K: Ord, V> {
    k: usize,
    /// The smallest kept key on top.
    heap: BinaryHeap<Reverse<Keyed<K, V>>>,
}

#[derive(Debug, Clone)]
struct Keyed<K, V>(K, V);

impl<K: Ord, V> PartialEq for Keyed<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl<K: Ord, V> Eq for Keyed<K, V> {}

impl<K: Ord, V> PartialOrd for Keyed<K, V> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K: Ord, V> Ord for Keyed<K, V> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.cmp(&other.0)
    }
}

impl<K: Ord, V> Largest<K, V> {
    pub fn new(k: usize) -> Largest<K, V> {
        Largest {
            k,
            heap: BinaryHeap::with_capacity(k + 1),
        }
    }

    /// Keeps `value` if `key` is among the `k` largest so far.
    #[inline]
    pub fn push(&mut self, key: K, value: V) {
        if self.heap.len() < self.k {
            self.heap.push(Reverse(Keyed(key, value)));
        } else if let Some(mut smallest) = self.heap.peek_mut()
            && key > smallest.0.0
        {
            *smallest = Reverse(Keyed(key, value));
        }
    }

    /// The kept items, with their keys, in no particular order.
    pub fn into_vec(self) -> Vec<(K, V)> {
        self.heap
            .into_vec()
            .into_iter()
            .map(|Reverse(Keyed(k, v))| (k, v))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_keys_are_kept_whatever_the_order_they_come_in() {
        let keys = [5u32, 1, 9, 3, 7, 9, 2, 8];
        let mut forward = Largest::new(3);
        let mut backward = Largest::new(3);
        for (i, &k) in keys.iter().enumerate() {
            forward.push((k, Reverse(i)), i);
        }
        for (i, &k) in keys.iter().enumerate().rev() {
            backward.push((k, Reverse(i)), i);
        }
        let sorted = |l: Largest<(u32, Reverse<usize>), usize>| {
            let mut v: Vec<usize> = l.into_vec().into_iter().map(|x| x.1).collect();
            v.sort_unstable();
            v
        };
        // 9 twice (indices 2 and 5), then 8 (index 7).
        assert_eq!(sorted(forward), vec![2, 5, 7]);
        assert_eq!(sorted(backward), vec![2, 5, 7]);
        assert!(Largest::<u32, ()>::new(0).into_vec().is_empty());
    }
}
