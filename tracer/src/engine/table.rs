//! The in-flight table behind the engine's hot path: a slab of reusable
//! slots, an optional key index with first-in first-out chains for equal
//! keys, and an age list (oldest first) for lazy age-out and eviction.
//!
//! Slots are reused through a free list and the index keeps its capacity, so
//! once warm, inserting and removing allocate nothing.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// "No slot" in intrusive links.
pub const NIL: u32 = u32::MAX;

/// A fast multiplicative hasher for small integer keys (dev, sector, length).
/// Keys come from the kernel's own sector numbers, not from untrusted peers.
#[derive(Clone, Copy, Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.mix(u64::from(byte));
        }
    }
    fn write_u32(&mut self, value: u32) {
        self.mix(u64::from(value));
    }
    fn write_u64(&mut self, value: u64) {
        self.mix(value);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl KeyHasher {
    #[inline]
    fn mix(&mut self, value: u64) {
        self.0 = (self.0.rotate_left(5) ^ value).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;

/// Room the key index starts with: a queue depth's worth of keys.
const INDEX_START: usize = 64;

#[derive(Clone, Copy, Debug)]
struct Chain {
    head: u32,
    tail: u32,
}

struct Slot<K, T> {
    value: T,
    key: Option<K>,
    chain_next: u32,
    age_prev: u32,
    age_next: u32,
    in_age_list: bool,
    born_ns: u64,
    /// Bumped on every removal, so stale references can be told apart.
    generation: u32,
    live: bool,
}

/// A reference to a slot that survives the slot being reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotRef {
    pub index: u32,
    pub generation: u32,
}

impl SlotRef {
    pub const NONE: SlotRef = SlotRef {
        index: NIL,
        generation: 0,
    };
}

/// No slot: a default reference must never name a live one.
impl Default for SlotRef {
    fn default() -> Self {
        SlotRef::NONE
    }
}

pub struct Table<K, T> {
    slots: Vec<Slot<K, T>>,
    free: Vec<u32>,
    index: FastMap<K, Chain>,
    age_head: u32,
    age_tail: u32,
    live: usize,
    cap: usize,
    /// The generation new slots start at: past every generation a slot
    /// dropped by [`Table::shrink_idle`] had, so references into it stay stale.
    generation_floor: u32,
}

impl<K: Copy + Eq + Hash, T: Default> Table<K, T> {
    /// A table holding at most `cap` entries, with room for `reserve` up front.
    /// The key index starts small and grows with what is in flight: a lookup
    /// in an index sized for the reserve touches a random line of a few
    /// hundred KiB, a cache miss per lookup (docs/benchmarks.md, "Changes").
    pub fn new(cap: usize, reserve: usize) -> Self {
        let cap = cap.clamp(1, NIL as usize - 1);
        let reserve = reserve.min(cap);
        Table {
            slots: Vec::with_capacity(reserve),
            free: Vec::with_capacity(reserve),
            index: FastMap::with_capacity_and_hasher(INDEX_START.min(reserve), Default::default()),
            age_head: NIL,
            age_tail: NIL,
            live: 0,
            cap,
            generation_floor: 0,
        }
    }

    /// Gives back what a past burst grew: with nothing live, slots beyond
    /// `keep` (and the index's room) are freed, so memory follows what is in
    /// flight rather than the deepest burst ever seen. True if it shrank.
    pub fn shrink_idle(&mut self, keep: usize) -> bool {
        if self.live != 0 || self.slots.len() <= keep {
            return false;
        }
        if let Some(highest) = self.slots[keep..].iter().map(|slot| slot.generation).max() {
            self.generation_floor = self.generation_floor.max(highest.saturating_add(1));
        }
        self.slots.truncate(keep);
        self.slots.shrink_to(keep);
        // Every kept slot is free; hand out the lowest first.
        self.free.clear();
        self.free.extend((0..keep as u32).rev());
        self.free.shrink_to(keep);
        self.index.clear();
        self.index.shrink_to(keep);
        true
    }

    pub fn len(&self) -> usize {
        self.live
    }

    /// Slots ever allocated: stays at the peak in-flight count once warm.
    #[cfg(test)]
    pub fn allocated(&self) -> usize {
        self.slots.len()
    }

    pub fn is_full(&self) -> bool {
        self.live >= self.cap
    }

    /// Stores `value`, indexed under `key` (at the tail of its chain) and on
    /// the age list if `aged`. `None` when the table is full.
    #[inline]
    pub fn insert(&mut self, value: T, key: Option<K>, born_ns: u64, aged: bool) -> Option<u32> {
        if self.is_full() {
            return None;
        }
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                let index = u32::try_from(self.slots.len()).ok()?;
                self.slots.push(Slot {
                    value: T::default(),
                    key: None,
                    chain_next: NIL,
                    age_prev: NIL,
                    age_next: NIL,
                    in_age_list: false,
                    born_ns: 0,
                    generation: self.generation_floor,
                    live: false,
                });
                index
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.value = value;
        slot.key = None;
        slot.chain_next = NIL;
        slot.in_age_list = false;
        slot.born_ns = born_ns;
        slot.live = true;
        self.live += 1;
        if let Some(key) = key {
            self.link_key(index, key);
        }
        if aged {
            self.link_age(index);
        }
        Some(index)
    }

    pub fn get(&self, index: u32) -> Option<&T> {
        self.slots
            .get(index as usize)
            .filter(|slot| slot.live)
            .map(|slot| &slot.value)
    }

    pub fn get_mut(&mut self, index: u32) -> Option<&mut T> {
        self.slots
            .get_mut(index as usize)
            .filter(|slot| slot.live)
            .map(|slot| &mut slot.value)
    }

    pub fn slot_ref(&self, index: u32) -> SlotRef {
        match self.slots.get(index as usize) {
            Some(slot) if slot.live => SlotRef {
                index,
                generation: slot.generation,
            },
            _ => SlotRef::NONE,
        }
    }

    /// The live entry `reference` points to, if it was not removed since.
    pub fn resolve(&self, reference: SlotRef) -> Option<u32> {
        match self.slots.get(reference.index as usize) {
            Some(slot) if slot.live && slot.generation == reference.generation => {
                Some(reference.index)
            }
            _ => None,
        }
    }

    /// Every live entry, in slot order.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.slots
            .iter()
            .filter(|slot| slot.live)
            .map(|slot| &slot.value)
    }

    /// Every live entry, in slot order.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots
            .iter_mut()
            .filter(|slot| slot.live)
            .map(|slot| &mut slot.value)
    }

    /// The oldest entry on the age list, with its birth time.
    pub fn oldest(&self) -> Option<(u32, u64)> {
        if self.age_head == NIL {
            return None;
        }
        Some((self.age_head, self.slots[self.age_head as usize].born_ns))
    }

    /// The first entry under `key`, in insertion order, that `accept`s.
    pub fn find(&self, key: &K, mut accept: impl FnMut(&T) -> bool) -> Option<u32> {
        let chain = self.index.get(key)?;
        let mut cursor = chain.head;
        while cursor != NIL {
            let slot = &self.slots[cursor as usize];
            if accept(&slot.value) {
                return Some(cursor);
            }
            cursor = slot.chain_next;
        }
        None
    }

    /// Moves the entry to the tail of `key`'s chain, or out of the index.
    pub fn set_key(&mut self, index: u32, key: Option<K>) {
        if self.get(index).is_none() {
            return;
        }
        self.unlink_key(index);
        if let Some(key) = key {
            self.link_key(index, key);
        }
    }

    /// Puts the entry on the age list (at the tail) or takes it off.
    pub fn set_aged(&mut self, index: u32, aged: bool) {
        let Some(slot) = self.slots.get(index as usize) else {
            return;
        };
        if !slot.live || slot.in_age_list == aged {
            return;
        }
        if aged {
            self.link_age(index);
        } else {
            self.unlink_age(index);
        }
    }

    /// Removes the entry and returns its value.
    pub fn remove(&mut self, index: u32) -> Option<T> {
        self.get(index)?;
        self.unlink_key(index);
        self.unlink_age(index);
        let slot = &mut self.slots[index as usize];
        slot.live = false;
        slot.generation = slot.generation.wrapping_add(1);
        let value = std::mem::take(&mut slot.value);
        self.live -= 1;
        self.free.push(index);
        Some(value)
    }

    fn link_key(&mut self, index: u32, key: K) {
        self.slots[index as usize].key = Some(key);
        self.slots[index as usize].chain_next = NIL;
        match self.index.get_mut(&key) {
            Some(chain) => {
                let tail = chain.tail;
                chain.tail = index;
                self.slots[tail as usize].chain_next = index;
            }
            None => {
                self.index.insert(
                    key,
                    Chain {
                        head: index,
                        tail: index,
                    },
                );
            }
        }
    }

    fn unlink_key(&mut self, index: u32) {
        let Some(key) = self.slots[index as usize].key.take() else {
            return;
        };
        let next = self.slots[index as usize].chain_next;
        self.slots[index as usize].chain_next = NIL;
        let Some(chain) = self.index.get_mut(&key) else {
            return;
        };
        if chain.head == index {
            if next == NIL {
                self.index.remove(&key);
            } else {
                chain.head = next;
            }
            return;
        }
        // Chains hold concurrent I/O to the same sector: short, walk them.
        let mut cursor = chain.head;
        while cursor != NIL {
            let following = self.slots[cursor as usize].chain_next;
            if following == index {
                self.slots[cursor as usize].chain_next = next;
                if chain.tail == index {
                    chain.tail = cursor;
                }
                return;
            }
            cursor = following;
        }
    }

    fn link_age(&mut self, index: u32) {
        let tail = self.age_tail;
        let slot = &mut self.slots[index as usize];
        slot.in_age_list = true;
        slot.age_prev = tail;
        slot.age_next = NIL;
        if tail == NIL {
            self.age_head = index;
        } else {
            self.slots[tail as usize].age_next = index;
        }
        self.age_tail = index;
    }

    fn unlink_age(&mut self, index: u32) {
        let slot = &mut self.slots[index as usize];
        if !slot.in_age_list {
            return;
        }
        slot.in_age_list = false;
        let (prev, next) = (slot.age_prev, slot.age_next);
        slot.age_prev = NIL;
        slot.age_next = NIL;
        if prev == NIL {
            self.age_head = next;
        } else {
            self.slots[prev as usize].age_next = next;
        }
        if next == NIL {
            self.age_tail = prev;
        } else {
            self.slots[next as usize].age_prev = prev;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_keys_come_out_first_in_first_out() {
        let mut table: Table<u64, u32> = Table::new(8, 8);
        let first = table.insert(1, Some(7), 10, true).unwrap();
        let second = table.insert(2, Some(7), 20, true).unwrap();
        let third = table.insert(3, Some(7), 30, true).unwrap();
        assert_eq!(table.find(&7, |_| true), Some(first));
        assert_eq!(table.find(&7, |value| *value >= 2), Some(second));
        table.remove(first);
        assert_eq!(table.find(&7, |_| true), Some(second));
        // Removing from the middle keeps the tail right for later inserts.
        table.remove(third);
        let fourth = table.insert(4, Some(7), 40, true).unwrap();
        assert_eq!(table.find(&7, |value| *value == 4), Some(fourth));
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn an_idle_table_gives_back_a_burst_and_old_references_stay_stale() {
        let mut table: Table<u32, u32> = Table::new(1000, 4);
        let burst: Vec<SlotRef> = (0..100)
            .map(|n| {
                let index = table.insert(n, Some(n), 0, true).unwrap();
                table.slot_ref(index)
            })
            .collect();
        // Not while anything is live.
        assert!(!table.shrink_idle(4));
        for reference in &burst {
            table.remove(reference.index);
        }
        assert_eq!(table.allocated(), 100);
        assert!(table.shrink_idle(4));
        assert_eq!(table.allocated(), 4);
        assert!(table.slots.capacity() < 100, "{}", table.slots.capacity());
        assert!(!table.shrink_idle(4), "nothing more to give back");
        // Grown again, the slots at the burst's indices are new entries.
        for n in 0..100 {
            table.insert(1000 + n, Some(n), 0, true).unwrap();
        }
        assert_eq!(table.len(), 100);
        for reference in &burst {
            assert_eq!(table.resolve(*reference), None, "{reference:?}");
        }
        assert_eq!(
            table.find(&7, |_| true).map(|i| table.get(i).copied()),
            Some(Some(1007))
        );
        assert_eq!(
            table.oldest().map(|(i, _)| table.get(i).copied()),
            Some(Some(1000))
        );
    }

    #[test]
    fn age_list_is_oldest_first_and_skips_unaged() {
        let mut table: Table<u64, u32> = Table::new(8, 0);
        let a = table.insert(1, None, 10, true).unwrap();
        let b = table.insert(2, None, 20, false).unwrap();
        let c = table.insert(3, None, 30, true).unwrap();
        assert_eq!(table.oldest(), Some((a, 10)));
        table.remove(a);
        assert_eq!(table.oldest(), Some((c, 30)));
        table.set_aged(b, true);
        table.set_aged(c, false);
        assert_eq!(table.oldest(), Some((b, 20)));
        table.remove(b);
        assert_eq!(table.oldest(), None);
    }

    #[test]
    fn full_table_refuses_and_reuses_freed_slots() {
        let mut table: Table<u64, u32> = Table::new(2, 2);
        let a = table.insert(1, Some(1), 0, true).unwrap();
        table.insert(2, Some(2), 0, true).unwrap();
        assert!(table.is_full());
        assert_eq!(table.insert(3, None, 0, false), None);
        let stale = table.slot_ref(a);
        table.remove(a);
        let reused = table.insert(4, Some(1), 0, true).unwrap();
        assert_eq!(reused, a);
        assert_eq!(table.resolve(stale), None);
        assert_eq!(table.resolve(table.slot_ref(reused)), Some(reused));
        assert_eq!(table.get(reused), Some(&4));
    }

    #[test]
    fn rekeying_moves_between_chains() {
        let mut table: Table<u64, u32> = Table::new(4, 4);
        let a = table.insert(1, Some(5), 0, false).unwrap();
        table.set_key(a, Some(9));
        assert_eq!(table.find(&5, |_| true), None);
        assert_eq!(table.find(&9, |_| true), Some(a));
        table.set_key(a, None);
        assert_eq!(table.find(&9, |_| true), None);
        assert_eq!(table.remove(a), Some(1));
        assert_eq!(table.remove(a), None);
    }
}
