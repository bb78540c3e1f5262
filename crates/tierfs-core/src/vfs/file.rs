//! open, create, read, write, flush, release, fsync, fallocate, lseek and
//! copy_file_range.
//!
//! All handles of one inode share its [`OpenInode`]: one backing
//! descriptor on the primary tier (opened read-write when possible) and,
//! for a cached file, one on its SSD copy. A migration swaps them under the
//! inode's I/O lock, so handles follow the file to its new tier.

use super::creds::AsCaller;
use super::{Attr, Ctx, InodeGuard, IoMode, IoState, OpenInode, Volume};
use crate::error::{err, Error, Result};
use crate::event::EventKind;
use crate::state::ns::Ino;
use crate::store::{read_full, write_full, FileKind, SetTime, Stat, Store};
use crate::tier::{Placement, Tier};
use parking_lot::{Mutex, RwLock};
use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Attribute changes requested by setattr.
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAttr {
    /// New permission bits.
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size.
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<SetTime>,
    /// New modification time.
    pub mtime: Option<SetTime>,
}

/// One open file handle.
pub(crate) struct Handle<S: Store> {
    pub ino: Ino,
    /// Who opened it: writes through it run as that user.
    pub caller: Ctx,
    pub oi: Arc<OpenInode<S>>,
    pub write: bool,
    pub append: bool,
    pub sync: bool,
    /// The kernel holds the inode's backing file for this handle: it reads
    /// and writes it itself, or (opened `direct` beside such handles: see
    /// `register`) only maps it.
    pub backed: bool,
    /// End and length of the previous request, to recognise split ones.
    pub last: Mutex<(u64, u64)>,
}

impl<S: Store> Handle<S> {
    /// Tells whether a request at `off` would be the tail of a split one.
    pub(crate) fn continues(&self, off: u64) -> bool {
        tail_of(&self.last.lock(), off)
    }

    /// Notes a request and tells whether it is the tail of a split one.
    pub(crate) fn fragment(&self, off: u64, len: u64) -> bool {
        let mut l = self.last.lock();
        let frag = tail_of(&l, off);
        *l = (off + len, len);
        frag
    }
}

/// True if a request at `off` continues one that ended there and was at
/// least as big as the kernel's split requests (`last`: end and length).
fn tail_of(last: &(u64, u64), off: u64) -> bool {
    off == last.0 && last.1 >= crate::event::FRAGMENT_MIN
}

/// The answer to open and create.
pub struct Opened<S: Store> {
    /// The handle number.
    pub fh: u64,
    /// For passthrough: the backing file the kernel should use, and its tier.
    pub backing: Option<(Tier, Arc<S::File>)>,
    /// With a backing: the kernel must still send reads and writes to the
    /// daemon (FOPEN_DIRECT_IO beside FOPEN_PASSTHROUGH), because other
    /// handles of the inode hold the kernel's backing file and this one
    /// needs the userspace path.
    pub direct: bool,
}

impl<S: Store> std::fmt::Debug for Opened<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Opened(fh={}, backing={}, direct={})", self.fh, self.backing.is_some(), self.direct)
    }
}

/// The primary descriptor (and whether it is writable), if opened, and
/// the cached copy's.
type Backing<S> = (Option<(Arc<<S as Store>::File>, bool)>, Option<Arc<<S as Store>::File>>);

/// fallocate modes that shift the data after the range.
const SHIFTS: i32 = libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE;

const RDWR_FALLBACK: [i32; 4] = [libc::EACCES, libc::EPERM, libc::EROFS, libc::ETXTBSY];

/// How often an operation that needs SSD room tries (the last one may go
/// past the configured capacity).
const ROOM_ROUNDS: u32 = 4;

/// What one try of an operation that may need SSD room came to.
pub(crate) enum Attempt<T> {
    /// Done.
    Done(T),
    /// The account has not this many bytes free under the capacity.
    NoRoom(u64),
    /// The SSD file system itself is full.
    Full(u64),
    /// The SSD's write budget is spent: the file leaves the SSD first.
    OverBudget,
}

/// Bytes a change that makes a file end at `end` instead of `cur` may
/// allocate: the 4-KiB blocks past the old end.
pub(crate) fn alloc_growth(cur: u64, end: u64) -> u64 {
    end.div_ceil(4096).saturating_sub(cur.div_ceil(4096)) * 4096
}

impl<S: Store> Volume<S> {
    pub(crate) fn handle(&self, fh: u64) -> Result<Arc<Handle<S>>> {
        self.handles.read().get(&fh).cloned().ok_or_else(|| Error::errno(libc::EBADF))
    }

    /// Opens the primary copy of a file, read-write when possible, by its
    /// name: the caller holds the file's inode lock, or the I/O lock of its
    /// open state, either of which a rename of the file waits for.
    fn open_primary(&self, ino: Ino, placement: Placement, want_write: bool) -> Result<(Arc<S::File>, bool)> {
        let (p, n) = self.kernel_link(ino)?;
        let t = placement.primary();
        let d = self.tiers.dir(p, t, false)?;
        let s = self.tiers.store(t);
        let (primary, writable) = match s.open(&d, &n, libc::O_RDWR, 0) {
            Ok(f) => (f, true),
            Err(e) if RDWR_FALLBACK.contains(&e.raw_os_error().unwrap_or(0)) => {
                let acc = if want_write { libc::O_WRONLY } else { libc::O_RDONLY };
                (s.open(&d, &n, acc, 0)?, want_write)
            }
            Err(e) => return Err(e.into()),
        };
        Ok((Arc::new(primary), writable))
    }

    /// The primary descriptor of an open file, opening it on first use
    /// (the caller holds the open state's I/O lock).
    pub(crate) fn primary_of(&self, ino: Ino, io: &IoState<S>) -> Result<Arc<S::File>> {
        if let Some(p) = io.primary.get() {
            return Ok(p.0.clone());
        }
        let opened = self.open_primary(ino, io.placement, true)?;
        let _ = io.primary.set(opened);
        Ok(io.primary.get().map(|p| p.0.clone()).expect("just set"))
    }

    /// Attributes of an open file: a cached file's from its copy (kept in
    /// step with the primary, and where a closed cached file's come from:
    /// taken from the primary while a writer had it open, the ctime
    /// flipped between the copies' as writers opened and closed the file),
    /// else from the primary.
    pub(crate) fn io_stat(&self, oi: &OpenInode<S>, io: &IoState<S>) -> Result<Stat> {
        if let Some(c) = self.live_copy(oi, io) {
            return Ok(self.tiers.store(Tier::Ssd).fstat(c)?);
        }
        if let Some(p) = io.primary_open() {
            return Ok(self.tiers.store(io.placement.primary()).fstat(p)?);
        }
        let p = self.primary_of(oi.ino, io)?;
        Ok(self.tiers.store(io.placement.primary()).fstat(&p)?)
    }

    /// Opens the backing copies of a file: the primary (read-write when
    /// possible) unless the file is cached and only read, and the SSD copy
    /// of a cached file.
    fn open_backing(&self, ino: Ino, placement: Placement, want_write: bool) -> Result<Backing<S>> {
        let (p, n) = self.kernel_link(ino)?;
        let copy = if placement == Placement::Cached && !self.copy_is_stale(ino) {
            let r = self
                .tiers
                .dir(p, Tier::Ssd, false)
                .and_then(|d| Ok(self.tiers.store(Tier::Ssd).open(&d, &n, libc::O_RDWR, 0)?));
            match r {
                Ok(f) => Some(Arc::new(f)),
                Err(e) => {
                    // Never read again, and dropped once the file is open
                    // (see `open_as`): changes skip it from now on.
                    tracing::warn!(ino, error = %e, "cached copy cannot be opened; reading the HDD copy");
                    self.stale_copies.lock().insert(ino);
                    None
                }
            }
        } else {
            None
        };
        let primary =
            if copy.is_some() && !want_write { None } else { Some(self.open_primary(ino, placement, want_write)?) };
        Ok((primary, copy))
    }

    /// The open state of `ino`, creating it (and one handle count) if needed.
    /// For a file just created, `created` brings its tier, descriptor,
    /// the inode lock `create_node` kept and its directory; otherwise the
    /// lock is taken here.
    fn acquire(
        &self,
        ino: Ino,
        want_write: bool,
        created: Option<(Tier, S::File, InodeGuard<'_>, Ino)>,
    ) -> Result<Arc<OpenInode<S>>> {
        let (created, _pl, parent) = match created {
            Some((t, f, g, parent)) => (Some((t, f)), g, Some(parent)),
            None => (None, self.ilocks.get(ino).read(), None),
        };
        // The open map's lock is never held while waiting for an inode's
        // I/O lock: a writer holding that lock may need the map (the
        // cleaner looks up the files it evicts).
        loop {
            let found = self.open.lock().get(&ino).cloned();
            let Some(oi) = found else { break };
            let Some(mut io) = self.live_io(ino, &oi) else { continue };
            if want_write {
                self.primary_of(ino, &io)?;
                if !io.writable() {
                    return err(libc::EACCES);
                }
            }
            io.handles += 1;
            drop(io);
            return Ok(oi);
        }
        let (placement, primary, copy, size) = match created {
            // A file `create_node` just made exclusively is empty.
            Some((t, f)) => (Placement::On(t), Some((Arc::new(f), true)), None, 0),
            None => {
                let rec = self.kernel_record(ino)?;
                if rec.kind != FileKind::File {
                    return err(if rec.kind == FileKind::Dir { libc::EISDIR } else { libc::EINVAL });
                }
                let (p, c) = self.open_backing(ino, rec.placement, want_write)?;
                let placement = if rec.placement == Placement::Cached && c.is_none() {
                    Placement::On(Tier::Hdd)
                } else {
                    rec.placement
                };
                let p = match p {
                    Some(p) => Some(p),
                    None if c.is_none() => Some(self.open_primary(ino, placement, want_write)?),
                    None => None,
                };
                let size = match (&p, &c) {
                    (Some((p, _)), _) => self.tiers.store(placement.primary()).fstat(p)?.size,
                    (None, Some(c)) => self.tiers.store(Tier::Ssd).fstat(c)?.size,
                    (None, None) => 0,
                };
                (placement, p, c, size)
            }
        };
        let cell = std::sync::OnceLock::new();
        if let Some(p) = primary {
            let _ = cell.set(p);
        }
        let oi = Arc::new(OpenInode {
            ino,
            io: RwLock::new(IoState {
                placement,
                primary: cell,
                copy,
                handles: 0,
                backed: 0,
                kernel_file: None,
                kernel_watch: None,
                retired: false,
            }),
            order: Mutex::new(()),
            size: AtomicU64::new(size),
            passthrough: std::sync::atomic::AtomicU32::new(0),
            copy_stale: std::sync::atomic::AtomicBool::new(false),
            // Under the inode lock, which the chunk mover holds for writing.
            split: std::sync::atomic::AtomicBool::new(self.is_split(ino)),
            wb: self.hooks().write_back(ino, parent),
            chunks_counted: self.io_mode() == IoMode::Passthrough
                && Tier::ALL.iter().any(|t| !self.heat().sees(*t).reads)
                && self.hooks().counts_chunks(ino, size),
        });
        loop {
            let here = self.open.lock().entry(ino).or_insert_with(|| oi.clone()).clone();
            let joined = self.live_io(ino, &here).map(|mut io| io.handles += 1).is_some();
            if joined {
                return Ok(here);
            }
        }
    }

    /// The I/O state of an open inode found in the open map, locked for
    /// writing; `None` (and the state taken out of the map) if its last
    /// handle closed meanwhile, so the caller looks again.
    fn live_io<'a>(
        &self,
        ino: Ino,
        oi: &'a Arc<OpenInode<S>>,
    ) -> Option<parking_lot::RwLockWriteGuard<'a, super::IoState<S>>> {
        let io = oi.io.write();
        if io.retired {
            drop(io);
            self.forget_open(ino, oi);
            return None;
        }
        Some(io)
    }

    /// Registers a handle on an acquired inode and decides passthrough.
    ///
    /// The kernel keeps one backing file per inode while any handle holds
    /// it, and fails with EIO an open answered without FOPEN_PASSTHROUGH
    /// while it does (or with another backing file). So the handles of an
    /// inode agree: while some hold the backing file, every new one gets it
    /// too, with FOPEN_DIRECT_IO when its I/O must go through the daemon
    /// (or the file it would pass through is another one); while handles
    /// without it are open, new ones do without too, because the kernel may
    /// finish their opens in any order.
    fn register(&self, ctx: &Ctx, ino: Ino, oi: Arc<OpenInode<S>>, flags: i32) -> Opened<S> {
        let acc = flags & libc::O_ACCMODE;
        let write = acc != libc::O_RDONLY;
        let (read_tier, size, backing, direct, unseen) = {
            let mut io = oi.io.write();
            let wanted = self.passthrough_for(ino, &oi, &io, write);
            // While other handles pass through, the kernel may have written
            // the file without telling us, and their closes (which settle
            // the size) reach us asynchronously, possibly after this open:
            // the statistics take the size from the file the kernel writes.
            let cached = oi.size.load(Ordering::Acquire);
            let size = match &io.kernel_file {
                Some((t, f)) => self.tiers.store(*t).fstat(f).map_or(cached, |st| st.size),
                None => cached,
            };
            let (backing, direct) = match (&io.kernel_file, wanted) {
                (Some(k), Some(w)) if k.0 == w.0 && Arc::ptr_eq(&k.1, &w.1) => (Some(w), false),
                (Some(k), _) => (Some(k.clone()), true),
                // `acquire` counted this handle already.
                (None, _) if io.handles > io.backed + 1 => (None, false),
                (None, w) => (w, false),
            };
            if let Some(b) = &backing {
                io.backed += 1;
                if io.kernel_file.is_none() {
                    io.kernel_watch = self.watch(ino, b);
                    io.kernel_file = Some(b.clone());
                }
                oi.passthrough.store(io.backed, Ordering::Release);
                if write {
                    // The kernel writes this file without telling us (a
                    // `direct` handle too, through a shared mapping): a
                    // migration copying it must not take it for one that
                    // only grew (see `change_gen`). Again at the close.
                    self.note_change(ino);
                }
            }
            // What the kernel does for this handle that no heat source
            // sees: the open stands for it.
            let seen = io.kernel_watch.is_some_and(|w| {
                if flags & libc::O_DIRECT != 0 {
                    w.seen.direct
                } else if write {
                    w.seen.writes
                } else {
                    w.seen.reads
                }
            });
            let unseen = backing.is_some() && !direct && !seen;
            (io.placement.read_tier(), size, backing, direct, unseen)
        };
        let h = Handle {
            ino,
            caller: *ctx,
            oi,
            write,
            append: flags & libc::O_APPEND != 0,
            sync: flags & (libc::O_SYNC | libc::O_DSYNC) != 0,
            backed: backing.is_some(),
            last: Mutex::new((u64::MAX, 0)),
        };
        let fh = self.new_fh();
        self.handles.write().insert(fh, Arc::new(h));
        self.emit(ino, EventKind::Open { write, tier: read_tier, size, unseen });
        Opened { fh, backing, direct }
    }

    /// The file the kernel could read and write for a new handle by
    /// itself, if this handle may bypass the daemon.
    fn passthrough_for(
        &self,
        ino: Ino,
        oi: &OpenInode<S>,
        io: &super::IoState<S>,
        write: bool,
    ) -> Option<(Tier, Arc<S::File>)> {
        // A split file's bytes are on two tiers: only the daemon can
        // assemble them. Writes that may use a write-back area must reach
        // the daemon.
        let wb = write && oi.wb.max_write > 0;
        if self.io_mode() != IoMode::Passthrough || oi.split.load(Ordering::Acquire) || wb {
            return None;
        }
        let file = if !write {
            match self.live_copy(oi, io) {
                Some(c) => Some((Tier::Ssd, c.clone())),
                None => io.primary_open().map(|p| (io.placement.primary(), p.clone())),
            }
        } else {
            // Writes by the kernel to the backing file run with the
            // daemon's credentials and would keep set-ID bits that a
            // local file system clears: such files take the userspace
            // path, which clears them.
            let setid = self.io_stat(oi, io).map(|st| st.mode & (libc::S_ISUID | libc::S_ISGID) != 0).unwrap_or(true);
            match (io.placement, io.primary_open()) {
                (Placement::On(t), Some(p))
                    if io.writable() && !setid && (t == Tier::Hdd || self.hooks().passthrough_write_ok(ino)) =>
                {
                    Some((t, p.clone()))
                }
                _ => None,
            }
        };
        // Its chunks are counted from its requests: the kernel must not
        // serve them where the heat source would not see them.
        file.filter(|(t, f)| {
            self.tiers.store(*t).raw_fd(f).is_some() && (!oi.chunks_counted || self.heat().sees(*t).reads)
        })
    }

    /// A handle let go of the inode's kernel backing file.
    fn unback(&self, oi: &OpenInode<S>) {
        self.unback_locked(oi, &mut oi.io.write());
    }

    /// [`Self::unback`] under the I/O lock.
    fn unback_locked(&self, oi: &OpenInode<S>, io: &mut super::IoState<S>) {
        io.backed = io.backed.saturating_sub(1);
        if io.backed == 0 {
            io.kernel_file = None;
            if let Some(w) = io.kernel_watch.take() {
                self.heat().unwatch(&w);
            }
        }
        oi.passthrough.store(io.backed, Ordering::Release);
    }

    /// Has the heat source watch the file the kernel is given as `ino`'s
    /// backing file; what it will see of the kernel's requests.
    fn watch(&self, ino: Ino, (t, f): &(Tier, Arc<S::File>)) -> Option<crate::heat::Watched> {
        self.tiers.store(*t).raw_fd(f).and_then(|fd| self.heat().watch(ino, *t, fd))
    }

    /// The kernel refused passthrough for a handle: count it as userspace.
    pub fn unpassthrough(&self, fh: u64) {
        // The handles map is not held while the I/O lock is waited for.
        let Some(h) = self.handles.read().get(&fh).cloned() else { return };
        if h.backed {
            self.unback(&h.oi);
            {
                let nh = Handle {
                    ino: h.ino,
                    caller: h.caller,
                    oi: h.oi.clone(),
                    write: h.write,
                    append: h.append,
                    sync: h.sync,
                    backed: false,
                    last: Mutex::new((u64::MAX, 0)),
                };
                self.handles.write().insert(fh, Arc::new(nh));
            }
        }
    }

    /// Opens a regular file (for a root caller).
    pub fn open(&self, ino: Ino, flags: i32) -> Result<Opened<S>> {
        self.open_as(&Ctx::default(), ino, flags)
    }

    /// Opens a regular file for `ctx`, whose writes through this handle run
    /// as that user.
    pub fn open_as(&self, ctx: &Ctx, ino: Ino, flags: i32) -> Result<Opened<S>> {
        let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let oi = self.acquire(ino, write, None)?;
        let stale = oi.io.read().placement == Placement::Cached && self.copy_is_stale(ino);
        let opened = self.register(ctx, ino, oi, flags);
        if stale {
            self.drop_stale_copy(ino);
        }
        Ok(opened)
    }

    /// Creates and opens a regular file.
    pub fn create(
        &self,
        ctx: &Ctx,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Result<(Attr, Opened<S>)> {
        let perm = mode & 0o7777 & !umask;
        let (ino, t, f, il) =
            self.create_node(ctx, parent, name, FileKind::File, perm & super::entry::ID_BITS, |s, pd| {
                s.open(pd, name, libc::O_CREAT | libc::O_EXCL | libc::O_RDWR, perm)
            })?;
        let oi = self.after_naming(parent, name, self.acquire(ino, true, Some((t, f, il, parent))))?;
        let opened = self.register(ctx, ino, oi, flags);
        match self.after_naming(parent, name, self.getattr(ino)) {
            Ok(a) => Ok((a, opened)),
            Err(e) => {
                let _ = self.release(opened.fh);
                Err(e)
            }
        }
    }

    /// Reads up to `size` bytes at `off`.
    pub fn read(&self, fh: u64, off: u64, size: u32) -> Result<Vec<u8>> {
        let h = self.handle(fh)?;
        let mut buf = vec![0u8; size as usize];
        let mut lost_copy = false;
        let (n, tier) = 'read: {
            let io = h.oi.io.read();
            if let Some(shadow) = self.split_shadow(&h.oi)? {
                let home = self.primary_of(h.ino, &io)?;
                let (n, all_ssd) = self.split_view(h.ino, &home, &shadow).read(&self.extents, off, &mut buf)?;
                break 'read (n, if all_ssd { Tier::Ssd } else { Tier::Hdd });
            }
            let copy = self.live_copy(&h.oi, &io);
            let from_copy = copy.map(|c| read_full(self.tiers.store(Tier::Ssd), c, &mut buf, off));
            match from_copy {
                Some(Ok(n)) => (n, Tier::Ssd),
                other => {
                    if let Some(Err(e)) = other {
                        tracing::warn!(ino = h.ino, error = %e, "read from cached copy failed; using the primary");
                        self.mark_copy_stale(&h.oi);
                        lost_copy = true;
                    }
                    let t = io.placement.primary();
                    let p = self.primary_of(h.ino, &io)?;
                    (read_full(self.tiers.store(t), &p, &mut buf, off)?, t)
                }
            }
        };
        if lost_copy {
            self.drop_stale_copy(h.ino);
        }
        buf.truncate(n);
        let fragment = h.fragment(off, n as u64);
        self.emit(h.ino, EventKind::Read { off, len: n as u64, tier, fragment });
        Ok(buf)
    }

    /// Writes `data` at `off` (at the end for O_APPEND handles). A write
    /// that finds no SSD room waits for the cleaner, holding no lock, and
    /// if that does not free enough in time the file leaves the SSD and the
    /// write lands on the HDD: no ENOSPC while the HDD has room.
    pub fn write(&self, fh: u64, off: u64, data: &[u8]) -> Result<u32> {
        let h = self.handle(fh)?;
        if !h.write {
            return err(libc::EBADF);
        }
        if let Some(n) = self.buffer_write(&h, off, data, &mut |_| Ok(()))? {
            return Ok(n);
        }
        self.with_room(h.ino, |force, budget| self.write_once(&h, off, data, force, budget))
    }

    /// One try of a write (see [`Volume::with_room`]).
    fn write_once(&self, h: &Handle<S>, off: u64, data: &[u8], force: bool, budget: bool) -> Result<Attempt<u32>> {
        let hooks = self.hooks();
        let len = data.len() as u64;
        let io = h.oi.io.read();
        let primary = self.primary_of(h.ino, &io)?;
        if !io.writable() {
            return err(libc::EBADF);
        }
        if let Some(shadow) = self.split_shadow(&h.oi)? {
            // Only the bytes that land on the file's SSD chunks write the
            // SSD: a write to its HDD chunks asks no budget and never takes
            // the file's chunks off the SSD. (An append is judged at the
            // size now; split_write serialises and places it.)
            let at = if h.append { h.oi.size.load(Ordering::Acquire) } else { off };
            let on_ssd: u64 =
                self.extents.lock().split(h.ino, at, len).iter().filter(|p| p.tier == Tier::Ssd).map(|p| p.len).sum();
            if budget && on_ssd > 0 && !hooks.ssd_write_ok(h.ino, on_ssd) {
                return Ok(Attempt::OverBudget);
            }
            return self.split_write(h, &primary, &shadow, off, data);
        }
        let copy = self.live_copy(&h.oi, &io).cloned();
        // Writes that may extend the file are serialised, so that each
        // knows whether it only adds bytes past the end: a migration
        // copying the file then copies just the new tail. So are all writes
        // to a cached file, whose two copies must see them in one order.
        let may_extend = h.append || off >= h.oi.size.load(Ordering::Acquire);
        let order = (may_extend || copy.is_some()).then(|| h.oi.order.lock());
        let t = io.placement.primary();
        let s = self.tiers.store(t);
        // A write that may extend the file takes its size from the file:
        // what tierfs last knew may be older (the kernel writes through
        // passthrough handles without telling), and a failed growing write
        // cuts the file back to it.
        let cur = if may_extend { s.fstat(&primary)?.size } else { h.oi.size.load(Ordering::Acquire) };
        let off = if h.append { cur } else { off };
        let extends = may_extend && off >= cur;
        let end = off + len;
        let ssd = io.placement.uses_ssd();
        // What the write may allocate on the SSD: the blocks past the end.
        // Holes inside a file are rare; the account is trued up from the
        // file itself right after.
        let want = if ssd { alloc_growth(cur, end) } else { 0 };
        // Growth could go elsewhere (a new file's data is growth): it is
        // paced like new files; an overwrite is held to the day's budget
        // only. Once the file could not leave the SSD, the write goes where
        // the file is: a write never fails for the budget's sake.
        if ssd && budget {
            let ok = if want > 0 { hooks.ssd_growth_ok(h.ino, len) } else { hooks.ssd_write_ok(h.ino, len) };
            if !ok {
                return Ok(Attempt::OverBudget);
            }
        }
        if !self.take_room(h.ino, want, force) {
            return Ok(Attempt::NoRoom(want));
        }
        let as_caller = AsCaller::new(&h.caller, false);
        if let Err(e) = write_full(s, &primary, data, off) {
            drop(as_caller);
            if extends {
                // Part of it may have landed: nothing was acknowledged, and
                // a retry (an append recomputes its offset) must not find
                // it. Extending writes are serialised, so this is ours.
                let _ = s.set_len(&primary, cur);
            }
            return self.failed(h.ino, want, t, len, e);
        }
        let mut lost_copy = false;
        if let Some(c) = &copy {
            if let Err(e) = write_full(self.tiers.store(Tier::Ssd), c, data, off) {
                tracing::warn!(ino = h.ino, error = %e, "write-through to the cached copy failed; dropping it");
                self.mark_copy_stale(&h.oi);
                lost_copy = true;
            }
        }
        drop(as_caller);
        let old = h.oi.size.fetch_max(end, Ordering::AcqRel);
        if !extends {
            self.note_change(h.ino);
        }
        if ssd {
            hooks.settle_ssd(h.ino, want, self.ssd_bytes(&h.oi, &io));
        }
        if h.sync {
            s.fsync(&primary, true)?;
        }
        drop(order);
        drop(io);
        if lost_copy {
            self.drop_stale_copy(h.ino);
        }
        let fragment = h.fragment(off, len);
        self.emit(h.ino, EventKind::Write { off, len, tier: t, size: old.max(end), fragment });
        Ok(Attempt::Done(data.len() as u32))
    }

    /// A write to a split file (the caller holds its I/O lock for reading):
    /// pieces on SSD chunks go to the shadow, the rest to the HDD file. A
    /// full SSD is answered like any other (room, or the file's chunks
    /// leave the SSD, and the write is tried again).
    fn split_write(
        &self,
        h: &Handle<S>,
        home: &S::File,
        shadow: &S::File,
        off: u64,
        data: &[u8],
    ) -> Result<Attempt<u32>> {
        let len = data.len() as u64;
        let hdd = self.tiers.store(Tier::Hdd);
        // Writes that may grow the file are serialised: each sets the HDD
        // file's size before its bytes land in the shadow.
        let may_extend = h.append || off.saturating_add(len) > h.oi.size.load(Ordering::Acquire);
        let order = may_extend.then(|| h.oi.order.lock());
        let off = if h.append { hdd.fstat(home)?.size } else { off };
        let end = off + len;
        // The bytes land as the writer (see `Split::caller`).
        let split = crate::extent::split::Split { caller: Some(h.caller), ..self.split_view(h.ino, home, shadow) };
        let all_ssd = match split.write_pieces(&self.extents, off, data) {
            Ok(all) => all,
            // Only the shadow's ENOSPC is a full SSD; the HDD's is the answer.
            Err((Tier::Ssd, e)) if e.is(libc::ENOSPC) => return Ok(Attempt::Full(len)),
            Err((_, e)) => return Err(e),
        };
        if all_ssd {
            self.touch_home(h.ino, home);
        }
        // A write into a punched hole of an SSD chunk allocates: the
        // account follows the shadow.
        self.hooks().settle_ssd(h.ino, 0, Some(self.ssd_alloc(shadow)));
        let old = h.oi.size.fetch_max(end, Ordering::AcqRel);
        self.note_change(h.ino);
        if h.sync {
            split.fsync()?;
        }
        drop(order);
        let fragment = h.fragment(off, len);
        let tier = if all_ssd { Tier::Ssd } else { Tier::Hdd };
        self.emit(h.ino, EventKind::Write { off, len, tier, size: old.max(end), fragment });
        Ok(Attempt::Done(data.len() as u32))
    }

    /// Allocated bytes of an SSD file.
    pub(crate) fn ssd_alloc(&self, f: &S::File) -> u64 {
        self.tiers.store(Tier::Ssd).fstat(f).map_or(0, |st| st.blocks * 512)
    }

    /// Reserves `want` bytes of SSD room for an operation that may allocate
    /// that much there (past the capacity on the last try, `force`); false
    /// if there is none.
    fn take_room(&self, ino: Ino, want: u64, force: bool) -> bool {
        let hooks = self.hooks();
        match (want, force) {
            (0, _) => true,
            (_, true) => {
                hooks.force_ssd(ino, want);
                true
            }
            (_, false) => hooks.reserve_ssd(ino, want),
        }
    }

    /// A backing call that had `want` bytes reserved failed: they go back;
    /// a full SSD asks for room (or the file's move to the HDD), any other
    /// error is the answer.
    fn failed<T>(&self, ino: Ino, want: u64, t: Tier, len: u64, e: std::io::Error) -> Result<Attempt<T>> {
        self.hooks().settle_ssd(ino, want, None);
        if e.raw_os_error() == Some(libc::ENOSPC) && t == Tier::Ssd {
            return Ok(Attempt::Full(len));
        }
        Err(e.into())
    }

    /// Runs `op` until it no longer needs SSD room. When it does, it has
    /// released its locks: this waits for the cleaner, and if that frees
    /// nothing in time, takes the file off the SSD (the operation then lands
    /// on the HDD). The last try may go past the configured capacity (`op`
    /// is told to force its reservation): better over the limit than a
    /// failed write while the SSD itself has room.
    pub(crate) fn with_room<T>(&self, ino: Ino, mut op: impl FnMut(bool, bool) -> Result<Attempt<T>>) -> Result<T> {
        let hooks = self.hooks();
        // Whether the write still asks the SSD write budget: once the file
        // could not be taken off the SSD for it, it no longer does, and
        // tries again at once (one diversion and one evacuation wait per
        // write; the rounds stay for the room a full SSD needs).
        let mut budget = true;
        let mut round = 0;
        while round < ROOM_ROUNDS {
            let force = round + 1 == ROOM_ROUNDS;
            match op(force, budget && !force)? {
                Attempt::Done(t) => return Ok(t),
                // The budget allowed this write already (when it was asked):
                // another round must not count it again.
                Attempt::NoRoom(bytes) => {
                    budget = false;
                    if !hooks.wait_for_room(ino, bytes, false) {
                        self.evacuate(ino);
                    }
                }
                Attempt::Full(bytes) => {
                    budget = false;
                    if !hooks.wait_for_room(ino, bytes, true) {
                        self.evacuate(ino);
                    }
                }
                Attempt::OverBudget => {
                    budget = self.evacuate(ino);
                    if !budget {
                        // Asked without the budget, a try cannot come back
                        // OverBudget: this repeats once at most.
                        continue;
                    }
                }
            }
            round += 1;
        }
        err(libc::ENOSPC)
    }

    /// The cached copy of an open file, unless it missed a change.
    pub(crate) fn live_copy<'a>(&self, oi: &OpenInode<S>, io: &'a IoState<S>) -> Option<&'a Arc<S::File>> {
        io.copy.as_ref().filter(|_| !oi.copy_stale.load(Ordering::Acquire))
    }

    /// Bytes the SSD copy of an open file occupies, if it has one.
    pub(crate) fn ssd_bytes(&self, oi: &OpenInode<S>, io: &IoState<S>) -> Option<u64> {
        let f = match io.placement {
            Placement::On(Tier::Ssd) => io.primary_open()?,
            Placement::Cached => self.live_copy(oi, io)?,
            Placement::On(Tier::Hdd) => return None,
        };
        self.tiers.store(Tier::Ssd).fstat(f).ok().map(|st| st.blocks * 512)
    }

    /// True if the cached copy of `ino` missed a change.
    pub(crate) fn copy_is_stale(&self, ino: Ino) -> bool {
        self.stale_copies.lock().contains(&ino)
    }

    /// A change did not reach the cached copy: nothing reads it any more.
    pub(crate) fn mark_copy_stale(&self, oi: &OpenInode<S>) {
        oi.copy_stale.store(true, Ordering::Release);
        self.stale_copies.lock().insert(oi.ino);
    }

    /// Drops a stale cached copy (the caller holds no lock). If that cannot
    /// be done now the copy stays unread, and a remount drops it.
    pub(crate) fn drop_stale_copy(&self, ino: Ino) {
        self.stale_copies.lock().insert(ino);
        if !self.evacuate(ino) {
            tracing::warn!(ino, "a stale cached copy could not be dropped yet; it is not read");
        }
    }

    /// True if no cached copy is stale (else the shutdown is not clean: the
    /// next mount drops every copy).
    pub fn no_stale_copies(&self) -> bool {
        self.stale_copies.lock().is_empty()
    }

    /// Called by the migration that dropped a copy.
    pub(crate) fn copy_dropped(&self, ino: Ino) {
        self.stale_copies.lock().remove(&ino);
    }

    /// Flush on close of one descriptor: nothing is buffered here.
    pub fn flush(&self, fh: u64) -> Result<()> {
        self.handle(fh).map(drop)
    }

    /// Makes a file durable.
    pub fn fsync(&self, fh: u64, datasync: bool) -> Result<()> {
        let h = self.handle(fh)?;
        let io = h.oi.io.read();
        if let Some(p) = io.primary_open() {
            self.tiers.store(io.placement.primary()).fsync(p, datasync)?;
        }
        if let Some(c) = self.live_copy(&h.oi, &io) {
            self.tiers.store(Tier::Ssd).fsync(c, datasync)?;
        }
        if let Some(shadow) = self.split_shadow(&h.oi)? {
            self.tiers.store(Tier::Ssd).fsync(&shadow, datasync)?;
        }
        Ok(())
    }

    /// Closes a handle; the last one closes the backing descriptors. The
    /// SSD account is trued up from the file (passthrough writes bypass it),
    /// and a file whose last name went while it was open leaves it.
    pub fn release(&self, fh: u64) -> Result<()> {
        let h = self.handles.write().remove(&fh).ok_or_else(|| Error::errno(libc::EBADF))?;
        let (last, size) = {
            let mut io = h.oi.io.write();
            io.handles = io.handles.saturating_sub(1);
            if h.backed {
                self.unback_locked(&h.oi, &mut io);
            }
            let last = io.handles == 0;
            let mut size = None;
            if last || (h.backed && h.write) {
                // The account is settled before the state retires, under
                // its write lock: a switch-over either waits for this or,
                // once the state is retired and gone from the map, runs
                // after it, so that a demotion is never undone.
                size = Some(self.io_stat(&h.oi, &io).map(|s| s.size).unwrap_or(0));
                let hooks = self.hooks();
                // Settle first, then look at the record: an unlink does not
                // take this lock, and one that deleted the record and
                // dropped the charge between a look and a settle left a
                // charge for a file that no longer existed. Now either its
                // `off_ssd` comes after the settle, or the look below sees
                // the record gone.
                if let Some(b) = self.ssd_bytes(&h.oi, &io) {
                    hooks.settle_ssd(h.ino, 0, Some(b));
                }
                if last && matches!(self.ns.record(h.ino), Ok(None)) {
                    // Unlinked while open: its data is gone with this close.
                    hooks.off_ssd(h.ino);
                }
            }
            io.retired = last;
            (last, size)
        };
        if last {
            self.forget_open(h.ino, &h.oi);
            if matches!(self.ns.record(h.ino), Ok(None)) {
                // Unlinked while open: its chunks go with its last handle
                // (tested under the lock the chunk mover holds).
                let _il = self.ilocks.get(h.ino).write();
                if self.is_split(h.ino) && self.open_inode(h.ino).is_none() {
                    self.forget_chunks(h.ino);
                }
            }
        }
        let Some(size) = size else { return Ok(()) };
        if h.backed && h.write {
            h.oi.size.store(size, Ordering::Release);
            self.note_change(h.ino);
        }
        if last {
            self.emit(h.ino, EventKind::Close { size });
        }
        Ok(())
    }

    /// fallocate(2) on the primary (and the cached copy).
    pub fn fallocate(&self, fh: u64, off: u64, len: u64, mode: i32) -> Result<()> {
        let h = self.handle(fh)?;
        if !h.write {
            return err(libc::EBADF);
        }
        if mode & SHIFTS != 0 && h.oi.split.load(Ordering::Acquire) {
            // Shifting data would move bytes across chunks: the chunks
            // leave the SSD first (in the background executor).
            self.evacuate(h.ino);
        }
        self.with_room(h.ino, |force, _| self.fallocate_once(&h, off, len, mode, force))
    }

    fn fallocate_once(&self, h: &Handle<S>, off: u64, len: u64, mode: i32, force: bool) -> Result<Attempt<()>> {
        let io = h.oi.io.read();
        let primary = self.primary_of(h.ino, &io)?;
        if let Some(shadow) = self.split_shadow(&h.oi)? {
            // Under the same I/O lock the descriptors were taken under (a
            // migration could otherwise swap them in between). Review finding.
            let size = self.split_fallocate(h, &primary, &shadow, off, len, mode)?;
            drop(io);
            if let Some(size) = size {
                self.emit(h.ino, EventKind::Resize { size });
            }
            return Ok(Attempt::Done(()));
        }
        let copy = self.live_copy(&h.oi, &io).cloned();
        let _order = copy.is_some().then(|| h.oi.order.lock());
        let t = io.placement.primary();
        let end = off + len;
        let frees = mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_COLLAPSE_RANGE) != 0;
        // Modes that may change the size (collapsing and inserting ranges
        // by `len`, allocating past the end).
        let resizes = mode & (libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE) != 0
            || (!frees && mode & libc::FALLOC_FL_KEEP_SIZE == 0);
        let hooks = self.hooks();
        let ssd = io.placement.uses_ssd();
        // Allocating modes may take every block of the range.
        let want = if ssd && !frees { alloc_growth(off - off % 4096, end) } else { 0 };
        if !self.take_room(h.ino, want, force) {
            return Ok(Attempt::NoRoom(want));
        }
        let as_caller = AsCaller::new(&h.caller, false);
        if let Err(e) = self.tiers.store(t).fallocate(&primary, mode, off, len) {
            drop(as_caller);
            return self.failed(h.ino, want, t, len, e);
        }
        let mut lost_copy = false;
        if let Some(c) = &copy {
            if self.tiers.store(Tier::Ssd).fallocate(c, mode, off, len).is_err() {
                self.mark_copy_stale(&h.oi);
                lost_copy = true;
            }
        }
        drop(as_caller);
        self.note_change(h.ino);
        if ssd {
            hooks.settle_ssd(h.ino, want, self.ssd_bytes(&h.oi, &io));
        }
        let size = match resizes {
            true => {
                let size = self.tiers.store(t).fstat(&primary)?.size;
                h.oi.size.store(size, Ordering::Release);
                Some(size)
            }
            false => None,
        };
        drop(_order);
        drop(io);
        if lost_copy {
            self.drop_stale_copy(h.ino);
        }
        if let Some(size) = size {
            self.emit(h.ino, EventKind::Resize { size });
        }
        Ok(Attempt::Done(()))
    }

    /// fallocate of a split file: the HDD file takes the call; ranges that
    /// zero bytes (punching, zeroing) are punched in the shadow where they
    /// cover SSD chunks, so both copies read alike. Shifting modes are
    /// refused if the chunks could not leave the SSD first.
    fn split_fallocate(
        &self,
        h: &Handle<S>,
        home: &S::File,
        shadow: &S::File,
        off: u64,
        len: u64,
        mode: i32,
    ) -> Result<Option<u64>> {
        if mode & SHIFTS != 0 {
            return err(libc::EOPNOTSUPP);
        }
        // The order mutex: a growing write sets the HDD size first, and an
        // allocation past the end must not race it.
        let _order = h.oi.order.lock();
        let hdd = self.tiers.store(Tier::Hdd);
        // The HDD file first: a mode its file system refuses changes
        // nothing. As the writer: it may allocate.
        let as_caller = AsCaller::new(&h.caller, false);
        let r = hdd.fallocate(home, mode, off, len);
        drop(as_caller);
        r?;
        if mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0 {
            self.split_view(h.ino, home, shadow).punch_shadow(&self.extents, off, len)?;
            self.hooks().settle_ssd(h.ino, 0, Some(self.ssd_alloc(shadow)));
        }
        self.note_change(h.ino);
        let resizes = mode & libc::FALLOC_FL_KEEP_SIZE == 0;
        let size = if resizes {
            let size = hdd.fstat(home)?.size;
            h.oi.size.store(size, Ordering::Release);
            Some(size)
        } else {
            None
        };
        Ok(size)
    }

    /// lseek(2); only SEEK_DATA, SEEK_HOLE and SEEK_END need the file.
    pub fn lseek(&self, fh: u64, off: i64, whence: i32) -> Result<i64> {
        let h = self.handle(fh)?;
        let io = h.oi.io.read();
        if h.oi.split.load(Ordering::Acquire) && (whence == libc::SEEK_DATA || whence == libc::SEEK_HOLE) {
            // Data of a split file is on two tiers: the whole file is
            // reported as data (allowed: a hole may always read as data).
            let p = self.primary_of(h.ino, &io)?;
            let size = self.tiers.store(Tier::Hdd).fstat(&p)?.size;
            let off = u64::try_from(off).map_err(|_| Error::errno(libc::EINVAL))?;
            if off >= size {
                return err(libc::ENXIO);
            }
            return Ok(if whence == libc::SEEK_DATA { off } else { size } as i64);
        }
        match (io.primary_open(), self.live_copy(&h.oi, &io)) {
            (None, Some(c)) => Ok(self.tiers.store(Tier::Ssd).seek(c, off, whence)?),
            _ => {
                let p = self.primary_of(h.ino, &io)?;
                Ok(self.tiers.store(io.placement.primary()).seek(&p, off, whence)?)
            }
        }
    }

    /// copy_file_range(2). Within one tier (and no cached copy to keep in
    /// step) the backing file system copies, where it can (see
    /// [`crate::store::features`]); otherwise, and for whatever a short
    /// backing copy left, the data passes through the daemon in 1 MiB
    /// pieces, so the count answered is short only at the end of the source.
    pub fn copy_file_range(&self, fh_in: u64, off_in: u64, fh_out: u64, off_out: u64, len: u64) -> Result<u64> {
        let hin = self.handle(fh_in)?;
        let hout = self.handle(fh_out)?;
        if !hout.write || hout.append {
            return err(libc::EBADF);
        }
        let len = len.min(16 << 20);
        let mut done = 0u64;
        if hin.ino != hout.ino {
            let same = {
                // Two files' I/O locks: always in inode order, so that two
                // copies in opposite directions cannot wait for each other.
                let (first, second) = if hin.ino < hout.ino { (&hin, &hout) } else { (&hout, &hin) };
                let (g1, g2) = (first.oi.io.read(), second.oi.io.read());
                let (i, o) = if hin.ino < hout.ino { (&g1, &g2) } else { (&g2, &g1) };
                // Split files keep some bytes in their shadows: not for the
                // backing file system to copy.
                let plain = !hin.oi.split.load(Ordering::Acquire) && !hout.oi.split.load(Ordering::Acquire);
                match (i.copy.is_none() && plain, o.placement, i.primary_open(), o.primary_open()) {
                    (true, Placement::On(t), Some(ip), Some(op))
                        if i.placement.primary() == t && t == Tier::Hdd && self.features(t).copy_range =>
                    {
                        let _as = AsCaller::new(&hout.caller, false);
                        let r = self.tiers.store(t).copy_range(ip, off_in, op, off_out, len);
                        // Before the locks go: a migration must see it.
                        self.note_change(hout.ino);
                        Some(r)
                    }
                    _ => None,
                }
            };
            if let Some(r) = same {
                match r {
                    Ok(n) => {
                        let end = off_out + n as u64;
                        let old = hout.oi.size.fetch_max(end, Ordering::AcqRel);
                        self.emit(
                            hin.ino,
                            EventKind::Read { off: off_in, len: n as u64, tier: Tier::Hdd, fragment: false },
                        );
                        self.emit(
                            hout.ino,
                            EventKind::Write {
                                off: off_out,
                                len: n as u64,
                                tier: Tier::Hdd,
                                size: old.max(end),
                                fragment: false,
                            },
                        );
                        if n as u64 >= len {
                            return Ok(n as u64);
                        }
                        // Short (even 0 before the end of the source, on
                        // some network file systems): the rest below,
                        // which ends at the true end of the source.
                        done = n as u64;
                    }
                    Err(e)
                        if ![libc::EXDEV, libc::EINVAL, libc::EOPNOTSUPP, libc::ENOSYS]
                            .contains(&e.raw_os_error().unwrap_or(0)) =>
                    {
                        return Err(e.into())
                    }
                    Err(_) => {}
                }
            }
        }
        // An error after some bytes were copied ends the copy short there.
        let partial = |e: Error, done: u64| if done > 0 { Ok(done) } else { Err(e) };
        while done < len {
            let chunk = (len - done).min(1 << 20) as u32;
            let buf = match self.read(fh_in, off_in + done, chunk) {
                Ok(b) => b,
                Err(e) => return partial(e, done),
            };
            if buf.is_empty() {
                break;
            }
            let n = match self.write(fh_out, off_out + done, &buf) {
                Ok(n) => n as u64,
                Err(e) => return partial(e, done),
            };
            done += n;
            if n < buf.len() as u64 {
                break;
            }
        }
        Ok(done)
    }

    /// Takes a file off the SSD: demotes it, or drops its cached copy.
    /// Done by the engine's executor when there is one (the caller holds no
    /// lock); handles follow the file. True if it is off the SSD now.
    pub(crate) fn evacuate(&self, ino: Ino) -> bool {
        if let Some(done) = self.hooks().evacuate(ino) {
            return done;
        }
        if self.is_split(ino) {
            let r = self.chunk_op(ino, super::extent::ChunkOp::Unsplit, &crate::migrate::NoCrash, &mut |_| Ok(()));
            return matches!(
                r,
                Ok(crate::migrate::Outcome::Done(_)
                    | crate::migrate::Outcome::Skipped(crate::migrate::Skip::AlreadyThere))
            );
        }
        let mv = match self.ns.record(ino) {
            Ok(Some(r)) if r.placement == Placement::Cached => crate::migrate::Move::DropCopy,
            Ok(Some(r)) if r.placement == Placement::On(Tier::Ssd) => crate::migrate::Move::Demote,
            _ => return true,
        };
        matches!(self.migrate(ino, mv, &crate::migrate::NoCrash), Ok(crate::migrate::Outcome::Done(_)))
    }
}

#[cfg(test)]
mod tests;
