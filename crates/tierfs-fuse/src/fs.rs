//! `impl fuser::Filesystem`: thin dispatchers from kernel requests to
//! [`tierfs_core::vfs::Volume`], and back into replies.

use crate::errno::errno;
use crate::passthrough::Backings;
use fuser::{
    AccessFlags, BackingId, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenFlags, PollEvents, PollFlags,
    PollNotifier, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen, ReplyPoll, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tierfs_core::store::{FileKind, SetTime, Store, TimeSpec};
use tierfs_core::vfs::{Attr, Ctx, IoMode, Opened, SetAttr, Volume};
use tierfs_core::Result;

/// Work to do when the session ends (flush statistics, mark clean).
pub type OnDestroy = Box<dyn FnOnce() + Send + Sync>;

/// The FUSE file system over a volume.
pub struct TierFs<S: Store> {
    vol: Arc<Volume<S>>,
    /// How long the kernel may keep an entry, attributes, or a name's absence.
    ttl: Duration,
    backings: Backings,
    on_destroy: Option<OnDestroy>,
    virt: Option<Arc<dyn crate::VirtualXattrs>>,
    linger: Arc<crate::linger::Linger>,
    uring: crate::mount::UringMode,
}

impl<S: Store> TierFs<S> {
    /// Serves `vol`; `on_destroy` runs once when the file system is
    /// unmounted; the kernel may cache what it is told for `ttl`.
    pub fn new(
        vol: Arc<Volume<S>>,
        on_destroy: OnDestroy,
        virt: Option<Arc<dyn crate::VirtualXattrs>>,
        ttl: Duration,
    ) -> Self {
        let linger = Arc::new(crate::linger::Linger::new(Duration::ZERO));
        let uring = crate::mount::UringMode::Never;
        TierFs { vol, ttl, backings: Backings::default(), on_destroy: Some(on_destroy), virt, linger, uring }
    }

    /// When to ask the kernel for FUSE over io_uring at INIT.
    pub fn with_io_uring(mut self, mode: crate::mount::UringMode) -> Self {
        self.uring = mode;
        self
    }

    /// Lingers after each answer (see [`crate::linger`]).
    pub fn with_linger(mut self, linger: Arc<crate::linger::Linger>) -> Self {
        self.linger = linger;
        self
    }

    /// The first line of every request's handler: counts the request (the
    /// migrator's busy gate reads the count), says what the thread does (a
    /// request that wakes the HDD is noted with it) and returns the guard that
    /// lingers after the answer.
    fn request(&self, op: &'static str, ino: u64) -> crate::linger::Guard<'_> {
        self.vol.note_request();
        tierfs_core::quiet::set_doing(op, ino);
        self.linger.guard()
    }
}

fn system_time(t: TimeSpec) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec as u32)
    } else {
        UNIX_EPOCH - Duration::new((-t.sec) as u64, 0) + Duration::from_nanos(t.nsec as u64)
    }
}

fn set_time(t: Option<TimeOrNow>) -> Option<SetTime> {
    t.map(|t| match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(st) => {
            let (sec, nsec) = match st.duration_since(UNIX_EPOCH) {
                Ok(d) => (d.as_secs() as i64, d.subsec_nanos() as i64),
                Err(e) => {
                    let d = e.duration();
                    let mut sec = -(d.as_secs() as i64);
                    let mut nsec = -(d.subsec_nanos() as i64);
                    if nsec < 0 {
                        sec -= 1;
                        nsec += 1_000_000_000;
                    }
                    (sec, nsec)
                }
            };
            SetTime::At(TimeSpec { sec, nsec })
        }
    })
}

fn file_type(k: FileKind) -> FileType {
    match k {
        FileKind::Dir => FileType::Directory,
        FileKind::File => FileType::RegularFile,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDev => FileType::CharDevice,
        FileKind::BlockDev => FileType::BlockDevice,
    }
}

/// Converts core attributes to fuser's.
pub fn fuse_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: system_time(a.atime),
        mtime: system_time(a.mtime),
        ctime: system_time(a.ctime),
        crtime: system_time(a.ctime),
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize.max(512),
        flags: 0,
    }
}

/// The entry of a name that does not exist (inode 0).
fn absent() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 512,
        flags: 0,
    }
}

fn ctx(req: &Request) -> Ctx {
    Ctx { uid: req.uid(), gid: req.gid(), pid: req.pid() }
}

/// Tells the kernel to drop attributes tierfs changed behind it.
pub struct Invalidator(pub fuser::Notifier);

impl tierfs_core::vfs::KernelCache for Invalidator {
    fn attrs_changed(&self, ino: u64) {
        // A negative offset: the attributes only, not the page cache.
        if let Err(e) = self.0.inval_inode(INodeNo(ino), -1, 0) {
            tracing::debug!(ino, error = %e, "the kernel did not take an invalidation");
        }
    }

    fn listing_changed(&self, dir: u64) {
        // Offset 0, length 0: the whole page cache of the directory, which
        // is where the kernel keeps the listing (FOPEN_CACHE_DIR).
        if let Err(e) = self.0.inval_inode(INodeNo(dir), 0, 0) {
            tracing::debug!(dir, error = %e, "the kernel did not take an invalidation");
        }
    }

    fn entry_changed(&self, parent: u64, name: &OsStr) {
        // The kernel holds the directory's lock until the request that
        // calls this is answered, and takes it to drop the entry: sent from
        // a thread of its own, which waits for the answer (a rare path: an
        // operation that failed after committing a name).
        let notifier = self.0.clone();
        let name = name.to_os_string();
        let sent = std::thread::Builder::new().name("tierfs-inval".into()).spawn(move || {
            if let Err(e) = notifier.inval_entry(INodeNo(parent), &name) {
                tracing::debug!(parent, error = %e, "the kernel did not take an invalidation");
            }
        });
        if let Err(e) = sent {
            tracing::warn!(parent, error = %e, "cannot start a thread to invalidate an entry");
        }
    }
}

impl<S: Store> TierFs<S> {
    /// `r`, the answer of a request that changes names in `dirs` (which
    /// the kernel then drops its copies of listings of, once it has the
    /// answer): the volume is told first, for the listings in progress.
    fn touched<T>(&self, r: tierfs_core::error::Result<T>, dirs: &[INodeNo]) -> tierfs_core::error::Result<T> {
        if r.is_ok() {
            for d in dirs {
                self.vol.listing_touched(d.0);
            }
        }
        r
    }

    /// The kernel's backing id for a new handle and the open flags to go
    /// with it, or `None` (the handle then counts as userspace) if the
    /// handle has no backing file or the kernel refused it.
    fn backing_id(
        &self,
        ino: u64,
        opened: &Opened<S>,
        open_backing: impl FnOnce(std::os::fd::BorrowedFd<'_>) -> std::io::Result<BackingId>,
    ) -> Option<(FopenFlags, Arc<BackingId>)> {
        let (t, f) = opened.backing.as_ref()?;
        let flags = if opened.direct { USERSPACE_FLAGS } else { FopenFlags::FOPEN_NOFLUSH };
        match self.vol.tiers.store(*t).raw_fd(f).map(|fd| self.backings.get(ino, opened.fh, || open_backing(fd))) {
            Some(Ok(id)) => return Some((flags, id)),
            Some(Err(e)) => tracing::warn!(error = %e, "passthrough refused by the kernel; using userspace I/O"),
            None => {}
        }
        self.vol.unpassthrough(opened.fh);
        None
    }

    /// The single exit for errors: a vanished tier turns ENOENT into EIO.
    fn fail(&self, e: tierfs_core::Error) -> Errno {
        errno(&self.vol.vanished(e))
    }
}

fn entry<S: Store>(fs: &TierFs<S>, reply: ReplyEntry, r: Result<Attr>) {
    match r {
        Ok(a) => reply.entry(&fs.ttl, &fuse_attr(&a), Generation(0)),
        Err(e) => reply.error(fs.fail(e)),
    }
}

fn empty<S: Store>(fs: &TierFs<S>, reply: ReplyEmpty, r: Result<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(fs.fail(e)),
    }
}

fn xattr_reply<S: Store>(fs: &TierFs<S>, reply: ReplyXattr, size: u32, r: Result<Vec<u8>>) {
    match r {
        Ok(v) if size == 0 => reply.size(v.len() as u32),
        Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
        Ok(v) => reply.data(&v),
        Err(e) => reply.error(fs.fail(e)),
    }
}

/// Open flags of a handle whose reads and writes reach the daemon. No
/// handle asks for a flush at each close: nothing is buffered in the daemon
/// (a request fewer per close).
const USERSPACE_FLAGS: FopenFlags =
    FopenFlags::FOPEN_DIRECT_IO.union(FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES).union(FopenFlags::FOPEN_NOFLUSH);

impl<S: Store> Filesystem for TierFs<S> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let caps = config.capabilities();
        let mut want =
            InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO | InitFlags::FUSE_PARALLEL_DIROPS;
        want |= InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP | InitFlags::FUSE_HANDLE_KILLPRIV_V2;
        want &= caps;
        let _ = config.add_capabilities(want);
        if !caps.contains(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP) {
            tracing::warn!("kernel lacks FUSE_DIRECT_IO_ALLOW_MMAP: shared writable mmap fails in userspace I/O mode");
        }
        if self.vol.io_mode() == IoMode::Passthrough {
            let ok =
                config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok() && config.set_max_stack_depth(2).is_ok();
            if !ok {
                tracing::warn!("kernel has no FUSE passthrough: using userspace I/O");
                self.vol.set_io_mode(IoMode::Userspace);
            }
        }
        let _ = config.set_max_write(1 << 20);
        let uring = self.uring != crate::mount::UringMode::Never;
        if uring && config.add_capabilities(InitFlags::FUSE_OVER_IO_URING).is_err() {
            let why = "the kernel offers no FUSE over io_uring (Linux 6.14+, with the fuse module's enable_uring set)";
            if self.uring == crate::mount::UringMode::Always {
                tracing::warn!("--io-uring always: {why}: requests come from /dev/fuse");
            } else {
                tracing::debug!("{why}");
            }
        }
        tracing::info!(io_mode = ?self.vol.io_mode(), "file system ready");
        Ok(())
    }

    fn destroy(&mut self) {
        if let Some(f) = self.on_destroy.take() {
            f();
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let _linger = self.request("lookup", parent.0);
        match self.vol.lookup_present(parent.0, name) {
            Ok(Some(a)) => entry(self, reply, Ok(a)),
            // The name's absence is cached too (an entry of inode 0): a
            // name appears only through a request the kernel sees. No look
            // at the tiers' roots for it (`Volume::lookup_present`).
            Ok(None) if !self.ttl.is_zero() => reply.entry(&self.ttl, &absent(), Generation(0)),
            Ok(None) => reply.error(Errno::ENOENT),
            Err(e) => reply.error(self.fail(e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let _linger = self.request("getattr", ino.0);
        match self.vol.getattr(ino.0) {
            Ok(a) => reply.attr(&self.ttl, &fuse_attr(&a)),
            Err(e) => reply.error(self.fail(e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let _linger = self.request("setattr", ino.0);
        let sa = SetAttr { mode, uid, gid, size, atime: set_time(atime), mtime: set_time(mtime) };
        let mut r = self.vol.setattr(ino.0, fh.map(|f| f.0), &sa);
        // Truncation by an unprivileged user clears set-ID bits
        // (FUSE_HANDLE_KILLPRIV_V2 leaves this to the file system).
        if r.is_ok() && size.is_some() && req.uid() != 0 && mode.is_none() {
            r = self.vol.kill_privs(ino.0).and_then(|_| self.vol.getattr(ino.0));
        }
        match r {
            Ok(a) => reply.attr(&self.ttl, &fuse_attr(&a)),
            Err(e) => reply.error(self.fail(e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let _linger = self.request("readlink", ino.0);
        match self.vol.readlink(ino.0) {
            Ok(t) => reply.data(std::os::unix::ffi::OsStrExt::as_bytes(t.as_os_str())),
            Err(e) => reply.error(self.fail(e)),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let _linger = self.request("mknod", parent.0);
        entry(
            self,
            reply,
            self.touched(self.vol.mknod(&ctx(req), parent.0, name, mode, umask, rdev as u64), &[parent]),
        );
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let _linger = self.request("mkdir", parent.0);
        entry(self, reply, self.touched(self.vol.mkdir(&ctx(req), parent.0, name, mode, umask), &[parent]));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _linger = self.request("unlink", parent.0);
        empty(self, reply, self.touched(self.vol.unlink(parent.0, name), &[parent]));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _linger = self.request("rmdir", parent.0);
        empty(self, reply, self.touched(self.vol.rmdir(parent.0, name), &[parent]));
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let _linger = self.request("symlink", parent.0);
        entry(
            self,
            reply,
            self.touched(self.vol.symlink(&ctx(req), parent.0, link_name, target.as_os_str()), &[parent]),
        );
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let _linger = self.request("rename", parent.0);
        let r = self.vol.rename(parent.0, name, newparent.0, newname, flags.bits());
        empty(self, reply, self.touched(r, &[parent, newparent]));
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let _linger = self.request("link", ino.0);
        entry(self, reply, self.touched(self.vol.link(ino.0, newparent.0, newname), &[newparent]));
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _linger = self.request("open", ino.0);
        let opened = match self.vol.open_as(&ctx(req), ino.0, flags.0) {
            Ok(o) => o,
            Err(e) => return reply.error(self.fail(e)),
        };
        if let Some((flags, id)) = self.backing_id(ino.0, &opened, |fd| reply.open_backing(fd)) {
            return reply.opened_passthrough(FileHandle(opened.fh), flags, &id);
        }
        reply.opened(FileHandle(opened.fh), USERSPACE_FLAGS);
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let _linger = self.request("read", _ino.0);
        match self.vol.read(fh.0, offset, size) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(self.fail(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let _linger = self.request("write", ino.0);
        match self.vol.write(fh.0, offset, data) {
            Ok(n) => {
                // With FUSE_HANDLE_KILLPRIV_V2 the kernel leaves this to us.
                if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                    if let Err(e) = self.vol.kill_privs(ino.0) {
                        tracing::warn!(ino = ino.0, error = %e, "could not clear set-ID bits after a write");
                    }
                }
                reply.written(n)
            }
            Err(e) => reply.error(self.fail(e)),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        let _linger = self.request("flush", _ino.0);
        empty(self, reply, self.vol.flush(fh.0));
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let _linger = self.request("release", _ino.0);
        self.backings.put(fh.0);
        empty(self, reply, self.vol.release(fh.0));
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let _linger = self.request("fsync", _ino.0);
        empty(self, reply, self.vol.fsync(fh.0, datasync));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let _linger = self.request("opendir", ino.0);
        match self.vol.opendir(ino.0) {
            Ok(fh) => {
                // The kernel keeps the listing in the directory's page
                // cache and answers the next opendir-readdir from it until
                // the directory changes (its mtime, or a change through the
                // mount), or tierfs says its listing changed.
                let cache = !self.ttl.is_zero() && self.vol.listing_is_keyed(fh);
                let flags = if cache {
                    FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE
                } else {
                    FopenFlags::empty()
                };
                reply.opened(FileHandle(fh), flags)
            }
            Err(e) => reply.error(self.fail(e)),
        }
    }

    fn readdir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let _linger = self.request("readdir", _ino.0);
        match self.vol.readdir(fh.0, offset) {
            Ok(entries) => {
                for e in entries {
                    if reply.add(INodeNo(e.ino), e.next, file_type(e.kind), &e.name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(self.fail(e)),
        }
    }

    fn readdirplus(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let _linger = self.request("readdirplus", _ino.0);
        match self.vol.readdirplus(fh.0, offset, reply.capacity() / ReplyDirectoryPlus::MIN_ENTRY) {
            Ok(entries) => {
                for e in entries {
                    // A name whose attributes cannot be had now is listed
                    // without them (the kernel looks it up when it is
                    // used), not left out: the kernel may keep the listing.
                    let full = match self.vol.getattr(e.ino) {
                        Ok(a) => reply.add(INodeNo(e.ino), e.next, &e.name, &self.ttl, &fuse_attr(&a), Generation(0)),
                        Err(_) => reply.add_without_attr(INodeNo(e.ino), e.next, file_type(e.kind), &e.name),
                    };
                    if full {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(self.fail(e)),
        }
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        let _linger = self.request("releasedir", _ino.0);
        empty(self, reply, self.vol.releasedir(fh.0));
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let _linger = self.request("fsyncdir", ino.0);
        empty(self, reply, self.vol.fsyncdir(ino.0));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let _linger = self.request("statfs", _ino.0);
        match self.vol.statfs() {
            Ok(s) => reply.statfs(s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize),
            Err(e) => reply.error(self.fail(e)),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let _linger = self.request("setxattr", ino.0);
        if let Some(v) = &self.virt {
            if let Some(r) = v.set(&ctx(req), ino.0, name, value, flags) {
                return empty(self, reply, r);
            }
        }
        empty(self, reply, self.vol.setxattr_stored(ino.0, name, value, flags));
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let _linger = self.request("getxattr", ino.0);
        if let Some(v) = &self.virt {
            if let Some(r) = v.get(ino.0, name) {
                return xattr_reply(self, reply, size, r);
            }
        }
        xattr_reply(self, reply, size, self.vol.getxattr_stored(ino.0, name));
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let _linger = self.request("listxattr", ino.0);
        let mut r = self.vol.listxattr_stored(ino.0);
        if let (Some(v), Ok(list)) = (&self.virt, r.as_mut()) {
            list.extend(v.list(ino.0));
        }
        xattr_reply(self, reply, size, r);
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _linger = self.request("removexattr", ino.0);
        if let Some(v) = &self.virt {
            if let Some(r) = v.remove(&ctx(req), ino.0, name) {
                return empty(self, reply, r);
            }
        }
        empty(self, reply, self.vol.removexattr_stored(ino.0, name));
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let _linger = self.request("access", ino.0);
        empty(self, reply, self.vol.access(&ctx(req), ino.0, mask.bits()));
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let _linger = self.request("create", parent.0);
        let (attr, opened) =
            match self.touched(self.vol.create(&ctx(req), parent.0, name, mode, umask, flags), &[parent]) {
                Ok(x) => x,
                Err(e) => return reply.error(self.fail(e)),
            };
        let fa = fuse_attr(&attr);
        if let Some((flags, id)) = self.backing_id(attr.ino, &opened, |fd| reply.open_backing(fd)) {
            return reply.created_passthrough(&self.ttl, &fa, Generation(0), FileHandle(opened.fh), flags, &id);
        }
        reply.created(&self.ttl, &fa, Generation(0), FileHandle(opened.fh), USERSPACE_FLAGS);
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let _linger = self.request("fallocate", _ino.0);
        empty(self, reply, self.vol.fallocate(fh.0, offset, length, mode));
    }

    fn lseek(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        let _linger = self.request("lseek", _ino.0);
        match self.vol.lseek(fh.0, offset, whence) {
            Ok(o) => reply.offset(o),
            Err(e) => reply.error(self.fail(e)),
        }
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let _linger = self.request("copy_file_range", 0);
        match self.vol.copy_file_range(fh_in.0, offset_in, fh_out.0, offset_out, len) {
            Ok(n) => reply.written(n.min(u32::MAX as u64) as u32),
            Err(e) => reply.error(self.fail(e)),
        }
    }

    /// tierfs has no ioctls and passes none to the backing files: ENOTTY,
    /// as from a file that knows none of them. The kernel asks again every
    /// time (nothing like ENOSYS makes it stop), and `isatty` asks of every
    /// file it is given (Python's `open` calls it): fuser's default logged
    /// a warning for each.
    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        let _linger = self.request("ioctl", _ino.0);
        reply.error(Errno::ENOTTY);
    }

    /// Files and directories are always ready, as on a local file system:
    /// ENOSYS tells the kernel so once for the whole mount (it stops
    /// asking), without the warning fuser's default logs.
    fn poll(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _ph: PollNotifier,
        _events: PollEvents,
        _flags: PollFlags,
        reply: ReplyPoll,
    ) {
        let _linger = self.request("poll", _ino.0);
        reply.error(Errno::ENOSYS);
    }
}
