//! What the user typed, as clap sees it.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;

/// tierfs: one namespace over a fast directory and a slow one, keeping each
/// file on the tier where it pays most.
/// The version and the commit it was built from (`build.rs`).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("TIERFS_COMMIT"), ")");

#[derive(Parser, Debug)]
#[command(name = "tierfs", version = VERSION, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Mount SSD_DIR and HDD_DIR as one file system on MOUNTPOINT.
    Mount(Box<MountArgs>),
    /// Unmount a tierfs mount and wait for its daemon to finish.
    Umount(UmountArgs),
    /// Show per-tier usage, requests served, the SSD hit ratio and the
    /// hottest files of a mount (or one file's statistics with --file).
    Stats(StatsArgs),
    /// Per-directory policies and pins (the user.tierfs.* attributes).
    Policy(PolicyArgs),
    /// Run the papers' workloads: one on a directory, or the whole sweep
    /// over architectures and SSD sizes on emulated devices.
    Bench(BenchArgs),
    /// Mount two fresh directories under a demo folder, write and read
    /// files through the mount, show where they are, unmount.
    Demo(DemoArgs),
    /// Which tier each file is on: one line per file, TIER<TAB>PATH.
    Where(WhereArgs),
    /// Run every directory's policy once now and say what moves and why.
    Migrate(MigrateArgs),
    /// Access traces: import a block trace, make a synthetic one, show one.
    Trace(TraceArgs),
    /// Which devices to buy for a workload: HybridStore's capacity planner
    /// over a trace and a device catalogue.
    Plan(PlanArgs),
    /// Replay a trace through a policy at virtual time on modelled devices:
    /// the simulator (same trace and settings, same report).
    Sim(SimArgs),
    /// Print the shell completion script for SHELL (bash, zsh, fish).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: ShellArg,
    },
    /// Print the manual page (roff), for man(1).
    Manpage,
}

#[derive(Args, Debug)]
pub struct MigrateArgs {
    /// The mount point [default: the only tierfs mounted].
    pub mountpoint: Option<PathBuf>,
    /// Only say what would move.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct TraceArgs {
    #[command(subcommand)]
    pub cmd: TraceCmd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TraceFormatArg {
    /// SNIA / MSR Cambridge CSV (Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime).
    Msr,
    /// The text blkparse prints (its Q events).
    Blkparse,
}

#[derive(Subcommand, Debug)]
pub enum TraceCmd {
    /// Turn a block trace into a tierfs trace: each disk a directory, its
    /// address space cut into files of --file-size bytes.
    Import {
        /// The block trace ("-" for standard input).
        input: PathBuf,
        /// The tierfs trace to write.
        #[arg(long)]
        out: PathBuf,
        /// The input's format [default: guessed from its first line].
        #[arg(long, value_enum)]
        format: Option<TraceFormatArg>,
        /// Size of the files a disk is cut into.
        #[arg(long, default_value = "64M")]
        file_size: String,
    },
    /// Write a synthetic block workload as a trace: one of HybridStore's
    /// (Table IV: SR1..SR3, RR1..RR3, SW1..SW3, RW1..RW3), or `zipf`,
    /// `scan` or `shifting` (Zipf popularity over 64-KiB regions of a
    /// 4-GiB disk, with sequential scans, or moving at each third).
    Synth {
        /// The workload's name.
        name: String,
        /// The trace to write.
        #[arg(long)]
        out: PathBuf,
        /// How long a stretch of the workload [default: 60s; zipf, scan
        /// and shifting 4000s, 200 000 requests].
        #[arg(long)]
        duration: Option<String>,
        /// The address space the requests fall in (Table IV's) [default: 1T].
        #[arg(long)]
        span: Option<String>,
        /// Size of the files the address space is cut into [default: 1G;
        /// zipf, scan and shifting 256K].
        #[arg(long)]
        file_size: Option<String>,
        /// Random seed.
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
    /// Record what a mount sees (reads, writes, opens, creates, renames,
    /// removals; no file contents) into a trace, until --duration has
    /// passed or Ctrl-C.
    Record {
        /// The mount point [default: the only tierfs mounted].
        mountpoint: Option<PathBuf>,
        /// The trace to write (by the mount's daemon).
        #[arg(long, required_unless_present = "stop")]
        out: Option<PathBuf>,
        /// Stop after this long [default: at Ctrl-C].
        #[arg(long)]
        duration: Option<String>,
        /// End a recording left running (its command was killed).
        #[arg(long, conflicts_with_all = ["out", "duration"])]
        stop: bool,
    },
    /// Summarise a trace: its header, requests, files, bytes and length.
    Show {
        /// The trace.
        trace: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// The workload, as a tierfs trace (`tierfs trace import` or `synth`).
    #[arg(long)]
    pub trace: PathBuf,
    /// The device catalogue (TOML) [default: HybridStore's four devices,
    /// as examples/devices.toml].
    #[arg(long)]
    pub devices: Option<PathBuf>,
    /// Requests per second to provision for [default: the trace's rate].
    #[arg(long)]
    pub iops: Option<f64>,
    /// The whole data set; what the trace does not touch is cold data
    /// [default: only what the trace touches].
    #[arg(long)]
    pub capacity: Option<String>,
    /// How long the devices must serve (wear) and draw power (cost).
    #[arg(long, default_value = "5y")]
    pub lifetime: String,
    /// Leave out the wear constraint (flash may wear out early).
    #[arg(long)]
    pub no_wear: bool,
    /// Share of a flash block one erase frees (1: no write amplification).
    #[arg(long, default_value_t = 0.5)]
    pub alpha: f64,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["trace", "workload"])))]
pub struct SimArgs {
    /// The trace (`tierfs bench workload --trace`, `trace record`,
    /// `trace import`, `trace synth`).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Instead of a trace, a workload generated as it runs (no mount):
    /// its preparation, an optional warm-up and the measured run
    /// (`tierfs bench workload` names them; not postmark).
    #[arg(long, conflicts_with = "trace")]
    pub workload: Option<String>,
    /// With --workload: size relative to the papers' configuration.
    #[arg(long, default_value_t = 0.02, requires = "workload")]
    pub scale: f64,
    /// With --workload: random seed.
    #[arg(long, default_value_t = 42, requires = "workload")]
    pub seed: u64,
    /// With --workload: a warm-up (another seed) this long in virtual
    /// time, with the device models paused, before the measured run.
    #[arg(long, requires = "workload")]
    pub warmup: Option<String>,
    /// The policy (as `mount --policy`).
    #[arg(long, default_value = "dynamic-hot-dst")]
    pub policy: String,
    /// The interval of an interval policy.
    #[arg(long)]
    pub interval: Option<String>,
    /// Most user data the SSD holds.
    #[arg(long)]
    pub ssd_capacity: String,
    /// Device models: ssd=PROFILE,hdd=PROFILE[,cache=SIZE] (as `mount
    /// --emulate`).
    #[arg(long, default_value = "ssd=ssd-sata,hdd=hdd-7200,cache=2M")]
    pub emulate: String,
    /// More device profiles (TOML), as `mount --profiles`.
    #[arg(long)]
    pub profiles: Option<PathBuf>,
    /// Give the directories the trace names their own policies (the mixed
    /// workload's type-aware configuration).
    #[arg(long)]
    pub type_aware: bool,
    /// Length of the measured run in virtual time [default: until the
    /// trace ends; a generated time-bounded workload: 60s].
    #[arg(long)]
    pub duration: Option<String>,
    /// Cost of a request outside the devices [default: the trace's own,
    /// as recorded without emulation; a generated workload: its model's,
    /// 20us a request and more for opens, buffers and bytes, as measured
    /// on a two-core machine].
    #[arg(long)]
    pub overhead: Option<String>,
    /// Halve every access counter this often (as `mount --aging`).
    #[arg(long, value_name = "DURATION", default_value = "10m")]
    pub aging: String,
    /// As `mount --admission`.
    #[arg(long, value_name = "RULE")]
    pub admission: Option<String>,
    /// As `mount --aging-rule`.
    #[arg(long, value_name = "RULE")]
    pub aging_rule: Option<String>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct WhereArgs {
    /// Files (or, with -r, directories) on a tierfs mount.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// List the files below directories.
    #[arg(short, long)]
    pub recursive: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ShellArg {
    /// GNU bash.
    Bash,
    /// Z shell.
    Zsh,
    /// fish.
    Fish,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum UringArg {
    /// Whenever the kernel offers them.
    Auto,
    /// The same, warning when the kernel does not offer them.
    Always,
    /// Never: requests come from /dev/fuse.
    Never,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum IoModeArg {
    /// Passthrough when the kernel and privileges allow it, else userspace.
    Auto,
    /// Kernel FUSE passthrough: reads and writes bypass the daemon.
    Passthrough,
    /// Every read and write goes through the daemon.
    Userspace,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HeatArg {
    /// eBPF where it can run (root, a kernel with BTF), else opens.
    Auto,
    /// eBPF tracepoints see the kernel's reads and writes of passthrough
    /// files; the mount fails if they cannot be loaded.
    Ebpf,
    /// An open of a passthrough file counts as one access to the whole
    /// file; files whose chunks are counted (hystor) take the userspace path.
    Opens,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TierArg {
    /// Where the policy puts new files.
    Auto,
    /// Always the SSD.
    Ssd,
    /// Always the HDD.
    Hdd,
}

#[derive(Args, Debug, Clone)]
pub struct MountArgs {
    /// The fast directory (SSD tier).
    pub ssd_dir: PathBuf,
    /// The big slow directory (HDD tier).
    pub hdd_dir: PathBuf,
    /// Where to mount; must be an empty directory.
    pub mountpoint: PathBuf,
    /// Where the state database lives [default: SSD_DIR/.tierfs/state].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// How file data moves: passthrough is near-native speed, userspace
    /// sees (and counts) every request.
    #[arg(long, value_enum, default_value_t = IoModeArg::Auto)]
    pub io_mode: IoModeArg,
    /// What counts the requests the kernel serves by itself with
    /// passthrough I/O (their heat).
    #[arg(long, value_enum, default_value_t = HeatArg::Auto)]
    pub heat: HeatArg,
    /// The architecture: dynamic-hot-dst, interval-hot-dst, plain-cold-dst,
    /// dynamic-cold-dst, dynamic-cold-dst-bg, on-demand-cache,
    /// interval-cache, hdd-only, ssd-only or hystor (small files by
    /// dynamic-hot-dst, the hot chunks of files past the sieve on the SSD).
    #[arg(long, default_value = "dynamic-hot-dst", value_name = "NAME")]
    pub policy: String,
    /// Treat the SSD as holding at most this much user data (e.g. 512M,
    /// 10G) [default: its real size].
    #[arg(long, value_name = "SIZE")]
    pub ssd_capacity: Option<String>,
    /// Files larger than this never enter the SSD; SSD files that grow past
    /// it are moved off (type-aware sieving).
    #[arg(long, default_value = "1M", value_name = "SIZE")]
    pub sieve: String,
    /// Interval of interval-hot-dst and interval-cache (e.g. 5s, 80s).
    #[arg(long, default_value = "80s", value_name = "DURATION")]
    pub interval: String,
    /// Chunk size of split files under hystor: a power of two from 4K to 1M.
    #[arg(long, default_value = "64K", value_name = "SIZE")]
    pub chunk: String,
    /// How often hystor chooses the chunks on the SSD (Hystor's period).
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub chunk_period: String,
    /// Write-back area, percent of the SSD capacity (0: none): writes to
    /// files on the HDD land on the SSD and are written back later
    /// (Hystor's write-back area; per directory: user.tierfs.write-back).
    #[arg(long, default_value = "0", value_name = "PERCENT")]
    pub write_back: String,
    /// Only writes of at most this size enter the write-back area (bigger
    /// ones stream to the HDD at its bandwidth and would flush the area).
    #[arg(long, default_value = "64K", value_name = "SIZE")]
    pub write_back_max: String,
    /// At unmount, leave dirty chunks of the write-back area on the SSD
    /// (they are written back after the next mount) instead of writing
    /// them all back first.
    #[arg(long)]
    pub no_flush_on_unmount: bool,
    /// measured: how much cheaper the other tier must be before a file
    /// moves (δ; 1 moves a file when the other tier costs under half; per
    /// directory: user.tierfs.delta).
    #[arg(long, default_value = "1", value_name = "DELTA")]
    pub delta: String,
    /// Which read of a file from the HDD may admit it to the SSD (the
    /// dynamic and caching policies): first (any read after which its
    /// counter passes the admission threshold) or repeat (only a request
    /// before which it already did: a file read once in one request is not
    /// admitted; one read once in several is, at its second) [default:
    /// first].
    #[arg(long, value_name = "RULE")]
    pub admission: Option<String>,
    /// What halves the counters besides --aging: period (nothing else),
    /// requests (also every 10 accesses per file on the SSD, once a file
    /// has had to leave it for room) or shift
    /// (also when the SSD's share of the requests fell well below its
    /// average: the hot set moved) [default: period].
    #[arg(long, value_name = "RULE")]
    pub aging_rule: Option<String>,
    /// measured: moves per second per policy directory (its token bucket).
    #[arg(long, default_value = "1", value_name = "MOVES")]
    pub measured_rate: f64,
    /// Most bytes written to the SSD per day (e.g. 40G/day); past it,
    /// writes that can go to the HDD do (the write regulator).
    #[arg(long, value_name = "SIZE/day")]
    pub ssd_write_budget: Option<String>,
    /// Bytes the SSD may be written over its life (its TBW rating, e.g.
    /// 600T); with --ssd-lifetime it sets the daily budget, and it gives
    /// `tierfs stats` a projected lifetime.
    #[arg(long, value_name = "SIZE")]
    pub ssd_endurance: Option<String>,
    /// How long the SSD must last (e.g. 5y); with --ssd-endurance.
    #[arg(long, value_name = "DURATION")]
    pub ssd_lifetime: Option<String>,
    /// Serve Prometheus metrics on GET http://ADDR:PORT/metrics (e.g.
    /// 127.0.0.1:9877; off by default).
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<String>,
    /// Most bytes per second background migrations copy (0: unlimited).
    #[arg(long, default_value = "64M", value_name = "SIZE")]
    pub migrate_rate: String,
    /// Background moves per second while the mount is busy (1 000
    /// requests a second or more): as Hystor's data mover, tierfs
    /// reorganizes in idle times and holds moves back under load (0: no
    /// limit). Pins and evictions are never held back.
    #[arg(long, default_value = "10", value_name = "MOVES")]
    pub busy_moves: f64,
    /// Let the HDD sleep: answer what the SSD and the state database can
    /// answer without it, put new files on the SSD, and hold background
    /// work that would reach the HDD (moves, write-backs, chunk moves,
    /// cleaning ahead of writers) until it is awake for another reason,
    /// the held files reach --quiet-hold, or --quiet-window. A directory
    /// opts out with `setfattr -n user.tierfs.quiet -v off DIR`.
    #[arg(long)]
    pub quiet_hdd: bool,
    /// With --quiet-hdd: the HDD counts as asleep after this long without
    /// I/O (about the drive's own spin-down time, `hdparm -S`); a request
    /// after such a pause is a wake-up in `tierfs stats`.
    #[arg(long, default_value = "10m", value_name = "DURATION")]
    pub hdd_idle: String,
    /// With --quiet-hdd: bytes of files held on the SSD in place of the HDD
    /// that make them go to the HDD, awake or not [default: 10% of the SSD
    /// capacity].
    #[arg(long, value_name = "SIZE")]
    pub quiet_hold: Option<String>,
    /// With --quiet-hdd: a daily window, UTC, in which held work goes to
    /// the HDD (e.g. 02:00-04:00).
    #[arg(long, value_name = "HH:MM-HH:MM")]
    pub quiet_window: Option<String>,
    /// SSD watermarks, percent of the capacity: once usage passes HIGH the
    /// cleaner evicts the coldest files ahead of writers, down to LOW
    /// (100,100: only when a write or a migration waits for room, as the
    /// Loris architectures do; in -o options separate with ':').
    #[arg(long, default_value = "98,95", value_name = "HIGH,LOW")]
    pub watermarks: String,
    /// Tier for new files; auto lets the policy decide.
    #[arg(long, value_enum, default_value_t = TierArg::Auto)]
    pub placement: TierArg,
    /// Threads handling requests [default: CPUs, at least 2]. More help
    /// many concurrent clients in userspace mode on slow disks; on a small
    /// machine more threads cost more in wake-ups than they gain.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Let other users use the mount (default: on when run as root).
    #[arg(long, overrides_with = "no_allow_other")]
    pub allow_other: bool,
    /// Only the mounting user may use the mount.
    #[arg(long)]
    pub no_allow_other: bool,
    /// Emulate devices, for experiments: ssd=PROFILE,hdd=PROFILE[,cache=SIZE]
    /// (in -o options separate with ':' instead of ','). Built-in profiles:
    /// hdd-7200, ssd-sata, hdd-15k, ssd-slc; cache is a modelled RAM cache
    /// per device (Loris ran with 64M). Implies userspace I/O.
    #[arg(long, value_name = "SPEC")]
    pub emulate: Option<String>,
    /// A TOML file with more device profiles for --emulate.
    #[arg(long, value_name = "FILE")]
    pub profiles: Option<PathBuf>,
    /// Do not collect access statistics (to measure their cost; tiering
    /// then sees no heat).
    #[arg(long)]
    pub no_stats: bool,
    /// How long the kernel may cache names, attributes and the absence of a
    /// name (0 = not at all). Changes through the mount, and tierfs's own
    /// (migrations), show at once whatever this is; changes made directly
    /// in the tier directories while mounted show within it, if at all.
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    pub cache_timeout: String,
    /// After answering a request, a request thread watches for the next one
    /// this long before it sleeps (e.g. 200us; 0 = never). Spends up to this
    /// much CPU per request to spare a client that sends one request after
    /// another the wake-up of a sleeping thread.
    #[arg(long, value_name = "DURATION", default_value = "200us")]
    pub linger: String,
    /// Take requests over FUSE's io_uring rings where the kernel offers
    /// them (Linux 6.14+ with the fuse module's enable_uring set): auto
    /// (in either I/O mode), always (the same, with a warning when the
    /// kernel does not offer them), or never (read /dev/fuse).
    #[arg(long, value_enum, default_value_t = UringArg::Auto)]
    pub io_uring: UringArg,
    /// Halve every access counter this often, so old heat fades (e.g. 10m, 1h; 0 = never).
    #[arg(long, value_name = "DURATION", default_value = "10m")]
    pub aging: String,
    /// Detach and run in the background once mounted.
    #[arg(long)]
    pub daemon: bool,
    /// Log file (default: stderr in the foreground, STATE_DIR/tierfs.log as a daemon).
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// More logging (-v debug, -vv trace).
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Mount options, comma-separated, as in /etc/fstab: key=value for any
    /// long option above (io_mode=userspace), flags by name (allow_other);
    /// generic mount options (rw, nofail, x-systemd.*, ...) are ignored.
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
}

#[derive(Args, Debug)]
pub struct UmountArgs {
    /// The mount point.
    pub mountpoint: PathBuf,
    /// Seconds to wait for the daemon to finish.
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
}

#[derive(Args, Debug)]
pub struct StatsArgs {
    /// The mount point [default: the only tierfs mounted].
    pub mountpoint: Option<PathBuf>,
    /// One file's statistics and placement instead.
    #[arg(long, value_name = "PATH", conflicts_with = "mountpoint")]
    pub file: Option<PathBuf>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// Refresh continuously, like top (Ctrl-C to stop).
    #[arg(long)]
    pub watch: bool,
    /// Refresh interval for --watch, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub interval_ms: u64,
    /// How many of the hottest files to list.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
}

#[derive(Args, Debug)]
pub struct PolicyArgs {
    #[command(subcommand)]
    pub cmd: PolicyCmd,
}

#[derive(Subcommand, Debug)]
pub enum PolicyCmd {
    /// Set the policy of a directory (and everything below it).
    Set {
        /// A directory on a tierfs mount.
        path: PathBuf,
        /// The policy name.
        policy: String,
        /// Sieve for this subtree (e.g. 1M).
        #[arg(long)]
        sieve: Option<String>,
        /// Interval for this subtree (e.g. 80s).
        #[arg(long)]
        interval: Option<String>,
    },
    /// Remove a directory's policy, sieve and interval: it inherits again.
    Unset {
        /// A directory on a tierfs mount.
        path: PathBuf,
    },
    /// Pin a file or directory to a tier (ssd, hdd) or remove the pin (none).
    Pin {
        /// A file or directory on a tierfs mount.
        path: PathBuf,
        /// ssd, hdd or none.
        #[arg(value_parser = ["ssd", "hdd", "none"])]
        tier: String,
    },
    /// List every pin, one per line: TIER, STATE (dir; file: there, or
    /// pending while its move waits) and PATH, separated by tabs.
    #[command(visible_alias = "list-pins")]
    Pins {
        /// The mount point [default: the only tierfs mounted].
        mountpoint: Option<PathBuf>,
        /// Machine-readable output (with each file's placement).
        #[arg(long)]
        json: bool,
    },
    /// Show the policy tree: every directory with settings and what is in force.
    Show {
        /// The mount point [default: the only tierfs mounted].
        mountpoint: Option<PathBuf>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub cmd: BenchCmd,
}

#[derive(Subcommand, Debug)]
pub enum BenchCmd {
    /// Prepare and run one workload in DIR: mail, postmark (the real one),
    /// fileserver, webserver, webserver-zipf, shifting, mixed, db.
    Workload {
        /// Workload name.
        name: String,
        /// Directory to run in (usually on a tierfs mount).
        dir: PathBuf,
        /// Size relative to the papers' configuration.
        #[arg(long, default_value_t = 0.1)]
        scale: f64,
        /// Random seed.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Length of time-bounded workloads.
        #[arg(long, default_value = "30s")]
        duration: String,
        /// Instead of --duration: end a time-bounded workload after this
        /// many operations per file of its set (the same requests however
        /// fast the mount is).
        #[arg(long, value_name = "N")]
        ops_per_file: Option<u64>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// Reuse a file set prepared before.
        #[arg(long)]
        no_prepare: bool,
        /// Record the workload's trace (DIR must be on a tierfs mount; the
        /// trace marks the preparation, the warm-up and each operation of
        /// the run, for `tierfs sim`).
        #[arg(long)]
        trace: Option<PathBuf>,
        /// With --trace: a warm-up run (another seed) this long before the
        /// measured run.
        #[arg(long)]
        warmup: Option<String>,
    },
    /// Architectures x SSD sizes x workloads on emulated devices; writes a
    /// results folder (CSV, Markdown tables, SVG charts, findings).
    Sweep {
        /// small (under 15 minutes on two cores), compare (small's workloads
        /// and postmark), full (the papers' sizes), extents (the database
        /// workload at an SSD of 10 % of its data), writeback (mail and
        /// postmark, hystor with write-back areas), measured (a degrading
        /// SSD) or blocks (block traces against the offline optimum, LRU and
        /// S3-FIFO; with --sim).
        #[arg(long, default_value = "small")]
        preset: String,
        /// Results folder.
        #[arg(long, default_value = "results/small")]
        out: PathBuf,
        /// Scratch directory for the runs.
        #[arg(long, default_value = "/tmp/tierfs-sweep")]
        work: PathBuf,
        /// Only these workloads of the preset.
        #[arg(long)]
        only: Vec<String>,
        /// Only these architectures (labels as in the tables, e.g.
        /// dynamic-cold-dst or interval-hot-dst-4s); the baselines always run.
        #[arg(long)]
        arch: Vec<String>,
        /// SSD sizes in percent of the working set instead of the preset's
        /// (e.g. --sizes 75 or --sizes 10,50).
        #[arg(long, value_delimiter = ',')]
        sizes: Vec<u32>,
        /// Workload scale instead of the preset's (1.0: the papers' sizes);
        /// mail is scaled in the same proportion.
        #[arg(long)]
        scale: Option<f64>,
        /// Run the preset in the simulator: each workload is recorded once
        /// (without emulation) and every architecture and size replayed at
        /// virtual time.
        #[arg(long)]
        sim: bool,
        /// With --sim: keep the recorded traces in this folder and reuse
        /// those already there.
        #[arg(long)]
        traces: Option<PathBuf>,
        /// Run each architecture and size this many times and keep the
        /// run with the median throughput (live runs only: the simulator
        /// gives the same figures every time).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=9))]
        repeat: u32,
        /// With --sim: simulate each interval architecture with the
        /// workload starting at this many evenly spaced phases of its
        /// interval and keep the run with the median throughput (on a
        /// mount, where the interval runs fall depends on when the
        /// workload starts); 4 unless given.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=32))]
        phases: Option<u32>,
        /// Run on the modelled devices of `bench devices up` (their folder;
        /// /tmp/tierfs-devices when not given) instead of emulating the
        /// devices in tierfs, with tierfs's peers beside it on every
        /// workload: hdd-alone, ssd-alone, mergerfs over the HDD and
        /// mergerfs's tiered-cache recipe (mergerfs-cache).
        #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = DEVICES_DIR)]
        devices: Option<PathBuf>,
    },
    /// Compare two sweeps of one preset (a sweep on the modelled devices
    /// and the same preset emulated, say): each finding's verdict in both,
    /// with the note from FIRST/comparison-notes.md ("N: sentence") on each
    /// that differs, and every run side by side; writes
    /// FIRST/comparison.md.
    Compare {
        /// The first results folder.
        first: PathBuf,
        /// The second results folder.
        second: PathBuf,
    },
    /// Modelled devices under the kernel: an "SSD" and an "HDD" that are
    /// loop devices (with direct I/O) over a server delaying every request
    /// as a device profile says, formatted ext4 and mounted in DIR/ssd and
    /// DIR/hdd; `bench sweep --devices DIR` runs on them.
    Devices {
        #[command(subcommand)]
        cmd: DevicesCmd,
    },
    /// Re-render a results folder (tables, charts, findings, README) from
    /// its rows.json, merging its notes.md.
    Report {
        /// The results folder.
        dir: PathBuf,
    },
    /// Compare a simulated sweep with a live one (Kendall's tau of the
    /// architectures' order, throughput side by side); writes fidelity.md
    /// into the simulated results folder.
    Fidelity {
        /// The live results folder.
        #[arg(long)]
        live: PathBuf,
        /// The simulated results folder.
        #[arg(long)]
        sim: PathBuf,
    },
}

/// Where the modelled devices live unless told.
pub const DEVICES_DIR: &str = "/tmp/tierfs-devices";

#[derive(Subcommand, Debug)]
pub enum DevicesCmd {
    /// Set the devices up (root: loop devices, mkfs.ext4, mount).
    Up(DevicesUpArgs),
    /// Take the devices down: what is mounted over them, their file
    /// systems, loop devices, servers and images (also after a crash).
    Down {
        /// Their folder.
        #[arg(long, default_value = DEVICES_DIR)]
        dir: PathBuf,
    },
    /// Each device's model counters (requests, busy time, spin-ups,
    /// standby time) and the block layer's (/sys/block/loopN/stat).
    Status {
        /// Their folder.
        #[arg(long, default_value = DEVICES_DIR)]
        dir: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Tell a device's model: pause (requests cost nothing), resume,
    /// reset (a cold start: drive cache and head position forgotten) or
    /// spin-down (standby now, as hdparm -y).
    Model {
        /// ssd or hdd.
        device: String,
        /// pause, resume, reset or spin-down.
        command: String,
        /// Their folder.
        #[arg(long, default_value = DEVICES_DIR)]
        dir: PathBuf,
    },
    /// Serve one device (started by `up`).
    #[command(hide = true)]
    Serve {
        /// What to serve, as JSON.
        #[arg(long)]
        spec: String,
    },
}

#[derive(Args, Debug)]
pub struct DevicesUpArgs {
    /// Their folder.
    #[arg(long, default_value = DEVICES_DIR)]
    pub dir: PathBuf,
    /// The SSD's profile (as --emulate names them).
    #[arg(long, default_value = "ssd-sata")]
    pub ssd: String,
    /// The HDD's profile.
    #[arg(long, default_value = "hdd-7200")]
    pub hdd: String,
    /// Only this device (ssd or hdd).
    #[arg(long)]
    pub only: Option<String>,
    /// The SSD's size (a sparse image).
    #[arg(long, default_value = "2G")]
    pub ssd_size: String,
    /// The HDD's size.
    #[arg(long, default_value = "8G")]
    pub hdd_size: String,
    /// Each drive's own cache (reads of cached blocks free, writes
    /// absorbed); 0: none, every write waits for the media.
    #[arg(long, default_value = "0")]
    pub cache: String,
    /// The HDD spins down after this long idle (as hdparm -S); the next
    /// request waits for --spinup. Never unless given.
    #[arg(long, value_name = "IDLE")]
    pub standby: Option<String>,
    /// How long the HDD takes to spin up from standby.
    #[arg(long, default_value = "8s")]
    pub spinup: String,
    /// More device profiles (TOML), as `mount --profiles`.
    #[arg(long)]
    pub profiles: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Folder for the demo (created; its ssd/, hdd/ and mnt/ are reset).
    #[arg(long, default_value = "tierfs-demo")]
    pub dir: PathBuf,
}

/// Options mount(8) and fstab pass that concern the kernel or mount(8), not tierfs.
const GENERIC: &[&str] = &[
    "rw",
    "ro",
    "dev",
    "nodev",
    "suid",
    "nosuid",
    "exec",
    "noexec",
    "auto",
    "noauto",
    "user",
    "users",
    "nouser",
    "owner",
    "group",
    "nofail",
    "_netdev",
    "defaults",
    "atime",
    "noatime",
    "relatime",
    "norelatime",
    "strictatime",
    "diratime",
    "nodiratime",
    "sync",
    "async",
    "dirsync",
    "default_permissions",
    "allow_root",
    "auto_unmount",
    "fsname",
    "subtype",
];

/// Rewrites `-o a=b,c` into `--a b --c` (dashes for underscores), dropping
/// generic mount options. `allow_other` becomes `--allow-other`.
pub fn expand_options(opts: &[String]) -> Result<Vec<OsString>, String> {
    let mut out = Vec::new();
    for o in opts.iter().flat_map(|s| s.split(',')) {
        let o = o.trim();
        if o.is_empty() {
            continue;
        }
        let (k, v) = match o.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (o, None),
        };
        if GENERIC.contains(&k) || k.starts_with("x-") || k.starts_with("comment=") {
            continue;
        }
        if k.is_empty() {
            return Err(format!("bad mount option {o:?}"));
        }
        out.push(OsString::from(format!("--{}", k.replace('_', "-"))));
        if let Some(v) = v {
            out.push(OsString::from(v));
        }
    }
    Ok(out)
}

/// Replaces every `-o OPTS` (or `-oOPTS`) in argv by its expansion.
pub fn expand_in_argv(argv: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut it = argv.into_iter();
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        if s == "-o" {
            let v = it.next().ok_or("-o needs a value")?;
            out.extend(expand_options(&[v.to_string_lossy().into_owned()])?);
        } else if let Some(v) = s.strip_prefix("-o") {
            out.extend(expand_options(&[v.to_string()])?);
        } else {
            out.push(a);
        }
    }
    Ok(out)
}

/// `mount -t fuse.tierfs SSD:HDD MNT -o opts` runs `tierfs SSD:HDD MNT -o
/// opts` (through mount.fuse3), or argv[0] is `mount.tierfs`. Turns that
/// into `tierfs mount SSD HDD MNT --daemon -o opts`.
pub fn helper_form(argv: Vec<OsString>) -> Vec<OsString> {
    let prog = argv.first().and_then(|a| std::path::Path::new(a).file_name()).map(|n| n.to_os_string());
    let is_helper_name = prog.as_ref().is_some_and(|p| p.to_string_lossy().starts_with("mount."));
    let first = argv.get(1).map(|a| a.to_string_lossy().into_owned()).unwrap_or_default();
    let known = [
        "mount",
        "umount",
        "stats",
        "policy",
        "bench",
        "demo",
        "where",
        "migrate",
        "completions",
        "manpage",
        "help",
        "-h",
        "--help",
        "-V",
        "--version",
    ];
    if !is_helper_name && (known.contains(&first.as_str()) || !first.contains(':')) {
        return argv;
    }
    let Some((ssd, hdd)) = first.split_once(':') else { return argv };
    let mut out = vec![OsString::from("tierfs"), "mount".into(), ssd.into(), hdd.into()];
    let mut foreground = false;
    for a in argv.into_iter().skip(2) {
        if a == "-f" {
            foreground = true;
        } else {
            out.push(a);
        }
    }
    if !foreground {
        out.push("--daemon".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fstab_options_become_flags() {
        let o = expand_options(&["rw,allow_other,io_mode=userspace,x-systemd.automount,placement=ssd".into()]).unwrap();
        let o: Vec<_> = o.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        assert_eq!(o, ["--allow-other", "--io-mode", "userspace", "--placement", "ssd"]);
    }

    #[test]
    fn helper_form_is_rewritten() {
        let a: Vec<OsString> = ["/sbin/tierfs", "/s:/h", "/mnt", "-o", "rw"].iter().map(OsString::from).collect();
        let b: Vec<_> = helper_form(a).iter().map(|s| s.to_string_lossy().into_owned()).collect();
        assert_eq!(b, ["tierfs", "mount", "/s", "/h", "/mnt", "-o", "rw", "--daemon"]);
        let a: Vec<OsString> = ["tierfs", "mount", "a", "b", "c"].iter().map(OsString::from).collect();
        assert_eq!(helper_form(a.clone()), a);
    }
}
