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
//!   flushed and loses at most the last half second of the rest. Both
//!   fsync the journal without holding fjall's journal writer (see
//!   [`JournalSync`]): fjall's own `persist(SyncAll)` holds it
//!   for the whole fsync, and every batch of every request thread waited.
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The block cache, shared by the trees.
pub const CACHE_BYTES: u64 = 16 << 20;
/// All memtables together, before the largest is written out.
const WRITE_BUFFER_BYTES: u64 = 16 << 20;
/// One tree's memtable.
const MEMTABLE_BYTES: u32 = 8 << 20;
/// The journals, before the memtables they cover are written out (the
/// least fjall allows is 24 MiB). fjall counts every journal at its
/// preallocated 32 MiB, whatever it holds: at 32 MiB one sealed journal
/// stalled each memtable rotation for 500 ms, and two halted writers.
const JOURNAL_BYTES: u64 = 128 << 20;

/// Memtables one wake-up of fjall's flush worker writes out (see
/// [`FjallKv::drain_recovered`]).
const FLUSH_WORKERS: usize = 2;

/// How long an open waits for the memtables recovered from the journals.
const DRAIN_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// A key of the `meta` tree that is never stored, only deleted: its
/// tombstone gives a memtable something to write out.
const DRAIN_KEY: &[u8] = b"\xffdrain";

/// Segments written by compactions: fjall's default, 64 MiB, holds all the
/// keys of a million files, and a compaction writing one buffers a hash
/// of each key for its filter (134 MB at 10^6 files).
const SEGMENT_BYTES: u32 = 4 << 20;

/// How often the journal is fsynced in the background.
const FSYNC_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// The folder of a keyspace that holds fjall's journals, each named by its
/// number; the highest is the one fjall appends to. Checked by the test
/// `the_flush_syncs_the_journal_fjall_appends_to` for the fjall version
/// the lock file pins.
const JOURNALS: &str = "journals";

/// How many ids [`Kv::next_id`] hands out per durable reservation.
const ID_BLOCK: u64 = 1 << 16;
/// Key of the `meta` tree: the first id not yet reserved.
const IDS: &[u8] = b"ids";

/// The fjall backend.
pub struct FjallKv {
    ks: Keyspace,
    /// Makes the journal durable (shared with the background fsync).
    journal: Arc<JournalSync>,
    /// The background fsync: dropping the sender stops it.
    syncer: Option<(std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>)>,
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
            .flush_workers(FLUSH_WORKERS)
            .compaction_workers(1)
            // Our own thread fsyncs it (`start_syncer`), outside fjall's
            // journal lock.
            .fsync_ms(None)
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
        let journal = Arc::new(JournalSync {
            ks: ks.clone(),
            dir: path.join(JOURNALS),
            poisoned: AtomicBool::new(false),
            newest: Mutex::new(None),
        });
        let mut kv = FjallKv { journal, ks, ns, stats, meta, ids: Mutex::new((reserved, reserved)), syncer: None };
        kv.drain_recovered()?;
        kv.start_syncer()?;
        Ok(kv)
    }

    /// Starts the thread that fsyncs the journal every [`FSYNC_EVERY`].
    fn start_syncer(&mut self) -> Result<()> {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let journal = self.journal.clone();
        let h = std::thread::Builder::new().name("tierfs-kv-sync".into()).spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(FSYNC_EVERY) {
                if let Err(e) = journal.sync() {
                    tracing::error!(error = %e, "the state database's journal could not be synced");
                    if journal.check().is_err() {
                        // For good: every later write fails and says so.
                        break;
                    }
                }
            }
        })?;
        self.syncer = Some((tx, h));
        Ok(())
    }

    /// Bytes of memtables waiting to be written out (sealed, not active).
    fn sealed_bytes(&self) -> u64 {
        use fjall::AbstractTree;
        let active: u64 =
            [&self.ns, &self.stats, &self.meta].iter().map(|p| u64::from(p.tree.active_memtable_size())).sum();
        self.ks.write_buffer_size().saturating_sub(active)
    }

    /// Writes out the memtables recovered from the journals of the last
    /// run. fjall 2.11 recovers one sealed memtable per journal and tree
    /// but wakes its flush worker once per tree, and each wake-up writes at
    /// most `FLUSH_WORKERS` memtables: the rest waited for later
    /// rotations, the journals they cover could not be deleted, the trees
    /// with a memtable queued were never rotated to catch up, and after a
    /// few remounts every writer halted for good on the journal limit (a
    /// create loop froze the mount). Each rotation of a one-tombstone
    /// memtable here is one more wake-up, writing two memtables and adding
    /// one, until none is left.
    fn drain_recovered(&self) -> Result<()> {
        let start = std::time::Instant::now();
        let mut rotations = 0u32;
        while self.sealed_bytes() > 0 {
            if start.elapsed() > DRAIN_WAIT {
                tracing::warn!(
                    sealed = self.sealed_bytes(),
                    rotations,
                    "the state database did not write out its recovered memtables in time"
                );
                break;
            }
            self.meta.remove(DRAIN_KEY)?;
            // Hidden in fjall's documentation, but public: the rotation that
            // wakes the flush worker.
            self.meta.rotate_memtable()?;
            rotations += 1;
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        if rotations > 0 {
            tracing::info!(
                rotations,
                ms = start.elapsed().as_millis() as u64,
                "state database: recovered memtables written out"
            );
        }
        Ok(())
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
        self.flush()
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
        self.journal.check()?;
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
        self.journal.sync()
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

impl Drop for FjallKv {
    fn drop(&mut self) {
        if let Some((tx, h)) = self.syncer.take() {
            drop(tx);
            let _ = h.join();
        }
        // What the last half second committed: fjall itself only flushes
        // its buffer when dropped.
        if let Err(e) = self.journal.sync() {
            tracing::error!(error = %e, "the state database's journal could not be synced at close");
        }
    }
}

/// Makes every batch committed so far durable without holding fjall's
/// journal writer while the disk works. fjall's `persist(SyncAll)` fsyncs
/// under the writer's lock, so each flush of a migration (two per file)
/// held up every commit of every request thread: postmark under the
/// default policy took 19.8 s, 16.8–17.8 s with this alone (single runs,
/// `benches/results/io-2026-11-25-flush.md`). The batches are handed
/// to the kernel under the lock (`Buffer`), then the newest journal is
/// fsynced through a descriptor of our own. A batch in an older journal is
/// durable already: fjall fsyncs a journal (and the folder) before it
/// starts the next one, and the next one is not in the folder before that.
struct JournalSync {
    ks: Keyspace,
    /// The keyspace's journal folder.
    dir: PathBuf,
    /// Set for good by a failed fsync: the kernel may have dropped the
    /// pages it could not write and report the next fsync clean, so
    /// nothing may be written, or claimed durable, after it.
    poisoned: AtomicBool,
    /// The newest journal and its number, kept open from when it is first
    /// seen: its fsync then reports every write error since, also one an
    /// fsync of fjall's (when it starts the next journal) saw first, which
    /// a descriptor opened after that would not hear of.
    newest: Mutex<Option<(u64, Arc<std::fs::File>)>>,
}

impl JournalSync {
    /// Fails once an fsync of the journal has failed.
    fn check(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::State("an fsync of the journal failed: the database takes no more writes".into()));
        }
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.check()?;
        self.ks.persist(PersistMode::Buffer)?;
        let r = match self.newest()? {
            // fjall marks itself failed when its own fsync of a journal it
            // seals fails: asking it again after ours hears of that too.
            Some(f) => f.sync_all().map_err(Error::from).and_then(|()| Ok(self.ks.persist(PersistMode::Buffer)?)),
            // Not the layout this was written for: fjall's own, slower way.
            None => Ok(self.ks.persist(PersistMode::SyncAll)?),
        };
        if r.is_err() {
            self.poisoned.store(true, Ordering::Release);
        }
        r
    }

    /// The journal fjall appends to: the highest-numbered file in the
    /// folder (`None`: there is none).
    fn newest(&self) -> std::io::Result<Option<Arc<std::fs::File>>> {
        // A journal written out and deleted between the listing and the
        // open: list again.
        for _ in 0..3 {
            let mut newest: Option<u64> = None;
            for e in std::fs::read_dir(&self.dir)? {
                if let Some(n) = e?.file_name().to_str().and_then(|s| s.parse::<u64>().ok()) {
                    newest = newest.max(Some(n));
                }
            }
            let Some(n) = newest else { return Ok(None) };
            let mut g = self.newest.lock();
            match &*g {
                Some((m, f)) if *m == n => return Ok(Some(f.clone())),
                _ => {}
            }
            match std::fs::File::open(self.dir.join(n.to_string())) {
                Ok(f) => {
                    let f = Arc::new(f);
                    *g = Some((n, f.clone()));
                    return Ok(Some(f));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other("the state database's journals kept changing while listed"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout [`JournalSync::sync`] relies on: the journal fjall appends a
    /// batch to is the highest-numbered file in the journal folder, also
    /// after the memtables (and with them the journal) were rotated.
    #[test]
    fn the_flush_syncs_the_journal_fjall_appends_to() {
        let dir = tempfile::tempdir().unwrap();
        let kv = FjallKv::open(dir.path()).unwrap();
        for round in 0..3u8 {
            let before = newest_len(&kv.journal);
            kv.apply(TreeId::Ns, vec![Op::Put(vec![round], vec![7; 4096])]).unwrap();
            kv.flush().unwrap();
            let after = newest_len(&kv.journal);
            assert!(after >= before + 4096, "round {round}: the newest journal went from {before} to {after} bytes");
            kv.ns.rotate_memtable().unwrap();
        }
        assert!(kv.ks.journal_count() >= 2, "{} journals", kv.ks.journal_count());
    }

    /// After a failed fsync of the journal the kernel may report the next
    /// one clean: nothing more is written or flushed.
    #[test]
    fn after_a_failed_journal_fsync_the_database_takes_no_more_writes() {
        let dir = tempfile::tempdir().unwrap();
        let kv = FjallKv::open(dir.path()).unwrap();
        kv.apply(TreeId::Ns, vec![Op::Put(b"a".to_vec(), b"1".to_vec())]).unwrap();
        kv.flush().unwrap();
        kv.journal.poisoned.store(true, Ordering::Release);
        assert!(kv.apply(TreeId::Ns, vec![Op::Put(b"b".to_vec(), b"2".to_vec())]).is_err());
        assert!(kv.flush().is_err());
        assert_eq!(kv.get(TreeId::Ns, b"b").unwrap(), None);
    }

    /// Bytes fjall has written to its newest journal (not what it
    /// preallocated: the position of its writer, seen through the data).
    fn newest_len(j: &JournalSync) -> u64 {
        j.newest().unwrap().expect("a journal");
        let n = j.newest.lock().as_ref().map(|(n, _)| *n).unwrap();
        let buf = std::fs::read(j.dir.join(n.to_string())).unwrap();
        buf.iter().rposition(|b| *b != 0).map_or(0, |p| p as u64 + 1)
    }

    /// A create-and-unlink loop on four threads wrote faster than fjall
    /// deleted old journals; fjall counts each journal at its preallocated
    /// 32 MiB, so with the journal limit at 32 MiB a writer halted for good
    /// and the whole mount froze. No batch may wait long.
    #[test]
    fn a_long_create_and_unlink_churn_never_halts_writers() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        use std::time::{Duration, Instant};
        let dir = tempfile::tempdir().unwrap();
        let kv = Arc::new(FjallKv::open(dir.path()).unwrap());
        let t0 = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        // When each writer's current batch began, in ms since t0 (0: none).
        let busy: Arc<Vec<AtomicU64>> = Arc::new((0..4).map(|_| AtomicU64::new(0)).collect());
        let workers: Vec<_> = (0..4u64)
            .map(|w| {
                let (kv, stop, busy) = (kv.clone(), stop.clone(), busy.clone());
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        busy[w as usize].store(t0.elapsed().as_millis() as u64 + 1, Ordering::Relaxed);
                        let key = |p: u8| [&[p][..], &w.to_be_bytes(), &n.to_be_bytes(), b"some-file-name"].concat();
                        let put = |p: u8| Op::Put(key(p), vec![1; 24]);
                        kv.apply(TreeId::Ns, vec![put(b'd'), put(b'b'), put(b'i')]).unwrap();
                        kv.apply(TreeId::Stats, vec![Op::Put(key(b's'), vec![0; 62])]).unwrap();
                        kv.apply(TreeId::Ns, vec![Op::Del(key(b'd')), Op::Del(key(b'b')), Op::Del(key(b'i'))]).unwrap();
                        kv.apply(TreeId::Stats, vec![Op::Del(key(b's'))]).unwrap();
                        busy[w as usize].store(0, Ordering::Relaxed);
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        let end = t0 + Duration::from_secs(10);
        let mut stuck = None;
        while Instant::now() < end && stuck.is_none() {
            std::thread::sleep(Duration::from_millis(100));
            let now = t0.elapsed().as_millis() as u64;
            stuck = busy
                .iter()
                .position(|b| b.load(Ordering::Relaxed).checked_sub(1).is_some_and(|s| now.saturating_sub(s) > 5_000));
        }
        assert!(stuck.is_none(), "writer {stuck:?} waited over 5 s for one batch");
        stop.store(true, Ordering::Relaxed);
        let done: u64 = workers.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(done > 10_000, "only {done} create/unlink pairs in 10 s");
    }

    /// The journals of a run that ended with many of them (here: sealed
    /// quickly while one tree's memtable kept them all) are replayed into
    /// one memtable each; fjall woke its flush worker once per tree, so
    /// most stayed queued and, a few remounts later, writers halted for
    /// good. Every one is written out by the time `open` returns.
    #[test]
    fn memtables_recovered_from_many_journals_are_all_written_out_at_open() {
        let dir = tempfile::tempdir().unwrap();
        {
            let kv = FjallKv::open(dir.path()).unwrap();
            // Unflushed data in `stats` keeps every journal alive.
            kv.apply(TreeId::Stats, vec![Op::Put(b"s".to_vec(), vec![0; 62])]).unwrap();
            for i in 0..40u32 {
                kv.apply(TreeId::Ns, vec![Op::Put(i.to_be_bytes().to_vec(), vec![1; 100])]).unwrap();
                kv.ns.rotate_memtable().unwrap();
            }
            kv.flush().unwrap();
            assert!(kv.ks.journal_count() > 10, "{} journals", kv.ks.journal_count());
        }
        let kv = FjallKv::open(dir.path()).unwrap();
        assert_eq!(kv.sealed_bytes(), 0, "memtables still queued after the open");
        for i in 0..40u32 {
            assert_eq!(kv.get(TreeId::Ns, &i.to_be_bytes()).unwrap(), Some(vec![1; 100]));
        }
        assert!(kv.ks.journal_count() <= 3, "{} journals kept", kv.ks.journal_count());
    }

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
