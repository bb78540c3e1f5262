//! The quiet HDD mode: when work that touches the HDD tier may run, what
//! the HDD's block device last did, and what woke it.
//!
//! Deciding is pure (time passed in): [`gate`] says whether held work may
//! reach the HDD now, [`Activity`] turns the device's I/O counters into
//! "idle since" and wake-ups. Looking is [`Disk`]: the block device under
//! a directory, found through sysfs, whose `stat` file the kernel keeps
//! without asking the device (reading it never wakes a disk); it counts as
//! used when sectors moved. Who asked
//! the HDD tier for something is told by the thread that asks
//! ([`doing`]), and noted by the tier's store (`store::measured`).

use crate::clock::Timestamp;
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The quiet mode's settings (`tierfs mount --quiet-hdd`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuietConfig {
    /// Bytes of held writes (files put on the SSD in place of the HDD)
    /// that make them go to the HDD whether it is awake or not; 0 at mount
    /// means [`DEFAULT_HOLD_PERCENT`] of the SSD capacity (the engine
    /// sets it when it starts).
    pub hold: u64,
    /// A daily window (UTC) in which held work goes to the HDD.
    pub window: Option<Window>,
    /// The HDD counts as asleep after this long without I/O; a request
    /// after such a pause is a wake-up.
    pub idle_after: Duration,
}

/// Default of [`QuietConfig::idle_after`]: ten minutes, about what
/// `hdparm -S 120` asks a drive to wait before it spins down.
pub const DEFAULT_IDLE_AFTER: Duration = Duration::from_secs(600);

/// Default of [`QuietConfig::hold`] as a share of the SSD capacity, percent.
pub const DEFAULT_HOLD_PERCENT: u64 = 10;

/// A daily stretch of time, UTC, from `start` seconds after midnight for
/// `len` seconds (it may run past midnight).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Seconds after midnight UTC.
    pub start: u32,
    /// Its length in seconds (at most a day).
    pub len: u32,
}

const DAY: u64 = 86_400;

impl Window {
    /// Parses `HH:MM-HH:MM` (UTC; `02:00-04:00`, or `23:30-00:30` across
    /// midnight).
    pub fn parse(s: &str) -> Result<Window, String> {
        let bad = || format!("{s:?}: a daily window is HH:MM-HH:MM, UTC (e.g. 02:00-04:00)");
        let hm = |t: &str| -> Option<u32> {
            let (h, m) = t.trim().split_once(':')?;
            let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
            (h < 24 && m < 60).then_some(h * 3600 + m * 60)
        };
        let (a, b) = s.split_once('-').ok_or_else(bad)?;
        let (a, b) = (hm(a).ok_or_else(bad)?, hm(b).ok_or_else(bad)?);
        if a == b {
            return Err(format!("{s:?}: the window is empty"));
        }
        let len = if b > a { b - a } else { DAY as u32 - a + b };
        Ok(Window { start: a, len })
    }

    /// True if `now` falls in the window.
    pub fn contains(&self, now: Timestamp) -> bool {
        let t = now.secs() % DAY;
        let from_start = (t + DAY - self.start as u64) % DAY;
        from_start < self.len as u64
    }
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let end = (self.start + self.len) % DAY as u32;
        let hm = |s: u32| format!("{:02}:{:02}", s / 3600, s / 60 % 60);
        write!(f, "{}-{}", hm(self.start), hm(end))
    }
}

/// Why held work may go to the HDD now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Open {
    /// It is awake for another reason (it did I/O lately).
    Awake,
    /// The held writes reached [`QuietConfig::hold`].
    Held,
    /// The daily window is on.
    Window,
}

impl Open {
    /// Its short name.
    pub fn label(self) -> &'static str {
        match self {
            Open::Awake => "awake",
            Open::Held => "held-writes-full",
            Open::Window => "window",
        }
    }
}

/// Whether work held off the HDD may reach it now: when the disk is awake
/// anyway, when `held` bytes reached the limit, or in the daily window.
/// `None`: keep holding.
pub fn gate(cfg: &QuietConfig, now: Timestamp, awake: bool, held: u64) -> Option<Open> {
    if awake {
        Some(Open::Awake)
    } else if held >= cfg.hold {
        Some(Open::Held)
    } else if cfg.window.is_some_and(|w| w.contains(now)) {
        Some(Open::Window)
    } else {
        None
    }
}

/// What a disk's I/O counters said over time (pure): when they last
/// moved, and how often they moved after a pause of at least the idle
/// time (wake-ups).
#[derive(Clone, Debug, Default)]
pub struct Activity {
    counts: Option<(u64, u64)>,
    /// When the counters were last seen to move (or first read).
    last_io: Option<Timestamp>,
    /// Wake-ups in the last day, oldest first.
    recent: std::collections::VecDeque<Timestamp>,
    /// Wake-ups since the mount.
    total: u64,
}

impl Activity {
    /// Takes a reading of the counters (sectors read, written) at `now`.
    /// True if it is a wake-up: they moved after at least `idle_after`
    /// without moving. The first reading sets the baseline.
    pub fn observe(&mut self, now: Timestamp, counts: (u64, u64), idle_after: Duration) -> bool {
        let before = self.counts.replace(counts);
        let Some(before) = before else {
            self.last_io = Some(now);
            return false;
        };
        if before == counts {
            return false;
        }
        let woke = self.last_io.is_some_and(|t| now.since(t) >= idle_after);
        self.last_io = Some(now);
        if woke {
            self.total += 1;
            self.recent.push_back(now);
        }
        while self.recent.front().is_some_and(|t| now.since(*t) > Duration::from_secs(DAY)) {
            self.recent.pop_front();
        }
        woke
    }

    /// How long the counters have not moved (`None`: never read).
    pub fn idle_for(&self, now: Timestamp) -> Option<Duration> {
        self.last_io.map(|t| now.since(t))
    }

    /// True if the disk did I/O within `idle_after` (or was never read).
    pub fn awake(&self, now: Timestamp, idle_after: Duration) -> bool {
        self.idle_for(now).is_none_or(|d| d < idle_after)
    }

    /// Wake-ups in the last day (up to `now`), and since the mount.
    pub fn wakeups(&self, now: Timestamp) -> (u64, u64) {
        let day = self.recent.iter().filter(|t| now.since(**t) <= Duration::from_secs(DAY)).count();
        (day as u64, self.total)
    }
}

/// The block device a directory's file system is on, as sysfs shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disk {
    /// The kernel's name of the whole disk (`sda`, `loop3`, `nvme0n1`).
    pub name: String,
    /// Its `stat` file.
    pub stat: PathBuf,
}

impl Disk {
    /// The disk under `dir`: its file system's device number, then
    /// `/sys/dev/block/MAJ:MIN`, and for a partition the disk that holds
    /// it. `None` where there is no block device (tmpfs, a network or
    /// FUSE file system, btrfs's anonymous devices).
    pub fn of_dir(dir: &Path) -> Option<Disk> {
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(dir).ok()?.dev();
        let (maj, min) = (libc::major(dev), libc::minor(dev));
        Disk::of_sysfs(Path::new("/sys"), maj, min)
    }

    /// [`Disk::of_dir`] from the device numbers, under a sysfs root.
    pub fn of_sysfs(sys: &Path, maj: u32, min: u32) -> Option<Disk> {
        if maj == 0 {
            return None;
        }
        let mut p = std::fs::canonicalize(sys.join(format!("dev/block/{maj}:{min}"))).ok()?;
        if p.join("partition").exists() {
            p = p.parent()?.to_path_buf();
        }
        let stat = p.join("stat");
        if !stat.exists() {
            return None;
        }
        let name = p.file_name()?.to_string_lossy().into_owned();
        Some(Disk { name, stat })
    }

    /// Its sectors read and written so far: what moved data. A cache
    /// flush with nothing to write (every disk gets one from a `sync` of
    /// the whole system, whoever runs it) moves the write requests
    /// completed but no sector, and is not a use of the disk.
    pub fn sectors(&self) -> std::io::Result<(u64, u64)> {
        let s = std::fs::read_to_string(&self.stat)?;
        parse_sectors(&s).ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "unreadable disk stat"))
    }
}

/// Sectors read and sectors written from a `/sys/block/*/stat` line
/// (fields 3 and 7, Documentation/block/stat.rst).
pub fn parse_sectors(s: &str) -> Option<(u64, u64)> {
    let f: Vec<u64> = s.split_whitespace().map(|x| x.parse().ok()).collect::<Option<_>>()?;
    Some((*f.get(2)?, *f.get(6)?))
}

/// What a thread is doing for whom, for the note of what woke the HDD.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Doing {
    /// The operation: a FUSE request's name, or a background job's.
    pub op: &'static str,
    /// The inode it is about (0: none).
    pub ino: u64,
}

thread_local! {
    static DOING: Cell<Doing> = const { Cell::new(Doing { op: "", ino: 0 }) };
}

/// Sets what this thread does from now on (a FUSE request thread, at the
/// start of each request).
pub fn set_doing(op: &'static str, ino: u64) {
    DOING.set(Doing { op, ino });
}

/// What this thread does (an empty `op`: not said).
pub fn current() -> Doing {
    DOING.get()
}

/// Restores what the thread did before when dropped.
#[derive(Debug)]
pub struct DoingGuard(Doing);

impl Drop for DoingGuard {
    fn drop(&mut self) {
        DOING.set(self.0);
    }
}

/// Says what this thread does until the guard is dropped (a background
/// job, or a part of a request with a more telling name).
pub fn doing(op: &'static str, ino: u64) -> DoingGuard {
    let prev = DOING.replace(Doing { op, ino });
    DoingGuard(prev)
}

/// A request that reached the HDD tier after it had been left alone for
/// the idle time: what woke it, or would have.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wake {
    /// When, seconds since the Unix epoch.
    pub at: u64,
    /// What tierfs was doing (a FUSE request's name: `lookup`, `read`;
    /// or a job: `migrate`, `scrub`, `reconcile`).
    pub op: String,
    /// The store call that reached the tier (`open`, `stat`, `list`).
    pub call: String,
    /// The path below the mount point of the inode it was for, if known.
    pub path: Option<String>,
    /// How long the tier had been left alone before, seconds.
    pub after_secs: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Duration = Duration::from_secs(60);

    fn cfg() -> QuietConfig {
        QuietConfig { hold: 1000, window: None, idle_after: IDLE }
    }

    #[test]
    fn a_window_is_parsed_and_wraps_around_midnight() {
        let w = Window::parse("02:00-04:30").unwrap();
        assert_eq!(w, Window { start: 7200, len: 9000 });
        assert_eq!(w.to_string(), "02:00-04:30");
        assert!(!w.contains(Timestamp::from_secs(3 * DAY + 7199)));
        assert!(w.contains(Timestamp::from_secs(3 * DAY + 7200)));
        assert!(w.contains(Timestamp::from_secs(3 * DAY + 16_199)));
        assert!(!w.contains(Timestamp::from_secs(3 * DAY + 16_200)));
        let n = Window::parse("23:30-00:30").unwrap();
        assert_eq!(n.len, 3600);
        assert!(n.contains(Timestamp::from_secs(DAY - 60)));
        assert!(n.contains(Timestamp::from_secs(DAY + 60)));
        assert!(!n.contains(Timestamp::from_secs(DAY + 1800)));
        for bad in ["", "2-4", "02:00", "25:00-01:00", "02:00-02:00", "02:60-03:00"] {
            assert!(Window::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn held_work_waits_for_an_awake_disk_the_hold_limit_or_the_window() {
        let now = Timestamp::from_secs(10 * DAY + 12 * 3600);
        assert_eq!(gate(&cfg(), now, false, 999), None);
        assert_eq!(gate(&cfg(), now, true, 0), Some(Open::Awake));
        assert_eq!(gate(&cfg(), now, false, 1000), Some(Open::Held));
        let w = QuietConfig { window: Some(Window::parse("11:00-13:00").unwrap()), ..cfg() };
        assert_eq!(gate(&w, now, false, 0), Some(Open::Window));
        let w = QuietConfig { window: Some(Window::parse("01:00-02:00").unwrap()), ..cfg() };
        assert_eq!(gate(&w, now, false, 0), None);
    }

    #[test]
    fn counters_that_move_after_the_idle_time_are_a_wake_up() {
        let mut a = Activity::default();
        let t = |s| Timestamp::from_secs(1_000 + s);
        assert!(a.awake(t(0), IDLE), "nothing known: taken as awake");
        assert!(!a.observe(t(0), (5, 5), IDLE), "the first reading is the baseline");
        assert!(!a.observe(t(30), (5, 5), IDLE));
        assert!(!a.observe(t(40), (6, 5), IDLE), "moved within the idle time");
        assert!(a.awake(t(99), IDLE));
        assert!(!a.awake(t(100), IDLE));
        assert_eq!(a.idle_for(t(100)), Some(Duration::from_secs(60)));
        assert!(a.observe(t(200), (6, 9), IDLE), "moved after a minute and more of quiet");
        assert!(!a.observe(t(201), (7, 9), IDLE));
        assert!(a.observe(t(400), (8, 9), IDLE));
        assert_eq!(a.wakeups(t(400)), (2, 2));
        assert_eq!(a.wakeups(t(200 + DAY + 1)), (1, 2), "a day later the first is out of the day's count");
    }

    #[test]
    fn a_disk_stat_line_gives_sectors_read_and_written() {
        let line = "   14592     3201  1113598     5412    70386    41036  4128264   139470        0    98020   145560        0        0        0        0     1516      677\n";
        assert_eq!(parse_sectors(line), Some((1113598, 4128264)));
        assert_eq!(parse_sectors("1 2 3 4 5 6"), None);
        assert_eq!(parse_sectors("1 2 x 4 5 6 7"), None);
    }

    #[test]
    fn a_partition_is_traced_to_its_disk() {
        let sys = tempfile::tempdir().unwrap();
        let disk = sys.path().join("devices/pci0/block/sdz");
        std::fs::create_dir_all(disk.join("sdz1")).unwrap();
        std::fs::write(disk.join("stat"), "1 0 8 0 2 0 16 0 0 0 0").unwrap();
        std::fs::write(disk.join("sdz1/stat"), "1 0 8 0 2 0 16 0 0 0 0").unwrap();
        std::fs::write(disk.join("sdz1/partition"), "1").unwrap();
        std::fs::create_dir_all(sys.path().join("dev/block")).unwrap();
        std::os::unix::fs::symlink(disk.join("sdz1"), sys.path().join("dev/block/259:1")).unwrap();
        std::os::unix::fs::symlink(&disk, sys.path().join("dev/block/259:0")).unwrap();
        let d = Disk::of_sysfs(sys.path(), 259, 1).unwrap();
        assert_eq!(d.name, "sdz");
        assert_eq!(d.sectors().unwrap(), (8, 16));
        assert_eq!(Disk::of_sysfs(sys.path(), 259, 0).unwrap().name, "sdz");
        assert_eq!(Disk::of_sysfs(sys.path(), 259, 7), None, "no such device");
        assert_eq!(Disk::of_sysfs(sys.path(), 0, 40), None, "an anonymous device (tmpfs, btrfs)");
    }

    #[test]
    fn what_a_thread_does_is_restored_when_its_guard_goes() {
        set_doing("lookup", 5);
        {
            let _g = doing("reconcile", 9);
            assert_eq!(current(), Doing { op: "reconcile", ino: 9 });
        }
        assert_eq!(current(), Doing { op: "lookup", ino: 5 });
    }
}
