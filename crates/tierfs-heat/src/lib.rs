//! tierfs's kernel heat source: eBPF programs (`src/heat.bpf.c`) on the
//! page cache's tracepoints and the backing file systems' write
//! tracepoints, which see every request the kernel serves by itself on a
//! passthrough file's backing copy, and hand them to the daemon through a
//! ring buffer ([`KernelHeat`], a [`HeatSource`]).
//!
//! It needs root (CAP_BPF and CAP_PERFMON, which passthrough already needs),
//! a kernel with BTF (`/sys/kernel/btf/vmlinux`) and the page cache's
//! `mm_filemap_get_pages` tracepoint (Linux 6.11 and later), and a build
//! with clang. [`KernelHeat::start`] says why it cannot run; the mount then
//! falls back (see `tierfs-fuse`'s mount).
//!
//! The volume watches a backing file by raising a counter in the programs'
//! `filter` map, which the daemon writes through a mapping of its own (no
//! system call in the open that gives the kernel the file); a sample names
//! the backing file (device, inode), and [`Files`] says which tierfs file
//! it was when the sample was made (a file system gives a removed file's
//! inode to the next one it makes).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use tierfs_core::heat::{monotonic_ns, HeatSource, Op, Sample, Seen, Watched};
use tierfs_core::state::ns::Ino;
use tierfs_core::tier::Tier;

#[cfg(tierfs_bpf)]
use aya::maps::{Array, MapData, PerCpuArray, RingBuf};

/// Why the kernel heat source cannot run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Built without clang: there is no program to load.
    #[error("tierfs was built without its eBPF program (clang was missing at build time)")]
    NotBuilt,
    /// The kernel or the process refused.
    #[error("{0}")]
    Kernel(String),
}

/// The backing file systems whose reads go through the page cache's
/// `filemap_read` (where `mm_filemap_get_pages` fires) and whose inodes'
/// `s_dev` is the device `stat` reports, by `statfs` magic: ext4, XFS,
/// F2FS. (tmpfs reads without it; btrfs reports a subvolume's device; a
/// FUSE tier may bypass the page cache.)
const READ_SEEN: [i64; 3] = [0xEF53, 0x5846_5342, 0xF2F5_2010];

/// The backing file systems whose writes the programs see, by `statfs`
/// magic, with the program that sees them.
const WRITE_HOOKS: [(i64, &str); 2] = [(0xEF53, "ext4_da_write"), (0x5846_5342, "xfs_write")];

/// Programs whose tracepoint the kernel may lack (a file system not built
/// in): the source runs without them. The read program is not among them.
const OPTIONAL: [&str; 6] = ["fault", "add_page", "ext4_da_write", "ext4_write", "xfs_write", "dio"];

/// Size of the program's `struct sample`.
const SAMPLE_BYTES: usize = 48;

/// Samples one drain takes at most (the ring holds about as many).
const MAX_DRAIN: usize = (4 << 20) / SAMPLE_BYTES;

/// The filter's words and byte counters (the program's `FILTER_WORDS`).
const FILTER_WORDS: usize = 1 << 17;
const FILTER_SLOTS: usize = FILTER_WORDS * 8;

/// The filter's slot of a backing file, by its file system's device (the
/// kernel's encoding) and inode (the program's `filter_slot`).
fn filter_slot(dev: u32, ino: u64) -> usize {
    let h = (ino ^ (u64::from(dev) << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> 44) as usize
}

/// The kernel's encoding of a device number (`new_encode_dev` is for user
/// space; `sb->s_dev`, which the programs read, is `major << 20 | minor`).
fn kernel_dev(dev: u64) -> u32 {
    (libc::major(dev) << 20) | libc::minor(dev)
}

/// A backing file's device and inode.
fn backing_id(fd: BorrowedFd<'_>) -> Option<(u64, u64)> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fd is a valid descriptor for the borrow; st is a valid out pointer.
    let r = unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) };
    // SAFETY: fstat filled st when it returned 0.
    (r == 0).then(|| unsafe { st.assume_init() }).map(|st| (st.st_dev, st.st_ino))
}

/// A sample as the program wrote it (native endian: the same host), naming
/// its backing file, (device, inode), whose tierfs file and tier the caller
/// fills in.
fn parse(b: &[u8]) -> Option<((u32, u64), Sample)> {
    if b.len() < SAMPLE_BYTES {
        return None;
    }
    let u64_at = |i: usize| u64::from_ne_bytes(b[i..i + 8].try_into().unwrap_or_default());
    let u32_at = |i: usize| u32::from_ne_bytes(b[i..i + 4].try_into().unwrap_or_default());
    let sample = Sample {
        ino: 0,
        tier: Tier::Hdd,
        off: u64_at(8),
        time: u64_at(16),
        len: u64::from(u32_at(24)),
        task: u32_at(28),
        seq: u32_at(32),
        op: Op::from_raw(u32::from(b[40]))?,
        weight: u32::from(u16::from_ne_bytes([b[42], b[43]])).max(1),
    };
    Some(((u32_at(36), u64_at(0)), sample))
}

/// A backing file: its file system's device (the kernel's encoding) and
/// its inode.
type Backing = (u32, u64);

/// One tierfs file's time as the owner of a backing file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Owner {
    ino: Ino,
    tier: Tier,
    /// Its watches now.
    watchers: u32,
    /// From when to when (`CLOCK_MONOTONIC` nanoseconds) it was watched.
    from: u64,
    until: Option<u64>,
}

/// Which tierfs file each watched backing file is, and was: a file system
/// gives a removed file's inode number to the next file it makes, so a
/// sample still in the ring when that one is watched belongs to the old
/// one. A sample goes to the owner watched when it was made.
#[derive(Debug, Default)]
struct Files {
    map: HashMap<Backing, Vec<Owner>>,
    /// Owners let go since the last drain (backing file, when): forgotten
    /// at the next but one, after every sample made before they were let
    /// go has been read.
    retired: Vec<(Backing, u64)>,
    retiring: Vec<(Backing, u64)>,
}

impl Files {
    /// `ino` on `tier` watches `b` from `now`. True if it was watched by
    /// nobody before.
    fn watch(&mut self, b: Backing, ino: Ino, tier: Tier, now: u64) -> bool {
        let owners = self.map.entry(b).or_default();
        match owners.last_mut() {
            Some(o) if o.ino == ino && o.until.is_none() => {
                o.watchers += 1;
                false
            }
            _ => {
                owners.push(Owner { ino, tier, watchers: 1, from: now, until: None });
                true
            }
        }
    }

    /// One watch of `b` ends at `now`. True if it was the last.
    fn unwatch(&mut self, b: Backing, now: u64) -> bool {
        let Some(o) = self.map.get_mut(&b).and_then(|v| v.last_mut()).filter(|o| o.until.is_none()) else {
            return false;
        };
        o.watchers = o.watchers.saturating_sub(1);
        if o.watchers > 0 {
            return false;
        }
        o.until = Some(now);
        self.retired.push((b, now));
        true
    }

    /// The file `b` belonged to at `time`.
    fn owner(&self, b: Backing, time: u64) -> Option<(Ino, Tier)> {
        let owners = self.map.get(&b)?;
        owners.iter().rev().find(|o| o.from <= time && o.until.is_none_or(|u| time <= u)).map(|o| (o.ino, o.tier))
    }

    /// The end of a drain: owners let go before the last one are gone.
    fn end_of_drain(&mut self) {
        for (b, until) in std::mem::take(&mut self.retiring) {
            if let Some(v) = self.map.get_mut(&b) {
                v.retain(|o| o.until != Some(until));
                if v.is_empty() {
                    self.map.remove(&b);
                }
            }
        }
        std::mem::swap(&mut self.retired, &mut self.retiring);
    }

    /// Backing files watched now.
    fn watched(&self) -> u64 {
        self.map.values().filter(|v| v.last().is_some_and(|o| o.until.is_none())).count() as u64
    }
}

/// The program's filter, mapped into the daemon: a byte counter per slot,
/// raised while a file hashed to it is watched.
#[cfg(tierfs_bpf)]
struct Filter {
    ptr: std::ptr::NonNull<AtomicU8>,
    /// Keeps the map (and so the mapping's pages) alive.
    _map: MapData,
}

// SAFETY: the mapping is shared memory read and written only through atomics.
#[cfg(tierfs_bpf)]
unsafe impl Send for Filter {}
// SAFETY: as above.
#[cfg(tierfs_bpf)]
unsafe impl Sync for Filter {}

#[cfg(tierfs_bpf)]
impl Filter {
    fn map(map: MapData) -> Result<Filter, Error> {
        use std::os::fd::AsFd;
        let len = FILTER_WORDS * 8;
        // SAFETY: a shared mapping of the whole array map, which the kernel
        // allows for maps made with BPF_F_MMAPABLE; checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.fd().as_fd().as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::Kernel(format!("mapping the filter: {}", std::io::Error::last_os_error())));
        }
        let ptr = std::ptr::NonNull::new(p.cast::<AtomicU8>()).ok_or_else(|| Error::Kernel("null mapping".into()))?;
        Ok(Filter { ptr, _map: map })
    }

    fn slot(&self, i: usize) -> &AtomicU8 {
        debug_assert!(i < FILTER_SLOTS);
        // SAFETY: i < FILTER_SLOTS, the mapping's length in bytes, and the
        // mapping lives as long as self.
        unsafe { &*self.ptr.as_ptr().add(i % FILTER_SLOTS) }
    }

    /// One more watched file in slot `i` (a full counter stays full).
    fn raise(&self, i: usize) {
        let _ = self.slot(i).fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_add(1));
    }

    /// One fewer (a full counter stays full: it may count more than 255).
    fn lower(&self, i: usize) {
        let _ = self
            .slot(i)
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| (v < u8::MAX).then(|| v.saturating_sub(1)));
    }
}

#[cfg(tierfs_bpf)]
impl Drop for Filter {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, of that length.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), FILTER_WORDS * 8) };
    }
}

/// The eBPF heat source of one mount.
pub struct KernelHeat {
    #[cfg(tierfs_bpf)]
    live: Live,
    /// What the programs see of each tier (SSD, HDD), and its device (the
    /// kernel's encoding).
    seen: [Seen; 2],
    devs: [u32; 2],
    /// The tracepoints its programs are attached to.
    tracepoints: Vec<&'static str>,
    files: Mutex<Files>,
    /// Samples of backing files no watched file has (a slot shared by a
    /// hash), dropped.
    foreign: AtomicU64,
}

#[cfg(tierfs_bpf)]
struct Live {
    /// Holds the programs and their links: they stay attached while it lives.
    _ebpf: aya::Ebpf,
    samples: Mutex<RingBuf<MapData>>,
    lost: PerCpuArray<MapData, u64>,
    every: Mutex<Array<MapData, u32>>,
    filter: Filter,
}

impl std::fmt::Debug for KernelHeat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelHeat").field("tracepoints", &self.tracepoints).finish()
    }
}

impl KernelHeat {
    /// Loads and attaches the programs for a mount whose tiers are the
    /// directories `ssd` and `hdd`. The daemon's own I/O (this process) is
    /// never counted.
    pub fn start(ssd: &Path, hdd: &Path) -> Result<KernelHeat, Error> {
        Self::start_inner(ssd, hdd)
    }

    #[cfg(not(tierfs_bpf))]
    fn start_inner(_ssd: &Path, _hdd: &Path) -> Result<KernelHeat, Error> {
        Err(Error::NotBuilt)
    }

    #[cfg(tierfs_bpf)]
    fn start_inner(ssd: &Path, hdd: &Path) -> Result<KernelHeat, Error> {
        use std::os::unix::fs::MetadataExt;
        let dev = |p: &Path| {
            std::fs::metadata(p)
                .map(|m| kernel_dev(m.dev()))
                .map_err(|e| Error::Kernel(format!("{}: {e}", p.display())))
        };
        let (ssd_dev, hdd_dev) = (dev(ssd)?, dev(hdd)?);
        // The daemon in its own PID namespace: the programs compare there.
        let tgid = std::process::id();
        let pidns =
            std::fs::metadata("/proc/self/ns/pid").map_err(|e| Error::Kernel(format!("/proc/self/ns/pid: {e}")))?;
        let (pidns_dev, pidns_ino) = (u64::from(kernel_dev(pidns.dev())), pidns.ino());
        // The object file, aligned as the ELF parser wants it.
        #[repr(C, align(8))]
        struct Aligned<T: ?Sized>(T);
        static OBJECT: &Aligned<[u8]> = &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/heat.bpf.o")));
        let btf = aya::Btf::from_sys_fs().map_err(|e| Error::Kernel(format!("the kernel's BTF: {e}")))?;
        let mut ebpf = aya::EbpfLoader::new()
            .btf(Some(&btf))
            .override_global("ssd_dev", &ssd_dev, true)
            .override_global("hdd_dev", &hdd_dev, true)
            .override_global("daemon_tgid", &tgid, true)
            .override_global("pidns_dev", &pidns_dev, true)
            .override_global("pidns_ino", &pidns_ino, true)
            .load(&OBJECT.0)
            .map_err(|e| Error::Kernel(format!("loading the eBPF object: {}", chain(&e))))?;
        let mut attached = Vec::new();
        for (name, tracepoint) in [
            ("get_pages", "mm_filemap_get_pages"),
            ("fault", "mm_filemap_fault"),
            ("add_page", "mm_filemap_add_to_page_cache"),
            ("ext4_da_write", "ext4_da_write_begin"),
            ("ext4_write", "ext4_write_begin"),
            ("xfs_write", "xfs_file_buffered_write"),
            ("dio", "iomap_dio_rw_begin"),
        ] {
            let r = (|| -> Result<(), String> {
                let p = ebpf.program_mut(name).ok_or_else(|| format!("no program {name}"))?;
                let p: &mut aya::programs::BtfTracePoint = p.try_into().map_err(|e| chain(&e))?;
                p.load(tracepoint, &btf).map_err(|e| chain(&e))?;
                p.attach().map_err(|e| chain(&e))?;
                Ok(())
            })();
            match r {
                Ok(()) => attached.push((name, tracepoint)),
                Err(e) if OPTIONAL.contains(&name) => {
                    tracing::info!(tracepoint, error = %e, "heat source: tracepoint not attached")
                }
                Err(e) => return Err(Error::Kernel(format!("attaching to {tracepoint}: {e}"))),
            }
        }
        let map = |ebpf: &mut aya::Ebpf, name: &str| {
            ebpf.take_map(name).ok_or_else(|| Error::Kernel(format!("the eBPF object has no map {name}")))
        };
        let samples = RingBuf::try_from(map(&mut ebpf, "samples")?).map_err(|e| Error::Kernel(chain(&e)))?;
        let lost = PerCpuArray::try_from(map(&mut ebpf, "lost")?).map_err(|e| Error::Kernel(chain(&e)))?;
        // The program's one writable global, `every`.
        let every = Array::try_from(map(&mut ebpf, ".data")?).map_err(|e| Error::Kernel(chain(&e)))?;
        let filter = match map(&mut ebpf, "filter")? {
            aya::maps::Map::Array(data) => Filter::map(data)?,
            _ => return Err(Error::Kernel("the filter is not an array map".into())),
        };
        let has = |prog: &str| attached.iter().any(|(name, _)| *name == prog);
        let seen = |p: &Path| {
            let magic = fs_magic(p);
            let reads = magic.is_some_and(|m| READ_SEEN.contains(&m));
            Seen {
                reads,
                writes: reads && WRITE_HOOKS.iter().any(|(m, prog)| Some(*m) == magic && has(prog)),
                direct: reads && has("dio"),
            }
        };
        Ok(KernelHeat {
            seen: [seen(ssd), seen(hdd)],
            devs: [ssd_dev, hdd_dev],
            tracepoints: attached.iter().map(|(_, tp)| *tp).collect(),
            files: Mutex::new(Files::default()),
            foreign: AtomicU64::new(0),
            live: Live { _ebpf: ebpf, samples: Mutex::new(samples), lost, every: Mutex::new(every), filter },
        })
    }

    /// The tracepoints its programs are attached to.
    pub fn tracepoints(&self) -> &[&'static str] {
        &self.tracepoints
    }

    /// Samples dropped because no watched file has their backing file.
    pub fn foreign(&self) -> u64 {
        self.foreign.load(Ordering::Relaxed)
    }

    /// Each attached program's runs and the nanoseconds they took, as the
    /// kernel counts them while its run-time statistics are on
    /// (`kernel.bpf_stats_enabled`, or `aya::sys::enable_stats`): what
    /// the source costs each request.
    pub fn program_stats(&self) -> Vec<(String, u64, u64)> {
        #[cfg(tierfs_bpf)]
        {
            self.live
                ._ebpf
                .programs()
                .filter_map(|(name, p)| {
                    let info = p.info().ok()?;
                    Some((name.to_string(), info.run_count(), info.run_time().as_nanos() as u64))
                })
                .collect()
        }
        #[cfg(not(tierfs_bpf))]
        Vec::new()
    }
}

/// The `statfs` magic of the file system `p` is on.
#[cfg_attr(not(tierfs_bpf), allow(dead_code))]
fn fs_magic(p: &Path) -> Option<i64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: a NUL-terminated path and a valid out pointer.
    let r = unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) };
    // SAFETY: statfs filled st when it returned 0.
    (r == 0).then(|| unsafe { st.assume_init() }.f_type)
}

/// An error with its sources, on one line.
#[cfg_attr(not(tierfs_bpf), allow(dead_code))]
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

impl HeatSource for KernelHeat {
    fn name(&self) -> &'static str {
        "ebpf"
    }

    fn sees(&self, tier: Tier) -> Seen {
        self.seen[tier.idx()]
    }

    fn watch(&self, ino: Ino, tier: Tier, fd: BorrowedFd<'_>) -> Option<Watched> {
        let seen = self.seen[tier.idx()];
        let (dev, backing) = backing_id(fd)?;
        let dev = kernel_dev(dev);
        // A file on another file system below the tier's directory (a
        // mount inside it) is not one the programs look at.
        if !seen.reads || dev != self.devs[tier.idx()] {
            return None;
        }
        let first = self.files.lock().watch((dev, backing), ino, tier, monotonic_ns());
        if first {
            #[cfg(tierfs_bpf)]
            self.live.filter.raise(filter_slot(dev, backing));
        }
        Some(Watched { seen, tier, dev, backing })
    }

    fn unwatch(&self, w: &Watched) {
        if self.files.lock().unwatch((w.dev, w.backing), monotonic_ns()) {
            #[cfg(tierfs_bpf)]
            self.live.filter.lower(filter_slot(w.dev, w.backing));
        }
    }

    #[cfg(tierfs_bpf)]
    fn drain(&self, out: &mut Vec<Sample>) {
        let mut raw = Vec::new();
        {
            let mut ring = self.live.samples.lock();
            // At most a full ring's worth a call: producers on many CPUs
            // cannot keep the engine here.
            while raw.len() < MAX_DRAIN {
                let Some(item) = ring.next() else { break };
                raw.extend(parse(&item));
            }
        }
        let mut files = self.files.lock();
        for (backing, mut s) in raw {
            match files.owner(backing, s.time) {
                Some((ino, tier)) => {
                    s.ino = ino;
                    s.tier = tier;
                    out.push(s);
                }
                None => {
                    self.foreign.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        files.end_of_drain();
    }

    #[cfg(not(tierfs_bpf))]
    fn drain(&self, _out: &mut Vec<Sample>) {}

    #[cfg(tierfs_bpf)]
    fn set_every(&self, n: u32) {
        if let Err(e) = self.live.every.lock().set(0, n.max(1), 0) {
            tracing::warn!(error = %e, "heat source: cannot set the sampling interval");
        }
    }

    fn lost_and_watched(&self) -> (u64, u64) {
        #[cfg(tierfs_bpf)]
        let lost = self.live.lost.get(&0, 0).map_or(0, |v| v.iter().sum());
        #[cfg(not(tierfs_bpf))]
        let lost = 0;
        let watched = self.files.lock().watched();
        (lost, watched)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_read_as_the_program_writes_it() {
        let mut b = Vec::new();
        b.extend_from_slice(&4242u64.to_ne_bytes());
        b.extend_from_slice(&8192u64.to_ne_bytes());
        b.extend_from_slice(&99u64.to_ne_bytes());
        b.extend_from_slice(&4096u32.to_ne_bytes());
        b.extend_from_slice(&77u32.to_ne_bytes());
        b.extend_from_slice(&5u32.to_ne_bytes());
        b.extend_from_slice(&(254u32 << 20).to_ne_bytes());
        b.push(Op::Write as u8);
        b.push(0);
        b.extend_from_slice(&3u16.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        let (backing, s) = parse(&b).expect("a whole sample");
        assert_eq!(backing, (254 << 20, 4242));
        assert_eq!(
            s,
            Sample {
                ino: 0,
                tier: Tier::Hdd,
                off: 8192,
                len: 4096,
                task: 77,
                seq: 5,
                op: Op::Write,
                weight: 3,
                time: 99
            }
        );
        assert!(parse(&b[..47]).is_none());
    }

    #[test]
    fn a_sample_goes_to_the_file_that_had_the_backing_inode_when_it_was_made() {
        let mut f = Files::default();
        let b = (7, 42);
        assert!(f.watch(b, 100, Tier::Hdd, 10));
        assert!(!f.watch(b, 100, Tier::Hdd, 11), "a second handle of the same file");
        assert!(!f.unwatch(b, 20));
        assert!(f.unwatch(b, 30));
        // The file is removed; the file system gives its inode to a new one.
        assert!(f.watch(b, 200, Tier::Ssd, 40));
        assert_eq!(f.owner(b, 25), Some((100, Tier::Hdd)), "a sample still in the ring");
        assert_eq!(f.owner(b, 45), Some((200, Tier::Ssd)));
        assert_eq!(f.owner(b, 35), None, "nobody watched it then");
        assert_eq!(f.watched(), 1);
        // Forgotten at the end of the drain after the next.
        f.end_of_drain();
        assert_eq!(f.owner(b, 25), Some((100, Tier::Hdd)));
        f.end_of_drain();
        assert_eq!(f.owner(b, 25), None);
        assert_eq!(f.owner(b, 45), Some((200, Tier::Ssd)));
        assert!(f.unwatch(b, 50));
        f.end_of_drain();
        f.end_of_drain();
        assert!(f.map.is_empty());
    }

    #[test]
    fn device_numbers_are_in_the_kernels_encoding() {
        // 254:0 (a virtio disk) and 0:55 (an anonymous device).
        assert_eq!(kernel_dev(libc::makedev(254, 0)), 254 << 20);
        assert_eq!(kernel_dev(libc::makedev(0, 55)), 55);
        assert_eq!(kernel_dev(libc::makedev(259, 70_000)), (259 << 20) | 70_000);
    }

    #[test]
    fn filter_slots_spread_over_the_filter() {
        let mut hit = std::collections::HashSet::new();
        for ino in 1..10_000u64 {
            for dev in [254 << 20, 55] {
                let s = filter_slot(dev, ino);
                assert!(s < FILTER_SLOTS);
                hit.insert(s);
            }
        }
        assert!(hit.len() > 19_900, "{}", hit.len());
    }
}

/// The programs on a real kernel: root only (the tests skip otherwise, and
/// say so), since loading them needs CAP_BPF and CAP_PERFMON.
#[cfg(all(test, tierfs_bpf))]
mod live {
    use super::*;
    use std::os::fd::AsFd;
    use std::process::Command;

    fn root() -> bool {
        // SAFETY: geteuid has no preconditions.
        let r = unsafe { libc::geteuid() } == 0;
        if !r {
            eprintln!("skipped: loading eBPF programs needs root");
        }
        r
    }

    /// Drains until `want` samples of `ino` came or five seconds passed.
    fn samples_of(h: &KernelHeat, ino: Ino, want: usize) -> Vec<Sample> {
        let mut got = Vec::new();
        for _ in 0..50 {
            let mut all = Vec::new();
            h.drain(&mut all);
            got.extend(all.into_iter().filter(|s| s.ino == ino));
            if got.len() >= want {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        got
    }

    /// The source on a new directory, and a file there of `len` bytes,
    /// written `piece` bytes a call, that it watches as inode 9 on the HDD
    /// (the directory goes with the first).
    fn source_and_file(
        len: usize,
        piece: usize,
    ) -> (tempfile::TempDir, KernelHeat, std::path::PathBuf, std::fs::File, Watched) {
        use std::io::Write;
        let dir = tempfile::tempdir().expect("tempdir");
        let h = KernelHeat::start(dir.path(), dir.path()).expect("the heat source starts as root");
        let path = dir.path().join("f");
        let mut w = std::fs::File::create(&path).expect("create");
        for _ in 0..len / piece {
            w.write_all(&vec![7u8; piece]).expect("write");
        }
        drop(w);
        let f = std::fs::File::open(&path).expect("open");
        let w = h.watch(9, Tier::Hdd, f.as_fd()).expect("watched");
        (dir, h, path, f, w)
    }

    #[test]
    fn another_process_reads_and_writes_of_a_watched_file_are_seen_and_ours_are_not() {
        if !root() {
            return;
        }
        let (dir, h, path, _f, w) = source_and_file(1 << 20, 1 << 20);
        let seen = w.seen;
        assert!(seen.reads);
        // XFS may be a module whose tracepoints are not in vmlinux's BTF.
        for tp in ["mm_filemap_get_pages", "mm_filemap_fault", "mm_filemap_add_to_page_cache", "ext4_da_write_begin"] {
            assert!(h.tracepoints().contains(&tp), "{tp} not in {:?}", h.tracepoints());
        }
        if fs_magic(dir.path()) == Some(0xEF53) {
            assert!(seen.writes, "ext4's writes are seen");
        }
        // Our own reads are the daemon's: not counted.
        std::fs::read(&path).expect("read");
        // Another process's are: a read of 64 KiB at 128 KiB.
        let st = Command::new("dd")
            .args([&format!("if={}", path.display()), "of=/dev/null", "bs=64k", "skip=2", "count=1", "status=none"])
            .status()
            .expect("dd");
        assert!(st.success());
        let got = samples_of(&h, 9, 1);
        let reads: Vec<_> = got.iter().filter(|s| s.op == Op::Read).collect();
        assert_eq!(reads.len(), 1, "{got:?}");
        assert_eq!((reads[0].off, reads[0].len, reads[0].tier), (128 << 10, 64 << 10, Tier::Hdd));
        if seen.writes {
            let st = Command::new("dd")
                .args([
                    "if=/dev/zero",
                    &format!("of={}", path.display()),
                    "bs=8k",
                    "seek=3",
                    "count=1",
                    "conv=notrunc",
                    "status=none",
                ])
                .status()
                .expect("dd");
            assert!(st.success());
            let got = samples_of(&h, 9, 1);
            let bytes: u64 = got.iter().filter(|s| s.op == Op::Write).map(|s| s.len).sum();
            assert_eq!(bytes, 8192, "{got:?}");
            assert!(got.iter().filter(|s| s.op == Op::Write).all(|s| s.off >= 3 * 8192));
        }
        // Once unwatched, nothing more.
        h.unwatch(&w);
        let st = Command::new("cat").arg(&path).stdout(std::process::Stdio::null()).status().expect("cat");
        assert!(st.success());
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(samples_of(&h, 9, 0).is_empty());
        assert_eq!(h.lost_and_watched(), (0, 0));
    }

    #[test]
    fn a_read_the_kernel_serves_in_several_batches_comes_as_one_sample() {
        if !root() {
            return;
        }
        // Written a page at a time, the file is cached in single pages: a
        // batch holds at most 31 folios, so a 1-MiB read takes several.
        let (_dir, h, path, _f, _w) = source_and_file(1 << 20, 4096);
        let st = Command::new("dd")
            .args([&format!("if={}", path.display()), "of=/dev/null", "bs=1M", "count=1", "status=none"])
            .status()
            .expect("dd");
        assert!(st.success());
        // dd is done: every sample it made is in the ring.
        let got = samples_of(&h, 9, 1);
        let reads: Vec<_> = got.iter().filter(|s| s.op == Op::Read).map(|s| (s.off, s.len)).collect();
        assert_eq!(reads, vec![(0, 1 << 20)], "{got:?}");
    }

    #[test]
    fn our_reads_right_after_another_process_on_the_same_cpu_are_not_counted() {
        // The program remembers the last thread found not to be ours, per
        // CPU, to spare the namespace lookup: ours must still be asked.
        if !root() {
            return;
        }
        let (_dir, h, path, f, _w) = source_and_file(64 << 10, 64 << 10);
        // This thread and the other process on one CPU.
        // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and
        // sched_setaffinity get a valid pointer to it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            assert_eq!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set), 0);
        }
        for round in 0..20 {
            let st = Command::new("taskset")
                .args(["-c", "0", "dd", &format!("if={}", path.display()), "of=/dev/null", "bs=4k", "count=1"])
                .args(["status=none"])
                .status()
                .expect("taskset dd");
            assert!(st.success());
            // Ours, at another offset.
            let mut b = [0u8; 4096];
            std::os::unix::fs::FileExt::read_at(&f, &mut b, 8192).expect("read");
            let got = samples_of(&h, 9, 1);
            let reads: Vec<_> = got.iter().filter(|s| s.op == Op::Read).collect();
            assert!(
                reads.len() == 1 && reads[0].off == 0,
                "round {round}: only the other process's read is counted: {got:?}"
            );
        }
    }

    #[test]
    fn under_sampling_every_page_of_a_hot_chunk_is_counted_near_its_reads() {
        // Sampling decided by thread and offset took the same pages of a hot
        // chunk every time and the others never: each page came out at 0 or
        // `every` times its reads, however long the run.
        if !root() {
            return;
        }
        let (_dir, h, path, _f, _w) = source_and_file(64 << 10, 64 << 10);
        let every = 8;
        h.set_every(every);
        // Another process reads each of the 16 pages 2 000 times.
        let rounds = 2000u64;
        let st = Command::new("perl")
            .args([
                "-e",
                "open F, '<', $ARGV[0] or die; for (1..$ARGV[1]) { for $p (0..15) { sysseek F, $p * 4096, 0; sysread F, $b, 4096 } }",
                &path.display().to_string(),
                &rounds.to_string(),
            ])
            .status()
            .expect("perl");
        assert!(st.success());
        let want = (16 * rounds / u64::from(every)) as usize;
        let got = samples_of(&h, 9, want * 9 / 10);
        let mut per_page = [0u64; 16];
        for s in got.iter().filter(|s| s.op == Op::Read && s.len == 4096) {
            per_page[(s.off / 4096) as usize] += u64::from(s.weight);
        }
        // Each page's estimate is binomial: a standard deviation of 6 % here.
        let off: Vec<_> = per_page.iter().enumerate().filter(|(_, &n)| n.abs_diff(rounds) > rounds * 3 / 10).collect();
        assert!(off.is_empty(), "pages counted far from their {rounds} reads: {off:?} (all: {per_page:?})");
    }
}
