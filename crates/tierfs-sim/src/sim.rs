//! The simulator (`tierfs sim`, `tierfs bench sweep --sim`): a trace
//! replayed through the engine's planner, with the moves it plans applied
//! to a model of the two tiers (the device models of
//! `tierfs_core::device`) at virtual time.
//!
//! What is shared with the mount, not copied: `planner::Planner` takes the
//! same events tick by tick, its statistics and policies decide from the
//! same `View`, and it picks the same victims when room is needed;
//! `device::Device` times the requests as `--emulate` does. What the
//! simulator does itself is what the mount's executors do: its `Model`
//! keeps each file's place and size and charges the SSD what its files
//! take (the planner reads it through `planner::Tiers`), one migrator
//! carries the queued moves out (a move makes the requests
//! `migrate::cost` lists, while requests go on), and the cleaner evicts
//! when a move or a write needs room.
//!
//! A workload's trace (`bench workload --trace`) marks its phases and its
//! operations. The preparation and the warm-up replay with the device
//! models paused, at the times recorded (a move takes
//! `Config::paused_move`, and the moves queued when a phase ends are done
//! before the next begins, as the sweep waits for them); then the models
//! start cold and the measured run replays closed-loop: each request is
//! issued when the one before completed, plus the cost of a request outside
//! the devices (the trace's own: the time the recorded, unemulated run took
//! per request), until the run's duration of virtual time is over, counted
//! from where the workload starts its clock when the trace marks it. A
//! trace without marks (an imported block trace, a recording of a mount)
//! replays open-loop at its recorded times and is measured whole, each read
//! and write an operation. Either way the report's requests are the reads
//! and writes, the requests its hit ratio is over. A file such a trace
//! names without creating it is older than the trace: on the HDD, as long
//! as the trace says ([`Meta::existing_size`]) or its requests show.
//!
//! Same trace, same settings: same report, byte for byte (nothing here
//! reads a real clock or iterates a hash map into the output).

use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::{HashSet, VecDeque};
use std::io;
use std::time::Duration;
use tierfs_bench::stream::{Item, Streams};
use tierfs_bench::workload::{Latency, Report};
use tierfs_core::clock::Timestamp;
use tierfs_core::device::{Device, Profile, Req};
use tierfs_core::event::{Event, EventKind};
use tierfs_core::migrate::Move;
use tierfs_core::planner::{Planner, Tiers};
use tierfs_core::policy::{off_ssd, Params, Plan, PolicyKind, Reason, Space, Step};
use tierfs_core::stats::{Group, Residence, Stats};
use tierfs_core::tier::{Placement, Tier};
use tierfs_core::trace::{Kind, Meta, Record, PHASE_MEASURE, PHASE_RUN, PHASE_WARMUP};

use tierfs_bench::reference::{Access, Reference, Touch};

/// What to simulate.
#[derive(Clone, Debug)]
pub struct Config {
    /// The policy of the root (and of every directory unless `type_aware`).
    pub policy: PolicyKind,
    /// Its settings (interval, sieve).
    pub params: Params,
    /// Most user data the SSD may hold.
    pub ssd_capacity: u64,
    /// The SSD's device model.
    pub ssd: Profile,
    /// The HDD's device model.
    pub hdd: Profile,
    /// Modelled RAM cache per device, bytes.
    pub cache: u64,
    /// Give the directories the trace names their own policies.
    pub type_aware: bool,
    /// Length of the measured run in virtual time (None: until the trace
    /// ends).
    pub duration: Option<Duration>,
    /// Cost of a request outside the devices (None: the trace's own).
    pub overhead: Option<Duration>,
    /// Counters are halved every this long.
    pub aging: Duration,
    /// How often the policies' periodic work runs.
    pub tick: Duration,
    /// How long a write waits for the cleaner's room before its file
    /// leaves the SSD (the engine's `room_wait`).
    pub room_wait: Duration,
    /// The SSD's allocation unit: a file takes its size rounded up to it,
    /// as the mount charges a file what its SSD copy occupies (`du`).
    pub alloc_unit: u64,
    /// How long a move takes while the device models are paused (the
    /// preparation and warm-up): the copy and syncs on the backing file
    /// systems alone. The migrator does one at a time, so a warm-up that
    /// plans moves faster than that finds some of their files gone.
    pub paused_move: Duration,
    /// How long the engine (its ticks, interval runs and aging) has run
    /// when the workload starts: on a mount, the time from the mount to
    /// the workload's first request, which no one chooses and which sets
    /// where the interval runs fall in the workload (see [`leads`]).
    pub lead: Duration,
    /// Measure the replay against the offline optimum and the online
    /// cache policies over the same requests ([`SimReport::reference`]).
    pub reference: bool,
}

/// The leads at which the sweep simulates an architecture, keeping the
/// run with the median throughput: for an interval policy, `phases` evenly
/// spaced over the period its runs come round (its interval, rounded up to
/// whole ticks; on a mount the interval runs fall wherever
/// the time since the mount puts them, and a run with one more interval
/// run in it may move twice as many files: webserver-zipf's 2-s interval
/// at half the working set gave 851 to 1 409 operations/s over eight
/// leads, against 925 to 1 347 in five live runs); for the others one,
/// none.
pub fn leads(cfg: &Config, phases: u32) -> Vec<Duration> {
    match cfg.policy {
        PolicyKind::IntervalHotDst | PolicyKind::IntervalCache => {
            // The runs come at ticks: every whole number of ticks not
            // shorter than the interval (250 ms at 100-ms ticks: 300 ms).
            let tick = cfg.tick.as_nanos().max(1);
            let period = Duration::from_nanos((cfg.params.interval.as_nanos().div_ceil(tick) * tick) as u64);
            let n = phases.max(1);
            (0..n).map(|k| period * k / n).collect()
        }
        _ => vec![Duration::ZERO],
    }
}

/// The phases of an interval policy's interval the sweep simulates unless
/// told otherwise (`bench sweep --phases`).
pub const DEFAULT_PHASES: u32 = 4;

/// The allocation unit of ext4 and XFS as `mkfs` makes them, and a page of
/// tmpfs.
pub const ALLOC_UNIT: u64 = 4096;

/// A move of a small file with the models paused, on the backing ext4 of
/// the two-core machine of the results: 1.9 ms median, 2.2 ms mean, over
/// the 645 copies of a mixed warm-up (files of 4 to 250 KB, each synced).
pub const PAUSED_MOVE: Duration = Duration::from_millis(2);

impl Config {
    /// The defaults of a mount: `ssd-sata` and `hdd-7200` with 2 MiB of
    /// modelled cache, the engine's aging and tick.
    pub fn new(policy: PolicyKind, ssd_capacity: u64) -> Config {
        Config {
            policy,
            params: Params::default(),
            ssd_capacity,
            // Both are in `Profile::builtin()`.
            ssd: Profile::named("ssd-sata").expect("ssd-sata is a built-in profile"),
            hdd: Profile::named("hdd-7200").expect("hdd-7200 is a built-in profile"),
            cache: 2 << 20,
            type_aware: false,
            duration: None,
            overhead: None,
            aging: tierfs_core::stats::DEFAULT_AGING,
            tick: Duration::from_millis(100),
            room_wait: tierfs_core::engine::EngineConfig::default().room_wait,
            alloc_unit: ALLOC_UNIT,
            paused_move: PAUSED_MOVE,
            lead: Duration::ZERO,
            reference: true,
        }
    }
}

/// What a replay measured (of the measured run alone).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SimReport {
    /// The workload's measure, in the sweep's form.
    pub report: Report,
    /// Reads and writes replayed in the measured run (the requests of the
    /// hit ratio; creations, opens, closes and listings are not counted).
    pub requests: u64,
    /// Their latencies, microseconds.
    pub request_latency: Latency,
    /// The share of those requests the SSD served.
    pub ssd_hit_ratio: f64,
    /// Moves made (promotions, demotions, copies, dropped copies).
    pub moves: u64,
    /// Of those, evictions.
    pub evictions: u64,
    /// Of those, promotions and copies to the SSD.
    #[serde(default)]
    pub promotions: u64,
    /// Of those, files a write took off the SSD because it found no room
    /// in time.
    #[serde(default)]
    pub evacuations: u64,
    /// Bytes moved between the tiers.
    pub bytes_moved: u64,
    /// The moves by why and what, "REASON KIND" (`Reason::LABELS`,
    /// `Move::LABELS`) to how many, those with none left out.
    #[serde(default)]
    pub by_reason: std::collections::BTreeMap<String, u64>,
    /// Moves, evictions and bytes moved from the start of the trace
    /// (preparation and warm-up included), as a mount counts them.
    pub total_moves: u64,
    /// See [`SimReport::total_moves`].
    pub total_evictions: u64,
    /// See [`SimReport::total_moves`].
    pub total_bytes_moved: u64,
    /// Requests that reached the HDD model (its cache's misses).
    pub hdd_requests: u64,
    /// Seconds the HDD model was busy.
    pub hdd_busy_secs: f64,
    /// Seconds the SSD model was busy.
    pub ssd_busy_secs: f64,
    /// The cost per request outside the devices that was used, µs.
    pub overhead_us: f64,
    /// The trace ended before the run's duration did.
    pub trace_exhausted: bool,
    /// Bytes the files hold at the end (the working set, as the sweep measures it after
    /// the HDD-only run).
    pub bytes_held: u64,
    /// The offline optimum and the online cache policies over the reads
    /// and writes this replay served, at its SSD capacity
    /// ([`tierfs_bench::reference`]); None unless [`Config::reference`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<Reference>,
}

#[derive(Clone, Copy, Debug)]
struct File {
    size: u64,
    placement: Placement,
    /// Its directory (its moves look it up).
    dir: u64,
}

/// A file the trace has not shown before: empty, on the HDD.
const NEW: File = File { size: 0, placement: Placement::On(Tier::Hdd), dir: 0 };

/// The model of the tiers: where each file is, what the SSD holds, the
/// policy groups, what the migrator has queued. The planner reads it as
/// the engine's tiers.
struct Model {
    files: FxHashMap<u64, File>,
    /// Bytes the SSD holds (with moves to it under way), each file's
    /// [`Model::charge`].
    used: u64,
    /// Most bytes it may hold.
    limit: u64,
    /// See [`Config::alloc_unit`].
    unit: u64,
    /// Policy of each group; the group a directory heads.
    groups: Vec<(PolicyKind, Params)>,
    heads: FxHashMap<u64, Group>,
    parents: FxHashMap<u64, u64>,
    group_cache: RefCell<FxHashMap<u64, Group>>,
    /// Queued or being moved.
    busy: FxHashSet<u64>,
}

impl Model {
    /// Where `ino` is (a file the model has not seen: on the HDD).
    fn placement(&self, ino: u64) -> Placement {
        self.files.get(&ino).unwrap_or(&NEW).placement
    }

    /// What a file of `size` bytes takes on the SSD: whole allocation
    /// units. In the half-full runs of the small preset the SSD's last
    /// megabyte decides the hit ratio, and 500 files of 32 KB take
    /// about one more than their sizes add up to.
    fn charge(&self, size: u64) -> u64 {
        size.div_ceil(self.unit.max(1)) * self.unit.max(1)
    }
}

impl Tiers for Model {
    fn setting(&self, g: Group) -> (PolicyKind, Params) {
        self.groups[g as usize]
    }
    /// The group whose policy governs the files of `dir`.
    fn group_of(&self, dir: u64) -> Group {
        if let Some(&g) = self.group_cache.borrow().get(&dir) {
            return g;
        }
        let mut d = dir;
        let mut g = 0;
        // Bounded: a tree with a loop in it (a broken trace) ends in group 0.
        for _ in 0..4096 {
            if let Some(&h) = self.heads.get(&d) {
                g = h;
                break;
            }
            match self.parents.get(&d) {
                Some(&p) if p != d => d = p,
                _ => break,
            }
        }
        self.group_cache.borrow_mut().insert(dir, g);
        g
    }
    fn space(&self) -> Space {
        Space { used: self.used, limit: self.limit }
    }
    fn busy(&self, ino: u64, _open: bool) -> bool {
        self.busy.contains(&ino)
    }
    /// A file older than the trace: the model took it in at its first
    /// request.
    fn unknown(&self, ino: u64) -> Option<(Residence, Group)> {
        self.files.get(&ino).map(|f| (f.placement.into(), self.group_of(f.dir)))
    }
}

/// The tiers and the migrator at virtual time.
struct Sim {
    cfg: Config,
    planner: Planner,
    model: Model,
    /// Events since the last tick, as the mount's event queue holds them
    /// until its engine thread wakes.
    pending: Vec<Event>,
    devices: [Device; 2],
    /// Device models off (preparation, warm-up).
    paused: bool,
    next_tick: Timestamp,
    /// Moves to make, with when they were planned.
    queue: VecDeque<(Timestamp, Step)>,
    /// The move under way.
    in_flight: Option<Job>,
    migrator_free: Timestamp,
    /// Writers waiting for room in the measured run, in the order they
    /// asked: the cleaner serves them one pass at a time.
    asks: VecDeque<Ask>,
    /// The cleaner's pass under way.
    cleaning: Option<Pass>,
    cleaner_free: Timestamp,
    /// Set by a request that found no room and waits for the cleaner (the
    /// file and the bytes it is short of); the caller queues it.
    asking: Option<(u64, u64)>,
    /// For a request served again after a wait: since when it waits, and
    /// whether the pass it waited for freed nothing.
    waited: Option<(Timestamp, bool)>,
    counters: Counters,
    /// The size of the files older than the trace ([`Meta::existing_size`]).
    existing_size: Option<u64>,
    /// What the SSD could do at each read and write, for the baselines
    /// (with [`Config::reference`]).
    log: Option<Vec<Access>>,
}

/// A writer waiting for room.
#[derive(Debug)]
struct Ask {
    client: u32,
    ino: u64,
    bytes: u64,
    at: Timestamp,
}

/// A pass of the cleaner: the evictions chosen when it started, made one
/// request at a time (the clients' requests come between them, as they do
/// between the cleaner thread's), each freeing its room when its last
/// request is done; then its writer goes on.
#[derive(Debug)]
struct Pass {
    client: u32,
    /// Each eviction with the requests it has still to make.
    steps: VecDeque<(Step, VecDeque<(Tier, Req)>)>,
    /// When its next request is made (when the last one is done).
    next: Timestamp,
    /// It had nothing to evict.
    nothing: bool,
}

/// A move under way: the requests it has still to make.
#[derive(Debug)]
struct Job {
    step: Step,
    /// SSD room it took when it started.
    reserved: u64,
    /// The file's access counter then.
    counter: u32,
    reqs: VecDeque<(Tier, Req)>,
    /// When its next request is made (when the last one is done).
    next: Timestamp,
}

#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    moves: u64,
    evictions: u64,
    promotions: u64,
    evacuations: u64,
    bytes_moved: u64,
    /// Reads and writes each tier served, by `Tier::idx`.
    requests: [u64; 2],
    /// Moves by `Reason::index` and `Move::index`, as the mount counts them.
    by_reason: [[u64; 4]; Reason::LABELS.len()],
}

impl Counters {
    /// What was counted after `before`.
    fn since(&self, before: &Counters) -> Counters {
        Counters {
            moves: self.moves - before.moves,
            evictions: self.evictions - before.evictions,
            promotions: self.promotions - before.promotions,
            evacuations: self.evacuations - before.evacuations,
            bytes_moved: self.bytes_moved - before.bytes_moved,
            requests: [self.requests[0] - before.requests[0], self.requests[1] - before.requests[1]],
            by_reason: std::array::from_fn(|r| std::array::from_fn(|m| self.by_reason[r][m] - before.by_reason[r][m])),
        }
    }
}

impl Sim {
    fn new(cfg: Config, meta: &Meta, start: Timestamp) -> Sim {
        let mut groups = vec![(cfg.policy, cfg.params)];
        let mut heads = FxHashMap::default();
        if cfg.type_aware {
            for (dir, name) in &meta.policies {
                if let Some(kind) = PolicyKind::parse(name) {
                    heads.insert(*dir, groups.len() as Group);
                    groups.push((kind, cfg.params));
                }
            }
        }
        let parents = meta.dirs.iter().map(|&[d, p]| (d, p)).collect();
        let devices = [Device::new(cfg.ssd.clone(), cfg.cache), Device::new(cfg.hdd.clone(), cfg.cache)];
        let model = Model {
            files: FxHashMap::default(),
            used: 0,
            limit: cfg.ssd_capacity,
            unit: cfg.alloc_unit,
            groups,
            heads,
            parents,
            group_cache: RefCell::new(FxHashMap::default()),
            busy: FxHashSet::default(),
        };
        Sim {
            planner: Planner::new(Stats::new(cfg.aging)),
            model,
            pending: Vec::new(),
            devices,
            paused: true,
            next_tick: start,
            queue: VecDeque::new(),
            in_flight: None,
            migrator_free: start,
            asks: VecDeque::new(),
            cleaning: None,
            cleaner_free: start,
            asking: None,
            waited: None,
            counters: Counters::default(),
            existing_size: meta.existing_size,
            log: cfg.reference.then(Vec::new),
            cfg,
        }
    }

    fn enqueue(&mut self, now: Timestamp, plan: Plan) {
        for s in plan.steps {
            if self.model.busy.insert(s.ino) {
                self.queue.push_back((now, s));
            }
        }
    }

    /// Submits a request to a tier's device; returns when it is done.
    fn submit(&mut self, now: Timestamp, tier: Tier, req: Req) -> Timestamp {
        if self.paused {
            return now;
        }
        self.devices[tier.idx()].submit(now, req)
    }

    /// Submits `req` at `now` to each tier that holds a copy of a file
    /// placed at `p`; returns when the last is done. The mount makes them
    /// one after the other, but a request submitted at a later time would
    /// hold its device from now on (the model serves requests in the order
    /// they come): the other device's part is a fraction of a millisecond
    /// when one is the HDD, so they overlap here instead.
    fn submit_each(&mut self, now: Timestamp, p: Placement, req: Req) -> Timestamp {
        p.tiers().iter().fold(now, |done, &tier| done.max(self.submit(now, tier, req)))
    }

    /// Logs for the baselines what `touch` does to `ino`, as long as the
    /// file is now.
    fn log(&mut self, ino: u64, touch: Touch) {
        let size = self.model.files.get(&ino).map_or(0, |f| f.size);
        let charge = self.model.charge(size);
        if let Some(log) = &mut self.log {
            log.push(Access { file: ino, charge, touch });
        }
    }

    /// A read or write served, for the baselines: counted in the measured
    /// run.
    fn log_request(&mut self, ino: u64) {
        self.log(ino, Touch::Request { counted: !self.paused });
    }

    /// An event, for the planner at the next tick (or before a choice of
    /// what to evict, which must see the latest accesses).
    fn event(&mut self, ino: u64, now: Timestamp, kind: EventKind) {
        self.pending.push(Event::new(ino, now, kind));
    }

    /// The events that came since the last delivery, into the planner at
    /// `now`, and the moves its policies make of them queued.
    fn deliver(&mut self, now: Timestamp) {
        // Not before the latest of them (a move the migrator started
        // earlier may ask for room): the engine decides after it took them.
        let now = self.pending.last().map_or(now, |e| now.max(e.time));
        let pending = std::mem::take(&mut self.pending);
        for ev in &pending {
            let plan = self.planner.event(ev, now, &self.model);
            self.enqueue(now, plan);
        }
        // The buffer's room is kept for the next tick's events.
        self.pending = pending;
        self.pending.clear();
    }

    /// The periodic work due by `now`, tick by tick as the engine thread
    /// wakes: the events since the last tick, the policies' interval runs
    /// and cleaners, and aging.
    fn ticks(&mut self, now: Timestamp) {
        while self.next_tick <= now {
            let t = self.next_tick;
            self.deliver(t);
            let groups: Vec<Group> = (0..self.model.groups.len() as Group).collect();
            let plan = self.planner.tick(t, &groups, &self.model);
            self.enqueue(t, plan);
            self.planner.stats.age(t);
            self.next_tick = t.plus(self.cfg.tick);
            if self.paused {
                // A warm-up that idles runs many ticks in one gap: each
                // sees the moves done by then.
                self.migrate(t);
            }
        }
    }

    /// The requests `mv` of file `ino` makes of the devices, in the
    /// migration protocol's order (`migrate::cost`).
    fn move_requests(&self, ino: u64, mv: Move) -> Vec<(Tier, Req)> {
        let Some(f) = self.model.files.get(&ino) else { return Vec::new() };
        tierfs_core::migrate::cost::requests(mv, ino, f.dir, f.size)
    }

    /// Submits `reqs` one after another from `at`, as one thread waiting
    /// for each; returns when the last is done.
    fn charge(&mut self, at: Timestamp, reqs: Vec<(Tier, Req)>) -> Timestamp {
        reqs.into_iter().fold(at, |t, (tier, req)| self.submit(t, tier, req))
    }

    /// Where a move leaves a file, if the move fits where the file is.
    fn target(mv: Move, p: Placement) -> Option<Placement> {
        match (mv, p) {
            (Move::Promote, Placement::On(Tier::Hdd)) => Some(Placement::On(Tier::Ssd)),
            (Move::Copy, Placement::On(Tier::Hdd)) => Some(Placement::Cached),
            (Move::Demote, Placement::On(Tier::Ssd)) => Some(Placement::On(Tier::Hdd)),
            (Move::DropCopy, Placement::Cached) => Some(Placement::On(Tier::Hdd)),
            _ => None,
        }
    }

    /// Takes a file off the SSD (an eviction or an evacuation): the model
    /// changes at once; returns the requests the move makes, or None if
    /// the file is not on the SSD.
    fn take_off(&mut self, at: Timestamp, ino: u64, reason: Reason) -> Option<Vec<(Tier, Req)>> {
        let f = self.model.files.get(&ino).copied()?;
        let mv = off_ssd(f.placement.into())?;
        let reqs = self.move_requests(ino, mv);
        self.finish(at, Step { ino, mv, reason, size: f.size });
        Some(reqs)
    }

    /// Evicts the coldest SSD files until `need` bytes are free (never
    /// `keep`) for a write waiting for room, starting at `at`; returns when
    /// the evictions are done.
    fn make_room(&mut self, at: Timestamp, need: u64, keep: u64) -> Timestamp {
        let reqs = self.evict_for(at, need, keep);
        self.charge(at, reqs)
    }

    /// When the cleaner acts next: its pass's next request, or the start
    /// of a pass for the first writer waiting.
    fn clean_next(&self) -> Option<Timestamp> {
        match &self.cleaning {
            Some(p) => Some(p.next),
            None => self.asks.front().map(|a| a.at.max(self.cleaner_free)),
        }
    }

    /// The cleaner at `now` (see [`Sim::clean_next`]): starts a pass (its
    /// victims chosen then, for what its writer is still short of) or
    /// makes the next request of the one under way. When a pass ends,
    /// returns its writer, when it may go on, and whether the pass had
    /// nothing to evict.
    fn clean(&mut self, now: Timestamp) -> Option<(u32, Timestamp, bool)> {
        let mut pass = match self.cleaning.take() {
            Some(p) => p,
            None => {
                let ask = self.asks.pop_front()?;
                let mut steps = VecDeque::new();
                for s in self.victims(now, ask.bytes, ask.ino) {
                    // Busy until done: no policy moves it meanwhile.
                    if let Some(reqs) = self.off_ssd(s).filter(|_| self.model.busy.insert(s.ino)) {
                        steps.push_back((s, reqs.into()));
                    }
                }
                Pass { client: ask.client, nothing: steps.is_empty(), steps, next: now }
            }
        };
        if let Some((s, reqs)) = pass.steps.front_mut() {
            if let Some((tier, req)) = reqs.pop_front() {
                pass.next = self.submit(pass.next, tier, req);
            } else {
                let s = *s;
                pass.steps.pop_front();
                self.model.busy.remove(&s.ino);
                // Its requests were made one by one above.
                let _ = self.evicted(pass.next, s);
            }
        }
        if pass.steps.is_empty() && pass.next <= now {
            self.cleaner_free = pass.next;
            return Some((pass.client, pass.next, pass.nothing));
        }
        self.cleaning = Some(pass);
        None
    }

    /// A writer gave up waiting: its ask, if not yet served, goes.
    fn forget_ask(&mut self, client: u32) {
        self.asks.retain(|a| a.client != client);
    }

    /// The cleaner's choice at `at` of the coldest SSD files to evict so
    /// that `need` bytes are free (never `keep`), applied to the model at
    /// once; returns the requests the evictions make, in order.
    fn evict_for(&mut self, at: Timestamp, need: u64, keep: u64) -> Vec<(Tier, Req)> {
        let mut reqs = Vec::new();
        for s in self.victims(at, need, keep) {
            reqs.extend(self.evicted(at, s).unwrap_or_default());
        }
        reqs
    }

    /// The cleaner's choice at `at` of the coldest SSD files to evict so
    /// that `need` bytes are free (never `keep`), not yet applied.
    fn victims(&mut self, at: Timestamp, need: u64, keep: u64) -> Vec<Step> {
        let free = self.model.space().free();
        if free >= need {
            return Vec::new();
        }
        // The cleaner's choice sees the latest events.
        self.deliver(at);
        let skip: HashSet<u64> = std::iter::once(keep).collect();
        self.planner.room(at, need - free, &skip, &self.model)
    }

    /// The requests of taking `s`'s file off the SSD, if it is there.
    fn off_ssd(&self, s: Step) -> Option<Vec<(Tier, Req)>> {
        let f = self.model.files.get(&s.ino)?;
        let mv = off_ssd(f.placement.into())?;
        Some(self.move_requests(s.ino, mv))
    }

    /// Applies the cleaner's eviction `s` at `at`, done, to the model and
    /// the statistics; returns its requests (None, and nothing applied, if
    /// its file left the SSD meanwhile).
    fn evicted(&mut self, at: Timestamp, s: Step) -> Option<Vec<(Tier, Req)>> {
        let counter = self.planner.stats.get(s.ino).map_or(0, |f| f.counter);
        let reqs = self.take_off(at, s.ino, s.reason)?;
        self.counters.evictions += 1;
        self.planner.done(&s, counter);
        self.planner.cleaned(s.size);
        Some(reqs)
    }

    /// Applies a completed move to the model and the statistics.
    fn finish(&mut self, at: Timestamp, s: Step) {
        let Some(f) = self.model.files.get_mut(&s.ino) else { return };
        let Some(to) = Sim::target(s.mv, f.placement) else { return };
        let was_on_ssd = f.placement.uses_ssd();
        f.placement = to;
        let size = f.size;
        if was_on_ssd && !to.uses_ssd() {
            self.model.used = self.model.used.saturating_sub(self.model.charge(size));
        }
        self.counters.moves += 1;
        if to.uses_ssd() && !was_on_ssd {
            self.counters.promotions += 1;
        }
        if s.reason == Reason::Evacuate {
            self.counters.evacuations += 1;
        }
        self.counters.by_reason[s.reason.index()][s.mv.index()] += 1;
        if s.mv != Move::DropCopy {
            // Dropping a copy moves no data.
            self.counters.bytes_moved += size;
        }
        // The statistics learn it as the mount's do: from the volume's
        // event, with the next tick's.
        self.event(s.ino, at, EventKind::Placed { placement: to });
    }

    /// Lets the migrator work until `now`: submits the requests of the
    /// move under way one at a time, each when the one before is done (so
    /// that the requests of the clients come between them, as they do
    /// between the migrator thread's), completes the move when its last
    /// one is, and starts the next ones. With the models paused a move
    /// makes no requests and takes `Config::paused_move`.
    fn migrate(&mut self, now: Timestamp) {
        loop {
            if let Some(mut job) = self.in_flight.take() {
                while !job.reqs.is_empty() && job.next <= now {
                    let Some((tier, req)) = job.reqs.pop_front() else { break };
                    job.next = self.submit(job.next, tier, req);
                }
                if !job.reqs.is_empty() || job.next > now {
                    self.in_flight = Some(job);
                    return;
                }
                self.migrator_free = job.next;
                self.complete(job);
            }
            let Some(&(queued, _)) = self.queue.front() else { return };
            let start = self.migrator_free.max(queued);
            if start > now {
                return;
            }
            let Some((_, s)) = self.queue.pop_front() else { return };
            let Some(f) = self.model.files.get(&s.ino).copied().filter(|f| Sim::target(s.mv, f.placement).is_some())
            else {
                self.model.busy.remove(&s.ino);
                continue;
            };
            let mut reqs = Vec::new();
            let mut reserved = 0;
            if matches!(s.mv, Move::Promote | Move::Copy) {
                // The room first: the cleaner's evictions, then the copy.
                reqs = self.evict_for(start, f.size, s.ino);
                let charge = self.model.charge(f.size);
                if charge > self.model.space().free() {
                    // Nothing (more) to evict: the move gives up, after the
                    // evictions it caused.
                    self.model.busy.remove(&s.ino);
                    self.migrator_free = self.charge(start, reqs);
                    continue;
                }
                self.model.used += charge;
                reserved = charge;
            }
            reqs.extend(self.move_requests(s.ino, s.mv));
            let mut next = start;
            if self.paused {
                reqs.clear();
                next = start.plus(self.cfg.paused_move);
            }
            let counter = self.planner.stats.get(s.ino).map_or(0, |f| f.counter);
            self.in_flight = Some(Job { step: s, reserved, counter, reqs: reqs.into(), next });
        }
    }

    /// A move whose requests are all done: applied to the model, unless the
    /// file changed so that it no longer fits.
    fn complete(&mut self, job: Job) {
        let Job { step: s, reserved, counter, next: done, .. } = job;
        // The room taken when the move started is given back; the file is
        // charged what it holds now.
        self.model.used = self.model.used.saturating_sub(reserved);
        let size = self.model.files.get(&s.ino).map_or(0, |f| self.model.charge(f.size));
        let fits = self.model.files.get(&s.ino).is_some_and(|f| Sim::target(s.mv, f.placement).is_some());
        let up = matches!(s.mv, Move::Promote | Move::Copy);
        // A file that grew during its move to a full SSD stays where it
        // was (the mount's move ends with no space).
        if fits && !(up && size > self.model.space().free()) {
            self.finish(done, s);
            if up {
                self.model.used += size;
            }
            if s.reason.is_eviction() {
                // As the engine counts the evictions policies plan.
                self.counters.evictions += 1;
            }
            self.planner.done(&s, counter);
        }
        self.model.busy.remove(&s.ino);
    }

    /// Lets the moves queued by `now` finish, and those they cause, as the
    /// sweep waits for them between phases; returns when the migrator is
    /// idle, or after two minutes, when the sweep gives up waiting.
    fn settle(&mut self, now: Timestamp) -> Timestamp {
        let mut t = now;
        let limit = now.plus(Duration::from_secs(120));
        loop {
            self.advance(t);
            self.deliver(t);
            self.migrate(t);
            let next = match (&self.in_flight, self.queue.front()) {
                (Some(job), _) => job.next,
                (None, Some(&(queued, _))) => self.migrator_free.max(queued),
                (None, None) => return t,
            };
            if next > limit {
                return limit;
            }
            // Each round finishes a move or starts one: the queue drains.
            t = t.max(next);
        }
    }

    /// Everything the background does up to `now`.
    fn advance(&mut self, now: Timestamp) {
        self.ticks(now);
        self.migrate(now);
    }

    /// The model's invariants: the SSD holds what its files and the move
    /// under way take, (but for a policy that puts every new file there,
    /// `ssd-only`) no more than the capacity, and the statistics know
    /// where each file is once its events reached them.
    #[cfg(test)]
    fn check(&self) {
        let on_ssd: u64 =
            self.model.files.values().filter(|f| f.placement.uses_ssd()).map(|f| self.model.charge(f.size)).sum();
        let reserved = self.in_flight.as_ref().map_or(0, |j| j.reserved);
        assert_eq!(self.model.used, on_ssd + reserved, "the SSD account drifted");
        if self.cfg.policy != PolicyKind::SsdOnly {
            assert!(
                self.model.used <= self.cfg.ssd_capacity,
                "{} bytes on an SSD of {}",
                self.model.used,
                self.cfg.ssd_capacity
            );
        }
        // Files with events still to come to the planner are checked after.
        let pending: HashSet<u64> = self.pending.iter().map(|e| e.ino).collect();
        for (ino, f) in self.model.files.iter().filter(|(ino, _)| !pending.contains(ino)) {
            let st = self.planner.stats.get(*ino).map(|s| s.residence);
            assert_eq!(st, Some(f.placement.into()), "the statistics disagree on where {ino} is");
        }
    }

    /// Serves one request issued at `now`; returns when it completes.
    fn request(&mut self, now: Timestamp, r: &Record) -> Timestamp {
        #[cfg(test)]
        if SETTLED.with(|c| c.get()) {
            let up = |s: &Step| matches!(s.mv, Move::Promote | Move::Copy);
            assert!(
                !self.queue.iter().any(|(_, s)| up(s)) && !self.in_flight.as_ref().is_some_and(|j| up(&j.step)),
                "a move to the SSD planned before this request is not done: {:?} {:?}",
                self.queue,
                self.in_flight
            );
        }
        let done = self.serve(now, r);
        #[cfg(test)]
        if CHECK.with(|c| c.get()) {
            self.check();
        }
        done
    }

    fn serve(&mut self, now: Timestamp, r: &Record) -> Timestamp {
        let ino = r.file;
        let known = self.model.files.contains_key(&ino);
        if !known && !matches!(r.kind, Kind::Create | Kind::Remove | Kind::Stat) {
            // A file that existed before the trace began: on the HDD.
            match self.existing_size {
                Some(size) => {
                    // As long as the trace says: the planner learns of it
                    // as the engine does of a file its reconciliation
                    // adopts.
                    self.model.files.insert(ino, File { size, dir: r.dir, ..NEW });
                    self.event(ino, now, EventKind::Create { placement: NEW.placement, parent: r.dir, size });
                }
                // As long as its requests show (the planner takes it in as
                // the engine does a file it lost).
                None => {
                    self.model.files.insert(ino, File { dir: r.dir, ..NEW });
                }
            }
        }
        match r.kind {
            Kind::Create => {
                let g = self.model.group_of(r.dir);
                let (kind, _) = self.model.groups[g as usize];
                let mut tier = kind.policy().initial_tier();
                let mut now = now;
                if tier == Tier::Ssd && kind != PolicyKind::SsdOnly {
                    // A file created with data (an imported trace) needs room.
                    now = self.make_room(now, r.len, ino);
                    if self.model.charge(r.len) > self.model.space().free() {
                        tier = Tier::Hdd;
                    }
                }
                let placement = Placement::On(tier);
                if let Some(old) = self.model.files.insert(ino, File { size: r.len, placement, dir: r.dir }) {
                    if old.placement.uses_ssd() {
                        self.model.used = self.model.used.saturating_sub(self.model.charge(old.size));
                    }
                }
                if placement.uses_ssd() {
                    self.model.used += self.model.charge(r.len);
                }
                let done = self.submit(now, tier, Req::MetaWrite { key: ino });
                self.event(ino, now, EventKind::Create { placement, parent: r.dir, size: r.len });
                self.log(ino, Touch::Anchor);
                done
            }
            Kind::Remove => {
                let Some(f) = self.model.files.remove(&ino) else { return now };
                if f.placement.uses_ssd() {
                    self.model.used = self.model.used.saturating_sub(self.model.charge(f.size));
                }
                // Its name goes from every tier that holds it (a cached
                // file's copy too).
                let done = self.submit_each(now, f.placement, Req::MetaWrite { key: ino });
                self.event(ino, now, EventKind::Remove);
                self.log(ino, Touch::Gone);
                done
            }
            Kind::Open => {
                // A file older than the trace is as long as its opens say.
                let mut now = now;
                if r.len > self.model.files.get(&ino).map_or(0, |f| f.size) {
                    let waiting = now;
                    now = self.resize(now, ino, r.len);
                    if self.asking.is_some() {
                        // Served again once the cleaner made room.
                        return waiting;
                    }
                    self.log(ino, Touch::Anchor);
                }
                let f = self.model.files.get(&ino).copied().unwrap_or(NEW);
                let tier = f.placement.read_tier();
                let write = r.off == 1;
                // An open for reading opens the copy it reads; one for
                // writing opens every copy it writes (a cached file's
                // primary on the HDD too).
                let done = if write {
                    self.submit_each(now, f.placement, Req::MetaRead { key: ino })
                } else {
                    self.submit(now, tier, Req::MetaRead { key: ino })
                };
                let kind = EventKind::Open { write, tier, size: f.size, unseen: false };
                self.event(ino, now, kind);
                done
            }
            Kind::Stat => {
                // The attributes come from the file's tier; the statistics
                // do not count it as an access.
                let tier = self.model.placement(ino).read_tier();
                self.submit(now, tier, Req::MetaRead { key: ino })
            }
            Kind::Close => {
                let size = self.model.files.get(&ino).map_or(0, |f| f.size);
                self.event(ino, now, EventKind::Close { size });
                now
            }
            Kind::Truncate => {
                let done = self.resize(now, ino, r.len);
                if self.asking.is_some() {
                    return now;
                }
                self.event(ino, now, EventKind::Resize { size: r.len });
                self.log(ino, Touch::Anchor);
                done
            }
            Kind::Move => {
                if let Some(f) = self.model.files.get_mut(&ino) {
                    f.dir = r.dir;
                }
                self.event(ino, now, EventKind::Moved { parent: r.dir });
                let placement = self.model.placement(ino);
                self.submit_each(now, placement, Req::MetaWrite { key: ino })
            }
            Kind::Read => {
                let tier = self.model.placement(ino).read_tier();
                self.counters.requests[tier.idx()] += 1;
                self.log_request(ino);
                let done = self.submit(now, tier, Req::Read { file: ino, off: r.off, len: r.len });
                self.event(ino, now, EventKind::Read { off: r.off, len: r.len, tier, fragment: false });
                done
            }
            Kind::Write => {
                let end = r.off.saturating_add(r.len);
                let mut t = now;
                let size = self.model.files.get(&ino).map_or(0, |f| f.size);
                if end > size {
                    t = self.resize(now, ino, end);
                    if self.asking.is_some() {
                        // Served again once the cleaner made room (or its
                        // file left the SSD): not now.
                        return now;
                    }
                }
                let f = self.model.files.get(&ino).copied().unwrap_or(NEW);
                let req = Req::Write { file: ino, off: r.off, len: r.len };
                let tier = f.placement.primary();
                // A cached file's copy is written too, as the mount does.
                let done = self.submit_each(t, f.placement, req);
                self.counters.requests[tier.idx()] += 1;
                self.log_request(ino);
                let kind = EventKind::Write { off: r.off, len: r.len, tier, size: f.size, fragment: false };
                self.event(ino, now, kind);
                done
            }
            Kind::Op | Kind::Phase => now,
        }
    }

    /// A file's size changes; one on the SSD that would pass the capacity
    /// makes room first, or leaves the SSD if there is none. Returns when
    /// the writer may go on.
    fn resize(&mut self, now: Timestamp, ino: u64, size: u64) -> Timestamp {
        let Some(f) = self.model.files.get(&ino).copied() else { return now };
        let mut t = now;
        if f.placement.uses_ssd() && size > f.size {
            let grow = self.model.charge(size) - self.model.charge(f.size);
            if self.model.space().free() < grow {
                // The writer waits for the cleaner, `room_wait` at most, as
                // the mount's does; then (or if a pass freed nothing) its
                // file leaves the SSD and the write lands on the HDD. The
                // cleaner's evictions go on. In the measured run the wait
                // is the caller's: the request is served again when the
                // pass is done (see `Sim::clean`).
                let gave_up = match self.waited {
                    Some((since, nothing)) => nothing || now >= since.plus(self.cfg.room_wait),
                    None => false,
                };
                if self.paused {
                    t = self.make_room(now, grow, ino);
                }
                if !self.paused && !gave_up {
                    self.asking = Some((ino, grow));
                    return now;
                }
                if self.model.space().free() < grow {
                    let reqs = self.take_off(t, ino, Reason::Evacuate).unwrap_or_default();
                    t = self.charge(t, reqs);
                }
            }
        }
        let (new, old) = (self.model.charge(size), self.model.charge(f.size));
        let Some(f) = self.model.files.get_mut(&ino) else { return t };
        if f.placement.uses_ssd() {
            self.model.used = (self.model.used + new).saturating_sub(old);
        }
        f.size = size;
        t
    }
}

/// The non-zero counts of `c.by_reason`, keyed as the sweep's rows key them.
fn by_reason(c: &Counters) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for (reason, kinds) in Reason::LABELS.iter().zip(&c.by_reason) {
        for (kind, &n) in Move::LABELS.iter().zip(kinds) {
            if n > 0 {
                out.insert(tierfs_bench::sweep::reason_key(reason, kind), n);
            }
        }
    }
    out
}

/// Why the simulator cannot stand in for the mount under `kind`, if so: it
/// models whole-file placement only.
pub fn unsupported(kind: PolicyKind) -> Option<String> {
    let p = kind.policy();
    let needs = if p.chunks() {
        "sub-file extents"
    } else if p.whole_file_write_back() || p.default_write_back() > 0 {
        "a write-back area"
    } else if kind == PolicyKind::Measured {
        "the mount's measured speeds"
    } else {
        return None;
    };
    Some(format!("{kind} is not simulated yet: it needs {needs}, and the simulator models whole-file placement only"))
}

/// Replays `records` (with the trace's `meta`) as `cfg` says. A policy
/// the simulator cannot stand in for (see [`unsupported`]), the root's or
/// a type-aware directory's, is refused.
pub fn replay(cfg: &Config, meta: &Meta, records: &[Record]) -> io::Result<SimReport> {
    let marked = meta.ops.is_some();
    let measure_at =
        if marked { records.iter().position(|r| r.kind == Kind::Phase && r.off == PHASE_MEASURE) } else { Some(0) };
    let Some(measure_at) = measure_at else {
        return Err(io::Error::other("the trace marks no measured run (record it with `bench workload --trace`)"));
    };
    let measured = &records[measure_at..];
    // The workload's operations per `op` mark (a mail transaction has two).
    let marks = measured.iter().filter(|r| r.kind == Kind::Op).count() as u64;
    let per_mark = match meta.ops {
        Some(n) if marks > 0 => n as f64 / marks as f64,
        _ => 1.0,
    };
    // The cost of a request outside the devices, as the recording ran
    // without emulation: its measured run's time per request.
    let requests_recorded = measured.iter().filter(|r| !r.kind.is_mark()).count() as u64;
    let span = match (measured.first(), measured.last()) {
        (Some(a), Some(b)) => b.time_ns - a.time_ns,
        _ => 0,
    };
    let mut cfg = cfg.clone();
    if cfg.overhead.is_none() && marked && requests_recorded > 0 {
        cfg.overhead = Some(Duration::from_nanos(span / requests_recorded));
    }
    let mut src = Whole { records, at: 0 };
    let mode = if marked {
        Mode::Closed { per_mark }
    } else {
        Mode::Open { from_ns: measured.first().map_or(0, |r| r.time_ns) }
    };
    run(&cfg, meta, mode, &mut src)
}

/// Replays the streams a workload generator sends as it runs
/// (`tierfs_bench::stream::Model`), closed-loop from the measured phase's
/// mark: each thread of the workload a client of its own, a request issued
/// when its stream's last one completed plus that request's cost outside
/// the devices (the time the model gave it, unless `cfg.overhead`). The
/// channel is dropped when the run is over, which ends the generator.
pub fn replay_streams(cfg: &Config, meta: &Meta, marks_per_op: u64, mut rx: Streams) -> io::Result<SimReport> {
    run(cfg, meta, Mode::Closed { per_mark: 1.0 / marks_per_op.max(1) as f64 }, &mut rx)
}

/// Where a replay's items come from, stream by stream.
trait Source {
    /// Stream `n`'s next items, waiting for them; `None` once it has no
    /// more.
    fn next(&mut self, n: u32) -> Option<Vec<Item>>;
}

/// A trace read whole: one stream.
struct Whole<'a> {
    records: &'a [Record],
    at: usize,
}

impl Source for Whole<'_> {
    fn next(&mut self, n: u32) -> Option<Vec<Item>> {
        if n != 0 {
            return None;
        }
        // At the end, `None`: the client ends.
        (self.at < self.records.len()).then(|| {
            let to = (self.at + 4096).min(self.records.len());
            let items = self.records[self.at..to].iter().map(|r| Item::Record(*r)).collect();
            self.at = to;
            items
        })
    }
}

impl Source for Streams {
    fn next(&mut self, n: u32) -> Option<Vec<Item>> {
        Streams::next(self, n)
    }
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    /// Each request when its stream's last one is done, plus the overhead;
    /// `per_mark` operations per `op` mark.
    Closed { per_mark: f64 },
    /// Each request at its recorded time, from the first one's; every
    /// read and write an operation.
    Open { from_ns: u64 },
}

/// One client of the replay: a thread of the workload.
#[derive(Debug, Default)]
struct Client {
    queue: VecDeque<Item>,
    /// Forked (stream 0 from the start).
    started: bool,
    /// Took its end, or the source ran dry.
    ended: bool,
    /// Threads it forked that have not ended.
    children: u32,
    parent: Option<u32>,
    /// When its next request is issued (measured run), or the time of its
    /// last item (before).
    now: Timestamp,
    op_start: Timestamp,
    /// Waiting for room since then (its request is at the front of its
    /// queue again, and it goes on when the cleaner's pass ends or at
    /// `room_wait`); whether that pass had nothing to evict.
    wait: Option<(Timestamp, bool)>,
}

/// The clients, and their items as they come.
struct Clients<'s> {
    src: &'s mut dyn Source,
    by_id: std::collections::BTreeMap<u32, Client>,
}

impl Clients<'_> {
    /// Takes client `id`'s next items from the source; when it has no more,
    /// the client ends.
    fn receive(&mut self, id: u32) {
        let items = self.src.next(id).unwrap_or_else(|| vec![Item::End]);
        self.by_id.entry(id).or_default().queue.extend(items);
    }

    /// The clients that may go on: started, not ended, waiting for no
    /// thread; each with its next item there (received as needed).
    fn ready(&mut self) -> Vec<u32> {
        loop {
            let waiting = self
                .by_id
                .iter()
                .find(|(_, c)| c.started && !c.ended && c.children == 0 && c.queue.is_empty())
                .map(|(&id, _)| id);
            let Some(id) = waiting else { break };
            self.receive(id);
        }
        // A client that forked goes on forking (a workload starts its
        // threads one after another), then waits for them.
        self.by_id
            .iter()
            .filter(|(_, c)| {
                c.started && !c.ended && (c.children == 0 || matches!(c.queue.front(), Some(Item::Fork(_))))
            })
            .map(|(&id, _)| id)
            .collect()
    }

    /// The cost outside the devices of the request just taken from
    /// client `id`, at `time_ns` in the stream: the time to its next
    /// request (marks between them take no time of their own).
    fn gap(&mut self, id: u32, time_ns: u64) -> Duration {
        loop {
            let Some(c) = self.by_id.get(&id) else { return Duration::ZERO };
            let next = c.queue.iter().find_map(|i| match i {
                Item::Record(r) if r.kind.is_mark() => None,
                Item::Dir { .. } => None,
                Item::Record(r) => Some(Some(r.time_ns)),
                // A fork or the end: nothing comes after on this client.
                Item::Fork(_) | Item::End => Some(None),
            });
            match next {
                Some(Some(t)) => return Duration::from_nanos(t.saturating_sub(time_ns)),
                Some(None) => return Duration::ZERO,
                None => self.receive(id),
            }
        }
    }
}

fn run(cfg: &Config, meta: &Meta, mode: Mode, src: &mut dyn Source) -> io::Result<SimReport> {
    let type_aware = meta.policies.iter().filter(|_| cfg.type_aware).filter_map(|(_, p)| PolicyKind::parse(p));
    if let Some(why) = std::iter::once(cfg.policy).chain(type_aware).find_map(unsupported) {
        return Err(io::Error::new(io::ErrorKind::Unsupported, why));
    }
    // The engine starts at one second, the workload `lead` later.
    let mut sim = Sim::new(cfg.clone(), meta, Timestamp::from_secs(1));
    let base = Timestamp::from_secs(1).plus(cfg.lead);
    let mut clients = Clients { src, by_id: Default::default() };
    clients.by_id.insert(0, Client { started: true, now: base, ..Client::default() });
    // Before the measured run (preparation and warm-up): the models
    // paused, every item at its recorded time, in time order over the
    // clients. An open-loop trace is measured from its first record.
    let mut measuring = false;
    // How much later than recorded the items before the measured run come:
    // the time the sweep waits for moves between phases.
    let mut shift = 0u64;
    // The workload's clock started (`PHASE_RUN`): the run's time counts
    // from there, its device work from `PHASE_MEASURE`, as the sweep
    // counts them.
    let mut clock_started = false;
    let mut t0 = base;
    if let Mode::Open { from_ns } = mode {
        t0 = Timestamp(base.0 + from_ns);
        sim.paused = false;
        sim.migrator_free = t0;
        for d in &mut sim.devices {
            d.reset(t0);
        }
        measuring = true;
        if let Some(c) = clients.by_id.get_mut(&0) {
            c.now = t0;
        }
    }
    let mut before = sim.counters;
    let mut overheads = (Duration::ZERO, 0u32);
    let end = |t0: Timestamp| cfg.duration.map(|d| t0.plus(d));
    let mut ops = 0u64;
    let mut op_lat: Vec<u64> = Vec::new();
    let mut req_lat: Vec<u64> = Vec::new();
    let (mut read, mut written) = (0u64, 0u64);
    let mut exhausted = true;
    let mut last_done = base;
    loop {
        let ready = clients.ready();
        // The next client: the earliest one.
        let at = |c: &Client| -> Timestamp {
            match (measuring, mode, c.queue.front()) {
                (false, _, Some(Item::Record(r))) | (true, Mode::Open { .. }, Some(Item::Record(r))) => {
                    c.now.max(Timestamp(base.0 + shift + r.time_ns))
                }
                _ => c.now,
            }
        };
        let next = ready.iter().map(|&id| (id, at(&clients.by_id[&id]))).min_by_key(|&(id, t)| (t, id));
        // The cleaner, if it acts first: a writer whose pass ended goes on.
        if let Some(tc) = sim.clean_next().filter(|&tc| next.is_none_or(|(_, t)| tc <= t)) {
            sim.advance(tc);
            if let Some((id, done, nothing)) = sim.clean(tc) {
                if let Some(c) = clients.by_id.get_mut(&id).filter(|c| c.wait.is_some()) {
                    c.now = c.now.min(done);
                    c.wait = c.wait.map(|(since, _)| (since, nothing));
                }
            }
            continue;
        }
        let Some((id, now)) = next else {
            break;
        };
        // The run is timed once the workload started its clock (after a
        // listing as long as it takes).
        if measuring && clock_started && matches!(mode, Mode::Closed { .. }) && end(t0).is_some_and(|e| now > e) {
            exhausted = false;
            break;
        }
        let c = clients.by_id.get_mut(&id).expect("a ready client");
        c.now = now;
        let Some(item) = c.queue.pop_front() else { continue };
        let r = match item {
            Item::Fork(child) => {
                c.children += 1;
                let op_start = c.op_start;
                let ch = clients.by_id.entry(child).or_default();
                ch.started = true;
                ch.parent = Some(id);
                ch.now = now;
                ch.op_start = if measuring { now } else { op_start };
                continue;
            }
            Item::Dir { dir, parent } => {
                sim.model.parents.insert(dir, parent);
                continue;
            }
            Item::End => {
                c.ended = true;
                if let Some(p) = c.parent.and_then(|p| clients.by_id.get_mut(&p)) {
                    p.children = p.children.saturating_sub(1);
                    p.now = p.now.max(now);
                }
                continue;
            }
            Item::Record(r) => r,
        };
        match r.kind {
            Kind::Phase if r.off == PHASE_WARMUP && !measuring => {
                // The preparation's moves finish first, as the sweep waits.
                let settled = sim.settle(now);
                shift += settled.since(now).as_nanos() as u64;
                continue;
            }
            Kind::Phase if r.off == PHASE_MEASURE && !measuring => {
                // The moves the preparation or warm-up caused finish before
                // the run (the sweep waits for them), then the models start
                // cold.
                let now = sim.settle(now);
                sim.paused = false;
                sim.migrator_free = now;
                sim.cleaner_free = now;
                for d in &mut sim.devices {
                    d.reset(now);
                }
                before = sim.counters;
                measuring = true;
                clock_started = !meta.run_clock;
                t0 = now;
                last_done = now;
                for cl in clients.by_id.values_mut() {
                    cl.now = now;
                    cl.op_start = now;
                }
                continue;
            }
            Kind::Phase if r.off == PHASE_RUN && measuring && !clock_started => {
                // The first of the workload's clocks (each half of a mixed
                // run starts its own, together).
                clock_started = true;
                t0 = now;
                last_done = now;
                for cl in clients.by_id.values_mut() {
                    cl.op_start = cl.op_start.max(now);
                }
                continue;
            }
            Kind::Phase => continue,
            Kind::Op => {
                if measuring {
                    ops += 1;
                    op_lat.push(now.since(c.op_start).as_micros() as u64);
                    c.op_start = now;
                }
                continue;
            }
            _ => {}
        }
        sim.advance(now);
        if !measuring {
            sim.request(now, &r);
            sim.migrate(now);
            continue;
        }
        let waiting = clients.by_id.get(&id).and_then(|c| c.wait);
        sim.waited = waiting;
        let done = sim.request(now, &r);
        sim.waited = None;
        let c = clients.by_id.get_mut(&id).expect("the client served");
        if let Some((ino, bytes)) = sim.asking.take() {
            // No room: the request waits for the cleaner and is served
            // again when its pass ends, or at `room_wait`.
            let since = waiting.map_or(now, |(since, _)| since);
            c.queue.push_front(Item::Record(r));
            c.wait = Some((since, false));
            c.now = since.plus(cfg.room_wait).max(now);
            sim.forget_ask(id);
            sim.asks.push_back(Ask { client: id, ino, bytes, at: now });
            continue;
        }
        if c.wait.take().is_some() {
            sim.forget_ask(id);
        }
        match r.kind {
            Kind::Read => read += r.len,
            Kind::Write => written += r.len,
            _ => {}
        }
        // The requests of the hit ratio: reads and writes (a creation, an
        // open or a listing's attributes are not counted, nor timed).
        let data = r.kind.is_io();
        if data {
            req_lat.push(done.since(now).as_micros() as u64);
        }
        last_done = last_done.max(done);
        match mode {
            Mode::Closed { .. } => {
                let overhead = match cfg.overhead {
                    Some(o) => o,
                    None => clients.gap(id, r.time_ns),
                };
                overheads = (overheads.0 + overhead, overheads.1 + 1);
                if let Some(c) = clients.by_id.get_mut(&id) {
                    c.now = done.plus(overhead);
                }
            }
            Mode::Open { .. } if data => {
                ops += 1;
                op_lat.push(done.since(now).as_micros() as u64);
            }
            Mode::Open { .. } => {}
        }
    }
    if !measuring {
        return Err(io::Error::other("the trace marks no measured run (record it with `bench workload --trace`)"));
    }
    // Closed loop: the run ends when its last client's last request and
    // overhead are; open loop: when the last request is done.
    let finish = match mode {
        Mode::Closed { .. } => clients.by_id.values().map(|c| c.now).max().unwrap_or(t0).max(t0),
        Mode::Open { .. } => clients.by_id.values().map(|c| c.now).max().unwrap_or(t0).max(last_done),
    };
    let secs = match end(t0) {
        Some(e) if !exhausted => e.since(t0).as_secs_f64().min(finish.since(t0).as_secs_f64()),
        _ => finish.since(t0).as_secs_f64(),
    };
    let total = sim.counters;
    let c = total.since(&before);
    let all: u64 = c.requests.iter().sum();
    let lat = Latency::of(&mut op_lat);
    let ops = match mode {
        Mode::Closed { per_mark } => (ops as f64 * per_mark).round() as u64,
        Mode::Open { .. } => ops,
    };
    let report = Report {
        workload: meta.source.strip_prefix("workload:").unwrap_or(&meta.source).to_string(),
        ops,
        secs,
        ops_per_sec: if secs > 0.0 { ops as f64 / secs } else { 0.0 },
        txn_time_secs: None,
        bytes_read: read,
        bytes_written: written,
        latency: lat,
        files: sim.model.files.len() as u64,
    };
    Ok(SimReport {
        report,
        requests: req_lat.len() as u64,
        request_latency: Latency::of(&mut req_lat),
        ssd_hit_ratio: if all == 0 { 0.0 } else { c.requests[Tier::Ssd.idx()] as f64 / all as f64 },
        moves: c.moves,
        evictions: c.evictions,
        promotions: c.promotions,
        evacuations: c.evacuations,
        bytes_moved: c.bytes_moved,
        by_reason: by_reason(&c),
        total_moves: total.moves,
        total_evictions: total.evictions,
        total_bytes_moved: total.bytes_moved,
        hdd_requests: sim.devices[1].requests,
        hdd_busy_secs: sim.devices[1].busy.as_secs_f64(),
        ssd_busy_secs: sim.devices[0].busy.as_secs_f64(),
        overhead_us: match cfg.overhead {
            Some(o) => o.as_secs_f64() * 1e6,
            None => overheads.0.as_secs_f64() * 1e6 / overheads.1.max(1) as f64,
        },
        trace_exhausted: matches!(mode, Mode::Closed { .. }) && exhausted && cfg.duration.is_some(),
        bytes_held: sim.model.files.values().map(|f| f.size).sum(),
        reference: sim.log.as_deref().map(|log| Reference::of(log, cfg.ssd_capacity)),
    })
}

/// Reads the trace in `path` whole, to replay it (as many times as
/// wanted) with [`replay`].
pub fn load(path: &std::path::Path) -> io::Result<(Meta, Vec<Record>)> {
    let rd = tierfs_core::trace::open(path)?;
    let meta = rd.meta().clone();
    Ok((meta, rd.collect::<io::Result<_>>()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tierfs_core::trace::PHASE_PREPARE;

    const MS: u64 = 1_000_000;

    /// A simulator at `start` with the device models on, `files` (number,
    /// size, placement) in it.
    fn with_files(policy: PolicyKind, start: Timestamp, files: &[(u64, u64, Placement)]) -> Sim {
        let meta = Meta { dirs: vec![[1, 1]], ..Meta::default() };
        let mut sim = Sim::new(Config::new(policy, 1 << 30), &meta, start);
        sim.paused = false;
        for &(ino, size, placement) in files {
            sim.model.files.insert(ino, File { size, placement, dir: 1 });
        }
        sim
    }

    fn rec(time_ns: u64, file: u64, kind: Kind, off: u64, len: u64) -> Record {
        Record { time_ns, file, dir: 1, kind, off, len }
    }

    /// A workload's trace: `files` files of 64 KiB made, then `ops`
    /// whole-file reads, file `i % hot` (a few hot files).
    fn web(files: u64, hot: u64, ops: u64) -> (Meta, Vec<Record>) {
        let mut v = vec![rec(0, 0, Kind::Phase, PHASE_PREPARE, 0)];
        let mut t = MS;
        for f in 10..10 + files {
            v.push(rec(t, f, Kind::Create, 0, 0));
            v.push(rec(t, f, Kind::Write, 0, 64 << 10));
            v.push(rec(t, f, Kind::Close, 0, 64 << 10));
            t += MS;
        }
        v.push(rec(t, 0, Kind::Phase, PHASE_MEASURE, 0));
        for i in 0..ops {
            let f = 10 + i % hot;
            t += 50_000;
            v.push(rec(t, f, Kind::Open, 0, 64 << 10));
            v.push(rec(t, f, Kind::Read, 0, 64 << 10));
            v.push(rec(t, f, Kind::Close, 0, 64 << 10));
            v.push(rec(t, 0, Kind::Op, 0, 0));
        }
        let meta = Meta { source: "workload:test".into(), dirs: vec![[1, 1]], ops: Some(ops), ..Meta::default() };
        (meta, v)
    }

    fn run(policy: PolicyKind, cap: u64, meta: &Meta, recs: &[Record]) -> SimReport {
        let mut cfg = Config::new(policy, cap);
        // No RAM cache in the models: it would hold the hot set.
        cfg.cache = 0;
        cfg.duration = Some(Duration::from_secs(2));
        cfg.overhead = Some(Duration::from_micros(20));
        replay(&cfg, meta, recs).unwrap()
    }

    #[test]
    fn accesses_reach_the_planner_at_the_next_tick_as_they_reach_the_engine() {
        let cfg = Config::new(PolicyKind::DynamicHotDst, 1 << 30);
        let meta = Meta { dirs: vec![[1, 1]], ..Meta::default() };
        let start = Timestamp::from_secs(1);
        let mut sim = Sim::new(cfg, &meta, start);
        sim.paused = false;
        let at = |ms: u64| Timestamp(start.0 + ms * MS);
        // Past the first tick (at the start), before the second.
        sim.advance(at(10));
        sim.request(at(10), &rec(0, 7, Kind::Create, 0, 0));
        sim.request(at(20), &rec(0, 7, Kind::Write, 0, 4096));
        for ms in 30..40 {
            sim.request(at(ms), &rec(0, 7, Kind::Read, 0, 4096));
        }
        assert!(sim.planner.stats.get(7).is_none(), "the planner saw the file before its tick");
        assert!(sim.queue.is_empty() && sim.in_flight.is_none());
        sim.advance(at(100));
        let f = sim.planner.stats.get(7).expect("the tick delivered the events");
        assert_eq!((f.reads, f.writes), (10, 1));
        // Its reads from the HDD got it promoted, at the tick's time.
        let job = sim.in_flight.as_ref().expect("a move under way");
        assert_eq!((job.step.ino, job.step.mv), (7, Move::Promote));
        // Its requests go one at a time: the first is under way.
        assert!(job.next > at(100) && !job.reqs.is_empty());
        // Where it lands reaches the statistics with the tick after the
        // move is done, as the volume's `Placed` event does.
        let mut done = at(100);
        while sim.in_flight.is_some() {
            done = done.plus(Duration::from_millis(1));
            sim.migrate(done);
        }
        assert_eq!(sim.model.files[&7].placement, Placement::On(Tier::Ssd));
        assert_eq!(sim.planner.stats.get(7).map(|f| f.residence), Some(Residence::Hdd));
        sim.advance(done.plus(Duration::from_millis(100)));
        assert_eq!(sim.planner.stats.get(7).map(|f| f.residence), Some(Residence::Ssd));
    }

    /// A file of 10 MB and a cold one of `victim` bytes fill the SSD; the
    /// measured run grows the first by 50 MB. Returns how long the write
    /// took (its wait for room included) and the report.
    fn grow_on_a_full_ssd(victim: u64) -> (Duration, SimReport) {
        let mb = 1_000_000;
        let mut cfg = Config::new(PolicyKind::DynamicColdDst, victim + 10 * mb);
        cfg.overhead = Some(Duration::from_micros(20));
        // Large files stay on the SSD.
        cfg.params.sieve = 1 << 40;
        // The SSD holds both files exactly (their sizes are not whole
        // blocks).
        cfg.alloc_unit = 1;
        let recs = vec![
            rec(0, 0, Kind::Phase, PHASE_PREPARE, 0),
            rec(MS, 1, Kind::Create, 0, 0),
            rec(MS, 1, Kind::Write, 0, victim),
            rec(2 * MS, 2, Kind::Create, 0, 0),
            rec(2 * MS, 2, Kind::Write, 0, 10 * mb),
            rec(3 * MS, 0, Kind::Phase, PHASE_MEASURE, 0),
            rec(4 * MS, 2, Kind::Write, 10 * mb, 50 * mb),
            rec(4 * MS, 0, Kind::Op, 0, 0),
        ];
        let meta = Meta { source: "workload:test".into(), dirs: vec![[1, 1]], ops: Some(1), ..Meta::default() };
        let r = replay_checked(&cfg, &meta, &recs);
        (Duration::from_micros(r.report.latency.max_us), r)
    }

    #[test]
    fn another_clients_request_comes_between_the_cleaners_requests() {
        // The cleaner's evictions were charged all at once, so a client's
        // request on the HDD waited behind a whole pass (a mixed run's
        // web server behind the file server's evictions) while the writer
        // got its room early. On the mount the cleaner thread waits for
        // each request and the others' come between.
        use tierfs_core::stats::FileStats;
        let mb = 1_000_000;
        let meta = Meta { dirs: vec![[1, 1]], ..Meta::default() };
        let start = Timestamp::from_secs(1);
        let mut sim = Sim::new(Config::new(PolicyKind::DynamicColdDst, 30 * mb), &meta, start);
        sim.paused = false;
        for (ino, size, tier) in [(1, 20 * mb, Tier::Ssd), (2, 10 * mb, Tier::Ssd), (3, mb, Tier::Hdd)] {
            let placement = Placement::On(tier);
            sim.model.files.insert(ino, File { size, placement, dir: 1 });
            if tier == Tier::Ssd {
                sim.model.used += sim.model.charge(size);
            }
            let f = FileStats { residence: placement.into(), size, ..FileStats::default() };
            sim.planner.stats.insert(ino, f);
        }
        sim.asks.push_back(Ask { client: 7, ino: 2, bytes: 5 * mb, at: start });
        let asked = start.plus(Duration::from_millis(20));
        let (mut read, mut ended) = (None, None);
        while ended.is_none() {
            let t = sim.clean_next().expect("the pass goes on");
            if read.is_none() && t > asked {
                // The client's read, issued while the pass runs.
                read = Some(sim.submit(asked, Tier::Hdd, Req::Read { file: 3, off: 0, len: 4096 }));
            }
            ended = sim.clean(t);
            if ended.is_none() {
                assert_eq!(sim.model.files[&1].placement, Placement::On(Tier::Ssd), "freed before its requests");
            }
        }
        let (client, done, nothing) = ended.unwrap();
        let read = read.expect("the pass outlasted the read's issue");
        assert_eq!((client, nothing), (7, false));
        assert_eq!(sim.model.files[&1].placement, Placement::On(Tier::Hdd));
        assert!(read < done, "the read ended at {:?}, the pass at {:?}", read.since(start), done.since(start));
        assert!(read.since(asked) < done.since(start) / 4, "the read waited {:?}", read.since(asked));
    }

    #[test]
    fn a_write_that_waits_past_room_wait_for_an_eviction_moves_its_file_to_the_hdd() {
        // A 60 MB victim goes in well under the second the mount waits.
        let (waited, r) = grow_on_a_full_ssd(60_000_000);
        assert!(waited < Duration::from_secs(1), "{waited:?}");
        assert_eq!((r.evictions, r.evacuations), (1, 0), "{r:?}");
        // Writing 500 MB to the HDD takes seconds: the writer gives up
        // and its file leaves the SSD, as on the mount; the cleaner's
        // eviction goes on.
        let (waited, r) = grow_on_a_full_ssd(500_000_000);
        assert!(waited > Duration::from_secs(1), "{waited:?}");
        assert_eq!((r.evictions, r.evacuations), (1, 1), "{r:?}");
    }

    #[test]
    fn a_write_that_waits_for_room_is_served_and_counted_once_where_it_lands() {
        // The write was served (and counted, on the SSD) when it found no
        // room, and again after its wait: one write, two requests, and an
        // SSD hit for a write that landed on the HDD.
        let (_, r) = grow_on_a_full_ssd(60_000_000);
        assert_eq!((r.requests, r.ssd_hit_ratio), (1, 1.0), "{r:?}");
        let (_, r) = grow_on_a_full_ssd(500_000_000);
        assert_eq!((r.requests, r.ssd_hit_ratio), (1, 0.0), "{r:?}");
    }

    #[test]
    fn the_same_trace_gives_the_same_report_byte_for_byte() {
        let (meta, recs) = web(200, 20, 20_000);
        let a = serde_json::to_string(&run(PolicyKind::DynamicHotDst, 1 << 20, &meta, &recs)).unwrap();
        let b = serde_json::to_string(&run(PolicyKind::DynamicHotDst, 1 << 20, &meta, &recs)).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn hot_files_move_up_and_the_run_gets_faster_than_the_hdd_alone() {
        let (meta, recs) = web(200, 10, 20_000);
        let hdd = run(PolicyKind::HddOnly, 1 << 20, &meta, &recs);
        let ssd = run(PolicyKind::SsdOnly, 1 << 30, &meta, &recs);
        let hot = run(PolicyKind::DynamicHotDst, 1 << 20, &meta, &recs);
        let cache = run(PolicyKind::OnDemandCache, 1 << 20, &meta, &recs);
        assert_eq!(hdd.ssd_hit_ratio, 0.0);
        assert_eq!(ssd.ssd_hit_ratio, 1.0);
        assert_eq!((hdd.moves, ssd.moves), (0, 0));
        for r in [&hot, &cache] {
            assert!(r.moves >= 10 && r.moves < 100, "{r:?}");
            assert!(r.ssd_hit_ratio > 0.9, "{r:?}");
            assert!(r.report.ops_per_sec > 5.0 * hdd.report.ops_per_sec, "{r:?} against {hdd:?}");
            assert!(r.report.ops_per_sec <= ssd.report.ops_per_sec * 1.01, "{r:?} against {ssd:?}");
        }
        // Time-bounded: the run ends at 2 s of virtual time.
        assert!((hdd.report.secs - 2.0).abs() < 0.05, "{hdd:?}");
        assert!(!hdd.trace_exhausted);
    }

    #[test]
    fn the_workloads_start_sets_where_the_interval_runs_fall_in_it() {
        let (meta, recs) = web(200, 10, 40_000);
        let at = |lead_ms| {
            let mut cfg = Config::new(PolicyKind::IntervalHotDst, 1 << 20);
            cfg.params.interval = Duration::from_secs(1);
            cfg.cache = 0;
            cfg.duration = Some(Duration::from_secs(2));
            cfg.overhead = Some(Duration::from_micros(20));
            cfg.lead = Duration::from_millis(lead_ms);
            replay(&cfg, &meta, &recs).unwrap()
        };
        // The engine started half a second before the workload: its
        // interval runs fall half a second into it and a second after,
        // not at its start (before any access) and a second in; the hot
        // files reach the SSD half a second sooner.
        let (late, early) = (at(0), at(500));
        assert!(late.moves > 0 && early.moves > 0, "{late:?} {early:?}");
        assert!(early.report.ops as f64 > 1.1 * late.report.ops as f64, "{early:?} against {late:?}");
        // A lead of a whole interval is no lead.
        assert_eq!(at(1000).report.ops, late.report.ops);
        // The sweep's leads: evenly over an interval policy's interval.
        let mut cfg = Config::new(PolicyKind::IntervalCache, 0);
        cfg.params.interval = Duration::from_secs(2);
        let ms = Duration::from_millis;
        assert_eq!(leads(&cfg, 4), vec![ms(0), ms(500), ms(1000), ms(1500)]);
        assert_eq!(leads(&cfg, 1), vec![ms(0)]);
        // Over the period the runs really have: 250 ms at 100-ms ticks
        // comes round every 300 ms (review finding).
        cfg.params.interval = ms(250);
        assert_eq!(leads(&cfg, 3), vec![ms(0), ms(100), ms(200)]);
        assert_eq!(leads(&Config::new(PolicyKind::DynamicHotDst, 0), 4), vec![ms(0)]);
    }

    #[test]
    fn an_ssd_too_small_for_the_hot_set_evicts_and_never_overfills() {
        // 20 hot files of 64 KiB, an SSD of 5 of them: evictions, and the
        // account stays within the capacity (checked after every request).
        let (meta, recs) = web(100, 20, 5_000);
        let mut cfg = Config::new(PolicyKind::OnDemandCache, 5 * (64 << 10));
        cfg.overhead = Some(Duration::from_micros(20));
        let r = replay_checked(&cfg, &meta, &recs);
        assert!(r.evictions > 0, "{r:?}");
        // Counted by reason as the mount counts them: the cache's
        // evictions drop copies, its admissions copy.
        assert_eq!(r.by_reason.get("evict drop"), Some(&r.evictions), "{:?}", r.by_reason);
        assert_eq!(r.by_reason.values().sum::<u64>(), r.moves, "{:?}", r.by_reason);
        assert!(r.by_reason.keys().all(|k| k == "evict drop" || k.ends_with(" copy")), "{:?}", r.by_reason);
    }

    /// [`replay`], checking the model's invariants after every request.
    fn replay_checked(cfg: &Config, meta: &Meta, recs: &[Record]) -> SimReport {
        CHECK.with(|c| c.set(true));
        let r = replay(cfg, meta, recs).unwrap();
        CHECK.with(|c| c.set(false));
        r
    }

    #[test]
    fn a_file_takes_whole_allocation_units_of_the_ssd_as_the_mount_charges_it() {
        // Five files of 100 bytes, an SSD of three 4-KiB blocks: the mount
        // charges each what its copy occupies (`du`), so three fit. Charged
        // their sizes, all five did, and the half-full web servers of the
        // small preset ran 1.3 to 1.8 times faster than on the mount.
        let place = |unit: u64| {
            let mut cfg = Config::new(PolicyKind::PlainColdDst, 3 * 4096);
            cfg.alloc_unit = unit;
            let meta = Meta { dirs: vec![[1, 1]], ..Meta::default() };
            let start = Timestamp::from_secs(1);
            let mut sim = Sim::new(cfg, &meta, start);
            for f in 10..15 {
                sim.request(start, &rec(0, f, Kind::Create, 0, 100));
            }
            let on_ssd = sim.model.files.values().filter(|f| f.placement.uses_ssd()).count();
            (on_ssd, sim.model.used)
        };
        assert_eq!(place(ALLOC_UNIT), (3, 3 * 4096));
        assert_eq!(place(1), (5, 500));
    }

    #[test]
    fn a_listed_files_attributes_come_from_its_tier_and_are_not_an_access() {
        let start = Timestamp::from_secs(1);
        let mut sim = with_files(PolicyKind::DynamicHotDst, start, &[(7, 10, Placement::On(Tier::Hdd))]);
        let meta_read = Req::MetaRead { key: 0 }.kind();
        let done = sim.request(start, &rec(0, 7, Kind::Stat, 0, 10));
        assert_eq!(sim.devices[Tier::Hdd.idx()].submitted[meta_read], 1);
        assert_eq!(sim.devices[Tier::Ssd.idx()].submitted[meta_read], 0);
        assert!(done > start, "a seek on the HDD");
        assert!(sim.pending.is_empty(), "no event for the statistics");
        assert_eq!(sim.counters.requests, [0, 0], "nor a request of the hit ratio");
    }

    #[test]
    fn a_cached_files_write_and_remove_reach_both_copies_without_holding_the_ssd_for_the_hdd() {
        // The copy's write was submitted when the HDD's was done, some
        // milliseconds on, and the SSD model served nothing else until then:
        // the mixed workload's web server read behind the file server's
        // appends, 15 % slower than on the mount.
        let start = Timestamp::from_secs(1);
        let mut sim = with_files(
            PolicyKind::OnDemandCache,
            start,
            &[(7, 4096, Placement::Cached), (8, 4096, Placement::On(Tier::Ssd))],
        );
        let written = sim.request(start, &rec(0, 7, Kind::Write, 0, 4096));
        let (write, meta_write) = (Req::Write { file: 0, off: 0, len: 0 }.kind(), Req::MetaWrite { key: 0 }.kind());
        for t in [Tier::Hdd, Tier::Ssd] {
            assert_eq!(sim.devices[t.idx()].submitted[write], 1, "{t:?}");
        }
        let read = sim.request(start, &rec(0, 8, Kind::Read, 0, 4096));
        assert!(read.since(start) < Duration::from_millis(1), "an SSD read waited {:?}", read.since(start));
        sim.request(written, &rec(0, 7, Kind::Remove, 0, 0));
        for t in [Tier::Hdd, Tier::Ssd] {
            assert_eq!(sim.devices[t.idx()].submitted[meta_write], 1, "{t:?}");
        }
    }

    #[test]
    fn the_run_is_timed_from_the_workloads_clock_not_from_what_it_does_first() {
        // A file server lists its 40 files on the HDD (a seek each) before
        // it starts its clock, as the sweep's run does: the throughput is
        // that of what comes after.
        let trace = |listing: bool, clock: bool| {
            let mut v = vec![rec(0, 0, Kind::Phase, PHASE_PREPARE, 0)];
            for f in 10..50 {
                v.push(rec(MS, f, Kind::Create, 0, 0));
                v.push(rec(MS, f, Kind::Write, 0, 4096));
                v.push(rec(MS, f, Kind::Close, 0, 4096));
            }
            v.push(rec(2 * MS, 0, Kind::Phase, PHASE_MEASURE, 0));
            if listing {
                v.extend((10..50).map(|f| rec(2 * MS, f, Kind::Stat, 0, 4096)));
            }
            if clock {
                v.push(rec(2 * MS, 0, Kind::Phase, PHASE_RUN, 0));
            }
            for i in 0..400 {
                v.push(rec(3 * MS, 10 + i % 2, Kind::Read, 0, 4096));
                v.push(rec(3 * MS, 0, Kind::Op, 0, 0));
            }
            v
        };
        let meta = |clock| Meta {
            source: "workload:test".into(),
            dirs: vec![[1, 1]],
            ops: Some(400),
            run_clock: clock,
            ..Meta::default()
        };
        let ops = |(recs, meta): (Vec<Record>, Meta)| {
            let mut cfg = Config::new(PolicyKind::HddOnly, 0);
            cfg.duration = Some(Duration::from_millis(300));
            cfg.overhead = Some(Duration::from_micros(20));
            replay(&cfg, &meta, &recs).unwrap().report.ops
        };
        let plain = ops((trace(false, false), meta(false)));
        assert!(plain > 100, "{plain}");
        assert_eq!(ops((trace(true, true), meta(true))), plain, "the listing is outside the timed run");
        assert!(ops((trace(true, false), meta(false))) < plain / 2, "without the mark it is inside");
    }

    /// A preparation of files 10 and 11 (64 KiB, on the HDD), then
    /// `warm` in the warm-up, then a measured read of each file at 1 s.
    fn warmed(warm: &[Record]) -> (Meta, Vec<Record>) {
        let mut v = vec![rec(0, 0, Kind::Phase, PHASE_PREPARE, 0)];
        for f in [10, 11] {
            v.push(rec(0, f, Kind::Create, 0, 0));
            v.push(rec(0, f, Kind::Write, 0, 64 << 10));
            v.push(rec(0, f, Kind::Close, 0, 64 << 10));
        }
        v.push(rec(MS, 0, Kind::Phase, PHASE_WARMUP, 0));
        v.extend_from_slice(warm);
        v.push(rec(1000 * MS, 0, Kind::Phase, PHASE_MEASURE, 0));
        for f in [10, 11] {
            v.push(rec(1000 * MS, f, Kind::Read, 0, 64 << 10));
            v.push(rec(1000 * MS, 0, Kind::Op, 0, 0));
        }
        (Meta { source: "workload:test".into(), dirs: vec![[1, 1]], ops: Some(2), ..Meta::default() }, v)
    }

    #[test]
    fn a_warm_up_that_plans_moves_faster_than_the_migrator_finds_some_files_gone() {
        // Read, its copy planned at the tick (100 ms) and removed a
        // millisecond later: on the mount the migrator, a copy taking about
        // 2 ms with the models paused, finds the file gone. When moves took
        // no time, every one the warm-up planned was made, half as many
        // again as on the mount.
        let (meta, recs) = warmed(&[
            rec(50 * MS, 10, Kind::Read, 0, 64 << 10),
            rec(101 * MS, 10, Kind::Remove, 0, 0),
            rec(150 * MS, 11, Kind::Read, 0, 64 << 10),
        ]);
        let moves = |paused: Duration| {
            let mut cfg = Config::new(PolicyKind::OnDemandCache, 1 << 30);
            cfg.paused_move = paused;
            replay(&cfg, &meta, &recs).unwrap().total_moves
        };
        assert_eq!(moves(Duration::ZERO), 2);
        assert_eq!(moves(PAUSED_MOVE), 1, "file 10's copy found it gone");
    }

    #[test]
    fn the_measured_run_starts_when_the_moves_queued_before_it_are_done() {
        // The warm-up ends with both files' copies just planned: the sweep
        // waits for the moves, so the run reads both from the SSD and moves
        // nothing itself.
        let (meta, recs) =
            warmed(&[rec(999 * MS, 10, Kind::Read, 0, 64 << 10), rec(999 * MS, 11, Kind::Read, 0, 64 << 10)]);
        let r = replay(&Config::new(PolicyKind::OnDemandCache, 1 << 30), &meta, &recs).unwrap();
        assert_eq!((r.total_moves, r.moves), (2, 0), "{r:?}");
        assert_eq!(r.ssd_hit_ratio, 1.0);
    }

    /// A block trace as `trace import` makes it of an MSR CSV: 4 000
    /// requests of 4 KiB, 20 ms apart, over a 16 MiB disk cut into
    /// files of 256 KiB, 80 % of them to the first 2 MiB.
    fn imported() -> (Meta, Vec<Record>) {
        let mut rng = tierfs_bench::rng::Rng::new(3);
        let mut csv = String::new();
        for i in 0..4000u64 {
            let span = if rng.chance(0.8) { 2 << 20 } else { 16 << 20 };
            let off = rng.below(span / 4096) * 4096;
            let kind = if rng.chance(0.2) { "Write" } else { "Read" };
            csv.push_str(&format!("{},h,0,{kind},{off},4096,1\n", 1_000_000 + i * 200_000));
        }
        let mut out = Vec::new();
        crate::import::import(csv.as_bytes(), crate::import::Format::Msr, 256 << 10, "t.csv", &mut out).unwrap();
        let rd = tierfs_core::trace::Reader::new(&out[..]).unwrap();
        let meta = rd.meta().clone();
        (meta, rd.map(|r| r.unwrap()).collect())
    }

    #[test]
    fn an_imported_block_trace_finds_its_data_on_the_hdd_whatever_the_policy() {
        // The data of a block trace exists before it: a policy that puts
        // new files on the SSD gets none of it there for nothing. When the
        // importer created each file at its first request, dynamic cold-DST
        // found every file it had room for on the SSD.
        let (meta, recs) = imported();
        let at = |policy| {
            let mut cfg = Config::new(policy, 1 << 20);
            cfg.cache = 0;
            replay_checked(&cfg, &meta, &recs)
        };
        let (hot, cold) = (at(PolicyKind::DynamicHotDst), at(PolicyKind::DynamicColdDst));
        assert!(hot.ssd_hit_ratio > 0.3, "{hot:?}");
        assert_eq!((cold.ssd_hit_ratio, cold.moves, cold.bytes_moved), (hot.ssd_hit_ratio, hot.moves, hot.bytes_moved));
        // Each file is as long as the importer cut it.
        assert_eq!(hot.bytes_held, 64 * (256 << 10));
    }

    #[test]
    fn the_report_counts_and_times_reads_and_writes_not_creations() {
        // The count took in the creations too while the hit ratio is over
        // reads and writes only, and a creation's latency (here the
        // eviction that makes room for it) went into the request figures.
        let recs = vec![
            rec(0, 10, Kind::Create, 0, 64 << 10),
            rec(MS, 10, Kind::Read, 0, 4096),
            rec(100 * MS, 11, Kind::Create, 0, 64 << 10),
            rec(200 * MS, 11, Kind::Read, 0, 4096),
        ];
        let meta = Meta { dirs: vec![[1, 1]], ..Meta::default() };
        let mut cfg = Config::new(PolicyKind::DynamicColdDst, 64 << 10);
        cfg.cache = 0;
        let r = replay_checked(&cfg, &meta, &recs);
        assert_eq!(r.evictions, 1, "file 11's creation made room: {r:?}");
        assert_eq!((r.requests, r.report.ops, r.ssd_hit_ratio), (2, 2, 1.0), "{r:?}");
        assert!(r.request_latency.max_us < 1000, "{r:?}");
        assert!(r.report.latency.max_us < 1000, "{r:?}");
    }

    fn arb_trace() -> impl Strategy<Value = Vec<Record>> {
        let op = (0u64..8, 0u8..7, 0u64..4, 1u64..200_000);
        proptest::collection::vec(op, 1..300).prop_map(|ops| {
            let mut v = vec![rec(0, 0, Kind::Phase, PHASE_MEASURE, 0)];
            for (i, (f, k, off, len)) in ops.into_iter().enumerate() {
                let t = i as u64 * 10 * MS;
                let kind =
                    [Kind::Create, Kind::Write, Kind::Read, Kind::Remove, Kind::Truncate, Kind::Open, Kind::Stat]
                        [k as usize];
                v.push(rec(t, 10 + f, kind, off * 4096, len));
                v.push(rec(t, 0, Kind::Op, 0, 0));
            }
            v
        })
    }

    use tierfs_core::policy::{Admission, AgingRule};

    /// Every simulated policy that admits a file only after an access of
    /// it and keeps within the SSD's capacity: all but `ssd-only` (which
    /// ignores the capacity) and the interval policies (which promote the
    /// hottest files between their accesses, see `reference::opt`).
    fn demand_policies() -> Vec<PolicyKind> {
        PolicyKind::ALL
            .into_iter()
            .filter(|&k| unsupported(k).is_none())
            .filter(|k| !matches!(k, PolicyKind::SsdOnly | PolicyKind::IntervalHotDst | PolicyKind::IntervalCache))
            .collect()
    }

    /// Requests two seconds apart to 6 files of up to 200 KB: every move a
    /// request causes is done before the next one comes.
    fn arb_spaced_trace() -> impl Strategy<Value = Vec<Record>> {
        let op = (0u64..6, 0usize..10, 0u64..50, 1u64..200_000);
        proptest::collection::vec(op, 1..60).prop_map(|ops| {
            ops.into_iter()
                .enumerate()
                .map(|(i, (f, k, off, len))| {
                    let kind = [
                        Kind::Read,
                        Kind::Read,
                        Kind::Read,
                        Kind::Read,
                        Kind::Write,
                        Kind::Write,
                        Kind::Create,
                        Kind::Remove,
                        Kind::Truncate,
                        Kind::Open,
                    ][k];
                    rec(i as u64 * 2000 * MS, 10 + f, kind, off * 4096, len)
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn no_policy_serves_more_requests_from_the_ssd_than_the_optimum(
            recs in arb_spaced_trace(), cap in 0u64..600_000,
        ) {
            let meta = Meta { dirs: vec![[1, 1]], ..Meta::default() };
            let options = Admission::ALL.into_iter().flat_map(|a| AgingRule::ALL.into_iter().map(move |r| (a, r)));
            for (policy, (admission, aging)) in demand_policies().into_iter().flat_map(|p| options.clone().map(move |o| (p, o))) {
                let mut cfg = Config::new(policy, cap);
                cfg.params.admission = admission;
                cfg.params.aging = aging;
                cfg.cache = 0;
                SETTLED.with(|c| c.set(true));
                let r = replay_checked(&cfg, &meta, &recs);
                SETTLED.with(|c| c.set(false));
                let opt = r.reference.expect("measured against the optimum").opt;
                prop_assert_eq!(opt.best.requests, r.requests);
                prop_assert!(
                    r.ssd_hit_ratio <= opt.hit_ratio() + 1e-12,
                    "{} ({:?}, {:?}) served {} of {} requests from the SSD, the optimum at most {} ({:?})",
                    policy, admission, aging, r.ssd_hit_ratio * r.requests as f64, r.requests, opt.bound, opt.method
                );
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn the_ssd_account_matches_the_files_on_it_whatever_the_trace(
            recs in arb_trace(), cap in 0u64..600_000, p in 0usize..4,
        ) {
            let policy = [PolicyKind::DynamicHotDst, PolicyKind::OnDemandCache, PolicyKind::DynamicColdDst,
                PolicyKind::SsdOnly][p];
            let meta = Meta { ops: Some(0), ..Meta::default() };
            let mut cfg = Config::new(policy, cap);
            cfg.overhead = Some(Duration::from_micros(20));
            replay_checked(&cfg, &meta, &recs);
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Tests: check the model after every request.
    static CHECK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Tests: check that every move to the SSD planned is done before the
    /// next request comes.
    static SETTLED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
