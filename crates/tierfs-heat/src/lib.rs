//! tierfs's kernel heat source: eBPF programs (`src/heat.bpf.c`) on the
//! page cache's tracepoints and the backing file systems' write
//! tracepoints, which see every request the kernel serves by itself on a
//! passthrough file's backing copy, and hand them to the daemon through a
//! ring buffer ([`KernelHeat`], a [`HeatSource`]).
//!
//! It needs root (CAP_BPF and CAP_PERFMON, which passthrough already needs),
//! a kernel with BTF (`/sys/kernel/btf/vmlinux`), BTF tracepoints and ring
//! buffers (Linux 5.8+), and a build with clang. [`KernelHeat::start`] says
//! why it cannot run; the mount then falls back (see `tierfs-fuse`'s mount).

use parking_lot::Mutex;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::Path;
use tierfs_core::heat::{HeatSource, Op, Sample, Seen};
use tierfs_core::state::ns::Ino;
use tierfs_core::tier::Tier;

#[cfg(tierfs_bpf)]
use aya::maps::{HashMap, MapData, PerCpuArray, RingBuf};

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

/// The backing file systems whose writes the programs see, by `statfs`
/// magic, with the program that sees them.
const WRITE_HOOKS: [(i64, &str); 2] = [(0xEF53, "ext4_da_write"), (0x5846_5342, "xfs_write")];

/// Programs whose tracepoint the kernel may lack (a file system not built
/// in): the source runs without them. The read program is not among them.
const OPTIONAL: [&str; 6] = ["fault", "add_page", "ext4_da_write", "ext4_write", "xfs_write", "dio"];

/// Key of the `watched` map (the program's `struct key`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key {
    dev: u32,
    pad: u32,
    ino: u64,
}

// SAFETY: plain integers, no padding (4 + 4 + 8 bytes).
#[cfg(tierfs_bpf)]
unsafe impl aya::Pod for Key {}

/// Size of the program's `struct sample`.
const SAMPLE_BYTES: usize = 32;

/// The kernel's encoding of a device number (`new_encode_dev` is for user
/// space; `sb->s_dev`, which the programs read, is `major << 20 | minor`).
fn kernel_dev(dev: u64) -> u32 {
    (libc::major(dev) << 20) | libc::minor(dev)
}

fn stat_fd(fd: BorrowedFd<'_>) -> Option<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fd is a valid descriptor for the borrow; st is a valid out pointer.
    let r = unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) };
    // SAFETY: fstat filled st when it returned 0.
    (r == 0).then(|| unsafe { st.assume_init() })
}

fn fs_magic(fd: BorrowedFd<'_>) -> Option<i64> {
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: as in `stat_fd`.
    let r = unsafe { libc::fstatfs(fd.as_raw_fd(), st.as_mut_ptr()) };
    // SAFETY: fstatfs filled st when it returned 0.
    (r == 0).then(|| unsafe { st.assume_init() }.f_type)
}

/// A sample as the program wrote it (little or native endian: same host).
fn parse(b: &[u8]) -> Option<Sample> {
    if b.len() < SAMPLE_BYTES {
        return None;
    }
    let u64_at = |i: usize| u64::from_ne_bytes(b[i..i + 8].try_into().unwrap_or_default());
    let u32_at = |i: usize| u32::from_ne_bytes(b[i..i + 4].try_into().unwrap_or_default());
    let u16_at = |i: usize| u16::from_ne_bytes(b[i..i + 2].try_into().unwrap_or_default());
    let file = u64_at(0);
    Some(Sample {
        ino: file >> 1,
        tier: if file & 1 == 0 { Tier::Ssd } else { Tier::Hdd },
        off: u64_at(8),
        len: u64::from(u32_at(16)),
        task: u32_at(20),
        seq: u32_at(24),
        op: Op::from_raw(u32::from(u16_at(28)))?,
        weight: u32::from(u16_at(30)).max(1),
    })
}

/// The value the programs report for a watched file.
fn file_value(ino: Ino, tier: Tier) -> u64 {
    ino << 1 | tier as u64
}

/// The eBPF heat source of one mount.
pub struct KernelHeat {
    #[cfg(tierfs_bpf)]
    live: Live,
    /// File systems (by magic) whose writes are seen.
    write_magics: Vec<i64>,
    /// The tracepoints its programs are attached to.
    tracepoints: Vec<&'static str>,
}

#[cfg(tierfs_bpf)]
struct Live {
    /// Holds the programs and their links: they stay attached while it lives.
    _ebpf: aya::Ebpf,
    watched: Mutex<HashMap<MapData, Key, u64>>,
    samples: Mutex<RingBuf<MapData>>,
    lost: PerCpuArray<MapData, u64>,
    every: Mutex<aya::maps::Array<MapData, u32>>,
    count: std::sync::atomic::AtomicU64,
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
        let tgid = std::process::id();
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
        let watched = HashMap::try_from(map(&mut ebpf, "watched")?).map_err(|e| Error::Kernel(chain(&e)))?;
        let samples = RingBuf::try_from(map(&mut ebpf, "samples")?).map_err(|e| Error::Kernel(chain(&e)))?;
        let lost = PerCpuArray::try_from(map(&mut ebpf, "lost")?).map_err(|e| Error::Kernel(chain(&e)))?;
        let every = aya::maps::Array::try_from(map(&mut ebpf, "every")?).map_err(|e| Error::Kernel(chain(&e)))?;
        let write_magics = WRITE_HOOKS
            .iter()
            .filter(|(_, prog)| attached.iter().any(|(name, _)| name == prog))
            .map(|(magic, _)| *magic)
            .collect();
        Ok(KernelHeat {
            live: Live {
                _ebpf: ebpf,
                watched: Mutex::new(watched),
                samples: Mutex::new(samples),
                lost,
                every: Mutex::new(every),
                count: std::sync::atomic::AtomicU64::new(0),
            },
            write_magics,
            tracepoints: attached.into_iter().map(|(_, tp)| tp).collect(),
        })
    }

    /// The tracepoints its programs are attached to.
    pub fn tracepoints(&self) -> &[&'static str] {
        &self.tracepoints
    }

    fn key_of(fd: BorrowedFd<'_>) -> Option<Key> {
        stat_fd(fd).map(|st| Key { dev: kernel_dev(st.st_dev), pad: 0, ino: st.st_ino })
    }
}

/// An error with its sources, on one line.
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

    fn sees(&self) -> Seen {
        Seen { reads: true, writes: !self.write_magics.is_empty() }
    }

    #[cfg(tierfs_bpf)]
    fn watch(&self, ino: Ino, tier: Tier, fd: BorrowedFd<'_>) -> Seen {
        let Some(key) = Self::key_of(fd) else { return Seen::default() };
        match self.live.watched.lock().insert(key, file_value(ino, tier), 0) {
            Ok(()) => {
                self.live.count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let writes = fs_magic(fd).is_some_and(|m| self.write_magics.contains(&m));
                Seen { reads: true, writes }
            }
            Err(e) => {
                // The map is full (65 536 files open with passthrough at
                // once): this file is counted per open.
                tracing::debug!(ino, error = %e, "heat source: file not watched");
                Seen::default()
            }
        }
    }

    #[cfg(not(tierfs_bpf))]
    fn watch(&self, _ino: Ino, _tier: Tier, _fd: BorrowedFd<'_>) -> Seen {
        Seen::default()
    }

    #[cfg(tierfs_bpf)]
    fn unwatch(&self, fd: BorrowedFd<'_>) {
        let Some(key) = Self::key_of(fd) else { return };
        if self.live.watched.lock().remove(&key).is_ok() {
            self.live.count.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[cfg(not(tierfs_bpf))]
    fn unwatch(&self, _fd: BorrowedFd<'_>) {}

    #[cfg(tierfs_bpf)]
    fn drain(&self, out: &mut Vec<Sample>) {
        let mut ring = self.live.samples.lock();
        while let Some(item) = ring.next() {
            if let Some(s) = parse(&item) {
                out.push(s);
            }
        }
    }

    #[cfg(not(tierfs_bpf))]
    fn drain(&self, _out: &mut Vec<Sample>) {}

    #[cfg(tierfs_bpf)]
    fn set_every(&self, n: u32) {
        if let Err(e) = self.live.every.lock().set(0, n.max(1), 0) {
            tracing::warn!(error = %e, "heat source: cannot set the sampling interval");
        }
    }

    #[cfg(tierfs_bpf)]
    fn lost_and_watched(&self) -> (u64, u64) {
        let lost = self.live.lost.get(&0, 0).map_or(0, |v| v.iter().sum());
        (lost, self.live.count.load(std::sync::atomic::Ordering::Relaxed))
    }

    #[cfg(not(tierfs_bpf))]
    fn lost_and_watched(&self) -> (u64, u64) {
        (0, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_read_as_the_program_writes_it() {
        let mut b = Vec::new();
        b.extend_from_slice(&file_value(42, Tier::Hdd).to_ne_bytes());
        b.extend_from_slice(&8192u64.to_ne_bytes());
        b.extend_from_slice(&4096u32.to_ne_bytes());
        b.extend_from_slice(&77u32.to_ne_bytes());
        b.extend_from_slice(&5u32.to_ne_bytes());
        b.extend_from_slice(&(Op::Write as u16).to_ne_bytes());
        b.extend_from_slice(&3u16.to_ne_bytes());
        let s = parse(&b).expect("a whole sample");
        assert_eq!(
            s,
            Sample { ino: 42, tier: Tier::Hdd, off: 8192, len: 4096, task: 77, seq: 5, op: Op::Write, weight: 3 }
        );
        assert!(parse(&b[..31]).is_none());
    }

    #[test]
    fn device_numbers_are_in_the_kernels_encoding() {
        // 254:0 (a virtio disk) and 0:55 (an anonymous device).
        assert_eq!(kernel_dev(libc::makedev(254, 0)), 254 << 20);
        assert_eq!(kernel_dev(libc::makedev(0, 55)), 55);
        assert_eq!(kernel_dev(libc::makedev(259, 70_000)), (259 << 20) | 70_000);
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

    #[test]
    fn another_process_reads_and_writes_of_a_watched_file_are_seen_and_ours_are_not() {
        if !root() {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let h = KernelHeat::start(dir.path(), dir.path()).expect("the heat source starts as root");
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 1 << 20]).expect("write");
        let f = std::fs::File::open(&path).expect("open");
        let seen = h.watch(9, Tier::Hdd, f.as_fd());
        assert!(seen.reads);
        assert_eq!(h.tracepoints().len(), 7, "{:?}", h.tracepoints());
        if fs_magic(f.as_fd()) == Some(0xEF53) {
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
        h.unwatch(f.as_fd());
        let st = Command::new("cat").arg(&path).stdout(std::process::Stdio::null()).status().expect("cat");
        assert!(st.success());
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(samples_of(&h, 9, 0).is_empty());
        assert_eq!(h.lost_and_watched(), (0, 0));
    }
}
