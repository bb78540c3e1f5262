//! The tiering engine.
//!
//! One thread takes access events off the request path, feeds the
//! statistics, asks each group's policy what to do (on every access for
//! the dynamic policies, every tick for the interval ones and the
//! background cleaner), ages and flushes the statistics. Two executors
//! carry the plans out: the migrator, one move at a time at a bounded
//! rate, and the cleaner, which evicts the coldest files when a write or a
//! migration waits for SSD room, when the SSD passes its high watermark,
//! and which takes a file off the SSD when a write to it finds no room.
//! Request threads never migrate a file themselves: they wait for the
//! cleaner holding no lock. The engine also implements the volume's
//! [`Hooks`]: where new files go and the SSD space account
//! ([`account::SsdAccount`]).

pub mod account;
mod chunks;
pub mod groups;
mod heat;
mod measure;
mod quiet;
pub mod rate;
pub mod record;
mod writeback;

use crate::clock::{Clock, Timestamp};
use crate::error::{err, Error, Result};
use crate::event::{Event, EventKind, EventSink};
use crate::migrate::{Control, Move, Outcome, Skip};
use crate::planner::{Planner, Tiers};
use crate::policy::{off_ssd, Params, Plan, PolicyKind, Reason, Space, Step};
use crate::report::{FileReport, GroupReport, MigrationReport, StatusReport, TierReport};
use crate::settings::{Key, Settings};
use crate::state::ns::Ino;
use crate::state::Kv;
use crate::stats::{self, FileStats, Group, Residence, Stats, StatsStore, FLUSH_BATCH};
use crate::store::Store;
use crate::tier::Tier;
use crate::vfs::Ctx;
use crate::vfs::{Hooks, IoMode, Volume};
use account::SsdAccount;
use groups::{Effective, Groups, Stored};
use heat::counting;
use parking_lot::{Condvar, Mutex};
use rate::{BusyGate, RateLimiter};
use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// Queue length between the request path and the engine.
pub const QUEUE: usize = 1 << 16;

/// The event sink of the request path: a bounded queue. When the engine
/// falls behind, access events (reads, writes, opens) are dropped and
/// counted, never waited for. Events that change what the engine believes
/// exists and where (creates, removals, placements, renames, sizes) are
/// never dropped: the request waits for room in the queue (at most
/// [`STRUCTURAL_WAIT`]; the engine thread takes events every tick and
/// waits for no file system lock, so room comes).
#[derive(Debug)]
pub struct QueueSink {
    tx: SyncSender<Event>,
    dropped: AtomicU64,
    /// An event the engine's beliefs are built from was lost.
    lost_structural: AtomicBool,
}

/// The longest a request waits to queue an event that must not be lost.
pub const STRUCTURAL_WAIT: Duration = Duration::from_secs(10);

/// True for events the engine's beliefs are built from.
fn structural(k: &EventKind) -> bool {
    !matches!(k, EventKind::Read { .. } | EventKind::Write { .. } | EventKind::Open { .. })
}

impl EventSink for QueueSink {
    fn record(&self, ev: Event) {
        let mut ev = ev;
        let mut deadline = None;
        loop {
            match self.tx.try_send(ev) {
                Ok(()) => return,
                Err(TrySendError::Full(back)) if structural(&back.kind) => {
                    let d = *deadline.get_or_insert_with(|| std::time::Instant::now() + STRUCTURAL_WAIT);
                    if std::time::Instant::now() > d {
                        tracing::error!(ino = back.ino, kind = ?back.kind, "event queue full for {STRUCTURAL_WAIT:?}: event lost");
                        self.lost_structural.store(true, Ordering::Release);
                        break;
                    }
                    ev = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => break,
            }
        }
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

impl QueueSink {
    /// Events dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
    /// True if an event the statistics cannot do without was lost: the
    /// shutdown must not be marked clean (the next mount audits them).
    pub fn lost_structural(&self) -> bool {
        self.lost_structural.load(Ordering::Acquire)
    }
}

/// A queue: its sink for the volume, its receiving end for the engine.
pub fn queue() -> (Arc<QueueSink>, Receiver<Event>) {
    let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
    (Arc::new(QueueSink { tx, dropped: AtomicU64::new(0), lost_structural: AtomicBool::new(false) }), rx)
}

/// The recording of a trace, if one runs, and why the last one failed.
#[derive(Default)]
struct TraceState {
    rec: Option<record::Recorder>,
    failed: Option<String>,
}

impl TraceState {
    /// Ends the recording after a write error, keeping it for `stop_trace`.
    fn fail(&mut self, e: std::io::Error) {
        let path = self.rec.take().map(|r| r.path().display().to_string()).unwrap_or_default();
        let msg = format!("writing the trace {path}: {e}");
        tracing::error!("{msg}; the recording stops");
        self.failed = Some(msg);
    }
}

/// Settings of the engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Counters are halved every this long.
    pub aging: Duration,
    /// Statistics are written to the state database every this long.
    pub flush_every: Duration,
    /// How often the engine wakes.
    pub tick: Duration,
    /// Statistics are collected at all.
    pub stats_enabled: bool,
    /// Backing directories, for reports.
    pub tier_paths: [String; 2],
    /// Mount point, for reports.
    pub mountpoint: String,
    /// The mount's default policy.
    pub policy: PolicyKind,
    /// Its settings.
    pub params: Params,
    /// Most user data the SSD may hold (None: its real size).
    pub ssd_capacity: Option<u64>,
    /// Migration rate in bytes per second (0: unlimited).
    pub migrate_rate: u64,
    /// New files always go here, whatever the policy says.
    pub placement: Option<Tier>,
    /// Check every statistics entry against the namespace (after an
    /// unclean shutdown the last seconds of events may be lost).
    pub audit_space: bool,
    /// SSD watermarks in percent of the capacity: past the first, the
    /// cleaner evicts the coldest files ahead of writers until usage is
    /// down to the second. `(100, 100)`: only when someone waits for room.
    pub watermarks: (u8, u8),
    /// How long a write or a migration waits for the cleaner before its
    /// file leaves the SSD (a write) or it gives up (a migration).
    pub room_wait: Duration,
    /// How often Hystor's monitor chooses the chunks of the remap area.
    pub chunk_period: Duration,
    /// Only writes of at most this many bytes enter the write-back area.
    pub write_back_max: u64,
    /// Write every dirty chunk of the write-back area back at shutdown.
    pub flush_on_unmount: bool,
    /// The meters of the tiers' stores (SSD, HDD): `measured`'s averages
    /// and the regulator's count of SSD writes. None: nothing measured.
    pub meters: Option<[Arc<crate::store::measured::Meter>; 2]>,
    /// `measured`'s moves per second per policy directory (its tokens).
    pub measured_rate: f64,
    /// Bytes the SSD may be written per day (the write regulator).
    pub budget: Option<crate::regulator::Budget>,
    /// Bytes the SSD may be written over its life, for the projected
    /// lifetime.
    pub endurance: Option<u64>,
    /// Background moves a second while the mount is busy (at least
    /// [`BUSY_REQUESTS`] requests a second); 0: as many as when idle.
    pub busy_moves: f64,
    /// The quiet HDD mode (`--quiet-hdd`); None: off.
    pub quiet: Option<crate::quiet::QuietConfig>,
}

/// The request rate (per second, from the kernel) from which the mount is
/// busy and background moves are spaced ([`EngineConfig::busy_moves`]): a
/// hundred requests in an engine tick. A client that checks a file now and
/// then, or a person at a shell, stays below it; a build, a mail server,
/// `tar` or `rsync` goes far above (tens of thousands a second here).
pub const BUSY_REQUESTS: f64 = 1000.0;

/// The default of [`EngineConfig::busy_moves`]: with it postmark through
/// the default mount promoted some 40 files instead of some 2 200, and the
/// statistics (those promotions' syncs) cost it 3 to 4 % instead of 12 to
/// 19 %; 2 measured no cheaper (`benches/results/io-2026-11-28-busy.md`).
pub const DEFAULT_BUSY_MOVES: f64 = 10.0;

/// `measured`'s default token rate: one move a second per directory, a
/// conservative static rate as in Wu-Reddy's prototype.
pub const DEFAULT_MEASURED_RATE: f64 = 1.0;

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            aging: stats::DEFAULT_AGING,
            flush_every: Duration::from_secs(5),
            tick: Duration::from_millis(100),
            stats_enabled: true,
            tier_paths: [String::new(), String::new()],
            mountpoint: String::new(),
            policy: PolicyKind::DynamicHotDst,
            params: Params::default(),
            ssd_capacity: None,
            migrate_rate: 64 << 20,
            placement: None,
            audit_space: false,
            watermarks: DEFAULT_WATERMARKS,
            room_wait: Duration::from_secs(1),
            chunk_period: crate::extent::defaults::PERIOD,
            write_back_max: crate::extent::writeback::DEFAULT_MAX_WRITE,
            flush_on_unmount: true,
            meters: None,
            measured_rate: DEFAULT_MEASURED_RATE,
            busy_moves: DEFAULT_BUSY_MOVES,
            budget: None,
            endurance: None,
            quiet: None,
        }
    }
}

/// Default SSD watermarks (percent of the capacity).
pub const DEFAULT_WATERMARKS: (u8, u8) = (98, 95);

/// How long the shutdown waits for the background threads.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// How long a write waits for the executor to take its file off the SSD.
const EVACUATE_WAIT: Duration = Duration::from_secs(60);

/// How long the cleaner leaves a file alone after its eviction failed (in
/// use, something in its way, an error).
const EVICTION_RETRY: Duration = Duration::from_secs(30);

/// How long the policies leave a file alone after a move of it failed
/// with an error (a target tier that refuses one of its extended
/// attributes, a read error): doubled with each failure in a row, up to
/// [`MOVE_RETRY_MAX`]. A failed move may have copied the whole file; a
/// policy that plans it again at once would copy it again and again.
pub const MOVE_RETRY: Duration = Duration::from_secs(30);

/// The longest wait after failed moves of a file.
pub const MOVE_RETRY_MAX: Duration = Duration::from_secs(3600);

/// The wait after the `failures`-th failed move of a file in a row.
fn move_retry(failures: u32) -> Duration {
    MOVE_RETRY.saturating_mul(1u32 << failures.saturating_sub(1).min(16)).min(MOVE_RETRY_MAX)
}

#[derive(Debug, Default)]
struct Counters {
    room_waits: AtomicU64,
    evacuations: AtomicU64,
    promotions: AtomicU64,
    demotions: AtomicU64,
    copies: AtomicU64,
    drops: AtomicU64,
    evictions: AtomicU64,
    bytes_moved: AtomicU64,
    failed: AtomicU64,
    diverted: AtomicU64,
    /// Moves done and their bytes, by reason and kind.
    by_reason: [[(AtomicU64, AtomicU64); 4]; Reason::LABELS.len()],
    /// Bytes of chunks copied to the SSD (sub-file extents).
    chunk_bytes: AtomicU64,
}

impl Counters {
    /// Counts a move done: its kind, its reason and its bytes.
    fn moved(&self, mv: Move, reason: Reason, bytes: u64) {
        let n = match mv {
            Move::Promote => &self.promotions,
            Move::Demote => &self.demotions,
            Move::Copy => &self.copies,
            Move::DropCopy => &self.drops,
        };
        n.fetch_add(1, Ordering::Relaxed);
        self.bytes_moved.fetch_add(bytes, Ordering::Relaxed);
        let (moves, b) = &self.by_reason[reason.index()][mv.index()];
        moves.fetch_add(1, Ordering::Relaxed);
        b.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The moves by reason that happened, and the chunk copies.
    fn by_reason(&self) -> Vec<crate::report::ReasonMoves> {
        let mut out = Vec::new();
        for (reason, kinds) in Reason::LABELS.iter().zip(&self.by_reason) {
            for (kind, (moves, bytes)) in Move::LABELS.iter().zip(kinds) {
                let moves = moves.load(Ordering::Relaxed);
                if moves > 0 {
                    let bytes = bytes.load(Ordering::Relaxed);
                    out.push(crate::report::ReasonMoves {
                        kind: kind.to_string(),
                        reason: reason.to_string(),
                        moves,
                        bytes,
                    });
                }
            }
        }
        out
    }
}

/// What the cleaner is asked to do.
#[derive(Default)]
struct Cleaning {
    /// Bytes that waiting writers and migrations need free under the
    /// capacity.
    demand: u64,
    /// Bytes to free whatever the account says (the SSD file system
    /// itself is full).
    pressure: u64,
    /// Files whose writers wait for room: not evicted for them.
    waiting: HashMap<Ino, u32>,
    /// Cleaning passes started, and completed (a waiter counts only passes
    /// that started after it asked).
    started: u64,
    passes: u64,
    /// A pass made only for the watermark freed nothing: the watermark is
    /// not looked at again before this (nothing to evict; no spinning).
    quiet_until: Option<std::time::Instant>,
    /// Bytes the last completed pass freed.
    freed_last: u64,
    /// Files to take off the SSD now, and who waits for the answer.
    urgent: VecDeque<(Ino, std::sync::mpsc::SyncSender<bool>)>,
}

#[derive(Debug, Default)]
struct MoveQueue {
    items: VecDeque<Step>,
    /// Files queued or being moved.
    busy: HashSet<Ino>,
}

/// See the module documentation.
pub struct Engine<S: Store> {
    vol: Arc<Volume<S>>,
    /// The decisions' state, the statistics among it.
    pub planner: Mutex<Planner>,
    store: StatsStore,
    clock: Arc<dyn Clock>,
    cfg: EngineConfig,
    sink: Option<Arc<QueueSink>>,
    stop: AtomicBool,
    rx: Mutex<Option<Receiver<Event>>>,
    /// A recording of the events (`tierfs trace record`); a leaf taken under `rx`.
    trace: Mutex<TraceState>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    moves: Mutex<MoveQueue>,
    moves_cv: Condvar,
    deferred: Mutex<HashMap<Ino, Step>>,
    limiter: Mutex<RateLimiter>,
    /// Whether the mount is busy, and the spacing of background moves
    /// while it is (a leaf).
    gate: Mutex<BusyGate>,
    account: Mutex<SsdAccount>,
    cleaning: Mutex<Cleaning>,
    /// Wakes the cleaner.
    clean_cv: Condvar,
    /// Wakes those waiting for room.
    room_cv: Condvar,
    /// What each background thread is doing, for a shutdown that hangs.
    activity: Mutex<HashMap<&'static str, String>>,
    /// Files whose eviction failed, and until when they are left alone.
    failed_evictions: Mutex<HashMap<Ino, std::time::Instant>>,
    /// Files whose last moves failed with an error: until when the
    /// policies leave them alone (engine clock), and how many failed in a
    /// row ([`move_retry`]).
    failed_moves: Mutex<HashMap<Ino, (Timestamp, u32)>>,
    counters: Counters,
    notes: Mutex<HashMap<Ino, String>>,
    groups: Mutex<Groups>,
    /// Directories whose subtree must be regrouped, and why.
    regroup: Mutex<Vec<(Ino, Regroup)>>,
    /// How many times a group's policy conformed its files (tests).
    pub(crate) conforms: AtomicU64,
    /// Hystor's monitor and the chunk moves to make.
    chunks: Mutex<chunks::Chunks>,
    /// The write-back areas (a leaf but for the extent map's lock).
    wb: Mutex<writeback::WriteBack>,
    /// Wakes the scrubber.
    wb_cv: Condvar,
    /// The unmount is writing the write-back areas back.
    flushing: AtomicBool,
    /// The state database (the regulator's state).
    kv: Arc<dyn Kv>,
    /// `measured`'s tokens, the moves of each file, probes (a leaf).
    measure: Mutex<measure::Measure>,
    /// Each tier's probe file, kept open (a leaf; the prober thread only).
    probe_files: Mutex<[Option<Arc<S::File>>; 2]>,
    /// The SSD write regulator (a leaf).
    regulator: Mutex<crate::regulator::Regulator>,
    /// What was served and moved by the minute, over a day (a leaf).
    history: Mutex<crate::stats::history::History>,
    /// The intake from the heat source (a leaf, taken under `rx`).
    heat: Mutex<heat::Intake>,
    /// The HDD's idleness and the files held off it (a leaf).
    quiet: Mutex<quiet::QuietState>,
    /// Work that reaches the HDD may run (always, without the quiet mode).
    hdd_open: AtomicBool,
}

/// Notes kept for `tierfs stats --file` (the latest decision per file).
const MAX_NOTES: usize = 100_000;

/// What [`Engine::execute`] came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ran {
    /// The move was done.
    Done,
    /// Not done, after copying or failing on the way: it cost about as
    /// much as a move.
    Tried,
    /// Not done and nothing copied (the file gone, already there, deferred
    /// to its last close, diverted by the regulator, no room).
    Nothing,
}

/// True if the busy gate spaces this move: every background move but a
/// pin's (the user asked for it) and an eviction (it makes room, for a
/// planned promotion or ahead of writers).
fn gated(s: &Step) -> bool {
    !(matches!(s.reason, Reason::Pinned) || s.reason.is_eviction())
}

/// The migrator's control: the configured rate, cancelled at shutdown.
struct Pacer<'a, S: Store>(&'a Engine<S>);

impl<S: Store> Control for Pacer<'_, S> {
    fn pace(&self, bytes: u64) {
        let wait = self.0.limiter.lock().take(self.0.clock.now(), bytes);
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
    fn cancelled(&self) -> bool {
        self.0.stop.load(Ordering::Acquire)
    }
}

/// The cleaner's control: no pacing (room is needed now), and a bounded
/// wait for the locks of a file someone is using (it skips that file).
struct Bounded<'a, S: Store>(&'a Engine<S>, Duration);

impl<S: Store> Control for Bounded<'_, S> {
    fn io_wait(&self) -> Option<Duration> {
        Some(self.1)
    }
    fn cancelled(&self) -> bool {
        self.0.stop.load(Ordering::Acquire)
    }
}

impl<S: Store> Engine<S> {
    /// An engine over `vol`, loading statistics from `kv`. Installs itself
    /// as the volume's hooks.
    pub fn new(
        vol: Arc<Volume<S>>,
        kv: Arc<dyn Kv>,
        clock: Arc<dyn Clock>,
        cfg: EngineConfig,
        sink: Option<Arc<QueueSink>>,
    ) -> Arc<Self> {
        let (mut stats, bad, err) = stats::load(&kv, cfg.aging);
        if let Some(e) = err {
            tracing::warn!(error = %e, "statistics could not be read; starting with none");
        }
        if bad > 0 {
            tracing::warn!(bad, "undecodable statistics entries skipped");
        }
        // Loading went through a large temporary buffer: give it back.
        // SAFETY: malloc_trim has no preconditions.
        unsafe { libc::malloc_trim(0) };
        let period = cfg.chunk_period;
        let regulator = crate::regulator::Regulator::new(cfg.budget.clone(), cfg.endurance);
        let limiter = RateLimiter::new(cfg.migrate_rate, (cfg.migrate_rate / 4).max(1 << 20));
        let gate = BusyGate::new(BUSY_REQUESTS, cfg.busy_moves);
        let mut groups = Groups::new(cfg.policy, cfg.params);
        let stored: Vec<(Ino, Stored, bool)> = vol
            .ns
            .all_settings()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(ino, b)| {
                let st = Stored::decode(&b)?;
                let is_dir = vol.ns.record(ino).ok().flatten().map(|r| r.kind == crate::store::FileKind::Dir)?;
                Some((ino, st, is_dir))
            })
            .collect();
        let renumbered = groups.load(stored);
        if !renumbered.is_empty() {
            let mut b = vol.ns.batch();
            for (ino, st) in &renumbered {
                b.put_settings(*ino, st.encode());
            }
            if let Err(e) = vol.ns.commit(b, false) {
                tracing::warn!(error = %e, "could not store group numbers");
            }
        }
        // Statistics that name a group that no longer exists (settings
        // changed just before a crash) are regrouped from the tree.
        let parent_of = |d: Ino| vol.ns.first_link(d).ok().flatten().map(|l| l.0);
        let stale: Vec<Ino> = stats.iter().filter(|(_, f)| !groups.exists(f.group)).map(|(i, _)| i).collect();
        for ino in stale {
            let g = parent_of(ino).map(|p| groups.group_of(p, &parent_of)).unwrap_or(0);
            stats.set_group(ino, g);
        }
        // One pass over the inode records, keeping only what is needed: the
        // files on the SSD for the account, and every file's placement only
        // when the statistics must be audited.
        let need_audit = cfg.audit_space || stats.is_empty();
        let mut files: HashMap<Ino, crate::tier::Placement> = HashMap::new();
        let mut on_ssd: Vec<Ino> = Vec::new();
        let read = vol.ns.for_each_record(&mut |ino, r| {
            if r.kind != crate::store::FileKind::File {
                return;
            }
            if r.placement.uses_ssd() {
                on_ssd.push(ino);
            }
            if need_audit {
                files.insert(ino, r.placement);
            }
        });
        if let Err(e) = read {
            tracing::error!(error = %e, "cannot read the namespace to check the statistics and the SSD account");
        }
        if need_audit {
            let mut group_of = |ino: Ino| parent_of(ino).map(|p| groups.group_of(p, &parent_of)).unwrap_or(0);
            audit(&mut stats, files, |ino| vol.getattr(ino).map(|a| a.size).unwrap_or(0), &mut group_of);
        }
        let real = vol.tiers.store(Tier::Ssd).statfs().map(|s| s.total).unwrap_or(u64::MAX);
        let ssd_limit = cfg.ssd_capacity.map(|c| c.min(real)).unwrap_or(real);
        let account = ssd_account(&vol, &on_ssd, ssd_limit);
        let mut cfg = cfg;
        if let Some(q) = cfg.quiet.as_mut().filter(|q| q.hold == 0) {
            q.hold = (ssd_limit as u128 * crate::quiet::DEFAULT_HOLD_PERCENT as u128 / 100) as u64;
        }
        // Loading a million statistics leaves as much freed memory behind.
        release_free_memory();
        tracing::info!(
            files = stats.len(),
            ssd_used = account.used(),
            ssd_limit,
            policy = %cfg.policy,
            "engine ready"
        );
        let e = Arc::new(Engine {
            vol,
            planner: Mutex::new(Planner::new(stats)),
            store: StatsStore::new(kv.clone()),
            kv,
            measure: Mutex::new(measure::Measure::default()),
            probe_files: Mutex::new([None, None]),
            regulator: Mutex::new(regulator),
            history: Mutex::new(crate::stats::history::History::default()),
            heat: Mutex::new(heat::Intake::default()),
            quiet: Mutex::new(quiet::QuietState::default()),
            hdd_open: AtomicBool::new(true),
            clock,
            cfg,
            sink,
            stop: AtomicBool::new(false),
            rx: Mutex::new(None),
            trace: Mutex::new(TraceState::default()),
            threads: Mutex::new(Vec::new()),
            moves: Mutex::new(MoveQueue::default()),
            moves_cv: Condvar::new(),
            deferred: Mutex::new(HashMap::new()),
            limiter: Mutex::new(limiter),
            gate: Mutex::new(gate),
            account: Mutex::new(account),
            cleaning: Mutex::new(Cleaning::default()),
            clean_cv: Condvar::new(),
            room_cv: Condvar::new(),
            activity: Mutex::new(HashMap::new()),
            failed_evictions: Mutex::new(HashMap::new()),
            failed_moves: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            notes: Mutex::new(HashMap::new()),
            groups: Mutex::new(groups),
            regroup: Mutex::new(Vec::new()),
            conforms: AtomicU64::new(0),
            chunks: Mutex::new(chunks::Chunks::new(period)),
            wb: Mutex::new(writeback::WriteBack::default()),
            wb_cv: Condvar::new(),
            flushing: AtomicBool::new(false),
        });
        e.load_regulator();
        let taken = e.wb_load();
        e.load_resident(&taken);
        // The history's baseline: what the statistics kept from before the
        // mount, before any of its requests.
        let totals = e.history_totals(&e.planner.lock().stats);
        let now = e.clock.now();
        e.history.lock().observe(now, totals);
        e.vol.set_hooks(Arc::new(EngineHooks(Arc::downgrade(&e))));
        e
    }

    fn parent_of(&self, d: Ino) -> Option<Ino> {
        self.vol.ns.first_link(d).ok().flatten().map(|l| l.0)
    }

    /// The settings in force for a group.
    fn effective(&self, g: Group) -> Effective {
        self.groups.lock().effective(g, &|d| self.parent_of(d))
    }

    /// The policy and settings of a group.
    fn setting(&self, group: Group) -> (PolicyKind, Params) {
        let e = self.effective(group);
        (e.policy, e.params)
    }

    /// The policy group whose files include the entries of `dir`.
    fn group_of(&self, dir: Ino) -> Group {
        self.groups.lock().group_of(dir, &|d| self.parent_of(d))
    }

    fn space(&self) -> Space {
        let a = self.account.lock();
        Space { used: a.used(), limit: a.limit() }
    }

    /// Records what a background thread is doing (shown if it hangs a
    /// shutdown).
    fn doing(&self, who: &'static str, what: impl Into<String>) {
        self.activity.lock().insert(who, what.into());
    }

    /// Queued, being moved, or waiting for a last close. With `open`, also
    /// files the kernel has open with passthrough (they cannot move now: the
    /// cleaner, which needs space now, skips them; a policy plans them
    /// anyway and the move waits for the last close).
    fn is_busy(&self, ino: Ino, open: bool) -> bool {
        let queued = self.moves.lock().busy.contains(&ino);
        let deferred = queued || self.deferred.lock().contains_key(&ino);
        deferred || (open && self.vol.open_inode(ino).is_some_and(|o| o.has_passthrough()))
    }

    /// True while a file whose move failed is left alone by the policies
    /// ([`move_retry`]). A rest that has longer to go than it was set for
    /// (the wall clock stepped back) is over.
    fn move_failed_lately(&self, ino: Ino) -> bool {
        let now = self.clock.now();
        self.failed_moves.lock().get(&ino).is_some_and(|(until, n)| *until > now && until.since(now) <= move_retry(*n))
    }

    /// A move of `ino` failed with an error: it rests for [`move_retry`]
    /// of its failures in a row. Returns the wait.
    fn move_failed(&self, ino: Ino) -> Duration {
        let now = self.clock.now();
        let mut f = self.failed_moves.lock();
        // Forgotten an hour after their rest ended: a file that fails
        // again later starts from the shortest wait.
        f.retain(|_, (until, _)| until.plus(MOVE_RETRY_MAX) > now);
        let failures = f.get(&ino).map_or(0, |(_, n)| *n).saturating_add(1);
        let wait = move_retry(failures);
        f.insert(ino, (now.plus(wait), failures));
        wait
    }

    /// True if `ino` is pinned to the SSD (its own pin or its group's).
    fn pinned_to_ssd(&self, ino: Ino) -> bool {
        self.pinned_to(ino) == Some(Tier::Ssd)
    }

    /// The tier `ino` is pinned to (its own pin or its group's).
    fn pinned_to(&self, ino: Ino) -> Option<Tier> {
        // Bound in a statement of its own: `pin` locks the groups.
        let group = self.planner.lock().stats.get(ino).map(|f| f.group);
        self.pin(ino, group)
    }

    /// A file's pin: its own, else its group's.
    fn pin(&self, ino: Ino, group: Option<Group>) -> Option<Tier> {
        if let Some(t) = self.groups.lock().file_pin(ino) {
            return Some(t);
        }
        group.and_then(|g| self.effective(g).pin)
    }

    fn note(&self, ino: Ino, text: String) {
        let mut n = self.notes.lock();
        if n.len() >= MAX_NOTES {
            n.clear();
        }
        n.insert(ino, text);
    }

    /// Queues the moves of a plan (each file at most once) and records why
    /// the others did not move.
    fn enqueue(&self, plan: Plan) {
        for (ino, why) in plan.skipped {
            self.note(ino, format!("not moved: {why}"));
        }
        if plan.steps.is_empty() {
            return;
        }
        let mut q = self.moves.lock();
        for s in plan.steps {
            if q.busy.insert(s.ino) {
                q.items.push_back(s);
            } else if matches!(s.reason, Reason::Pinned) {
                // The file's background move waits in the queue (the busy
                // gate may hold it there for long): the pin takes its
                // place and goes at once. A file being moved right now is
                // planned again after.
                if let Some(queued) = q.items.iter_mut().find(|x| x.ino == s.ino) {
                    *queued = s;
                }
            }
        }
        drop(q);
        self.moves_cv.notify_one();
    }

    /// True if `step` would take its file off the tier it was pinned to
    /// after the step was planned (a move the busy gate held in the queue).
    fn against_pin(&self, step: &Step) -> bool {
        match self.pinned_to(step.ino) {
            Some(Tier::Ssd) => matches!(step.mv, Move::Demote | Move::DropCopy),
            Some(Tier::Hdd) => matches!(step.mv, Move::Promote | Move::Copy),
            None => false,
        }
    }

    /// Applies events to the statistics and lets the policies react.
    pub fn ingest(&self, batch: &[Event]) {
        let now = self.clock.now();
        let live = Live(self);
        let mut p = self.planner.lock();
        for ev in batch {
            if let EventKind::DirMoved { .. } = ev.kind {
                self.regroup.lock().push((ev.ino, Regroup::Moved));
                continue;
            }
            if ev.kind == EventKind::Remove {
                self.quiet_removed(ev.ino);
                self.groups.lock().forget_file(ev.ino);
                self.deferred.lock().remove(&ev.ino);
                self.failed_moves.lock().remove(&ev.ino);
            }
            let plan = p.event(ev, now, &live);
            if let EventKind::Close { .. } = ev.kind {
                let step = self.deferred.lock().remove(&ev.ino);
                if let Some(step) = step {
                    self.enqueue(Plan { steps: vec![step], skipped: vec![] });
                }
            }
            match p.stats.get(ev.ino) {
                Some(f) => {
                    self.chunk_event(&f, ev);
                    self.wb_event(ev.ino, f.group, &ev.kind, f.residence == crate::stats::Residence::Hdd);
                }
                None if ev.kind == EventKind::Remove => {
                    self.chunk_event(&FileStats::default(), ev);
                    self.wb_event(ev.ino, 0, &ev.kind, false);
                }
                None => {}
            }
            self.enqueue(plan);
        }
    }

    /// Periodic work: the policies' interval runs and cleaners, aging,
    /// flushing.
    pub fn maintain(&self, now: Timestamp, last_flush: &mut Timestamp, force_flush: bool) {
        let live = Live(self);
        let mut p = self.planner.lock();
        let dirs: Vec<(Ino, Regroup)> = std::mem::take(&mut *self.regroup.lock());
        if !dirs.is_empty() {
            self.groups.lock().invalidate();
            let mut touched: HashSet<Group> = HashSet::new();
            for (d, why) in dirs {
                self.regroup_subtree(&mut p.stats, d, why, &mut touched);
            }
            for g in touched {
                let (kind, _) = self.setting(g);
                self.conforms.fetch_add(1, Ordering::Relaxed);
                let plan = p.conform(g, now, &live);
                if !plan.is_empty() {
                    tracing::info!(group = g, moves = plan.steps.len(), policy = %kind, "files move to where their policy wants them");
                }
                self.enqueue(plan);
            }
        }
        let groups = self.group_ids();
        let plan = p.tick(now, &groups, &live);
        self.enqueue(plan);
        self.chunk_tick(&p.stats, now);
        let totals = self.history_totals(&p.stats);
        self.history.lock().observe(now, totals);
        let aged = p.stats.age(now);
        if aged > 0 {
            tracing::debug!(periods = aged, "counters aged");
        }
        if p.stats.compact_if_grown() {
            tracing::debug!(files = p.stats.len(), "statistics maps rebuilt compactly");
        }
        if force_flush || now.since(*last_flush) >= self.cfg.flush_every {
            // Periodic flushes write a bounded part; the last one all.
            let written = if force_flush {
                self.store.flush(&mut p.stats)
            } else {
                self.store.flush_part(&mut p.stats, FLUSH_BATCH)
            };
            match written {
                Ok(n) if n > 0 => tracing::debug!(entries = n, "statistics flushed"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "statistics flush failed"),
            }
            self.save_regulator();
            *last_flush = now;
        }
    }

    /// The policy groups.
    fn group_ids(&self) -> Vec<Group> {
        self.groups.lock().all().into_iter().map(|(g, _)| g).collect()
    }

    /// Runs every group's policy once now, as `tierfs migrate` asks: the
    /// moves pins call for, and the policy's periodic plan as if its
    /// interval had come. Queued for the migrator unless `dry_run` (under
    /// the planner lock, as the engine's tick queues, so the two do not
    /// race); returned either way, one move a file. Moves a policy change
    /// would make are left to the regrouping that follows a change: here
    /// they would also undo placements the mount asks for (`--placement`).
    pub fn plan_now(&self, dry_run: bool) -> Vec<crate::report::PlannedMove> {
        self.sync_events();
        let now = self.clock.now();
        let mut plan = Plan::default();
        let mut seen = HashSet::new();
        {
            let live = Live(self);
            let p = self.planner.lock();
            for g in self.group_ids() {
                let mut pins = p.conform(g, now, &live);
                pins.steps.retain(|s| matches!(s.reason, Reason::Pinned));
                plan.extend(pins);
                plan.extend(p.periodic(g, now, None, !dry_run, &live).0);
            }
            plan.steps.retain(|s| seen.insert(s.ino));
            if !dry_run {
                self.enqueue(plan.clone());
            }
        }
        plan.steps
            .iter()
            .map(|s| crate::report::PlannedMove {
                ino: s.ino,
                path: self.vol.path_of(s.ino),
                action: match s.mv {
                    Move::Promote => "promote",
                    Move::Demote => "demote",
                    Move::Copy => "copy",
                    Move::DropCopy => "drop-copy",
                }
                .into(),
                reason: s.reason.to_string(),
                bytes: s.size,
            })
            .collect()
    }

    /// Puts every file below `dir` in its (new) group and collects the
    /// groups whose files or settings may have changed.
    ///
    /// After a settings change every group in the subtree (and the one it
    /// belongs to) conforms: their policies or inherited settings may have
    /// changed. After a rename only the groups that gained or lost files,
    /// and those headed inside the moved subtree (whose inherited settings
    /// may have changed), do: a rename within one group moves nothing, and
    /// costs a walk of the renamed subtree, not of the group.
    fn regroup_subtree(&self, st: &mut Stats, dir: Ino, why: Regroup, touched: &mut HashSet<Group>) {
        // The head lookup's guard must be gone before `group_of` locks the
        // groups again (a temporary in one expression would deadlock).
        let head = self.groups.lock().group_of_dir_head(dir);
        if why == Regroup::Settings {
            touched.insert(head.unwrap_or_else(|| self.group_of(dir)));
        }
        let mut stack = vec![dir];
        while let Some(d) = stack.pop() {
            let g = self.group_of(d);
            let heads_here = self.groups.lock().group_of_dir_head(d).is_some();
            if why == Regroup::Settings || heads_here {
                touched.insert(g);
            }
            let Ok(children) = self.vol.ns.children(d) else { continue };
            for c in children {
                match c.kind {
                    crate::store::FileKind::Dir => stack.push(c.ino),
                    crate::store::FileKind::File => {
                        if let Some(old) = st.get(c.ino).map(|f| f.group).filter(|&old| old != g) {
                            st.set_group(c.ino, g);
                            touched.insert(old);
                            touched.insert(g);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// Starts the engine and migrator threads, reading events from `rx`.
    pub fn start(self: &Arc<Self>, rx: Receiver<Event>) {
        *self.rx.lock() = Some(rx);
        self.quiet_start();
        let me = self.clone();
        let a = std::thread::Builder::new()
            .name("tierfs-engine".into())
            .spawn(move || me.run())
            .expect("spawn engine thread");
        let me = self.clone();
        let b = std::thread::Builder::new()
            .name("tierfs-migrator".into())
            .spawn(move || me.migrator())
            .expect("spawn migrator thread");
        let me = self.clone();
        let c = std::thread::Builder::new()
            .name("tierfs-cleaner".into())
            .spawn(move || me.cleaner())
            .expect("spawn cleaner thread");
        let me = self.clone();
        let d = std::thread::Builder::new()
            .name("tierfs-scrubber".into())
            .spawn(move || me.scrubber())
            .expect("spawn scrubber thread");
        self.threads.lock().extend([a, b, c, d]);
        if self.cfg.meters.is_some() {
            // Probes wait for the devices (tens of milliseconds on a slow
            // one): on a thread of their own, not the engine's.
            let me = self.clone();
            let e = std::thread::Builder::new()
                .name("tierfs-prober".into())
                .spawn(move || me.prober())
                .expect("spawn prober thread");
            self.threads.lock().push(e);
        }
    }

    /// Takes every queued event into the statistics now. The engine thread
    /// does this every tick; decisions that must see the latest accesses
    /// (the cleaner, reports) do it first.
    pub fn sync_events(&self) {
        let rx = self.rx.lock();
        let Some(rx) = rx.as_ref() else { return };
        // The heat source first: every file it has a sample of had its
        // create queued before, so the queue drained next holds it.
        let heat = self.heat_events(heat::Drain::Take);
        let mut queued = Vec::new();
        while let Ok(ev) = rx.try_recv() {
            queued.push(ev);
        }
        for batch in heat::merge(queued, heat).chunks(4096) {
            self.ingest(batch);
            self.record_trace(batch);
        }
    }

    /// Takes in the requests the heat source saw. The caller holds `rx`
    /// (the queue's events come first: a file's create before its reads).
    fn sync_heat(&self, drain: heat::Drain) {
        let batch = self.heat_events(drain);
        if !batch.is_empty() {
            self.ingest(&batch);
            self.record_trace(&batch);
        }
    }

    /// Hands events to the recording, if one runs. A write error ends it;
    /// [`Engine::stop_trace`] reports the error.
    fn record_trace(&self, batch: &[Event]) {
        let mut t = self.trace.lock();
        let Some(r) = t.rec.as_mut() else { return };
        let parent_of = |ino: Ino| self.parent_of(ino);
        // A sampled event is its requests, each a record.
        let records = batch.iter().flat_map(|ev| std::iter::repeat_n(ev, ev.times as usize));
        if let Err(e) = records.into_iter().try_for_each(|ev| r.push(ev, &parent_of)) {
            t.fail(e);
        }
    }

    /// Starts recording every event into a trace at `path` (created or
    /// truncated by the daemon: the control socket is its owner's only).
    /// Not on the mount itself: the engine thread would write into its own
    /// file system.
    pub fn start_trace(&self, path: &std::path::Path) -> std::result::Result<(), String> {
        if self.stop.load(Ordering::Acquire) {
            return Err("the mount is shutting down".into());
        }
        if path.starts_with(&self.cfg.mountpoint) {
            return Err(format!("{}: a trace cannot be written on the mount it records", path.display()));
        }
        if let Some(r) = &self.trace.lock().rec {
            return Err(format!(
                "a recording to {} is already running (`tierfs trace record --stop` ends it)",
                r.path().display()
            ));
        }
        // Events queued before now are not part of the recording.
        self.sync_events();
        let unix_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64);
        // The file is made without the lock: the engine thread takes it.
        let r = record::Recorder::create(path, self.clock.now(), unix_ns, &self.cfg.mountpoint)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let mut t = self.trace.lock();
        if let Some(other) = &t.rec {
            return Err(format!("a recording to {} started meanwhile", other.path().display()));
        }
        tracing::info!(path = %path.display(), "recording a trace");
        t.rec = Some(r);
        t.failed = None;
        Ok(())
    }

    /// Ends the recording: every event up to now is in the trace, which is
    /// synced to its disk (after the lock is let go).
    pub fn stop_trace(&self) -> std::result::Result<record::Recorded, String> {
        self.sync_events();
        let r = {
            let mut t = self.trace.lock();
            if let Some(msg) = t.failed.take() {
                return Err(msg);
            }
            t.rec.take().ok_or("no recording is running on this mount")?
        };
        let path = r.path().display().to_string();
        let done = r.finish().map_err(|e| format!("writing the trace {path}: {e}"))?;
        tracing::info!(path, records = done.records, "the trace recording ended");
        Ok(done)
    }

    /// Writes what a recording holds to its file, once a tick, so that a
    /// crash loses at most the last tick of it.
    fn flush_trace(&self) {
        let mut t = self.trace.lock();
        let Some(r) = t.rec.as_mut() else { return };
        if let Err(e) = r.flush() {
            t.fail(e);
        }
    }

    fn run(&self) {
        let mut last_flush = self.clock.now();
        let mut last_trim = std::time::Instant::now();
        let mut trim_files = 0usize;
        loop {
            // Poll instead of blocking on the queue: a receiver blocked in
            // recv makes every request wake this thread, and on a small
            // machine those wake-ups cost more than the statistics.
            let stopping = self.stop.load(Ordering::Acquire);
            if !stopping {
                std::thread::sleep(self.cfg.tick);
            }
            self.sync_events();
            let rx = self.rx.lock();
            if rx.is_some() {
                self.sync_heat(if stopping { heat::Drain::Last } else { heat::Drain::Tick });
            }
            drop(rx);
            self.gate.lock().sample(self.clock.now(), self.vol.requests());
            self.flush_trace();
            self.maintain(self.clock.now(), &mut last_flush, false);
            self.quiet_tick(self.clock.now());
            if stopping {
                break;
            }
            // Only after a big change in the number of files (an adoption,
            // a mass removal): a trim walks the whole heap.
            if last_trim.elapsed() >= TRIM_EVERY {
                let files = self.planner.lock().stats.len();
                if files.abs_diff(trim_files) >= TRIM_AFTER_FILES {
                    release_free_memory();
                    trim_files = files;
                }
                last_trim = std::time::Instant::now();
            }
        }
        self.maintain(self.clock.now(), &mut last_flush, true);
    }

    fn migrator(&self) {
        // While the mount is busy the file queue drains slowly: chunk moves
        // take every other start then, or they would wait for it to empty.
        let mut chunk_turn = false;
        loop {
            let step = {
                let mut q = self.moves.lock();
                loop {
                    if self.stop.load(Ordering::Acquire) {
                        return;
                    }
                    // While the mount is busy, background moves are spaced
                    // (`BusyGate`); pins and evictions are not held back.
                    if !q.items.is_empty() {
                        let (wait, busy) = {
                            let mut g = self.gate.lock();
                            (g.wait(self.clock.now()), g.busy())
                        };
                        if wait.is_zero() && busy && chunk_turn {
                            chunk_turn = false;
                            drop(q);
                            if self.chunk_move() {
                                break None;
                            }
                            q = self.moves.lock();
                            continue;
                        }
                        // Moves that reach the HDD wait while it is held
                        // asleep (quiet mode); they stay queued.
                        let next = q
                            .items
                            .iter()
                            .position(|s| (wait.is_zero() || !gated(s)) && !self.quiet_holds(s))
                            .and_then(|i| q.items.remove(i));
                        if let Some(s) = next {
                            if gated(&s) {
                                chunk_turn = busy;
                            }
                            break Some(s);
                        }
                        drop(q);
                        let (why, wait) = if wait.is_zero() {
                            ("holding back: the HDD sleeps", self.cfg.tick)
                        } else {
                            ("holding back: the mount is busy", wait.min(self.cfg.tick))
                        };
                        self.doing("migrator", why);
                        q = self.moves.lock();
                        if !self.stop.load(Ordering::Acquire) {
                            self.moves_cv.wait_for(&mut q, wait);
                        }
                        continue;
                    }
                    // File moves first; chunk moves when there are none.
                    // The move queue is not held while the chunk queue is
                    // looked at.
                    drop(q);
                    let wait = self.gate.lock().wait(self.clock.now());
                    if wait.is_zero() && self.chunk_move() {
                        break None;
                    }
                    q = self.moves.lock();
                    if q.items.is_empty() && !self.stop.load(Ordering::Acquire) {
                        let idle = Duration::from_millis(200);
                        self.moves_cv.wait_for(&mut q, if wait.is_zero() { idle } else { wait.min(idle) });
                    }
                }
            };
            let Some(step) = step else { continue };
            let spaced = gated(&step);
            if spaced && self.against_pin(&step) {
                self.note(step.ino, format!("{:?} not done: the file was pinned while it waited", step.mv));
                self.moves.lock().busy.remove(&step.ino);
                continue;
            }
            self.doing("migrator", format!("{:?} of inode {} ({})", step.mv, step.ino, step.reason));
            // A move that copied counts against the gate, done or not; one
            // that found its file removed while it waited costs nothing.
            if self.execute(step, &Pacer(self), true) != Ran::Nothing && spaced {
                self.gate.lock().started(self.clock.now());
            }
            self.moves.lock().busy.remove(&step.ino);
            self.doing("migrator", "idle");
        }
    }

    /// The migrator's chunk move, if one is queued: true if it took one
    /// (which counts against the busy gate).
    fn chunk_move(&self) -> bool {
        // Every chunk move reads or writes the HDD.
        if self.hdd_closed() || !self.next_chunk_move() {
            return false;
        }
        self.gate.lock().started(self.clock.now());
        self.doing("migrator", "idle");
        true
    }

    /// Carries out one move and records its outcome. With `may_wait`, a
    /// move to the SSD that finds no room waits for the cleaner once.
    fn execute(&self, step: Step, ctl: &dyn Control, may_wait: bool) -> Ran {
        let admitted = match step.mv {
            Move::Promote | Move::Copy => match self.admit_ssd_at(step.size) {
                Some(t) => Some(t),
                None => {
                    self.diverted_note(step.ino, &format!("{:?}", step.mv));
                    return Ran::Nothing;
                }
            },
            Move::Demote | Move::DropCopy => None,
        };
        let counter = self.planner.lock().stats.get(step.ino).map(|f| f.counter).unwrap_or(0);
        let mut r = self.vol.migrate(step.ino, step.mv, ctl);
        if may_wait && matches!(r, Ok(Outcome::Skipped(Skip::NoSpace))) && self.wait_room(step.ino, step.size, false) {
            r = self.vol.migrate(step.ino, step.mv, ctl);
        }
        if let Some(at) = admitted.filter(|_| !matches!(r, Ok(Outcome::Done(_)))) {
            // Admitted, not written: the room goes back to the budget.
            self.regulator.lock().release(at, step.size);
        }
        // A move not done is `Tried` when it got as far as copying (a file
        // that kept changing, a name found in the way after the copy, an
        // error on the way), `Nothing` otherwise.
        match r {
            Ok(Outcome::Done(bytes)) => {
                self.execute_done(step, bytes);
                self.moved(step.ino);
                if step.reason.is_eviction() {
                    self.counters.evictions.fetch_add(1, Ordering::Relaxed);
                    self.planner.lock().done(&step, counter);
                }
                Ran::Done
            }
            Ok(Outcome::Skipped(Skip::Deferred)) => {
                self.deferred.lock().insert(step.ino, step);
                self.note(step.ino, format!("{:?} deferred until the last passthrough handle closes", step.mv));
                Ran::Nothing
            }
            // Found after the whole copy, and lasting until someone
            // clears the name: it rests like a failure, or a policy would
            // copy the file again at its next plan.
            Ok(Outcome::Skipped(Skip::Obstructed)) => {
                let wait = self.move_failed(step.ino);
                self.note(
                    step.ino,
                    format!(
                        "{:?} not done: something else has its name on the target tier; the policies pass it over for {wait:?}",
                        step.mv
                    ),
                );
                Ran::Tried
            }
            Ok(Outcome::Skipped(why)) => {
                self.note(step.ino, format!("{:?} not done: {why:?}", step.mv));
                if matches!(why, Skip::Busy) {
                    Ran::Tried
                } else {
                    Ran::Nothing
                }
            }
            Err(Error::Cancelled) => Ran::Nothing,
            Err(e) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                let wait = self.move_failed(step.ino);
                tracing::warn!(ino = step.ino, mv = ?step.mv, error = %e, retry_after = ?wait, "migration failed");
                self.note(step.ino, format!("{:?} failed: {e}; the policies pass it over for {wait:?}", step.mv));
                Ran::Tried
            }
        }
    }

    /// Bytes the SSD must have free under the capacity now: past the high
    /// watermark, down to the low one.
    fn watermark_need(&self) -> u64 {
        let (high, low) = self.cfg.watermarks;
        if high >= 100 {
            return 0;
        }
        let a = self.account.lock();
        let mark = |pct: u8| (a.limit() as u128 * pct as u128 / 100) as u64;
        if a.used() > mark(high) {
            a.limit() - mark(low)
        } else {
            0
        }
    }

    /// The cleaner thread: evicts the coldest files (never pinned or busy
    /// ones) when someone waits for room or the SSD is past its high
    /// watermark, and takes files off the SSD on demand ([`Engine::evacuate`]).
    fn cleaner(&self) {
        loop {
            let (short, pressure, keep, for_watermark) = {
                let mut c = self.cleaning.lock();
                loop {
                    if self.stop.load(Ordering::Acquire) {
                        // Nobody waits for an answer that will not come.
                        c.urgent.clear();
                        c.passes = c.started;
                        self.room_cv.notify_all();
                        return;
                    }
                    if !c.urgent.is_empty() {
                        drop(c);
                        self.serve_urgent();
                        c = self.cleaning.lock();
                        continue;
                    }
                    // Cleaning ahead of writers waits while the HDD is held
                    // asleep (a writer who needs room still gets it).
                    let quiet = c.quiet_until.is_some_and(|t| std::time::Instant::now() < t) || self.hdd_closed();
                    let over = if quiet { 0 } else { self.watermark_need() };
                    // What is short is judged now, under the cleaning lock: a
                    // waiter takes its demand back under this lock before it
                    // takes the room, so free bytes seen here with its demand
                    // are still there for it (judged later, after it took
                    // them, they would look short and a second file would
                    // go for the same room).
                    let (limit, free) = {
                        let a = self.account.lock();
                        (a.limit(), a.free())
                    };
                    // No request can be met past the capacity.
                    let short = c.demand.max(over).min(limit).saturating_sub(free);
                    if short > 0 || c.pressure > 0 {
                        c.started += 1;
                        let keep: HashSet<Ino> = c.waiting.keys().copied().collect();
                        let for_watermark = c.demand == 0 && c.pressure == 0;
                        break (short, std::mem::take(&mut c.pressure), keep, for_watermark);
                    }
                    // Nothing to do, or the room is there (made by a pass,
                    // or by a truncate, an unlink or a demotion) and the
                    // waiters, woken, take it: wait for news rather than spin.
                    if c.demand > 0 {
                        self.room_cv.notify_all();
                    }
                    self.clean_cv.wait_for(&mut c, self.cfg.tick);
                }
            };
            let freed = self.evict(short, pressure, &keep);
            let mut c = self.cleaning.lock();
            c.passes = c.started;
            c.freed_last = freed;
            if for_watermark && freed == 0 {
                c.quiet_until = Some(std::time::Instant::now() + Duration::from_secs(1));
            }
            self.room_cv.notify_all();
            if freed == 0 {
                // Nothing could go: not again before a new request (which
                // wakes this) or a tick, while the waiters give up.
                self.clean_cv.wait_for(&mut c, self.cfg.tick);
            }
            drop(c);
            self.doing("cleaner", "idle");
        }
    }

    /// Takes off the SSD the files writes asked for (see [`Engine::evacuate`]).
    fn serve_urgent(&self) {
        loop {
            let next = self.cleaning.lock().urgent.pop_front();
            let Some((ino, answer)) = next else { return };
            self.doing("cleaner", format!("taking inode {ino} off the SSD for a write"));
            let _ = answer.try_send(self.evacuate_now(ino));
        }
    }

    /// Frees clean chunks of the write-back areas, then evicts the coldest
    /// SSD files, until `short` more bytes than now are free under the
    /// capacity (or `pressure` more, whatever the account says, if that is
    /// more), never the files in `keep` (their writers wait for this room)
    /// nor those whose eviction failed a moment ago. Writes waiting for
    /// their file to leave the SSD are served between evictions. Returns
    /// the bytes freed.
    fn evict(&self, short: u64, pressure: u64, keep: &HashSet<Ino>) -> u64 {
        // The choice must see the latest accesses and files.
        self.sync_events();
        let mut skip = keep.clone();
        {
            let mut failed = self.failed_evictions.lock();
            let now = std::time::Instant::now();
            failed.retain(|_, until| *until > now);
            skip.extend(failed.keys().copied());
        }
        // Clean chunks of the write-back areas first: their bytes are on
        // the HDD too.
        let want = short.max(pressure);
        let mut freed = self.wb_reclaim(want);
        if freed >= want {
            return freed;
        }
        let steps = self.planner.lock().room(self.clock.now(), want - freed, &skip, &Live(self));
        for s in steps {
            if self.stop.load(Ordering::Acquire) {
                break;
            }
            self.serve_urgent();
            let fresh = self.moves.lock().busy.insert(s.ino);
            if !fresh {
                continue;
            }
            self.doing("cleaner", format!("evicting inode {} ({} bytes)", s.ino, s.size));
            if self.execute(s, &Bounded(self, Duration::from_millis(50)), false) == Ran::Done {
                freed += s.size;
                self.planner.lock().cleaned(s.size);
                // Waiters may have room already.
                self.room_cv.notify_all();
            } else {
                // In use, in the way or failing: not again for a while.
                self.failed_evictions.lock().insert(s.ino, std::time::Instant::now() + EVICTION_RETRY);
            }
            self.moves.lock().busy.remove(&s.ino);
        }
        freed
    }

    /// Waits (the caller holds no lock) until `bytes` are free under the
    /// capacity, or with `real` until a cleaning pass freed something,
    /// or the cleaner gave up (a whole pass that started after the request
    /// freed nothing), or the configured wait passed. A pass that freed
    /// room another request took first is not giving up: the next pass
    /// is waited for. A request larger than the capacity cannot be met:
    /// false at once.
    fn wait_room(&self, ino: Ino, bytes: u64, real: bool) -> bool {
        if !real && bytes > self.account.lock().limit() {
            return false;
        }
        self.counters.room_waits.fetch_add(1, Ordering::Relaxed);
        let deadline = std::time::Instant::now() + self.cfg.room_wait;
        let mut c = self.cleaning.lock();
        *c.waiting.entry(ino).or_default() += 1;
        if real {
            c.pressure += bytes.saturating_add(1 << 20);
        } else {
            c.demand += bytes;
        }
        // The next pass to start sees this request.
        let mut ours = c.started + 1;
        self.clean_cv.notify_one();
        let ok = loop {
            if !real && self.account.lock().free() >= bytes {
                break true;
            }
            if c.passes >= ours {
                if real || c.freed_last == 0 {
                    break real && c.freed_last > 0;
                }
                // It freed room, but another writer took it first (the
                // pass was sized for the requests it saw): the next pass
                // to end, which sees what is still short (one under way
                // started after this request, so it counts it).
                ours = c.passes + 1;
                self.clean_cv.notify_one();
                continue;
            }
            if self.stop.load(Ordering::Acquire) || self.room_cv.wait_until(&mut c, deadline).timed_out() {
                break !real && self.account.lock().free() >= bytes;
            }
        };
        if !real {
            c.demand -= bytes;
        }
        if let Some(n) = c.waiting.get_mut(&ino) {
            *n -= 1;
            if *n == 0 {
                c.waiting.remove(&ino);
            }
        }
        ok
    }

    /// Asks the cleaner to take `ino` off the SSD and waits for it (not
    /// past the shutdown).
    fn evacuate(&self, ino: Ino) -> bool {
        if self.stop.load(Ordering::Acquire) {
            return false;
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.cleaning.lock().urgent.push_back((ino, tx));
        self.clean_cv.notify_one();
        self.counters.evacuations.fetch_add(1, Ordering::Relaxed);
        let deadline = std::time::Instant::now() + EVACUATE_WAIT;
        while std::time::Instant::now() < deadline && !self.stop.load(Ordering::Acquire) {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(done) => return done,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return false,
            }
        }
        false
    }

    /// Demotes `ino` (or drops its copy) now, in the cleaner thread.
    fn evacuate_now(&self, ino: Ino) -> bool {
        if self.vol.is_split(ino) {
            return self.unsplit_now(ino);
        }
        let mut step = None;
        let done = self.for_writer(ino, "a file off the SSD", || {
            let Ok(rec) = self.vol.record(ino) else { return Ok(Outcome::Skipped(Skip::Gone)) };
            let Some(mv) = off_ssd(rec.placement.into()) else { return Ok(Outcome::Skipped(Skip::AlreadyThere)) };
            let size = self.planner.lock().stats.get(ino).map(|f| f.size).unwrap_or(0);
            step = Some(Step { ino, mv, reason: Reason::Evacuate, size });
            self.vol.migrate(ino, mv, &Bounded(self, Duration::from_secs(1)))
        });
        match (done, step) {
            (Some(Outcome::Done(bytes)), Some(step)) => {
                self.execute_done(step, bytes);
                true
            }
            (done, _) => done.is_some(),
        }
    }

    /// Tries `op`, a move of `ino` (`what`) off the SSD for a write that
    /// found no room, until it is done or the file is gone or already
    /// there (Some), or it fails (None). Another migration of the file
    /// under way is let end: 20 tries, 10 ms apart.
    fn for_writer(&self, ino: Ino, what: &str, mut op: impl FnMut() -> Result<Outcome>) -> Option<Outcome> {
        for _ in 0..20 {
            match op() {
                Ok(o @ (Outcome::Done(_) | Outcome::Skipped(Skip::Gone | Skip::AlreadyThere))) => return Some(o),
                Ok(Outcome::Skipped(Skip::Busy)) if !self.stop.load(Ordering::Acquire) => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(Outcome::Skipped(why)) => {
                    self.note(ino, format!("could not take {what} for a write: {why:?}"));
                    return None;
                }
                Err(e) => {
                    tracing::warn!(ino, error = %e, "could not take {what} for a write");
                    return None;
                }
            }
        }
        None
    }

    /// Counts a move that was done (`bytes` copied), by an executor or by
    /// the cleaner for a writer, and forgets the file's failed moves.
    fn execute_done(&self, step: Step, bytes: u64) {
        self.failed_moves.lock().remove(&step.ino);
        self.counters.moved(step.mv, step.reason, bytes);
        self.note(step.ino, format!("{:?}: {}", step.mv, step.reason));
    }

    /// Stops the threads after the engine has taken the queued events and
    /// flushed the statistics. Queued moves are dropped (they are
    /// re-decided after the next mount); a migration under way stops at
    /// its next chunk. Returns false if a thread did not stop within a few
    /// seconds: the log then says what each was doing, and the caller
    /// should not mark the shutdown clean.
    pub fn shutdown(&self) -> bool {
        if self.cfg.flush_on_unmount {
            self.flush_write_back();
        }
        self.stop.store(true, Ordering::Release);
        {
            let _w = self.wb.lock();
            self.wb_cv.notify_all();
        }
        self.moves_cv.notify_all();
        {
            let _c = self.cleaning.lock();
            self.clean_cv.notify_all();
            self.room_cv.notify_all();
        }
        let deadline = std::time::Instant::now() + SHUTDOWN_WAIT;
        let threads: Vec<_> = self.threads.lock().drain(..).collect();
        let mut stuck = Vec::new();
        for h in threads {
            if let Err(h) = crate::runtime::join_by(h, deadline) {
                stuck.push(h.thread().name().unwrap_or("?").to_string());
            }
        }
        // After the executors stopped: their last writes are counted.
        self.save_regulator();
        // The engine thread took the last events: a recording is whole.
        // (A stuck thread may hold `rx`: then what was flushed stays.)
        let recording = self.trace.lock().rec.is_some();
        if recording && stuck.is_empty() {
            if let Err(e) = self.stop_trace() {
                tracing::error!("{e}");
            }
        }
        if stuck.is_empty() {
            return true;
        }
        let activity = self.activity.lock().clone();
        tracing::error!(threads = ?stuck, ?activity, "background threads did not stop within {SHUTDOWN_WAIT:?}");
        false
    }

    /// What each background thread is doing, one line per thread.
    pub fn activity(&self) -> Vec<String> {
        let mut v: Vec<String> = self.activity.lock().iter().map(|(k, v)| format!("{k}: {v}")).collect();
        v.sort();
        v
    }

    /// A report on one file.
    pub fn file_report(&self, ino: Ino) -> Option<FileReport> {
        self.sync_events();
        let rec = self.vol.ns.record(ino).ok().flatten()?;
        let f = self.planner.lock().stats.get(ino).unwrap_or_default();
        let (policy, _) = self.setting(f.group);
        // Its own statement: no guard of `notes` may be alive while
        // `split_report` locks `chunks` (the executor takes chunks, then
        // notes). Review finding.
        let note = self.notes.lock().get(&ino).cloned();
        Some(FileReport {
            ino,
            path: self.vol.path_of(ino),
            placement: rec.placement.label().to_string(),
            size: f.size,
            counter: f.counter,
            last_access: f.last_access,
            reads: f.reads,
            writes: f.writes,
            read_bytes: f.read_bytes,
            write_bytes: f.write_bytes,
            ssd_requests: f.ssd_reqs,
            hdd_requests: f.hdd_reqs,
            policy: Some(policy.name().to_string()),
            note,
            split: self.split_report(ino, f.size),
        })
    }

    /// The whole picture.
    pub fn status(&self, top: usize) -> StatusReport {
        self.sync_events();
        let (hot, served, totals, tracked, threshold, evicted_bytes) = {
            let p = self.planner.lock();
            let st = &p.stats;
            (
                st.top(top),
                st.served,
                st.residence_totals(),
                st.len() as u64,
                st.admission_threshold(),
                p.evicted_bytes(),
            )
        };
        let mut tiers = Vec::new();
        for t in Tier::ALL {
            let fs = self.vol.tiers.store(t).statfs().unwrap_or_default();
            let (mut files, mut bytes) = (0, 0);
            for (r, (n, b)) in &totals {
                let here = match t {
                    Tier::Ssd => r.on_ssd(),
                    Tier::Hdd => *r != Residence::Ssd,
                };
                if here {
                    files += n;
                    bytes += b;
                }
            }
            tiers.push(TierReport {
                tier: t.name().into(),
                path: self.cfg.tier_paths[t.idx()].clone(),
                capacity_bytes: fs.total,
                used_bytes: fs.total.saturating_sub(fs.free),
                free_bytes: fs.avail,
                limit_bytes: (t == Tier::Ssd).then_some(self.cfg.ssd_capacity).flatten(),
                files,
                file_bytes: bytes,
                requests: served.reqs[t.idx()],
                bytes_served: served.bytes[t.idx()],
                charged_bytes: (t == Tier::Ssd).then(|| self.account.lock().used()),
                lacks: self.vol.features(t).lacks().into_iter().map(String::from).collect(),
            });
        }
        let hottest = hot
            .into_iter()
            .map(|(ino, f)| {
                self.file_report(ino).unwrap_or(FileReport {
                    ino,
                    counter: f.counter,
                    size: f.size,
                    ..FileReport::default()
                })
            })
            .collect();
        let deferred: Vec<Ino> = self.deferred.lock().keys().copied().collect();
        // Not inside the literal below: the guard would be held across
        // `file_report`, which takes `planner` (taken before `moves`).
        let queued = self.moves.lock().items.len() as u64;
        let c = &self.counters;
        let migrations = MigrationReport {
            promotions: c.promotions.load(Ordering::Relaxed),
            demotions: c.demotions.load(Ordering::Relaxed),
            copies: c.copies.load(Ordering::Relaxed),
            drops: c.drops.load(Ordering::Relaxed),
            evictions: c.evictions.load(Ordering::Relaxed),
            bytes_moved: c.bytes_moved.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            queued,
            deferred: deferred.into_iter().filter_map(|i| self.file_report(i)).collect(),
            evicted_bytes,
            room_waits: c.room_waits.load(Ordering::Relaxed),
            evacuations: c.evacuations.load(Ordering::Relaxed),
            diverted: c.diverted.load(Ordering::Relaxed),
            by_reason: c.by_reason(),
            chunk_bytes: c.chunk_bytes.load(Ordering::Relaxed),
            busy: self.gate.lock().busy(),
        };
        let io_mode = self.vol.io_mode();
        let heat = self.heat_report();
        // The clock first: nothing is taken while `history` is held.
        let now = self.clock.now();
        let history = self.history.lock().report(now);
        StatusReport {
            mountpoint: self.cfg.mountpoint.clone(),
            pid: std::process::id(),
            io_mode: match io_mode {
                IoMode::Passthrough => "passthrough".into(),
                IoMode::Userspace => "userspace".into(),
            },
            counting: counting(io_mode, &heat),
            heat,
            tiers,
            ssd_hit_ratio: served.ssd_hit_ratio(),
            tracked_files: tracked,
            hottest,
            admission_threshold: threshold,
            aging_period_secs: self.cfg.aging.as_secs(),
            dropped_events: self.sink.as_ref().map(|s| s.dropped()).unwrap_or(0),
            stats_enabled: self.cfg.stats_enabled,
            policy: self.cfg.policy.name().into(),
            migrations,
            groups: self.groups_report(),
            emulation: Vec::new(),
            remap: self.remap_report(),
            write_back: self.wb_report(),
            measured: self.measure_report(),
            regulator: Some(self.regulator_report()),
            history,
            hdd: self.hdd_report(now),
        }
    }

    /// The running totals the history keeps by the minute.
    fn history_totals(&self, st: &Stats) -> crate::stats::history::Totals {
        let c = &self.counters;
        let moves = [&c.promotions, &c.demotions, &c.copies, &c.drops].iter().map(|a| a.load(Ordering::Relaxed)).sum();
        crate::stats::history::Totals {
            reqs: st.served.reqs,
            bytes: st.served.bytes,
            moves,
            bytes_moved: c.bytes_moved.load(Ordering::Relaxed),
        }
    }

    /// Every pin, directories first, then by path.
    pub fn pins_report(&self) -> Vec<crate::report::PinReport> {
        self.sync_events();
        // Copied out: `groups` is not held while the volume is asked.
        let (dirs, files) = {
            let g = self.groups.lock();
            let dirs: Vec<(Ino, Tier)> =
                g.all().into_iter().filter_map(|(_, i)| i.own.pin.map(|t| (i.dir, t))).collect();
            (dirs, g.file_pins())
        };
        let mut out: Vec<crate::report::PinReport> = dirs
            .into_iter()
            .map(|(ino, t)| (ino, t, true))
            .chain(files.into_iter().map(|(ino, t)| (ino, t, false)))
            .map(|(ino, t, directory)| crate::report::PinReport {
                ino,
                path: self.vol.path_of(ino),
                directory,
                tier: t.name().to_string(),
                placement: if directory {
                    None
                } else {
                    self.vol.record(ino).ok().map(|r| r.placement.label().to_string())
                },
            })
            .collect();
        out.sort_by(|a, b| (!a.directory, &a.path, a.ino).cmp(&(!b.directory, &b.path, b.ino)));
        out
    }

    /// Every policy directory and what it governs.
    pub fn groups_report(&self) -> Vec<GroupReport> {
        self.sync_events();
        let all = self.groups.lock().all();
        let mut out: HashMap<Group, GroupReport> = HashMap::new();
        for (g, info) in &all {
            let e = self.effective(*g);
            let own = Key::ALL.iter().filter_map(|k| info.own.get(*k).map(|v| (k.name().to_string(), v))).collect();
            out.insert(
                *g,
                GroupReport {
                    group: *g,
                    dir: self.vol.path_of(info.dir).unwrap_or_else(|| format!("(inode {})", info.dir)),
                    own,
                    policy: e.policy.name().into(),
                    policy_from: match e.policy_from {
                        Some(d) => self.vol.path_of(d).unwrap_or_default(),
                        None => "mount option".into(),
                    },
                    sieve: e.params.sieve,
                    interval_secs: e.params.interval.as_secs_f64(),
                    pin: e.pin.map(|t| t.name().to_string()),
                    ..GroupReport::default()
                },
            );
        }
        let p = self.planner.lock();
        for (_, f) in p.stats.iter() {
            let Some(r) = out.get_mut(&f.group) else { continue };
            r.files += 1;
            match f.residence {
                Residence::Ssd => {
                    r.files_ssd += 1;
                    r.bytes_ssd += f.size;
                }
                Residence::Hdd => {
                    r.files_hdd += 1;
                    r.bytes_hdd += f.size;
                }
                Residence::Cached => {
                    r.files_cached += 1;
                    r.bytes_ssd += f.size;
                    r.bytes_hdd += f.size;
                }
            }
        }
        for (g, served) in &p.stats.served_by_group {
            if let Some(r) = out.get_mut(g) {
                r.requests = served.reqs;
                r.ssd_hit_ratio = served.ssd_hit_ratio();
            }
        }
        let mut v: Vec<GroupReport> = out.into_values().collect();
        v.sort_by(|a, b| a.dir.cmp(&b.dir));
        v
    }

    /// The settings stored on one inode.
    fn own_settings(&self, ino: Ino) -> Settings {
        self.vol
            .ns
            .settings(ino)
            .ok()
            .flatten()
            .and_then(|b| Stored::decode(&b))
            .map(|s| s.settings)
            .unwrap_or_default()
    }

    /// The group an inode's settings are read from: a directory's own (or
    /// inherited) group, a file's directory's group.
    fn node_group(&self, ino: Ino, is_dir: bool) -> Group {
        if is_dir {
            self.group_of(ino)
        } else {
            self.parent_of(ino).map(|p| self.group_of(p)).unwrap_or(0)
        }
    }

    /// getxattr of a `user.tierfs.*` name: the value in force (inherited
    /// if not set on this inode). `None`: not a tierfs name.
    pub fn xattr_get(&self, ino: Ino, name: &OsStr) -> Option<Result<Vec<u8>>> {
        let key = match Key::parse(name.as_bytes()) {
            Ok(None) => return None,
            Ok(Some(k)) => k,
            Err(_) => return Some(err(libc::ENODATA)),
        };
        Some((|| {
            let is_dir = self.vol.getattr(ino)?.kind == crate::store::FileKind::Dir;
            let e = self.effective(self.node_group(ino, is_dir));
            let v = match key {
                Key::Policy => e.policy.name().to_string(),
                Key::PolicySource => match e.policy_from {
                    Some(d) => self.vol.path_of(d).unwrap_or_default(),
                    None => "mount option".into(),
                },
                Key::Sieve => crate::config::format_size(e.params.sieve),
                Key::Interval => crate::config::format_duration(e.params.interval),
                Key::Chunk => crate::config::format_size(e.params.chunk),
                Key::WriteBack => format!("{}%", crate::policy::write_back_percent(e.policy, &e.params)),
                Key::Delta => crate::settings::format_delta(e.params.delta),
                Key::Quiet => if e.params.quiet { "on" } else { "off" }.to_string(),
                Key::Placement => {
                    let rec = self.vol.record(ino)?;
                    if is_dir {
                        self.vol.tiers.meta.name().to_string()
                    } else {
                        rec.placement.label().to_string()
                    }
                }
                Key::Pin => {
                    let own = if is_dir { None } else { self.groups.lock().file_pin(ino) };
                    match own.or(e.pin) {
                        Some(t) => t.name().to_string(),
                        None => return err(libc::ENODATA),
                    }
                }
            };
            Ok(v.into_bytes())
        })())
    }

    /// The `user.tierfs.*` names set on this inode, each NUL-terminated.
    pub fn xattr_list(&self, ino: Ino) -> Vec<u8> {
        let own = self.own_settings(ino);
        let mut out = Vec::new();
        for k in Key::ALL {
            if own.get(k).is_some() {
                out.extend_from_slice(k.name().as_bytes());
                out.push(0);
            }
        }
        out
    }

    /// setxattr (value `Some`) or removexattr (`None`) of a tierfs name.
    /// Only the owner or root may change an inode's settings; bad values
    /// are EINVAL and change nothing.
    pub fn xattr_change(
        &self,
        ctx: &Ctx,
        ino: Ino,
        name: &OsStr,
        value: Option<&[u8]>,
        flags: i32,
    ) -> Option<Result<()>> {
        let key = match Key::parse(name.as_bytes()) {
            Ok(None) => return None,
            Ok(Some(k)) => k,
            Err(e) => return Some(Err(e)),
        };
        Some(self.change_setting(ctx, ino, key, value, flags))
    }

    fn change_setting(&self, ctx: &Ctx, ino: Ino, key: Key, value: Option<&[u8]>, flags: i32) -> Result<()> {
        let attr = self.vol.getattr(ino)?;
        let is_dir = attr.kind == crate::store::FileKind::Dir;
        let path = self.vol.path_of(ino).unwrap_or_default();
        if key.read_only() {
            return Err(Error::Invalid(format!("{} is read-only", key.name())));
        }
        if key.dirs_only() && !is_dir {
            return Err(Error::Invalid(format!("{} is set on directories, and {path} is not one", key.name())));
        }
        if attr.kind != crate::store::FileKind::File && !is_dir {
            return Err(Error::Invalid(format!("{path}: only files and directories take tierfs settings")));
        }
        if ctx.uid != 0 && ctx.uid != attr.uid {
            tracing::warn!(uid = ctx.uid, path, "only the owner or root may change tierfs settings");
            return err(libc::EPERM);
        }
        if ctx.uid != 0 && value.is_some_and(|v| ssd_hungry(key, v)) {
            // Pinned files are never evicted and ssd-only keeps everything on
            // the SSD: one user could push every other user's files off it.
            tracing::warn!(uid = ctx.uid, path, setting = key.name(), "only root may pin to the SSD or set ssd-only");
            return err(libc::EPERM);
        }
        let mut own = self.own_settings(ino);
        let before = own;
        let was_set = own.get(key).is_some();
        match value {
            Some(v) => {
                if flags & libc::XATTR_CREATE != 0 && was_set {
                    return err(libc::EEXIST);
                }
                if flags & libc::XATTR_REPLACE != 0 && !was_set {
                    return err(libc::ENODATA);
                }
                own.set(key, v)?;
            }
            None => {
                if !own.unset(key) {
                    return err(libc::ENODATA);
                }
            }
        }
        if ctx.uid != 0 && is_dir {
            // The area the directory heads after the change: a user may give
            // it at most a tenth of the SSD, set or inherited (a new group
            // below root's area would otherwise take root's share again).
            let (was, now) = (self.dir_share(ino, &before), self.dir_share(ino, &own));
            if now > crate::extent::writeback::USER_SHARE_MAX && now > was {
                tracing::warn!(
                    uid = ctx.uid,
                    path,
                    share = now,
                    "only root may give a write-back area more than a tenth of the SSD"
                );
                return err(libc::EPERM);
            }
        }
        let stored = {
            let mut g = self.groups.lock();
            if is_dir {
                g.set_dir(ino, own)
            } else {
                g.set_file_pin(ino, own.pin);
                Stored { settings: own, group: None }
            }
        };
        let mut b = self.vol.ns.batch();
        if own.is_empty() && stored.group.is_none() {
            b.del_settings(ino);
        } else {
            b.put_settings(ino, stored.encode());
        }
        self.vol.ns.commit(b, true)?;
        tracing::info!(path, setting = key.name(), value = ?own.get(key), "tierfs setting changed");
        let dir = if is_dir { ino } else { self.parent_of(ino).unwrap_or(crate::state::ns::ROOT_INO) };
        self.regroup.lock().push((dir, Regroup::Settings));
        Ok(())
    }

    /// The share of the SSD (percent) the write-back area of directory
    /// `dir` would ask for with `own` as its settings: 0 if they head no
    /// group, else its own share or policy's, or what it inherits.
    fn dir_share(&self, dir: Ino, own: &Settings) -> u8 {
        if !own.defines_group() {
            return 0;
        }
        let (policy, params) = match self.parent_of(dir) {
            Some(p) if dir != crate::state::ns::ROOT_INO => self.setting(self.group_of(p)),
            _ => (self.cfg.policy, self.cfg.params),
        };
        let policy = own.policy.unwrap_or(policy);
        let params = crate::policy::Params { write_back: own.write_back.unwrap_or(params.write_back), ..params };
        crate::policy::write_back_percent(policy, &params)
    }

    /// SSD bytes accounted as used.
    pub fn ssd_used(&self) -> u64 {
        self.account.lock().used()
    }

    /// After a change of the account: wake the cleaner if the SSD passed
    /// its high watermark.
    fn account_changed(&self) {
        if self.watermark_need() > 0 {
            self.clean_cv.notify_one();
        }
    }
}

/// True for settings that claim SSD space nobody else can get back: a pin
/// to the SSD and the ssd-only policy.
fn ssd_hungry(key: Key, value: &[u8]) -> bool {
    let mut probe = Settings::default();
    if probe.set(key, value).is_err() {
        return false;
    }
    probe.pin == Some(Tier::Ssd) || probe.policy == Some(PolicyKind::SsdOnly)
}

/// Makes the statistics agree with the namespace after they may have
/// missed events (an unclean shutdown, or none at all): entries of files
/// that no longer exist go, residences follow the recorded placements, and
/// files without statistics get fresh ones in their group.
fn audit(
    stats: &mut Stats,
    files: HashMap<Ino, crate::tier::Placement>,
    size_of: impl Fn(Ino) -> u64,
    group_of: &mut dyn FnMut(Ino) -> Group,
) {
    let gone: Vec<Ino> = stats.iter().map(|(i, _)| i).filter(|i| !files.contains_key(i)).collect();
    let (mut added, mut moved) = (0, 0);
    for ino in &gone {
        stats.remove(*ino);
    }
    for (ino, placement) in files {
        let residence: Residence = placement.into();
        match stats.get(ino).map(|f| f.residence) {
            Some(r) if r == residence => {}
            Some(_) => {
                stats.set_residence(ino, residence);
                moved += 1;
            }
            None => {
                let f = FileStats { residence, size: size_of(ino), group: group_of(ino), ..FileStats::default() };
                stats.insert(ino, f);
                added += 1;
            }
        }
    }
    if !gone.is_empty() || added > 0 || moved > 0 {
        tracing::info!(
            removed = gone.len(),
            added,
            placement_fixed = moved,
            "statistics checked against the namespace"
        );
    }
}

/// The SSD space account as the SSD holds it: every file whose placement
/// uses the SSD, charged what its copy there occupies.
fn ssd_account<S: Store>(vol: &Volume<S>, on_ssd: &[Ino], limit: u64) -> SsdAccount {
    let mut a = SsdAccount::new(limit);
    for ino in on_ssd {
        let Ok(Some((p, n))) = vol.ns.first_link(*ino) else { continue };
        if let Ok(st) = vol.stat_on(p, &n, Tier::Ssd) {
            a.settle(*ino, 0, st.blocks * 512);
        }
    }
    // Split files are charged what their shadows occupy.
    for (ino, _) in vol.split_files() {
        a.settle(ino, 0, vol.shadow_bytes(ino));
    }
    a
}

impl<S: Store> Drop for Engine<S> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// The tiers as the engine knows them, for the planner. Each answer takes
/// leaf locks of its own (groups, queue, account, measure, regulator),
/// never the planner's.
struct Live<'a, S: Store>(&'a Engine<S>);

impl<S: Store> Tiers for Live<'_, S> {
    fn setting(&self, g: Group) -> (PolicyKind, Params) {
        self.0.setting(g)
    }
    fn group_of(&self, dir: Ino) -> Group {
        self.0.group_of(dir)
    }
    fn space(&self) -> Space {
        self.0.space()
    }
    fn busy(&self, ino: Ino, open: bool) -> bool {
        self.0.is_busy(ino, open)
    }
    fn resting(&self, ino: Ino) -> bool {
        self.0.move_failed_lately(ino)
    }
    fn pin(&self, ino: Ino, group: Option<Group>) -> Option<Tier> {
        self.0.pin(ino, group)
    }
    fn unknown(&self, ino: Ino) -> Option<(Residence, Group)> {
        let rec = self.0.vol.record(ino).ok().filter(|r| r.kind == crate::store::FileKind::File)?;
        let group = self.0.parent_of(ino).map(|p| self.0.group_of(p)).unwrap_or(0);
        Some((rec.placement.into(), group))
    }
    fn speeds(&self) -> [crate::store::measured::Speed; 2] {
        self.0.speeds()
    }
    fn moves(&self, ino: Ino, now: Timestamp) -> u32 {
        self.0.moves_of(ino, now)
    }
    fn ssd_admits(&self, now: Timestamp, bytes: u64) -> bool {
        // The regulator is a leaf lock: taken (after it saw the meter's
        // count, as for `admit`) and dropped inside the call.
        self.0.regulator(now).would_admit(now, bytes)
    }
    fn tokens(&self, g: Group, now: Timestamp) -> u32 {
        self.0.tokens(g, now)
    }
    fn spend(&self, g: Group, moves: u32) {
        self.0.spend_tokens(g, moves)
    }
}

/// The engine as the volume's hooks (a weak reference: the engine owns the
/// volume).
struct EngineHooks<S: Store>(Weak<Engine<S>>);

impl<S: Store> Hooks for EngineHooks<S> {
    fn created(&self, ino: Ino, parent: Ino, tier: Tier) {
        if let Some(e) = self.0.upgrade() {
            e.quiet_created(ino, parent, tier);
        }
    }

    fn quiet_dir(&self, dir: Ino) -> bool {
        self.0.upgrade().is_some_and(|e| e.quiet_dir(dir))
    }

    fn hdd_asleep(&self) -> bool {
        self.0.upgrade().is_some_and(|e| e.hdd_closed())
    }

    fn initial_tier(&self, parent: Ino) -> Option<Tier> {
        let e = self.0.upgrade()?;
        let tier = match e.cfg.placement {
            Some(t) => t,
            None => e.setting(e.group_of(parent)).0.policy().initial_tier(),
        };
        // While the HDD sleeps a new file goes to the SSD, held there
        // until the gate opens (`Engine::quiet_created`).
        let tier = if tier == Tier::Hdd && e.hdd_closed() && e.quiet_dir(parent) { Tier::Ssd } else { tier };
        match tier {
            // A new file is a write that can go elsewhere, with
            // `--placement ssd` too: the placement says where new files
            // go, the budget how much the SSD takes.
            Tier::Ssd if !e.admit_new_file() => {
                e.counters.diverted.fetch_add(1, Ordering::Relaxed);
                Some(Tier::Hdd)
            }
            t => Some(t),
        }
    }

    // A file pinned to the SSD is not taken off it for the budget's sake
    // (the policy would bring it back, writing the SSD again): its writes
    // go there, and the meter counts them.
    fn ssd_write_ok(&self, ino: Ino, bytes: u64) -> bool {
        self.0.upgrade().is_none_or(|e| e.pinned_to_ssd(ino) || e.required_ssd(bytes))
    }

    fn ssd_growth_ok(&self, ino: Ino, bytes: u64) -> bool {
        self.0.upgrade().is_none_or(|e| e.pinned_to_ssd(ino) || e.admit_ssd(bytes))
    }

    fn reserve_ssd(&self, ino: Ino, bytes: u64) -> bool {
        let Some(e) = self.0.upgrade() else { return true };
        let ok = e.account.lock().try_reserve(ino, bytes);
        e.account_changed();
        ok
    }

    fn force_ssd(&self, ino: Ino, bytes: u64) {
        if let Some(e) = self.0.upgrade() {
            e.account.lock().force_reserve(ino, bytes);
            e.account_changed();
        }
    }

    fn settle_ssd(&self, ino: Ino, reserved: u64, now: Option<u64>) {
        if let Some(e) = self.0.upgrade() {
            match now {
                Some(n) => e.account.lock().settle(ino, reserved, n),
                None => e.account.lock().unreserve(ino, reserved),
            }
            e.account_changed();
        }
    }

    fn off_ssd(&self, ino: Ino) {
        if let Some(e) = self.0.upgrade() {
            e.account.lock().forget(ino);
        }
    }

    fn wait_for_room(&self, ino: Ino, bytes: u64, real: bool) -> bool {
        match self.0.upgrade() {
            Some(e) => e.wait_room(ino, bytes, real),
            None => false,
        }
    }

    fn evacuate(&self, ino: Ino) -> Option<bool> {
        self.0.upgrade().map(|e| e.evacuate(ino))
    }

    fn write_back(&self, ino: Ino, parent: Option<Ino>) -> crate::vfs::WriteBackUse {
        self.0.upgrade().map(|e| e.write_back_use(ino, parent)).unwrap_or_default()
    }

    fn wb_reserve(&self, area: u32, bytes: u64) -> bool {
        self.0.upgrade().is_some_and(|e| e.wb_reserve(area, bytes))
    }

    fn wb_admitted(&self, area: u32, ino: Ino, chunks: &[(u64, u64)], reserved: u64) {
        if let Some(e) = self.0.upgrade() {
            e.wb_admitted(area, ino, chunks, reserved);
        }
    }

    fn counts_chunks(&self, ino: Ino, size: u64) -> bool {
        let Some(e) = self.0.upgrade() else { return false };
        let Some(parent) = e.parent_of(ino) else { return false };
        let (kind, params) = e.setting(e.group_of(parent));
        kind.policy().chunks() && size > params.sieve
    }

    fn passthrough_write_ok(&self, _ino: Ino) -> bool {
        match self.0.upgrade() {
            // With a capacity limit every SSD write must be accounted, and
            // with a write budget every SSD write must be seen.
            Some(e) if e.cfg.ssd_capacity.is_some() || e.regulated() => false,
            Some(e) => e.vol.tiers.store(Tier::Ssd).statfs().map(|s| s.avail >= 1 << 30).unwrap_or(false),
            None => true,
        }
    }
}

/// Why a subtree is regrouped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Regroup {
    /// A setting of its head (or of a file in it) changed.
    Settings,
    /// It was renamed.
    Moved,
}

/// How often the engine may give memory the allocator holds free back to
/// the system, and after how big a change in the number of tracked files.
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(10);
const TRIM_AFTER_FILES: usize = 50_000;

/// Returns the heap memory glibc's allocator holds free to the system. A
/// big adoption or statistics flush allocates and frees hundreds of
/// megabytes in many small pieces, which glibc otherwise keeps for the
/// life of the daemon.
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let t = std::time::Instant::now();
        // SAFETY: malloc_trim only walks the allocator's own free lists; it
        // is safe to call at any time from any thread.
        unsafe {
            libc::malloc_trim(0);
        }
        tracing::debug!(took = ?t.elapsed(), "free heap memory given back");
    }
}

#[cfg(test)]
mod tests;
