//! Mounting and serving: state lock, state database, recovery, the FUSE
//! session, signals, and the clean shutdown.

use crate::control::{ControlServer, Handler};
use crate::fs::TierFs;
use crate::metrics::MetricsServer;
use crate::runtime;
use fuser::{Config, MountOption, Session, SessionACL};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tierfs_core::clock::SystemClock;
use tierfs_core::device::Profile;
use tierfs_core::engine::{Engine, EngineConfig};
use tierfs_core::event::NoEvents;
use tierfs_core::report::DeviceReport;
use tierfs_core::report::{Request, Response};
use tierfs_core::state::ns::Namespace;
use tierfs_core::state::FjallKv;
use tierfs_core::store::dir::DirStore;
use tierfs_core::store::emulated::{Emulated, Emulation};
use tierfs_core::store::measured::{Measured, Meter};
use tierfs_core::tier::Tier;
use tierfs_core::vfs::{IoMode, Volume, VolumeConfig};

/// A failure to mount, with a message for the user.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct MountError(pub String);

fn fail<T>(msg: impl Into<String>) -> Result<T, MountError> {
    Err(MountError(msg.into()))
}

/// What counts the requests the kernel serves by itself (`--heat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HeatMode {
    /// The eBPF source where it can run, else none (the log says why).
    #[default]
    Auto,
    /// The eBPF source, or the mount fails.
    Ebpf,
    /// None: opens stand for the kernel's requests.
    Opens,
}

/// Everything `tierfs mount` decided (already validated).
#[derive(Clone, Debug)]
pub struct MountConfig {
    /// The SSD tier directory.
    pub ssd: PathBuf,
    /// The HDD tier directory.
    pub hdd: PathBuf,
    /// Where to mount.
    pub mountpoint: PathBuf,
    /// Where the state database lives.
    pub state_dir: PathBuf,
    /// Requested data path.
    pub io_mode: IoMode,
    /// Tier of new files, overriding the policy.
    pub placement: Option<Tier>,
    /// The mount's default architecture.
    pub policy: tierfs_core::policy::PolicyKind,
    /// Its settings (sieve, interval).
    pub params: tierfs_core::policy::Params,
    /// Most user data the SSD may hold.
    pub ssd_capacity: Option<u64>,
    /// Migration rate, bytes per second (0: unlimited).
    pub migrate_rate: u64,
    /// Background moves a second while the mount is busy (see
    /// `EngineConfig::busy_moves`; 0: no limit).
    pub busy_moves: f64,
    /// SSD watermarks in percent (see `EngineConfig::watermarks`).
    pub watermarks: (u8, u8),
    /// The quiet HDD mode (see `EngineConfig::quiet`); None: off.
    pub quiet: Option<tierfs_core::quiet::QuietConfig>,
    /// Device models for the two tiers (SSD, HDD) and the RAM cache size.
    pub emulate: Option<(Profile, Profile, u64)>,
    /// Request-handling threads.
    pub threads: usize,
    /// Let every user use the mount.
    pub allow_other: bool,
    /// Collect access statistics.
    pub stats: bool,
    /// What counts the kernel's requests to passthrough files.
    pub heat: HeatMode,
    /// Halve all counters every this long.
    pub aging: std::time::Duration,
    /// Period of hystor's chunk choice.
    pub chunk_period: std::time::Duration,
    /// Only writes of at most this many bytes enter the write-back area.
    pub write_back_max: u64,
    /// Write every dirty chunk of the write-back area back at unmount.
    pub flush_on_unmount: bool,
    /// `measured`'s moves per second per policy directory.
    pub measured_rate: f64,
    /// Most bytes written to the SSD per day (the write regulator).
    pub budget: Option<tierfs_core::regulator::Budget>,
    /// The SSD's rated bytes written, for the projected lifetime.
    pub endurance: Option<u64>,
    /// Where to serve Prometheus metrics, if anywhere.
    pub metrics: Option<std::net::SocketAddr>,
    /// How long the kernel may cache names, attributes and the absence of
    /// a name (tierfs's own changes outside requests invalidate at once).
    pub cache_timeout: std::time::Duration,
    /// How long a request thread watches for the next request after an
    /// answer (`crate::linger`; zero: never).
    pub linger: std::time::Duration,
    /// When to take requests over FUSE's io_uring rings.
    pub io_uring: UringMode,
}

/// When to take requests over FUSE's io_uring rings (Linux 6.14+, where
/// the fuse module's `enable_uring` is set) instead of reading `/dev/fuse`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UringMode {
    /// Whenever the kernel offers them, in either I/O mode (measured
    /// faster in both: `benches/results/io-2026-11-28-uring.md`).
    Auto,
    /// The same, with a warning when the kernel does not offer them.
    Always,
    /// Never.
    Never,
}

/// An exclusive lock on a state directory, held while mounted.
#[derive(Debug)]
pub struct StateLock {
    _file: File,
}

/// Takes the lock of a state directory, or says who holds it.
pub fn lock_state(dir: &Path) -> Result<StateLock, MountError> {
    if let Err(e) = std::fs::create_dir_all(dir) {
        return fail(format!("cannot create state directory {}: {e}", dir.display()));
    }
    // It names every file of the mount: only the daemon's user may read it.
    use std::os::unix::fs::PermissionsExt;
    if let Err(e) = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)) {
        return fail(format!("cannot make state directory {} private: {e}", dir.display()));
    }
    let path = dir.join("lock");
    let mut f = match OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path) {
        Ok(f) => f,
        Err(e) => return fail(format!("cannot open {}: {e}", path.display())),
    };
    // SAFETY: valid descriptor.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let mut holder = String::new();
        let _ = f.read_to_string(&mut holder);
        let holder = holder.trim();
        let who = if holder.is_empty() { String::new() } else { format!(" (pid {holder})") };
        return fail(format!("state database {} is already in use by another tierfs{who}", dir.display()));
    }
    let _ = f.set_len(0);
    let _ = f.rewind();
    let _ = write!(f, "{}", std::process::id());
    Ok(StateLock { _file: f })
}

/// What a tier's file system can do, logged if it lacks something;
/// everything if the probe itself fails.
fn probe_tier(t: Tier, s: &DirStore) -> tierfs_core::store::features::Features {
    match tierfs_core::store::features::probe_store(s) {
        Ok(f) => {
            let lacks = f.lacks();
            if !lacks.is_empty() {
                tracing::info!(
                    tier = %t,
                    lacks = %lacks.join(", "),
                    "the tier's file system lacks some operations: tierfs emulates or refuses them"
                );
            }
            f
        }
        Err(e) => {
            tracing::warn!(tier = %t, error = %e, "could not find out what the tier's file system can do");
            tierfs_core::store::features::Features::ALL
        }
    }
}

fn block_signals() -> libc::sigset_t {
    // SAFETY: the set is initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Opens the state, recovers, mounts and serves until unmounted (by
/// `umount`, `tierfs umount`, SIGINT or SIGTERM). `ready` is called once,
/// when the mount is live or with the reason it failed.
pub fn serve(cfg: MountConfig, ready: impl FnOnce(Result<(), String>)) -> Result<(), MountError> {
    let mut ready = Some(ready);
    let mut report = |r: Result<(), String>| {
        if let Some(f) = ready.take() {
            f(r)
        }
    };
    match serve_inner(&cfg, &mut report) {
        Ok(()) => Ok(()),
        Err(e) => {
            report(Err(e.0.clone()));
            Err(e)
        }
    }
}

/// Most malloc arenas the daemon uses (glibc's default is eight per core).
/// Each thread that allocates gets an arena, which keeps what it freed; with
/// the request threads, the adopter and the engine adopting a tree of a
/// million files, the default kept about 45 MiB more at rest and 30 MiB
/// more at the peak (benches/scale.sh). Small allocations are served by
/// per-thread caches without an arena's lock either way.
const MALLOC_ARENAS: libc::c_int = 4;

fn serve_inner(cfg: &MountConfig, report: &mut dyn FnMut(Result<(), String>)) -> Result<(), MountError> {
    // Before any thread starts. An explicit MALLOC_ARENA_MAX wins.
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS) };
    }
    let sigset = block_signals();
    // Test builds abort with backtraces on a deadlock (no-op otherwise).
    tierfs_core::lockcheck::watch();
    let _lock = lock_state(&cfg.state_dir)?;
    let metrics_listener = match cfg.metrics {
        Some(addr) => {
            Some(MetricsServer::bind(addr).map_err(|e| MountError(format!("cannot serve metrics on {addr}: {e}")))?)
        }
        None => None,
    };
    let kv = FjallKv::open(&cfg.state_dir)
        .map_err(|e| MountError(format!("cannot open state database in {}: {e}", cfg.state_dir.display())))?;
    let kv: Arc<dyn tierfs_core::state::Kv> = Arc::new(kv);
    let ns = Namespace::new(kv.clone());
    let _owner = crate::owner::claim(&cfg.hdd, &cfg.ssd, &ns)?;
    let ssd = DirStore::new(&cfg.ssd).map_err(|e| MountError(format!("{}: {e}", cfg.ssd.display())))?;
    let hdd = DirStore::new(&cfg.hdd).map_err(|e| MountError(format!("{}: {e}", cfg.hdd.display())))?;
    // On the bare directories: the probe's calls are neither slowed by the
    // emulated devices nor counted by the meters.
    let features = [probe_tier(Tier::Ssd, &ssd), probe_tier(Tier::Hdd, &hdd)];
    for (t, dir) in [(Tier::Ssd, &cfg.ssd), (Tier::Hdd, &cfg.hdd)] {
        if file_system_type(dir).as_deref() == Some("fuse.glusterfs") {
            tracing::warn!(
                tier = %t,
                "the tier is a GlusterFS volume: its client must not cache what tierfs writes, or reads return \
                 old bytes; set performance.quick-read off and performance.stat-prefetch off on the volume \
                 (docs/src/capacity-tiers.md, \"A distributed file system as the HDD tier\")"
            );
        }
    }
    let models: [Option<Emulation>; 2] = match &cfg.emulate {
        Some((ps, ph, cache)) => {
            let c: Arc<dyn tierfs_core::clock::Clock> = Arc::new(SystemClock);
            [Some(Emulation::new(ps.clone(), *cache, c.clone())), Some(Emulation::new(ph.clone(), *cache, c))]
        }
        None => [None, None],
    };
    let meters = [Meter::new(), Meter::new()];
    let ssd = Measured::new(Emulated::new(ssd, models[0].clone()), meters[0].clone());
    let hdd = Measured::new(Emulated::new(hdd, models[1].clone()), meters[1].clone());
    let meta_tier = if cfg.policy == tierfs_core::policy::PolicyKind::HddOnly { Tier::Hdd } else { Tier::Ssd };
    let vcfg = VolumeConfig {
        io_mode: cfg.io_mode,
        default_tier: cfg.placement.unwrap_or_else(|| cfg.policy.policy().initial_tier()),
        meta_tier,
        // Without caching the kernel keeps no listing: no keyed snapshots.
        keyed_listing_max: if cfg.cache_timeout.is_zero() { 0 } else { tierfs_core::vfs::KEYED_LISTING_MAX },
        ..VolumeConfig::default()
    };
    let clock: Arc<dyn tierfs_core::clock::Clock> = Arc::new(SystemClock);
    let (sink, rx) = tierfs_core::engine::queue();
    let events: Arc<dyn tierfs_core::event::EventSink> = if cfg.stats { sink.clone() } else { Arc::new(NoEvents) };
    let vol = Arc::new(
        Volume::new(ssd, hdd, ns, vcfg, events, clock.clone())
            .map_err(|e| MountError(format!("cannot open volume: {e}")))?,
    );
    vol.set_features(features);
    vol.set_heat(heat_source(cfg)?);
    let recovery = vol.recover().map_err(|e| MountError(format!("recovery failed: {e}")))?;
    vol.start_adopter().map_err(|e| MountError(format!("cannot start the adopter thread: {e}")))?;
    let ecfg = EngineConfig {
        chunk_period: cfg.chunk_period,
        write_back_max: cfg.write_back_max,
        flush_on_unmount: cfg.flush_on_unmount,
        meters: Some(meters),
        measured_rate: cfg.measured_rate,
        budget: cfg.budget.clone(),
        endurance: cfg.endurance,
        policy: cfg.policy,
        params: cfg.params,
        ssd_capacity: cfg.ssd_capacity,
        migrate_rate: cfg.migrate_rate,
        busy_moves: cfg.busy_moves,
        quiet: cfg.quiet,
        watermarks: cfg.watermarks,
        placement: cfg.placement,
        audit_space: recovery.changed(),
        aging: cfg.aging,
        stats_enabled: cfg.stats,
        tier_paths: [cfg.ssd.display().to_string(), cfg.hdd.display().to_string()],
        mountpoint: cfg.mountpoint.display().to_string(),
        ..EngineConfig::default()
    };
    let sink_for_shutdown = sink.clone();
    let engine = Engine::new(vol.clone(), kv.clone(), clock.clone(), ecfg, Some(sink));
    engine.start(rx);
    let handler: Arc<dyn Handler> = Arc::new(Control { engine: engine.clone(), models: models.clone() });
    let control = ControlServer::start(&runtime::socket_path(&cfg.mountpoint), handler.clone())
        .map_err(|e| MountError(format!("cannot open control socket: {e}")))?;
    let metrics = match metrics_listener {
        Some(l) => {
            let m = MetricsServer::start(l, handler).map_err(|e| MountError(format!("cannot serve metrics: {e}")))?;
            tracing::info!(addr = %m.addr(), "Prometheus metrics served at /metrics");
            Some(m)
        }
        None => None,
    };
    // New files get exactly the mode asked for (the kernel applied the umask).
    // SAFETY: umask has no preconditions.
    unsafe { libc::umask(0) };
    raise_fd_limit();

    let pid_file = runtime::pid_path(&cfg.mountpoint);
    if let Err(e) = runtime::write_pid_file(&pid_file) {
        tracing::warn!(path = %pid_file.display(), error = %e, "cannot write the pid file");
    }

    let v2 = vol.clone();
    let e2 = engine.clone();
    let events = sink_for_shutdown;
    let on_destroy = Box::new(move || {
        // First: a reconciliation in the background still sends events.
        let adopter_stopped = v2.stop_adopter(ADOPTER_WAIT);
        let stopped = e2.shutdown() && adopter_stopped;
        // Shadows synced and chunk states saved before the flush.
        let saved = v2.save_extents();
        let clean = stopped && saved && v2.no_stale_copies() && !events.lost_structural();
        let r = v2.sync_state().and_then(|_| if clean { v2.mark_clean() } else { Ok(()) });
        match r {
            Err(e) => tracing::error!(error = %e, "could not flush the state database at unmount"),
            Ok(()) if clean => tracing::info!("state flushed; clean shutdown"),
            // The next mount checks everything, as after a crash.
            Ok(()) => tracing::warn!("state flushed, but the shutdown is not marked clean"),
        }
    });
    let linger = Arc::new(crate::linger::Linger::new(cfg.linger));
    let fs = TierFs::new(vol.clone(), on_destroy, Some(Arc::new(Xattrs(engine.clone()))), cfg.cache_timeout)
        .with_linger(linger.clone())
        .with_io_uring(cfg.io_uring);
    let (session, mut unmounter) = match mount_session(fs, cfg) {
        Ok(x) => x,
        Err(e) => {
            let _ = std::fs::remove_file(&pid_file);
            return Err(e);
        }
    };
    if session.uses_io_uring() {
        // The handlers' linger guards stay unattached: a ring thread
        // commits its answer after the handler returns, and watches its
        // own ring afterwards (`Config::io_uring_spin`).
        tracing::info!("requests come over FUSE's io_uring rings");
    } else {
        use std::os::fd::AsFd;
        match session.as_fd().try_clone_to_owned() {
            Ok(fd) => linger.attach(fd),
            Err(e) => tracing::warn!(error = %e, "cannot duplicate the FUSE descriptor: no lingering"),
        }
    }
    vol.set_kernel_cache(Arc::new(crate::fs::Invalidator(session.notifier())));
    // A session whose rings fail to start cannot answer: its mount is
    // taken away (fuser unmounts its own when the session ends).
    let detach = matches!(unmounter, Unmounter::Syscall(_)).then(|| cfg.mountpoint.clone());
    let ending = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let signalled = ending.clone();
    std::thread::Builder::new()
        .name("tierfs-signals".into())
        .spawn(move || {
            let mut sig: libc::c_int = 0;
            // SAFETY: `sigset` holds the blocked signals; `sig` is a valid out pointer.
            if unsafe { libc::sigwait(&sigset, &mut sig) } == 0 {
                tracing::info!(signal = sig, "unmounting on signal");
                signalled.store(true, std::sync::atomic::Ordering::Release);
                if let Err(e) = unmounter.unmount() {
                    tracing::error!(error = %e, "unmount failed");
                }
            }
        })
        .map_err(|e| MountError(format!("cannot start signal thread: {e}")))?;
    // The connection's device comes from the mount table, read here, while
    // the mount surely exists (an unmount can come as soon as the mount is
    // reported ready), and not from a `stat` of the mount point: that
    // would be a request to this very session, which does not serve yet,
    // and while it waited for its answer it would hold the mount, so that
    // an unmount right after the mount failed with EBUSY.
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let conn = fuse_connection_of(&text, &cfg.mountpoint.to_string_lossy());
    if conn.is_none() {
        tracing::warn!(mountpoint = %cfg.mountpoint.display(), "the mount is not in /proc/self/mountinfo");
    }
    let watch = Watchdog { mountpoint: cfg.mountpoint.clone(), conn, ending, engine: engine.clone(), vol: vol.clone() };
    std::thread::Builder::new()
        .name("tierfs-watchdog".into())
        .spawn(move || watch.run())
        .map_err(|e| MountError(format!("cannot start watchdog thread: {e}")))?;
    let mut served = false;
    let r = session.run_when_ready(|| {
        served = true;
        tracing::info!(mountpoint = %cfg.mountpoint.display(), "mounted");
        // Once mounted: a refused mount says one line.
        if cfg.emulate.is_none() && on_one_file_system(&cfg.ssd, &cfg.hdd) {
            tracing::warn!(
                "the SSD and HDD directories are on one file system: files moved from one to the other get no \
                 faster, and the fsyncs of every move slow down what runs there (docs/src/results.md); give \
                 the SSD directory a file system on the faster device"
            );
        }
        report(Ok(()));
    });
    if let (false, Some(p)) = (served, detach) {
        let _ = Unmounter::Syscall(p).unmount();
    }
    drop(metrics);
    drop(control);
    let _ = std::fs::remove_file(&pid_file);
    drop(vol);
    r.map_err(|e| MountError(format!("session ended with an error: {e}")))
}

/// The heat source of a mount: the eBPF programs where they can run and
/// are wanted, else none. The log says once which one counts, and why the
/// better one does not.
fn heat_source(cfg: &MountConfig) -> Result<Arc<dyn tierfs_core::heat::HeatSource>, MountError> {
    use tierfs_core::heat::NoHeat;
    let fallback = "passthrough files are counted per open, and files whose chunks are counted (hystor) take the \
                    userspace path";
    if cfg.io_mode != IoMode::Passthrough || !cfg.stats {
        return Ok(Arc::new(NoHeat));
    }
    if cfg.heat == HeatMode::Opens {
        tracing::info!("heat source: opens (--heat opens): {fallback}");
        return Ok(Arc::new(NoHeat));
    }
    match tierfs_heat::KernelHeat::start(&cfg.ssd, &cfg.hdd) {
        Ok(h) => {
            tracing::info!(tracepoints = ?h.tracepoints(), "heat source: ebpf: the kernel's requests to passthrough files are counted");
            Ok(Arc::new(h))
        }
        Err(e) if cfg.heat == HeatMode::Ebpf => Err(MountError(format!("--heat ebpf: {e}"))),
        Err(e) => {
            tracing::warn!("heat source: opens, as the eBPF one cannot run ({e}): {fallback}");
            Ok(Arc::new(NoHeat))
        }
    }
}

/// How long the unmount waits for the adopter thread to finish the part of
/// a reconciliation it is committing.
const ADOPTER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The store of a mounted tier: a directory, emulated or not, measured.
type TierStore = Measured<Emulated<DirStore>>;

/// How long the session may take to end once the mount is gone or a
/// signal asked for it, before the FUSE connection is aborted (open files
/// of a lazy unmount get ENOTCONN), and then before the daemon exits anyway.
const END_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The longest the watchdog lets the unmount write the write-back areas
/// back before its own grace starts.
const FLUSH_GRACE: std::time::Duration = std::time::Duration::from_secs(600);

/// Makes sure the daemon ends a few seconds after its mount went away,
/// whatever is stuck: a request handler that never returns keeps fuser
/// from ending the session, and open files keep a lazily unmounted one
/// alive.
struct Watchdog {
    mountpoint: PathBuf,
    /// The FUSE connection's device ("major:minor"), if found.
    conn: Option<String>,
    ending: Arc<std::sync::atomic::AtomicBool>,
    engine: Arc<Engine<TierStore>>,
    vol: Arc<Volume<TierStore>>,
}

impl Watchdog {
    fn run(self) {
        use std::time::{Duration, Instant};
        let conn = self.conn.as_deref();
        let mut since: Option<Instant> = None;
        let mut flush_since: Option<Instant> = None;
        let mut aborted = false;
        loop {
            std::thread::sleep(Duration::from_millis(200));
            let gone = conn.is_some_and(|c| !mounted(&self.mountpoint, c));
            if since.is_none() && (gone || self.ending.load(std::sync::atomic::Ordering::Acquire)) {
                since = Some(Instant::now());
            }
            let Some(t) = since else { continue };
            if self.engine.flushing() && flush_since.get_or_insert_with(Instant::now).elapsed() < FLUSH_GRACE {
                // The write-back areas are being written back (progress in
                // the log): the session is busy, not stuck; the grace
                // starts again when that is over.
                since = Some(Instant::now());
                continue;
            }
            if !aborted && t.elapsed() > END_GRACE {
                aborted = true;
                tracing::warn!(
                    "the session has not ended {END_GRACE:?} after the unmount; aborting the FUSE connection"
                );
                if let Some(minor) = conn.and_then(|c| c.split_once(':')).map(|(_, m)| m) {
                    let path = format!("/sys/fs/fuse/connections/{minor}/abort");
                    if let Err(e) = std::fs::write(&path, b"1") {
                        tracing::warn!(error = %e, path, "cannot abort the FUSE connection");
                    }
                }
            }
            if t.elapsed() > 2 * END_GRACE {
                tracing::error!(
                    activity = ?self.engine.activity(),
                    "the daemon did not end {:?} after the unmount: exiting; the next mount checks everything",
                    2 * END_GRACE
                );
                let _ = self.vol.sync_state();
                std::process::exit(1);
            }
        }
    }
}

/// True if `mountpoint` is still mounted with device `dev` ("major:minor").
fn mounted(mountpoint: &Path, dev: &str) -> bool {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = mountpoint.to_string_lossy();
    text.lines().filter_map(mount_entry).any(|(d, point, _)| d == dev && unescape_mount_path(point) == want)
}

/// The device ("major:minor") of the topmost FUSE mount at `mountpoint`
/// in the text of /proc/self/mountinfo (later lines are mounted later).
fn fuse_connection_of(mountinfo: &str, mountpoint: &str) -> Option<String> {
    mountinfo
        .lines()
        .rev()
        .filter_map(mount_entry)
        .find(|(_, point, fstype)| {
            (*fstype == "fuse" || fstype.starts_with("fuse.")) && unescape_mount_path(point) == mountpoint
        })
        .map(|(dev, _, _)| dev.to_string())
}

/// A line of /proc/self/mountinfo: its device ("major:minor"), mount point
/// (escaped) and file system type (the field after the " - ").
fn mount_entry(line: &str) -> Option<(&str, &str, &str)> {
    let (head, tail) = line.split_once(" - ")?;
    let mut f = head.split(' ');
    let dev = f.nth(2)?;
    Some((dev, f.nth(1)?, tail.split(' ').next()?))
}

/// Whether both directories are on one file system (one device number;
/// btrfs subvolumes, ZFS datasets and two partitions of one disk are not
/// told). With emulated devices that is how the tiers are meant to be.
fn on_one_file_system(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev(),
        _ => false,
    }
}

/// The type of the file system `dir` is on ("ext4", "fuse.glusterfs"), from
/// the mount table's entry of its device; `None` if it is not found.
fn file_system_type(dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir).ok()?.dev();
    let want = format!("{}:{}", libc::major(dev), libc::minor(dev));
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mount_type_of(&text, &want)
}

/// The file system type of the first mount of device `dev` ("major:minor")
/// in the text of /proc/self/mountinfo.
fn mount_type_of(mountinfo: &str, dev: &str) -> Option<String> {
    mountinfo.lines().filter_map(mount_entry).find(|e| e.0 == dev).map(|e| e.2.to_string())
}

/// Undoes the octal escapes of /proc/self/mountinfo (\040 for a space).
fn unescape_mount_path(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The control socket's view of the engine and the device models.
struct Control {
    engine: Arc<Engine<TierStore>>,
    models: [Option<Emulation>; 2],
}

impl Handler for Control {
    fn handle(&self, req: Request) -> Response {
        match req {
            Request::Status { top } => {
                let mut r = self.engine.status(top);
                r.emulation = self
                    .models
                    .iter()
                    .zip(["ssd", "hdd"])
                    .filter_map(|(m, t)| {
                        m.as_ref().map(|m| {
                            let (profile, busy, requests) = m.usage();
                            DeviceReport { tier: t.into(), profile, busy_secs: busy.as_secs_f64(), requests }
                        })
                    })
                    .collect();
                Response::Status(Box::new(r))
            }
            Request::File { ino } => match self.engine.file_report(ino) {
                Some(r) => Response::File(Box::new(r)),
                None => Response::Error(format!("no file with inode {ino} on this mount")),
            },
            Request::Groups => Response::Groups(self.engine.groups_report()),
            Request::Pins => Response::Pins(self.engine.pins_report()),
            Request::Plan { dry_run } => Response::Plan(self.engine.plan_now(dry_run)),
            Request::Emulation { enabled } => {
                if self.models.iter().all(Option::is_none) {
                    return Response::Error("this mount emulates no devices".into());
                }
                for m in self.models.iter().flatten() {
                    m.set_enabled(enabled);
                }
                Response::Done
            }
            Request::Profile { tier, profile } => {
                let Some(t) = Tier::parse(&tier) else {
                    return Response::Error(format!("unknown tier {tier:?} (ssd or hdd)"));
                };
                match &self.models[t.idx()] {
                    Some(m) => {
                        tracing::info!(tier = %t, profile = %profile.name, "the emulated device changes its profile");
                        m.set_profile(profile);
                        Response::Done
                    }
                    None => Response::Error("this mount emulates no devices".into()),
                }
            }
            Request::Trace { out: Some(path) } => match self.engine.start_trace(std::path::Path::new(&path)) {
                Ok(()) => Response::Done,
                Err(e) => Response::Error(e),
            },
            Request::Trace { out: None } => match self.engine.stop_trace() {
                Ok(r) => Response::Traced(r),
                Err(e) => Response::Error(e),
            },
        }
    }
}

/// The `user.tierfs.*` attributes, answered by the engine.
struct Xattrs(Arc<Engine<TierStore>>);

impl crate::VirtualXattrs for Xattrs {
    fn get(&self, ino: u64, name: &std::ffi::OsStr) -> Option<tierfs_core::Result<Vec<u8>>> {
        self.0.xattr_get(ino, name)
    }
    fn set(
        &self,
        ctx: &tierfs_core::vfs::Ctx,
        ino: u64,
        name: &std::ffi::OsStr,
        value: &[u8],
        flags: i32,
    ) -> Option<tierfs_core::Result<()>> {
        self.0.xattr_change(ctx, ino, name, Some(value), flags)
    }
    fn remove(&self, ctx: &tierfs_core::vfs::Ctx, ino: u64, name: &std::ffi::OsStr) -> Option<tierfs_core::Result<()>> {
        self.0.xattr_change(ctx, ino, name, None, 0)
    }
    fn list(&self, ino: u64) -> Vec<u8> {
        self.0.xattr_list(ino)
    }
}

/// How the session is unmounted on a signal.
enum Unmounter {
    Fuser(fuser::SessionUnmounter),
    Syscall(PathBuf),
}

impl Unmounter {
    fn unmount(&mut self) -> std::io::Result<()> {
        match self {
            Unmounter::Fuser(u) => u.unmount(),
            Unmounter::Syscall(p) => {
                let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes())
                    .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
                // SAFETY: valid NUL-terminated path.
                if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            }
        }
    }
}

/// Mounts and returns the session. As root the mount is made here, with
/// type `fuse.tierfs` (so that mount(8), df and umount see a tierfs);
/// otherwise through fusermount3, which records the same subtype.
fn mount_session<S: tierfs_core::store::Store>(
    fs: TierFs<S>,
    cfg: &MountConfig,
) -> Result<(Session<TierFs<S>>, Unmounter), MountError> {
    let mut config = Config::default();
    config.n_threads = Some(cfg.threads.max(1));
    config.clone_fd = true;
    // Over io_uring each CPU has its own queue; two threads each, so that
    // one slow request (an fsync) does not hold up its CPU's others.
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    config.io_uring_threads = cfg.threads.div_ceil(cpus).max(2);
    // A ring thread lingers as a /dev/fuse one does (`crate::linger`).
    config.io_uring_spin = cfg.linger;
    let acl = if cfg.allow_other { SessionACL::All } else { SessionACL::Owner };
    config.acl = acl;
    let fsname = format!("{}:{}", cfg.ssd.display(), cfg.hdd.display()).replace(',', "_");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        config.mount_options =
            vec![MountOption::FSName(fsname), MountOption::Subtype("tierfs".into()), MountOption::DefaultPermissions];
        let mut session = Session::new(fs, &cfg.mountpoint, &config)
            .map_err(|e| MountError(format!("cannot mount on {}: {e}", cfg.mountpoint.display())))?;
        let u = session.unmount_callable();
        return Ok((session, Unmounter::Fuser(u)));
    }
    let dev = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|e| MountError(format!("cannot open /dev/fuse: {e} (is the fuse module loaded?)")))?;
    let fd: std::os::fd::OwnedFd = dev.into();
    let mut data = format!("fd={},rootmode=40000,user_id=0,group_id=0,default_permissions", fd.as_raw_fd());
    if cfg.allow_other {
        data.push_str(",allow_other");
    }
    let c = |s: &str| std::ffi::CString::new(s).map_err(|_| MountError(format!("bad path {s:?}")));
    let src = c(&fsname)?;
    let target = c(&cfg.mountpoint.to_string_lossy())?;
    let data_c = c(&data)?;
    // SAFETY: all strings are valid and NUL-terminated.
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            c"fuse.tierfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data_c.as_ptr().cast(),
        )
    };
    if r != 0 {
        return fail(format!("cannot mount on {}: {}", cfg.mountpoint.display(), std::io::Error::last_os_error()));
    }
    match Session::from_fd(fs, fd, acl, config) {
        Ok(s) => Ok((s, Unmounter::Syscall(cfg.mountpoint.clone()))),
        Err(e) => {
            let mut u = Unmounter::Syscall(cfg.mountpoint.clone());
            let _ = u.unmount();
            fail(format!("FUSE handshake failed on {}: {e}", cfg.mountpoint.display()))
        }
    }
}

/// A volume keeps a descriptor per cached directory and per open file.
fn raise_fd_limit() {
    // SAFETY: valid out pointer / value.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_on_one_file_system_are_told_from_directories_on_two() {
        let a = tempfile::tempdir().unwrap();
        let (x, y) = (a.path().join("x"), a.path().join("y"));
        std::fs::create_dir(&x).unwrap();
        std::fs::create_dir(&y).unwrap();
        assert!(on_one_file_system(&x, &y));
        // /proc is a file system of its own wherever tests run.
        assert!(!on_one_file_system(&x, Path::new("/proc")));
        assert!(!on_one_file_system(&x, &a.path().join("missing")));
    }

    #[test]
    fn a_file_systems_type_is_read_from_its_devices_mount() {
        let table = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
                     40 22 0:52 / /mnt/gv0 rw,relatime shared:20 - fuse.glusterfs host:/gv0 rw,user_id=0\n";
        assert_eq!(mount_type_of(table, "0:52").as_deref(), Some("fuse.glusterfs"));
        assert_eq!(mount_type_of(table, "8:1").as_deref(), Some("ext4"));
        assert_eq!(mount_type_of(table, "0:53"), None);
        // This machine's root is in its own table.
        assert!(file_system_type(Path::new("/")).is_some());
    }

    #[test]
    fn the_watchdog_finds_its_connection_in_the_mount_table_without_a_request() {
        // The watchdog's `stat` of the mount point was a request to its own
        // session, still in flight when `tierfs umount` came right after the
        // mount: EBUSY (`badinput::umount_command_unmounts_and_waits`, once
        // in CI). The device now comes from the table.
        let table = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
                     40 22 0:52 / /mnt/a\\040b rw - fuse.tierfs tierfs rw,user_id=0\n\
                     41 22 0:60 / /mnt/t rw - fuse.tierfs tierfs rw,user_id=0\n\
                     42 41 0:61 / /mnt/t rw - fuse.tierfs tierfs rw,user_id=0\n\
                     43 22 7:0 / /mnt/x rw - ext4 /dev/loop0 rw\n";
        assert_eq!(fuse_connection_of(table, "/mnt/a b").as_deref(), Some("0:52"));
        assert_eq!(fuse_connection_of(table, "/mnt/t").as_deref(), Some("0:61"));
        assert_eq!(fuse_connection_of(table, "/mnt/x"), None);
        assert_eq!(fuse_connection_of(table, "/mnt"), None);
    }

    #[test]
    fn mount_table_paths_are_unescaped() {
        assert_eq!(unescape_mount_path("/tmp/a\\040b\\011c"), "/tmp/a b\tc");
        assert_eq!(unescape_mount_path("/plain"), "/plain");
        assert_eq!(unescape_mount_path("/end\\04"), "/end\\04");
    }
}
