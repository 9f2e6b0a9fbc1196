//! The per-slot bookkeeping every online policy keeps: what it handed to each live slot, and
//! the bytes handed out in all (the policy's *allocated*, after its rounding).

use crate::policy::BlockSpan;

/// Live blocks by slot. Slots are small integers reused by the model ([`crate::model::Request`]),
/// so a vector indexed by slot, grown to the most objects ever live at once, holds them.
#[derive(Debug, Clone)]
pub struct SlotTable<T> {
    slots: Vec<Option<(T, u64)>>,
    allocated: u64,
}

impl<T> Default for SlotTable<T> {
    fn default() -> Self {
        SlotTable {
            slots: Vec::new(),
            allocated: 0,
        }
    }
}

impl<T> SlotTable<T> {
    /// Records `block` as handed to `slot`, counting `bytes` as allocated.
    #[inline]
    pub fn insert(&mut self, slot: u32, block: T, bytes: u64) {
        let slot = slot as usize;
        if self.slots.len() <= slot {
            self.slots.resize_with(slot + 1, || None);
        }
        debug_assert!(self.slots[slot].is_none(), "slot {slot} is live");
        self.slots[slot] = Some((block, bytes));
        self.allocated += bytes;
    }

    /// Ends `slot`: its block, whose bytes stop counting.
    ///
    /// Panics when `slot` is not live (the engine frees only what a policy served).
    #[inline]
    pub fn remove(&mut self, slot: u32) -> T {
        let (block, bytes) = self
            .slots
            .get_mut(slot as usize)
            .and_then(Option::take)
            .expect("the freed slot is live");
        self.allocated -= bytes;
        block
    }

    /// The block of `slot`, if it is live.
    #[inline]
    pub fn get(&self, slot: u32) -> Option<&T> {
        self.slots
            .get(slot as usize)?
            .as_ref()
            .map(|(block, _)| block)
    }

    /// Bytes of the live blocks.
    #[inline]
    pub fn allocated(&self) -> u64 {
        self.allocated
    }

    /// The live blocks with their slots, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(slot, s)| s.as_ref().map(|(block, _)| (slot, block)))
    }

    /// The live blocks.
    pub fn blocks(&self) -> impl Iterator<Item = &T> {
        self.iter().map(|(_, block)| block)
    }

    /// The live blocks of more than 0 bytes as address-map spans, at the address `address`
    /// gives each, of the bytes it counts as allocated.
    pub fn spans(&self, address: impl Fn(&T) -> u64) -> impl Iterator<Item = BlockSpan> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(move |(slot, s)| match s {
                Some((block, bytes)) if *bytes > 0 => Some(BlockSpan {
                    address: address(block),
                    size: *bytes,
                    slot: Some(slot as u32),
                }),
                _ => None,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_reused_and_allocated_follows_the_live_blocks() {
        let mut t = SlotTable::default();
        t.insert(3, "a", 100);
        t.insert(0, "b", 20);
        assert_eq!(t.allocated(), 120);
        assert_eq!(t.iter().collect::<Vec<_>>(), [(0, &"b"), (3, &"a")]);
        assert_eq!(t.get(3), Some(&"a"));
        assert_eq!(t.remove(3), "a");
        assert_eq!(t.get(3), None);
        assert_eq!(t.allocated(), 20);
        t.insert(3, "c", 5);
        assert_eq!(t.allocated(), 25);
        assert_eq!(t.blocks().count(), 2);
        let spans: Vec<_> = t.spans(|_| 7).map(|s| (s.slot, s.size)).collect();
        assert_eq!(spans, [(Some(0), 20), (Some(3), 5)]);
    }

    #[test]
    #[should_panic(expected = "the freed slot is live")]
    fn freeing_a_slot_twice_is_a_bug() {
        let mut t = SlotTable::default();
        t.insert(1, (), 1);
        t.remove(1);
        t.remove(1);
    }
}
