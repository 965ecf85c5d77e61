//! The events' view of which member holds which block key: the Python `PrefixIndex`'s
//! behaviour for the part of it that precise mode feeds from engines' events (record, remove,
//! forget) and asks at every decision (matches, matched, size), in compiled code.
//!
//! Two views of one set of facts, kept equal on every change, as in the Python index: per
//! member an LRU of the keys it holds (capped; the oldest go first), and per key its holders.
//! Holders are compared by value here, where the Python index compares shared objects by
//! identity: for a prompt whose holders shrink along its keys (a member holding a block holds
//! the blocks before it) both walks meet the same members; tests compare them on such data.

use crate::lru::Lru;
use hashlink::LinkedHashMap;
use pyo3::exceptions::PyAssertionError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFrozenSet};
use rustc_hash::FxBuildHasher;
use std::collections::hash_map::Entry;
use std::collections::HashMap;

type FxMap<K, V> = HashMap<K, V, FxBuildHasher>;

/// The members holding one key: most keys (a conversation's own history) have one.
#[derive(Clone, PartialEq, Eq, Debug)]
enum Holders {
    One(u32),
    Many(Box<[u32]>), // sorted, at least two
}

impl Holders {
    fn with(current: Option<&Holders>, member: u32) -> Holders {
        match current {
            None => Holders::One(member),
            Some(Holders::One(m)) if *m == member => Holders::One(member),
            Some(Holders::One(m)) => {
                let mut both = [*m, member];
                both.sort_unstable();
                Holders::Many(Box::new(both))
            }
            Some(Holders::Many(ms)) => match ms.binary_search(&member) {
                Ok(_) => Holders::Many(ms.clone()),
                Err(at) => {
                    let mut more = ms.to_vec();
                    more.insert(at, member);
                    Holders::Many(more.into_boxed_slice())
                }
            },
        }
    }

    fn without(&self, member: u32) -> Option<Holders> {
        match self {
            Holders::One(m) if *m == member => None,
            Holders::One(_) => Some(self.clone()),
            Holders::Many(ms) => {
                let rest: Vec<u32> = ms.iter().copied().filter(|m| *m != member).collect();
                match rest.len() {
                    0 => None,
                    1 => Some(Holders::One(rest[0])),
                    _ => Some(Holders::Many(rest.into_boxed_slice())),
                }
            }
        }
    }

    fn members(&self) -> &[u32] {
        match self {
            Holders::One(m) => std::slice::from_ref(m),
            Holders::Many(ms) => ms,
        }
    }
}

type Held = Lru<()>; // a member's keys, least recently used first

fn leading_held(held: &Held, blocks: &[u64]) -> usize {
    blocks.iter().take_while(|b| held.contains(b)).count()
}

/// Block key -> members holding it, over a capped LRU per member (`PrefixIndex`'s interface).
#[pyclass(module = "prefixroute_native")]
pub struct NativeIndex {
    #[pyo3(get)]
    capacity_per_member: usize,
    ids: HashMap<String, u32>, // members holding something (pods come and go: ids are reused)
    names: Vec<String>,
    free: Vec<u32>,
    members: LinkedHashMap<u32, Held>, // only members holding something, in order of arrival
    holders: FxMap<u64, Holders>,
}

impl NativeIndex {
    fn id(&mut self, name: &str) -> u32 {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = match self.free.pop() {
            Some(id) => {
                self.names[id as usize] = name.to_owned();
                id
            }
            None => {
                self.names.push(name.to_owned());
                (self.names.len() - 1) as u32
            }
        };
        self.ids.insert(name.to_owned(), id);
        id
    }

    /// A member that holds nothing any more gives its id back (no key's holders name it).
    fn release(&mut self, id: u32) {
        let name = std::mem::take(&mut self.names[id as usize]);
        self.ids.remove(&name);
        self.free.push(id);
    }

    fn drop_holder(holders: &mut FxMap<u64, Holders>, block: u64, member: u32) {
        if let Entry::Occupied(mut entry) = holders.entry(block) {
            match entry.get().without(member) {
                None => {
                    entry.remove();
                }
                Some(rest) => {
                    entry.insert(rest);
                }
            }
        }
    }
}

#[pymethods]
impl NativeIndex {
    #[new]
    fn new(capacity_per_member: usize) -> PyResult<Self> {
        if capacity_per_member == 0 {
            return Err(pyo3::exceptions::PyValueError::new_err("capacity must be positive"));
        }
        Ok(Self {
            capacity_per_member,
            ids: HashMap::new(),
            names: Vec::new(),
            free: Vec::new(),
            members: LinkedHashMap::new(),
            holders: FxMap::default(),
        })
    }

    /// `member` holds `blocks` now, as its most recently used; beyond the cap its least recent
    /// go. (`held_prefix` is the Python index's hint; the walk here needs none.)
    #[pyo3(signature = (member, blocks, held_prefix = None))]
    fn record(&mut self, member: &str, blocks: Vec<u64>, held_prefix: Option<usize>) {
        let _ = held_prefix;
        if blocks.is_empty() {
            return;
        }
        let id = self.id(member);
        let cap = self.capacity_per_member;
        let holders = &mut self.holders;
        if !self.members.contains_key(&id) {
            self.members.insert(id, Held::new()); // a newcomer goes last
        }
        let Some(held) = self.members.get_mut(&id) else { return };
        for block in blocks {
            if held.insert_back(block, ()) {
                continue; // held already: now the most recent
            }
            match holders.entry(block) {
                Entry::Vacant(entry) => {
                    entry.insert(Holders::One(id));
                }
                Entry::Occupied(mut entry) => {
                    let next = Holders::with(Some(entry.get()), id);
                    entry.insert(next);
                }
            }
        }
        while held.len() > cap {
            if let Some((oldest, ())) = held.pop_front() {
                Self::drop_holder(holders, oldest, id);
            }
        }
    }

    /// `member` no longer holds `blocks` (its engine evicted them).
    fn remove(&mut self, member: &str, blocks: Vec<u64>) {
        let Some(&id) = self.ids.get(member) else { return };
        let Some(held) = self.members.get_mut(&id) else { return };
        for block in blocks {
            if held.remove(&block).is_some() {
                Self::drop_holder(&mut self.holders, block, id);
            }
        }
        if held.is_empty() {
            self.members.remove(&id);
            self.release(id);
        }
    }

    /// `member` holds nothing any more (it left, restarted or cleared its cache).
    fn forget(&mut self, member: &str) {
        let Some(&id) = self.ids.get(member) else { return };
        if let Some(held) = self.members.remove(&id) {
            for (block, ()) in held.iter() {
                Self::drop_holder(&mut self.holders, block, id);
            }
            self.release(id);
        }
    }

    /// Leading blocks of `blocks` that `member` holds.
    fn matched(&self, member: &str, blocks: Vec<u64>) -> usize {
        self.ids
            .get(member)
            .and_then(|id| self.members.get(id))
            .map_or(0, |held| leading_held(held, &blocks))
    }

    /// The members holding `block`.
    fn holders<'py>(&self, py: Python<'py>, block: u64) -> PyResult<Bound<'py, PyFrozenSet>> {
        let names: Vec<&str> = self
            .holders
            .get(&block)
            .map(|h| h.members().iter().map(|id| self.names[*id as usize].as_str()).collect())
            .unwrap_or_default();
        PyFrozenSet::new(py, &names)
    }

    /// {member: leading blocks of `blocks` it holds, when at least one} for the members holding
    /// the deepest of them, walked from the last key one run of equal holders at a time (the
    /// run's start found by bisection), stopping before a run that would bring the count over
    /// `limit` (the Python `PrefixIndex.matches`).
    #[pyo3(signature = (blocks, limit = None))]
    fn matches<'py>(&self, py: Python<'py>, blocks: Vec<u64>, limit: Option<usize>) -> PyResult<Bound<'py, PyDict>> {
        let mut found: Vec<(u32, usize)> = Vec::new();
        let mut met: Vec<u32> = Vec::new(); // members looked at (found or matching nothing)
        let cap = limit.unwrap_or(self.members.len());
        let mut end = blocks.len() as isize - 1;
        while end >= 0 {
            let current = self.holders.get(&blocks[end as usize]);
            let mut fresh: Vec<u32> = Vec::new();
            if let Some(h) = current {
                let ms = h.members();
                let new: Vec<u32> = ms.iter().copied().filter(|m| !found.iter().any(|(f, _)| f == m)).collect();
                if !new.is_empty() {
                    if ms.len() > 1 && ms.len() > cap {
                        break;
                    }
                    if found.len() + new.len() > cap {
                        break;
                    }
                    fresh = new;
                }
            }
            let (mut low, mut high) = (0usize, end as usize);
            while low < high {
                let middle = (low + high) / 2;
                if self.holders.get(&blocks[middle]) == current {
                    high = middle;
                } else {
                    low = middle + 1;
                }
            }
            end = low as isize - 1;
            for member in fresh {
                if met.contains(&member) {
                    continue;
                }
                met.push(member);
                let matched = self.members.get(&member).map_or(0, |held| leading_held(held, &blocks));
                if matched > 0 {
                    found.push((member, matched));
                }
            }
        }
        let out = PyDict::new(py);
        for (member, matched) in found {
            out.set_item(&self.names[member as usize], matched)?;
        }
        Ok(out)
    }

    /// Blocks held for one member, or for all of them.
    #[pyo3(signature = (member = None))]
    fn size(&self, member: Option<&str>) -> usize {
        match member {
            Some(name) => self.ids.get(name).and_then(|id| self.members.get(id)).map_or(0, |h| h.len()),
            None => self.members.values().map(|h| h.len()).sum(),
        }
    }

    /// Blocks held per member, in the members' order of arrival (as the Python index's dict).
    fn sizes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for (id, held) in self.members.iter() {
            out.set_item(&self.names[*id as usize], held.len())?;
        }
        Ok(out)
    }

    fn members(&self) -> Vec<String> {
        self.members.keys().map(|id| self.names[*id as usize].clone()).collect()
    }

    /// Heap memory in bytes, estimated from the layout (Python's tracemalloc does not see it):
    /// every member's LRU, the holders table, and the member lists of keys held by several.
    fn heap_bytes(&self) -> usize {
        let members: usize = self.members.values().map(Lru::heap_bytes).sum();
        let buckets = (self.holders.capacity() * 8 / 7).next_power_of_two();
        let table = buckets * (std::mem::size_of::<(u64, Holders)>() + 1);
        let lists: usize = self
            .holders
            .values()
            .map(|h| match h {
                Holders::One(_) => 0,
                Holders::Many(ms) => (ms.len() * 4).next_multiple_of(16) + 16, // glibc's chunk
            })
            .sum();
        members + table + lists
    }

    fn distinct_blocks(&self) -> usize {
        self.holders.len()
    }

    /// Raise AssertionError unless the key -> holders map equals a recount of the members'
    /// LRUs and no LRU is over its cap or empty.
    fn check(&self) -> PyResult<()> {
        if self.ids.len() != self.members.len() {
            return Err(PyAssertionError::new_err("a member id outlived the member's last block"));
        }
        let mut recount: HashMap<u64, Vec<u32>> = HashMap::new();
        for (id, held) in self.members.iter() {
            if held.is_empty() || held.len() > self.capacity_per_member {
                return Err(PyAssertionError::new_err(format!(
                    "{} holds {} blocks",
                    self.names[*id as usize],
                    held.len()
                )));
            }
            for (block, ()) in held.iter() {
                recount.entry(block).or_default().push(*id);
            }
        }
        if recount.len() != self.holders.len() {
            return Err(PyAssertionError::new_err("the key -> holders map disagrees with the members' LRUs"));
        }
        for (block, mut ids) in recount {
            ids.sort_unstable();
            let stored = self.holders.get(&block).map(|h| h.members().to_vec());
            if stored.as_deref() != Some(&ids[..]) {
                return Err(PyAssertionError::new_err("the key -> holders map disagrees with the members' LRUs"));
            }
        }
        Ok(())
    }
}
