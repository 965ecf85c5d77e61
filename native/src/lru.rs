//! An insertion-ordered map of 64-bit keys without an allocation per entry: the order is a
//! queue of (key, stamp) beside the map, and an entry removed or moved leaves its old place in
//! the queue behind as a stale record (its stamp no longer the map's), skipped when met and
//! dropped when stale records outnumber live ones. A linked map's node per entry cost an
//! allocation on every stored block and a free on every removed one.

use rustc_hash::FxBuildHasher;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};

pub struct Lru<V> {
    map: HashMap<u64, (V, u64), FxBuildHasher>,
    order: VecDeque<(u64, u64)>, // oldest first, stale records included
    next: u64,
}

impl<V: Copy> Lru<V> {
    pub fn new() -> Self {
        Self { map: HashMap::with_hasher(FxBuildHasher), order: VecDeque::new(), next: 0 }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn get(&self, key: &u64) -> Option<V> {
        self.map.get(key).map(|(v, _)| *v)
    }

    pub fn contains(&self, key: &u64) -> bool {
        self.map.contains_key(key)
    }

    fn stamp(&mut self, key: u64) -> u64 {
        let stamp = self.next;
        self.next += 1;
        self.order.push_back((key, stamp));
        stamp
    }

    /// Insert as the newest, or make a held key the newest (with this value). True when held.
    pub fn insert_back(&mut self, key: u64, value: V) -> bool {
        let stamp = self.stamp(key);
        let held = match self.map.entry(key) {
            Entry::Occupied(mut e) => {
                *e.get_mut() = (value, stamp);
                true
            }
            Entry::Vacant(e) => {
                e.insert((value, stamp));
                false
            }
        };
        self.compact();
        held
    }

    /// Insert as the newest, or give a held key this value where it is.
    pub fn replace(&mut self, key: u64, value: V) {
        match self.map.entry(key) {
            Entry::Occupied(mut e) => e.get_mut().0 = value,
            Entry::Vacant(e) => {
                let stamp = self.next;
                self.next += 1;
                self.order.push_back((key, stamp));
                e.insert((value, stamp));
            }
        }
    }

    pub fn remove(&mut self, key: &u64) -> Option<V> {
        let removed = self.map.remove(key).map(|(v, _)| v);
        if removed.is_some() {
            self.compact();
        }
        removed
    }

    /// The oldest entry, removed.
    pub fn pop_front(&mut self) -> Option<(u64, V)> {
        while let Some((key, stamp)) = self.order.pop_front() {
            if let Entry::Occupied(e) = self.map.entry(key) {
                if e.get().1 == stamp {
                    return Some((key, e.remove().0));
                }
            }
        }
        None
    }

    pub fn clear(&mut self) {
        self.map.clear();
        self.order.clear();
    }

    /// Live entries, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = (u64, V)> + '_ {
        self.order.iter().filter_map(|(key, stamp)| match self.map.get(key) {
            Some((value, s)) if s == stamp => Some((*key, *value)),
            _ => None,
        })
    }

    /// Bytes on the heap: the map's table and the queue's buffer.
    pub fn heap_bytes(&self) -> usize {
        let buckets = (self.map.capacity() * 8 / 7).next_power_of_two();
        buckets * (std::mem::size_of::<(u64, (V, u64))>() + 1) + self.order.capacity() * 16
    }

    fn compact(&mut self) {
        if self.order.len() > 2 * self.map.len() + 64 {
            let map = &self.map;
            self.order.retain(|(key, stamp)| matches!(map.get(key), Some((_, s)) if s == stamp));
        }
    }
}
