//! A bounded read cache in front of the state database, for the namespace's
//! hottest reads (inode records, directory entries, an inode's names).
//!
//! Why: a point read of fjall takes a snapshot and searches the memtable's
//! skip list and every segment, 1–3 µs each; a create, stat and unlink
//! through the mount made some fifteen of them, about 14 µs of the
//! daemon's 49 µs per round (perf, userspace mode).
//!
//! Coherence: only the writer of the database (`Namespace::commit`) changes
//! what is cached, and it drops every key it wrote after applying the batch
//! and before it returns. A reader that missed fills the cache with what it
//! read only if no writer dropped a key of the same stripe since the miss
//! (each drop moves the stripe's generation): a value read before a commit
//! can never be put back after the commit dropped it. So once a commit has
//! returned, every read sees it. While a commit is in flight (applied, its
//! keys not dropped yet) one reader can read the new value from the
//! database while a later one still gets the old one from the cache; the
//! writers of a key hold the locks its readers need for anything that
//! depends on the answer (a directory's stripe, an inode's lock).
//!
//! Bounded: a stripe that reaches its share of the capacity is emptied
//! (what is hot comes back with the next miss).

use crate::error::Result;
use parking_lot::Mutex;
use rustc_hash::FxHasher;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// Stripes of a cache: two request threads rarely want the same one.
const STRIPES: usize = 64;

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// One stripe: its entries and how many drops it has seen.
struct Stripe<K, V> {
    gen: u64,
    map: FxMap<K, V>,
}

/// A cache of `K` → `V` filled by readers and emptied by the writer.
pub(crate) struct ReadCache<K, V> {
    stripes: Box<[Mutex<Stripe<K, V>>]>,
    /// Entries a stripe holds at most.
    stripe_cap: usize,
}

impl<K: Hash + Eq, V: Clone> ReadCache<K, V> {
    /// A cache of about `capacity` entries.
    pub(crate) fn new(capacity: usize) -> Self {
        let stripes = (0..STRIPES).map(|_| Mutex::new(Stripe { gen: 0, map: FxMap::default() })).collect();
        ReadCache { stripes, stripe_cap: capacity.div_ceil(STRIPES).max(1) }
    }

    fn stripe<Q: Hash + ?Sized>(&self, k: &Q) -> &Mutex<Stripe<K, V>> {
        let mut h = FxHasher::default();
        k.hash(&mut h);
        // Bits 14-19 of FxHash's product (it rotates by 26 at the end):
        // consecutive inode numbers spread evenly over the stripes.
        &self.stripes[(h.finish() >> 40) as usize % STRIPES]
    }

    /// The cached value of `k`, or what `read` returns (kept if no writer
    /// dropped anything of the stripe meanwhile). Errors are not kept.
    pub(crate) fn get_or_read<Q>(&self, k: &Q, read: impl FnOnce() -> Result<V>) -> Result<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.get_or_read_keeping(k, read, |_| true)
    }

    /// [`ReadCache::get_or_read`], keeping what was read only if `keep`
    /// says so (values too large to hold).
    pub(crate) fn get_or_read_keeping<Q>(
        &self,
        k: &Q,
        read: impl FnOnce() -> Result<V>,
        keep: impl FnOnce(&V) -> bool,
    ) -> Result<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let s = self.stripe(k);
        let gen = {
            let st = s.lock();
            if let Some(v) = st.map.get(k) {
                return Ok(v.clone());
            }
            st.gen
        };
        // Read without the stripe's lock: the database may be slow.
        let v = read()?;
        if !keep(&v) {
            return Ok(v);
        }
        let mut st = s.lock();
        if st.gen == gen {
            if st.map.len() >= self.stripe_cap {
                st.map.clear();
            }
            st.map.insert(k.to_owned(), v.clone());
        }
        Ok(v)
    }

    /// Drops `k` (after the database has it changed) and stops fills of
    /// its stripe that read before now.
    pub(crate) fn drop_key<Q>(&self, k: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut st = self.stripe(k).lock();
        st.gen += 1;
        st.map.remove(k);
    }

    /// Puts `v` as the value of `k` once the database has it, for a writer
    /// that no other writer of `k` can run beside (see [`super::ns::Batch::create`]).
    pub(crate) fn put(&self, k: K, v: V) {
        let mut st = self.stripe(&k).lock();
        st.gen += 1;
        if st.map.len() >= self.stripe_cap {
            st.map.clear();
        }
        st.map.insert(k, v);
    }

    /// How many entries are cached (for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.stripes.iter().map(|s| s.lock().map.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_value_read_before_a_drop_is_not_kept_after_it() {
        let c: ReadCache<u64, u64> = ReadCache::new(100);
        // The reader read 1; the writer changed it to 2 and dropped the key
        // before the reader could keep what it read.
        let v = c
            .get_or_read(&7, || {
                c.drop_key(&7);
                Ok(1)
            })
            .unwrap();
        assert_eq!(v, 1, "the reader gets what it read");
        assert_eq!(c.get_or_read(&7, || Ok(2)).unwrap(), 2, "but the cache did not keep it");
        assert_eq!(c.get_or_read(&7, || Ok(3)).unwrap(), 2, "what was read after the drop is kept");
    }

    #[test]
    fn errors_are_not_kept_and_a_full_stripe_is_emptied() {
        let c: ReadCache<u64, u64> = ReadCache::new(STRIPES * 2);
        assert!(c.get_or_read(&1, || Err(crate::error::Error::errno(libc::EIO))).is_err());
        assert_eq!(c.get_or_read(&1, || Ok(5)).unwrap(), 5);
        for k in 0..10_000u64 {
            c.get_or_read(&k, || Ok(k)).unwrap();
        }
        assert!(c.len() <= STRIPES * 2, "{} entries", c.len());
    }

    proptest! {
        /// Against a map as the database: after any sequence of reads and
        /// writes (each write applied, then its key dropped), every read
        /// answers what the database holds.
        #[test]
        fn reads_answer_the_database(ops in prop::collection::vec((0u64..20, prop::option::of(0u64..5)), 1..200)) {
            let db = parking_lot::Mutex::new(std::collections::HashMap::new());
            let c: ReadCache<u64, Option<u64>> = ReadCache::new(8);
            for (k, w) in ops {
                if let Some(v) = w {
                    db.lock().insert(k, v);
                    c.drop_key(&k);
                } else {
                    let got = c.get_or_read(&k, || Ok(db.lock().get(&k).copied())).unwrap();
                    prop_assert_eq!(got, db.lock().get(&k).copied());
                }
            }
        }
    }

    /// Writers and readers on four threads: a reader that starts after a
    /// write has returned never sees an older value.
    #[test]
    fn no_reader_sees_a_value_older_than_the_last_write_returned() {
        let db: Arc<Vec<AtomicU64>> = Arc::new((0..4).map(|_| AtomicU64::new(0)).collect());
        let done: Arc<Vec<AtomicU64>> = Arc::new((0..4).map(|_| AtomicU64::new(0)).collect());
        let c: Arc<ReadCache<u64, u64>> = Arc::new(ReadCache::new(64));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        let mut threads = Vec::new();
        for t in 0..2u64 {
            let (wdb, wdone, wc) = (db.clone(), done.clone(), c.clone());
            threads.push(std::thread::spawn(move || {
                let (db, done, c) = (wdb, wdone, wc);
                // Writer t owns keys t and t + 2: values only grow.
                let mut n = 0;
                while std::time::Instant::now() < deadline {
                    n += 1;
                    for k in [t, t + 2] {
                        db[k as usize].store(n, Ordering::SeqCst);
                        c.drop_key(&k);
                        done[k as usize].store(n, Ordering::SeqCst);
                    }
                }
            }));
            let (rdb, rdone, rc) = (db.clone(), done.clone(), c.clone());
            threads.push(std::thread::spawn(move || {
                let (db, done, c) = (rdb, rdone, rc);
                while std::time::Instant::now() < deadline {
                    for k in 0..4u64 {
                        let floor = done[k as usize].load(Ordering::SeqCst);
                        let v = c.get_or_read(&k, || Ok(db[k as usize].load(Ordering::SeqCst))).unwrap();
                        assert!(v >= floor, "key {k}: read {v} after write {floor} had returned");
                    }
                }
            }));
        }
        for t in threads {
            t.join().unwrap();
        }
    }
}
