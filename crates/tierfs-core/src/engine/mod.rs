//! The tiering engine.
//!
//! One thread takes access events off the request path, feeds the
//! statistics, asks each group's policy what to do (on every access for
//! the dynamic policies, every tick for the interval ones and the
//! background cleaner), ages and flushes the statistics. A second thread,
//! the migrator, carries plans out one move at a time at a bounded rate.
//! The engine also implements the volume's [`Hooks`]: where new files go,
//! the SSD space account, and the foreground cleaner that evicts the
//! coldest files when a write or a migration finds no SSD room.

pub mod rate;

use crate::clock::{Clock, Timestamp};
use crate::event::{Event, EventKind, EventSink};
use crate::migrate::{Control, Move, Outcome, Skip};
use crate::policy::{evict_for, Params, Plan, PolicyKind, Reason, Space, Step, View};
use crate::report::{FileReport, MigrationReport, StatusReport, TierReport};
use crate::state::ns::Ino;
use crate::state::Kv;
use crate::stats::{self, FileStats, Group, Residence, Stats, StatsStore};
use crate::store::Store;
use crate::tier::Tier;
use crate::vfs::{Hooks, IoMode, Volume};
use parking_lot::{Condvar, Mutex};
use rate::RateLimiter;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// Queue length between the request path and the engine.
pub const QUEUE: usize = 1 << 16;

/// The event sink of the request path: a bounded queue. When the engine
/// falls behind, events are dropped (and counted), never waited for.
#[derive(Debug)]
pub struct QueueSink {
    tx: SyncSender<Event>,
    dropped: AtomicU64,
}

impl EventSink for QueueSink {
    fn record(&self, ev: Event) {
        match self.tx.try_send(ev) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl QueueSink {
    /// Events dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// A queue: its sink for the volume, its receiving end for the engine.
pub fn queue() -> (Arc<QueueSink>, Receiver<Event>) {
    let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
    (Arc::new(QueueSink { tx, dropped: AtomicU64::new(0) }), rx)
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
    /// Look for files whose statistics were lost (after an unclean
    /// shutdown), so that the SSD space account is right.
    pub audit_space: bool,
}

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
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    promotions: AtomicU64,
    demotions: AtomicU64,
    copies: AtomicU64,
    drops: AtomicU64,
    evictions: AtomicU64,
    bytes_moved: AtomicU64,
    failed: AtomicU64,
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
    /// The statistics.
    pub stats: Mutex<Stats>,
    store: StatsStore,
    clock: Arc<dyn Clock>,
    cfg: EngineConfig,
    sink: Option<Arc<QueueSink>>,
    stop: AtomicBool,
    rx: Mutex<Option<Receiver<Event>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    moves: Mutex<MoveQueue>,
    moves_cv: Condvar,
    deferred: Mutex<HashMap<Ino, Step>>,
    limiter: Mutex<RateLimiter>,
    ssd_used: AtomicU64,
    ssd_limit: u64,
    evicted_bytes: AtomicU64,
    counters: Counters,
    notes: Mutex<HashMap<Ino, String>>,
    last_run: Mutex<HashMap<Group, Timestamp>>,
}

/// Notes kept for `tierfs stats --file` (the latest decision per file).
const MAX_NOTES: usize = 100_000;

struct Pacer<'a, S: Store>(&'a Engine<S>);

impl<S: Store> Control for Pacer<'_, S> {
    fn pace(&self, bytes: u64) {
        let wait = self.0.limiter.lock().take(self.0.clock.now(), bytes);
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
}

/// Foreground cleaning runs inside a request; it must never wait long for
/// a file someone else is using.
struct Foreground;

impl Control for Foreground {
    fn io_wait(&self) -> Option<Duration> {
        Some(Duration::from_millis(50))
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
        // Files on the SSD whose statistics were lost (a crash) still take
        // space: find them in the namespace.
        let mut missing = 0;
        let audit = cfg.audit_space || stats.is_empty();
        if let Some(all) = audit.then(|| vol.ns.all_records().ok()).flatten() {
            for (ino, rec) in all {
                if rec.kind != crate::store::FileKind::File || stats.get(ino).is_some() {
                    continue;
                }
                let size = vol.getattr(ino).map(|a| a.size).unwrap_or(0);
                stats.insert(ino, FileStats { residence: rec.placement.into(), size, ..FileStats::default() });
                missing += 1;
            }
        }
        if missing > 0 {
            tracing::info!(missing, "files without statistics were added");
        }
        let used: u64 = stats.iter().filter(|(_, f)| f.residence.on_ssd()).map(|(_, f)| f.size).sum();
        let real = vol.tiers.store(Tier::Ssd).statfs().map(|s| s.total).unwrap_or(u64::MAX);
        let ssd_limit = cfg.ssd_capacity.map(|c| c.min(real)).unwrap_or(real);
        tracing::info!(files = stats.len(), ssd_used = used, ssd_limit, policy = %cfg.policy, "engine ready");
        // Loading went through a large temporary buffer: give it back.
        // SAFETY: malloc_trim has no preconditions.
        unsafe { libc::malloc_trim(0) };
        let limiter = RateLimiter::new(cfg.migrate_rate, (cfg.migrate_rate / 4).max(1 << 20));
        let e = Arc::new(Engine {
            vol,
            stats: Mutex::new(stats),
            store: StatsStore::new(kv),
            clock,
            cfg,
            sink,
            stop: AtomicBool::new(false),
            rx: Mutex::new(None),
            threads: Mutex::new(Vec::new()),
            moves: Mutex::new(MoveQueue::default()),
            moves_cv: Condvar::new(),
            deferred: Mutex::new(HashMap::new()),
            limiter: Mutex::new(limiter),
            ssd_used: AtomicU64::new(used),
            ssd_limit,
            evicted_bytes: AtomicU64::new(0),
            counters: Counters::default(),
            notes: Mutex::new(HashMap::new()),
            last_run: Mutex::new(HashMap::new()),
        });
        e.vol.set_hooks(Arc::new(EngineHooks(Arc::downgrade(&e))));
        e
    }

    /// The policy and settings of a group.
    fn setting(&self, _group: Group) -> (PolicyKind, Params) {
        (self.cfg.policy, self.cfg.params)
    }

    /// The policy group of a directory (all files are in group 0 until
    /// per-directory policies are set).
    fn group_of(&self, _dir: Ino) -> Group {
        0
    }

    fn space(&self) -> Space {
        Space { used: self.ssd_used.load(Ordering::Acquire), limit: self.ssd_limit }
    }

    /// Queued, being moved, or waiting for a last close. With `open`, also
    /// files the kernel has open with passthrough (they cannot move now: the
    /// cleaner, which needs space now, skips them; a policy plans them
    /// anyway and the move waits for the last close).
    fn is_busy(&self, ino: Ino, open: bool) -> bool {
        self.moves.lock().busy.contains(&ino)
            || self.deferred.lock().contains_key(&ino)
            || (open && self.vol.open_inode(ino).is_some_and(|o| o.handle_counts().1 > 0))
    }

    fn pin(&self, _ino: Ino) -> Option<Tier> {
        None
    }

    /// Runs `f` with a view of group `g` (`open`: see [`Engine::is_busy`]).
    fn with_view<R>(&self, st: &Stats, g: Group, open: bool, f: impl FnOnce(&View<'_>) -> R) -> R {
        let (_, params) = self.setting(g);
        let pin = |i: Ino| self.pin(i);
        let busy = |i: Ino| self.is_busy(i, open);
        let v = View {
            stats: st,
            now: self.clock.now(),
            space: self.space(),
            group: g,
            params,
            pin: &pin,
            busy: &busy,
            evicted_bytes: self.evicted_bytes.load(Ordering::Relaxed),
        };
        f(&v)
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
            }
        }
        drop(q);
        self.moves_cv.notify_one();
    }

    /// Applies events to the statistics and lets the policies react.
    pub fn ingest(&self, batch: &[Event]) {
        let mut st = self.stats.lock();
        for ev in batch {
            if ev.kind == EventKind::Remove {
                if let Some(f) = st.get(ev.ino) {
                    if f.residence.on_ssd() {
                        self.release(f.size);
                    }
                }
                self.deferred.lock().remove(&ev.ino);
            }
            st.apply(ev, &mut |d| self.group_of(d));
            if let EventKind::Close { .. } = ev.kind {
                if let Some(step) = self.deferred.lock().remove(&ev.ino) {
                    self.enqueue(Plan { steps: vec![step], skipped: vec![] });
                }
            }
            let Some(f) = st.get(ev.ino).copied() else { continue };
            let (kind, _) = self.setting(f.group);
            let plan = self.with_view(&st, f.group, false, |v| kind.policy().on_access(v, ev.ino, &f, &ev.kind));
            self.enqueue(plan);
        }
    }

    /// Periodic work: the policies' interval runs and cleaners, aging,
    /// flushing.
    pub fn maintain(&self, now: Timestamp, last_flush: &mut Timestamp, force_flush: bool) {
        let mut st = self.stats.lock();
        let groups: Vec<Group> = vec![0];
        for g in groups {
            let (kind, _) = self.setting(g);
            let last = self.last_run.lock().get(&g).copied();
            let (plan, ran) = self.with_view(&st, g, false, |v| kind.policy().on_tick(v, last));
            if ran {
                self.last_run.lock().insert(g, now);
            }
            self.enqueue(plan);
        }
        let aged = st.age(now);
        if aged > 0 {
            tracing::debug!(periods = aged, "counters aged");
        }
        if force_flush || now.since(*last_flush) >= self.cfg.flush_every {
            match self.store.flush(&mut st) {
                Ok(n) if n > 0 => tracing::debug!(entries = n, "statistics flushed"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "statistics flush failed"),
            }
            *last_flush = now;
        }
    }

    /// Starts the engine and migrator threads, reading events from `rx`.
    pub fn start(self: &Arc<Self>, rx: Receiver<Event>) {
        *self.rx.lock() = Some(rx);
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
        self.threads.lock().extend([a, b]);
    }

    /// Takes every queued event into the statistics now. The engine thread
    /// does this every tick; decisions that must see the latest accesses
    /// (the cleaner, reports) do it first.
    pub fn sync_events(&self) {
        let rx = self.rx.lock();
        let Some(rx) = rx.as_ref() else { return };
        let mut batch = Vec::new();
        while let Ok(ev) = rx.try_recv() {
            batch.push(ev);
            if batch.len() >= 4096 {
                self.ingest(&batch);
                batch.clear();
            }
        }
        if !batch.is_empty() {
            self.ingest(&batch);
        }
    }

    fn run(&self) {
        let mut last_flush = self.clock.now();
        loop {
            // Poll instead of blocking on the queue: a receiver blocked in
            // recv makes every request wake this thread, and on a small
            // machine those wake-ups cost more than the statistics.
            let stopping = self.stop.load(Ordering::Acquire);
            if !stopping {
                std::thread::sleep(self.cfg.tick);
            }
            self.sync_events();
            self.maintain(self.clock.now(), &mut last_flush, false);
            if stopping {
                break;
            }
        }
        self.maintain(self.clock.now(), &mut last_flush, true);
    }

    fn migrator(&self) {
        loop {
            let step = {
                let mut q = self.moves.lock();
                loop {
                    if self.stop.load(Ordering::Acquire) {
                        return;
                    }
                    if let Some(s) = q.items.pop_front() {
                        break s;
                    }
                    self.moves_cv.wait_for(&mut q, Duration::from_millis(200));
                }
            };
            self.execute(step, &Pacer(self));
            self.moves.lock().busy.remove(&step.ino);
        }
    }

    /// Carries out one move and records its outcome.
    fn execute(&self, step: Step, ctl: &dyn Control) -> bool {
        let counter = self.stats.lock().get(step.ino).map(|f| f.counter).unwrap_or(0);
        match self.vol.migrate(step.ino, step.mv, ctl) {
            Ok(Outcome::Done(bytes)) => {
                let c = &self.counters;
                let n = match step.mv {
                    Move::Promote => &c.promotions,
                    Move::Demote => &c.demotions,
                    Move::Copy => &c.copies,
                    Move::DropCopy => &c.drops,
                };
                n.fetch_add(1, Ordering::Relaxed);
                c.bytes_moved.fetch_add(bytes, Ordering::Relaxed);
                if matches!(step.reason, Reason::Evict { .. } | Reason::BackgroundClean { .. }) {
                    c.evictions.fetch_add(1, Ordering::Relaxed);
                    self.stats.lock().last_evicted = Some(counter);
                }
                self.note(step.ino, format!("{:?}: {}", step.mv, step.reason));
                true
            }
            Ok(Outcome::Skipped(Skip::Deferred)) => {
                self.deferred.lock().insert(step.ino, step);
                self.note(step.ino, format!("{:?} deferred until the last passthrough handle closes", step.mv));
                false
            }
            Ok(Outcome::Skipped(why)) => {
                self.note(step.ino, format!("{:?} not done: {why:?}", step.mv));
                false
            }
            Err(e) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(ino = step.ino, mv = ?step.mv, error = %e, "migration failed");
                false
            }
        }
    }

    fn try_add(&self, bytes: u64) -> bool {
        self.ssd_used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                let n = u.checked_add(bytes)?;
                (n <= self.ssd_limit).then_some(n)
            })
            .is_ok()
    }

    fn release(&self, bytes: u64) {
        let _ = self.ssd_used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| Some(u.saturating_sub(bytes)));
    }

    /// The foreground cleaner: evicts the coldest SSD files (never `keep`)
    /// until `need` bytes are free under the limit. Returns bytes freed.
    fn clean(&self, need: u64, keep: Ino) -> u64 {
        self.sync_events();
        let steps = {
            let st = self.stats.lock();
            let exclude: HashSet<Ino> = [keep].into_iter().collect();
            self.with_view(&st, 0, true, |v| evict_for(v, need, &exclude, |counter| Reason::Evict { counter }).0)
        };
        let mut freed = 0;
        for s in steps {
            {
                let mut q = self.moves.lock();
                if !q.busy.insert(s.ino) {
                    continue;
                }
            }
            if self.execute(s, &Foreground) {
                freed += s.size;
                self.evicted_bytes.fetch_add(s.size, Ordering::Relaxed);
            }
            self.moves.lock().busy.remove(&s.ino);
        }
        freed
    }

    /// Takes `bytes` of SSD space for `ino`, cleaning if needed.
    fn reserve(&self, ino: Ino, bytes: u64) -> bool {
        if self.try_add(bytes) {
            return true;
        }
        let free = self.space().free();
        self.clean(bytes.saturating_sub(free).max(1).saturating_add(free), ino);
        self.try_add(bytes)
    }

    /// Stops the threads after the engine has taken the queued events and
    /// flushed the statistics. Queued moves are dropped (they are
    /// re-decided after the next mount).
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        self.moves_cv.notify_all();
        let threads: Vec<_> = self.threads.lock().drain(..).collect();
        for h in threads {
            let _ = h.join();
        }
    }

    /// A report on one file.
    pub fn file_report(&self, ino: Ino) -> Option<FileReport> {
        self.sync_events();
        let rec = self.vol.ns.record(ino).ok().flatten()?;
        let f = self.stats.lock().get(ino).copied().unwrap_or_default();
        let (policy, _) = self.setting(f.group);
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
            note: self.notes.lock().get(&ino).cloned(),
        })
    }

    /// The whole picture.
    pub fn status(&self, top: usize) -> StatusReport {
        self.sync_events();
        let (hot, served, totals, tracked, threshold) = {
            let st = self.stats.lock();
            (st.top(top), st.served, st.residence_totals(), st.len() as u64, st.admission_threshold())
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
        let c = &self.counters;
        let migrations = MigrationReport {
            promotions: c.promotions.load(Ordering::Relaxed),
            demotions: c.demotions.load(Ordering::Relaxed),
            copies: c.copies.load(Ordering::Relaxed),
            drops: c.drops.load(Ordering::Relaxed),
            evictions: c.evictions.load(Ordering::Relaxed),
            bytes_moved: c.bytes_moved.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            queued: self.moves.lock().items.len() as u64,
            deferred: deferred.into_iter().filter_map(|i| self.file_report(i)).collect(),
            evicted_bytes: self.evicted_bytes.load(Ordering::Relaxed),
        };
        let io_mode = self.vol.io_mode();
        StatusReport {
            mountpoint: self.cfg.mountpoint.clone(),
            pid: std::process::id(),
            io_mode: match io_mode {
                IoMode::Passthrough => "passthrough".into(),
                IoMode::Userspace => "userspace".into(),
            },
            counting: match io_mode {
                IoMode::Passthrough => "per open (passthrough: reads and writes bypass the daemon)".into(),
                IoMode::Userspace => "per request".into(),
            },
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
        }
    }

    /// SSD bytes accounted as used.
    pub fn ssd_used(&self) -> u64 {
        self.ssd_used.load(Ordering::Acquire)
    }
}

impl<S: Store> Drop for Engine<S> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// The engine as the volume's hooks (a weak reference: the engine owns the
/// volume).
struct EngineHooks<S: Store>(Weak<Engine<S>>);

impl<S: Store> Hooks for EngineHooks<S> {
    fn initial_tier(&self, parent: Ino) -> Option<Tier> {
        let e = self.0.upgrade()?;
        if let Some(t) = e.cfg.placement {
            return Some(t);
        }
        let (kind, _) = e.setting(e.group_of(parent));
        Some(kind.policy().initial_tier())
    }

    fn reserve_ssd(&self, ino: Ino, bytes: u64) -> bool {
        match self.0.upgrade() {
            Some(e) => e.reserve(ino, bytes),
            None => true,
        }
    }

    fn release_ssd(&self, bytes: u64) {
        if let Some(e) = self.0.upgrade() {
            e.release(bytes);
        }
    }

    fn ssd_full(&self, ino: Ino, bytes: u64) -> bool {
        match self.0.upgrade() {
            // The real file system is full: free what was asked and a
            // little more, ignoring the account (it was not the limit).
            Some(e) => e.clean(e.space().free().saturating_add(bytes).saturating_add(1 << 20), ino) > 0,
            None => false,
        }
    }

    fn copy_failed(&self, ino: Ino) {
        if let Some(e) = self.0.upgrade() {
            let size = e.stats.lock().get(ino).map(|f| f.size).unwrap_or(0);
            e.enqueue(Plan {
                steps: vec![Step { ino, mv: Move::DropCopy, reason: Reason::PolicyChange, size }],
                skipped: vec![],
            });
        }
    }

    fn passthrough_write_ok(&self, _ino: Ino) -> bool {
        match self.0.upgrade() {
            // With a capacity limit every SSD write must be accounted.
            Some(e) if e.cfg.ssd_capacity.is_some() => false,
            Some(e) => e.vol.tiers.store(Tier::Ssd).statfs().map(|s| s.avail >= 1 << 30).unwrap_or(false),
            None => true,
        }
    }
}
