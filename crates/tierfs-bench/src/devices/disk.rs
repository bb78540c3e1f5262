//! A modelled disk for the kernel: a FUSE file system of two files over
//! one image file. `disk` is the image's bytes; every read, write and
//! fsync of it waits until the device model ([`tierfs_core::device`]) says
//! the device would have finished it. `model` reads as the model's
//! counters ([`DiskStats`], JSON) and takes commands ([`Command`]).
//! A loop device with direct I/O over `disk` is then a block device with
//! the model's timing (see the parent module).

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};
use tierfs_core::clock::{wait_until, Clock, Timestamp};
use tierfs_core::device::{Device, Profile, Req, Standby};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyWrite, Request, Session, SessionACL, TimeOrNow, WriteFlags,
};

const ROOT: u64 = 1;
const DISK: u64 = 2;
const MODEL: u64 = 3;
/// The image as the model sees it: one object, so that a request continues
/// the previous one exactly when it starts where that one ended.
const OBJECT: u64 = 0;
const TTL: Duration = Duration::from_secs(1);
/// `PR_SET_IO_FLUSHER` (Linux 5.6; the libc crate does not name it).
const PR_SET_IO_FLUSHER: libc::c_int = 57;

/// What a server models and serves; `tierfs bench devices up` hands it
/// to `tierfs bench devices serve` as JSON.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DiskSpec {
    /// The image file.
    pub image: PathBuf,
    /// Where to mount the two files.
    pub mountpoint: PathBuf,
    /// The device's speed.
    pub profile: Profile,
    /// The drive's own cache, bytes (0: none; then every write waits for
    /// the platters or the flash).
    pub cache: u64,
    /// Spinning down when idle (none: never).
    pub standby: Option<Standby>,
    /// Start with the model paused (requests then cost nothing).
    pub paused: bool,
}

/// A command written to the `model` file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Requests cost nothing and are not counted until `Resume`.
    Pause,
    /// The model applies again.
    Resume,
    /// A cold start: the drive's cache, the head position and the queue
    /// are forgotten (the counters are kept).
    Reset,
    /// Spin down now, as `hdparm -y` asks (nothing without a standby setting).
    SpinDown,
}

impl Command {
    /// The word written for it.
    pub fn word(self) -> &'static str {
        match self {
            Command::Pause => "pause",
            Command::Resume => "resume",
            Command::Reset => "reset",
            Command::SpinDown => "spin-down",
        }
    }

    /// The command a word names.
    pub fn parse(s: &str) -> Option<Command> {
        [Command::Pause, Command::Resume, Command::Reset, Command::SpinDown].into_iter().find(|c| c.word() == s.trim())
    }
}

/// The model's counters since the server started (what reading `model`
/// gives). Requests made while the model was paused are not counted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DiskStats {
    /// The profile's name.
    pub profile: String,
    /// Whether the model is paused.
    pub paused: bool,
    /// Reads, writes and fsyncs served with the model on.
    pub reads: u64,
    /// See `reads`.
    pub writes: u64,
    /// See `reads`.
    pub syncs: u64,
    /// Bytes read and written with the model on.
    pub bytes_read: u64,
    /// See `bytes_read`.
    pub bytes_written: u64,
    /// Requests that reached the modelled media (the drive's cache's misses).
    pub requests: u64,
    /// Seconds the modelled media were busy.
    pub busy_secs: f64,
    /// Seconds requests waited for the model, summed over requests.
    pub wait_secs: f64,
    /// Spin-ups so far.
    pub spinups: u64,
    /// Seconds in standby so far (the current stretch included).
    pub standby_secs: f64,
    /// Whether the disk is in standby now.
    pub asleep: bool,
}

impl DiskStats {
    /// The counters from `before` to `self`.
    pub fn since(&self, before: &DiskStats) -> DiskStats {
        DiskStats {
            profile: self.profile.clone(),
            paused: self.paused,
            reads: self.reads.saturating_sub(before.reads),
            writes: self.writes.saturating_sub(before.writes),
            syncs: self.syncs.saturating_sub(before.syncs),
            bytes_read: self.bytes_read.saturating_sub(before.bytes_read),
            bytes_written: self.bytes_written.saturating_sub(before.bytes_written),
            requests: self.requests.saturating_sub(before.requests),
            busy_secs: (self.busy_secs - before.busy_secs).max(0.0),
            wait_secs: (self.wait_secs - before.wait_secs).max(0.0),
            spinups: self.spinups.saturating_sub(before.spinups),
            standby_secs: (self.standby_secs - before.standby_secs).max(0.0),
            asleep: self.asleep,
        }
    }
}

/// Time since the server started, as the model's timestamps (monotonic;
/// it starts at one second so that no request comes at time zero).
struct Monotonic(Instant);

impl Clock for Monotonic {
    fn now(&self) -> Timestamp {
        Timestamp::from_secs(1).plus(self.0.elapsed())
    }
}

#[derive(Debug)]
struct Model {
    device: Device,
    paused: bool,
    reads: u64,
    writes: u64,
    syncs: u64,
    bytes_read: u64,
    bytes_written: u64,
    wait: Duration,
}

/// The file system. See the module documentation.
pub struct ModelledDisk {
    image: File,
    size: u64,
    clock: Monotonic,
    model: Mutex<Model>,
    /// The counters as each open handle of `model` read them at its open.
    snapshots: Mutex<HashMap<u64, Vec<u8>>>,
    next_handle: AtomicU64,
    uid: u32,
    gid: u32,
    started: SystemTime,
}

impl ModelledDisk {
    /// The disk of `spec` (opens its image).
    pub fn new(spec: &DiskSpec) -> io::Result<ModelledDisk> {
        let image = std::fs::OpenOptions::new().read(true).write(true).open(&spec.image)?;
        let size = image.metadata()?.len();
        let mut device = Device::new(spec.profile.clone(), spec.cache);
        if let Some(s) = spec.standby {
            device = device.with_standby(s);
        }
        let clock = Monotonic(Instant::now());
        device.reset(clock.now());
        Ok(ModelledDisk {
            image,
            size,
            clock,
            model: Mutex::new(Model {
                device,
                paused: spec.paused,
                reads: 0,
                writes: 0,
                syncs: 0,
                bytes_read: 0,
                bytes_written: 0,
                wait: Duration::ZERO,
            }),
            snapshots: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            // SAFETY: getuid and getgid have no preconditions.
            uid: unsafe { libc::getuid() },
            // SAFETY: as above.
            gid: unsafe { libc::getgid() },
            started: SystemTime::now(),
        })
    }

    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        // A handler that panicked left the counters as they were: go on.
        self.model.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Charges a request that arrived at `arrived` to the model and waits
    /// until the device would have finished it.
    fn charge(&self, arrived: Timestamp, req: Req) {
        let done = {
            let mut m = self.model();
            if m.paused {
                return;
            }
            match req {
                Req::Read { len, .. } => {
                    m.reads += 1;
                    m.bytes_read += len;
                }
                Req::Write { len, .. } => {
                    m.writes += 1;
                    m.bytes_written += len;
                }
                _ => m.syncs += 1,
            }
            let done = m.device.submit(arrived, req);
            let waited = done.since(arrived);
            m.wait += waited;
            done
        };
        wait_until(&self.clock, done);
    }

    /// The counters now.
    pub fn stats(&self) -> DiskStats {
        let now = self.clock.now();
        let m = self.model();
        let d = &m.device;
        DiskStats {
            profile: d.profile.name.clone(),
            paused: m.paused,
            reads: m.reads,
            writes: m.writes,
            syncs: m.syncs,
            bytes_read: m.bytes_read,
            bytes_written: m.bytes_written,
            requests: d.requests,
            busy_secs: d.busy.as_secs_f64(),
            wait_secs: m.wait.as_secs_f64(),
            spinups: d.spinups,
            standby_secs: d.standby_time(now).as_secs_f64(),
            asleep: d.asleep(now),
        }
    }

    /// Carries out a command.
    pub fn command(&self, c: Command) {
        let now = self.clock.now();
        let mut m = self.model();
        match c {
            Command::Pause => m.paused = true,
            Command::Resume => {
                // The device was not modelled while paused: it starts idle.
                m.device.reset(now);
                m.paused = false;
            }
            Command::Reset => m.device.reset(now),
            Command::SpinDown => m.device.spin_down(now),
        }
    }

    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let (kind, perm, size, nlink) = match ino {
            ROOT => (FileType::Directory, 0o755, 0, 2),
            DISK => (FileType::RegularFile, 0o600, self.size, 1),
            MODEL => (FileType::RegularFile, 0o600, 0, 1),
            _ => return None,
        };
        Some(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: self.started,
            mtime: self.started,
            ctime: self.started,
            crtime: self.started,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }
}

fn os_errno(e: &io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

impl Filesystem for ModelledDisk {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // Big requests in one piece. No FUSE_ASYNC_DIO: the loop device's
        // requests then come one at a time and in order, as the model
        // serves them; with it, the pieces of one request came in
        // parallel, out of order, and each paid a seek the disk would not
        // (sequential 1-MiB reads at 59 MB/s of the HDD's 126).
        let _ = config.add_capabilities(InitFlags::FUSE_MAX_PAGES & config.capabilities());
        let _ = config.set_max_write(1 << 20);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let ino = match (parent.0, name.to_str()) {
            (ROOT, Some("disk")) => DISK,
            (ROOT, Some("model")) => MODEL,
            _ => return reply.error(Errno::ENOENT),
        };
        match self.attr(ino) {
            Some(a) => reply.entry(&TTL, &a, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino.0) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // A disk's size is fixed; the model file takes writes at offset 0
        // whatever its size (an O_TRUNC open truncates it to 0, as it is).
        if ino.0 == DISK && size.is_some_and(|s| s != self.size) {
            return reply.error(Errno::EPERM);
        }
        match self.attr(ino.0) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // Nothing is cached above the model: every request reaches it.
        let direct = FopenFlags::FOPEN_DIRECT_IO;
        match ino.0 {
            DISK => reply.opened(FileHandle(0), direct | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES),
            MODEL => {
                let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
                let mut text = serde_json::to_vec_pretty(&self.stats()).unwrap_or_default();
                text.push(b'\n');
                self.snapshots.lock().unwrap_or_else(|e| e.into_inner()).insert(fh, text);
                reply.opened(FileHandle(fh), direct)
            }
            _ => reply.error(Errno::EISDIR),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if ino.0 == MODEL {
            let snaps = self.snapshots.lock().unwrap_or_else(|e| e.into_inner());
            let text = snaps.get(&fh.0).map(|t| t.as_slice()).unwrap_or_default();
            let from = (offset as usize).min(text.len());
            let to = (from + size as usize).min(text.len());
            return reply.data(&text[from..to]);
        }
        let arrived = self.clock.now();
        let len = (size as u64).min(self.size.saturating_sub(offset)) as usize;
        let mut buf = vec![0u8; len];
        if let Err(e) = self.image.read_exact_at(&mut buf, offset) {
            return reply.error(os_errno(&e));
        }
        self.charge(arrived, Req::Read { file: OBJECT, off: offset, len: len as u64 });
        reply.data(&buf)
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if ino.0 == MODEL {
            let text = String::from_utf8_lossy(data);
            let cmds: Option<Vec<Command>> = text.split_whitespace().map(Command::parse).collect();
            return match cmds {
                Some(cmds) => {
                    for c in cmds {
                        self.command(c);
                    }
                    reply.written(data.len() as u32)
                }
                None => reply.error(Errno::EINVAL),
            };
        }
        if offset.saturating_add(data.len() as u64) > self.size {
            return reply.error(Errno::ENOSPC);
        }
        let arrived = self.clock.now();
        if let Err(e) = self.image.write_all_at(data, offset) {
            return reply.error(os_errno(&e));
        }
        self.charge(arrived, Req::Write { file: OBJECT, off: offset, len: data.len() as u64 });
        reply.written(data.len() as u32)
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.ok()
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if ino.0 == MODEL {
            self.snapshots.lock().unwrap_or_else(|e| e.into_inner()).remove(&fh.0);
        }
        reply.ok()
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        if ino.0 == DISK {
            // The loop device's flush: what the drive's cache holds reaches
            // the media. The image itself need not be durable.
            self.charge(self.clock.now(), Req::Sync);
        }
        reply.ok()
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        // A discard (a loop device punches a hole): the image stays
        // sparse; the model charges nothing for it.
        if ino.0 != DISK {
            return reply.error(Errno::EOPNOTSUPP);
        }
        // SAFETY: a valid descriptor; offsets within the image.
        let r = unsafe { libc::fallocate(self.image.as_raw_fd(), mode, offset as i64, length as i64) };
        if r != 0 {
            return reply.error(os_errno(&io::Error::last_os_error()));
        }
        reply.ok()
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        if ino.0 != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let entries = [
            (ROOT, FileType::Directory, "."),
            (ROOT, FileType::Directory, ".."),
            (DISK, FileType::RegularFile, "disk"),
            (MODEL, FileType::RegularFile, "model"),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok()
    }
}

/// Runs the server of `spec` until its mount point is unmounted.
pub fn serve(spec: &DiskSpec) -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    unsafe {
        // Sleeps as long as asked, not up to 50 µs more (an SSD's request
        // takes some tens of microseconds).
        libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0);
        // The kernel may need this process to write back dirty pages of
        // the file system above it: its own allocations must not wait for
        // that writeback (the loop-over-FUSE deadlock).
        libc::prctl(PR_SET_IO_FLUSHER, 1, 0, 0, 0);
    }
    let fs = ModelledDisk::new(spec)?;
    let mut config = Config::default();
    config.n_threads = Some(4);
    config.clone_fd = true;
    config.acl = SessionACL::Owner;
    config.mount_options = vec![
        MountOption::FSName(format!("tierfs-disk:{}", spec.profile.name)),
        MountOption::Subtype("tierfs-disk".into()),
    ];
    Session::new(fs, &spec.mountpoint, &config)?.run()
}

/// The path of the `model` file below a server's mount point.
pub fn model_file(mountpoint: &Path) -> PathBuf {
    mountpoint.join("model")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(profile: Profile, paused: bool) -> (tempfile::TempDir, ModelledDisk) {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("img");
        std::fs::write(&image, vec![7u8; 1 << 20]).unwrap();
        let spec = DiskSpec {
            image,
            mountpoint: dir.path().join("mnt"),
            profile,
            cache: 0,
            standby: Some(Standby { idle: Duration::from_millis(50), spinup: Duration::from_millis(30) }),
            paused,
        };
        let d = ModelledDisk::new(&spec).unwrap();
        (dir, d)
    }

    #[test]
    fn commands_are_words_and_unknown_ones_are_refused() {
        for c in [Command::Pause, Command::Resume, Command::Reset, Command::SpinDown] {
            assert_eq!(Command::parse(c.word()), Some(c));
            assert_eq!(Command::parse(&format!("{}\n", c.word())), Some(c));
        }
        assert_eq!(Command::parse("sleep"), None);
    }

    #[test]
    fn a_request_waits_for_the_model_and_a_paused_model_charges_nothing() {
        let p = Profile::from_access("t", 100.0, 100.0, Duration::from_millis(20), Duration::from_millis(20));
        let (_dir, d) = disk(p, true);
        let t = Instant::now();
        d.charge(d.clock.now(), Req::Read { file: OBJECT, off: 0, len: 4096 });
        assert!(t.elapsed() < Duration::from_millis(10), "paused");
        assert_eq!(d.stats().reads, 0, "not counted while paused");
        d.command(Command::Resume);
        let t = Instant::now();
        d.charge(d.clock.now(), Req::Read { file: OBJECT, off: 0, len: 4096 });
        assert!(t.elapsed() >= Duration::from_millis(20), "{:?}", t.elapsed());
        // Continuing the last request costs its transfer only.
        let t = Instant::now();
        d.charge(d.clock.now(), Req::Read { file: OBJECT, off: 4096, len: 4096 });
        assert!(t.elapsed() < Duration::from_millis(15), "{:?}", t.elapsed());
        let s = d.stats();
        assert_eq!((s.reads, s.bytes_read, s.requests), (2, 8192, 2));
        assert!(s.busy_secs >= 0.02 && s.wait_secs >= 0.02, "{s:?}");
        // Idle past the standby time: asleep, and the next request spins up.
        std::thread::sleep(Duration::from_millis(80));
        assert!(d.stats().asleep);
        let t = Instant::now();
        d.charge(d.clock.now(), Req::Write { file: OBJECT, off: 0, len: 4096 });
        assert!(t.elapsed() >= Duration::from_millis(50), "spin-up and access: {:?}", t.elapsed());
        let s = d.stats();
        assert_eq!(s.spinups, 1);
        assert!(s.standby_secs > 0.0 && s.standby_secs < 0.5, "{s:?}");
        let diff = s.since(&DiskStats { reads: 1, ..DiskStats::default() });
        assert_eq!((diff.reads, diff.writes, diff.spinups), (1, 1, 1));
    }
}
