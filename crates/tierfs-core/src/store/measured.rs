//! [`Measured`]: a store wrapper that times every data request of a tier
//! and keeps Wu-Reddy's exponential averages of its read and write response
//! times (§III: `avg = 0.99 avg + 0.01 sample`, every request size
//! counted), and the bytes written to it (for the SSD write regulator).
//!
//! The policies never measure: the engine reads a [`Meter`] and hands the
//! averages to them as values. What is measured is what a request of
//! tierfs waits for at the backing store: on emulated tiers the device
//! model, on real ones the backing file system, page cache included.
//! Requests the kernel serves itself (FUSE passthrough) are not seen.

use super::{DirEntry, FsStats, SetTime, Stat, Store, Target};
use crate::clock::{Clock, Timestamp};
use crate::quiet::Doing;
use serde::{Deserialize, Serialize};
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Weight of the old average (Wu-Reddy §III).
pub const KEEP: f64 = 0.99;

/// One step of the exponential average: the first sample is the average.
pub fn fold(avg: Option<f64>, sample: f64) -> f64 {
    match avg {
        None => sample,
        Some(a) => KEEP * a + (1.0 - KEEP) * sample,
    }
}

/// No sample yet.
const NONE: u64 = u64::MAX;

/// An exponential average of seconds, updated without a lock.
#[derive(Debug)]
struct Average {
    bits: AtomicU64,
    samples: AtomicU64,
}

impl Default for Average {
    fn default() -> Self {
        Average { bits: AtomicU64::new(NONE), samples: AtomicU64::new(0) }
    }
}

impl Average {
    fn get(&self) -> Option<f64> {
        match self.bits.load(Ordering::Acquire) {
            NONE => None,
            b => Some(f64::from_bits(b)),
        }
    }

    fn add(&self, sample: f64) {
        let mut old = self.bits.load(Ordering::Acquire);
        loop {
            let avg = (old != NONE).then(|| f64::from_bits(old));
            let new = fold(avg, sample).to_bits();
            match self.bits.compare_exchange_weak(old, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(cur) => old = cur,
            }
        }
        self.samples.fetch_add(1, Ordering::Relaxed);
    }
}

/// Response times of one tier, as the policies see them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Speed {
    /// Average read response time, seconds (None: nothing read yet).
    pub read: Option<f64>,
    /// Average write response time, seconds.
    pub write: Option<f64>,
}

/// Upper bounds of the response-time histogram's buckets, seconds: 10 µs
/// times powers of 4, up to about 2.6 s (a last bucket takes the rest).
pub const LATENCY_BOUNDS: [f64; 10] =
    [10e-6, 40e-6, 160e-6, 640e-6, 2.56e-3, 10.24e-3, 40.96e-3, 163.84e-3, 655.36e-3, 2.621_44];

/// Requests of one kind by response time (lock-free).
#[derive(Debug, Default)]
struct Histogram {
    /// Requests per bucket of [`LATENCY_BOUNDS`], and past the last bound.
    buckets: [AtomicU64; LATENCY_BOUNDS.len() + 1],
    /// Their response times summed, nanoseconds.
    sum_ns: AtomicU64,
}

impl Histogram {
    fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = LATENCY_BOUNDS.iter().position(|b| s <= *b).unwrap_or(LATENCY_BOUNDS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    fn snapshot(&self) -> Latency {
        Latency {
            counts: self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect(),
            sum_secs: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

/// A snapshot of one kind's histogram: requests per bucket of
/// [`LATENCY_BOUNDS`] (not cumulative; one more past the last bound) and
/// the sum of their response times.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Requests per bucket.
    pub counts: Vec<u64>,
    /// Seconds, all of them together.
    pub sum_secs: f64,
}

impl Latency {
    /// Requests in all.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// What one tier's requests took, shared by its store and the engine.
#[derive(Debug, Default)]
pub struct Meter {
    read: Average,
    write: Average,
    read_bytes: AtomicU64,
    written: AtomicU64,
    read_hist: Histogram,
    write_hist: Histogram,
    /// Requests of every kind that reached the tier.
    requests: AtomicU64,
    /// Requests that changed names on the tier, or the attributes or data
    /// of a named object, and opens for writing.
    changes: AtomicU64,
    /// Set when someone wants to know when the tier was last asked and
    /// what asked it after a pause (the quiet HDD mode).
    idle: std::sync::OnceLock<IdleWatch>,
    /// When a request last reached the tier (`Timestamp` nanoseconds; 0:
    /// not watched), or the watch began.
    last: AtomicU64,
    /// Requests that came after the idle time, not taken yet (at most
    /// [`WAKES_KEPT`]).
    woke: parking_lot::Mutex<Vec<Woke>>,
}

/// How many unread wake notes a meter keeps.
pub const WAKES_KEPT: usize = 64;

/// The clock and pause length of [`Meter::watch_idle`].
struct IdleWatch {
    clock: Arc<dyn Clock>,
    after: Duration,
}

impl std::fmt::Debug for IdleWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IdleWatch({:?})", self.after)
    }
}

/// A request that reached a watched tier after it was left alone for the
/// idle time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Woke {
    /// When.
    pub at: Timestamp,
    /// How long nothing had reached the tier before.
    pub after: Duration,
    /// What the asking thread was doing.
    pub doing: Doing,
    /// The store call.
    pub call: &'static str,
}

impl Meter {
    /// A meter with no samples.
    pub fn new() -> Arc<Meter> {
        Arc::new(Meter::default())
    }

    /// The averages now.
    pub fn speed(&self) -> Speed {
        Speed { read: self.read.get(), write: self.write.get() }
    }

    /// Samples taken so far (reads, writes): the engine probes a tier
    /// whose count stood still (see `engine::measure`).
    pub fn samples(&self) -> (u64, u64) {
        (self.read.samples.load(Ordering::Relaxed), self.write.samples.load(Ordering::Relaxed))
    }

    /// Bytes written to the tier since the meter was made.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Bytes read from the tier since the meter was made.
    pub fn read_bytes(&self) -> u64 {
        self.read_bytes.load(Ordering::Relaxed)
    }

    /// Takes one read sample.
    pub fn read_took(&self, d: Duration, bytes: u64) {
        self.read.add(d.as_secs_f64());
        self.read_hist.observe(d);
        self.read_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The response-time histograms (reads, writes) of the requests served
    /// (probes' extra weight not included).
    pub fn latency(&self) -> [Latency; 2] {
        [self.read_hist.snapshot(), self.write_hist.snapshot()]
    }

    /// Folds `n` more samples of `d` (a probe of an idle tier stands for
    /// the requests it did not serve meanwhile).
    pub fn weigh(&self, write: bool, d: Duration, n: u32) {
        let avg = if write { &self.write } else { &self.read };
        for _ in 0..n {
            avg.add(d.as_secs_f64());
        }
    }

    /// Starts noting when requests reach the tier, and which came after
    /// `after` without any (see [`Meter::take_woke`]). Once per meter.
    /// The watch starts as if a request came now.
    pub fn watch_idle(&self, clock: Arc<dyn Clock>, after: Duration) {
        let now = clock.now();
        if self.idle.set(IdleWatch { clock, after }).is_ok() {
            self.last.store(now.0.max(1), Ordering::Relaxed);
        }
    }

    /// Requests that changed something on the tier so far (see
    /// [`Store::changes`]).
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// A request that changed something returned.
    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::AcqRel);
    }

    /// Requests of every kind that reached the tier so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// When a request last reached the tier, or [`Meter::watch_idle`] began
    /// if none did since (`None`: not watched).
    pub fn last_request(&self) -> Option<Timestamp> {
        match self.last.load(Ordering::Relaxed) {
            0 => None,
            t => Some(Timestamp(t)),
        }
    }

    /// The requests that came after a pause, since the last call.
    pub fn take_woke(&self) -> Vec<Woke> {
        std::mem::take(&mut *self.woke.lock())
    }

    /// A request (store call `call`) reached the tier.
    pub fn touched(&self, call: &'static str) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let Some(w) = self.idle.get() else { return };
        let now = w.clock.now();
        // The swap gives the pause to one request only, of all that come
        // at once after it.
        let prev = self.last.swap(now.0.max(1), Ordering::Relaxed);
        if prev == 0 {
            return;
        }
        let after = now.since(Timestamp(prev));
        if after >= w.after {
            let mut v = self.woke.lock();
            if v.len() < WAKES_KEPT {
                v.push(Woke { at: now, after, doing: crate::quiet::current(), call });
            }
        }
    }

    /// Takes one write sample.
    pub fn write_took(&self, d: Duration, bytes: u64) {
        self.write.add(d.as_secs_f64());
        self.write_hist.observe(d);
        self.written.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// A store whose data requests feed a [`Meter`]. Directories and files
/// are the inner store's own.
#[derive(Debug)]
pub struct Measured<S: Store> {
    inner: S,
    meter: Arc<Meter>,
}

impl<S: Store> Measured<S> {
    /// `inner`, measured into `meter`.
    pub fn new(inner: S, meter: Arc<Meter>) -> Self {
        Measured { inner, meter }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Its meter.
    pub fn meter(&self) -> &Arc<Meter> {
        &self.meter
    }
}

impl<S: Store> Store for Measured<S> {
    type Dir = S::Dir;
    type File = S::File;

    fn healthy(&self) -> bool {
        self.inner.healthy()
    }

    fn emulates_noreplace(&self) -> bool {
        self.inner.emulates_noreplace()
    }

    fn holes_coherent(&self) -> bool {
        self.inner.holes_coherent()
    }
    fn changes(&self) -> Option<u64> {
        Some(self.meter.changes())
    }
    fn root(&self) -> io::Result<Self::Dir> {
        self.meter.touched("root");
        self.inner.root()
    }
    fn open_dir(&self, parent: &Self::Dir, name: &OsStr) -> io::Result<Self::Dir> {
        self.meter.touched("open_dir");
        self.inner.open_dir(parent, name)
    }
    fn stat(&self, t: Target<'_, Self::Dir>) -> io::Result<Stat> {
        self.meter.touched("stat");
        self.inner.stat(t)
    }
    fn list(&self, dir: &Self::Dir) -> io::Result<Vec<DirEntry>> {
        self.meter.touched("list");
        self.inner.list(dir)
    }
    fn sync_dir(&self, dir: &Self::Dir) -> io::Result<()> {
        self.meter.touched("sync_dir");
        self.inner.sync_dir(dir)
    }
    fn mkdir(&self, parent: &Self::Dir, name: &OsStr, mode: u32) -> io::Result<()> {
        self.meter.touched("mkdir");
        let r = self.inner.mkdir(parent, name, mode);
        // Counted once made, so that a sync that read the count before
        // saw the change.
        self.meter.changed();
        r
    }
    fn mknod(&self, parent: &Self::Dir, name: &OsStr, mode: u32, rdev: u64) -> io::Result<()> {
        self.meter.touched("mknod");
        let r = self.inner.mknod(parent, name, mode, rdev);
        // Counted once made, so that a sync that read the count before
        // saw the change.
        self.meter.changed();
        r
    }
    fn symlink(&self, target: &OsStr, parent: &Self::Dir, name: &OsStr) -> io::Result<()> {
        self.meter.touched("symlink");
        let r = self.inner.symlink(target, parent, name);
        // Counted once made, so that a sync that read the count before
        // saw the change.
        self.meter.changed();
        r
    }
    fn readlink(&self, parent: &Self::Dir, name: &OsStr) -> io::Result<OsString> {
        self.meter.touched("readlink");
        self.inner.readlink(parent, name)
    }
    fn link(&self, op: &Self::Dir, on: &OsStr, np: &Self::Dir, nn: &OsStr) -> io::Result<()> {
        self.meter.touched("link");
        let r = self.inner.link(op, on, np, nn);
        // Counted once made, so that a sync that read the count before
        // saw the change.
        self.meter.changed();
        r
    }
    fn unlink(&self, parent: &Self::Dir, name: &OsStr) -> io::Result<()> {
        self.meter.touched("unlink");
        let r = self.inner.unlink(parent, name);
        // Counted once made, so that a sync that read the count before
        // saw the change.
        self.meter.changed();
        r
    }
    fn rmdir(&self, parent: &Self::Dir, name: &OsStr) -> io::Result<()> {
        self.meter.touched("rmdir");
        let r = self.inner.rmdir(parent, name);
        // Counted once made, so that a sync that read the count before
        // saw the change.
        self.meter.changed();
        r
    }
    fn rename(&self, op: &Self::Dir, on: &OsStr, np: &Self::Dir, nn: &OsStr, flags: u32) -> io::Result<()> {
        self.meter.touched("rename");
        let r = self.inner.rename(op, on, np, nn, flags);
        // Counted once made, so that a sync that read the count before
        // saw the change.
        self.meter.changed();
        r
    }
    fn chmod(&self, t: Target<'_, Self::Dir>, mode: u32) -> io::Result<()> {
        self.meter.touched("chmod");
        let r = self.inner.chmod(t, mode);
        self.meter.changed();
        r
    }
    fn chown(&self, t: Target<'_, Self::Dir>, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
        self.meter.touched("chown");
        let r = self.inner.chown(t, uid, gid);
        self.meter.changed();
        r
    }
    fn utimens(&self, t: Target<'_, Self::Dir>, atime: SetTime, mtime: SetTime) -> io::Result<()> {
        self.meter.touched("utimens");
        let r = self.inner.utimens(t, atime, mtime);
        self.meter.changed();
        r
    }
    fn getxattr(&self, t: Target<'_, Self::Dir>, name: &OsStr) -> io::Result<Vec<u8>> {
        self.meter.touched("getxattr");
        self.inner.getxattr(t, name)
    }
    fn setxattr(&self, t: Target<'_, Self::Dir>, name: &OsStr, value: &[u8], flags: i32) -> io::Result<()> {
        self.meter.touched("setxattr");
        let r = self.inner.setxattr(t, name, value, flags);
        self.meter.changed();
        r
    }
    fn listxattr(&self, t: Target<'_, Self::Dir>) -> io::Result<Vec<u8>> {
        self.meter.touched("listxattr");
        self.inner.listxattr(t)
    }
    fn removexattr(&self, t: Target<'_, Self::Dir>, name: &OsStr) -> io::Result<()> {
        self.meter.touched("removexattr");
        let r = self.inner.removexattr(t, name);
        self.meter.changed();
        r
    }
    fn statfs(&self) -> io::Result<FsStats> {
        self.inner.statfs()
    }
    fn open(&self, parent: &Self::Dir, name: &OsStr, flags: i32, mode: u32) -> io::Result<Self::File> {
        self.meter.touched("open");
        let r = self.inner.open(parent, name, flags, mode);
        // Opened for writing: the kernel may write it without asking the
        // store (passthrough).
        if flags & (libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY | libc::O_RDWR) != 0 {
            self.meter.changed();
        }
        r
    }

    fn read_at(&self, f: &Self::File, buf: &mut [u8], off: u64) -> io::Result<usize> {
        self.meter.touched("read_at");
        let t = Instant::now();
        let n = self.inner.read_at(f, buf, off)?;
        self.meter.read_took(t.elapsed(), n as u64);
        Ok(n)
    }

    fn write_at(&self, f: &Self::File, data: &[u8], off: u64) -> io::Result<usize> {
        self.meter.touched("write_at");
        let t = Instant::now();
        let r = self.inner.write_at(f, data, off);
        self.meter.changed();
        let n = r?;
        self.meter.write_took(t.elapsed(), n as u64);
        Ok(n)
    }

    fn fstat(&self, f: &Self::File) -> io::Result<Stat> {
        self.meter.touched("fstat");
        self.inner.fstat(f)
    }
    fn fsync(&self, f: &Self::File, datasync: bool) -> io::Result<()> {
        self.meter.touched("fsync");
        self.inner.fsync(f, datasync)
    }
    fn set_len(&self, f: &Self::File, size: u64) -> io::Result<()> {
        self.meter.touched("set_len");
        let r = self.inner.set_len(f, size);
        self.meter.changed();
        r
    }
    fn fallocate(&self, f: &Self::File, mode: i32, off: u64, len: u64) -> io::Result<()> {
        self.meter.touched("fallocate");
        let r = self.inner.fallocate(f, mode, off, len);
        self.meter.changed();
        r
    }
    fn seek(&self, f: &Self::File, off: i64, whence: i32) -> io::Result<i64> {
        self.meter.touched("seek");
        self.inner.seek(f, off, whence)
    }

    fn copy_range(&self, src: &Self::File, so: u64, dst: &Self::File, d_o: u64, len: u64) -> io::Result<usize> {
        self.meter.touched("copy_range");
        // A copy inside the tier is a read and a write of the device; it is
        // counted in the bytes written, and not averaged (one request of
        // two kinds).
        let r = self.inner.copy_range(src, so, dst, d_o, len);
        self.meter.changed();
        let n = r?;
        self.meter.written.fetch_add(n as u64, Ordering::Relaxed);
        self.meter.read_bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    fn file_chmod(&self, f: &Self::File, mode: u32) -> io::Result<()> {
        self.meter.touched("file_chmod");
        let r = self.inner.file_chmod(f, mode);
        self.meter.changed();
        r
    }
    fn file_getxattr(&self, f: &Self::File, name: &OsStr) -> io::Result<Vec<u8>> {
        self.meter.touched("file_getxattr");
        self.inner.file_getxattr(f, name)
    }
    fn file_setxattr(&self, f: &Self::File, name: &OsStr, value: &[u8], flags: i32) -> io::Result<()> {
        self.meter.touched("file_setxattr");
        let r = self.inner.file_setxattr(f, name, value, flags);
        self.meter.changed();
        r
    }
    fn file_listxattr(&self, f: &Self::File) -> io::Result<Vec<u8>> {
        self.meter.touched("file_listxattr");
        self.inner.file_listxattr(f)
    }
    fn file_chown(&self, f: &Self::File, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
        self.meter.touched("file_chown");
        let r = self.inner.file_chown(f, uid, gid);
        self.meter.changed();
        r
    }
    fn file_utimens(&self, f: &Self::File, atime: SetTime, mtime: SetTime) -> io::Result<()> {
        self.meter.touched("file_utimens");
        let r = self.inner.file_utimens(f, atime, mtime);
        self.meter.changed();
        r
    }
    fn touch(&self, f: &Self::File) -> io::Result<()> {
        self.meter.touched("touch");
        let r = self.inner.touch(f);
        self.meter.changed();
        r
    }
    fn keep_mtime(&self, f: &Self::File, mtime: super::TimeSpec) -> io::Result<()> {
        self.meter.touched("keep_mtime");
        let r = self.inner.keep_mtime(f, mtime);
        self.meter.changed();
        r
    }
    fn raw_fd<'a>(&self, f: &'a Self::File) -> Option<BorrowedFd<'a>> {
        self.inner.raw_fd(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::device::Profile;
    use crate::store::emulated::{Emulated, Emulation};
    use crate::store::mem::MemStore;

    #[test]
    fn the_average_keeps_ninety_nine_hundredths_of_itself() {
        assert_eq!(fold(None, 5.0), 5.0, "the first sample is the average");
        assert!((fold(Some(1.0), 2.0) - 1.01).abs() < 1e-12);
        // A step from 1 to 2 is half way after ln 2 / ln(1/0.99) = 69 samples.
        let mut a = 1.0;
        for _ in 0..69 {
            a = fold(Some(a), 2.0);
        }
        assert!((a - 1.5).abs() < 0.01, "{a}");
        // A single spike barely moves it.
        assert!(fold(Some(1.0), 101.0) < 2.01);
    }

    #[test]
    fn a_measured_store_averages_what_its_requests_took_per_kind() {
        let read = Duration::from_millis(4);
        let write = Duration::from_millis(12);
        let p = Profile::from_access("t", 1000.0, 1000.0, read, write);
        let em = Emulation::new(p, 0, Arc::new(SystemClock));
        let meter = Meter::new();
        let s = Measured::new(Emulated::new(MemStore::new(), Some(em)), meter.clone());
        assert_eq!(meter.speed(), Speed::default(), "nothing measured yet");
        let root = s.root().unwrap();
        let f = s.open(&root, OsStr::new("f"), libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
        for i in 0..5u64 {
            // Different files' offsets: every request pays its access time.
            s.write_at(&f, &[7u8; 4096], i * 1_000_000).unwrap();
        }
        let mut b = [0u8; 4096];
        for i in (0..5u64).rev() {
            s.read_at(&f, &mut b, i * 1_000_000).unwrap();
        }
        let sp = meter.speed();
        let (r, w) = (sp.read.unwrap(), sp.write.unwrap());
        assert!((0.004..0.010).contains(&r), "read {r}");
        assert!((0.012..0.020).contains(&w), "write {w}");
        assert_eq!(meter.samples(), (5, 5));
        assert_eq!(meter.written(), 5 * 4096);
        assert_eq!(meter.read_bytes(), 5 * 4096);
        // A copy counts its bytes, not a sample.
        let g = s.open(&root, OsStr::new("g"), libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
        let n = s.copy_range(&f, 0, &g, 0, 4096).unwrap() as u64;
        assert_eq!(meter.written(), 5 * 4096 + n);
        assert_eq!(meter.samples(), (5, 5));
    }

    #[test]
    fn response_times_fall_in_their_buckets_and_sum_up() {
        let m = Meter::new();
        m.read_took(Duration::from_micros(5), 4096);
        m.read_took(Duration::from_micros(10), 4096);
        m.read_took(Duration::from_millis(3), 4096);
        m.write_took(Duration::from_secs(5), 4096);
        m.weigh(false, Duration::from_millis(1), 9);
        let [r, w] = m.latency();
        assert_eq!(r.counts.len(), LATENCY_BOUNDS.len() + 1);
        assert_eq!((r.counts[0], r.counts[5], r.count()), (2, 1, 3), "a bound is in its bucket; probes' weight is not");
        assert!((r.sum_secs - 0.003_015).abs() < 1e-9, "{}", r.sum_secs);
        assert_eq!((w.counts[LATENCY_BOUNDS.len()], w.count()), (1, 1), "past the last bound");
    }
}
