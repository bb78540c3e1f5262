//! The sweep: architectures × SSD sizes × workloads on emulated devices,
//! or on modelled devices under the kernel ([`crate::devices`]) with
//! tierfs's peers beside it ([`crate::peers`]).
//!
//! For each workload the HDD-only baseline runs first; the size of the
//! file set it leaves is the working set, and the SSD sizes are 25/50/75 %
//! of it. Every run gets fresh directories and a fresh mount; the file set
//! is prepared with the device models paused (it is not measured), then
//! the models restart cold and the workload runs (a preset may warm up
//! with the models on, and then they are warm).
//!
//! On devices the models are the devices' servers: paused while the file
//! set is prepared, and their restart is a cold start of the kernel's
//! page cache for the two file systems too. The measured run ends with a
//! write-back of both file systems (syncfs), whose time counts in the
//! run: what the workload wrote costs the devices' time whenever the
//! kernel writes it.

use crate::devices::{disk::DiskStats, BlockStat, Devices};
use crate::peers::{self, MoverCounts, Peer};
use crate::workload::{self, Params, Report, Workload};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tierfs_core::report::{ask, Request, Response, StatusReport};
use tierfs_core::runtime;

/// One architecture as the sweep runs it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Arch {
    /// Label in tables and charts.
    pub label: String,
    /// `--policy`.
    pub policy: String,
    /// `--interval`, if any.
    pub interval: Option<String>,
    /// Per-directory policies from the workload (the mixed workload).
    pub type_aware: bool,
    /// More mount options (e.g. hystor's `--chunk-period`).
    #[serde(default)]
    pub extra: Vec<String>,
    /// Not tierfs but a peer (on devices only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<Peer>,
}

impl Arch {
    /// A policy under its own name.
    pub fn plain(policy: &str) -> Self {
        Arch {
            label: policy.into(),
            policy: policy.into(),
            interval: None,
            type_aware: false,
            extra: Vec::new(),
            peer: None,
        }
    }
    /// A peer of tierfs.
    pub fn peer(p: Peer) -> Self {
        Arch { peer: Some(p), ..Arch::plain(p.label()) }
    }
    /// Whether it runs at each SSD size (else once, as the baselines).
    pub fn sized(&self) -> bool {
        self.peer.is_none_or(|p| p.sized())
    }
    /// A policy with more mount options.
    pub fn with_options(policy: &str, extra: &[&str]) -> Self {
        Arch { extra: extra.iter().map(|s| s.to_string()).collect(), ..Arch::plain(policy) }
    }
    /// An interval policy with its interval in the label.
    pub fn interval(policy: &str, interval: &str) -> Self {
        Arch {
            label: format!("{policy}-{interval}"),
            policy: policy.into(),
            interval: Some(interval.into()),
            ..Arch::plain(policy)
        }
    }
    /// Per-directory policies (the root keeps `policy`).
    pub fn type_aware(policy: &str) -> Self {
        Arch { label: "type-aware".into(), type_aware: true, ..Arch::plain(policy) }
    }
}

/// What to run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Preset {
    /// Name.
    pub name: String,
    /// Workload settings (scale, seed, run length).
    pub params: Params,
    /// Scale of the mail workload (transaction-bound, so sized apart).
    pub mail_scale: f64,
    /// Before the measured run, the workload runs this long (with another
    /// seed) with the device models paused: a fast-forward to the steady
    /// state the papers' half-hour runs reach, so that a short run measures
    /// placement after warm-up rather than the warm-up itself.
    pub warmup: Duration,
    /// The warm-up runs with the device models on instead: where the
    /// steady state is a state of the device too (an SSD whose collector
    /// has fallen behind), a fast-forward with the models paused would
    /// start the measured run on a fresh device.
    #[serde(default)]
    pub warmup_emulated: bool,
    /// The warm-up makes this many operations per file of the workload's
    /// set and then idles until `warmup` has passed (the interval policies
    /// act meanwhile), instead of running for `warmup`: what it leaves (a
    /// web server's log, the files a file server made) is then the same
    /// however fast the machine is, and so is the working set the SSD
    /// sizes are measured against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_ops_per_file: Option<u64>,
    /// Device profiles (SSD, HDD) and the modelled RAM cache.
    pub ssd: String,
    /// See `ssd`.
    pub hdd: String,
    /// Modelled RAM cache per device, bytes.
    pub cache: u64,
    /// SSD sizes, percent of the working set.
    pub sizes: Vec<u32>,
    /// Workloads and the architectures to run on each.
    pub plan: Vec<(String, Vec<Arch>)>,
    /// Its workloads are block traces (`crate::blocks`, `params.duration`
    /// long), which only the simulator replays.
    #[serde(default)]
    pub simulated_only: bool,
}

impl Preset {
    /// A preset by name: `small` (under 15 minutes on two cores),
    /// `compare` (small's workloads and the real postmark, the comparison
    /// of `results/devices`), `full`
    /// (the papers' sizes; many hours), `extents` (the database workload
    /// at an SSD of 10 % of its data, sub-file extents against whole files)
    /// `writeback` (mail and the real postmark under hystor with a
    /// write-back area of 0, 20 and 30 %, and the two write caches),
    /// `measured` (the write-heavy `updates` workload on a degrading SSD)
    /// or `blocks` (block traces against the optimum; simulated only).
    pub fn named(name: &str) -> Option<Preset> {
        match name {
            "small" => Some(Preset::small()),
            "compare" => Some(Preset::compare()),
            "full" => Some(Preset::full()),
            "extents" => Some(Preset::extents()),
            "writeback" => Some(Preset::writeback()),
            "measured" => Some(Preset::measured()),
            "blocks" => Some(Preset::blocks()),
            _ => None,
        }
    }

    /// The block traces (`crate::blocks`: zipf, scan, shifting) at SSDs of
    /// 5, 10 and 25 % of their footprint, every architecture the simulator
    /// runs, and dynamic hot-DST under each admission and aging rule; each
    /// run measured against the offline optimum, LRU and S3-FIFO.
    fn blocks() -> Preset {
        let a = Arch::plain;
        let rules = |admission: &str, aging: &str| Arch {
            label: format!("dynamic-hot-dst/{admission}/{aging}"),
            ..Arch::with_options("dynamic-hot-dst", &["--admission", admission, "--aging-rule", aging])
        };
        let archs = vec![
            a("dynamic-hot-dst"),
            rules("first", "period"),
            rules("repeat", "period"),
            rules("first", "shift"),
            rules("repeat", "requests"),
            rules("repeat", "shift"),
            Arch::interval("interval-hot-dst", "80s"),
            a("plain-cold-dst"),
            a("dynamic-cold-dst"),
            a("dynamic-cold-dst-bg"),
            a("on-demand-cache"),
            Arch::interval("interval-cache", "80s"),
            a("write-through-cache"),
        ];
        Preset {
            name: "blocks".into(),
            params: Params { scale: 1.0, seed: 42, duration: crate::blocks::DURATION, ops_per_file: None },
            mail_scale: 1.0,
            warmup: Duration::ZERO,
            warmup_emulated: false,
            warmup_ops_per_file: None,
            ssd: "ssd-sata".into(),
            hdd: "hdd-7200".into(),
            cache: 2 << 20,
            sizes: vec![5, 10, 25],
            plan: crate::blocks::NAMES.iter().map(|w| (w.to_string(), archs.clone())).collect(),
            simulated_only: true,
        }
    }

    /// The expected findings over this preset's runs. A preset of block
    /// traces speaks to none of them, though one of its traces has the
    /// name of a workload they are about (`shifting`): a block trace
    /// replays at its recorded times, so its runs' throughputs are equal
    /// whatever serves them.
    pub fn findings(&self, rows: &[Row]) -> Vec<crate::report::Finding> {
        crate::report::findings(if self.simulated_only { &[] } else { rows })
    }

    fn small() -> Preset {
        let a = Arch::plain;
        let zipf = vec![
            a("dynamic-hot-dst"),
            Arch::interval("interval-hot-dst", "2s"),
            a("dynamic-cold-dst"),
            a("on-demand-cache"),
            Arch::interval("interval-cache", "2s"),
        ];
        let uniform = vec![
            a("dynamic-hot-dst"),
            Arch::interval("interval-hot-dst", "250ms"),
            Arch::interval("interval-hot-dst", "2s"),
            a("on-demand-cache"),
        ];
        Preset {
            name: "small".into(),
            params: Params { scale: 0.02, seed: 42, duration: Duration::from_secs(5), ops_per_file: None },
            mail_scale: 0.004,
            // Longer than the longest interval, so that the interval
            // policies have acted before the measured run too.
            warmup: Duration::from_secs(3),
            warmup_emulated: false,
            // A web server's file is read about 20 times in the warm-up.
            warmup_ops_per_file: Some(20),
            ssd: "ssd-sata".into(),
            hdd: "hdd-7200".into(),
            cache: 2 << 20,
            sizes: vec![25, 50, 75],
            simulated_only: false,
            plan: vec![
                ("webserver-zipf".into(), zipf),
                ("webserver".into(), uniform),
                ("shifting".into(), vec![a("plain-cold-dst"), a("dynamic-cold-dst")]),
                ("fileserver".into(), vec![a("dynamic-hot-dst"), a("on-demand-cache")]),
                ("mail".into(), vec![a("dynamic-hot-dst")]),
                (
                    "mixed".into(),
                    vec![
                        Arch::type_aware("dynamic-hot-dst"),
                        a("dynamic-hot-dst"),
                        a("dynamic-cold-dst"),
                        a("on-demand-cache"),
                    ],
                ),
            ],
        }
    }

    /// The small preset's workloads and the real postmark (at mail's
    /// scale) under hot-DST, cold-DST (new files on the SSD, as the
    /// tiered-cache recipe of mergerfs) and write-back caching.
    fn compare() -> Preset {
        let small = Preset::small();
        let mut plan = small.plan.clone();
        plan.push((
            "postmark".into(),
            ["dynamic-hot-dst", "dynamic-cold-dst", "write-back-cache"].map(Arch::plain).to_vec(),
        ));
        Preset { name: "compare".into(), plan, ..small }
    }

    /// The file-level architectures and `hystor` on the database workload,
    /// at an SSD of 10 % of its data: the sub-file extents finding.
    fn db_archs() -> Vec<Arch> {
        let a = Arch::plain;
        vec![
            // The run is seconds long: the monitor chooses every 5 s.
            Arch::with_options("hystor", &["--chunk-period", "5s"]),
            a("dynamic-hot-dst"),
            Arch::interval("interval-hot-dst", "2s"),
            a("dynamic-cold-dst"),
            a("on-demand-cache"),
        ]
    }

    fn extents() -> Preset {
        let small = Preset::small();
        Preset {
            name: "extents".into(),
            // 6 552 chunks (4 x 102 MiB): at 1 308 the hottest tenth of the
            // chunks is too few for Zipf s = 1.2 to reach its skew. The
            // warm-up (models paused) lasts six chunk periods: the first
            // plan comes a period after the first statistics, and the
            // smooth update then repairs at most 10 % of the area a period.
            params: Params { duration: Duration::from_secs(15), scale: 0.1, ..small.params },
            warmup: Duration::from_secs(30),
            // Six chunk periods of requests, however many that is.
            warmup_ops_per_file: None,
            sizes: vec![10],
            plan: vec![("db".into(), Preset::db_archs())],
            ..small
        }
    }

    /// Hystor with write-back areas of 0, 20 and 30 % of the SSD (Hystor
    /// §7.2's fractions), as architectures of their own.
    fn write_back_archs() -> Vec<Arch> {
        let wb = |pct: &str| Arch {
            label: format!("hystor+wb{pct}"),
            ..Arch::with_options("hystor", &["--write-back", pct])
        };
        vec![Arch::plain("hystor"), wb("20"), wb("30")]
    }

    /// Finding 6: mail and the real postmark at 25, 50 and 75 % of the
    /// working set, hystor with a write-back area of 0, 20 and 30 %; on
    /// mail also the two write caches of the Loris table.
    fn writeback() -> Preset {
        let small = Preset::small();
        let mut mail = Preset::write_back_archs();
        mail.extend([Arch::plain("write-through-cache"), Arch::plain("write-back-cache")]);
        Preset {
            name: "writeback".into(),
            // Twice the small preset's mail: 320 files, 640 transactions,
            // so that a run lasts long enough to be measured (postmark's
            // own clock counts whole seconds; the run is timed here).
            mail_scale: 0.008,
            plan: vec![("mail".into(), mail), ("postmark".into(), Preset::write_back_archs())],
            ..small
        }
    }

    /// Finding 8: the write-heavy `updates` workload on an SSD whose
    /// garbage collection falls behind random writes (`ssd-gc`), measured
    /// against dynamic hot-DST at 25, 50 and 75 % of the working set.
    fn measured() -> Preset {
        let small = Preset::small();
        Preset {
            name: "measured".into(),
            params: Params { duration: Duration::from_secs(20), ..small.params },
            warmup: Duration::from_secs(5),
            // The SSD's collector is behind when the measured run starts,
            // and measured's averages have seen the device as it is.
            warmup_emulated: true,
            warmup_ops_per_file: None,
            ssd: "ssd-gc".into(),
            plan: vec![("updates".into(), vec![Arch::plain("dynamic-hot-dst"), Arch::plain("measured")])],
            ..small
        }
    }

    fn full() -> Preset {
        let a = Arch::plain;
        let all = || {
            vec![
                a("dynamic-hot-dst"),
                Arch::interval("interval-hot-dst", "5s"),
                Arch::interval("interval-hot-dst", "80s"),
                a("plain-cold-dst"),
                a("dynamic-cold-dst"),
                a("dynamic-cold-dst-bg"),
                a("on-demand-cache"),
                Arch::interval("interval-cache", "5s"),
                a("write-through-cache"),
                a("write-back-cache"),
            ]
        };
        let mut mixed = all();
        mixed.insert(0, Arch::type_aware("dynamic-hot-dst"));
        Preset {
            name: "full".into(),
            params: Params { scale: 1.0, seed: 42, duration: Duration::from_secs(1800), ops_per_file: None },
            mail_scale: 1.0,
            warmup: Duration::ZERO,
            warmup_emulated: false,
            warmup_ops_per_file: None,
            ssd: "ssd-sata".into(),
            hdd: "hdd-7200".into(),
            cache: 64 << 20,
            sizes: vec![25, 50, 75],
            simulated_only: false,
            plan: ["mail", "fileserver", "webserver", "webserver-zipf", "shifting"]
                .iter()
                .map(|w| (w.to_string(), all()))
                .chain(["mail", "postmark"].iter().map(|w| (w.to_string(), Preset::write_back_archs())))
                .chain(std::iter::once(("mixed".to_string(), mixed)))
                .chain(std::iter::once((
                    "db".to_string(),
                    // Hystor's own period at the papers' run length.
                    std::iter::once(a("hystor")).chain(Preset::db_archs().into_iter().skip(1)).collect(),
                )))
                .collect(),
        }
    }

    /// Its device models as `mount --emulate` takes them.
    pub fn emulation(&self) -> String {
        format!("ssd={},hdd={},cache={}", self.ssd, self.hdd, self.cache)
    }

    /// Number of runs (baselines included).
    pub fn runs(&self) -> usize {
        let runs = |a: &Arch| if a.sized() { self.sizes.len() } else { 1 };
        self.plan.iter().map(|(_, archs)| 2 + archs.iter().map(runs).sum::<usize>()).sum()
    }

    /// Adds tierfs's peers to every workload (they run on devices only),
    /// the tiered-cache recipe's mover every `every`.
    pub fn with_peers(&mut self, every: Duration) {
        for (_, archs) in &mut self.plan {
            archs.extend(Peer::all(every).map(Arch::peer));
        }
    }

    /// Whether any workload runs a peer.
    pub fn has_peers(&self) -> bool {
        self.plan.iter().any(|(_, archs)| archs.iter().any(|a| a.peer.is_some()))
    }

    /// The settings of `workload`'s measured run.
    pub fn params_for(&self, workload: &str) -> Params {
        let mut p = self.params;
        if workload == "mail" || workload == "postmark" {
            p.scale = self.mail_scale;
        }
        p
    }

    /// How long the warm-up lasts at least: `warmup` when it makes a number
    /// of operations (it idles the rest), else only as long as it runs.
    pub fn warmup_least(&self) -> Duration {
        if self.warmup_ops_per_file.is_some() {
            self.warmup
        } else {
            Duration::ZERO
        }
    }

    /// The warm-up run: the same workload, another seed, `warmup` long
    /// or `warmup_ops_per_file` operations per file.
    pub fn warmup_params(&self, workload: &str) -> Params {
        let mut p = self.params_for(workload);
        p.seed += 1000;
        p.duration = self.warmup;
        p.ops_per_file = self.warmup_ops_per_file;
        p
    }
}

/// One measured run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Row {
    /// Workload.
    pub workload: String,
    /// Architecture label ("hdd-only", "ssd-only" for the baselines).
    pub arch: String,
    /// SSD size, percent of the working set (0 for baselines).
    pub pct: u32,
    /// `--ssd-capacity` in bytes (0: none).
    pub ssd_capacity: u64,
    /// Working set of the workload, bytes.
    pub working_set: u64,
    /// The workload's measure.
    pub report: Report,
    /// Requests served by the SSD / all, since the mount (preparation and
    /// warm-up included).
    pub ssd_hit_ratio: f64,
    /// Moves made (promotions + demotions + copies + drops) since the mount.
    pub moves: u64,
    /// Evictions since the mount.
    pub evictions: u64,
    /// Bytes moved between tiers since the mount.
    pub bytes_moved: u64,
    /// Requests served by the SSD / all, in the measured run alone (None
    /// in results recorded before it was kept).
    #[serde(default)]
    pub run_hit_ratio: Option<f64>,
    /// Seconds the HDD model was busy during the measured run (None before
    /// it was kept, or without emulation).
    #[serde(default)]
    pub hdd_busy_secs: Option<f64>,
    /// Moves, evictions and bytes moved in the measured run alone (None in
    /// results recorded before they were kept).
    #[serde(default)]
    pub run_moves: Option<RunMoves>,
    /// With `--repeat`: the throughput (operations per second) of each
    /// run, in the order they ran; the row is the run with the median one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repeats: Vec<f64>,
    /// A simulated run: the offline optimum and the online cache policies
    /// over the requests it served ([`crate::reference`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<crate::reference::Reference>,
    /// On modelled devices: what the devices did in the measured run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<DevicesRun>,
    /// The tiered-cache recipe's mover over the whole run (preparation
    /// and warm-up included, as tierfs's `moves`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mover: Option<MoverCounts>,
}

/// What the modelled devices did in a measured run and its write-back.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DevicesRun {
    /// Seconds the write-back (syncfs of both file systems) after the
    /// workload took; counted in the run's time.
    pub flush_secs: f64,
    /// Each device's model counters and block-layer counts.
    pub disks: Vec<DiskRun>,
}

/// One device's counts over a measured run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DiskRun {
    /// "ssd" or "hdd".
    pub name: String,
    /// The model's counters.
    pub model: DiskStats,
    /// The block layer's (`/sys/block/loopN/stat`).
    pub block: BlockStat,
}

impl DevicesRun {
    /// The device named `name`.
    pub fn disk(&self, name: &str) -> Option<&DiskRun> {
        self.disks.iter().find(|d| d.name == name)
    }
}

/// The run of `runs` with the median throughput (the lower of the middle
/// two when there are an even number), and every run's throughput in
/// order.
pub fn median_run(runs: Vec<Row>) -> Option<Row> {
    let all: Vec<f64> = runs.iter().map(|r| r.report.ops_per_sec).collect();
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|&a, &b| all[a].total_cmp(&all[b]));
    let mid = *order.get(runs.len().saturating_sub(1) / 2)?;
    let mut row = runs.into_iter().nth(mid)?;
    if all.len() > 1 {
        row.repeats = all;
    }
    Some(row)
}

/// What moved during the measured run, and what reached the HDD model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunMoves {
    /// Promotions, demotions, copies and dropped copies.
    pub moves: u64,
    /// Of those, evictions.
    pub evictions: u64,
    /// Bytes copied between the tiers.
    pub bytes_moved: u64,
    /// Requests that reached the HDD model (its cache's misses).
    pub hdd_requests: u64,
    /// Of the moves, promotions and copies to the SSD (0 in results
    /// recorded before they were kept).
    #[serde(default)]
    pub promotions: u64,
    /// Of the moves, files a write took off the SSD because it found no
    /// room in time (evacuations).
    #[serde(default)]
    pub evacuations: u64,
    /// The moves by why and what: "REASON KIND" (`Reason::LABELS`,
    /// `Move::LABELS`) to how many; in `rows.json` only (empty in results
    /// recorded before they were kept).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_reason: BTreeMap<String, u64>,
}

/// The key of a move in [`RunMoves::by_reason`].
pub fn reason_key(reason: &str, kind: &str) -> String {
    format!("{reason} {kind}")
}

/// What the mount's status says about the measured run alone.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunStats {
    /// SSD requests / all requests between the two reports.
    pub hit_ratio: f64,
    /// Seconds the HDD model was busy between the two reports.
    pub hdd_busy_secs: Option<f64>,
    /// What moved between the two reports.
    pub moves: RunMoves,
}

impl RunStats {
    /// The run between `before` and `after`.
    pub fn between(before: &StatusReport, after: &StatusReport) -> Self {
        let served = |s: &StatusReport, tier: &str| s.tiers.iter().find(|t| t.tier == tier).map_or(0, |t| t.requests);
        let ssd = served(after, "ssd").saturating_sub(served(before, "ssd"));
        let hdd = served(after, "hdd").saturating_sub(served(before, "hdd"));
        let hit_ratio = if ssd + hdd == 0 { 0.0 } else { ssd as f64 / (ssd + hdd) as f64 };
        let busy = |s: &StatusReport| s.emulation.iter().find(|d| d.tier == "hdd").map(|d| d.busy_secs);
        // The model counts nothing while it is paused, but it counted the
        // mount's own requests before the sweep paused it.
        let hdd_busy_secs = busy(after).map(|a| a - busy(before).unwrap_or(0.0));
        let moved = |s: &StatusReport| {
            let m = &s.migrations;
            let hdd_requests = s.emulation.iter().find(|d| d.tier == "hdd").map_or(0, |d| d.requests);
            let evacuate = tierfs_core::policy::Reason::Evacuate.label();
            let evacuated = m.by_reason.iter().filter(|r| r.reason == evacuate).map(|r| r.moves).sum::<u64>();
            let all = m.promotions + m.demotions + m.copies + m.drops;
            [all, m.evictions, m.bytes_moved, hdd_requests, m.promotions + m.copies, evacuated]
        };
        let (a, b) = (moved(after), moved(before));
        let d = |i: usize| a[i].saturating_sub(b[i]);
        let mut by_reason = BTreeMap::new();
        for r in &after.migrations.by_reason {
            let was = before.migrations.by_reason.iter().find(|x| (&x.reason, &x.kind) == (&r.reason, &r.kind));
            let n = r.moves.saturating_sub(was.map_or(0, |x| x.moves));
            if n > 0 {
                by_reason.insert(reason_key(&r.reason, &r.kind), n);
            }
        }
        let moves = RunMoves {
            moves: d(0),
            evictions: d(1),
            bytes_moved: d(2),
            hdd_requests: d(3),
            promotions: d(4),
            evacuations: d(5),
            by_reason,
        };
        RunStats { hit_ratio, hdd_busy_secs, moves }
    }
}

/// How long a phase of a run is expected to take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Length {
    /// Not known.
    Unknown,
    /// Runs for this long.
    Time(Duration),
    /// Writes about this many bytes through
    /// [`workload::write_file`](crate::workload::write_file) (the same
    /// workload's last preparation wrote that much).
    Bytes(u64),
}

/// What the sweep tells as it goes.
#[derive(Clone, Copy, Debug)]
pub enum Progress<'s> {
    /// A run starts; `done` of `total` runs are finished.
    Run {
        /// Runs finished.
        done: usize,
        /// Runs in all.
        total: usize,
        /// Workload and architecture.
        label: &'s str,
    },
    /// A phase of the run starts: preparing, settling, warm-up, measuring.
    Phase {
        /// What it does.
        name: &'static str,
        /// How long it should take.
        length: Length,
    },
    /// A run ended.
    Finished {
        /// Runs finished.
        done: usize,
        /// Runs in all.
        total: usize,
        /// Its result, one line.
        line: &'s str,
    },
}

/// Where and with what the sweep runs.
pub struct Runner<'a> {
    /// The tierfs binary.
    pub bin: PathBuf,
    /// Scratch directory for the runs.
    pub work: PathBuf,
    /// The preset.
    pub preset: &'a Preset,
    /// Told how far the sweep is.
    pub progress: &'a dyn Fn(Progress<'_>),
    /// Bytes the last preparation of each workload wrote (the next one's
    /// expected length).
    pub prepared: std::cell::RefCell<std::collections::HashMap<String, u64>>,
    /// Each run this many times, the median kept (live runs vary by a
    /// fifth between sweeps on a busy machine; the median of three less).
    pub repeat: usize,
    /// Run on these modelled devices instead of emulating them in tierfs.
    pub devices: Option<&'a Devices>,
}

/// The system a run measures, while it is up.
enum System {
    /// A tierfs mount.
    Tierfs(PathBuf),
    /// Directories used as they are (a device alone).
    Plain,
    /// mergerfs pools (unmounted in this order) and the recipe's mover.
    Mergerfs {
        /// The pools.
        pools: Vec<PathBuf>,
        /// The mover's schedule.
        mover: Option<peers::Mover>,
    },
}

/// A measured run: the workload's report, tierfs's status before and
/// after it (not for a peer), what the devices did (on devices).
type Measured = (Report, Option<(StatusReport, StatusReport)>, Option<DevicesRun>);

/// What one run measured.
pub struct Outcome {
    /// The workload's report.
    pub report: Report,
    /// What tierfs's status said about the measured run (the default for a peer).
    pub run: RunStats,
    /// tierfs's status after the run (none for a peer).
    pub status: Option<StatusReport>,
    /// Bytes left on both tiers.
    pub working_set: u64,
    /// What the devices did (on devices).
    pub devices: Option<DevicesRun>,
    /// What the recipe's mover did (its runs only).
    pub mover: Option<MoverCounts>,
}

fn run_cmd(cmd: &mut Command) -> io::Result<()> {
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{:?} failed: {}",
            cmd.get_args().collect::<Vec<_>>(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Bytes of regular files below `dir`, `.tierfs` excluded.
pub fn tree_bytes(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else { return 0 };
    let mut n = 0;
    for e in rd.flatten() {
        if e.file_name() == ".tierfs" {
            continue;
        }
        match e.file_type() {
            Ok(t) if t.is_dir() => n += tree_bytes(&e.path()),
            Ok(t) if t.is_file() => n += e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => {}
        }
    }
    n
}

fn status(mnt: &Path) -> io::Result<StatusReport> {
    match ask(&runtime::socket_path(mnt), &Request::Status { top: 0 })? {
        Response::Status(s) => Ok(*s),
        _ => Err(io::Error::other("unexpected answer")),
    }
}

fn set_policy(dir: &Path, policy: &str) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let p = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: valid NUL-terminated strings and a value of its length.
    let r =
        unsafe { libc::setxattr(p.as_ptr(), c"user.tierfs.policy".as_ptr(), policy.as_ptr().cast(), policy.len(), 0) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Runner<'_> {
    /// An empty folder `name` in the scratch directory, and its ssd, hdd,
    /// mnt and state subfolders.
    fn fresh(&self, name: &str) -> io::Result<(PathBuf, [PathBuf; 4])> {
        let dir = self.work.join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        let subs = ["ssd", "hdd", "mnt", "state"].map(|s| dir.join(s));
        for d in &subs {
            std::fs::create_dir_all(d)?;
        }
        Ok((dir, subs))
    }

    /// Mounts tierfs for `arch` over `ssd` and `hdd` on `mnt`: with the
    /// preset's emulation, or without on devices.
    fn mount_tierfs(&self, arch: &Arch, capacity: Option<u64>, dirs: [&Path; 4]) -> io::Result<()> {
        let [ssd, hdd, mnt, state] = dirs;
        let mut cmd = Command::new(&self.bin);
        cmd.arg("mount").args([ssd, hdd, mnt]).arg("--daemon").args(["--io-mode", "userspace"]);
        if self.devices.is_none() {
            cmd.args(["--emulate", &self.preset.emulation()]);
        }
        // The papers' architectures clean only when a write or a migration
        // needs room (the background cleaner variant by its own rule): no
        // headroom kept by watermarks; and they move when they decide, busy
        // or not (no busy gate).
        cmd.args(["--policy", &arch.policy, "--migrate-rate", "0", "--threads", "4", "--watermarks", "100,100"])
            .args(["--busy-moves", "0"])
            .arg("--state-dir")
            .arg(state);
        if let Some(i) = &arch.interval {
            cmd.args(["--interval", i]);
        }
        cmd.args(&arch.extra);
        if let Some(c) = capacity {
            cmd.args(["--ssd-capacity", &c.to_string()]);
        }
        run_cmd(&mut cmd)
    }

    /// Sets up the system `arch` names for one run over `ssd` and `hdd`
    /// (fresh and empty); returns it and the directory the workload runs in.
    fn start(&self, arch: &Arch, capacity: Option<u64>, dirs: [&Path; 4]) -> io::Result<(System, PathBuf)> {
        let [ssd, hdd, mnt, _] = dirs;
        let Some(peer) = arch.peer else {
            self.mount_tierfs(arch, capacity, dirs)?;
            return Ok((System::Tierfs(mnt.to_path_buf()), mnt.to_path_buf()));
        };
        match peer {
            Peer::HddAlone => Ok((System::Plain, hdd.to_path_buf())),
            Peer::SsdAlone => Ok((System::Plain, ssd.to_path_buf())),
            Peer::Mergerfs => {
                peers::mount_pool(&hdd.to_string_lossy(), mnt, "category.create=ff")?;
                Ok((System::Mergerfs { pools: vec![mnt.to_path_buf()], mover: None }, mnt.to_path_buf()))
            }
            Peer::MergerfsCache { every, percent } => {
                let capacity = capacity.ok_or_else(|| io::Error::other("mergerfs-cache runs at an SSD size"))?;
                let base = self.work.join("run").join("base");
                std::fs::create_dir_all(&base)?;
                peers::mount_pool(&hdd.to_string_lossy(), &base, "category.create=ff")?;
                let branches = peers::cache_branches(ssd, hdd, peers::free_bytes(ssd)?, capacity);
                if let Err(e) = peers::mount_pool(&branches, mnt, "category.create=ff,moveonenospc=true") {
                    let _ = peers::unmount_pool(&base);
                    return Err(e);
                }
                let script = peers::write_mover_script(&self.work)?;
                let mover = peers::Mover::start(script, ssd.to_path_buf(), base.clone(), capacity, percent, every);
                // The workload's pool is unmounted first, then the base pool.
                Ok((System::Mergerfs { pools: vec![mnt.to_path_buf(), base], mover: Some(mover) }, mnt.to_path_buf()))
            }
        }
    }

    /// Pauses the models (on: restarts them cold).
    fn models(&self, system: &System, on: bool) -> io::Result<()> {
        match (self.devices, system) {
            (Some(d), _) => d.set_models(on),
            (None, System::Tierfs(mnt)) => {
                ask(&runtime::socket_path(mnt), &Request::Emulation { enabled: on }).map(drop)
            }
            (None, _) => Err(io::Error::other("tierfs's peers run on devices only (bench sweep --devices)")),
        }
    }

    /// Runs one workload under one architecture on a fresh mount (or a
    /// peer on fresh directories).
    pub fn run_one(
        &self,
        w: &dyn Workload,
        warm: Option<&dyn Workload>,
        arch: &Arch,
        capacity: Option<u64>,
    ) -> io::Result<Outcome> {
        let (dir, [mut ssd, mut hdd, mnt, state]) = self.fresh("run")?;
        if let Some(d) = self.devices {
            // The models paused while the directories are cleared and the
            // system set up.
            d.set_models(false)?;
            ssd = d.get("ssd")?.mount.join("run");
            hdd = d.get("hdd")?.mount.join("run");
            for t in [&ssd, &hdd] {
                if t.exists() {
                    std::fs::remove_dir_all(t)?;
                }
                std::fs::create_dir_all(t)?;
            }
        }
        let (system, wdir) = self.start(arch, capacity, [&ssd, &hdd, &mnt, &state])?;
        let result = (|| -> io::Result<Measured> {
            self.models(&system, false)?;
            if arch.type_aware {
                for (sub, policy) in w.type_aware() {
                    std::fs::create_dir_all(wdir.join(sub))?;
                    set_policy(&wdir.join(sub), policy)?;
                }
            }
            // Nothing written last time (postmark prepares nothing): unknown.
            let expected = self.prepared.borrow().get(w.name()).copied().filter(|&b| b > 0);
            (self.progress)(Progress::Phase {
                name: "preparing",
                length: expected.map_or(Length::Unknown, Length::Bytes),
            });
            let written = workload::bytes_written();
            w.prepare(&workload::Real, &wdir)?;
            self.prepared.borrow_mut().insert(w.name().to_string(), workload::bytes_written() - written);
            let settle = || -> io::Result<()> {
                let System::Tierfs(mnt) = &system else { return Ok(()) };
                (self.progress)(Progress::Phase { name: "letting the moves finish", length: Length::Unknown });
                // Let the moves the preparation (or warm-up) caused finish.
                let t = Instant::now();
                let busy = |s: &StatusReport| s.migrations.queued > 0 || s.remap.queued > 0;
                while busy(&status(mnt)?) && t.elapsed() < Duration::from_secs(120) {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Ok(())
            };
            settle()?;
            // The models start once: before the warm-up if it runs on them.
            let warm_on_models = warm.is_some() && self.preset.warmup_emulated;
            if warm_on_models {
                self.models(&system, true)?;
            }
            if let Some(warm) = warm {
                let length = if warm.time_bounded() { Length::Time(self.preset.warmup) } else { Length::Unknown };
                (self.progress)(Progress::Phase { name: "warming up", length });
                let t = Instant::now();
                warm.run(&workload::Real, &wdir)?;
                // An interval policy's run falls in the warm-up however
                // soon its operations were done.
                std::thread::sleep(self.preset.warmup_least().saturating_sub(t.elapsed()));
                settle()?;
            }
            let tierfs_status = || match &system {
                System::Tierfs(mnt) => status(mnt).map(Some),
                _ => Ok(None),
            };
            let before = tierfs_status()?;
            if !warm_on_models {
                self.models(&system, true)?;
            }
            let disks_before = self.devices.map(|d| d.stats()).transpose()?;
            let length = if w.time_bounded() {
                Length::Time(self.preset.params_for(w.name()).duration)
            } else {
                Length::Unknown
            };
            (self.progress)(Progress::Phase { name: "measuring", length });
            let mut r = w.run(&workload::Real, &wdir)?;
            let devices = match (self.devices, disks_before) {
                (Some(d), Some(before)) => {
                    (self.progress)(Progress::Phase { name: "writing back", length: Length::Unknown });
                    let flush = d.sync()?.as_secs_f64();
                    r.secs += flush;
                    r.ops_per_sec = if r.secs > 0.0 { r.ops as f64 / r.secs } else { 0.0 };
                    r.txn_time_secs = r.txn_time_secs.map(|t| t + flush);
                    let disks = d
                        .devices
                        .iter()
                        .zip(d.stats()?.iter().zip(&before))
                        .map(|(u, ((m, b), (m0, b0)))| DiskRun {
                            name: u.name.clone(),
                            model: m.since(m0),
                            block: b.since(b0),
                        })
                        .collect();
                    Some(DevicesRun { flush_secs: flush, disks })
                }
                _ => None,
            };
            let after = tierfs_status()?;
            Ok((r, before.zip(after), devices))
        })();
        // The data left on both tiers; the sweep takes it from the HDD-only
        // run, where nothing is copied.
        let ws = tree_bytes(&ssd) + tree_bytes(&hdd);
        let stopped = self.stop(system);
        let cleared = self.clear(&dir, &ssd, &hdd);
        let (report, statuses, devices) = result?;
        let mover = stopped?;
        cleared?;
        let mut run = statuses.as_ref().map(|(b, a)| RunStats::between(b, a)).unwrap_or_default();
        if let Some(hdd) = devices.as_ref().and_then(|d| d.disk("hdd")) {
            run.hdd_busy_secs = Some(hdd.model.busy_secs);
            run.moves.hdd_requests = hdd.model.requests;
        }
        Ok(Outcome { report, run, status: statuses.map(|(_, a)| a), working_set: ws, devices, mover })
    }

    /// Takes a run's system down (models paused on devices, so that what
    /// the unmount writes costs nothing); the mover's counts if it had one.
    fn stop(&self, system: System) -> io::Result<Option<MoverCounts>> {
        if let Some(d) = self.devices {
            d.set_models(false)?;
        }
        match system {
            System::Tierfs(mnt) => run_cmd(Command::new(&self.bin).arg("umount").arg(&mnt)).map(|_| None),
            System::Plain => Ok(None),
            System::Mergerfs { pools, mover } => {
                let counts = mover.map(peers::Mover::stop);
                for p in &pools {
                    peers::unmount_pool(p)?;
                }
                Ok(counts)
            }
        }
    }

    /// Removes a run's directories.
    fn clear(&self, dir: &Path, ssd: &Path, hdd: &Path) -> io::Result<()> {
        if self.devices.is_some() {
            for t in [ssd, hdd] {
                if t.exists() {
                    std::fs::remove_dir_all(t)?;
                }
            }
        }
        let _ = std::fs::remove_dir_all(dir);
        Ok(())
    }

    /// Records the trace of `w` (its preparation, `warm`, its measured run)
    /// on a fresh mount without emulation, for the simulator; returns the
    /// workload's report of the (unemulated) measured run.
    pub fn record_trace(&self, w: &dyn Workload, warm: Option<&dyn Workload>, out: &Path) -> io::Result<Report> {
        let (dir, [ssd, hdd, mnt, state]) = self.fresh("record")?;
        // Every request reaches the daemon (userspace I/O); nothing moves.
        run_cmd(
            Command::new(&self.bin)
                .arg("mount")
                .args([&ssd, &hdd, &mnt])
                .args(["--daemon", "--io-mode", "userspace", "--policy", "hdd-only", "--threads", "4"])
                .arg("--state-dir")
                .arg(&state),
        )?;
        (self.progress)(Progress::Phase { name: "recording", length: Length::Unknown });
        let p = self.preset.params_for(w.name());
        let note = format!("preset {}, scale {}, seed {}, run {:?}", self.preset.name, p.scale, p.seed, p.duration);
        let warm = warm.map(|w| (w, self.preset.warmup_least()));
        let r = crate::capture::record(&mnt, &mnt, w, warm, false, out, note);
        let unmounted = run_cmd(Command::new(&self.bin).arg("umount").arg(&mnt));
        let (report, _) = r?;
        unmounted?;
        let _ = std::fs::remove_dir_all(&dir);
        Ok(report)
    }

    /// Runs the whole preset.
    pub fn run(&mut self) -> io::Result<Vec<Row>> {
        let preset = self.preset;
        let repeat = self.repeat.max(1);
        let total = preset.runs() * repeat;
        let mut done = 0;
        let mut rows = Vec::new();
        for (wname, archs) in &preset.plan {
            let w = workload::by_name(wname, preset.params_for(wname))
                .ok_or_else(|| io::Error::other(format!("unknown workload {wname}")))?;
            let warm =
                (!preset.warmup.is_zero()).then(|| workload::by_name(wname, preset.warmup_params(wname))).flatten();
            let mut once = |this: &mut Self, arch: &Arch, pct: u32, cap: Option<u64>, ws: u64| -> io::Result<Row> {
                let label = if pct == 0 { arch.label.clone() } else { format!("{} at {pct}%", arch.label) };
                (this.progress)(Progress::Run { done, total, label: &format!("{wname}: {label}") });
                let o = this.run_one(w.as_ref(), warm.as_deref(), arch, cap)?;
                done += 1;
                let tierfs = o.status.is_some();
                let s = o.status.unwrap_or_default();
                let m = &s.migrations;
                let row = Row {
                    workload: wname.clone(),
                    arch: arch.label.clone(),
                    pct,
                    ssd_capacity: cap.unwrap_or(0),
                    working_set: if ws == 0 { o.working_set } else { ws },
                    ssd_hit_ratio: s.ssd_hit_ratio,
                    moves: m.promotions + m.demotions + m.copies + m.drops + o.mover.map_or(0, |c| c.moved),
                    evictions: m.evictions,
                    bytes_moved: m.bytes_moved,
                    run_hit_ratio: tierfs.then_some(o.run.hit_ratio),
                    hdd_busy_secs: o.run.hdd_busy_secs,
                    run_moves: tierfs.then_some(o.run.moves),
                    report: o.report,
                    repeats: Vec::new(),
                    reference: None,
                    devices: o.devices,
                    mover: o.mover,
                };
                let line = format!("{wname}: {label}: {:.0} ops/s", row.report.ops_per_sec);
                (this.progress)(Progress::Finished { done, total, line: &line });
                Ok(row)
            };
            let mut one = |this: &mut Self, arch: &Arch, pct: u32, cap: Option<u64>, ws: u64| -> io::Result<Row> {
                let runs = (0..repeat).map(|_| once(this, arch, pct, cap, ws)).collect::<io::Result<Vec<Row>>>()?;
                median_run(runs).ok_or_else(|| io::Error::other("no run"))
            };
            let hdd = one(self, &Arch::plain("hdd-only"), 0, None, w.working_set().unwrap_or(0))?;
            let ws = hdd.working_set.max(1);
            rows.push(hdd);
            rows.push(one(self, &Arch::plain("ssd-only"), 0, None, ws)?);
            for arch in archs {
                if !arch.sized() {
                    rows.push(one(self, arch, 0, None, ws)?);
                    continue;
                }
                for &pct in &preset.sizes {
                    let cap = ws * pct as u64 / 100;
                    rows.push(one(self, arch, pct, Some(cap), ws)?);
                }
            }
        }
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierfs_core::report::{DeviceReport, TierReport};

    fn status(ssd: u64, hdd: u64, busy: Option<f64>) -> StatusReport {
        let tier = |t: &str, requests| TierReport { tier: t.into(), requests, ..TierReport::default() };
        StatusReport {
            tiers: vec![tier("ssd", ssd), tier("hdd", hdd)],
            // The sweep took the mount's hit ratio, warm-up included.
            ssd_hit_ratio: ssd as f64 / (ssd + hdd) as f64,
            emulation: busy
                .map(|b| DeviceReport { tier: "hdd".into(), profile: "hdd-7200".into(), busy_secs: b, requests: 1 })
                .into_iter()
                .collect(),
            ..StatusReport::default()
        }
    }

    #[test]
    fn peers_join_every_workload_and_only_the_cache_recipe_runs_at_each_size() {
        let mut p = Preset::named("compare").unwrap();
        assert_eq!(p.plan.last().map(|(w, _)| w.as_str()), Some("postmark"));
        let before = p.runs();
        assert!(!p.has_peers());
        p.with_peers(Duration::from_secs(2));
        assert!(p.has_peers());
        // Per workload: three peers once, the recipe at three sizes.
        assert_eq!(p.runs(), before + p.plan.len() * 6);
        for (_, archs) in &p.plan {
            let labels: Vec<&str> = archs.iter().rev().take(4).map(|a| a.label.as_str()).collect();
            assert_eq!(labels, ["mergerfs-cache", "mergerfs", "ssd-alone", "hdd-alone"]);
        }
        assert!(Arch::plain("dynamic-hot-dst").sized() && !Arch::peer(Peer::Mergerfs).sized());
        // A preset without peers reads as before.
        let json = serde_json::to_string(&Preset::named("small").unwrap()).unwrap();
        assert!(!json.contains("peer"), "{json}");
    }

    #[test]
    fn a_repeated_run_keeps_the_median_one_and_every_throughput() {
        let run = |ops: f64, moves: u64| Row {
            report: Report { ops_per_sec: ops, ..Report::default() },
            moves,
            ..Row::default()
        };
        let m = median_run(vec![run(300.0, 1), run(220.0, 2), run(310.0, 3)]).unwrap();
        assert_eq!((m.report.ops_per_sec, m.moves), (300.0, 1), "the whole median run, not a mix");
        assert_eq!(m.repeats, vec![300.0, 220.0, 310.0]);
        // Two: the lower; one: itself, with no list.
        assert_eq!(median_run(vec![run(5.0, 1), run(4.0, 2)]).unwrap().moves, 2);
        let one = median_run(vec![run(7.0, 1)]).unwrap();
        assert!(one.repeats.is_empty());
        assert!(median_run(Vec::new()).is_none());
    }

    #[test]
    fn the_run_hit_ratio_counts_the_measured_run_alone() {
        // A warm-up served 670 of 1 000 requests from the SSD; the run
        // then 240 of 1 000: the run's ratio is 24 %, not the mount's 45 %.
        let before = status(670, 330, Some(0.5));
        let after = status(910, 1090, Some(14.9));
        let run = RunStats::between(&before, &after);
        assert!((run.hit_ratio - 0.24).abs() < 1e-9, "{run:?}");
        assert!((run.hdd_busy_secs.unwrap() - 14.4).abs() < 1e-9, "{run:?}");
        assert!((after.ssd_hit_ratio - 0.455).abs() < 1e-9);
        assert_eq!(RunStats::between(&after, &after).hit_ratio, 0.0);
    }

    #[test]
    fn the_run_counts_promotions_and_evacuations_of_the_run_alone() {
        use tierfs_core::report::ReasonMoves;
        let moved = |promotions, copies, evacuated| {
            let mut s = status(1, 1, None);
            s.migrations.promotions = promotions;
            s.migrations.copies = copies;
            s.migrations.demotions = evacuated + 5;
            let r =
                |reason: &str, moves| ReasonMoves { kind: "demotion".into(), reason: reason.into(), moves, bytes: 0 };
            s.migrations.by_reason = vec![r("evict", 5), r("evacuate", evacuated)];
            s
        };
        let run = RunStats::between(&moved(10, 2, 1), &moved(17, 4, 4)).moves;
        assert_eq!((run.promotions, run.evacuations, run.moves), (9, 3, 12));
        // By reason: the run's alone, the reasons it had none of left out.
        let want: BTreeMap<String, u64> = [("evacuate demotion".to_string(), 3)].into();
        assert_eq!(run.by_reason, want);
        // A reason the run saw first.
        let mut later = moved(17, 4, 4);
        later.migrations.by_reason.push(ReasonMoves {
            kind: "promotion".into(),
            reason: "hot-on-read".into(),
            moves: 2,
            bytes: 0,
        });
        let run = RunStats::between(&moved(10, 2, 1), &later).moves;
        assert_eq!(run.by_reason.get("hot-on-read promotion"), Some(&2));
        // Kept in rows.json, and older rows without it still read.
        let json = serde_json::to_string(&run).unwrap();
        assert!(json.contains("\"by_reason\""), "{json}");
        let old: RunMoves =
            serde_json::from_str(r#"{"moves":1,"evictions":0,"bytes_moved":0,"hdd_requests":0}"#).unwrap();
        assert!(old.by_reason.is_empty());
    }

    #[test]
    fn the_blocks_presets_shifting_trace_is_not_taken_for_the_shifting_workload() {
        // A block trace replays at its recorded times: every architecture's
        // throughput is the same, which finding 3 read as plain cold-DST
        // not collapsing.
        use crate::report::Verdict;
        let row = |arch: &str, pct, ops| Row {
            workload: "shifting".into(),
            arch: arch.into(),
            pct,
            report: Report { ops_per_sec: ops, ..Report::default() },
            working_set: 1 << 30,
            ..Row::default()
        };
        let rows = vec![
            row("hdd-only", 0, 50.0),
            row("ssd-only", 0, 50.0),
            row("plain-cold-dst", 5, 50.0),
            row("dynamic-cold-dst", 5, 50.0),
        ];
        let third = |p: Preset| p.findings(&rows).into_iter().find(|f| f.n == 3).map(|f| f.verdict);
        assert_eq!(third(Preset::named("small").unwrap()), Some(Verdict::DoesNotHold));
        assert_eq!(third(Preset::named("blocks").unwrap()), Some(Verdict::NotMeasured));
    }
}
