//! The namespace as stored in the state database.
//!
//! Keys of the `Ns` tree (all integers big-endian so that keys sort):
//!
//! | key | value | meaning |
//! |---|---|---|
//! | `d` parent name | child, kind | directory entry |
//! | `b` child parent name | – | back reference: the names of an inode |
//! | `i` ino | [`InodeRecord`] | kind, placement, subdirectory count |
//! | `j` ino | [`JournalEntry`] | a migration in progress |
//! | `c` ino | – | the inode has a cached SSD copy |
//! | `k` ino | [`BackingId`] | that copy's backing identity |
//! | `s` ino | JSON | per-directory (or per-file) settings |
//! | `m` name | bytes | schema version, clean-shutdown flag |
//!
//! Every value starts with a format version byte.

use super::cache::ReadCache;
use super::{prefix_end, Kv, Op, TreeId};
use crate::error::{Error, Result};
use crate::store::{FileKind, TimeSpec};
use crate::tier::{Placement, Tier};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A tierfs inode number. Stable across remounts, renames and migrations.
pub type Ino = u64;
/// The root directory.
pub const ROOT_INO: Ino = 1;
/// Version of the state schema written by this build: 2 added the backing
/// identities to journal entries, 3 those of cached copies (`k`) and of
/// split files' HDD files (the extent map's file keys, format 2, which an
/// older build cannot read). A database of an older schema is read (and
/// marked with this one); one of a newer schema is refused.
pub const SCHEMA_VERSION: u32 = 3;
const REC_V1: u8 = 1;
/// Journal entries with the backing identities of their copies.
const JOURNAL_V2: u8 = 2;

/// What the state database knows about one inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InodeRecord {
    /// File type.
    pub kind: FileKind,
    /// Where a non-directory's data lives (directories: unused).
    pub placement: Placement,
    /// For directories: how many subdirectories it has (nlink = 2 + this).
    pub subdirs: u32,
    /// After a migration the backing file has a new ctime; until the file is
    /// changed again tierfs reports the ctime it had before.
    pub ctime_fix: Option<CtimeFix>,
}

/// See [`InodeRecord::ctime_fix`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtimeFix {
    /// The backing file's ctime right after the migration.
    pub backing: TimeSpec,
    /// The ctime to report while the backing ctime is still `backing`.
    pub logical: TimeSpec,
}

impl InodeRecord {
    /// A record for a new inode.
    pub fn new(kind: FileKind, placement: Placement) -> Self {
        InodeRecord { kind, placement, subdirs: 0, ctime_fix: None }
    }
}

/// What a journaled migration does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JournalOp {
    /// Move the only copy from one tier to the other.
    Move {
        /// Source tier.
        from: Tier,
        /// Destination tier.
        to: Tier,
    },
    /// Add a clean SSD copy of an HDD file.
    Copy,
    /// Remove the SSD copy of a cached file.
    DropCopy,
}

/// How far a journaled migration got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JournalState {
    /// The target names may exist; the placement is not committed. Recovery
    /// rolls back: it removes the target names.
    Prepared,
    /// The placement is committed; the source names may still exist.
    /// Recovery rolls forward: it removes the source names.
    Committed,
}

/// Which backing object a name on a tier must be for recovery to remove it:
/// the backing file system's device and inode number.
pub type BackingId = (u64, u64);

/// One migration in progress, written before the first name appears on
/// the target tier and removed after the source is gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalEntry {
    /// The inode moving.
    pub ino: Ino,
    /// What is done.
    pub op: JournalOp,
    /// How far it got.
    pub state: JournalState,
    /// Every name of the inode: (parent directory, name).
    pub links: Vec<(Ino, OsString)>,
    /// The copy that rolling forward removes (the source of a move, the SSD
    /// copy of a dropped cache copy). `None` in entries of older builds.
    pub source: Option<BackingId>,
    /// The copy that rolling back removes (the staged target).
    pub target: Option<BackingId>,
}

struct Enc(Vec<u8>);
impl Enc {
    fn new() -> Self {
        Enc(vec![REC_V1])
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn ts(&mut self, t: TimeSpec) -> &mut Self {
        self.u64(t.sec as u64).u64(t.nsec as u64)
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
        self
    }
}

/// A cursor over a stored value.
pub(crate) struct Dec<'a> {
    b: &'a [u8],
    what: &'static str,
}
impl<'a> Dec<'a> {
    pub(crate) fn new(b: &'a [u8], what: &'static str) -> Result<Self> {
        Ok(Self::versioned(b, what, &[REC_V1])?.0)
    }
    /// A cursor over a value written in one of `versions`, and its version.
    fn versioned(b: &'a [u8], what: &'static str, versions: &[u8]) -> Result<(Self, u8)> {
        match b.split_first() {
            Some((v, rest)) if versions.contains(v) => Ok((Dec { b: rest, what }, *v)),
            Some((v, _)) => Err(Error::Corrupt(format!("{what}: unknown format version {v}"))),
            None => Err(Error::Corrupt(format!("{what}: empty value"))),
        }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.b.len() < n {
            return Err(Error::Corrupt(format!("{}: truncated value", self.what)));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    pub(crate) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn ts(&mut self) -> Result<TimeSpec> {
        Ok(TimeSpec { sec: self.u64()? as i64, nsec: self.u64()? as i64 })
    }
    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn bad(&self, what: &str) -> Error {
        Error::Corrupt(format!("{}: bad {what}", self.what))
    }
}

fn encode_record(r: &InodeRecord) -> Vec<u8> {
    let mut e = Enc::new();
    e.u8(r.kind.encode()).u8(r.placement.encode()).u32(r.subdirs);
    match r.ctime_fix {
        None => {
            e.u8(0);
        }
        Some(f) => {
            e.u8(1).ts(f.backing).ts(f.logical);
        }
    }
    e.0
}

fn decode_record(b: &[u8]) -> Result<InodeRecord> {
    let mut d = Dec::new(b, "inode record")?;
    let kind = FileKind::decode(d.u8()?).ok_or_else(|| d.bad("kind"))?;
    let placement = Placement::decode(d.u8()?).ok_or_else(|| d.bad("placement"))?;
    let subdirs = d.u32()?;
    let ctime_fix = match d.u8()? {
        0 => None,
        _ => Some(CtimeFix { backing: d.ts()?, logical: d.ts()? }),
    };
    Ok(InodeRecord { kind, placement, subdirs, ctime_fix })
}

fn encode_tier(t: Tier) -> u8 {
    t as u8
}
fn decode_tier(v: u8) -> Option<Tier> {
    match v {
        0 => Some(Tier::Ssd),
        1 => Some(Tier::Hdd),
        _ => None,
    }
}

fn encode_journal(j: &JournalEntry) -> Vec<u8> {
    let mut e = Enc(vec![JOURNAL_V2]);
    match j.op {
        JournalOp::Move { from, to } => {
            e.u8(0).u8(encode_tier(from)).u8(encode_tier(to));
        }
        JournalOp::Copy => {
            e.u8(1);
        }
        JournalOp::DropCopy => {
            e.u8(2);
        }
    }
    e.u8(match j.state {
        JournalState::Prepared => 0,
        JournalState::Committed => 1,
    });
    e.u32(j.links.len() as u32);
    for (p, n) in &j.links {
        e.u64(*p).bytes(n.as_bytes());
    }
    for id in [j.source, j.target] {
        match id {
            None => {
                e.u8(0);
            }
            Some((dev, ino)) => {
                e.u8(1).u64(dev).u64(ino);
            }
        }
    }
    e.0
}

fn decode_journal(ino: Ino, b: &[u8]) -> Result<JournalEntry> {
    let (mut d, version) = Dec::versioned(b, "journal entry", &[REC_V1, JOURNAL_V2])?;
    let op = match d.u8()? {
        0 => {
            let from = decode_tier(d.u8()?).ok_or_else(|| d.bad("tier"))?;
            let to = decode_tier(d.u8()?).ok_or_else(|| d.bad("tier"))?;
            JournalOp::Move { from, to }
        }
        1 => JournalOp::Copy,
        2 => JournalOp::DropCopy,
        _ => return Err(d.bad("operation")),
    };
    let state = match d.u8()? {
        0 => JournalState::Prepared,
        1 => JournalState::Committed,
        _ => return Err(d.bad("state")),
    };
    let n = d.u32()?;
    let mut links = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let p = d.u64()?;
        links.push((p, OsString::from_vec(d.bytes()?.to_vec())));
    }
    let mut ids = [None, None];
    if version == JOURNAL_V2 {
        for id in &mut ids {
            if d.u8()? != 0 {
                *id = Some((d.u64()?, d.u64()?));
            }
        }
    }
    Ok(JournalEntry { ino, op, state, links, source: ids[0], target: ids[1] })
}

/// A backing identity as stored (`k` keys, the extent map's file keys):
/// a format byte, the device and the inode number.
pub(crate) fn encode_backing_id((dev, ino): BackingId) -> Vec<u8> {
    let mut e = Enc::new();
    e.u64(dev).u64(ino);
    e.0
}

/// The backing identity stored by [`encode_backing_id`].
pub(crate) fn decode_backing_id(b: &[u8], what: &'static str) -> Result<BackingId> {
    let mut d = Dec::new(b, what)?;
    Ok((d.u64()?, d.u64()?))
}

/// A key of the `ns` tree: a tag byte and an inode number, big-endian.
pub(crate) fn key(tag: u8, ino: Ino) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(tag);
    k.extend_from_slice(&ino.to_be_bytes());
    k
}

fn dentry_key(parent: Ino, name: &OsStr) -> Vec<u8> {
    let mut k = key(b'd', parent);
    k.extend_from_slice(name.as_bytes());
    k
}

fn backref_key(child: Ino, parent: Ino, name: &OsStr) -> Vec<u8> {
    let mut k = key(b'b', child);
    k.extend_from_slice(&parent.to_be_bytes());
    k.extend_from_slice(name.as_bytes());
    k
}

/// The big-endian number at `at` of a key or value.
pub(crate) fn ino_at(b: &[u8], at: usize) -> Result<Ino> {
    b.get(at..at + 8)
        .map(|s| u64::from_be_bytes(s.try_into().expect("8 bytes")))
        .ok_or_else(|| Error::Corrupt("short key or value".into()))
}

/// A directory entry from its key and value.
fn decode_dentry(k: &[u8], v: &[u8]) -> Result<Dentry> {
    let kind =
        v.get(8).and_then(|k| FileKind::decode(*k)).ok_or_else(|| Error::Corrupt("directory entry kind".into()))?;
    let name = k.get(9..).ok_or_else(|| Error::Corrupt("short directory entry key".into()))?;
    Ok(Dentry { name: OsString::from_vec(name.to_vec()), ino: ino_at(v, 0)?, kind })
}

/// One entry of a directory, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dentry {
    /// Entry name.
    pub name: OsString,
    /// Inode it names.
    pub ino: Ino,
    /// Its kind.
    pub kind: FileKind,
}

/// Typed access to the namespace tree.
#[derive(Clone)]
pub struct Namespace {
    kv: Arc<dyn Kv>,
    /// Per stripe of inodes, how many commits added, and removed, names in
    /// or of a directory of the stripe (see [`Namespace::names_changed`]).
    names_added: Arc<[AtomicU64; NAME_STRIPES]>,
    names_removed: Arc<[AtomicU64; NAME_STRIPES]>,
    /// What the hottest reads found (see [`super::cache`]); `commit` drops
    /// what it writes.
    cache: Arc<NsCache>,
}

/// The namespace's read caches.
struct NsCache {
    /// `i` keys: inode records.
    records: ReadCache<Ino, Option<InodeRecord>>,
    /// `d` keys (the whole key): directory entries, and absent names.
    entries: ReadCache<Vec<u8>, Option<(Ino, FileKind)>>,
    /// The `b` keys of an inode: its names, in key order.
    links: ReadCache<Ino, Arc<[(Ino, OsString)]>>,
}

/// Entries each of the namespace's caches holds at most: some megabytes.
const CACHE_ENTRIES: usize = 32 * 1024;
/// The most names of one inode its cache entry holds (a file with more is
/// read from the database each time: its entry would be large).
const CACHE_NAMES_MAX: usize = 64;

/// What a commit's write makes the caches drop.
enum Written {
    Record(Ino),
    Entry(Vec<u8>),
    Names(Ino),
}

impl Written {
    /// What a write of key `k` changes in the caches, if anything.
    fn of(k: &[u8]) -> Option<Written> {
        match k.first() {
            Some(b'i') => ino_at(k, 1).ok().map(Written::Record),
            Some(b'd') => Some(Written::Entry(k.to_vec())),
            Some(b'b') => ino_at(k, 1).ok().map(Written::Names),
            _ => None,
        }
    }
}

impl NsCache {
    /// Drops what a write changed.
    fn drop_written(&self, w: &Written) {
        match w {
            Written::Record(ino) => self.records.drop_key(ino),
            Written::Entry(k) => self.entries.drop_key(k.as_slice()),
            Written::Names(ino) => self.links.drop_key(ino),
        }
    }
}

/// How many commits added and removed names in or of a directory (see
/// [`Namespace::names_changed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NameChanges {
    /// Commits that added a name.
    pub added: u64,
    /// Commits that removed a name.
    pub removed: u64,
}

/// Stripes of [`Namespace::names_changed`]: two directories share one
/// rarely, and then only read their listings again more often.
pub(crate) const NAME_STRIPES: usize = 1024;

impl std::fmt::Debug for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Namespace")
    }
}

impl Namespace {
    /// Wraps a key-value store.
    pub fn new(kv: Arc<dyn Kv>) -> Self {
        let counters = || Arc::new(std::array::from_fn(|_| AtomicU64::new(0)));
        let cache = NsCache {
            records: ReadCache::new(CACHE_ENTRIES),
            entries: ReadCache::new(CACHE_ENTRIES),
            links: ReadCache::new(CACHE_ENTRIES),
        };
        Namespace { kv, names_added: counters(), names_removed: counters(), cache: Arc::new(cache) }
    }

    /// Counters that move (after the commit) with every commit that adds,
    /// or removes, a name in directory `dir` or a name of `dir` itself (its
    /// `..` may be another then). Read before the names, an unchanged
    /// counter says no name was added (removed) since.
    pub fn names_changed(&self, dir: Ino) -> NameChanges {
        let i = dir as usize % NAME_STRIPES;
        NameChanges {
            added: self.names_added[i].load(Ordering::SeqCst),
            removed: self.names_removed[i].load(Ordering::SeqCst),
        }
    }

    /// The underlying store. Writers through it must leave the `i`, `d`
    /// and `b` keys alone: only [`Namespace::commit`] keeps the caches in
    /// step with them.
    pub fn kv(&self) -> &Arc<dyn Kv> {
        &self.kv
    }

    /// Looks up a directory entry.
    pub fn lookup(&self, parent: Ino, name: &OsStr) -> Result<Option<(Ino, FileKind)>> {
        let k = dentry_key(parent, name);
        self.cache.entries.get_or_read(k.as_slice(), || match self.kv.get(TreeId::Ns, &k)? {
            None => Ok(None),
            Some(v) => {
                let ino = ino_at(&v, 0)?;
                let kind = v
                    .get(8)
                    .and_then(|k| FileKind::decode(*k))
                    .ok_or_else(|| Error::Corrupt("directory entry kind".into()))?;
                Ok(Some((ino, kind)))
            }
        })
    }

    /// Reads an inode record.
    pub fn record(&self, ino: Ino) -> Result<Option<InodeRecord>> {
        self.cache
            .records
            .get_or_read(&ino, || self.kv.get(TreeId::Ns, &key(b'i', ino))?.map(|v| decode_record(&v)).transpose())
    }

    /// The entries of a directory, sorted by name.
    pub fn children(&self, parent: Ino) -> Result<Vec<Dentry>> {
        self.kv.scan(TreeId::Ns, &key(b'd', parent))?.into_iter().map(|(k, v)| decode_dentry(&k, &v)).collect()
    }

    /// Up to `limit` entries of a directory after the name `after` (from
    /// the first with `None`), sorted by name.
    pub fn children_after(&self, parent: Ino, after: Option<&OsStr>, limit: usize) -> Result<Vec<Dentry>> {
        let prefix = key(b'd', parent);
        let start = match after {
            // The smallest key after `after`'s own.
            Some(name) => {
                let mut k = dentry_key(parent, name);
                k.push(0);
                k
            }
            None => prefix.clone(),
        };
        self.kv
            .range(TreeId::Ns, &start, &prefix_end(&prefix), limit)?
            .into_iter()
            .map(|(k, v)| decode_dentry(&k, &v))
            .collect()
    }

    /// True if the directory has any entry.
    pub fn has_children(&self, parent: Ino) -> Result<bool> {
        self.kv.any_with_prefix(TreeId::Ns, &key(b'd', parent))
    }

    /// Every (parent, name) naming `ino`.
    pub fn links(&self, ino: Ino) -> Result<Vec<(Ino, OsString)>> {
        Ok(self.names_of(ino)?.to_vec())
    }

    /// The names of `ino` as cached: every (parent, name), in key order.
    fn names_of(&self, ino: Ino) -> Result<Arc<[(Ino, OsString)]>> {
        let read = || {
            let mut names = Vec::new();
            let mut bad = None;
            self.kv.for_each(TreeId::Ns, &key(b'b', ino), &mut |k, _| match (ino_at(k, 9), k.get(17..)) {
                (Ok(p), Some(n)) => names.push((p, OsString::from_vec(n.to_vec()))),
                _ => bad = Some(Error::Corrupt("short back reference key".into())),
            })?;
            match bad {
                Some(e) => Err(e),
                None => Ok(names.into()),
            }
        };
        self.cache.links.get_or_read_keeping(&ino, read, |names| names.len() <= CACHE_NAMES_MAX)
    }

    /// How many (parent, name) name `ino`.
    pub fn link_count(&self, ino: Ino) -> Result<u64> {
        Ok(self.names_of(ino)?.len() as u64)
    }

    /// One (parent, name) naming `ino`, if any (the first in key order).
    pub fn first_link(&self, ino: Ino) -> Result<Option<(Ino, OsString)>> {
        Ok(self.names_of(ino)?.first().cloned())
    }

    /// All journal entries.
    pub fn journal(&self) -> Result<Vec<JournalEntry>> {
        self.kv.scan(TreeId::Ns, b"j")?.into_iter().map(|(k, v)| decode_journal(ino_at(&k, 1)?, &v)).collect()
    }

    /// The journal entry of one inode.
    pub fn journal_of(&self, ino: Ino) -> Result<Option<JournalEntry>> {
        self.kv.get(TreeId::Ns, &key(b'j', ino))?.map(|v| decode_journal(ino, &v)).transpose()
    }

    /// Every inode with a cached SSD copy.
    pub fn cached(&self) -> Result<Vec<Ino>> {
        self.kv.scan(TreeId::Ns, b"c")?.into_iter().map(|(k, _)| ino_at(&k, 1)).collect()
    }

    /// The backing identity of the SSD copy of cached file `ino`, as its
    /// making recorded it (`None`: made by an older build).
    pub fn copy_id(&self, ino: Ino) -> Result<Option<BackingId>> {
        self.kv.get(TreeId::Ns, &key(b'k', ino))?.map(|v| decode_backing_id(&v, "cached copy")).transpose()
    }

    /// Calls `f` with every inode record, in inode order, without holding
    /// them all (for audits and the accounting at mount: a million records
    /// as one list took 200 MB). Stops at the first undecodable record.
    pub fn for_each_record(&self, f: &mut dyn FnMut(Ino, InodeRecord)) -> Result<()> {
        let mut bad = None;
        self.kv.for_each(TreeId::Ns, b"i", &mut |k, v| {
            if bad.is_some() {
                return;
            }
            match ino_at(k, 1).and_then(|ino| Ok((ino, decode_record(v)?))) {
                Ok((ino, r)) => f(ino, r),
                Err(e) => bad = Some(e),
            }
        })?;
        bad.map_or(Ok(()), Err)
    }

    /// Raw settings stored for an inode.
    pub fn settings(&self, ino: Ino) -> Result<Option<Vec<u8>>> {
        self.kv.get(TreeId::Ns, &key(b's', ino))
    }

    /// Every inode with settings.
    pub fn all_settings(&self) -> Result<Vec<(Ino, Vec<u8>)>> {
        self.kv.scan(TreeId::Ns, b"s")?.into_iter().map(|(k, v)| Ok((ino_at(&k, 1)?, v))).collect()
    }

    /// True if directory `dir` was reconciled with a listing of its HDD
    /// copy in some mount (`Batch::put_hdd_listed`): from then on every
    /// change of its names made through tierfs is in the database, and the
    /// quiet HDD mode takes its HDD names from there.
    pub fn hdd_listed(&self, dir: Ino) -> Result<bool> {
        Ok(self.kv.get(TreeId::Ns, &key(b'r', dir))?.is_some())
    }

    /// A metadata value.
    pub fn meta(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let mut k = vec![b'm'];
        k.extend_from_slice(name.as_bytes());
        self.kv.get(TreeId::Ns, &k)
    }

    /// A fresh inode number.
    pub fn alloc_ino(&self) -> Result<Ino> {
        // sled's ids start at 0; 0 and 1 (root) are reserved.
        Ok(self.kv.next_id()? + 2)
    }

    /// Starts an atomic batch.
    pub fn batch(&self) -> Batch {
        Batch::default()
    }

    /// Applies a batch atomically; with `durable`, also flushes.
    pub fn commit(&self, b: Batch, durable: bool) -> Result<()> {
        if !b.ops.is_empty() {
            // What the caches may hold, to drop once it is written.
            let written: Vec<Written> = b
                .ops
                .iter()
                .filter_map(|op| match op {
                    Op::Put(k, _) | Op::Del(k) => Written::of(k),
                })
                .collect();
            // A new inode whose record, name and directory entry the batch
            // writes just once (by `Batch::create`) is known to the caches
            // from the batch.
            let seeds: Vec<_> = b
                .made
                .into_iter()
                .filter_map(|(ino, rec, parent, name)| {
                    let entry = dentry_key(parent, &name);
                    let count = |f: &dyn Fn(&Written) -> bool| written.iter().filter(|w| f(w)).count();
                    let once = count(&|w| matches!(w, Written::Record(x) if *x == ino)) == 1
                        && count(&|w| matches!(w, Written::Names(x) if *x == ino)) == 1
                        && count(&|w| matches!(w, Written::Entry(k) if *k == entry)) == 1;
                    once.then_some((ino, rec, parent, name, entry))
                })
                .collect();
            // Moved even if the apply fails: it may have applied in part.
            let r = self.kv.apply(TreeId::Ns, b.ops);
            // Dropped before the name counters move: a reader that sees
            // them moved reads the new names.
            for w in &written {
                self.cache.drop_written(w);
            }
            if r.is_ok() {
                for (ino, rec, parent, name, entry) in seeds {
                    self.cache.records.put(ino, Some(rec));
                    self.cache.entries.put(entry, Some((ino, rec.kind)));
                    self.cache.links.put(ino, Arc::from([(parent, name)]));
                }
            }
            for ino in b.added_to {
                self.names_added[ino as usize % NAME_STRIPES].fetch_add(1, Ordering::SeqCst);
            }
            for ino in b.removed_from {
                self.names_removed[ino as usize % NAME_STRIPES].fetch_add(1, Ordering::SeqCst);
            }
            r?;
        }
        if durable {
            self.kv.flush()?;
        }
        Ok(())
    }
}

/// Writes that are applied together by [`Namespace::commit`].
#[derive(Debug, Default)]
pub struct Batch {
    ops: Vec<Op>,
    /// The parents and children of the names added.
    added_to: Vec<Ino>,
    /// The parents and children of the names removed.
    removed_from: Vec<Ino>,
    /// Inodes the batch makes ([`Batch::create`]): their record and name,
    /// known to the caches once the batch is applied.
    made: Vec<(Ino, InodeRecord, Ino, OsString)>,
}

impl Batch {
    /// Adds a directory entry and its back reference.
    pub fn link(&mut self, parent: Ino, name: &OsStr, child: Ino, kind: FileKind) -> &mut Self {
        let mut v = child.to_be_bytes().to_vec();
        v.push(kind.encode());
        self.ops.push(Op::Put(dentry_key(parent, name), v));
        self.ops.push(Op::Put(backref_key(child, parent, name), Vec::new()));
        self.added_to.extend([parent, child]);
        self
    }
    /// Removes a directory entry and its back reference.
    pub fn unlink(&mut self, parent: Ino, name: &OsStr, child: Ino) -> &mut Self {
        self.ops.push(Op::Del(dentry_key(parent, name)));
        self.ops.push(Op::Del(backref_key(child, parent, name)));
        self.removed_from.extend([parent, child]);
        self
    }
    /// Names a new inode `child` `name` in `parent` and writes its record;
    /// the commit then puts the record, the name and the directory entry
    /// in the caches, without a database read.
    /// For a caller that holds `parent`'s directory stripe from before the
    /// commit until it returns, with `child` just allocated: nothing else
    /// can write `child`'s record or names meanwhile (a link needs a name
    /// of it, which is in that directory, and the kernel keeps the
    /// directory locked while it creates; a migration takes the stripes of
    /// every directory of the file; the engine learns of the file from the
    /// create event sent after the stripe is released).
    pub fn create(&mut self, parent: Ino, name: &OsStr, child: Ino, r: &InodeRecord) -> &mut Self {
        self.link(parent, name, child, r.kind);
        // As put_record, less the delete of a cached-copy mark a new
        // inode cannot have.
        self.ops.push(Op::Put(key(b'i', child), encode_record(r)));
        if r.placement == Placement::Cached && r.kind != FileKind::Dir {
            self.ops.push(Op::Put(key(b'c', child), Vec::new()));
        }
        self.made.push((child, *r, parent, name.to_os_string()));
        self
    }

    /// Writes an inode record (and keeps the cached-copy index in step).
    pub fn put_record(&mut self, ino: Ino, r: &InodeRecord) -> &mut Self {
        self.ops.push(Op::Put(key(b'i', ino), encode_record(r)));
        if r.placement == Placement::Cached && r.kind != FileKind::Dir {
            self.ops.push(Op::Put(key(b'c', ino), Vec::new()));
        } else {
            self.ops.push(Op::Del(key(b'c', ino)));
            self.ops.push(Op::Del(key(b'k', ino)));
        }
        self
    }

    /// Records the backing identity of the SSD copy of `ino` (with the
    /// record that makes the file cached): recovery removes only that
    /// object under the file's names.
    pub fn put_copy_id(&mut self, ino: Ino, id: BackingId) -> &mut Self {
        self.ops.push(Op::Put(key(b'k', ino), encode_backing_id(id)));
        self
    }

    /// How many names of `ino` the batch adds, less those it removes.
    pub fn names_delta(&self, ino: Ino) -> i64 {
        let prefix = key(b'b', ino);
        self.ops
            .iter()
            .map(|op| match op {
                Op::Put(k, _) if k.starts_with(&prefix) => 1,
                Op::Del(k) if k.starts_with(&prefix) => -1,
                _ => 0,
            })
            .sum()
    }

    /// What the batch, applied, does to the record of `ino`: `Some(true)`
    /// if its last write of it is a put, `Some(false)` a delete, `None`
    /// if it does not write it.
    pub fn record_op(&self, ino: Ino) -> Option<bool> {
        let k = key(b'i', ino);
        self.ops.iter().rev().find_map(|op| match op {
            Op::Put(x, _) if *x == k => Some(true),
            Op::Del(x) if *x == k => Some(false),
            _ => None,
        })
    }

    /// Marks directory `dir` as reconciled with its HDD copy listed (see
    /// [`Namespace::hdd_listed`]).
    pub fn put_hdd_listed(&mut self, dir: Ino) -> &mut Self {
        self.ops.push(Op::Put(key(b'r', dir), vec![1]));
        self
    }

    /// Removes an inode record and its settings.
    pub fn del_record(&mut self, ino: Ino) -> &mut Self {
        self.ops.push(Op::Del(key(b'r', ino)));
        self.ops.push(Op::Del(key(b'i', ino)));
        self.ops.push(Op::Del(key(b'c', ino)));
        self.ops.push(Op::Del(key(b'k', ino)));
        self.ops.push(Op::Del(key(b's', ino)));
        self
    }
    /// Writes a journal entry.
    pub fn put_journal(&mut self, j: &JournalEntry) -> &mut Self {
        self.ops.push(Op::Put(key(b'j', j.ino), encode_journal(j)));
        self
    }
    /// Removes a journal entry.
    pub fn del_journal(&mut self, ino: Ino) -> &mut Self {
        self.ops.push(Op::Del(key(b'j', ino)));
        self
    }
    /// Writes settings.
    pub fn put_settings(&mut self, ino: Ino, v: Vec<u8>) -> &mut Self {
        self.ops.push(Op::Put(key(b's', ino), v));
        self
    }
    /// Removes settings.
    pub fn del_settings(&mut self, ino: Ino) -> &mut Self {
        self.ops.push(Op::Del(key(b's', ino)));
        self
    }
    /// Writes a metadata value.
    pub fn put_meta(&mut self, name: &str, v: Vec<u8>) -> &mut Self {
        let mut k = vec![b'm'];
        k.extend_from_slice(name.as_bytes());
        self.ops.push(Op::Put(k, v));
        self
    }
    /// True if nothing was added.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
    /// How many writes were added.
    pub fn len(&self) -> usize {
        self.ops.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::MemKv;

    fn ns() -> Namespace {
        Namespace::new(Arc::new(MemKv::new()))
    }

    #[test]
    fn entries_backrefs_and_records() {
        let ns = ns();
        let mut b = ns.batch();
        b.link(ROOT_INO, OsStr::new("a"), 5, FileKind::File)
            .link(ROOT_INO, OsStr::new("b"), 5, FileKind::File)
            .put_record(5, &InodeRecord::new(FileKind::File, Placement::Cached));
        ns.commit(b, false).unwrap();
        assert_eq!(ns.lookup(ROOT_INO, OsStr::new("a")).unwrap(), Some((5, FileKind::File)));
        assert_eq!(ns.links(5).unwrap().len(), 2);
        assert_eq!(ns.cached().unwrap(), vec![5]);
        assert_eq!(ns.children(ROOT_INO).unwrap().len(), 2);
        let mut b = ns.batch();
        b.unlink(ROOT_INO, OsStr::new("a"), 5)
            .put_record(5, &InodeRecord::new(FileKind::File, Placement::On(Tier::Ssd)));
        ns.commit(b, false).unwrap();
        assert_eq!(ns.first_link(5).unwrap(), Some((ROOT_INO, OsString::from("b"))));
        assert!(ns.cached().unwrap().is_empty());
        assert!(ns.has_children(ROOT_INO).unwrap());
        assert!(!ns.has_children(5).unwrap());
    }

    #[test]
    fn records_and_journal_roundtrip() {
        let r = InodeRecord {
            kind: FileKind::Dir,
            placement: Placement::On(Tier::Hdd),
            subdirs: 7,
            ctime_fix: Some(CtimeFix { backing: TimeSpec { sec: 5, nsec: 6 }, logical: TimeSpec { sec: 1, nsec: 2 } }),
        };
        assert_eq!(decode_record(&encode_record(&r)).unwrap(), r);
        let j = JournalEntry {
            ino: 9,
            op: JournalOp::Move { from: Tier::Hdd, to: Tier::Ssd },
            state: JournalState::Committed,
            links: vec![(1, OsString::from("x")), (4, OsString::from("y z"))],
            source: Some((7, 123)),
            target: None,
        };
        assert_eq!(decode_journal(9, &encode_journal(&j)).unwrap(), j);
        // An entry of an older build (format 1, no identities) still reads.
        let mut v1 = encode_journal(&j);
        v1[0] = REC_V1;
        v1.truncate(v1.len() - 1 - 17);
        assert_eq!(decode_journal(9, &v1).unwrap(), JournalEntry { source: None, target: None, ..j });
        assert!(decode_record(&[9, 1, 2]).is_err());
        assert!(decode_record(&[REC_V1, 1]).is_err());
    }

    /// A store that counts its reads, around a `MemKv`.
    struct Counting(MemKv, AtomicU64);

    impl Kv for Counting {
        fn get(&self, tree: TreeId, key: &[u8]) -> Result<Option<Vec<u8>>> {
            self.1.fetch_add(1, Ordering::SeqCst);
            self.0.get(tree, key)
        }
        fn apply(&self, tree: TreeId, ops: Vec<Op>) -> Result<()> {
            self.0.apply(tree, ops)
        }
        fn scan(&self, tree: TreeId, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
            self.1.fetch_add(1, Ordering::SeqCst);
            self.0.scan(tree, prefix)
        }
        fn range(&self, tree: TreeId, start: &[u8], end: &[u8], limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
            self.1.fetch_add(1, Ordering::SeqCst);
            self.0.range(tree, start, end, limit)
        }
        fn for_each(&self, tree: TreeId, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8])) -> Result<()> {
            self.1.fetch_add(1, Ordering::SeqCst);
            self.0.for_each(tree, prefix, f)
        }
        fn any_with_prefix(&self, tree: TreeId, prefix: &[u8]) -> Result<bool> {
            self.1.fetch_add(1, Ordering::SeqCst);
            self.0.any_with_prefix(tree, prefix)
        }
        fn flush(&self) -> Result<()> {
            self.0.flush()
        }
        fn next_id(&self) -> Result<u64> {
            self.0.next_id()
        }
    }

    #[test]
    fn a_new_inode_is_answered_without_reading_the_database_and_a_change_is_read_again() {
        let kv = Arc::new(Counting(MemKv::new(), AtomicU64::new(0)));
        let ns = Namespace::new(kv.clone());
        let reads = || kv.1.load(Ordering::SeqCst);
        let rec = InodeRecord::new(FileKind::File, Placement::On(Tier::Hdd));
        let mut b = ns.batch();
        b.create(ROOT_INO, OsStr::new("f"), 9, &rec);
        ns.commit(b, false).unwrap();
        let before = reads();
        assert_eq!(ns.record(9).unwrap(), Some(rec));
        assert_eq!(ns.link_count(9).unwrap(), 1);
        assert_eq!(ns.first_link(9).unwrap(), Some((ROOT_INO, OsString::from("f"))));
        assert_eq!(ns.lookup(ROOT_INO, OsStr::new("f")).unwrap(), Some((9, FileKind::File)));
        assert_eq!(reads(), before, "what create wrote is known");
        assert_eq!(ns.lookup(ROOT_INO, OsStr::new("e")).unwrap(), None);
        assert_eq!(ns.lookup(ROOT_INO, OsStr::new("e")).unwrap(), None);
        assert_eq!(reads(), before + 1, "an absent name is read once");
        let mut b = ns.batch();
        b.link(ROOT_INO, OsStr::new("g"), 9, FileKind::File);
        ns.commit(b, false).unwrap();
        assert_eq!(ns.link_count(9).unwrap(), 2, "a commit drops what it changes");
        let mut b = ns.batch();
        b.unlink(ROOT_INO, OsStr::new("f"), 9).unlink(ROOT_INO, OsStr::new("g"), 9).del_record(9);
        ns.commit(b, false).unwrap();
        assert_eq!(ns.link_count(9).unwrap(), 0);
        assert_eq!(ns.record(9).unwrap(), None);
        assert_eq!(ns.lookup(ROOT_INO, OsStr::new("f")).unwrap(), None);
        // A batch that names a new inode twice is read back, not seeded
        // with the first name only.
        let mut b = ns.batch();
        b.create(ROOT_INO, OsStr::new("h"), 10, &rec).link(ROOT_INO, OsStr::new("i"), 10, FileKind::File);
        ns.commit(b, false).unwrap();
        assert_eq!(ns.link_count(10).unwrap(), 2);
    }

    /// One step of [`the_cached_reads_answer_what_was_committed`].
    #[derive(Clone, Debug)]
    enum Step {
        Create(usize, usize),
        Link(usize, usize),
        Unlink(usize),
        Place(usize, bool),
        Read(usize, usize),
    }

    use proptest::prelude::*;

    proptest::proptest! {
        /// Against a model (names and records in maps), with reads between
        /// the commits that fill the caches: every read answers what the
        /// last commit left.
        #[test]
        fn the_cached_reads_answer_what_was_committed(steps in proptest::collection::vec(
            proptest::prop_oneof![
                (0usize..4, 0usize..4).prop_map(|(n, i)| Step::Create(n, i)),
                (0usize..4, 0usize..4).prop_map(|(n, i)| Step::Link(n, i)),
                (0usize..4).prop_map(Step::Unlink),
                (0usize..4, proptest::bool::ANY).prop_map(|(i, c)| Step::Place(i, c)),
                (0usize..4, 0usize..4).prop_map(|(n, i)| Step::Read(n, i)),
            ],
            1..80,
        )) {
            use std::collections::BTreeMap;
            let ns = ns();
            let names = ["a", "b", "c", "d"];
            let inos: [Ino; 4] = [10, 11, 12, 13];
            let mut entries: BTreeMap<&str, Ino> = BTreeMap::new();
            let mut records: BTreeMap<Ino, InodeRecord> = BTreeMap::new();
            for step in steps {
                let mut b = ns.batch();
                match step {
                    Step::Create(n, i) if !entries.contains_key(names[n]) && !records.contains_key(&inos[i]) => {
                        let r = InodeRecord::new(FileKind::File, Placement::On(Tier::Hdd));
                        b.create(ROOT_INO, OsStr::new(names[n]), inos[i], &r);
                        entries.insert(names[n], inos[i]);
                        records.insert(inos[i], r);
                    }
                    Step::Link(n, i) if !entries.contains_key(names[n]) && records.contains_key(&inos[i]) => {
                        b.link(ROOT_INO, OsStr::new(names[n]), inos[i], FileKind::File);
                        entries.insert(names[n], inos[i]);
                    }
                    Step::Unlink(n) => {
                        if let Some(ino) = entries.remove(names[n]) {
                            b.unlink(ROOT_INO, OsStr::new(names[n]), ino);
                            if !entries.values().any(|&x| x == ino) {
                                b.del_record(ino);
                                records.remove(&ino);
                            }
                        }
                    }
                    Step::Place(i, cached) if records.contains_key(&inos[i]) => {
                        let r = InodeRecord::new(FileKind::File, if cached { Placement::Cached } else { Placement::On(Tier::Ssd) });
                        b.put_record(inos[i], &r);
                        records.insert(inos[i], r);
                    }
                    _ => {}
                }
                ns.commit(b, false).unwrap();
                let (n, i) = match step { Step::Read(n, i) | Step::Create(n, i) | Step::Link(n, i) => (n, i), Step::Unlink(n) => (n, n), Step::Place(i, _) => (i, i) };
                let ino = inos[i];
                proptest::prop_assert_eq!(ns.lookup(ROOT_INO, OsStr::new(names[n])).unwrap(), entries.get(names[n]).map(|&x| (x, FileKind::File)));
                proptest::prop_assert_eq!(ns.record(ino).unwrap(), records.get(&ino).copied());
                let want: Vec<(Ino, OsString)> = entries.iter().filter(|(_, &x)| x == ino).map(|(n, _)| (ROOT_INO, OsString::from(n))).collect();
                proptest::prop_assert_eq!(ns.link_count(ino).unwrap(), want.len() as u64);
                proptest::prop_assert_eq!(ns.first_link(ino).unwrap(), want.first().cloned());
                proptest::prop_assert_eq!(ns.links(ino).unwrap(), want);
            }
        }
    }
}
