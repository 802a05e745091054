//! A small least-recently-used map: what bounds brigade's kernel and program caches; and
//! [`SyncLru`], the same map behind a lock, shared by the threads that call one compiled program.
//!
//! Locking rule of every program cache (jit, pmap, vmap, grad, the per-device programs of an
//! executable): the lock is held only to look up, insert or evict, never while tracing, compiling
//! or running (all three can re-enter a cache of the same program: nested transforms, pmap loop
//! bodies, user code that takes its own locks), and never while taking another lock. A cache lock
//! is therefore always the innermost lock a thread holds, so it cannot be part of a deadlock, with
//! brigade's GL lock or any other.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};

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

/// Lock `m`, ignoring poisoning: brigade runs no user code under its cache locks, so a thread
/// that panicked did so between map operations and the data is consistent; other threads go on.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An [`Lru`] shared between threads: every method takes the lock, does one map operation and
/// releases it (values come out cloned, evicted ones are returned to be dropped by the caller
/// after the lock is released), so no caller can hold the lock while it does anything else.
///
/// Two threads that miss on the same key both build the value (tracing and compiling are not done
/// under the lock); [`SyncLru::insert_or_keep`] then keeps the first one so every caller ends up
/// with the same shared value. A per-key "compiling" marker that others wait on was rejected: the
/// waiting thread could hold a lock the compiling one needs (the GL lock, a lock the user's traced
/// function takes), and a re-entrant compile of the same key on the same thread would wait on
/// itself. A rare duplicate trace is cheaper than a deadlock; kernels are deduplicated by the
/// device's kernel cache anyway.
pub(crate) struct SyncLru<K, V>(Mutex<Lru<K, V>>);

impl<K: Hash + Eq + Clone, V: Clone> SyncLru<K, V> {
    /// An empty cache of at most `capacity` entries (at least 1).
    pub(crate) fn new(capacity: usize) -> SyncLru<K, V> {
        SyncLru(Mutex::new(Lru::new(capacity)))
    }

    fn map(&self) -> MutexGuard<'_, Lru<K, V>> {
        lock(&self.0)
    }

    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }

    /// A clone of the entry for `k`, marked as just used.
    pub(crate) fn get<Q>(&self, k: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map().get(k).cloned()
    }

    /// Insert `v` for `k` unless an entry `keep` accepts is already there (another thread built it
    /// meanwhile); with `capacity` given, first bound the cache to it. Returns the value now in
    /// the cache for `k`; the caller drops the rest (evicted entries, and the duplicate or the
    /// stale entry replaced) after this returns, outside the lock: dropping a program can free
    /// device memory, which takes device locks.
    pub(crate) fn insert_or_keep(
        &self,
        k: K,
        v: V,
        capacity: Option<usize>,
        keep: impl Fn(&V) -> bool,
    ) -> Inserted<V> {
        let mut map = self.map();
        let evicted = match capacity {
            Some(n) => map.set_capacity(n),
            None => Vec::new(),
        };
        if let Some(old) = map.get(&k) {
            if keep(old) {
                return Inserted {
                    value: old.clone(),
                    evicted,
                    spare: Some(v),
                };
            }
        }
        let spare = map.remove(&k);
        let mut evicted = evicted;
        evicted.extend(map.insert(k, v.clone()));
        Inserted {
            value: v,
            evicted,
            spare,
        }
    }
}

/// What [`SyncLru::insert_or_keep`] did.
pub(crate) struct Inserted<V> {
    /// The value in the cache for the key.
    pub(crate) value: V,
    /// Entries evicted to make room (counted as evictions by program caches).
    pub(crate) evicted: Vec<V>,
    /// The value that lost: the caller's duplicate, or the stale entry it replaced. Never read,
    /// only held so that it is dropped by the caller, after the lock is released.
    #[allow(dead_code)]
    pub(crate) spare: Option<V>,
}

#[cfg(test)]
mod tests {
    use super::{Lru, SyncLru};

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

    #[test]
    fn shared_cache_keeps_the_first_value() {
        let c: SyncLru<u32, &str> = SyncLru::new(2);
        let r = c.insert_or_keep(1, "first", None, |_| true);
        assert_eq!((r.value, r.evicted, r.spare), ("first", vec![], None));
        // A second thread's duplicate is handed back for dropping; the first value stays.
        let r = c.insert_or_keep(1, "second", None, |_| true);
        assert_eq!(
            (r.value, r.evicted, r.spare),
            ("first", vec![], Some("second"))
        );
        // A stale entry (rejected by `keep`) is replaced, and handed back.
        let r = c.insert_or_keep(1, "fresh", None, |_| false);
        assert_eq!(
            (r.value, r.evicted, r.spare),
            ("fresh", vec![], Some("first"))
        );
        assert_eq!(c.get(&1), Some("fresh"));
        c.insert_or_keep(2, "b", None, |_| true);
        // Reading 1 makes 2 the least recently used: shrinking to 1 evicts 2, inserting 3 then 1.
        assert_eq!(c.get(&1), Some("fresh"));
        let r = c.insert_or_keep(3, "c", Some(1), |_| true);
        assert_eq!(
            (r.value, r.evicted, r.spare),
            ("c", vec!["b", "fresh"], None)
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c.get(&3), Some("c"));
    }
}
