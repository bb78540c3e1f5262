//! [`Emulated`]: a store wrapper that makes every operation take as long as
//! it would on a modelled device (see [`crate::device`]). Without a model
//! it passes everything straight through, at no cost; a model can be paused
//! (for preallocating benchmark files) and reset.

use super::{DirEntry, FsStats, SetTime, Stat, Store, Target};
use crate::clock::{wait_until, Clock};
use crate::device::{Device, Profile, Req};
use parking_lot::Mutex;
use std::ffi::{OsStr, OsString};
use std::hash::{Hash, Hasher};
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The model of one tier, shared with whoever controls the emulation.
#[derive(Clone)]
pub struct Emulation {
    device: Arc<Mutex<Device>>,
    enabled: Arc<AtomicBool>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Emulation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Emulation({})", self.device.lock().profile.name)
    }
}

impl Emulation {
    /// A model of `profile` with a RAM cache of `cache` bytes.
    pub fn new(profile: Profile, cache: u64, clock: Arc<dyn Clock>) -> Self {
        Emulation {
            device: Arc::new(Mutex::new(Device::new(profile, cache))),
            enabled: Arc::new(AtomicBool::new(true)),
            clock,
        }
    }

    /// Turns the model on (after a cold reset of cache and queue) or off
    /// (operations then cost nothing).
    pub fn set_enabled(&self, on: bool) {
        if on {
            self.device.lock().reset(self.clock.now());
        }
        self.enabled.store(on, Ordering::Release);
    }

    /// Changes the device's profile (it slows down or recovers); its cache,
    /// queue and counters stay.
    pub fn set_profile(&self, p: Profile) {
        self.device.lock().profile = p;
    }

    /// Requests submitted so far, by kind (see [`Req::kind`]).
    pub fn submitted(&self) -> [u64; Req::KINDS] {
        self.device.lock().submitted
    }

    /// The profile's name, busy time and device requests so far.
    pub fn usage(&self) -> (String, Duration, u64) {
        let d = self.device.lock();
        (d.profile.name.clone(), d.busy, d.requests)
    }

    fn charge(&self, req: Req) {
        if !self.enabled.load(Ordering::Acquire) {
            return;
        }
        let now = self.clock.now();
        let done = self.device.lock().submit(now, req);
        wait_until(self.clock.as_ref(), done);
    }
}

/// A store whose operations are charged to a device model.
#[derive(Debug)]
pub struct Emulated<S: Store> {
    inner: S,
    model: Option<Emulation>,
}

/// An open directory of an [`Emulated`] store.
#[derive(Debug)]
pub struct EmDir<D> {
    inner: D,
    id: u64,
}

/// An open file of an [`Emulated`] store.
#[derive(Debug)]
pub struct EmFile<F> {
    inner: F,
    id: u64,
    /// Opened with `O_DIRECT`: its reads and writes bypass the model's
    /// cache (the backing directory itself is opened without it).
    direct: bool,
}

fn key(dir: u64, name: &OsStr) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    dir.hash(&mut h);
    name.hash(&mut h);
    h.finish()
}

impl<S: Store> Emulated<S> {
    /// `inner`, charged to `model` (None: no emulation).
    pub fn new(inner: S, model: Option<Emulation>) -> Self {
        Emulated { inner, model }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The model, if any.
    pub fn model(&self) -> Option<&Emulation> {
        self.model.as_ref()
    }

    fn charge(&self, req: Req) {
        if let Some(m) = &self.model {
            m.charge(req);
        }
    }

    /// The identity the model knows a file or directory by (its backing
    /// inode number); without a model nothing asks, and the stat an open
    /// would cost is saved (one per open and create: 5 % of a round of
    /// create, stat and unlink in the daemon).
    fn ident(&self, stat: impl FnOnce() -> io::Result<Stat>) -> io::Result<u64> {
        if self.model.is_none() {
            return Ok(0);
        }
        Ok(stat()?.ino)
    }

    fn meta_read(&self, k: u64) {
        self.charge(Req::MetaRead { key: k });
    }

    fn meta_write(&self, k: u64) {
        self.charge(Req::MetaWrite { key: k });
    }

    /// Charges a change of the entry `k` that `r` says was made: a metadata
    /// write, or only a lookup when it failed (a `mkdir` of a directory
    /// that exists writes nothing).
    fn meta_change<T>(&self, k: u64, r: io::Result<T>) -> io::Result<T> {
        match r {
            Ok(_) => self.meta_write(k),
            Err(_) => self.meta_read(k),
        }
        r
    }

    fn target_key(t: Target<'_, EmDir<S::Dir>>) -> u64 {
        match t {
            Target::This(d) => d.id,
            Target::Entry(d, n) => key(d.id, n),
        }
    }

    fn unwrap_target<'a>(t: Target<'a, EmDir<S::Dir>>) -> Target<'a, S::Dir> {
        match t {
            Target::This(d) => Target::This(&d.inner),
            Target::Entry(d, n) => Target::Entry(&d.inner, n),
        }
    }
}

impl<S: Store> Store for Emulated<S> {
    type Dir = EmDir<S::Dir>;
    type File = EmFile<S::File>;

    fn healthy(&self) -> bool {
        self.inner.healthy()
    }

    fn emulates_noreplace(&self) -> bool {
        self.inner.emulates_noreplace()
    }

    fn holes_coherent(&self) -> bool {
        self.inner.holes_coherent()
    }

    fn root(&self) -> io::Result<Self::Dir> {
        let inner = self.inner.root()?;
        let id = self.ident(|| self.inner.stat(Target::This(&inner)))?;
        Ok(EmDir { inner, id })
    }

    fn open_dir(&self, parent: &Self::Dir, name: &OsStr) -> io::Result<Self::Dir> {
        self.meta_read(key(parent.id, name));
        let inner = self.inner.open_dir(&parent.inner, name)?;
        let id = self.ident(|| self.inner.stat(Target::This(&inner)))?;
        Ok(EmDir { inner, id })
    }

    fn stat(&self, t: Target<'_, Self::Dir>) -> io::Result<Stat> {
        self.meta_read(Self::target_key(t));
        self.inner.stat(Self::unwrap_target(t))
    }

    fn list(&self, dir: &Self::Dir) -> io::Result<Vec<DirEntry>> {
        self.meta_read(dir.id ^ 0x5151_5151);
        self.inner.list(&dir.inner)
    }

    fn sync_dir(&self, dir: &Self::Dir) -> io::Result<()> {
        self.charge(Req::Sync);
        self.inner.sync_dir(&dir.inner)
    }

    fn mkdir(&self, parent: &Self::Dir, name: &OsStr, mode: u32) -> io::Result<()> {
        self.meta_change(key(parent.id, name), self.inner.mkdir(&parent.inner, name, mode))
    }

    fn mknod(&self, parent: &Self::Dir, name: &OsStr, mode: u32, rdev: u64) -> io::Result<()> {
        self.meta_change(key(parent.id, name), self.inner.mknod(&parent.inner, name, mode, rdev))
    }

    fn symlink(&self, target: &OsStr, parent: &Self::Dir, name: &OsStr) -> io::Result<()> {
        self.meta_change(key(parent.id, name), self.inner.symlink(target, &parent.inner, name))
    }

    fn readlink(&self, parent: &Self::Dir, name: &OsStr) -> io::Result<OsString> {
        self.meta_read(key(parent.id, name));
        self.inner.readlink(&parent.inner, name)
    }

    fn link(&self, op: &Self::Dir, on: &OsStr, np: &Self::Dir, nn: &OsStr) -> io::Result<()> {
        self.meta_change(key(np.id, nn), self.inner.link(&op.inner, on, &np.inner, nn))
    }

    fn unlink(&self, parent: &Self::Dir, name: &OsStr) -> io::Result<()> {
        self.meta_change(key(parent.id, name), self.inner.unlink(&parent.inner, name))
    }

    fn rmdir(&self, parent: &Self::Dir, name: &OsStr) -> io::Result<()> {
        self.meta_change(key(parent.id, name), self.inner.rmdir(&parent.inner, name))
    }

    fn rename(&self, op: &Self::Dir, on: &OsStr, np: &Self::Dir, nn: &OsStr, flags: u32) -> io::Result<()> {
        self.meta_change(key(np.id, nn), self.inner.rename(&op.inner, on, &np.inner, nn, flags))
    }

    fn chmod(&self, t: Target<'_, Self::Dir>, mode: u32) -> io::Result<()> {
        self.meta_write(Self::target_key(t));
        self.inner.chmod(Self::unwrap_target(t), mode)
    }

    fn chown(&self, t: Target<'_, Self::Dir>, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
        self.meta_write(Self::target_key(t));
        self.inner.chown(Self::unwrap_target(t), uid, gid)
    }

    fn utimens(&self, t: Target<'_, Self::Dir>, atime: SetTime, mtime: SetTime) -> io::Result<()> {
        self.meta_write(Self::target_key(t));
        self.inner.utimens(Self::unwrap_target(t), atime, mtime)
    }

    fn getxattr(&self, t: Target<'_, Self::Dir>, name: &OsStr) -> io::Result<Vec<u8>> {
        self.meta_read(Self::target_key(t));
        self.inner.getxattr(Self::unwrap_target(t), name)
    }

    fn setxattr(&self, t: Target<'_, Self::Dir>, name: &OsStr, value: &[u8], flags: i32) -> io::Result<()> {
        self.meta_write(Self::target_key(t));
        self.inner.setxattr(Self::unwrap_target(t), name, value, flags)
    }

    fn listxattr(&self, t: Target<'_, Self::Dir>) -> io::Result<Vec<u8>> {
        self.meta_read(Self::target_key(t));
        self.inner.listxattr(Self::unwrap_target(t))
    }

    fn removexattr(&self, t: Target<'_, Self::Dir>, name: &OsStr) -> io::Result<()> {
        self.meta_write(Self::target_key(t));
        self.inner.removexattr(Self::unwrap_target(t), name)
    }

    fn statfs(&self) -> io::Result<FsStats> {
        self.inner.statfs()
    }

    fn open(&self, parent: &Self::Dir, name: &OsStr, flags: i32, mode: u32) -> io::Result<Self::File> {
        let k = key(parent.id, name);
        // The model stands for the device: the directory under it need not
        // support O_DIRECT (tmpfs), and its speed does not count.
        let direct = flags & libc::O_DIRECT != 0 && self.model.is_some();
        let inner_flags = if direct { flags & !libc::O_DIRECT } else { flags };
        let r = self.inner.open(&parent.inner, name, inner_flags, mode);
        let inner = if flags & libc::O_CREAT != 0 {
            self.meta_change(k, r)?
        } else {
            self.meta_read(k);
            r?
        };
        let id = self.ident(|| self.inner.fstat(&inner))?;
        Ok(EmFile { inner, id, direct })
    }

    fn read_at(&self, f: &Self::File, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let n = self.inner.read_at(&f.inner, buf, off)?;
        let len = n as u64;
        self.charge(if f.direct {
            Req::Direct { file: f.id, off, len, write: false }
        } else {
            Req::Read { file: f.id, off, len }
        });
        Ok(n)
    }

    fn write_at(&self, f: &Self::File, data: &[u8], off: u64) -> io::Result<usize> {
        let n = self.inner.write_at(&f.inner, data, off)?;
        let len = n as u64;
        self.charge(if f.direct {
            Req::Direct { file: f.id, off, len, write: true }
        } else {
            Req::Write { file: f.id, off, len }
        });
        Ok(n)
    }

    fn fstat(&self, f: &Self::File) -> io::Result<Stat> {
        self.inner.fstat(&f.inner)
    }

    fn fsync(&self, f: &Self::File, datasync: bool) -> io::Result<()> {
        self.charge(Req::Sync);
        self.inner.fsync(&f.inner, datasync)
    }

    fn set_len(&self, f: &Self::File, size: u64) -> io::Result<()> {
        // Growing a file is an inode update, as when a write extends it
        // (which costs only its data): only a cut, which frees blocks, is
        // a metadata write of its own.
        let grows = self.inner.fstat(&f.inner).is_ok_and(|st| size >= st.size);
        if !grows {
            self.meta_write(f.id);
        }
        self.inner.set_len(&f.inner, size)
    }

    fn fallocate(&self, f: &Self::File, mode: i32, off: u64, len: u64) -> io::Result<()> {
        self.meta_write(f.id);
        self.inner.fallocate(&f.inner, mode, off, len)
    }

    fn seek(&self, f: &Self::File, off: i64, whence: i32) -> io::Result<i64> {
        self.inner.seek(&f.inner, off, whence)
    }

    fn copy_range(&self, src: &Self::File, so: u64, dst: &Self::File, d_o: u64, len: u64) -> io::Result<usize> {
        let n = self.inner.copy_range(&src.inner, so, &dst.inner, d_o, len)?;
        self.charge(Req::Read { file: src.id, off: so, len: n as u64 });
        self.charge(Req::Write { file: dst.id, off: d_o, len: n as u64 });
        Ok(n)
    }

    fn file_chmod(&self, f: &Self::File, mode: u32) -> io::Result<()> {
        self.meta_write(f.id);
        self.inner.file_chmod(&f.inner, mode)
    }

    fn file_getxattr(&self, f: &Self::File, name: &OsStr) -> io::Result<Vec<u8>> {
        self.meta_read(f.id);
        self.inner.file_getxattr(&f.inner, name)
    }

    fn file_setxattr(&self, f: &Self::File, name: &OsStr, value: &[u8], flags: i32) -> io::Result<()> {
        self.meta_write(f.id);
        self.inner.file_setxattr(&f.inner, name, value, flags)
    }

    fn file_listxattr(&self, f: &Self::File) -> io::Result<Vec<u8>> {
        self.meta_read(f.id);
        self.inner.file_listxattr(&f.inner)
    }

    fn file_chown(&self, f: &Self::File, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
        self.meta_write(f.id);
        self.inner.file_chown(&f.inner, uid, gid)
    }

    fn file_utimens(&self, f: &Self::File, atime: SetTime, mtime: SetTime) -> io::Result<()> {
        self.meta_write(f.id);
        self.inner.file_utimens(&f.inner, atime, mtime)
    }

    fn touch(&self, f: &Self::File) -> io::Result<()> {
        // The time update a write makes, which costs only its data (the
        // inode goes out with the next journal commit): no request.
        self.inner.touch(&f.inner)
    }

    fn keep_mtime(&self, f: &Self::File, mtime: super::TimeSpec) -> io::Result<()> {
        // Part of the write-back's own time update, as `touch`: no request.
        self.inner.keep_mtime(&f.inner, mtime)
    }

    fn raw_fd<'a>(&self, f: &'a Self::File) -> Option<BorrowedFd<'a>> {
        // An emulated file must not be handed to the kernel: its I/O would
        // bypass the model.
        match self.model {
            None => self.inner.raw_fd(&f.inner),
            Some(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::store::mem::MemStore;
    use std::time::Instant;

    #[test]
    fn operations_take_the_modelled_time_and_pause_stops_it() {
        let p = Profile::from_access("slow", 100.0, 100.0, Duration::from_millis(20), Duration::from_millis(20));
        let model = Emulation::new(p, 0, Arc::new(SystemClock));
        let s = Emulated::new(MemStore::new(), Some(model.clone()));
        let root = s.root().unwrap();
        let t = Instant::now();
        let f = s.open(&root, OsStr::new("f"), libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
        s.write_at(&f, &[1u8; 4096], 0).unwrap();
        let mut b = [0u8; 4096];
        s.read_at(&f, &mut b, 0).unwrap();
        // create, write, read: three random requests of ~20 ms.
        assert!(t.elapsed() >= Duration::from_millis(60), "{:?}", t.elapsed());
        assert_eq!(model.usage().2, 3);
        // Growing a file is free like a write that extends it; a cut is a
        // metadata write.
        let before = model.usage().2;
        s.set_len(&f, 1 << 20).unwrap();
        assert_eq!(model.usage().2, before, "growing");
        s.set_len(&f, 10).unwrap();
        assert_eq!(model.usage().2, before + 1, "cutting");
        // The time update of bytes written elsewhere (and putting it back
        // after a write-back) is free like a write's own; setting times is
        // a metadata write.
        s.touch(&f).unwrap();
        assert_eq!(model.usage().2, before + 1, "touch");
        s.keep_mtime(&f, crate::store::TimeSpec { sec: 1, nsec: 0 }).unwrap();
        assert_eq!(model.usage().2, before + 1, "keep_mtime");
        assert_eq!(s.fstat(&f).unwrap().mtime, crate::store::TimeSpec { sec: 1, nsec: 0 });
        s.file_utimens(&f, SetTime::Omit, SetTime::Now).unwrap();
        assert_eq!(model.usage().2, before + 2, "utimens");
        model.set_enabled(false);
        let t = Instant::now();
        for _ in 0..10 {
            s.read_at(&f, &mut b, 0).unwrap();
        }
        assert!(t.elapsed() < Duration::from_millis(20), "paused: free");
        assert!(s.raw_fd(&f).is_none());
    }
}
