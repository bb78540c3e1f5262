//! The file system operations of a tierfs volume, independent of FUSE.
//!
//! A [`Volume`] joins two [`Store`]s (SSD and HDD) and the state database
//! into one namespace. The state database is authoritative for names,
//! inode numbers and placement; the stores hold data and attributes.
//! `tierfs-fuse` turns kernel requests into calls of these methods; tests
//! call them directly, over in-memory stores.
//!
//! Invariants (see ARCHITECTURE.md):
//! - every directory exists on the meta tier; its copy there carries the
//!   directory's attributes; copies on the other tier are containers made
//!   when a file needs them;
//! - a non-directory lives on exactly the tiers its placement names, at the
//!   same relative path; hard links are kept on those tiers;
//! - `.tierfs` at the root of each tier is tierfs's own and is hidden.

mod adopt;
mod attr;
pub(crate) mod creds;
mod dir;
mod entry;
pub mod extent;
mod file;
mod locks;
mod reconcile;
mod rename;
pub mod tiers;
mod xattr;

pub use dir::{DirEntryOut, KEYED_LISTING_MAX, READDIR_BATCH};
pub(crate) use file::alloc_growth;
pub use file::{Opened, SetAttr};
pub use reconcile::Conflict;

use crate::clock::{Clock, Timestamp};
use crate::error::{err, Error, Result};
use crate::event::{Event, EventKind, EventSink};
use crate::state::ns::{Ino, InodeRecord, Namespace, ROOT_INO, SCHEMA_VERSION};
use crate::store::features::Features;
use crate::store::{FileKind, Stat, Store, Target, TimeSpec};
use crate::tier::{Placement, Tier};
use locks::{DirLocks, InodeLocks};
use parking_lot::{Mutex, RwLock};
use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tiers::{Tiers, RESERVED};

/// How file data moves between the application and the backing files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoMode {
    /// The kernel reads and writes the backing file itself (FUSE
    /// passthrough); only opens and closes reach the daemon.
    Passthrough,
    /// Every read and write goes through the daemon.
    Userspace,
}

/// The caller of an operation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ctx {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// Process id.
    pub pid: u32,
}

/// Attributes as tierfs reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    /// tierfs inode number.
    pub ino: Ino,
    /// Type.
    pub kind: FileKind,
    /// Permission bits (12 bits).
    pub perm: u16,
    /// Hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number.
    pub rdev: u32,
    /// Size.
    pub size: u64,
    /// 512-byte blocks.
    pub blocks: u64,
    /// Preferred I/O size.
    pub blksize: u32,
    /// Access time.
    pub atime: TimeSpec,
    /// Modification time.
    pub mtime: TimeSpec,
    /// Status change time.
    pub ctime: TimeSpec,
}

/// Capacity of the whole volume.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VolStats {
    /// Block size used below.
    pub bsize: u32,
    /// Total blocks.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Free blocks for unprivileged users.
    pub bavail: u64,
    /// Total inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Longest name.
    pub namelen: u32,
}

/// The kernel's caches of names, attributes and directory listings, as
/// far as tierfs changes what they hold without the kernel seeing it (a
/// migration, a reconciliation that found a backing copy gone, a moved
/// directory's `..`): the FUSE adapter tells the kernel to drop its copy.
/// Called holding no lock of the hierarchy.
pub trait KernelCache: Send + Sync {
    /// `ino`'s attributes changed.
    fn attrs_changed(&self, ino: Ino);
    /// The listing of directory `dir` changed (and its attributes).
    fn listing_changed(&self, dir: Ino);
    /// What the kernel knows of the name `name` in `parent` (an entry, or
    /// its absence) is wrong now. Called from a request that may hold the
    /// kernel's lock of `parent`: the adapter must not wait for it.
    fn entry_changed(&self, _parent: Ino, _name: &OsStr) {}
}

/// What the tiering engine tells the file system, and what it is told.
/// Every method has a neutral default so a volume works without one.
///
/// The calls that change the SSD space account are synchronous and never
/// wait, so the volume may make them while it holds its locks. Only
/// [`Hooks::wait_for_room`] and [`Hooks::evacuate`] wait, and the volume
/// calls them holding no lock at all.
pub trait Hooks: Send + Sync {
    /// The tier for a new non-directory in `parent`; `None` uses the
    /// volume's default.
    fn initial_tier(&self, _parent: Ino) -> Option<Tier> {
        None
    }
    /// Reserves `bytes` of SSD space for `ino` if they fit under the
    /// configured capacity. Never waits and never cleans.
    fn reserve_ssd(&self, _ino: Ino, _bytes: u64) -> bool {
        true
    }
    /// Reserves `bytes` for `ino` even past the capacity (the last resort
    /// before a write would fail while the SSD itself has room).
    fn force_ssd(&self, _ino: Ino, _bytes: u64) {}
    /// An operation that reserved `reserved` bytes for `ino` is over; the
    /// file's SSD copy now occupies `now` bytes (`None`: not measured, only
    /// the reservation goes back).
    fn settle_ssd(&self, _ino: Ino, _reserved: u64, _now: Option<u64>) {}
    /// `ino` takes no SSD space any more (demoted, copy dropped, or its
    /// last name removed).
    fn off_ssd(&self, _ino: Ino) {}
    /// Waits until the cleaner has made `bytes` free under the capacity
    /// (with `real`: the SSD file system itself is full, so it frees that
    /// much whatever the account says), or gave up. True if trying again
    /// is worth it. The caller holds no lock.
    fn wait_for_room(&self, _ino: Ino, _bytes: u64, _real: bool) -> bool {
        false
    }
    /// Takes `ino` off the SSD (demotes it, or drops its cached copy) in
    /// the engine's background executor, and waits for it. `None`: there is
    /// no engine, the volume does it itself. The caller holds no lock.
    fn evacuate(&self, _ino: Ino) -> Option<bool> {
        None
    }
    /// May a write of `bytes` to data of `ino` that is on the SSD go
    /// there? False when the SSD's write budget is spent: the file then
    /// leaves the SSD (see [`Hooks::evacuate`]) and the write goes to the
    /// HDD. Never waits.
    fn ssd_write_ok(&self, _ino: Ino, _bytes: u64) -> bool {
        true
    }
    /// May a write that grows `ino`, which is on the SSD, put `bytes`
    /// there? Growth can go elsewhere (the file leaves the SSD first), so
    /// it is paced like a new file's data, where [`Hooks::ssd_write_ok`]
    /// holds an overwrite to the day's budget only. Never waits.
    fn ssd_growth_ok(&self, _ino: Ino, _bytes: u64) -> bool {
        true
    }
    /// Does the policy of `ino`, `size` bytes long, count its chunks
    /// (sub-file extents)? Such a file takes the userspace path when no heat
    /// source sees the kernel's requests, so that its requests reach the
    /// daemon. Default: no.
    fn counts_chunks(&self, _ino: Ino, _size: u64) -> bool {
        false
    }
    /// May a writable open of this SSD-resident file use passthrough (no
    /// per-write space checks)? Default: yes.
    fn passthrough_write_ok(&self, _ino: Ino) -> bool {
        true
    }
    /// Whether writes to `ino` (on the HDD) may use a write-back area, and
    /// which; asked once when the file is opened, with the directory it
    /// was just created in (else its first name is looked up). Default:
    /// none.
    fn write_back(&self, _ino: Ino, _parent: Option<Ino>) -> WriteBackUse {
        WriteBackUse::default()
    }
    /// Promises `bytes` of room in write-back area `area` to a write;
    /// false if it has none (the write goes to the HDD). Never waits.
    fn wb_reserve(&self, _area: u32, _bytes: u64) -> bool {
        false
    }
    /// A write that was promised `reserved` bytes of area `area` is over;
    /// it made `chunks` of `ino` (index, bytes on the SSD) there.
    fn wb_admitted(&self, _area: u32, _ino: Ino, _chunks: &[(u64, u64)], _reserved: u64) {}
    /// A new non-directory `ino` was made in `parent` on `tier`.
    fn created(&self, _ino: Ino, _parent: Ino, _tier: Tier) {}
    /// Whether the quiet HDD mode applies to directory `dir`: its
    /// reconciliation takes the names on the HDD from the state database
    /// once it was reconciled with the HDD in some mount.
    fn quiet_dir(&self, _dir: Ino) -> bool {
        false
    }
    /// True while the HDD is held asleep (quiet mode): what can be
    /// answered without it is.
    fn hdd_asleep(&self) -> bool {
        false
    }
}

/// A file's use of a write-back area (see [`Hooks::write_back`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteBackUse {
    /// Largest write the area takes; 0: the file has no area.
    pub max_write: u64,
    /// The area (the file's policy group).
    pub area: u32,
    /// Chunk size for a file without chunks.
    pub chunk: crate::extent::ChunkSize,
}

/// A volume without tiering engine.
#[derive(Debug, Default)]
pub struct NoHooks;
impl Hooks for NoHooks {}

/// Files whose answers [`Volume::kept_hdd`] keeps (forgotten all at once
/// past it).
const HDD_KEPT_MAX: usize = 262_144;

/// What was read of a file on the HDD, and the HDD store's count of
/// changes before it was read (see [`Volume::kept_hdd`]).
#[derive(Debug, Default)]
pub(crate) struct Kept {
    changes: u64,
    pub(crate) stat: Option<Stat>,
    pub(crate) list: Option<Vec<u8>>,
    /// Extended attributes by name: the value, or `None` for none
    /// (ENODATA); at most [`KEPT_XATTRS`].
    pub(crate) xattrs: Vec<(std::ffi::OsString, Option<Vec<u8>>)>,
}

/// Extended attributes of one file [`Kept`] keeps.
pub(crate) const KEPT_XATTRS: usize = 8;

/// Settings of a volume.
#[derive(Clone, Debug)]
pub struct VolumeConfig {
    /// Data path.
    pub io_mode: IoMode,
    /// Tier of new files when the hooks do not choose.
    pub default_tier: Tier,
    /// Tier carrying directory attributes.
    pub meta_tier: Tier,
    /// The daemon may give files away (runs as root).
    pub can_chown: bool,
    /// The most entries a directory has for its listings to be keyed, so
    /// that the kernel may keep them (`vfs::dir`).
    pub keyed_listing_max: usize,
}

impl Default for VolumeConfig {
    fn default() -> Self {
        VolumeConfig {
            io_mode: IoMode::Userspace,
            default_tier: Tier::Hdd,
            meta_tier: Tier::Ssd,
            // SAFETY: geteuid has no preconditions.
            can_chown: unsafe { libc::geteuid() } == 0,
            keyed_listing_max: dir::KEYED_LISTING_MAX,
        }
    }
}

/// An open regular file: the backing descriptors shared by its handles.
pub struct OpenInode<S: Store> {
    /// The inode.
    pub ino: Ino,
    pub(crate) io: RwLock<IoState<S>>,
    /// Serialises writes that may extend the file, and every change of a
    /// cached file (its two copies must see changes in the same order).
    order: Mutex<()>,
    /// Size as last known through tierfs (writes, truncates, opens).
    pub size: AtomicU64,
    /// Handles holding the kernel's backing file (a copy of
    /// `IoState::backed` that can be read without the I/O lock).
    passthrough: std::sync::atomic::AtomicU32,
    /// A write-through to the cached copy failed: it must not be read.
    copy_stale: std::sync::atomic::AtomicBool,
    /// Some chunk of the file has a copy on the SSD (a split file): its
    /// I/O takes the userspace path through `vfs::extent`. Changed only
    /// under the inode lock and the I/O lock, both held for writing.
    pub(crate) split: std::sync::atomic::AtomicBool,
    /// The write-back area its writes may use, as it was when the file was
    /// opened (a settings change reaches open files at their next open).
    pub(crate) wb: WriteBackUse,
    /// Its policy counts its chunks (`Hooks::counts_chunks`), asked when it
    /// was opened, in passthrough mode on a volume whose heat source misses
    /// the reads of some tier: where it does, the file takes the userspace
    /// path.
    pub(crate) chunks_counted: bool,
}

pub(crate) struct IoState<S: Store> {
    pub placement: Placement,
    /// The primary copy and whether it is open for writing. A cached file
    /// read through its SSD copy never touches the HDD, so its primary is
    /// opened only when needed (a write, or a failing copy).
    pub primary: std::sync::OnceLock<(Arc<S::File>, bool)>,
    pub copy: Option<Arc<S::File>>,
    pub handles: u32,
    /// Handles holding the kernel's backing file of the inode (those using
    /// passthrough, and those opened beside them: see `Volume::register`).
    /// While there are any the file stays where it is and whole.
    pub backed: u32,
    /// The file the kernel holds as the inode's backing file while
    /// `backed > 0`.
    pub kernel_file: Option<(Tier, Arc<S::File>)>,
    /// The heat source's watch of it, if it watches it.
    pub kernel_watch: Option<crate::heat::Watched>,
    /// The last handle closed: this state is leaving the open map, and an
    /// open that finds it there must make a new one.
    pub retired: bool,
}

impl<S: Store> IoState<S> {
    /// The primary descriptor if it is open.
    pub fn primary_open(&self) -> Option<&Arc<S::File>> {
        self.primary.get().map(|p| &p.0)
    }
    /// True if the primary is open for writing (false if not open yet).
    pub fn writable(&self) -> bool {
        self.primary.get().is_some_and(|p| p.1)
    }
}

impl<S: Store> OpenInode<S> {
    /// Current placement as seen by open handles.
    pub fn placement(&self) -> Placement {
        self.io.read().placement
    }
    /// Open handles and how many hold the kernel's backing file.
    pub fn handle_counts(&self) -> (u32, u32) {
        let s = self.io.read();
        (s.handles, s.backed)
    }
    /// True if some handle holds the kernel's backing file; takes no lock.
    pub fn has_passthrough(&self) -> bool {
        self.passthrough.load(Ordering::Acquire) > 0
    }
    /// A new cached copy replaced the one that missed changes.
    pub(crate) fn copy_is_fresh(&self) {
        self.copy_stale.store(false, Ordering::Release);
    }
}

/// One tierfs volume. See the module documentation.
pub struct Volume<S: Store> {
    /// The stores.
    pub tiers: Tiers<S>,
    /// The namespace in the state database.
    pub ns: Namespace,
    /// Settings.
    pub cfg: VolumeConfig,
    pub(crate) locks: DirLocks,
    pub(crate) ilocks: InodeLocks,
    verified: Mutex<HashSet<Ino>>,
    /// The HDD's last statfs answer, given while the HDD is held asleep.
    hdd_statfs: Mutex<Option<crate::store::FsStats>>,
    /// Directories whose HDD copy was synced (quiet mode), with the HDD
    /// store's count of changes read before (see `Volume::fsyncdir`).
    hdd_dirs_synced: Mutex<HashMap<Ino, u64>>,
    /// What was read of files on the HDD (quiet mode; see
    /// `Volume::kept_hdd`).
    hdd_kept: Mutex<HashMap<Ino, Kept>>,
    /// The mount follows an unclean shutdown: the database may have lost
    /// creates it had not flushed, so no directory's HDD names come from it
    /// (set by `recover`).
    after_crash: std::sync::atomic::AtomicBool,
    /// Reconciles directories in the background (see `vfs::adopt`).
    adopter: Arc<adopt::Adopter>,
    open: Mutex<HashMap<Ino, Arc<OpenInode<S>>>>,
    handles: RwLock<HashMap<u64, Arc<file::Handle<S>>>>,
    dir_handles: Mutex<HashMap<u64, Arc<dir::DirHandle>>>,
    /// Per directory, how many keyed handles are in the middle of a
    /// listing (`vfs::dir`). A leaf lock.
    listings: Mutex<HashMap<Ino, usize>>,
    /// The last keyed snapshot of each directory (`vfs::dir`). A leaf
    /// lock.
    snapshots: Mutex<dir::KeptSnapshots>,
    /// The key of this mount's listing offsets (`vfs::dir`).
    listing_key: std::hash::RandomState,
    next_fh: AtomicU64,
    /// Requests the kernel sent ([`Volume::note_request`]): how busy the
    /// mount is, for the migrator's busy gate.
    requests: AtomicU64,
    io_mode: std::sync::atomic::AtomicBool,
    events: Arc<dyn EventSink>,
    hooks: RwLock<Arc<dyn Hooks>>,
    /// What sees the requests the kernel serves by itself (passthrough).
    heat: RwLock<Arc<dyn crate::heat::HeatSource>>,
    kernel: RwLock<Option<Arc<dyn KernelCache>>>,
    clock: Arc<dyn Clock>,
    conflicts: Mutex<Vec<Conflict>>,
    /// What each tier's file system can do (SSD, HDD): everything until
    /// [`Volume::set_features`] says otherwise.
    features: RwLock<[Features; 2]>,
    /// Hard-linked backing files (tier, device, inode) adopted during this
    /// mount, and the inode their names join.
    adopted_links: Mutex<HashMap<(Tier, u64, u64), reconcile::LinkClaim>>,
    /// Directories whose reconciliation is running (a leaf lock).
    reconciling: Mutex<HashSet<Ino>>,
    changes: Box<[AtomicU64]>,
    /// Files a migration is running for (at most one at a time per file).
    pub(crate) migrating: Mutex<HashSet<Ino>>,
    /// Numbers the staging names of migrations, so that no two share one.
    pub(crate) staging_seq: AtomicU64,
    /// Cached files whose SSD copy missed a change (a failed write-through)
    /// and must not be read until it is dropped.
    stale_copies: Mutex<HashSet<Ino>>,
    /// Which chunks of split files have SSD copies (locked briefly, and
    /// across the state flush of a commit; never across file I/O).
    pub(crate) extents: Mutex<crate::extent::map::ExtentMap>,
    /// Open shadow files of split files, by inode.
    shadows: Mutex<HashMap<Ino, Arc<S::File>>>,
}

/// Stripes of the data-change counters (see [`Volume::change_gen`]).
const CHANGE_STRIPES: usize = 4096;

impl<S: Store> std::fmt::Debug for Volume<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Volume({:?})", self.cfg)
    }
}

/// An inode lock held for reading.
pub(crate) type InodeGuard<'a> = parking_lot::RwLockReadGuard<'a, ()>;

/// Longest name a component may have.
pub const NAME_MAX: usize = 255;

/// Rejects names the kernel lets through but no local file system takes.
pub fn check_name(name: &OsStr) -> Result<()> {
    if name.len() > NAME_MAX {
        return err(libc::ENAMETOOLONG);
    }
    if name.is_empty() || name.as_bytes().contains(&b'/') {
        return err(libc::EINVAL);
    }
    Ok(())
}

/// True for the name tierfs keeps for itself at the root.
pub fn is_reserved(parent: Ino, name: &OsStr) -> bool {
    parent == ROOT_INO && name.as_bytes() == RESERVED.as_bytes()
}

impl<S: Store> Volume<S> {
    /// Opens a volume over two stores and a namespace. Creates the root
    /// record on first use.
    pub fn new(
        ssd: S,
        hdd: S,
        ns: Namespace,
        cfg: VolumeConfig,
        events: Arc<dyn EventSink>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self> {
        let extent_kv = ns.kv().clone();
        let tiers = Tiers::new(ssd, hdd, ns.clone(), cfg.meta_tier);
        let passthrough = cfg.io_mode == IoMode::Passthrough;
        let v = Volume {
            io_mode: std::sync::atomic::AtomicBool::new(passthrough),
            tiers,
            ns,
            cfg,
            locks: DirLocks::new(),
            ilocks: InodeLocks::new(),
            verified: Mutex::new(HashSet::new()),
            hdd_statfs: Mutex::new(None),
            hdd_dirs_synced: Mutex::new(HashMap::new()),
            hdd_kept: Mutex::new(HashMap::new()),
            after_crash: std::sync::atomic::AtomicBool::new(false),
            adopter: Arc::default(),
            open: Mutex::new(HashMap::new()),
            handles: RwLock::new(HashMap::new()),
            dir_handles: Mutex::new(HashMap::new()),
            listings: Mutex::new(HashMap::new()),
            snapshots: Mutex::new(dir::KeptSnapshots::default()),
            listing_key: std::hash::RandomState::new(),
            next_fh: AtomicU64::new(1),
            requests: AtomicU64::new(0),
            events,
            hooks: RwLock::new(Arc::new(NoHooks)),
            heat: RwLock::new(Arc::new(crate::heat::NoHeat)),
            kernel: RwLock::new(None),
            clock,
            conflicts: Mutex::new(Vec::new()),
            features: RwLock::new([Features::ALL; 2]),
            adopted_links: Mutex::new(HashMap::new()),
            reconciling: Mutex::new(HashSet::new()),
            changes: (0..CHANGE_STRIPES).map(|_| AtomicU64::new(0)).collect(),
            migrating: Mutex::new(HashSet::new()),
            staging_seq: AtomicU64::new(0),
            stale_copies: Mutex::new(HashSet::new()),
            extents: Mutex::new(crate::extent::map::ExtentMap::empty(extent_kv)),
            shadows: Mutex::new(HashMap::new()),
        };
        let schema = v.ns.meta("schema")?.and_then(|b| b.try_into().ok()).map(u32::from_be_bytes);
        if let Some(n) = schema.filter(|n| *n > SCHEMA_VERSION) {
            return Err(Error::State(format!(
                "written by a newer tierfs (schema {n}; this build reads schema {SCHEMA_VERSION} and older)"
            )));
        }
        let mut b = v.ns.batch();
        if v.ns.record(ROOT_INO)?.is_none() {
            b.put_record(ROOT_INO, &InodeRecord::new(FileKind::Dir, Placement::On(v.cfg.meta_tier)));
        }
        if schema != Some(SCHEMA_VERSION) {
            b.put_meta("schema", SCHEMA_VERSION.to_be_bytes().to_vec());
        }
        if !b.is_empty() {
            v.ns.commit(b, true)?;
        }
        Ok(v)
    }

    /// The I/O mode in force (passthrough can be turned off at mount time
    /// when the kernel does not offer it).
    pub fn io_mode(&self) -> IoMode {
        if self.io_mode.load(Ordering::Relaxed) {
            IoMode::Passthrough
        } else {
            IoMode::Userspace
        }
    }

    /// Sets the I/O mode (before any file is opened).
    pub fn set_io_mode(&self, m: IoMode) {
        self.io_mode.store(m == IoMode::Passthrough, Ordering::Relaxed);
    }

    /// Installs the tiering engine's hooks.
    pub fn set_hooks(&self, h: Arc<dyn Hooks>) {
        *self.hooks.write() = h;
    }

    pub(crate) fn hooks(&self) -> Arc<dyn Hooks> {
        self.hooks.read().clone()
    }

    /// Installs the heat source (before the mount serves: files opened
    /// earlier stay counted per open).
    pub fn set_heat(&self, h: Arc<dyn crate::heat::HeatSource>) {
        *self.heat.write() = h;
    }

    /// The heat source ([`crate::heat::NoHeat`] unless one was installed).
    pub fn heat(&self) -> Arc<dyn crate::heat::HeatSource> {
        self.heat.read().clone()
    }

    /// Installs the kernel's caches, to be told of changes tierfs makes
    /// behind them.
    pub fn set_kernel_cache(&self, k: Arc<dyn KernelCache>) {
        *self.kernel.write() = Some(k);
    }

    /// `ino`'s attributes changed outside a request (the kernel may hold
    /// the old ones).
    pub(crate) fn attrs_changed(&self, ino: Ino) {
        let k = self.kernel.read().clone();
        if let Some(k) = k {
            k.attrs_changed(ino);
        }
    }

    /// What the kernel knows of `name` in `parent` is wrong now (see
    /// [`KernelCache::entry_changed`]).
    pub(crate) fn entry_changed(&self, parent: Ino, name: &OsStr) {
        let k = self.kernel.read().clone();
        if let Some(k) = k {
            k.entry_changed(parent, name);
        }
    }

    /// The listing of directory `dir` changed other than through a request
    /// on it (the kernel may hold the old one).
    pub(crate) fn listing_changed(&self, dir: Ino) {
        let k = self.kernel.read().clone();
        if let Some(k) = k {
            k.listing_changed(dir);
        }
    }

    /// A counter that moves whenever `ino` changes through tierfs other
    /// than by appending: writes before the end, truncates, fallocate,
    /// attribute and xattr changes, whether or not the file stays open in
    /// between; and when a passthrough handle that may write opens or
    /// closes (the kernel's writes through it are not seen one by one). A write at or past the end (serialised with the other
    /// writes that may extend the file) leaves it alone, so a migration that
    /// sees the file grew with the counter unmoved copies only the new tail.
    /// Counters are shared by stripes of inodes, so a move may also come
    /// from another file: a migration that sees it changed only copies
    /// again.
    pub fn change_gen(&self, ino: Ino) -> u64 {
        self.changes[ino as usize % CHANGE_STRIPES].load(Ordering::Acquire)
    }

    pub(crate) fn note_change(&self, ino: Ino) {
        self.changes[ino as usize % CHANGE_STRIPES].fetch_add(1, Ordering::AcqRel);
    }

    /// The clock of this volume.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    pub(crate) fn emit(&self, ino: Ino, kind: EventKind) {
        tracing::trace!(ino, ?kind, "event");
        self.events.record(Event::new(ino, self.clock.now(), kind));
    }

    /// Counts a request from the kernel (the FUSE layer calls this once per
    /// request it handles; the simulator, which has no kernel, never does).
    pub fn note_request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests counted by [`Volume::note_request`] so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    pub(crate) fn new_fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    /// The record of an inode, or ENOENT.
    pub fn record(&self, ino: Ino) -> Result<InodeRecord> {
        self.ns.record(ino)?.ok_or_else(|| Error::errno(libc::ENOENT))
    }

    /// One name of an inode, or ENOENT.
    pub fn link_of(&self, ino: Ino) -> Result<(Ino, OsString)> {
        self.ns.first_link(ino)?.ok_or_else(|| Error::errno(libc::ENOENT))
    }

    /// The record of an inode the kernel names by its number (getattr,
    /// setattr, open, readlink, xattrs, link), or ESTALE if it is gone:
    /// the kernel then looks the name up again, and may find another file
    /// under it now, where ENOENT failed the call.
    pub(crate) fn kernel_record(&self, ino: Ino) -> Result<InodeRecord> {
        self.ns.record(ino)?.ok_or_else(|| Error::errno(libc::ESTALE))
    }

    /// One name of an inode the kernel names by its number, or ESTALE (see
    /// [`Volume::kernel_record`]).
    pub(crate) fn kernel_link(&self, ino: Ino) -> Result<(Ino, OsString)> {
        self.ns.first_link(ino)?.ok_or_else(|| Error::errno(libc::ESTALE))
    }

    /// The open state of an inode, if it has open handles.
    pub fn open_inode(&self, ino: Ino) -> Option<Arc<OpenInode<S>>> {
        self.open.lock().get(&ino).cloned()
    }

    /// Takes a retired open state out of the open map (if it is still the
    /// one there).
    pub(crate) fn forget_open(&self, ino: Ino, oi: &Arc<OpenInode<S>>) {
        let mut m = self.open.lock();
        if m.get(&ino).is_some_and(|x| Arc::ptr_eq(x, oi)) {
            m.remove(&ino);
        }
    }

    /// Every inode with open handles.
    pub fn open_inodes(&self) -> Vec<Arc<OpenInode<S>>> {
        self.open.lock().values().cloned().collect()
    }

    /// Conflicts found while adopting existing data (same path on both tiers).
    pub fn conflicts(&self) -> Vec<Conflict> {
        self.conflicts.lock().clone()
    }

    /// Stats a non-directory's copy on tier `t`.
    /// An answer about file `ino` (in directory `dir`) on the HDD: under
    /// the quiet mode the one read last, while the HDD store's count of
    /// changes (`Store::changes`: every change through tierfs, and every
    /// open for writing, after which the kernel may write the file itself)
    /// has not moved since it was read; else `ask`'s, kept. The count is
    /// read before asking, so a change made meanwhile makes the next call
    /// ask again.
    pub(crate) fn kept_hdd<T: Clone>(
        &self,
        ino: Ino,
        dir: Ino,
        read: impl FnOnce(&Kept) -> Option<T>,
        write: impl FnOnce(&mut Kept, &T),
        ask: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        let Some(c) = self.tiers.store(Tier::Hdd).changes().filter(|_| self.hooks().quiet_dir(dir)) else {
            return ask();
        };
        let kept = self.hdd_kept.lock().get(&ino).filter(|k| k.changes == c).and_then(read);
        if let Some(v) = kept {
            return Ok(v);
        }
        let v = ask()?;
        let mut m = self.hdd_kept.lock();
        if m.len() >= HDD_KEPT_MAX {
            m.clear();
        }
        let k = m.entry(ino).or_default();
        if k.changes != c {
            *k = Kept { changes: c, ..Kept::default() };
        }
        write(k, &v);
        Ok(v)
    }

    pub(crate) fn stat_on(&self, parent: Ino, name: &OsStr, t: Tier) -> Result<Stat> {
        let d = self.tiers.dir(parent, t, false)?;
        Ok(self.tiers.store(t).stat(Target::Entry(&d, name))?)
    }

    /// The meta-tier copy of a directory.
    pub(crate) fn meta_dir(&self, ino: Ino) -> Result<Arc<S::Dir>> {
        self.tiers.dir(ino, self.tiers.meta, false)
    }

    /// After a change of entries of `dir` on a tier other than the meta
    /// tier, moves the meta copy's mtime (and so ctime) as a local file
    /// system would move the directory's. Called with `dir`'s stripe held.
    pub(crate) fn touch_dir(&self, dir: Ino, changed_on: Tier) {
        if changed_on == self.tiers.meta {
            return;
        }
        if let Ok(d) = self.meta_dir(dir) {
            let s = self.tiers.store(self.tiers.meta);
            let _ = s.utimens(Target::This(&d), crate::store::SetTime::Omit, crate::store::SetTime::Now);
        }
    }

    /// Builds reported attributes from a backing stat, the record and, for
    /// a non-directory, how many names the namespace has for it.
    ///
    /// A file's link count is the larger of the backing file's and the
    /// namespace's. Never fewer than the namespace's names: a backing
    /// client cache can serve a count from before a link (GlusterFS's
    /// metadata cache does for up to a second), and a kernel told one link
    /// too few counts the file at 0 after an unlink of one of its names, and
    /// then refuses to link its other names (ENOENT). Never fewer than the
    /// backing file's: names in a directory not adopted yet are not in the
    /// namespace.
    pub(crate) fn make_attr(&self, ino: Ino, rec: &InodeRecord, st: &Stat, names: u64) -> Attr {
        let nlink =
            if rec.kind == FileKind::Dir { 2 + rec.subdirs } else { st.nlink.max(names).min(u32::MAX as u64) as u32 };
        let ctime = match rec.ctime_fix {
            Some(f) if f.backing == st.ctime => f.logical,
            _ => st.ctime,
        };
        Attr {
            ino,
            kind: rec.kind,
            perm: (st.mode & 0o7777) as u16,
            nlink,
            uid: st.uid,
            gid: st.gid,
            rdev: st.rdev as u32,
            size: st.size,
            blocks: st.blocks,
            blksize: st.blksize,
            atime: st.atime,
            mtime: st.mtime,
            ctime,
        }
    }

    /// Drops the cached state of a removed directory.
    pub(crate) fn forget_dir(&self, ino: Ino) {
        self.tiers.forget_dir(ino);
        self.verified.lock().remove(&ino);
        let _dropped = self.snapshots.lock().forget(ino);
        self.adopter.forget(ino);
    }

    /// True if the directory was reconciled during this mount.
    pub(crate) fn is_verified(&self, ino: Ino) -> bool {
        self.verified.lock().contains(&ino)
    }

    /// Marks a directory as matching its backing copies for this mount.
    pub(crate) fn mark_verified(&self, ino: Ino) {
        self.verified.lock().insert(ino);
    }

    /// Sets what each tier's file system can do (SSD, HDD), as
    /// `store::features::probe_store` found: the volume then falls back,
    /// or refuses with the right errno, before asking a tier for what it
    /// lacks.
    pub fn set_features(&self, f: [Features; 2]) {
        *self.features.write() = f;
    }

    /// What tier `t`'s file system can do, as far as known.
    pub fn features(&self, t: Tier) -> Features {
        self.features.read()[t.idx()]
    }

    /// EIO if a tier's directory vanished while mounted: nothing may then
    /// conclude that files are gone.
    pub(crate) fn check_tiers(&self) -> Result<()> {
        for t in Tier::ALL {
            if !self.tiers.store(t).healthy() {
                tracing::error!(tier = %t, "the backing directory of the tier is gone");
                return err(libc::EIO);
            }
        }
        Ok(())
    }

    /// Turns ENOENT from a backing store into EIO when a tier vanished.
    pub fn vanished(&self, e: Error) -> Error {
        if e.is(libc::ENOENT) || e.is(libc::ESTALE) {
            if let Err(eio) = self.check_tiers() {
                return eio;
            }
        }
        e
    }

    /// A path of the inode below the mount point ("/a/b"), if it has a name.
    pub fn path_of(&self, ino: Ino) -> Option<String> {
        let mut parts = Vec::new();
        let mut cur = ino;
        while cur != ROOT_INO {
            let (p, n) = self.ns.first_link(cur).ok().flatten()?;
            parts.push(n);
            cur = p;
            if parts.len() > 4096 {
                return None;
            }
        }
        let mut out = String::new();
        for p in parts.iter().rev() {
            out.push('/');
            out.push_str(&p.to_string_lossy());
        }
        if out.is_empty() {
            out.push('/');
        }
        Some(out)
    }

    /// Flushes the state database.
    pub fn sync_state(&self) -> Result<()> {
        self.ns.kv().flush()
    }
}

#[cfg(test)]
mod tests;
