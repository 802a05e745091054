//! A small least-recently-used map: what bounds brigade's kernel and program caches.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// A map that holds at most `capacity` entries, evicting the least recently used one on insert.
/// `get` counts as a use. Lookup and insert cost O(log n).
pub(crate) struct Lru<K, V> {
    map: HashMap<K, (V, u64)>,
    /// Entries by last use.
    order: BTreeMap<u64, K>,
    tick: u64,
    capacity: usize,
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    /// An empty cache of at most `capacity` entries (at least 1).
    pub(crate) fn new(capacity: usize) -> Lru<K, V> {
        Lru {
            map: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
            capacity: capacity.max(1),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The entry for `k`, marked as just used.
    pub(crate) fn get<Q>(&mut self, k: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (_, used) = self.map.get_mut(k)?;
        self.tick += 1;
        let key = self
            .order
            .remove(used)
            .expect("every entry is in the order");
        *used = self.tick;
        self.order.insert(self.tick, key);
        self.map.get(k).map(|(v, _)| v)
    }

    /// Insert (or replace) `k`, then evict the least recently used entries beyond the capacity.
    /// Returns the evicted values (dropped by the caller, outside any lock it holds).
    pub(crate) fn insert(&mut self, k: K, v: V) -> Vec<V> {
        self.tick += 1;
        if let Some((_, used)) = self.map.insert(k.clone(), (v, self.tick)) {
            self.order.remove(&used);
        }
        self.order.insert(self.tick, k);
        self.shrink_to(self.capacity)
    }

    /// Change the capacity (at least 1), evicting what no longer fits.
    pub(crate) fn set_capacity(&mut self, capacity: usize) -> Vec<V> {
        self.capacity = capacity.max(1);
        self.shrink_to(self.capacity)
    }

    fn shrink_to(&mut self, n: usize) -> Vec<V> {
        let mut out = Vec::new();
        while self.map.len() > n {
            let Some((_, k)) = self.order.pop_first() else {
                break;
            };
            if let Some((v, _)) = self.map.remove(&k) {
                out.push(v);
            }
        }
        out
    }

    /// Remove the entry for `k`, returning its value.
    pub(crate) fn remove<Q>(&mut self, k: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (v, used) = self.map.remove(k)?;
        self.order.remove(&used);
        Some(v)
    }

    /// Remove every entry, returning the values.
    pub(crate) fn drain(&mut self) -> Vec<V> {
        self.order.clear();
        self.map.drain().map(|(_, (v, _))| v).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Lru;

    #[test]
    fn evicts_least_recently_used() {
        let mut c: Lru<u32, &str> = Lru::new(2);
        assert!(c.insert(1, "a").is_empty());
        assert!(c.insert(2, "b").is_empty());
        // Using 1 makes 2 the oldest.
        assert_eq!(c.get(&1), Some(&"a"));
        assert_eq!(c.insert(3, "c"), vec!["b"]);
        assert_eq!(c.len(), 2);
        assert!(c.get(&2).is_none());
        // Replacing a key evicts nothing.
        assert!(c.insert(3, "c2").is_empty());
        assert_eq!(c.get(&3), Some(&"c2"));
        assert_eq!(c.set_capacity(1), vec!["a"]);
        assert_eq!(c.drain(), vec!["c2"]);
        assert_eq!(c.len(), 0);
        // A capacity of 0 means 1.
        let mut z: Lru<u8, u8> = Lru::new(0);
        z.insert(1, 1);
        assert_eq!(z.insert(2, 2), vec![1]);
    }
}
