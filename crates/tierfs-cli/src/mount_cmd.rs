//! `tierfs mount`: validation, daemonizing, logging, then serving.

use crate::args::{HeatArg, IoModeArg, MountArgs, TierArg, UringArg};
use anyhow::{bail, Result};
use std::ffi::CString;
use std::io::{BufRead, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tierfs_core::config::{parse_duration, parse_size};
use tierfs_core::device::{Degrade, Profile};
use tierfs_core::policy::{Admission, AgingRule, Params, PolicyKind};
use tierfs_core::regulator::Budget;
use tierfs_core::tier::Tier;
use tierfs_core::vfs::IoMode;
use tierfs_fuse::mount::{serve, HeatMode, MountConfig, UringMode};
use tierfs_fuse::runtime;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn access_ok(p: &Path, mode: i32) -> bool {
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else { return false };
    // SAFETY: valid NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), mode) == 0 }
}

/// A backing directory: exists, is a directory, readable and writable.
fn backing_dir(what: &str, p: &Path) -> Result<PathBuf> {
    let md = match std::fs::metadata(p) {
        Ok(m) => m,
        Err(e) => bail!("{what} directory {}: {e}", p.display()),
    };
    if !md.is_dir() {
        bail!("{what} directory {} is not a directory", p.display());
    }
    if !access_ok(p, libc::R_OK | libc::W_OK | libc::X_OK) {
        bail!("{what} directory {} is not readable and writable by this user", p.display());
    }
    Ok(std::fs::canonicalize(p)?)
}

fn inside(a: &Path, b: &Path) -> bool {
    a != b && a.starts_with(b)
}

/// Checks every input and builds the configuration. Nothing is created or
/// mounted before all of it passed.
pub fn validate(a: &MountArgs) -> Result<MountConfig> {
    let ssd = backing_dir("SSD", &a.ssd_dir)?;
    let hdd = backing_dir("HDD", &a.hdd_dir)?;
    let (ms, mh) = (std::fs::metadata(&ssd)?, std::fs::metadata(&hdd)?);
    if ssd == hdd || (ms.dev(), ms.ino()) == (mh.dev(), mh.ino()) {
        bail!("the SSD and HDD directories are the same directory ({})", ssd.display());
    }
    if inside(&ssd, &hdd) || inside(&hdd, &ssd) {
        bail!("one backing directory is inside the other ({} and {})", ssd.display(), hdd.display());
    }
    let mnt_abs = runtime::absolute(&a.mountpoint);
    let mnt_md = match std::fs::metadata(&mnt_abs) {
        Ok(m) => m,
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            bail!("mountpoint {} is a dead FUSE mount; run: fusermount3 -u {}", mnt_abs.display(), mnt_abs.display())
        }
        Err(e) => bail!("mountpoint {}: {e}", mnt_abs.display()),
    };
    if !mnt_md.is_dir() {
        bail!("mountpoint {} is not a directory", mnt_abs.display());
    }
    if crate::mounts::mounted_at(&mnt_abs).is_some_and(|t| t.starts_with("fuse")) {
        bail!("{} is already a FUSE mount point", mnt_abs.display());
    }
    let mnt = std::fs::canonicalize(&mnt_abs)?;
    if std::fs::read_dir(&mnt)?.next().is_some() {
        bail!("mountpoint {} is not empty", mnt.display());
    }
    for (what, d) in [("SSD", &ssd), ("HDD", &hdd)] {
        if d == &mnt || inside(d, &mnt) {
            bail!("the {what} directory {} is inside the mountpoint {}", d.display(), mnt.display());
        }
        if inside(&mnt, d) {
            bail!("the mountpoint {} is inside the {what} directory {}", mnt.display(), d.display());
        }
    }
    let state_dir = match &a.state_dir {
        Some(s) => {
            let abs = runtime::absolute(s);
            if abs.starts_with(&mnt) {
                bail!("the state directory {} is inside the mountpoint", abs.display());
            }
            abs
        }
        None => ssd.join(".tierfs").join("state"),
    };
    let emulate = a.emulate.as_deref().map(|spec| parse_emulate(spec, a.profiles.as_deref())).transpose()?;
    if emulate.is_some() && a.io_mode == IoModeArg::Passthrough {
        bail!("--emulate needs userspace I/O: with passthrough the kernel does the I/O and the model sees none of it");
    }
    let passthrough_possible = is_root() && emulate.is_none();
    let io_mode = match a.io_mode {
        IoModeArg::Userspace => IoMode::Userspace,
        IoModeArg::Passthrough if !passthrough_possible => {
            bail!("--io-mode passthrough needs root (the kernel grants backing files to CAP_SYS_ADMIN only)")
        }
        IoModeArg::Passthrough => IoMode::Passthrough,
        IoModeArg::Auto if passthrough_possible => IoMode::Passthrough,
        IoModeArg::Auto => IoMode::Userspace,
    };
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let threads = a.threads.unwrap_or(cpus.max(2));
    if threads == 0 || threads > 256 {
        bail!("--threads must be between 1 and 256");
    }
    let allow_other = if a.no_allow_other { false } else { a.allow_other || is_root() };
    Ok(MountConfig {
        ssd,
        hdd,
        mountpoint: mnt,
        state_dir,
        io_mode,
        placement: match a.placement {
            TierArg::Auto => None,
            TierArg::Ssd => Some(Tier::Ssd),
            TierArg::Hdd => Some(Tier::Hdd),
        },
        policy: PolicyKind::parse(&a.policy).ok_or_else(|| {
            anyhow::anyhow!(
                "--policy: unknown policy {:?} (one of: {})",
                a.policy,
                PolicyKind::ALL.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
            )
        })?,
        params: Params {
            sieve: parse_size(&a.sieve).map_err(|e| anyhow::anyhow!("--sieve: {e}"))?,
            interval: parse_interval(&a.interval)?,
            chunk: {
                let n = parse_size(&a.chunk).map_err(|e| anyhow::anyhow!("--chunk: {e}"))?;
                if tierfs_core::extent::ChunkSize::new(n).is_none() {
                    bail!("--chunk must be a power of two from 4K to 1M");
                }
                n
            },
            write_back: tierfs_core::settings::parse_percent(&a.write_back)
                .map_err(|e| anyhow::anyhow!("--write-back: {e}"))?,
            delta: tierfs_core::settings::parse_delta(&a.delta).map_err(|e| anyhow::anyhow!("--delta: {e}"))?,
            quiet: a.quiet_hdd,
            admission: parse_admission(a.admission.as_deref())?,
            aging: parse_aging_rule(a.aging_rule.as_deref())?,
        },
        measured_rate: {
            if !(a.measured_rate > 0.0 && a.measured_rate <= 10_000.0) {
                bail!("--measured-rate must be above 0 and at most 10000 moves per second");
            }
            a.measured_rate
        },
        budget: parse_budget(a)?,
        metrics: a
            .metrics
            .as_deref()
            .map(|s| {
                s.parse::<std::net::SocketAddr>().map_err(|e| {
                    anyhow::anyhow!("--metrics {s:?}: {e} (give an address and port, e.g. 127.0.0.1:9877)")
                })
            })
            .transpose()?,
        endurance: a
            .ssd_endurance
            .as_deref()
            .map(|s| parse_size(s).map_err(|e| anyhow::anyhow!("--ssd-endurance: {e}")))
            .transpose()?,
        write_back_max: parse_size(&a.write_back_max).map_err(|e| anyhow::anyhow!("--write-back-max: {e}"))?,
        flush_on_unmount: !a.no_flush_on_unmount,
        chunk_period: {
            let d = parse_duration(&a.chunk_period).map_err(|e| anyhow::anyhow!("--chunk-period: {e}"))?;
            if d.is_zero() {
                bail!("--chunk-period must be more than 0");
            }
            d
        },
        ssd_capacity: a
            .ssd_capacity
            .as_deref()
            .map(|s| parse_size(s).map_err(|e| anyhow::anyhow!("--ssd-capacity: {e}")))
            .transpose()?,
        migrate_rate: parse_size(&a.migrate_rate).map_err(|e| anyhow::anyhow!("--migrate-rate: {e}"))?,
        busy_moves: {
            if !(a.busy_moves == 0.0 || (0.001..=1_000_000.0).contains(&a.busy_moves)) {
                bail!("--busy-moves must be 0 (no limit) or from 0.001 to 1000000 moves per second");
            }
            a.busy_moves
        },
        watermarks: parse_watermarks(&a.watermarks).map_err(|e| anyhow::anyhow!("--watermarks: {e}"))?,
        quiet: quiet(a)?,
        emulate,
        threads,
        allow_other,
        stats: !a.no_stats,
        heat: match a.heat {
            HeatArg::Auto => HeatMode::Auto,
            HeatArg::Ebpf if io_mode != IoMode::Passthrough => {
                bail!("--heat ebpf needs passthrough I/O (in userspace mode the daemon sees every request)")
            }
            HeatArg::Ebpf if a.no_stats => bail!("--heat ebpf and --no-stats: there are no statistics to feed"),
            HeatArg::Ebpf => HeatMode::Ebpf,
            HeatArg::Opens => HeatMode::Opens,
        },
        aging: tierfs_core::config::parse_duration(&a.aging).map_err(|e| anyhow::anyhow!("--aging: {e}"))?,
        cache_timeout: tierfs_core::config::parse_duration(&a.cache_timeout)
            .map_err(|e| anyhow::anyhow!("--cache-timeout: {e}"))?,
        linger: linger(&a.linger)?,
        io_uring: match a.io_uring {
            UringArg::Auto => UringMode::Auto,
            UringArg::Always => UringMode::Always,
            UringArg::Never => UringMode::Never,
        },
    })
}

/// `--quiet-hdd` and its settings.
fn quiet(a: &MountArgs) -> Result<Option<tierfs_core::quiet::QuietConfig>> {
    if !a.quiet_hdd {
        if a.quiet_hold.is_some() || a.quiet_window.is_some() {
            bail!("--quiet-hold and --quiet-window need --quiet-hdd");
        }
        return Ok(None);
    }
    let idle_after = parse_duration(&a.hdd_idle).map_err(|e| anyhow::anyhow!("--hdd-idle: {e}"))?;
    if idle_after < std::time::Duration::from_secs(1) {
        bail!("--hdd-idle must be at least 1s");
    }
    let hold = match a.quiet_hold.as_deref() {
        Some(s) => match parse_size(s).map_err(|e| anyhow::anyhow!("--quiet-hold: {e}"))? {
            0 => bail!("--quiet-hold must be more than 0"),
            n => n,
        },
        None => 0,
    };
    let window = a
        .quiet_window
        .as_deref()
        .map(|s| tierfs_core::quiet::Window::parse(s).map_err(|e| anyhow::anyhow!("--quiet-window: {e}")))
        .transpose()?;
    Ok(Some(tierfs_core::quiet::QuietConfig { hold, window, idle_after }))
}

/// `--linger`: at most 10 ms (a longer watch would only burn CPU).
fn linger(s: &str) -> Result<std::time::Duration> {
    let d = tierfs_core::config::parse_duration(s).map_err(|e| anyhow::anyhow!("--linger: {e}"))?;
    if d > std::time::Duration::from_millis(10) {
        anyhow::bail!("--linger: {s:?} is longer than 10ms");
    }
    Ok(d)
}

/// The SSD write budget: `--ssd-write-budget SIZE[/day]`, or
/// `--ssd-endurance` over `--ssd-lifetime`.
fn parse_budget(a: &MountArgs) -> Result<Option<Budget>> {
    let endurance = |s: &str| parse_size(s).map_err(|e| anyhow::anyhow!("--ssd-endurance: {e}"));
    match (&a.ssd_write_budget, &a.ssd_endurance, &a.ssd_lifetime) {
        (Some(b), _, None) => {
            let v = b.trim();
            let v = v.strip_suffix("/day").or_else(|| v.strip_suffix("/d")).unwrap_or(v);
            let n = parse_size(v).map_err(|e| anyhow::anyhow!("--ssd-write-budget: {e} (e.g. 40G/day)"))?;
            if n == 0 {
                bail!("--ssd-write-budget must be more than 0");
            }
            Ok(Some(Budget { bytes_per_day: n }))
        }
        (Some(_), _, Some(_)) => bail!("give --ssd-write-budget, or --ssd-endurance with --ssd-lifetime, not both"),
        (None, Some(e), Some(l)) => {
            let e = endurance(e)?;
            let l = parse_duration(l).map_err(|e| anyhow::anyhow!("--ssd-lifetime: {e}"))?;
            if e == 0 || l < std::time::Duration::from_secs(86_400) {
                bail!("--ssd-endurance must be more than 0 and --ssd-lifetime at least a day");
            }
            Ok(Some(Budget::from_endurance(e, l)))
        }
        (None, None, Some(_)) => {
            bail!("--ssd-lifetime needs --ssd-endurance (the SSD's rated bytes written, e.g. 600T)")
        }
        (None, _, None) => Ok(None),
    }
}

/// `HIGH,LOW` (or `HIGH:LOW`) in percent, 1 <= LOW <= HIGH <= 100.
fn parse_watermarks(s: &str) -> std::result::Result<(u8, u8), String> {
    let (h, l) = s.split_once([',', ':']).ok_or_else(|| format!("{s:?}: want HIGH,LOW in percent (e.g. 98,95)"))?;
    let pct = |v: &str| -> std::result::Result<u8, String> {
        match v.trim().trim_end_matches('%').parse::<u8>() {
            Ok(p) if (1..=100).contains(&p) => Ok(p),
            _ => Err(format!("{v:?} is not a percentage from 1 to 100")),
        }
    };
    let (high, low) = (pct(h)?, pct(l)?);
    if low > high {
        return Err(format!("the low watermark ({low}) is above the high one ({high})"));
    }
    Ok((high, low))
}

/// A device profile in a --profiles file.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileSpec {
    read_mbps: f64,
    write_mbps: f64,
    read_iops: Option<f64>,
    write_iops: Option<f64>,
    read_access_ms: Option<f64>,
    write_access_ms: Option<f64>,
    /// Degradation under random writes (all three or none): the rate its
    /// garbage collection absorbs, MB/s ...
    degrade_write_mbps: Option<f64>,
    /// ... the backlog past which it is degraded, MB ...
    degrade_threshold_mb: Option<f64>,
    /// ... and the factor on access times while degraded (>= 1).
    degrade_factor: Option<f64>,
    /// ... on reads' access times (>= 1; default 1).
    degrade_read_factor: Option<f64>,
    /// ... and the backlog at or below which it is fast again, MB (at most
    /// the threshold; default the threshold).
    degrade_recover_mb: Option<f64>,
}

fn load_profiles(path: &Path) -> Result<Vec<Profile>> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("--profiles {}: {e}", path.display()))?;
    parse_profiles(&text, path)
}

/// The profiles of a --profiles file's `text` (`path` for messages).
fn parse_profiles(text: &str, path: &Path) -> Result<Vec<Profile>> {
    let specs: std::collections::BTreeMap<String, ProfileSpec> =
        toml::from_str(text).map_err(|e| anyhow::anyhow!("--profiles {}: {e}", path.display()))?;
    let mut out = Vec::new();
    for (name, s) in specs {
        let access = |iops: Option<f64>, ms: Option<f64>, bw: f64, what: &str| -> Result<std::time::Duration> {
            match (iops, ms) {
                (Some(i), None) if i > 0.0 => {
                    Ok(std::time::Duration::from_secs_f64((1.0 / i - 4096.0 / (bw * 1e6)).max(0.0)))
                }
                (None, Some(m)) if m >= 0.0 => Ok(std::time::Duration::from_secs_f64(m / 1000.0)),
                _ => bail!("profile {name}: give exactly one of {what}_iops (> 0) and {what}_access_ms"),
            }
        };
        if s.read_mbps <= 0.0 || s.write_mbps <= 0.0 {
            bail!("profile {name}: read_mbps and write_mbps must be positive");
        }
        let ra = access(s.read_iops, s.read_access_ms, s.read_mbps, "read")?;
        let wa = access(s.write_iops, s.write_access_ms, s.write_mbps, "write")?;
        let degrade = match (s.degrade_write_mbps, s.degrade_threshold_mb, s.degrade_factor) {
            (None, None, None) => None,
            (Some(rate), Some(threshold), Some(factor)) => {
                let positive = |v: f64| v.is_finite() && v > 0.0;
                if !positive(rate) || !positive(threshold) {
                    bail!("profile {name}: degrade_write_mbps and degrade_threshold_mb must be positive");
                }
                if !(factor.is_finite() && factor >= 1.0) {
                    bail!("profile {name}: degrade_factor must be at least 1");
                }
                let read_factor = s.degrade_read_factor.unwrap_or(1.0);
                if !(read_factor.is_finite() && read_factor >= 1.0) {
                    bail!("profile {name}: degrade_read_factor must be at least 1");
                }
                let recover = match s.degrade_recover_mb {
                    None => None,
                    Some(r) if r.is_finite() && (0.0..=threshold).contains(&r) => Some(r * 1e6),
                    Some(_) => {
                        bail!("profile {name}: degrade_recover_mb must be at least 0 and at most degrade_threshold_mb")
                    }
                };
                Some(Degrade { write_rate: rate * 1e6, threshold: threshold * 1e6, factor, read_factor, recover })
            }
            _ => bail!(
                "profile {name}: give all three of degrade_write_mbps, degrade_threshold_mb and degrade_factor, or none"
            ),
        };
        let p = Profile::from_access(&name, s.read_mbps, s.write_mbps, ra, wa);
        out.push(match degrade {
            Some(d) => p.degrading(d),
            None => p,
        });
    }
    Ok(out)
}

/// `--admission` (None: the default).
pub fn parse_admission(v: Option<&str>) -> Result<Admission> {
    let Some(v) = v else { return Ok(Admission::default()) };
    Admission::parse(v).ok_or_else(|| {
        let names: Vec<_> = Admission::ALL.iter().map(|a| a.name()).collect();
        anyhow::anyhow!("--admission: {v:?} is not one of {}", names.join(", "))
    })
}

/// `--aging-rule` (None: the default).
pub fn parse_aging_rule(v: Option<&str>) -> Result<AgingRule> {
    let Some(v) = v else { return Ok(AgingRule::default()) };
    AgingRule::parse(v).ok_or_else(|| {
        let names: Vec<_> = AgingRule::ALL.iter().map(|a| a.name()).collect();
        anyhow::anyhow!("--aging-rule: {v:?} is not one of {}", names.join(", "))
    })
}

/// Parses --interval: a duration of more than 0.
pub fn parse_interval(s: &str) -> Result<std::time::Duration> {
    let d = parse_duration(s).map_err(|e| anyhow::anyhow!("--interval: {e}"))?;
    if d.is_zero() {
        bail!("--interval must be more than 0");
    }
    Ok(d)
}

/// Parses --emulate: ssd=NAME,hdd=NAME[,cache=SIZE] (',', ':' or '+' between).
pub fn parse_emulate(spec: &str, profiles: Option<&Path>) -> Result<(Profile, Profile, u64)> {
    let known = known_profiles(profiles)?;
    let find = |n: &str| find_profile(&known, n).map_err(|e| anyhow::anyhow!("--emulate: {e}"));
    let (mut ssd, mut hdd, mut cache) = (None, None, 0);
    for part in spec.split([',', ':', '+']).filter(|p| !p.is_empty()) {
        match part.split_once('=') {
            Some(("ssd", v)) => ssd = Some(find(v)?),
            Some(("hdd", v)) => hdd = Some(find(v)?),
            Some(("cache", v)) => cache = parse_size(v).map_err(|e| anyhow::anyhow!("--emulate cache: {e}"))?,
            _ => bail!("--emulate: {part:?} is not ssd=PROFILE, hdd=PROFILE or cache=SIZE"),
        }
    }
    match (ssd, hdd) {
        (Some(s), Some(h)) => Ok((s, h, cache)),
        _ => bail!("--emulate needs both ssd=PROFILE and hdd=PROFILE"),
    }
}

/// The built-in profiles and those of a --profiles file (which come first).
pub(crate) fn known_profiles(profiles: Option<&Path>) -> Result<Vec<Profile>> {
    let mut known = match profiles {
        Some(p) => load_profiles(p)?,
        None => Vec::new(),
    };
    known.extend(Profile::builtin());
    Ok(known)
}

/// The profile named `n` among `known`.
pub(crate) fn find_profile(known: &[Profile], n: &str) -> Result<Profile> {
    known.iter().find(|p| p.name == n).cloned().ok_or_else(|| {
        anyhow::anyhow!(
            "unknown device profile {n:?} (known: {})",
            known.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ")
        )
    })
}

fn init_logging(verbose: u8, file: Option<&Path>) -> Result<()> {
    let level = match verbose {
        0 => tracing::Level::INFO,
        1 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    let b = tracing_subscriber::fmt().with_max_level(level).with_target(false);
    match file {
        Some(p) => {
            if let Some(d) = p.parent() {
                std::fs::create_dir_all(d)?;
            }
            let f = std::fs::OpenOptions::new().create(true).append(true).open(p)?;
            b.with_ansi(false).with_writer(std::sync::Mutex::new(f)).init();
        }
        None => b.with_writer(std::io::stderr).init(),
    }
    // The libraries' own records (fjall's "Opening keyspace", fuser's)
    // one step less detailed than tierfs's: only their warnings and errors
    // by default, so a refused mount still says one line.
    log::set_max_level(match verbose {
        0 => log::LevelFilter::Warn,
        1 => log::LevelFilter::Info,
        2 => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    });
    Ok(())
}

pub fn run(a: MountArgs) -> Result<ExitCode> {
    let cfg = validate(&a)?;
    if !a.daemon {
        init_logging(a.verbose, a.log_file.as_deref())?;
        serve(cfg, |_| {})?;
        return Ok(ExitCode::SUCCESS);
    }
    let log = a.log_file.clone().unwrap_or_else(|| cfg.state_dir.join("tierfs.log"));
    daemonize(cfg, a.verbose, &log)
}

/// Forks; the child detaches and serves; the parent waits until the mount
/// is live (exit 0) or failed (its message, exit 1).
fn daemonize(cfg: MountConfig, verbose: u8, log: &Path) -> Result<ExitCode> {
    let mut fds = [0; 2];
    // SAFETY: valid array of two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned here.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: no other thread exists yet in this process.
    match unsafe { libc::fork() } {
        -1 => bail!("fork: {}", std::io::Error::last_os_error()),
        0 => {
            drop(rd);
            let mut wr = std::fs::File::from(wr);
            // SAFETY: plain system calls in the fresh child.
            unsafe {
                libc::setsid();
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                if null >= 0 {
                    libc::dup2(null, 0);
                    libc::dup2(null, 1);
                    libc::dup2(null, 2);
                }
            }
            let _ = std::env::set_current_dir("/");
            if let Err(e) = init_logging(verbose, Some(log)) {
                let _ = writeln!(wr, "ERR cannot open log file {}: {e}", log.display());
                std::process::exit(1);
            }
            let r = serve(cfg, |r| {
                let msg = match r {
                    Ok(()) => "OK".to_string(),
                    Err(e) => format!("ERR {e}"),
                };
                let _ = writeln!(wr, "{msg}");
            });
            std::process::exit(if r.is_ok() { 0 } else { 1 });
        }
        _child => {
            drop(wr);
            let mut s = String::new();
            let _ = std::io::BufReader::new(std::fs::File::from(rd)).read_line(&mut s);
            match s.lines().next() {
                Some("OK") => Ok(ExitCode::SUCCESS),
                Some(l) if l.starts_with("ERR ") => bail!("{}", &l[4..]),
                _ => bail!("the daemon exited before mounting (see {})", log.display()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermarks_are_two_percentages_high_then_low() {
        assert_eq!(parse_watermarks("98,95"), Ok((98, 95)));
        assert_eq!(parse_watermarks("90:80"), Ok((90, 80)));
        assert_eq!(parse_watermarks("100,100"), Ok((100, 100)));
        for bad in ["95,98", "0,0", "101,50", "98", "a,b"] {
            assert!(parse_watermarks(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn profiles_files_take_all_three_degrade_fields_or_none() {
        let path = Path::new("disks.toml");
        let base = "read_mbps = 500\nwrite_mbps = 400\nread_access_ms = 0.05\nwrite_access_ms = 0.02\n";
        let plain = parse_profiles(&format!("[fast]\n{base}"), path).unwrap();
        assert_eq!(plain.len(), 1);
        assert_eq!(plain[0].degrade, None);
        let text = format!("[gc]\n{base}degrade_write_mbps = 4\ndegrade_threshold_mb = 8\ndegrade_factor = 200\n");
        let gc = parse_profiles(&text, path).unwrap();
        assert_eq!(
            gc[0].degrade,
            Some(Degrade { write_rate: 4e6, threshold: 8e6, factor: 200.0, read_factor: 1.0, recover: None })
        );
        let marked = parse_profiles(&format!("{text}degrade_recover_mb = 2\n"), path).unwrap();
        assert_eq!(marked[0].degrade.as_ref().unwrap().recover, Some(2e6));
        let err = parse_profiles(&format!("{text}degrade_recover_mb = 9\n"), path).unwrap_err();
        assert!(err.to_string().contains("at most degrade_threshold_mb"), "{err}");
        assert_eq!(gc[0].write_access, std::time::Duration::from_micros(20));
        for (extra, want) in [
            ("degrade_write_mbps = 4\n", "all three"),
            ("degrade_write_mbps = 4\ndegrade_factor = 2\n", "all three"),
            ("degrade_write_mbps = 0\ndegrade_threshold_mb = 8\ndegrade_factor = 2\n", "positive"),
            ("degrade_write_mbps = 4\ndegrade_threshold_mb = -1\ndegrade_factor = 2\n", "positive"),
            ("degrade_write_mbps = 4\ndegrade_threshold_mb = 8\ndegrade_factor = 0.5\n", "at least 1"),
            ("degrade_write_mbps = 4\ndegrade_threshold_mb = 8\ndegrade_factor = nan\n", "at least 1"),
        ] {
            let e = parse_profiles(&format!("[bad]\n{base}{extra}"), path).unwrap_err().to_string();
            assert!(e.contains("profile bad") && e.contains(want), "{extra}: {e}");
        }
    }
}
