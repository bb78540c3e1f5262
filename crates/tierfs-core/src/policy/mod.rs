//! Tiering and caching architectures as pure policies (Loris §II and §IV).
//!
//! A policy looks at a [`View`] (statistics, SSD space, pins, the time) and
//! returns a [`Plan`]: the moves to make, each with its [`Reason`], and the
//! candidates it did not move, each with why ([`NotMoved`]). It never reads
//! a clock, never touches a file. The engine carries plans out through the
//! migrator. One file per architecture; what they share is here.

mod dynamic_cold_dst;
mod dynamic_cold_dst_bg;
mod dynamic_hot_dst;
mod hdd_only;
mod hystor;
mod interval_cache;
mod interval_hot_dst;
pub mod measured;
mod on_demand_cache;
mod plain_cold_dst;
mod ssd_only;
mod write_cache;

use crate::clock::Timestamp;
use crate::event::EventKind;
use crate::migrate::Move;
use crate::state::ns::Ino;
use crate::stats::{FileStats, Group, Residence, Stats};
use crate::tier::Tier;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

/// Every architecture tierfs implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    /// New files on the HDD; a file read from the HDD moves to the SSD if admitted.
    DynamicHotDst,
    /// New files on the HDD; every interval the hottest HDD files move up.
    IntervalHotDst,
    /// New files on the SSD; demoted files never come back.
    PlainColdDst,
    /// New files on the SSD; a file read from the HDD moves back if admitted.
    DynamicColdDst,
    /// Dynamic cold-DST with a background cleaner freeing space ahead of writers.
    DynamicColdDstBg,
    /// New files on the HDD; a file read from the HDD gets an SSD copy.
    OnDemandCache,
    /// New files on the HDD; every interval the hottest files get SSD copies.
    IntervalCache,
    /// Everything on the HDD (baseline).
    HddOnly,
    /// Everything on the SSD (baseline).
    SsdOnly,
    /// Small files by dynamic hot-DST, the hot chunks of files past the
    /// sieve by Hystor's block statistics.
    Hystor,
    /// On-demand caching, and a write to an uncached file also makes its
    /// SSD copy (Loris's write-through-all caching).
    WriteThroughCache,
    /// On-demand caching of reads; writes land on the SSD first, whole
    /// small files in the write-back area, and are scrubbed to the HDD.
    WriteBackCache,
    /// New files on the SSD; a recently used file moves to the tier where
    /// its measured cost is lower (Wu-Reddy's measurement-driven migration).
    Measured,
}

impl PolicyKind {
    /// Every policy, in the order of the design brief.
    pub const ALL: [PolicyKind; 13] = [
        PolicyKind::DynamicHotDst,
        PolicyKind::IntervalHotDst,
        PolicyKind::PlainColdDst,
        PolicyKind::DynamicColdDst,
        PolicyKind::DynamicColdDstBg,
        PolicyKind::OnDemandCache,
        PolicyKind::IntervalCache,
        PolicyKind::HddOnly,
        PolicyKind::SsdOnly,
        PolicyKind::Hystor,
        PolicyKind::WriteThroughCache,
        PolicyKind::WriteBackCache,
        PolicyKind::Measured,
    ];

    /// The name used on the command line and in xattrs.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::DynamicHotDst => "dynamic-hot-dst",
            PolicyKind::IntervalHotDst => "interval-hot-dst",
            PolicyKind::PlainColdDst => "plain-cold-dst",
            PolicyKind::DynamicColdDst => "dynamic-cold-dst",
            PolicyKind::DynamicColdDstBg => "dynamic-cold-dst-bg",
            PolicyKind::OnDemandCache => "on-demand-cache",
            PolicyKind::IntervalCache => "interval-cache",
            PolicyKind::HddOnly => "hdd-only",
            PolicyKind::SsdOnly => "ssd-only",
            PolicyKind::Hystor => "hystor",
            PolicyKind::WriteThroughCache => "write-through-cache",
            PolicyKind::WriteBackCache => "write-back-cache",
            PolicyKind::Measured => "measured",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<PolicyKind> {
        let s = s.trim();
        PolicyKind::ALL.into_iter().find(|p| p.name() == s)
    }

    /// The implementation.
    pub fn policy(self) -> &'static dyn Policy {
        match self {
            PolicyKind::DynamicHotDst => &dynamic_hot_dst::DynamicHotDst,
            PolicyKind::IntervalHotDst => &interval_hot_dst::IntervalHotDst,
            PolicyKind::PlainColdDst => &plain_cold_dst::PlainColdDst,
            PolicyKind::DynamicColdDst => &dynamic_cold_dst::DynamicColdDst,
            PolicyKind::DynamicColdDstBg => &dynamic_cold_dst_bg::DynamicColdDstBg,
            PolicyKind::OnDemandCache => &on_demand_cache::OnDemandCache,
            PolicyKind::IntervalCache => &interval_cache::IntervalCache,
            PolicyKind::HddOnly => &hdd_only::HddOnly,
            PolicyKind::SsdOnly => &ssd_only::SsdOnly,
            PolicyKind::Hystor => &hystor::Hystor,
            PolicyKind::WriteThroughCache => &write_cache::WriteThroughCache,
            PolicyKind::WriteBackCache => &write_cache::WriteBackCache,
            PolicyKind::Measured => &measured::Measured,
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Settings a policy runs with (per policy directory).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Params {
    /// Files larger than this never enter the SSD (type-aware sieving).
    pub sieve: u64,
    /// Interval of the interval policies.
    pub interval: Duration,
    /// Chunk size of new split files (`hystor`), bytes.
    #[serde(default = "default_chunk")]
    pub chunk: u64,
    /// Write-back area (Hystor §5.5), percent of the SSD capacity; 0: none.
    #[serde(default)]
    pub write_back: u8,
    /// `measured`: how much cheaper the other tier must be before a file
    /// moves, δ in hundredths (100: the other tier costs less than half).
    #[serde(default = "default_delta")]
    pub delta: u16,
    /// The quiet HDD mode applies (`--quiet-hdd`, `user.tierfs.quiet`).
    #[serde(default)]
    pub quiet: bool,
    /// Which accesses of a file read from the HDD may admit it to the SSD
    /// (the dynamic and caching policies).
    #[serde(default)]
    pub admission: Admission,
    /// What halves the counters besides the aging period: the root's
    /// setting is the mount's (the statistics are one for all groups).
    #[serde(default)]
    pub aging: AgingRule,
}

/// Which accesses may admit a file read from the HDD to the SSD.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Admission {
    /// Any access after which its counter is above the admission threshold
    /// (Loris): a file read once is admitted when the threshold is below
    /// one access's weight, as it is after an aging.
    #[default]
    First,
    /// Only an access before which its counter was already above the
    /// threshold: a file read once since its heat faded (a one-hit wonder,
    /// a scanned file) is not admitted, and the room stays with files
    /// that came back (TinyLFU's doorkeeper, on the counters).
    Repeat,
}

impl Admission {
    /// Every rule.
    pub const ALL: [Admission; 2] = [Admission::First, Admission::Repeat];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Admission::First => "first",
            Admission::Repeat => "repeat",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Admission> {
        Admission::ALL.into_iter().find(|a| a.name() == s.trim())
    }
}

/// What halves every counter besides the aging period (which halves them
/// whatever else does).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgingRule {
    /// Nothing: the period alone.
    #[default]
    Period,
    /// Also every [`crate::stats::REQUESTS_PER_SSD_FILE`] accesses per file
    /// on the SSD (TinyLFU's sample): a busy mount or a small SSD ages
    /// sooner.
    Requests,
    /// Also when the hot set moved: the SSD's share of the requests'
    /// heat fell well below its average ([`crate::stats::Stats::age_on_shift`]).
    Shift,
}

impl AgingRule {
    /// Every rule.
    pub const ALL: [AgingRule; 3] = [AgingRule::Period, AgingRule::Requests, AgingRule::Shift];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            AgingRule::Period => "period",
            AgingRule::Requests => "requests",
            AgingRule::Shift => "shift",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<AgingRule> {
        AgingRule::ALL.into_iter().find(|a| a.name() == s.trim())
    }
}

fn default_delta() -> u16 {
    measured::DEFAULT_DELTA
}

fn default_chunk() -> u64 {
    crate::extent::ChunkSize::DEFAULT.bytes()
}

/// Default sieve: 1 MiB, as in Loris.
pub const DEFAULT_SIEVE: u64 = 1 << 20;
/// Default interval: 80 s (Loris found 5 s thrashes on uniform workloads).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(80);

impl Default for Params {
    fn default() -> Self {
        Params {
            sieve: DEFAULT_SIEVE,
            interval: DEFAULT_INTERVAL,
            chunk: default_chunk(),
            write_back: 0,
            delta: default_delta(),
            quiet: false,
            admission: Admission::default(),
            aging: AgingRule::default(),
        }
    }
}

/// SSD space as the policies see it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Space {
    /// Bytes of user data on the SSD (moved files and cached copies).
    pub used: u64,
    /// The most user data the SSD may hold (the configured capacity, or the
    /// real size of the file system).
    pub limit: u64,
}

impl Space {
    /// Bytes still free under the limit.
    pub fn free(&self) -> u64 {
        self.limit.saturating_sub(self.used)
    }
}

/// Why a file is moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "why")]
pub enum Reason {
    /// Read from the HDD and admitted (counter above the threshold).
    HotOnRead {
        /// Its counter.
        counter: u32,
        /// The admission threshold.
        threshold: u32,
    },
    /// Among the hottest at an interval run.
    Interval {
        /// Its counter.
        counter: u32,
    },
    /// The coldest on the SSD, evicted to make room.
    Evict {
        /// Its counter.
        counter: u32,
    },
    /// Grew past the sieve.
    Sieved {
        /// Its size.
        size: u64,
    },
    /// Pinned to a tier.
    Pinned,
    /// Its policy changed and it belongs elsewhere now.
    PolicyChange,
    /// Freed ahead of writers by the background cleaner.
    BackgroundClean {
        /// Its counter.
        counter: u32,
    },
    /// Its expected response time on the other tier is lower by more than
    /// δ (`measured`).
    Measured {
        /// Expected response time where it is, microseconds.
        here_us: u32,
        /// Expected response time on the other tier, microseconds.
        there_us: u32,
    },
    /// A write to it found no room on the SSD: taken off for the writer.
    Evacuate,
    /// Created on the SSD in place of the HDD while the HDD slept (the
    /// quiet HDD mode), and now written where its policy puts new files.
    Held,
}

impl Reason {
    /// Every reason's short name, in [`Reason::index`] order (the `reason`
    /// label of the metrics).
    pub const LABELS: [&'static str; 10] = [
        "hot-on-read",
        "interval",
        "evict",
        "sieved",
        "pinned",
        "policy-change",
        "background-clean",
        "measured",
        "evacuate",
        "held",
    ];

    /// Its place in [`Reason::LABELS`].
    pub fn index(&self) -> usize {
        match self {
            Reason::HotOnRead { .. } => 0,
            Reason::Interval { .. } => 1,
            Reason::Evict { .. } => 2,
            Reason::Sieved { .. } => 3,
            Reason::Pinned => 4,
            Reason::PolicyChange => 5,
            Reason::BackgroundClean { .. } => 6,
            Reason::Measured { .. } => 7,
            Reason::Evacuate => 8,
            Reason::Held => 9,
        }
    }

    /// Its short name, without the figures.
    pub fn label(&self) -> &'static str {
        Self::LABELS[self.index()]
    }

    /// Taken off the SSD for room (by the cleaner for a waiter, or ahead
    /// of writers): what moves the eviction clock and counts as an
    /// eviction.
    pub fn is_eviction(&self) -> bool {
        matches!(self, Reason::Evict { .. } | Reason::BackgroundClean { .. })
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::HotOnRead { counter, threshold } => {
                write!(f, "read from the HDD with counter {counter} above the admission threshold {threshold}")
            }
            Reason::Interval { counter } => write!(f, "among the hottest at an interval run (counter {counter})"),
            Reason::Evict { counter } => write!(f, "coldest on the SSD (counter {counter}), evicted for room"),
            Reason::Sieved { size } => write!(f, "grew past the sieve ({size} bytes)"),
            Reason::Pinned => write!(f, "pinned"),
            Reason::PolicyChange => write!(f, "its policy changed"),
            Reason::BackgroundClean { counter } => write!(f, "freed by the background cleaner (counter {counter})"),
            Reason::Measured { here_us, there_us } => {
                write!(f, "measured: {here_us} µs per request here, {there_us} µs on the other tier")
            }
            Reason::Evacuate => write!(f, "a write to it found no SSD room"),
            Reason::Held => write!(f, "held on the SSD while the HDD slept"),
        }
    }
}

/// Why a candidate was not moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "why")]
pub enum NotMoved {
    /// Its counter is not above the admission threshold.
    BelowAdmission {
        /// Its counter (with [`Admission::Repeat`], before the access).
        counter: u32,
        /// The threshold.
        threshold: u32,
    },
    /// Larger than the sieve.
    Sieved {
        /// Its size.
        size: u64,
        /// The sieve.
        sieve: u64,
    },
    /// Pinned to the other tier.
    Pinned {
        /// The tier it is pinned to.
        tier: Tier,
    },
    /// Cannot be moved now (open with passthrough, already queued).
    Busy,
    /// Would not fit even after evicting colder files.
    NoRoom,
    /// Moved often enough this hour (`measured`'s bound on oscillation).
    Damped {
        /// Its moves in the last hour.
        moves: u32,
    },
    /// The SSD write budget is spent for now (the write regulator).
    OverBudget,
}

impl fmt::Display for NotMoved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotMoved::BelowAdmission { counter, threshold } => {
                write!(f, "not admitted: counter {counter} not above threshold {threshold}")
            }
            NotMoved::Sieved { size, sieve } => write!(f, "sieved: {size} bytes is over the {sieve}-byte sieve"),
            NotMoved::Pinned { tier } => write!(f, "pinned to the {tier}"),
            NotMoved::Busy => write!(f, "busy (open with passthrough or already queued)"),
            NotMoved::NoRoom => write!(f, "no room on the SSD even after evicting colder files"),
            NotMoved::Damped { moves } => write!(f, "moved {moves} times in the last hour; stays for now"),
            NotMoved::OverBudget => write!(f, "the SSD write budget is spent for now (write regulator)"),
        }
    }
}

/// One move of a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// The file.
    pub ino: Ino,
    /// What to do.
    pub mv: Move,
    /// Why.
    pub reason: Reason,
    /// Its size when planned.
    pub size: u64,
}

/// What a policy decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Moves, in order.
    pub steps: Vec<Step>,
    /// Candidates not moved, with why.
    pub skipped: Vec<(Ino, NotMoved)>,
}

impl Plan {
    /// True if it moves nothing.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
    fn push(&mut self, ino: Ino, mv: Move, reason: Reason, size: u64) {
        self.steps.push(Step { ino, mv, reason, size });
    }
    fn skip(&mut self, ino: Ino, why: NotMoved) {
        self.skipped.push((ino, why));
    }
    /// Appends another plan.
    pub fn extend(&mut self, other: Plan) {
        self.steps.extend(other.steps);
        self.skipped.extend(other.skipped);
    }
}

/// Everything a policy may look at.
#[derive(Clone, Copy)]
pub struct View<'a> {
    /// Statistics.
    pub stats: &'a Stats,
    /// The time.
    pub now: Timestamp,
    /// SSD space.
    pub space: Space,
    /// The group being decided for.
    pub group: Group,
    /// Its settings.
    pub params: Params,
    /// The tier a file is pinned to, if any.
    pub pin: &'a dyn Fn(Ino) -> Option<Tier>,
    /// Files that cannot be moved now (queued, open with passthrough).
    pub busy: &'a dyn Fn(Ino) -> bool,
    /// Files resting after a failed move: a policy does not plan them by
    /// itself (a failed move may have copied the whole file), and leaves
    /// their note, which says for how long, alone. Conforming to a changed
    /// policy or pin still moves them, and the cleaner has its own rest.
    pub resting: &'a dyn Fn(Ino) -> bool,
    /// Bytes the cleaner has evicted in the foreground so far (the
    /// background cleaner's estimate of the space writers need).
    pub evicted_bytes: u64,
    /// The measured response times of the tiers (SSD, HDD).
    pub speeds: [crate::store::measured::Speed; 2],
    /// Moves this group may plan now (`measured`'s token bucket).
    pub tokens: u32,
    /// How often a file was moved in the last hour.
    pub moves: &'a dyn Fn(Ino) -> u32,
    /// Would the write regulator let this many bytes go to the SSD now?
    /// (Asks only; true without a budget.)
    pub ssd_admits: &'a dyn Fn(u64) -> bool,
    /// In [`Policy::on_access`]: the file's counter before the event,
    /// which [`Admission::Repeat`] admits by (an event of a sampling heat
    /// source stands for several requests, all of them this access's).
    pub counter_before: Option<u32>,
}

/// An architecture. See the module documentation.
pub trait Policy: Send + Sync {
    /// Which one it is.
    fn kind(&self) -> PolicyKind;
    /// Where new files go.
    fn initial_tier(&self) -> Tier;
    /// True for the caching architectures (copies, not moves).
    fn caching(&self) -> bool {
        false
    }
    /// True if the hot chunks of files past the sieve get SSD copies
    /// (`hystor`).
    fn chunks(&self) -> bool {
        false
    }
    /// True if the write-back area holds whole small files (one chunk of
    /// 1 MiB each, `write-back-cache`) rather than chunks of the group's
    /// size.
    fn whole_file_write_back(&self) -> bool {
        false
    }
    /// The write-back area (percent of the SSD) when neither the directory
    /// nor the mount sets one.
    fn default_write_back(&self) -> u8 {
        0
    }
    /// True for the baselines, which never move anything.
    fn baseline(&self) -> bool {
        false
    }
    /// Reaction to an access of file `ino` (already counted in the view).
    fn on_access(&self, _v: &View<'_>, _ino: Ino, _f: &FileStats, _ev: &EventKind) -> Plan {
        Plan::default()
    }
    /// Periodic decisions; `last_run` is when this group's interval work
    /// last ran (None: never). Returns the plan and whether this was an
    /// interval run (so the caller records the time).
    fn on_tick(&self, _v: &View<'_>, _last_run: Option<Timestamp>) -> (Plan, bool) {
        (Plan::default(), false)
    }
    /// Moves that bring a group's files to where this policy wants them
    /// (after its policy changed): residences the policy never produces.
    fn conform(&self, v: &View<'_>) -> Plan {
        conform_default(self, v)
    }
}

/// The move that takes a file off the SSD, by where it is.
pub fn off_ssd(r: Residence) -> Option<Move> {
    match r {
        Residence::Ssd => Some(Move::Demote),
        Residence::Cached => Some(Move::DropCopy),
        Residence::Hdd => None,
    }
}

/// Admission on a read served by the HDD, shared by the dynamic policies:
/// promote (or copy, for caching) if the file is on the HDD only, is not
/// sieved, not pinned to the HDD, and its counter is above the threshold
/// (with [`Admission::Repeat`], its counter before this read).
pub fn admit_on_read(v: &View<'_>, ino: Ino, f: &FileStats, ev: &EventKind, mv: Move) -> Plan {
    let mut p = Plan::default();
    let read_from_hdd = matches!(
        *ev,
        EventKind::Read { tier: Tier::Hdd, fragment: false, .. }
            | EventKind::Open { write: false, tier: Tier::Hdd, unseen: true, .. }
    );
    if !read_from_hdd || f.residence != Residence::Hdd {
        return p;
    }
    if (v.busy)(ino) || (v.resting)(ino) {
        return p;
    }
    if let Some(Tier::Hdd) = (v.pin)(ino) {
        p.skip(ino, NotMoved::Pinned { tier: Tier::Hdd });
        return p;
    }
    if f.size > v.params.sieve {
        p.skip(ino, NotMoved::Sieved { size: f.size, sieve: v.params.sieve });
        return p;
    }
    let threshold = v.stats.admission_threshold();
    // The heat that counts: with `repeat`, what the file had before this
    // access.
    let heat = match (v.params.admission, *ev) {
        (Admission::First, _) => f.counter,
        // A read that found the end of the file (a program reading a file
        // whole ends with one) belongs to the access before it: all the
        // file's heat was there before it, and it would admit a file read
        // once.
        (Admission::Repeat, EventKind::Read { len: 0, .. }) => 0,
        (Admission::Repeat, _) => v.counter_before.unwrap_or(f.counter),
    };
    if heat <= threshold {
        p.skip(ino, NotMoved::BelowAdmission { counter: heat, threshold });
        return p;
    }
    p.push(ino, mv, Reason::HotOnRead { counter: f.counter, threshold }, f.size);
    p
}

/// The write-back area of a group, percent of the SSD: its setting, else
/// its policy's default.
pub fn write_back_percent(kind: PolicyKind, params: &Params) -> u8 {
    if params.write_back > 0 {
        params.write_back
    } else {
        kind.policy().default_write_back()
    }
}

/// Admission on a write served by the HDD (write-through-all caching):
/// the rules of [`admit_on_read`] for a write to an uncached file.
pub fn admit_on_write(v: &View<'_>, ino: Ino, f: &FileStats, ev: &EventKind) -> Plan {
    match *ev {
        EventKind::Write { off, len, tier: Tier::Hdd, fragment: false, .. } => {
            let as_read = EventKind::Read { off, len, tier: Tier::Hdd, fragment: false };
            admit_on_read(v, ino, f, &as_read, Move::Copy)
        }
        _ => Plan::default(),
    }
}

/// Type-aware sieving on growth, shared by every hybrid policy: an
/// SSD-resident file that grew past the sieve is demoted, a cached copy
/// invalidated.
pub fn sieve_on_growth(v: &View<'_>, ino: Ino, f: &FileStats, ev: &EventKind) -> Plan {
    let mut p = Plan::default();
    let grew = matches!(ev, EventKind::Write { .. } | EventKind::Close { .. } | EventKind::Resize { .. });
    if !grew || f.size <= v.params.sieve || (v.pin)(ino) == Some(Tier::Ssd) || (v.busy)(ino) || (v.resting)(ino) {
        return p;
    }
    if let Some(mv) = off_ssd(f.residence) {
        p.push(ino, mv, Reason::Sieved { size: f.size }, f.size);
    }
    p
}

/// Evictions (coldest SSD files first, over every group) until `need`
/// bytes are free under the limit, skipping pinned and busy files, those
/// in `exclude`, and with `rest` those resting after a failed move (a
/// policy's own cleaning; the cleaner keeps its own rest). Returns the
/// steps and the bytes they free.
pub fn evict_for(
    v: &View<'_>,
    need: u64,
    exclude: &HashSet<Ino>,
    rest: bool,
    reason: fn(u32) -> Reason,
) -> (Vec<Step>, u64) {
    let mut steps = Vec::new();
    let mut freed = 0u64;
    // One pass over the SSD's files, coldest first.
    let mut victims = v.stats.ssd_coldest_first().filter(|&(ino, _)| {
        let resting = rest && (v.resting)(ino);
        !exclude.contains(&ino) && (v.pin)(ino) != Some(Tier::Ssd) && !(v.busy)(ino) && !resting
    });
    while v.space.free() + freed < need {
        let Some((ino, f)) = victims.next() else { break };
        if let Some(mv) = off_ssd(f.residence) {
            steps.push(Step { ino, mv, reason: reason(f.counter), size: f.size });
            freed += f.size;
        }
    }
    (steps, freed)
}

/// Why a file can never be moved to the SSD whatever is evicted: past the
/// sieve, or larger than the SSD itself (room short of that is made by the
/// cleaner, coldest first).
pub fn never_fits(v: &View<'_>, f: &FileStats) -> Option<NotMoved> {
    if f.size > v.params.sieve {
        Some(NotMoved::Sieved { size: f.size, sieve: v.params.sieve })
    } else if f.size > v.space.limit {
        Some(NotMoved::NoRoom)
    } else {
        None
    }
}

/// The interval run shared by interval hot-DST and interval caching (Loris
/// §IV-A2): the hottest HDD files of the group move up (or get copies), in
/// order, until there are none left or the next is not hotter than the
/// counter of the last file evicted; colder SSD files are evicted for room
/// as needed, which raises that threshold.
pub fn interval_run(v: &View<'_>, mv: Move) -> Plan {
    let mut p = Plan::default();
    let mut threshold = v.stats.admission_threshold();
    let mut free = v.space.free();
    // The eviction candidates, coldest first, each looked at once (the
    // files this run moves up are on the HDD until they are moved).
    let mut victims = v
        .stats
        .ssd_coldest_first()
        .filter(|&(i, _)| (v.pin)(i) != Some(Tier::Ssd) && !(v.busy)(i) && !(v.resting)(i))
        .peekable();
    for (ino, f) in v.stats.hottest(v.group, Residence::Hdd) {
        if f.counter <= threshold {
            break;
        }
        if (v.resting)(ino) {
            continue;
        }
        if (v.busy)(ino) {
            p.skip(ino, NotMoved::Busy);
            continue;
        }
        if let Some(Tier::Hdd) = (v.pin)(ino) {
            p.skip(ino, NotMoved::Pinned { tier: Tier::Hdd });
            continue;
        }
        if let Some(why) = never_fits(v, &f) {
            p.skip(ino, why);
            continue;
        }
        // Make room, coldest first, while the coldest is colder.
        let mut stop = false;
        while free < f.size {
            let Some(&(_, vf)) = victims.peek() else {
                stop = true;
                break;
            };
            if vf.counter >= f.counter {
                // The hottest HDD file is not hotter than the coldest SSD file.
                stop = true;
                break;
            }
            let Some((vi, vf)) = victims.next() else { break };
            if let Some(out) = off_ssd(vf.residence) {
                p.push(vi, out, Reason::Evict { counter: vf.counter }, vf.size);
                free += vf.size;
                threshold = threshold.max(vf.counter);
            }
        }
        if stop {
            p.skip(ino, NotMoved::NoRoom);
            break;
        }
        if f.counter <= threshold {
            p.skip(ino, NotMoved::BelowAdmission { counter: f.counter, threshold });
            break;
        }
        free -= f.size;
        p.push(ino, mv, Reason::Interval { counter: f.counter }, f.size);
    }
    p
}

/// True when an interval policy's run is due.
pub fn interval_due(v: &View<'_>, last_run: Option<Timestamp>) -> bool {
    match last_run {
        None => true,
        Some(t) => v.now.since(t) >= v.params.interval,
    }
}

/// Moves for files whose residence the policy never produces (used after
/// a policy change): DST policies keep no copies; caching policies keep no
/// moved files on the SSD; baselines keep everything on their tier. Pins
/// win over the policy.
pub fn conform_default<P: Policy + ?Sized>(p: &P, v: &View<'_>) -> Plan {
    let mut plan = Plan::default();
    for r in [Residence::Ssd, Residence::Hdd, Residence::Cached] {
        for (ino, f) in v.stats.coldest(v.group, r) {
            if (v.busy)(ino) {
                continue;
            }
            let pin = (v.pin)(ino);
            let mv = match (pin, r) {
                (Some(Tier::Hdd), Residence::Ssd) => Some((Move::Demote, Reason::Pinned)),
                (Some(Tier::Hdd), Residence::Cached) => Some((Move::DropCopy, Reason::Pinned)),
                (Some(Tier::Ssd), Residence::Hdd) if p.caching() => Some((Move::Copy, Reason::Pinned)),
                (Some(Tier::Ssd), Residence::Hdd) => Some((Move::Promote, Reason::Pinned)),
                (Some(_), _) => None,
                (None, Residence::Cached) if !p.caching() => Some((Move::DropCopy, Reason::PolicyChange)),
                (None, Residence::Ssd) if p.caching() => Some((Move::Demote, Reason::PolicyChange)),
                (None, Residence::Ssd | Residence::Cached) if p.kind() == PolicyKind::HddOnly => {
                    off_ssd(r).map(|m| (m, Reason::PolicyChange))
                }
                (None, Residence::Hdd) if p.kind() == PolicyKind::SsdOnly => {
                    Some((Move::Promote, Reason::PolicyChange))
                }
                _ => None,
            };
            if let Some((mv, reason)) = mv {
                plan.push(ino, mv, reason, f.size);
            }
        }
    }
    plan
}

#[cfg(test)]
mod tests;
