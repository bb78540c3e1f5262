//! The fjall backend of [`Kv`], the state database of a mount.
//!
//! fjall is a log-structured merge tree: writes go to a journal and a
//! memtable, and are written out as sorted, lz4-compressed segments that
//! background threads merge. Its memory is bounded by configuration (the
//! memtables, the block cache) rather than by the number of keys, and its
//! segments hold a file's three namespace keys and its statistics in about
//! 40 bytes (sled needed about 900 and a gigabyte of memory to adopt 10^5
//! files; `benches/scale.sh` and `results/scale/` have the figures).
//!
//! What tierfs needs of its state store holds:
//! - a batch is atomic: fjall writes it to the journal as one checksummed
//!   record (recovery drops a torn one), and readers read a snapshot at
//!   the last whole batch, never half of one being applied;
//! - each batch is handed to the operating system at commit
//!   (`PersistMode::Buffer`, which also reports a failed journal write), so
//!   a killed daemon keeps it;
//! - a background thread fsyncs the journal every 500 ms (as sled did),
//!   and [`Kv::flush`] fsyncs it at once, so a power cut keeps everything
//!   flushed and loses at most the last half second of the rest.
//!
//! Databases of older builds (sled, in `STATE_DIR/db`) are copied into a
//! new fjall keyspace at the first open ([`FjallKv::open`]): into
//! `STATE_DIR/kv.new`, which is synced and then renamed to `kv` before the
//! old database is removed.

use super::{Kv, Op, SledKv, TreeId};
use crate::error::{Error, Result};
use fjall::{Config, Keyspace, PartitionCreateOptions, PartitionHandle, PersistMode};
use parking_lot::Mutex;
use std::path::{Path, PathBuf};

/// The block cache, shared by the trees.
pub const CACHE_BYTES: u64 = 16 << 20;
/// All memtables together, before the largest is written out.
const WRITE_BUFFER_BYTES: u64 = 16 << 20;
/// One tree's memtable.
const MEMTABLE_BYTES: u32 = 8 << 20;
/// The journals, before the memtables they cover are written out (the
/// least fjall allows is 24 MiB).
const JOURNAL_BYTES: u64 = 32 << 20;

/// Segments written by compactions: fjall's default, 64 MiB, holds all the
/// keys of a million files, and a compaction writing one buffers a hash
/// of each key for its filter (134 MB at 10^6 files).
const SEGMENT_BYTES: u32 = 4 << 20;

/// How often the journal is fsynced in the background.
const FSYNC_MS: u16 = 500;

/// How many ids [`Kv::next_id`] hands out per durable reservation.
const ID_BLOCK: u64 = 1 << 16;
/// Key of the `meta` tree: the first id not yet reserved.
const IDS: &[u8] = b"ids";

/// The fjall backend.
pub struct FjallKv {
    ks: Keyspace,
    ns: PartitionHandle,
    stats: PartitionHandle,
    meta: PartitionHandle,
    /// (next id, first id not yet reserved durably)
    ids: Mutex<(u64, u64)>,
}

impl std::fmt::Debug for FjallKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FjallKv")
    }
}

impl From<fjall::Error> for Error {
    fn from(e: fjall::Error) -> Self {
        match e {
            fjall::Error::Io(io) => Error::Io(io),
            other => Error::State(other.to_string()),
        }
    }
}

impl From<fjall::LsmError> for Error {
    fn from(e: fjall::LsmError) -> Self {
        match e {
            fjall::LsmError::Io(io) => Error::Io(io),
            other => Error::State(other.to_string()),
        }
    }
}

fn u64_of(v: &[u8]) -> Result<u64> {
    Ok(u64::from_be_bytes(v.try_into().map_err(|_| Error::Corrupt("id reservation".into()))?))
}

impl FjallKv {
    /// The keyspace directory in a state directory.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join("kv")
    }

    /// The sled database of older builds in a state directory.
    fn sled_path(dir: &Path) -> PathBuf {
        dir.join("db")
    }

    /// Opens (or creates) the database in `dir`. A sled database of an
    /// older build found there (and no fjall one) is copied in first and
    /// then removed; a copy that a crash interrupted is started again from
    /// the beginning. Where both exist the fjall one is used and the sled
    /// one left alone, with a warning: it may hold the changes of an older
    /// build run after the copy.
    pub fn open(dir: &Path) -> Result<Self> {
        let sled = Self::sled_path(dir);
        let kv_path = Self::path(dir);
        if sled.exists() {
            if kv_path.exists() {
                tracing::warn!(
                    old = %sled.display(),
                    used = %kv_path.display(),
                    "both an old (sled) and a new state database: using the new one; remove the old one if it is not needed"
                );
            } else {
                let tmp = dir.join("kv.new");
                if tmp.exists() {
                    std::fs::remove_dir_all(&tmp)?;
                }
                Self::open_at(&tmp)?.copy_from_sled(dir)?;
                std::fs::rename(&tmp, &kv_path)?;
                sync_dir(dir)?;
                // The copy is complete and durable: the old database can go.
                std::fs::remove_dir_all(&sled)?;
                sync_dir(dir)?;
            }
        }
        Self::open_at(&kv_path)
    }

    fn open_at(path: &Path) -> Result<Self> {
        let ks = Config::new(path)
            .cache_size(CACHE_BYTES)
            .max_write_buffer_size(WRITE_BUFFER_BYTES)
            .max_journaling_size(JOURNAL_BYTES)
            .flush_workers(1)
            .compaction_workers(1)
            .fsync_ms(Some(FSYNC_MS))
            .open()?;
        let opts = || {
            PartitionCreateOptions::default().max_memtable_size(MEMTABLE_BYTES).compaction_strategy(
                fjall::compaction::Strategy::Leveled(fjall::compaction::Leveled {
                    target_size: SEGMENT_BYTES,
                    ..Default::default()
                }),
            )
        };
        let ns = ks.open_partition("ns", opts())?;
        let stats = ks.open_partition("stats", opts())?;
        let meta = ks.open_partition("meta", opts())?;
        let reserved = meta.get(IDS)?.map(|v| u64_of(&v)).transpose()?.unwrap_or(0);
        Ok(FjallKv { ks, ns, stats, meta, ids: Mutex::new((reserved, reserved)) })
    }

    /// Copies every tree of the sled database in `dir` and its id
    /// generator, durably.
    fn copy_from_sled(&self, dir: &Path) -> Result<()> {
        tracing::info!(dir = %dir.display(), "copying the state database of an older build (sled) to fjall");
        let old = SledKv::open(dir)?;
        for tree in [TreeId::Ns, TreeId::Stats] {
            let mut ops = Vec::new();
            let mut failed = None;
            old.for_each(tree, b"", &mut |k, v| {
                if failed.is_some() {
                    return;
                }
                ops.push(Op::Put(k.to_vec(), v.to_vec()));
                if ops.len() == 10_000 {
                    failed = self.apply(tree, std::mem::take(&mut ops)).err();
                }
            })?;
            if let Some(e) = failed {
                return Err(e);
            }
            self.apply(tree, ops)?;
        }
        // Every id sled handed out is below the one it hands out next.
        let next = old.next_id()?;
        let mut ids = self.ids.lock();
        self.write_reservation(next)?;
        *ids = (ids.0.max(next), next);
        drop(ids);
        self.flush()?;
        tracing::info!("state database copied");
        Ok(())
    }

    /// Durably records that ids below `upto` may have been handed out (the
    /// caller holds [`FjallKv::ids`] and moves its bound after this).
    fn write_reservation(&self, upto: u64) -> Result<()> {
        self.meta.insert(IDS, upto.to_be_bytes())?;
        self.ks.persist(PersistMode::SyncAll)?;
        Ok(())
    }

    fn tree(&self, t: TreeId) -> &PartitionHandle {
        match t {
            TreeId::Ns => &self.ns,
            TreeId::Stats => &self.stats,
        }
    }

    /// A snapshot of a tree at the last whole batch: a batch being applied
    /// is not seen half (fjall inserts its writes one by one and only then
    /// moves the visible sequence number on, all under its journal lock).
    fn snap(&self, t: TreeId) -> fjall::Snapshot {
        self.tree(t).snapshot_at(self.ks.instant())
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

impl Kv for FjallKv {
    fn get(&self, tree: TreeId, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.snap(tree).get(key)?.map(|v| v.to_vec()))
    }

    fn apply(&self, tree: TreeId, ops: Vec<Op>) -> Result<()> {
        let p = self.tree(tree);
        let mut b = self.ks.batch().durability(Some(PersistMode::Buffer));
        for op in ops {
            match op {
                Op::Put(k, v) => b.insert(p, k, v),
                Op::Del(k) => b.remove(p, k),
            }
        }
        b.commit()?;
        Ok(())
    }

    fn scan(&self, tree: TreeId, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        self.for_each(tree, prefix, &mut |k, v| out.push((k.to_vec(), v.to_vec())))?;
        Ok(out)
    }

    fn range(&self, tree: TreeId, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        for kv in self.snap(tree).range(start..end).take(limit) {
            let (k, v) = kv?;
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    fn for_each(&self, tree: TreeId, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        for kv in self.snap(tree).prefix(prefix) {
            let (k, v) = kv?;
            f(&k, &v);
        }
        Ok(())
    }

    fn any_with_prefix(&self, tree: TreeId, prefix: &[u8]) -> Result<bool> {
        Ok(self.snap(tree).prefix(prefix).next().transpose()?.is_some())
    }

    fn flush(&self) -> Result<()> {
        self.ks.persist(PersistMode::SyncAll)?;
        Ok(())
    }

    fn next_id(&self) -> Result<u64> {
        let mut ids = self.ids.lock();
        if ids.0 >= ids.1 {
            // Reserve the next block durably before handing any of it out,
            // so that no id is handed out twice, whatever a crash keeps.
            let upto = ids.0 + ID_BLOCK;
            self.write_reservation(upto)?;
            ids.1 = upto;
        }
        ids.0 += 1;
        Ok(ids.0 - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_never_handed_out_twice_across_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let first: Vec<u64> = {
            let kv = FjallKv::open(dir.path()).unwrap();
            (0..10).map(|_| kv.next_id().unwrap()).collect()
        };
        let kv = FjallKv::open(dir.path()).unwrap();
        let next = kv.next_id().unwrap();
        assert!(first.iter().all(|&i| i < next), "{first:?} then {next}");
    }

    #[test]
    fn prefix_scans_and_ranges_stop_where_they_should() {
        let dir = tempfile::tempdir().unwrap();
        let kv = FjallKv::open(dir.path()).unwrap();
        let put = |k: &[u8]| Op::Put(k.to_vec(), k.to_vec());
        kv.apply(TreeId::Ns, vec![put(b"a1"), put(b"b1"), put(b"b2"), put(b"c"), put(b"\xff\xff\x01")]).unwrap();
        let keys = |v: Vec<(Vec<u8>, Vec<u8>)>| v.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(keys(kv.scan(TreeId::Ns, b"b").unwrap()), vec![b"b1".to_vec(), b"b2".to_vec()]);
        assert_eq!(keys(kv.scan(TreeId::Ns, b"\xff").unwrap()), vec![b"\xff\xff\x01".to_vec()]);
        assert_eq!(keys(kv.range(TreeId::Ns, b"b", b"c", 1).unwrap()), vec![b"b1".to_vec()]);
        assert!(kv.any_with_prefix(TreeId::Ns, b"c").unwrap());
        assert!(!kv.any_with_prefix(TreeId::Ns, b"d").unwrap());
        assert!(kv.scan(TreeId::Stats, b"").unwrap().is_empty());
    }

    #[test]
    fn a_sled_database_of_an_older_build_is_copied_in_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let ids: Vec<u64> = {
            let old = SledKv::open(dir.path()).unwrap();
            old.apply(TreeId::Ns, vec![Op::Put(b"ikey".to_vec(), b"v".to_vec())]).unwrap();
            old.apply(TreeId::Stats, vec![Op::Put(b"s".to_vec(), b"w".to_vec())]).unwrap();
            let ids = (0..5).map(|_| old.next_id().unwrap()).collect();
            old.flush().unwrap();
            ids
        };
        let kv = FjallKv::open(dir.path()).unwrap();
        assert!(!dir.path().join("db").exists());
        assert_eq!(kv.get(TreeId::Ns, b"ikey").unwrap(), Some(b"v".to_vec()));
        assert_eq!(kv.get(TreeId::Stats, b"s").unwrap(), Some(b"w".to_vec()));
        let next = kv.next_id().unwrap();
        assert!(ids.iter().all(|&i| i < next), "{ids:?} then {next}");
    }

    #[test]
    fn an_interrupted_copy_from_sled_starts_again() {
        let dir = tempfile::tempdir().unwrap();
        {
            let old = SledKv::open(dir.path()).unwrap();
            old.apply(TreeId::Ns, vec![Op::Put(b"k".to_vec(), b"v".to_vec())]).unwrap();
            old.flush().unwrap();
        }
        {
            // A copy that stopped before its rename, with a stray key.
            let kv = FjallKv::open_at(&dir.path().join("kv.new")).unwrap();
            kv.apply(TreeId::Ns, vec![Op::Put(b"stray".to_vec(), b"x".to_vec())]).unwrap();
            kv.flush().unwrap();
        }
        let kv = FjallKv::open(dir.path()).unwrap();
        assert_eq!(kv.get(TreeId::Ns, b"k").unwrap(), Some(b"v".to_vec()));
        assert_eq!(kv.get(TreeId::Ns, b"stray").unwrap(), None);
        assert!(!dir.path().join("kv.new").exists() && !dir.path().join("db").exists());
    }

    #[test]
    fn a_batch_is_in_the_journal_file_at_commit_without_a_flush() {
        // fjall keeps a batch in its own buffer unless asked to write it
        // out: a killed daemon lost every batch since the last flush.
        let dir = tempfile::tempdir().unwrap();
        let kv = FjallKv::open(dir.path()).unwrap();
        let marker = b"a-value-to-find-in-the-journal".to_vec();
        kv.apply(TreeId::Ns, vec![Op::Put(b"k".to_vec(), marker.clone())]).unwrap();
        let found = std::fs::read_dir(FjallKv::path(dir.path()).join("journals"))
            .unwrap()
            .filter_map(|e| std::fs::read(e.unwrap().path()).ok())
            .any(|bytes| bytes.windows(marker.len()).any(|w| w == marker.as_slice()));
        assert!(found, "the batch was written to the journal file at commit");
        drop(kv);
    }
}
