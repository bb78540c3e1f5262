//! [`MemStore`]: an in-memory tier that remembers what was made durable.
//!
//! File data, attributes and extended attributes become durable on
//! [`Store::fsync`]; a directory's entries become durable on
//! [`Store::sync_dir`]. [`MemStore::crash`] throws away everything that was
//! not, the way a power cut would on a file system that promises no more
//! than POSIX. The migration crash tests run the protocol against it.

use super::{DirEntry, FileKind, FsStats, SetTime, Stat, Store, Target, TimeSpec};
use super::{RENAME_EXCHANGE, RENAME_NOREPLACE};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

type NodeId = u64;
const ROOT: NodeId = 1;

#[derive(Clone, Debug, Default)]
struct Meta {
    mode: u32,
    uid: u32,
    gid: u32,
    rdev: u64,
    atime: TimeSpec,
    mtime: TimeSpec,
    ctime: TimeSpec,
    xattrs: BTreeMap<OsString, Vec<u8>>,
    data: Vec<u8>,
    target: OsString,
}

#[derive(Clone, Debug)]
struct Node {
    kind: FileKind,
    meta: Meta,
    durable: Meta,
    entries: BTreeMap<OsString, NodeId>,
    durable_entries: BTreeMap<OsString, NodeId>,
}

#[derive(Debug)]
struct Inner {
    nodes: HashMap<NodeId, Node>,
    next: NodeId,
    clock: i64,
    capacity: u64,
    /// What the store pretends its file system can do (exchange and a
    /// whole copy_file_range are honoured).
    features: super::features::Features,
    /// New objects lose their set-ID bits, as on GlusterFS.
    drops_id_bits: bool,
    /// Reports every non-directory with one link (a stale client cache).
    stale_link_counts: bool,
    /// The root is gone, as a removed or unmounted backing directory
    /// ([`Store::healthy`] says so; the nodes stay).
    vanished: bool,
    /// How many times [`Store::healthy`] was asked.
    health_checks: u64,
}

/// See the module documentation.
#[derive(Clone)]
pub struct MemStore {
    inner: Arc<Mutex<Inner>>,
    gate: Arc<Mutex<Option<Gate>>>,
    /// A one-shot failure (see [`MemStore::fail_once`]).
    fail: Arc<Mutex<Option<Failure>>>,
}

/// An operation, the entry it acts on, and the errno it is to fail with.
type Failure = (&'static str, OsString, i32);

/// A test's hook, called with the operation's name ("unlink", "link",
/// "rename", "mkdir", "open", "write", "copy_range", "fstat", "readlink",
/// and "stat", "chmod", "chown", "utimens", "getxattr", "setxattr",
/// "listxattr" of an entry) and the entry's name (empty for an operation
/// on an open file) before the change: it may block to hold the operation
/// at that point while another thread runs.
pub type Gate = Arc<dyn Fn(&'static str, &OsStr) + Send + Sync>;

impl std::fmt::Debug for MemStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemStore")
    }
}

/// An open directory of a [`MemStore`].
#[derive(Debug, Clone, Copy)]
pub struct MemDir(NodeId);

/// An open file of a [`MemStore`].
#[derive(Debug)]
pub struct MemFile {
    id: NodeId,
    append: bool,
}

fn e(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

impl Default for MemStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemStore {
    /// An empty store with a root directory owned by root, mode 0755.
    pub fn new() -> Self {
        let mut nodes = HashMap::new();
        let meta = Meta { mode: libc::S_IFDIR | 0o755, ..Meta::default() };
        nodes.insert(
            ROOT,
            Node {
                kind: FileKind::Dir,
                durable: meta.clone(),
                meta,
                entries: BTreeMap::new(),
                durable_entries: BTreeMap::new(),
            },
        );
        MemStore {
            inner: Arc::new(Mutex::new(Inner {
                nodes,
                next: 2,
                clock: 1,
                capacity: u64::MAX,
                features: Default::default(),
                drops_id_bits: false,
                stale_link_counts: false,
                vanished: false,
                health_checks: 0,
            })),
            gate: Arc::new(Mutex::new(None)),
            fail: Arc::new(Mutex::new(None)),
        }
    }

    /// From now on the store's root is gone ([`Store::healthy`] is false).
    pub fn vanish(&self) {
        self.inner.lock().vanished = true;
    }

    /// How many times [`Store::healthy`] was asked.
    pub fn health_checks(&self) -> u64 {
        self.inner.lock().health_checks
    }

    /// Installs (or with `None` removes) a test gate; see [`Gate`].
    pub fn set_gate(&self, g: Option<Gate>) {
        *self.gate.lock() = g;
    }

    /// Makes the next `op` (a name the [`Gate`] is called with) on the
    /// entry `name` ("" for an operation on an open file) fail with
    /// `errno`, changing nothing.
    pub fn fail_once(&self, op: &'static str, name: &str, errno: i32) {
        *self.fail.lock() = Some((op, OsString::from(name), errno));
    }

    /// The test hooks of an operation: the gate, then a one-shot failure.
    fn pass(&self, op: &'static str, name: &OsStr) -> io::Result<()> {
        let g = self.gate.lock().clone();
        if let Some(g) = g {
            g(op, name);
        }
        let mut f = self.fail.lock();
        match f.take() {
            Some((o, n, code)) if o == op && n == name => Err(e(code)),
            other => {
                *f = other;
                Ok(())
            }
        }
    }

    /// [`MemStore::pass`] for an operation on a target.
    fn pass_target(&self, op: &'static str, t: &Target<'_, MemDir>) -> io::Result<()> {
        match t {
            Target::Entry(_, name) => self.pass(op, name),
            Target::This(_) => self.pass(op, OsStr::new("")),
        }
    }

    /// Makes the store behave like a file system without some features,
    /// as GlusterFS does: no RENAME_EXCHANGE (EINVAL), copy_file_range
    /// that copies one byte at a time (a legal, but poor, short count), and
    /// without "sparse" a SEEK_DATA that finds no data (as GlusterFS's
    /// client may answer right after a write).
    pub fn set_features(&self, f: super::features::Features) {
        self.inner.lock().features = f;
    }

    /// Makes new objects lose their set-user-ID and set-group-ID bits at
    /// creation, as GlusterFS does (a chmod afterwards sets them).
    pub fn set_drops_id_bits(&self, on: bool) {
        self.inner.lock().drops_id_bits = on;
    }

    /// Makes stats report one link for every file, as a client cache that
    /// serves a count from before a link would (GlusterFS's metadata cache
    /// serves old counts for up to a second).
    pub fn set_stale_link_counts(&self, on: bool) {
        self.inner.lock().stale_link_counts = on;
    }

    /// Limits the bytes of file data the store accepts (ENOSPC past it).
    pub fn set_capacity(&self, bytes: u64) {
        self.inner.lock().capacity = bytes;
    }

    /// Simulates a power cut: only what was made durable survives. Open
    /// handles from before the crash must not be used afterwards.
    pub fn crash(&self) {
        let mut g = self.inner.lock();
        for n in g.nodes.values_mut() {
            n.meta = n.durable.clone();
            n.entries = n.durable_entries.clone();
        }
        // Drop what is no longer reachable from the root.
        let mut reachable = std::collections::HashSet::new();
        let mut stack = vec![ROOT];
        while let Some(id) = stack.pop() {
            if reachable.insert(id) {
                if let Some(n) = g.nodes.get(&id) {
                    stack.extend(n.entries.values().copied());
                }
            }
        }
        g.nodes.retain(|id, _| reachable.contains(id));
    }

    /// Everything below the root as (path, kind, data), for test assertions.
    pub fn dump(&self) -> Vec<(String, FileKind, Vec<u8>)> {
        let g = self.inner.lock();
        let mut out = Vec::new();
        let mut stack = vec![(String::new(), ROOT)];
        while let Some((path, id)) = stack.pop() {
            let Some(n) = g.nodes.get(&id) else { continue };
            for (name, child) in &n.entries {
                let p = format!("{path}/{}", name.to_string_lossy());
                if let Some(c) = g.nodes.get(child) {
                    out.push((p.clone(), c.kind, c.meta.data.clone()));
                    if c.kind == FileKind::Dir {
                        stack.push((p, *child));
                    }
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

impl Inner {
    fn tick(&mut self) -> TimeSpec {
        self.clock += 1;
        TimeSpec { sec: self.clock / 1_000_000_000, nsec: self.clock % 1_000_000_000 }
    }
    fn node(&self, id: NodeId) -> io::Result<&Node> {
        self.nodes.get(&id).ok_or_else(|| e(libc::ESTALE))
    }
    fn node_mut(&mut self, id: NodeId) -> io::Result<&mut Node> {
        self.nodes.get_mut(&id).ok_or_else(|| e(libc::ESTALE))
    }
    fn dir(&self, id: NodeId) -> io::Result<&Node> {
        let n = self.node(id)?;
        if n.kind != FileKind::Dir {
            return Err(e(libc::ENOTDIR));
        }
        Ok(n)
    }
    fn child(&self, dir: NodeId, name: &OsStr) -> io::Result<NodeId> {
        if name.len() > 255 {
            return Err(e(libc::ENAMETOOLONG));
        }
        self.dir(dir)?.entries.get(name).copied().ok_or_else(|| e(libc::ENOENT))
    }
    fn target(&self, t: Target<'_, MemDir>) -> io::Result<NodeId> {
        match t {
            Target::This(d) => Ok(d.0),
            Target::Entry(d, n) => self.child(d.0, n),
        }
    }
    fn nlink(&self, id: NodeId) -> u64 {
        let mut n = 0;
        for node in self.nodes.values() {
            for c in node.entries.values() {
                if *c == id {
                    n += 1;
                }
            }
        }
        if let Some(node) = self.nodes.get(&id) {
            if node.kind == FileKind::Dir {
                let subdirs = node
                    .entries
                    .values()
                    .filter(|c| self.nodes.get(c).is_some_and(|x| x.kind == FileKind::Dir))
                    .count() as u64;
                return 2 + subdirs;
            }
        }
        n
    }
    fn stat(&self, id: NodeId) -> io::Result<Stat> {
        let n = self.node(id)?;
        let size = match n.kind {
            FileKind::Symlink => n.meta.target.len() as u64,
            FileKind::Dir => 4096,
            _ => n.meta.data.len() as u64,
        };
        Ok(Stat {
            dev: 0x6d65,
            ino: id,
            mode: n.meta.mode,
            nlink: if self.stale_link_counts && n.kind != FileKind::Dir { 1 } else { self.nlink(id) },
            uid: n.meta.uid,
            gid: n.meta.gid,
            rdev: n.meta.rdev,
            size,
            blocks: size.div_ceil(512),
            blksize: 4096,
            atime: n.meta.atime,
            mtime: n.meta.mtime,
            ctime: n.meta.ctime,
        })
    }
    fn used(&self) -> u64 {
        self.nodes.values().map(|n| n.meta.data.len() as u64).sum()
    }
    fn create(&mut self, parent: NodeId, name: &OsStr, kind: FileKind, mode: u32) -> io::Result<NodeId> {
        if name.len() > 255 {
            return Err(e(libc::ENAMETOOLONG));
        }
        if self.dir(parent)?.entries.contains_key(name) {
            return Err(e(libc::EEXIST));
        }
        let now = self.tick();
        let id = self.next;
        self.next += 1;
        let mode = if self.drops_id_bits { mode & !(libc::S_ISUID | libc::S_ISGID) } else { mode };
        let meta =
            Meta { mode: kind.mode_bits() | (mode & 0o7777), atime: now, mtime: now, ctime: now, ..Meta::default() };
        self.nodes.insert(
            id,
            Node { kind, durable: meta.clone(), meta, entries: BTreeMap::new(), durable_entries: BTreeMap::new() },
        );
        let p = self.node_mut(parent)?;
        p.entries.insert(name.to_owned(), id);
        p.meta.mtime = now;
        p.meta.ctime = now;
        Ok(id)
    }
    fn get_xattr(&self, id: NodeId, name: &OsStr) -> io::Result<Vec<u8>> {
        self.node(id)?.meta.xattrs.get(name).cloned().ok_or_else(|| e(libc::ENODATA))
    }
    fn set_xattr(&mut self, id: NodeId, name: &OsStr, value: &[u8], flags: i32) -> io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        if !self.features.user_xattrs && name.as_bytes().starts_with(b"user.") {
            return Err(e(libc::EOPNOTSUPP));
        }
        let now = self.tick();
        let n = self.node_mut(id)?;
        let exists = n.meta.xattrs.contains_key(name);
        if flags & libc::XATTR_CREATE != 0 && exists {
            return Err(e(libc::EEXIST));
        }
        if flags & libc::XATTR_REPLACE != 0 && !exists {
            return Err(e(libc::ENODATA));
        }
        n.meta.xattrs.insert(name.to_owned(), value.to_vec());
        n.meta.ctime = now;
        Ok(())
    }
    fn list_xattr(&self, id: NodeId) -> io::Result<Vec<u8>> {
        use std::os::unix::ffi::OsStrExt;
        let mut out = Vec::new();
        for k in self.node(id)?.meta.xattrs.keys() {
            out.extend_from_slice(k.as_bytes());
            out.push(0);
        }
        Ok(out)
    }
    fn touch_dir(&mut self, id: NodeId) {
        let now = self.tick();
        if let Some(n) = self.nodes.get_mut(&id) {
            n.meta.mtime = now;
            n.meta.ctime = now;
        }
    }
    fn remove(&mut self, parent: NodeId, name: &OsStr, want_dir: bool) -> io::Result<()> {
        let id = self.child(parent, name)?;
        let n = self.node(id)?;
        match (n.kind == FileKind::Dir, want_dir) {
            (true, false) => return Err(e(libc::EISDIR)),
            (false, true) => return Err(e(libc::ENOTDIR)),
            (true, true) if !n.entries.is_empty() => return Err(e(libc::ENOTEMPTY)),
            _ => {}
        }
        self.node_mut(parent)?.entries.remove(name);
        self.touch_dir(parent);
        let now = self.tick();
        if let Some(n) = self.nodes.get_mut(&id) {
            n.meta.ctime = now;
        }
        Ok(())
    }
}

impl Store for MemStore {
    type Dir = MemDir;
    type File = MemFile;

    fn healthy(&self) -> bool {
        let mut g = self.inner.lock();
        g.health_checks += 1;
        !g.vanished
    }

    fn holes_coherent(&self) -> bool {
        self.inner.lock().features.sparse
    }

    fn root(&self) -> io::Result<MemDir> {
        Ok(MemDir(ROOT))
    }

    fn open_dir(&self, parent: &MemDir, name: &OsStr) -> io::Result<MemDir> {
        let g = self.inner.lock();
        let id = g.child(parent.0, name)?;
        g.dir(id)?;
        Ok(MemDir(id))
    }

    fn stat(&self, t: Target<'_, MemDir>) -> io::Result<Stat> {
        if let Target::Entry(_, name) = t {
            self.pass("stat", name)?;
        }
        let g = self.inner.lock();
        g.stat(g.target(t)?)
    }

    fn list(&self, dir: &MemDir) -> io::Result<Vec<DirEntry>> {
        let g = self.inner.lock();
        let d = g.dir(dir.0)?;
        Ok(d.entries
            .iter()
            .map(|(n, id)| DirEntry { name: n.clone(), kind: g.nodes.get(id).map(|x| x.kind) })
            .collect())
    }

    fn sync_dir(&self, dir: &MemDir) -> io::Result<()> {
        let mut g = self.inner.lock();
        let n = g.node_mut(dir.0)?;
        n.durable_entries = n.entries.clone();
        n.durable = n.meta.clone();
        Ok(())
    }

    fn mkdir(&self, parent: &MemDir, name: &OsStr, mode: u32) -> io::Result<()> {
        self.pass("mkdir", name)?;
        self.inner.lock().create(parent.0, name, FileKind::Dir, mode).map(drop)
    }

    fn mknod(&self, parent: &MemDir, name: &OsStr, mode: u32, rdev: u64) -> io::Result<()> {
        let kind = FileKind::from_mode(mode).unwrap_or(FileKind::File);
        if kind == FileKind::Dir {
            return Err(e(libc::EINVAL));
        }
        let mut g = self.inner.lock();
        let id = g.create(parent.0, name, kind, mode)?;
        g.node_mut(id)?.meta.rdev = rdev;
        Ok(())
    }

    fn symlink(&self, target: &OsStr, parent: &MemDir, name: &OsStr) -> io::Result<()> {
        let mut g = self.inner.lock();
        let id = g.create(parent.0, name, FileKind::Symlink, 0o777)?;
        let n = g.node_mut(id)?;
        n.meta.target = target.to_owned();
        n.durable.target = target.to_owned();
        Ok(())
    }

    fn readlink(&self, parent: &MemDir, name: &OsStr) -> io::Result<OsString> {
        self.pass("readlink", name)?;
        let g = self.inner.lock();
        let n = g.node(g.child(parent.0, name)?)?;
        if n.kind != FileKind::Symlink {
            return Err(e(libc::EINVAL));
        }
        Ok(n.meta.target.clone())
    }

    fn link(&self, op: &MemDir, on: &OsStr, np: &MemDir, nn: &OsStr) -> io::Result<()> {
        self.pass("link", nn)?;
        let mut g = self.inner.lock();
        let id = g.child(op.0, on)?;
        if g.node(id)?.kind == FileKind::Dir {
            return Err(e(libc::EPERM));
        }
        if nn.len() > 255 {
            return Err(e(libc::ENAMETOOLONG));
        }
        if g.dir(np.0)?.entries.contains_key(nn) {
            return Err(e(libc::EEXIST));
        }
        g.node_mut(np.0)?.entries.insert(nn.to_owned(), id);
        g.touch_dir(np.0);
        let now = g.tick();
        g.node_mut(id)?.meta.ctime = now;
        Ok(())
    }

    fn unlink(&self, parent: &MemDir, name: &OsStr) -> io::Result<()> {
        self.pass("unlink", name)?;
        self.inner.lock().remove(parent.0, name, false)
    }

    fn rmdir(&self, parent: &MemDir, name: &OsStr) -> io::Result<()> {
        self.inner.lock().remove(parent.0, name, true)
    }

    fn rename(&self, op: &MemDir, on: &OsStr, np: &MemDir, nn: &OsStr, flags: u32) -> io::Result<()> {
        self.pass("rename", on)?;
        let mut g = self.inner.lock();
        let src = g.child(op.0, on)?;
        if nn.len() > 255 {
            return Err(e(libc::ENAMETOOLONG));
        }
        let dst = g.dir(np.0)?.entries.get(nn).copied();
        if flags & RENAME_EXCHANGE != 0 && !g.features.exchange {
            return Err(e(libc::EINVAL));
        }
        if flags & RENAME_EXCHANGE != 0 {
            let dst = dst.ok_or_else(|| e(libc::ENOENT))?;
            g.node_mut(op.0)?.entries.insert(on.to_owned(), dst);
            g.node_mut(np.0)?.entries.insert(nn.to_owned(), src);
        } else {
            if let Some(d) = dst {
                if flags & RENAME_NOREPLACE != 0 {
                    return Err(e(libc::EEXIST));
                }
                if d == src {
                    return Ok(());
                }
                let (sk, dk) = (g.node(src)?.kind, g.node(d)?.kind);
                match (sk == FileKind::Dir, dk == FileKind::Dir) {
                    (true, false) => return Err(e(libc::ENOTDIR)),
                    (false, true) => return Err(e(libc::EISDIR)),
                    (true, true) if !g.node(d)?.entries.is_empty() => return Err(e(libc::ENOTEMPTY)),
                    _ => {}
                }
            }
            g.node_mut(op.0)?.entries.remove(on);
            g.node_mut(np.0)?.entries.insert(nn.to_owned(), src);
        }
        g.touch_dir(op.0);
        g.touch_dir(np.0);
        let now = g.tick();
        g.node_mut(src)?.meta.ctime = now;
        Ok(())
    }

    fn chmod(&self, t: Target<'_, MemDir>, mode: u32) -> io::Result<()> {
        self.pass_target("chmod", &t)?;
        let mut g = self.inner.lock();
        let id = g.target(t)?;
        let now = g.tick();
        let n = g.node_mut(id)?;
        n.meta.mode = (n.meta.mode & libc::S_IFMT) | (mode & 0o7777);
        n.meta.ctime = now;
        Ok(())
    }

    fn chown(&self, t: Target<'_, MemDir>, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
        self.pass_target("chown", &t)?;
        let mut g = self.inner.lock();
        let id = g.target(t)?;
        let now = g.tick();
        let n = g.node_mut(id)?;
        if let Some(u) = uid {
            n.meta.uid = u;
        }
        if let Some(gi) = gid {
            n.meta.gid = gi;
        }
        n.meta.ctime = now;
        Ok(())
    }

    fn utimens(&self, t: Target<'_, MemDir>, atime: SetTime, mtime: SetTime) -> io::Result<()> {
        self.pass_target("utimens", &t)?;
        let mut g = self.inner.lock();
        let id = g.target(t)?;
        let now = g.tick();
        let n = g.node_mut(id)?;
        let pick = |s: SetTime, old: TimeSpec| match s {
            SetTime::Omit => old,
            SetTime::Now => now,
            SetTime::At(t) => t,
        };
        n.meta.atime = pick(atime, n.meta.atime);
        n.meta.mtime = pick(mtime, n.meta.mtime);
        n.meta.ctime = now;
        Ok(())
    }

    fn getxattr(&self, t: Target<'_, MemDir>, name: &OsStr) -> io::Result<Vec<u8>> {
        self.pass_target("getxattr", &t)?;
        let g = self.inner.lock();
        g.get_xattr(g.target(t)?, name)
    }

    fn setxattr(&self, t: Target<'_, MemDir>, name: &OsStr, value: &[u8], flags: i32) -> io::Result<()> {
        self.pass_target("setxattr", &t)?;
        let mut g = self.inner.lock();
        let id = g.target(t)?;
        g.set_xattr(id, name, value, flags)
    }

    fn listxattr(&self, t: Target<'_, MemDir>) -> io::Result<Vec<u8>> {
        self.pass_target("listxattr", &t)?;
        let g = self.inner.lock();
        g.list_xattr(g.target(t)?)
    }

    fn file_getxattr(&self, f: &MemFile, name: &OsStr) -> io::Result<Vec<u8>> {
        self.inner.lock().get_xattr(f.id, name)
    }

    fn file_setxattr(&self, f: &MemFile, name: &OsStr, value: &[u8], flags: i32) -> io::Result<()> {
        self.inner.lock().set_xattr(f.id, name, value, flags)
    }

    fn file_listxattr(&self, f: &MemFile) -> io::Result<Vec<u8>> {
        self.inner.lock().list_xattr(f.id)
    }

    fn removexattr(&self, t: Target<'_, MemDir>, name: &OsStr) -> io::Result<()> {
        let mut g = self.inner.lock();
        let id = g.target(t)?;
        let n = g.node_mut(id)?;
        n.meta.xattrs.remove(name).map(drop).ok_or_else(|| e(libc::ENODATA))
    }

    fn statfs(&self) -> io::Result<FsStats> {
        let g = self.inner.lock();
        let total = if g.capacity == u64::MAX { 1 << 40 } else { g.capacity };
        let free = total.saturating_sub(g.used());
        Ok(FsStats { total, free, avail: free, files: 1 << 20, ffree: 1 << 20, namelen: 255 })
    }

    fn open(&self, parent: &MemDir, name: &OsStr, flags: i32, mode: u32) -> io::Result<MemFile> {
        self.pass("open", name)?;
        let mut g = self.inner.lock();
        let id = match g.child(parent.0, name) {
            Ok(id) => {
                if flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0 {
                    return Err(e(libc::EEXIST));
                }
                id
            }
            Err(err) if err.raw_os_error() == Some(libc::ENOENT) && flags & libc::O_CREAT != 0 => {
                g.create(parent.0, name, FileKind::File, mode)?
            }
            Err(err) => return Err(err),
        };
        match g.node(id)?.kind {
            FileKind::Dir => return Err(e(libc::EISDIR)),
            FileKind::Symlink => return Err(e(libc::ELOOP)),
            _ => {}
        }
        if flags & libc::O_TRUNC != 0 {
            let now = g.tick();
            let n = g.node_mut(id)?;
            n.meta.data.clear();
            n.meta.mtime = now;
            n.meta.ctime = now;
        }
        Ok(MemFile { id, append: flags & libc::O_APPEND != 0 })
    }

    fn read_at(&self, f: &MemFile, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let g = self.inner.lock();
        let d = &g.node(f.id)?.meta.data;
        let off = off as usize;
        if off >= d.len() {
            return Ok(0);
        }
        let n = buf.len().min(d.len() - off);
        buf[..n].copy_from_slice(&d[off..off + n]);
        Ok(n)
    }

    fn write_at(&self, f: &MemFile, data: &[u8], off: u64) -> io::Result<usize> {
        self.pass("write", OsStr::new(""))?;
        let mut g = self.inner.lock();
        let cur = g.node(f.id)?.meta.data.len();
        let off = if f.append { cur } else { off as usize };
        let end = off + data.len();
        if end > cur && g.used() + (end - cur) as u64 > g.capacity {
            return Err(e(libc::ENOSPC));
        }
        let now = g.tick();
        let n = g.node_mut(f.id)?;
        if n.meta.data.len() < end {
            n.meta.data.resize(end, 0);
        }
        n.meta.data[off..end].copy_from_slice(data);
        n.meta.mtime = now;
        n.meta.ctime = now;
        Ok(data.len())
    }

    fn fstat(&self, f: &MemFile) -> io::Result<Stat> {
        self.pass("fstat", OsStr::new(""))?;
        self.inner.lock().stat(f.id)
    }

    fn fsync(&self, f: &MemFile, _datasync: bool) -> io::Result<()> {
        let mut g = self.inner.lock();
        let n = g.node_mut(f.id)?;
        n.durable = n.meta.clone();
        Ok(())
    }

    fn set_len(&self, f: &MemFile, size: u64) -> io::Result<()> {
        let mut g = self.inner.lock();
        let cur = g.node(f.id)?.meta.data.len() as u64;
        if size > cur && g.used() + (size - cur) > g.capacity {
            return Err(e(libc::ENOSPC));
        }
        let now = g.tick();
        let n = g.node_mut(f.id)?;
        n.meta.data.resize(size as usize, 0);
        n.meta.mtime = now;
        n.meta.ctime = now;
        Ok(())
    }

    fn fallocate(&self, f: &MemFile, mode: i32, off: u64, len: u64) -> io::Result<()> {
        if mode == libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE {
            // Zeroes within the size; no sparseness is modelled.
            let mut g = self.inner.lock();
            let now = g.tick();
            let n = g.node_mut(f.id)?;
            let size = n.meta.data.len() as u64;
            let (start, end) = (off.min(size) as usize, off.saturating_add(len).min(size) as usize);
            n.meta.data[start..end].fill(0);
            n.meta.mtime = now;
            n.meta.ctime = now;
            return Ok(());
        }
        if mode != 0 {
            return Err(e(libc::EOPNOTSUPP));
        }
        let size = self.fstat(f)?.size;
        if off + len > size {
            self.set_len(f, off + len)?;
        }
        Ok(())
    }

    fn seek(&self, f: &MemFile, off: i64, whence: i32) -> io::Result<i64> {
        let size = self.fstat(f)?.size as i64;
        match whence {
            libc::SEEK_SET => Ok(off),
            libc::SEEK_END => Ok(size + off),
            // Lacking "sparse": it says there is no data, as GlusterFS's
            // client may right after a write.
            libc::SEEK_DATA if !self.inner.lock().features.sparse => Err(e(libc::ENXIO)),
            libc::SEEK_DATA if off < size => Ok(off),
            libc::SEEK_HOLE if off < size => Ok(size),
            libc::SEEK_DATA | libc::SEEK_HOLE => Err(e(libc::ENXIO)),
            _ => Err(e(libc::EINVAL)),
        }
    }

    fn copy_range(&self, src: &MemFile, so: u64, dst: &MemFile, d_o: u64, len: u64) -> io::Result<usize> {
        self.pass("copy_range", OsStr::new(""))?;
        let len = if self.inner.lock().features.copy_range { len } else { len.min(1) };
        let mut buf = vec![0u8; len as usize];
        let n = self.read_at(src, &mut buf, so)?;
        self.write_at(dst, &buf[..n], d_o)
    }

    fn file_chmod(&self, f: &MemFile, mode: u32) -> io::Result<()> {
        let mut g = self.inner.lock();
        let now = g.tick();
        let n = g.node_mut(f.id)?;
        n.meta.mode = (n.meta.mode & libc::S_IFMT) | (mode & 0o7777);
        n.meta.ctime = now;
        Ok(())
    }

    fn file_chown(&self, f: &MemFile, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
        let mut g = self.inner.lock();
        let now = g.tick();
        let n = g.node_mut(f.id)?;
        n.meta.uid = uid.unwrap_or(n.meta.uid);
        n.meta.gid = gid.unwrap_or(n.meta.gid);
        n.meta.ctime = now;
        Ok(())
    }

    fn file_utimens(&self, f: &MemFile, atime: SetTime, mtime: SetTime) -> io::Result<()> {
        let mut g = self.inner.lock();
        let now = g.tick();
        let n = g.node_mut(f.id)?;
        let pick = |s: SetTime, old: TimeSpec| match s {
            SetTime::Omit => old,
            SetTime::Now => now,
            SetTime::At(t) => t,
        };
        n.meta.atime = pick(atime, n.meta.atime);
        n.meta.mtime = pick(mtime, n.meta.mtime);
        n.meta.ctime = now;
        Ok(())
    }

    fn raw_fd<'a>(&self, _f: &'a MemFile) -> Option<BorrowedFd<'a>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> &OsStr {
        OsStr::new(s)
    }

    #[test]
    fn unsynced_data_and_names_are_lost_in_a_crash() {
        let s = MemStore::new();
        let root = s.root().unwrap();
        let f = s.open(&root, n("a"), libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
        s.write_at(&f, b"one", 0).unwrap();
        s.fsync(&f, false).unwrap();
        s.sync_dir(&root).unwrap();
        s.write_at(&f, b"two", 0).unwrap();
        let g = s.open(&root, n("b"), libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
        s.write_at(&g, b"lost", 0).unwrap();
        s.fsync(&g, false).unwrap();
        s.crash();
        let d = s.dump();
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].0, "/a");
        assert_eq!(d[0].2, b"one");
    }

    #[test]
    fn rename_is_durable_only_after_both_directories_sync() {
        let s = MemStore::new();
        let root = s.root().unwrap();
        s.mkdir(&root, n("d"), 0o755).unwrap();
        let d = s.open_dir(&root, n("d")).unwrap();
        let f = s.open(&root, n("f"), libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
        s.write_at(&f, b"x", 0).unwrap();
        s.fsync(&f, false).unwrap();
        s.sync_dir(&root).unwrap();
        s.sync_dir(&d).unwrap();
        s.rename(&root, n("f"), &d, n("g"), 0).unwrap();
        s.sync_dir(&d).unwrap();
        s.crash();
        // The new name is durable, the removal of the old one is not: both survive.
        let names: Vec<_> = s.dump().into_iter().map(|x| x.0).collect();
        assert_eq!(names, vec!["/d", "/d/g", "/f"]);
    }

    #[test]
    fn rename_flags_and_errors() {
        let s = MemStore::new();
        let root = s.root().unwrap();
        let _a = s.open(&root, n("a"), libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
        let _b = s.open(&root, n("b"), libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
        let err = s.rename(&root, n("a"), &root, n("b"), RENAME_NOREPLACE).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
        s.rename(&root, n("a"), &root, n("b"), RENAME_EXCHANGE).unwrap();
        s.mkdir(&root, n("d"), 0o755).unwrap();
        let err = s.rename(&root, n("a"), &root, n("d"), 0).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EISDIR));
        let err = s.unlink(&root, n("zz")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    }
}
