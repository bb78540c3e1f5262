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
use parking_lot::{Mutex, RwLock};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// The keyspace's directory.
    path: PathBuf,
    /// The open keyspace; `None` after a reopen that failed (the next use
    /// tries again).
    db: RwLock<Option<Db>>,
    /// How many times the keyspace was opened: a writer that saw it refuse
    /// a write reopens it only if nobody did since.
    generation: AtomicU64,
    /// When it was last reopened (at most once a [`REOPEN_EVERY`]).
    reopened: Mutex<Option<std::time::Instant>>,
    /// Room kept on the database's file system for the database.
    reserve: Arc<Reserve>,
    /// (next id, first id not yet reserved durably)
    ids: Mutex<(u64, u64)>,
}

/// One open keyspace.
struct Db {
    ks: Keyspace,
    /// Makes the journal durable (shared with the background fsync).
    journal: Arc<JournalSync>,
    /// The background fsync: dropping the sender stops it.
    syncer: Option<(std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>)>,
    ns: PartitionHandle,
    stats: PartitionHandle,
    meta: PartitionHandle,
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

/// Why a write of the database failed.
enum Failed {
    /// fjall refuses writes (it does after a journal write failed: a full
    /// file system): a reopen may help.
    Refused,
    /// Anything else (an fsync of the journal that failed is for good).
    Error(Error),
}

impl From<fjall::Error> for Failed {
    fn from(e: fjall::Error) -> Self {
        match e {
            fjall::Error::Poisoned => Failed::Refused,
            other => Failed::Error(other.into()),
        }
    }
}

impl From<Error> for Failed {
    fn from(e: Error) -> Self {
        Failed::Error(e)
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Refused => f.write_str("the keyspace refuses writes after a failed journal write"),
            Failed::Error(e) => e.fmt(f),
        }
    }
}

/// The least time between two reopens of the keyspace.
const REOPEN_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

fn closed() -> Error {
    Error::State("the state database is closed: its reopen failed".into())
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
        // Taken first: the open writes out recovered memtables.
        let reserve = Arc::new(Reserve::new(path.with_extension("reserve")));
        reserve.fill(false);
        let db = Db::open(path, &reserve)?;
        let reserved = db.meta.get(IDS)?.map(|v| u64_of(&v)).transpose()?.unwrap_or(0);
        Ok(FjallKv {
            path: path.to_path_buf(),
            db: RwLock::new(Some(db)),
            generation: AtomicU64::new(0),
            reopened: Mutex::new(None),
            reserve,
            ids: Mutex::new((reserved, reserved)),
        })
    }

    /// The open keyspace, read-locked (reopened first if a reopen failed).
    fn db(&self) -> Result<parking_lot::MappedRwLockReadGuard<'_, Db>> {
        for _ in 0..2 {
            let g = self.db.read();
            if let Ok(db) = parking_lot::RwLockReadGuard::try_map(g, Option::as_ref) {
                return Ok(db);
            }
            self.reopen(self.generation.load(Ordering::Acquire))?;
        }
        Err(closed())
    }

    /// Runs `f`, a write of the database. If fjall refuses it (after a
    /// journal write failed, it refuses every later one until it is
    /// opened again), the database gets its reserve's room, is reopened,
    /// and `f` runs once more.
    fn writing<T>(&self, f: impl Fn(&Db) -> std::result::Result<T, Failed>) -> Result<T> {
        let generation = self.generation.load(Ordering::Acquire);
        let first = match self.db.read().as_ref() {
            Some(db) => f(db),
            None => Err(Failed::Refused),
        };
        match first {
            Ok(t) => Ok(t),
            Err(Failed::Error(e)) => Err(e),
            Err(Failed::Refused) => {
                self.reopen(generation)?;
                match f(&*self.db()?) {
                    Ok(t) => Ok(t),
                    Err(Failed::Error(e)) => Err(e),
                    Err(Failed::Refused) => Err(Error::State("the state database refuses writes".into())),
                }
            }
        }
    }

    /// Opens the keyspace again after it refused a write, unless another
    /// writer did since `seen` (the generation the caller saw refuse). Only
    /// where its file system is short of room, the cause fjall does not
    /// report (a failed fsync, or a refusal on a file system with room,
    /// is for good: the kernel may have dropped what it could not write),
    /// and at most once a [`REOPEN_EVERY`]. The old keyspace is closed
    /// before the reserve is given back, so that a half-written batch it
    /// still buffers stays half-written and is dropped by the open, as
    /// its writer was told it failed.
    fn reopen(&self, seen: u64) -> Result<()> {
        let mut slot = self.db.write();
        if self.generation.load(Ordering::Acquire) != seen {
            return Ok(());
        }
        if slot.as_ref().is_some_and(|db| db.journal.check().is_err()) {
            return Err(Error::State("an fsync of the journal failed: the database takes no more writes".into()));
        }
        let avail = free_bytes(self.path.parent().unwrap_or(&self.path)).unwrap_or(0);
        if slot.is_some() && avail >= self.reserve.target.max(RESERVE_MIN) {
            return Err(Error::State(
                "the state database refuses writes on a file system with room: it takes no more writes".into(),
            ));
        }
        {
            let mut last = self.reopened.lock();
            if last.is_some_and(|t| t.elapsed() < REOPEN_EVERY) {
                return Err(Error::State("the state database refuses writes; it was reopened a moment ago".into()));
            }
            *last = Some(std::time::Instant::now());
        }
        drop(slot.take());
        let given = self.reserve.release();
        let db = Db::open(&self.path, &self.reserve).inspect_err(|e| {
            tracing::error!(error = %e, "the state database could not be reopened");
        })?;
        *slot = Some(db);
        self.generation.fetch_add(1, Ordering::AcqRel);
        tracing::error!(
            reserve_bytes = given,
            "the state database's file system is full: the database was given its reserve and reopened; free space there"
        );
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
        self.writing(|db| {
            let mut b = db.ks.batch().durability(Some(PersistMode::Buffer));
            b.insert(&db.meta, IDS, upto.to_be_bytes());
            b.commit()?;
            Ok(())
        })?;
        self.flush()
    }
}

impl Db {
    fn open(path: &Path, reserve: &Arc<Reserve>) -> Result<Self> {
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
        let journal = Arc::new(JournalSync {
            ks: ks.clone(),
            dir: path.join(JOURNALS),
            poisoned: AtomicBool::new(false),
            newest: Mutex::new(None),
        });
        let mut db = Db { journal, ks, ns, stats, meta, syncer: None };
        db.drain_recovered()?;
        db.start_syncer(reserve.clone())?;
        Ok(db)
    }

    /// Starts the thread that fsyncs the journal every [`FSYNC_EVERY`]
    /// and, every [`RESERVE_EVERY`], makes the reserve whole again when
    /// there is room for it.
    fn start_syncer(&mut self, reserve: Arc<Reserve>) -> Result<()> {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let journal = self.journal.clone();
        let h = std::thread::Builder::new().name("tierfs-kv-sync".into()).spawn(move || {
            let mut refilled = std::time::Instant::now();
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(FSYNC_EVERY) {
                if let Err(e) = journal.sync() {
                    tracing::error!(error = %e, "the state database's journal could not be synced");
                    if journal.check().is_err() {
                        // For good: every later write fails and says so.
                        break;
                    }
                }
                if refilled.elapsed() >= RESERVE_EVERY {
                    refilled = std::time::Instant::now();
                    reserve.fill(true);
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

impl Drop for Db {
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

/// The least room kept for the database on its file system, and the most.
const RESERVE_MIN: u64 = 4 << 20;
const RESERVE_MAX: u64 = 64 << 20;

/// How often the syncer looks whether the reserve can be made whole again.
const RESERVE_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// The size of the file system of `dir` and the bytes free there for the
/// daemon's user.
fn fs_space(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain data, for which all zeros is a value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a statvfs to fill.
    let ok = unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0;
    ok.then(|| (st.f_blocks as u64 * st.f_frsize as u64, st.f_bavail as u64 * st.f_frsize as u64))
}

/// Bytes free for the daemon's user on the file system of `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    fs_space(dir).map(|s| s.1)
}

/// Room kept for the state database on its file system: a file of
/// allocated blocks next to the keyspace (`kv.reserve`), a sixteenth of the
/// file system (4 to 64 MiB). Anyone else filling the file system (a
/// writer passing through to an SSD file, which the daemon does not see)
/// finds it full while the reserve still stands; the database, refused a
/// journal write, gets the reserve's room (`FjallKv::reopen`), which is
/// taken again once the file system has twice as much free.
struct Reserve {
    path: PathBuf,
    target: u64,
}

impl Reserve {
    fn new(path: PathBuf) -> Self {
        let total = path.parent().and_then(fs_space).map_or(0, |s| s.0);
        let target = (total / 16).clamp(RESERVE_MIN, RESERVE_MAX) & !((1 << 20) - 1);
        Reserve { path, target }
    }

    /// Bytes the reserve holds now.
    fn held(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&self.path).map_or(0, |m| m.blocks() * 512)
    }

    /// Makes the reserve whole if the file system has room for it (with
    /// `spare`, and as much again left over). A failure is logged: the
    /// database works without it.
    fn fill(&self, spare: bool) {
        let held = self.held();
        if held >= self.target {
            return;
        }
        let need = self.target - held;
        let dir = self.path.parent().unwrap_or(&self.path);
        if free_bytes(dir).is_none_or(|f| f < need + if spare { self.target } else { 0 }) {
            return;
        }
        let r = std::fs::OpenOptions::new().write(true).create(true).truncate(false).open(&self.path).and_then(|f| {
            use std::os::fd::AsRawFd;
            // SAFETY: a valid descriptor.
            match unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, self.target as libc::off_t) } {
                0 => f.sync_all(),
                e => Err(std::io::Error::from_raw_os_error(e)),
            }
        });
        match r {
            Ok(()) if held > 0 || spare => {
                tracing::info!(bytes = self.target, "the state database's reserve is whole again")
            }
            Ok(()) => {}
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot keep a reserve for the state database")
            }
        }
    }

    /// Gives the reserve's room back to the file system; returns the bytes.
    fn release(&self) -> u64 {
        let held = self.held();
        if held > 0 {
            if let Err(e) = std::fs::OpenOptions::new().write(true).open(&self.path).and_then(|f| f.set_len(0)) {
                tracing::error!(error = %e, "cannot free the state database's reserve");
                return 0;
            }
        }
        held
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

impl Kv for FjallKv {
    fn get(&self, tree: TreeId, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db()?.snap(tree).get(key)?.map(|v| v.to_vec()))
    }

    fn apply(&self, tree: TreeId, ops: Vec<Op>) -> Result<()> {
        self.writing(|db| {
            db.journal.check()?;
            let p = db.tree(tree);
            let mut b = db.ks.batch().durability(Some(PersistMode::Buffer));
            for op in &ops {
                match op {
                    Op::Put(k, v) => b.insert(p, k.as_slice(), v.as_slice()),
                    Op::Del(k) => b.remove(p, k.as_slice()),
                }
            }
            b.commit()?;
            Ok(())
        })
    }

    fn scan(&self, tree: TreeId, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        self.for_each(tree, prefix, &mut |k, v| out.push((k.to_vec(), v.to_vec())))?;
        Ok(out)
    }

    fn range(&self, tree: TreeId, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        for kv in self.db()?.snap(tree).range(start..end).take(limit) {
            let (k, v) = kv?;
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    fn for_each(&self, tree: TreeId, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
        for kv in self.db()?.snap(tree).prefix(prefix) {
            let (k, v) = kv?;
            f(&k, &v);
        }
        Ok(())
    }

    fn any_with_prefix(&self, tree: TreeId, prefix: &[u8]) -> Result<bool> {
        Ok(self.db()?.snap(tree).prefix(prefix).next().transpose()?.is_some())
    }

    fn flush(&self) -> Result<()> {
        self.writing(|db| db.journal.sync())
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

    fn sync(&self) -> std::result::Result<(), Failed> {
        self.check()?;
        self.ks.persist(PersistMode::Buffer)?;
        let synced = match self.newest().map_err(Error::from)? {
            Some(f) => f.sync_all(),
            // Not the layout this was written for: fjall's own, slower way.
            None => return Ok(self.ks.persist(PersistMode::SyncAll)?),
        };
        if let Err(e) = synced {
            self.poisoned.store(true, Ordering::Release);
            return Err(Failed::Error(e.into()));
        }
        // fjall marks itself failed when its own fsync of a journal it
        // seals fails: asking it again after ours hears of that too.
        Ok(self.ks.persist(PersistMode::Buffer)?)
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
            let before = newest_len(&kv.db().unwrap().journal);
            kv.apply(TreeId::Ns, vec![Op::Put(vec![round], vec![7; 4096])]).unwrap();
            kv.flush().unwrap();
            let after = newest_len(&kv.db().unwrap().journal);
            assert!(after >= before + 4096, "round {round}: the newest journal went from {before} to {after} bytes");
            kv.db().unwrap().ns.rotate_memtable().unwrap();
        }
        let journals = kv.db().unwrap().ks.journal_count();
        assert!(journals >= 2, "{journals} journals");
    }

    /// After a failed fsync of the journal the kernel may report the next
    /// one clean: nothing more is written or flushed.
    #[test]
    fn after_a_failed_journal_fsync_the_database_takes_no_more_writes() {
        let dir = tempfile::tempdir().unwrap();
        let kv = FjallKv::open(dir.path()).unwrap();
        kv.apply(TreeId::Ns, vec![Op::Put(b"a".to_vec(), b"1".to_vec())]).unwrap();
        kv.flush().unwrap();
        kv.db().unwrap().journal.poisoned.store(true, Ordering::Release);
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
                kv.db().unwrap().ns.rotate_memtable().unwrap();
            }
            kv.flush().unwrap();
            let journals = kv.db().unwrap().ks.journal_count();
            assert!(journals > 10, "{journals} journals");
        }
        let kv = FjallKv::open(dir.path()).unwrap();
        assert_eq!(kv.db().unwrap().sealed_bytes(), 0, "memtables still queued after the open");
        for i in 0..40u32 {
            assert_eq!(kv.get(TreeId::Ns, &i.to_be_bytes()).unwrap(), Some(vec![1; 100]));
        }
        let journals = kv.db().unwrap().ks.journal_count();
        assert!(journals <= 3, "{journals} journals kept");
    }

    /// A small tmpfs, unmounted on drop (root only).
    struct SmallFs(tempfile::TempDir);

    impl SmallFs {
        fn new(megabytes: u64) -> Option<Self> {
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } != 0 {
                return None;
            }
            let d = tempfile::tempdir().unwrap();
            let size = format!("size={megabytes}m");
            let ok = std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &size, "tierfs-test"])
                .arg(d.path())
                .status()
                .is_ok_and(|s| s.success());
            ok.then_some(SmallFs(d))
        }
    }

    impl Drop for SmallFs {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg("-l").arg(self.0.path()).status();
        }
    }

    /// Writes zeros into `path` until its file system is full.
    fn fill(path: &std::path::Path) {
        use std::io::Write;
        let mut f = std::fs::File::create(path).unwrap();
        let block = vec![0u8; 64 << 10];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
    }

    #[test]
    fn a_state_database_whose_file_system_another_writer_filled_goes_on_taking_writes() {
        // A writer passing through to an SSD file filled the file system
        // the state database is on: a journal write failed, fjall refused
        // every later write (for every user) until a remount, even once
        // there was room again. The database keeps a reserve it gives
        // itself when its file system is full, and reopens after a failed
        // write.
        let Some(fs) = SmallFs::new(48) else { return };
        let state = fs.0.path().join("state");
        std::fs::create_dir(&state).unwrap();
        let kv = FjallKv::open(&state).unwrap();
        kv.apply(TreeId::Ns, vec![Op::Put(b"before".to_vec(), vec![1; 100])]).unwrap();
        kv.flush().unwrap();
        fill(&fs.0.path().join("filler"));
        let mut failed = 0;
        for i in 0..4000u32 {
            let key = [b"k".as_slice(), &i.to_be_bytes()].concat();
            if kv.apply(TreeId::Ns, vec![Op::Put(key, vec![2; 200])]).is_err() {
                failed += 1;
            }
        }
        let flushed = kv.flush();
        assert_eq!(failed, 0, "writes refused on a file system others filled");
        flushed.unwrap();
        assert!(kv.reserve.held() < kv.reserve.target, "the reserve was not given to the database");
        std::fs::remove_file(fs.0.path().join("filler")).unwrap();
        // Once there is room, the syncer makes the reserve whole again.
        kv.reserve.fill(true);
        assert_eq!(kv.reserve.held(), kv.reserve.target);
        kv.apply(TreeId::Ns, vec![Op::Put(b"after".to_vec(), vec![3; 100])]).unwrap();
        kv.flush().unwrap();
        drop(kv);
        let kv = FjallKv::open(&state).unwrap();
        for key in [b"before".as_slice(), b"after", b"k\0\0\x0f\x9f"] {
            assert!(kv.get(TreeId::Ns, key).unwrap().is_some(), "{key:?} lost");
        }
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
