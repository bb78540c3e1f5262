//! Persistent state: a small key-value interface ([`Kv`]) with a sled
//! backend for real mounts and an in-memory backend that simulates crashes,
//! and the typed namespace and journal records on top of it ([`ns`]).

mod cache;
mod fjall;
pub mod ns;

pub use self::fjall::FjallKv;

use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The trees of the state database.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TreeId {
    /// Namespace, placement, journal, settings: hard state.
    Ns,
    /// Access statistics: soft state, may lag after a crash.
    Stats,
}

/// One write of an atomic batch.
#[derive(Clone, Debug)]
pub enum Op {
    /// Insert or replace.
    Put(Vec<u8>, Vec<u8>),
    /// Remove (no error if absent).
    Del(Vec<u8>),
}

/// A key-value store with atomic batches per tree.
pub trait Kv: Send + Sync {
    /// Reads one key.
    fn get(&self, tree: TreeId, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Applies all writes or none.
    fn apply(&self, tree: TreeId, ops: Vec<Op>) -> Result<()>;
    /// All pairs whose key starts with `prefix`, in key order.
    fn scan(&self, tree: TreeId, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
    /// Up to `limit` pairs with keys in `[start, end)`, in key order.
    fn range(&self, tree: TreeId, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
    /// Calls `f` for every pair whose key starts with `prefix`, in key
    /// order, without collecting them (for loading large trees).
    fn for_each(&self, tree: TreeId, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> Result<()>;
    /// True if some key starts with `prefix`.
    fn any_with_prefix(&self, tree: TreeId, prefix: &[u8]) -> Result<bool>;
    /// Makes everything applied so far durable.
    fn flush(&self) -> Result<()>;
    /// A fresh number, never handed out before, even across crashes.
    fn next_id(&self) -> Result<u64>;
}

/// The sled backend.
pub struct SledKv {
    db: sled::Db,
    ns: sled::Tree,
    stats: sled::Tree,
}

impl std::fmt::Debug for SledKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SledKv")
    }
}

impl SledKv {
    /// Opens (or creates) the database in `dir`.
    pub fn open(dir: &Path) -> Result<Self> {
        let config = sled::Config::new().path(dir.join("db")).cache_capacity(8 << 20).flush_every_ms(Some(500));
        // A handle dropped just before (a test, or a daemon exiting) keeps
        // the database's file lock until its flusher thread finishes the
        // flush it is in: wait for it a little.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let db = loop {
            match config.open() {
                Err(sled::Error::Io(e))
                    if e.to_string().contains("could not acquire lock") && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                r => break r?,
            }
        };
        let ns = db.open_tree("ns")?;
        let stats = db.open_tree("stats")?;
        Ok(SledKv { db, ns, stats })
    }

    fn tree(&self, t: TreeId) -> &sled::Tree {
        match t {
            TreeId::Ns => &self.ns,
            TreeId::Stats => &self.stats,
        }
    }
}

fn collect(
    it: impl Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>,
    limit: usize,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    for kv in it.take(limit) {
        let (k, v) = kv?;
        out.push((k.to_vec(), v.to_vec()));
    }
    Ok(out)
}

impl Kv for SledKv {
    fn get(&self, tree: TreeId, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.tree(tree).get(key)?.map(|v| v.to_vec()))
    }
    fn apply(&self, tree: TreeId, ops: Vec<Op>) -> Result<()> {
        let mut b = sled::Batch::default();
        for op in ops {
            match op {
                Op::Put(k, v) => b.insert(k, v),
                Op::Del(k) => b.remove(k),
            }
        }
        self.tree(tree).apply_batch(b).map_err(Error::from)
    }
    fn scan(&self, tree: TreeId, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        collect(self.tree(tree).scan_prefix(prefix), usize::MAX)
    }
    fn range(&self, tree: TreeId, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        collect(self.tree(tree).range(start.to_vec()..end.to_vec()), limit)
    }
    fn any_with_prefix(&self, tree: TreeId, prefix: &[u8]) -> Result<bool> {
        Ok(self.tree(tree).scan_prefix(prefix).next().transpose()?.is_some())
    }
    fn for_each(&self, tree: TreeId, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        for kv in self.tree(tree).scan_prefix(prefix) {
            let (k, v) = kv?;
            f(&k, &v);
        }
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        self.db.flush()?;
        Ok(())
    }
    fn next_id(&self) -> Result<u64> {
        Ok(self.db.generate_id()?)
    }
}

type Trees = BTreeMap<TreeId, BTreeMap<Vec<u8>, Vec<u8>>>;

/// In-memory backend: what [`Kv::flush`] made durable survives
/// [`MemKv::crash`], the rest is lost.
#[derive(Debug, Clone, Default)]
pub struct MemKv {
    inner: Arc<Mutex<(Trees, Trees)>>,
    ids: Arc<AtomicU64>,
    /// Batches still to refuse with EIO, applying nothing (a state
    /// database on a full or failing disk).
    refuse: Arc<AtomicU64>,
}

impl MemKv {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
    /// Refuses the next `n` batches (EIO, nothing applied).
    pub fn refuse_batches(&self, n: u64) {
        self.refuse.store(n, Ordering::SeqCst);
    }
    /// Forgets everything written since the last flush.
    pub fn crash(&self) {
        let mut g = self.inner.lock();
        g.0 = g.1.clone();
        // Ids are never reused, as with sled's generator.
        self.ids.fetch_add(1_000, Ordering::SeqCst);
    }
}

impl Kv for MemKv {
    fn get(&self, tree: TreeId, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.inner.lock().0.get(&tree).and_then(|t| t.get(key).cloned()))
    }
    fn apply(&self, tree: TreeId, ops: Vec<Op>) -> Result<()> {
        if self.refuse.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(crate::error::Error::errno(libc::EIO));
        }
        let mut g = self.inner.lock();
        let t = g.0.entry(tree).or_default();
        for op in ops {
            match op {
                Op::Put(k, v) => {
                    t.insert(k, v);
                }
                Op::Del(k) => {
                    t.remove(&k);
                }
            }
        }
        Ok(())
    }
    fn scan(&self, tree: TreeId, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let g = self.inner.lock();
        Ok(g.0
            .get(&tree)
            .map(|t| {
                t.range(prefix.to_vec()..)
                    .take_while(|(k, _)| k.starts_with(prefix))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default())
    }
    fn range(&self, tree: TreeId, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let g = self.inner.lock();
        Ok(g.0
            .get(&tree)
            .map(|t| t.range(start.to_vec()..end.to_vec()).take(limit).map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default())
    }
    fn any_with_prefix(&self, tree: TreeId, prefix: &[u8]) -> Result<bool> {
        Ok(!self.range(tree, prefix, &prefix_end(prefix), 1)?.is_empty())
    }
    fn for_each(&self, tree: TreeId, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        for (k, v) in self.scan(tree, prefix)? {
            f(&k, &v);
        }
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        let mut g = self.inner.lock();
        g.1 = g.0.clone();
        Ok(())
    }
    fn next_id(&self) -> Result<u64> {
        Ok(self.ids.fetch_add(1, Ordering::SeqCst))
    }
}

/// The smallest key greater than every key starting with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0xff; prefix.len() + 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exercise(kv: &dyn Kv) {
        kv.apply(
            TreeId::Ns,
            vec![
                Op::Put(b"a1".to_vec(), b"x".to_vec()),
                Op::Put(b"a2".to_vec(), b"y".to_vec()),
                Op::Put(b"b1".to_vec(), b"z".to_vec()),
            ],
        )
        .unwrap();
        assert_eq!(kv.get(TreeId::Ns, b"a2").unwrap(), Some(b"y".to_vec()));
        assert_eq!(kv.get(TreeId::Stats, b"a2").unwrap(), None);
        let keys: Vec<_> = kv.scan(TreeId::Ns, b"a").unwrap().into_iter().map(|p| p.0).collect();
        assert_eq!(keys, vec![b"a1".to_vec(), b"a2".to_vec()]);
        assert!(kv.any_with_prefix(TreeId::Ns, b"b").unwrap());
        assert!(!kv.any_with_prefix(TreeId::Ns, b"c").unwrap());
        assert_eq!(kv.range(TreeId::Ns, b"a2", b"c", 10).unwrap().len(), 2);
        kv.apply(TreeId::Ns, vec![Op::Del(b"a1".to_vec())]).unwrap();
        assert_eq!(kv.get(TreeId::Ns, b"a1").unwrap(), None);
        let a = kv.next_id().unwrap();
        assert!(kv.next_id().unwrap() > a);
    }

    #[test]
    fn sled_and_memory_backends_agree() {
        let tmp = tempfile::tempdir().unwrap();
        exercise(&SledKv::open(tmp.path()).unwrap());
        exercise(&MemKv::new());
    }

    #[test]
    fn memkv_crash_keeps_only_flushed_writes() {
        let kv = MemKv::new();
        kv.apply(TreeId::Ns, vec![Op::Put(b"k".to_vec(), b"1".to_vec())]).unwrap();
        kv.flush().unwrap();
        kv.apply(TreeId::Ns, vec![Op::Put(b"k".to_vec(), b"2".to_vec()), Op::Put(b"j".to_vec(), b"3".to_vec())])
            .unwrap();
        kv.crash();
        assert_eq!(kv.get(TreeId::Ns, b"k").unwrap(), Some(b"1".to_vec()));
        assert_eq!(kv.get(TreeId::Ns, b"j").unwrap(), None);
    }

    #[test]
    fn prefix_end_is_an_upper_bound() {
        assert_eq!(prefix_end(b"ab"), b"ac".to_vec());
        assert_eq!(prefix_end(&[1, 0xff]), vec![2]);
    }
}
