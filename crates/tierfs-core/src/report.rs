//! What the daemon answers over its control socket: requests and reports,
//! serialisable so `tierfs stats --json` prints them as they are.

use serde::{Deserialize, Serialize};

/// A request to the daemon.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case")]
pub enum Request {
    /// The whole picture, with the `top` hottest files.
    Status {
        /// How many hottest files to list.
        top: usize,
    },
    /// One file, by tierfs inode number.
    File {
        /// Inode number (as `stat` shows it on the mount).
        ino: u64,
    },
    /// The policy directories and what they govern.
    Groups,
    /// Turn the device models on (after a cold reset) or off.
    Emulation {
        /// On or off.
        enabled: bool,
    },
    /// Run every directory's policy once now (`tierfs migrate`): what it
    /// would move, queued for the migrator unless `dry_run`.
    Plan {
        /// Only say what would move.
        dry_run: bool,
    },
    /// Every pin set on a file or directory (`tierfs policy pins`).
    Pins,
    /// Give an emulated tier another device profile (a device that slows
    /// down or recovers), keeping its cache and queue.
    Profile {
        /// "ssd" or "hdd".
        tier: String,
        /// The new profile.
        profile: crate::device::Profile,
    },
    /// Start recording the mount's events into the trace file `out`
    /// (an absolute path), or with None end the recording.
    Trace {
        /// The trace file to write; None to stop.
        out: Option<String>,
    },
}

/// The daemon's answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Response {
    /// Answer to [`Request::Status`].
    Status(Box<StatusReport>),
    /// Answer to [`Request::File`].
    File(Box<FileReport>),
    /// Answer to [`Request::Groups`].
    Groups(Vec<GroupReport>),
    /// Answer to [`Request::Plan`].
    Plan(Vec<PlannedMove>),
    /// Answer to [`Request::Pins`].
    Pins(Vec<PinReport>),
    /// Answer to [`Request::Trace`] when it ends a recording.
    Traced(crate::engine::record::Recorded),
    /// A request that returns nothing was carried out.
    Done,
    /// The request failed.
    Error(String),
}

/// One move a policy plans (`tierfs migrate`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlannedMove {
    /// Inode number.
    pub ino: u64,
    /// A path of the file on the mount, if it has one.
    pub path: Option<String>,
    /// "promote", "demote", "copy" or "drop-copy".
    pub action: String,
    /// Why, as the policy says it.
    pub reason: String,
    /// The file's size.
    pub bytes: u64,
}

/// One pin: a file or directory with its own `user.tierfs.pin`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinReport {
    /// Inode number.
    pub ino: u64,
    /// Its path on the mount (None: a file without a name, still open).
    pub path: Option<String>,
    /// A directory (its pin holds for everything below it).
    pub directory: bool,
    /// "ssd" or "hdd".
    pub tier: String,
    /// Files only: where its data is now ("ssd", "hdd", "hdd+ssd-copy"):
    /// a move the pin calls for may still be queued or deferred.
    pub placement: Option<String>,
}

/// One emulated device.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DeviceReport {
    /// "ssd" or "hdd".
    pub tier: String,
    /// Profile name.
    pub profile: String,
    /// Time the device was busy.
    pub busy_secs: f64,
    /// Requests that reached it (cache misses).
    pub requests: u64,
}

/// One tier.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TierReport {
    /// "ssd" or "hdd".
    pub tier: String,
    /// Backing directory.
    pub path: String,
    /// Size of the backing file system.
    pub capacity_bytes: u64,
    /// Used space of the backing file system.
    pub used_bytes: u64,
    /// Free space of the backing file system.
    pub free_bytes: u64,
    /// Configured limit for user data (SSD only), if any.
    pub limit_bytes: Option<u64>,
    /// Files with data on this tier (a cached file counts on both).
    pub files: u64,
    /// Their bytes.
    pub file_bytes: u64,
    /// Requests this tier served.
    pub requests: u64,
    /// Bytes this tier served.
    pub bytes_served: u64,
    /// SSD only: bytes the space account charges to files (what their SSD
    /// copies occupy, as `du` counts, plus writes and copies in flight).
    #[serde(default)]
    pub charged_bytes: Option<u64>,
    /// What the backing file system was found at mount to lack
    /// ("rename-exchange", "copy-file-range", ...; see
    /// `store::features`).
    #[serde(default)]
    pub lacks: Vec<String>,
}

/// One file.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FileReport {
    /// tierfs inode number.
    pub ino: u64,
    /// A path of the file below the mount point, if it has a name.
    pub path: Option<String>,
    /// "ssd", "hdd" or "hdd+ssd-copy".
    pub placement: String,
    /// Size in bytes.
    pub size: u64,
    /// Inverse-bitmap counter.
    pub counter: u32,
    /// Last access, seconds since the epoch (0: never).
    pub last_access: u32,
    /// Read requests.
    pub reads: u32,
    /// Write requests.
    pub writes: u32,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Requests served by the SSD.
    pub ssd_requests: u32,
    /// Requests served by the HDD.
    pub hdd_requests: u32,
    /// Policy in force for the file.
    pub policy: Option<String>,
    /// Why it is where it is, or why it did not move (latest decision).
    pub note: Option<String>,
    /// Its chunks, if it is counted by chunks (`hystor`, past the sieve).
    #[serde(default)]
    pub split: Option<SplitReport>,
}

/// A file counted by chunks: which of them are on the SSD, and how well
/// they serve its reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitReport {
    /// Chunk size, bytes.
    pub chunk: u64,
    /// Chunks with a copy on the SSD.
    pub ssd_chunks: u64,
    /// Of which the HDD copy is stale (written on the SSD since).
    pub dirty_chunks: u64,
    /// Bytes of the file with a copy on the SSD.
    pub ssd_bytes: u64,
    /// Bytes only on the HDD.
    pub hdd_only_bytes: u64,
    /// The hottest chunks by Hystor's counters: index, counter, on the SSD.
    pub hottest: Vec<(u64, u16, bool)>,
    /// Read requests counted since the mount.
    pub reads: u64,
    /// Of which the SSD served every byte.
    pub ssd_reads: u64,
    /// Why the file is (or is not) split.
    pub why: String,
}

/// The remap area of sub-file extents.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemapReport {
    /// Files with chunks on the SSD.
    pub split_files: u64,
    /// Bytes of their chunks.
    pub used_bytes: u64,
    /// The area at the last period (what whole files leave, less a margin).
    pub area_bytes: u64,
    /// Chunks copied to the SSD, dropped, and files unsplit since the mount.
    pub added: u64,
    /// See `added`.
    pub dropped: u64,
    /// See `added`.
    pub unsplit: u64,
    /// Chunk moves queued.
    pub queued: u64,
}

/// The write-back areas (Hystor §5.5), summed over the groups that have one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteBackReport {
    /// Groups with an area.
    pub areas: u64,
    /// Their sizes, bytes.
    pub quota_bytes: u64,
    /// Bytes of their chunks (dirty and clean).
    pub used_bytes: u64,
    /// Bytes of dirty chunks: the scrubber's backlog.
    pub dirty_bytes: u64,
    /// Watermarks of dirty bytes, percent of an area.
    pub high_percent: u8,
    /// See `high_percent`.
    pub low_percent: u8,
    /// Writes to HDD files of groups with an area.
    pub writes: u64,
    /// Of which the SSD took (the write-back hit ratio is `ssd_writes / writes`).
    pub ssd_writes: u64,
    /// Writes sent to the HDD because an area was full of dirty chunks.
    pub diverted: u64,
    /// Chunks written back, and their bytes.
    pub scrubbed: u64,
    /// See `scrubbed`.
    pub scrubbed_bytes: u64,
    /// Write-backs that failed (the chunk stays dirty).
    pub scrub_failed: u64,
    /// Clean chunks freed for new writes.
    pub freed: u64,
    /// Bytes written back per second over the last 10 s.
    pub scrub_rate: u64,
    /// The unmount is writing the areas back.
    #[serde(default)]
    pub flushing: bool,
}

/// What a heat source sees of the kernel's requests on one tier.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeenReport {
    /// "ssd" or "hdd".
    pub tier: String,
    /// Buffered reads (and faults).
    pub reads: bool,
    /// Buffered writes.
    pub writes: bool,
    /// Direct (`O_DIRECT`) reads and writes.
    pub direct: bool,
}

/// The heat source of a mount (`crate::heat`) and what it saw.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeatReport {
    /// "ebpf", or "opens" when none sees the kernel's requests.
    pub source: String,
    /// The mount uses passthrough I/O (else every request reaches the
    /// daemon and the source has nothing to see).
    pub passthrough: bool,
    /// What it sees on each tier.
    pub tiers: Vec<SeenReport>,
    /// What it saw.
    #[serde(flatten)]
    pub counts: crate::heat::HeatCounts,
}

/// Everything `tierfs stats` shows.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StatusReport {
    /// Mount point.
    pub mountpoint: String,
    /// Daemon pid.
    pub pid: u32,
    /// "passthrough" or "userspace".
    pub io_mode: String,
    /// How accesses are counted in this I/O mode.
    pub counting: String,
    /// The heat source: what sees the requests passthrough keeps from the
    /// daemon.
    #[serde(default)]
    pub heat: HeatReport,
    /// Both tiers.
    pub tiers: Vec<TierReport>,
    /// Requests served by the SSD over all requests (Hystor's hit ratio).
    pub ssd_hit_ratio: f64,
    /// Files with statistics.
    pub tracked_files: u64,
    /// The hottest files, hottest first.
    pub hottest: Vec<FileReport>,
    /// Counter of the last file evicted from the SSD (admission threshold).
    pub admission_threshold: u32,
    /// Every this many seconds all counters are halved.
    pub aging_period_secs: u64,
    /// Events dropped because the statistics thread fell behind.
    pub dropped_events: u64,
    /// Statistics collection is on.
    pub stats_enabled: bool,
    /// The mount's default policy.
    pub policy: String,
    /// What the migrator did.
    pub migrations: MigrationReport,
    /// Activity per policy directory.
    pub groups: Vec<GroupReport>,
    /// Emulated devices, if any.
    #[serde(default)]
    pub emulation: Vec<DeviceReport>,
    /// Sub-file extents.
    #[serde(default)]
    pub remap: RemapReport,
    /// Write-back areas.
    #[serde(default)]
    pub write_back: WriteBackReport,
    /// The tiers' measured response times (Wu-Reddy §III).
    #[serde(default)]
    pub measured: Option<MeasureReport>,
    /// The SSD write regulator (HybridStore §IV-C).
    #[serde(default)]
    pub regulator: Option<crate::regulator::RegulatorReport>,
    /// The last five minutes, hour and day: what was served and moved.
    #[serde(default)]
    pub history: Vec<crate::stats::history::WindowReport>,
    /// The HDD: when it was last used, its wake-ups and what woke it, and
    /// the quiet mode's held work.
    #[serde(default)]
    pub hdd: HddReport,
}

/// The HDD tier's idleness (`tierfs mount --quiet-hdd` and disk awareness).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HddReport {
    /// The quiet HDD mode is on.
    pub quiet: bool,
    /// The block device under the HDD directory (`sda`, `loop3`), if found.
    pub disk: Option<String>,
    /// Seconds since the disk last read or wrote a sector (anyone's I/O).
    pub disk_idle_secs: Option<f64>,
    /// Seconds since tierfs's last request to the HDD tier.
    pub tierfs_idle_secs: Option<f64>,
    /// tierfs's requests to the HDD tier since the mount (of every kind
    /// but `statfs`).
    #[serde(default)]
    pub tierfs_requests: u64,
    /// The idle time after which the HDD counts as asleep, seconds.
    pub idle_after_secs: u64,
    /// Wake-ups of the disk (I/O after the idle time) in the last day and
    /// since the mount (from its counters; without a disk, tierfs's
    /// requests after the idle time).
    pub wakeups_day: u64,
    /// Wake-ups since the mount.
    pub wakeups_total: u64,
    /// The requests of tierfs that came after the idle time, latest last.
    pub wakes: Vec<crate::quiet::Wake>,
    /// Whether held work may go to the HDD now, and why (`awake`,
    /// `held-writes-full`, `window`); `None`: held.
    pub open: Option<crate::quiet::Open>,
    /// Files created on the SSD in place of the HDD, waiting.
    pub held_files: u64,
    /// Their bytes on the SSD.
    pub held_bytes: u64,
    /// The held bytes that make them go whether the HDD is awake or not.
    pub hold_limit: u64,
    /// The daily window, if any (`HH:MM-HH:MM`, UTC).
    pub window: Option<String>,
}

/// The measured response times of one tier.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TierSpeed {
    /// "ssd" or "hdd".
    pub tier: String,
    /// Exponential average of its read response times, microseconds.
    pub read_us: Option<f64>,
    /// Exponential average of its write response times, microseconds.
    pub write_us: Option<f64>,
    /// Read requests measured.
    pub reads: u64,
    /// Write requests measured.
    pub writes: u64,
    /// Bytes read from the tier.
    pub read_bytes: u64,
    /// Bytes written to the tier.
    pub written_bytes: u64,
    /// Read requests by response time (`store::measured::LATENCY_BOUNDS`).
    #[serde(default)]
    pub read_latency: crate::store::measured::Latency,
    /// Write requests by response time.
    #[serde(default)]
    pub write_latency: crate::store::measured::Latency,
}

/// What the measurement of the tiers sees.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MeasureReport {
    /// SSD, then HDD.
    pub tiers: Vec<TierSpeed>,
    /// Probe rounds made (a tier no request reached).
    pub probes: u64,
    /// `measured`'s moves per second per policy directory.
    pub token_rate: f64,
}

/// One policy directory (a group) and the files it governs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GroupReport {
    /// Group number (0: the mount's root).
    pub group: u32,
    /// The directory heading the group.
    pub dir: String,
    /// Settings set on that directory: name = value (user.tierfs.*).
    pub own: Vec<(String, String)>,
    /// Policy in force.
    pub policy: String,
    /// Where the policy comes from: a directory, or "mount option".
    pub policy_from: String,
    /// Sieve in force, bytes.
    pub sieve: u64,
    /// Interval in force, seconds.
    pub interval_secs: f64,
    /// Pin of the whole group.
    pub pin: Option<String>,
    /// Files in the group.
    pub files: u64,
    /// Of which on the SSD only, on the HDD only, and cached.
    pub files_ssd: u64,
    /// See `files_ssd`.
    pub files_hdd: u64,
    /// See `files_ssd`.
    pub files_cached: u64,
    /// Bytes with data on the SSD (moved or copies).
    pub bytes_ssd: u64,
    /// Bytes with data on the HDD.
    pub bytes_hdd: u64,
    /// Requests served by each tier.
    pub requests: [u64; 2],
    /// Share of requests served by the SSD.
    pub ssd_hit_ratio: f64,
}

/// Moves made by the engine since mount.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MigrationReport {
    /// Files moved to the SSD.
    pub promotions: u64,
    /// Files moved to the HDD (evictions included).
    pub demotions: u64,
    /// SSD copies made (caching).
    pub copies: u64,
    /// SSD copies dropped (evictions included).
    pub drops: u64,
    /// Files taken off the SSD to make room (demotions or drops).
    pub evictions: u64,
    /// Bytes copied between tiers.
    pub bytes_moved: u64,
    /// Migrations that failed with an error.
    pub failed: u64,
    /// Moves waiting in the queue.
    pub queued: u64,
    /// Moves waiting for the last passthrough handle to close.
    pub deferred: Vec<FileReport>,
    /// Bytes evicted to make room for writes and migrations (the background
    /// cleaner's target).
    pub evicted_bytes: u64,
    /// Writes and migrations that had to wait for the cleaner.
    #[serde(default)]
    pub room_waits: u64,
    /// Files taken off the SSD because a write to them found no room.
    #[serde(default)]
    pub evacuations: u64,
    /// Writes, promotions and copies the SSD write regulator sent to the
    /// HDD.
    #[serde(default)]
    pub diverted: u64,
    /// Moves done, by kind and reason (only those that happened).
    #[serde(default)]
    pub by_reason: Vec<ReasonMoves>,
    /// Bytes of chunks copied to the SSD (sub-file extents; the rest of
    /// `bytes_moved` is in `by_reason`).
    #[serde(default)]
    pub chunk_bytes: u64,
    /// The mount is busy (at least 1 000 requests a second): background
    /// moves are spaced to `--busy-moves` a second.
    #[serde(default)]
    pub busy: bool,
}

/// Moves of one kind for one reason.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasonMoves {
    /// "promotion", "demotion", "copy" or "drop".
    pub kind: String,
    /// The reason's short name (`Reason::LABELS`).
    pub reason: String,
    /// Moves done.
    pub moves: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// Sends one request to the daemon whose control socket is `socket` and
/// reads its answer (an `Error` answer comes back as `Err`).
pub fn ask(socket: &std::path::Path, req: &Request) -> std::io::Result<Response> {
    ask_within(socket, req, None)
}

/// [`ask`], giving up (`TimedOut` or `WouldBlock`) if the daemon does not
/// answer within `limit`.
pub fn ask_within(
    socket: &std::path::Path,
    req: &Request,
    limit: Option<std::time::Duration>,
) -> std::io::Result<Response> {
    use std::io::{BufRead, BufReader, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket)?;
    s.set_read_timeout(limit)?;
    s.set_write_timeout(limit)?;
    let mut line = serde_json::to_string(req).map_err(std::io::Error::other)?;
    line.push('\n');
    s.write_all(line.as_bytes())?;
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer)?;
    match serde_json::from_str(&answer) {
        Ok(Response::Error(e)) => Err(std::io::Error::other(e)),
        Ok(r) => Ok(r),
        Err(e) => Err(std::io::Error::other(format!("unreadable answer from the daemon: {e}"))),
    }
}
