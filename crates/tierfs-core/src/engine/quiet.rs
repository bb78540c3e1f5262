//! The quiet HDD mode in the engine (doing; the decisions are
//! `crate::quiet`'s): watching the HDD (its disk's I/O counters, tierfs's
//! own requests to the tier), the gate over background work that would
//! reach it, and the files created on the SSD in its place (held), which
//! are moved to the HDD together once the gate opens.

use super::Engine;
use crate::clock::Timestamp;
use crate::migrate::Move;
use crate::policy::{Plan, Reason, Step};
use crate::quiet::{Activity, Disk, Open, Wake};
use crate::report::HddReport;
use crate::state::ns::Ino;
use crate::store::Store;
use crate::tier::Tier;
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How often the disk's counters are read (a sysfs file the kernel keeps
/// in memory: reading it asks the disk nothing).
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Wake notes kept for the report.
const WAKES_SHOWN: usize = 32;

/// What the engine knows of the HDD's idleness (a leaf lock).
#[derive(Debug, Default)]
pub(super) struct QuietState {
    /// The disk under the HDD directory, if there is one.
    disk: Option<Disk>,
    /// What its counters did.
    activity: Activity,
    /// When they were last read.
    last_look: Option<Timestamp>,
    /// Where no disk is known: tierfs's own requests after the idle time.
    tierfs_wakes: VecDeque<Timestamp>,
    tierfs_wakes_total: u64,
    /// The gate's last answer.
    open: Option<Open>,
    /// Files created on the SSD in place of the HDD, waiting for the gate.
    held: HashSet<Ino>,
    /// What woke the HDD, latest last.
    wakes: VecDeque<Wake>,
}

impl<S: Store> Engine<S> {
    /// Finds the HDD's disk and starts watching the tier's requests.
    pub(super) fn quiet_start(&self) {
        let Some(cfg) = self.cfg.quiet else { return };
        if let Some(m) = &self.cfg.meters {
            m[Tier::Hdd.idx()].watch_idle(self.clock.clone(), cfg.idle_after);
        }
        let path = &self.cfg.tier_paths[Tier::Hdd.idx()];
        let disk = (!path.is_empty()).then(|| Disk::of_dir(std::path::Path::new(path))).flatten();
        match &disk {
            Some(d) => tracing::info!(disk = %d.name, "quiet HDD: watching the disk's I/O counters"),
            None => tracing::info!(
                path,
                "quiet HDD: no block device found under the HDD directory; its idleness is judged from tierfs's own requests"
            ),
        }
        self.quiet.lock().disk = disk;
    }

    /// True while work that would reach the HDD is held (quiet mode, and
    /// nothing opened the gate).
    pub(super) fn hdd_closed(&self) -> bool {
        self.cfg.quiet.is_some() && !self.hdd_open.load(Ordering::Acquire)
    }

    /// True if `step` waits in the queue while the HDD is held asleep:
    /// every move reads or writes the HDD but dropping a cached copy; a pin
    /// and a file taken off the SSD for a writer go anyway (someone asked).
    pub(super) fn quiet_holds(&self, s: &Step) -> bool {
        self.hdd_closed() && s.mv != Move::DropCopy && !matches!(s.reason, Reason::Pinned | Reason::Evacuate)
    }

    /// True if the quiet mode applies to files in `dir`.
    pub(super) fn quiet_dir(&self, dir: Ino) -> bool {
        self.cfg.quiet.is_some() && self.setting(self.group_of(dir)).1.quiet
    }

    /// A new file was made in `parent` on `tier`: held if the quiet mode
    /// put it on the SSD where its policy puts new files on the HDD.
    pub(super) fn quiet_created(&self, ino: Ino, parent: Ino, tier: Tier) {
        if tier != Tier::Ssd || !self.quiet_dir(parent) {
            return;
        }
        let wanted = match self.cfg.placement {
            Some(t) => t,
            None => self.setting(self.group_of(parent)).0.policy().initial_tier(),
        };
        if wanted == Tier::Hdd {
            self.quiet.lock().held.insert(ino);
        }
    }

    /// A file's last name went: nothing to hold.
    pub(super) fn quiet_removed(&self, ino: Ino) {
        if self.cfg.quiet.is_some() {
            self.quiet.lock().held.remove(&ino);
        }
    }

    /// Once a tick: reads the disk's counters (at most every second),
    /// takes the notes of what woke the tier, asks the gate, and when it
    /// opens queues the held files' moves to the HDD.
    pub(super) fn quiet_tick(&self, now: Timestamp) {
        let Some(cfg) = self.cfg.quiet else { return };
        let woke = self.cfg.meters.as_ref().map(|m| m[Tier::Hdd.idx()].take_woke()).unwrap_or_default();
        // Paths are read from the namespace before the lock is taken.
        let notes: Vec<(Timestamp, Wake)> = woke
            .into_iter()
            .map(|w| {
                let path = (w.doing.ino != 0).then(|| self.vol.path_of(w.doing.ino)).flatten();
                let op = if w.doing.op.is_empty() { "tierfs" } else { w.doing.op };
                let wake = Wake {
                    at: w.at.secs(),
                    op: op.to_string(),
                    call: w.call.to_string(),
                    path,
                    after_secs: w.after.as_secs(),
                };
                (w.at, wake)
            })
            .collect();
        for (_, w) in &notes {
            tracing::info!(op = %w.op, call = %w.call, path = ?w.path, idle_secs = w.after_secs, "a request woke the HDD");
        }
        let last_request = self.cfg.meters.as_ref().and_then(|m| m[Tier::Hdd.idx()].last_request());
        let held: Vec<Ino> = {
            let mut q = self.quiet.lock();
            for (at, w) in notes {
                q.tierfs_wakes.push_back(at);
                q.tierfs_wakes_total += 1;
                q.wakes.push_back(w);
            }
            while q.wakes.len() > WAKES_SHOWN {
                q.wakes.pop_front();
            }
            while q.tierfs_wakes.front().is_some_and(|t| now.since(*t) > Duration::from_secs(86_400)) {
                q.tierfs_wakes.pop_front();
            }
            if q.last_look.is_none_or(|t| now.since(t) >= LOOK_EVERY) {
                q.last_look = Some(now);
                let counts = q.disk.as_ref().map(|d| d.sectors());
                match counts {
                    Some(Ok(c)) => {
                        q.activity.observe(now, c, cfg.idle_after);
                    }
                    Some(Err(e)) => tracing::debug!(error = %e, "cannot read the HDD's disk counters"),
                    None => {}
                }
            }
            q.held.iter().copied().collect()
        };
        let awake = {
            let q = self.quiet.lock();
            if q.disk.is_some() {
                q.activity.awake(now, cfg.idle_after)
            } else {
                last_request.is_none_or(|t| now.since(t) < cfg.idle_after)
            }
        };
        let held_bytes: u64 = {
            let a = self.account.lock();
            held.iter().map(|i| a.charge(*i)).sum()
        };
        let open = crate::quiet::gate(&cfg, now, awake, held_bytes);
        let was = self.hdd_open.swap(open.is_some(), Ordering::AcqRel);
        let held = {
            let mut q = self.quiet.lock();
            q.open = open;
            if open.is_some() {
                std::mem::take(&mut q.held)
            } else {
                HashSet::new()
            }
        };
        if open.is_some() && !was {
            tracing::info!(why = open.map(Open::label), held = held.len(), held_bytes, "the HDD's gate opened");
            self.moves_cv.notify_all();
            self.wb_cv.notify_all();
        }
        if !held.is_empty() {
            let steps = {
                let a = self.account.lock();
                let mut v: Vec<Ino> = held.into_iter().collect();
                v.sort_unstable();
                v.into_iter()
                    .map(|ino| Step { ino, mv: Move::Demote, reason: Reason::Held, size: a.charge(ino) })
                    .collect()
            };
            self.enqueue(Plan { steps, skipped: vec![] });
        }
    }

    /// The HDD part of the status report.
    pub(super) fn hdd_report(&self, now: Timestamp) -> HddReport {
        let last_request = self.cfg.meters.as_ref().and_then(|m| m[Tier::Hdd.idx()].last_request());
        let cfg = self.cfg.quiet;
        let q = self.quiet.lock();
        let held: Vec<Ino> = q.held.iter().copied().collect();
        let (wakeups_day, wakeups_total) = if q.disk.is_some() {
            q.activity.wakeups(now)
        } else {
            (q.tierfs_wakes.len() as u64, q.tierfs_wakes_total)
        };
        let r = HddReport {
            quiet: cfg.is_some(),
            disk: q.disk.as_ref().map(|d| d.name.clone()),
            disk_idle_secs: q.activity.idle_for(now).filter(|_| q.disk.is_some()).map(|d| d.as_secs_f64()),
            tierfs_idle_secs: last_request.map(|t| now.since(t).as_secs_f64()),
            tierfs_requests: self.cfg.meters.as_ref().map_or(0, |m| m[Tier::Hdd.idx()].requests()),
            idle_after_secs: cfg.map_or(0, |c| c.idle_after.as_secs()),
            wakeups_day,
            wakeups_total,
            wakes: q.wakes.iter().cloned().collect(),
            open: q.open,
            held_files: held.len() as u64,
            held_bytes: 0,
            hold_limit: cfg.map_or(0, |c| c.hold),
            window: cfg.and_then(|c| c.window).map(|w| w.to_string()),
        };
        drop(q);
        let a = self.account.lock();
        HddReport { held_bytes: held.iter().map(|i| a.charge(*i)).sum(), ..r }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{queue, EngineConfig, Ran};
    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::event::Event;
    use crate::migrate::NoCrash;
    use crate::policy::PolicyKind;
    use crate::quiet::QuietConfig;
    use crate::state::ns::{Namespace, ROOT_INO};
    use crate::state::MemKv;
    use crate::store::measured::{Measured, Meter};
    use crate::store::mem::MemStore;
    use crate::tier::Placement;
    use crate::vfs::{Ctx, Volume, VolumeConfig};
    use std::ffi::OsStr;
    use std::sync::mpsc::Receiver;
    use std::sync::Arc;

    const CTX: Ctx = Ctx { uid: 0, gid: 0, pid: 1 };
    const IDLE: Duration = Duration::from_secs(60);

    type M = Measured<MemStore>;

    struct Rig {
        vol: Arc<Volume<M>>,
        engine: Arc<Engine<M>>,
        clock: ManualClock,
        rx: Receiver<Event>,
        hdd: Arc<Meter>,
        stores: (MemStore, MemStore, MemKv),
    }

    /// A mount of the default policy (new files on the HDD) with the quiet
    /// mode on and no disk to look at: the HDD's idleness is tierfs's own.
    fn rig(hold: u64) -> Rig {
        rig_on((MemStore::new(), MemStore::new(), MemKv::new()), hold)
    }

    /// [`rig`] over these stores and state, after recovery, as at mount.
    fn rig_on(stores: (MemStore, MemStore, MemKv), hold: u64) -> Rig {
        crate::lockcheck::watch();
        let clock = ManualClock::new(Timestamp::from_secs(1_000_000));
        let meters = [Meter::new(), Meter::new()];
        let (sink, rx) = queue();
        let vol = Arc::new(
            Volume::new(
                Measured::new(stores.0.clone(), meters[0].clone()),
                Measured::new(stores.1.clone(), meters[1].clone()),
                Namespace::new(Arc::new(stores.2.clone())),
                VolumeConfig { default_tier: Tier::Hdd, ..VolumeConfig::default() },
                sink.clone(),
                Arc::new(clock.clone()),
            )
            .unwrap(),
        );
        vol.recover().unwrap();
        let params = crate::policy::Params { quiet: true, ..Default::default() };
        let cfg = EngineConfig {
            policy: PolicyKind::DynamicHotDst,
            params,
            meters: Some(meters.clone()),
            quiet: Some(QuietConfig { hold, window: None, idle_after: IDLE }),
            ..EngineConfig::default()
        };
        let engine = Engine::new(vol.clone(), Arc::new(stores.2.clone()), Arc::new(clock.clone()), cfg, Some(sink));
        engine.quiet_start();
        Rig { vol, engine, clock, rx, hdd: meters[1].clone(), stores }
    }

    impl Rig {
        fn tick(&self) {
            let batch: Vec<Event> = self.rx.try_iter().collect();
            self.engine.ingest(&batch);
            self.engine.quiet_tick(self.clock.now());
        }

        fn write(&self, name: &str, data: &[u8]) -> (Ino, Placement) {
            let (a, o) = self.vol.create(&CTX, ROOT_INO, OsStr::new(name), 0o644, 0, libc::O_RDWR).unwrap();
            self.vol.write(o.fh, 0, data).unwrap();
            self.vol.fsync(o.fh, false).unwrap();
            self.vol.release(o.fh).unwrap();
            self.vol.fsyncdir(ROOT_INO).unwrap();
            (a.ino, self.vol.record(a.ino).unwrap().placement)
        }

        /// The queued moves, taken out.
        fn queued(&self) -> Vec<Step> {
            let mut q = self.engine.moves.lock();
            q.busy.clear();
            q.items.drain(..).collect()
        }
    }

    #[test]
    fn files_made_while_the_hdd_sleeps_wait_on_the_ssd_and_go_together_when_a_read_wakes_it() {
        let r = rig(1 << 30);
        r.tick();
        assert!(!r.engine.hdd_closed(), "just mounted: the HDD is awake");
        let (old, at) = r.write("old", b"on the hdd");
        assert_eq!(at, Placement::On(Tier::Hdd), "awake: new files go where the policy puts them");
        r.clock.advance(IDLE);
        r.tick();
        assert!(r.engine.hdd_closed(), "a minute without a request: asleep");
        let before = r.hdd.requests();
        let mut held = Vec::new();
        for i in 0..3 {
            let (ino, at) = r.write(&format!("new{i}"), &[i as u8; 5000]);
            assert_eq!(at, Placement::On(Tier::Ssd), "asleep: new files go to the SSD");
            held.push(ino);
        }
        let dh = r.vol.opendir(ROOT_INO).unwrap();
        assert!(r.vol.readdir(dh, 0).unwrap().len() >= 4);
        r.vol.releasedir(dh).unwrap();
        r.tick();
        assert_eq!(r.hdd.requests(), before, "creating, writing and listing asked the HDD nothing");
        let rep = r.engine.hdd_report(r.clock.now());
        assert_eq!((rep.held_files, rep.open), (3, None));
        assert!(rep.held_bytes >= 3 * 4096, "{rep:?}");
        assert!(r.queued().is_empty(), "nothing planned for the held files yet");
        // A read of the file on the HDD wakes it, and is noted as what did.
        r.clock.advance(Duration::from_secs(30));
        crate::quiet::set_doing("open", old);
        let o = r.vol.open(old, libc::O_RDONLY).unwrap();
        assert_eq!(r.vol.read(o.fh, 0, 100).unwrap(), b"on the hdd");
        r.vol.release(o.fh).unwrap();
        r.tick();
        assert!(!r.engine.hdd_closed());
        let rep = r.engine.hdd_report(r.clock.now());
        assert_eq!(rep.open, Some(Open::Awake));
        assert_eq!(rep.wakeups_total, 1);
        let w = &rep.wakes[0];
        assert_eq!((w.op.as_str(), w.path.as_deref(), w.after_secs), ("open", Some("/old"), 90), "{w:?}");
        // The held files go in that wake-up, together.
        // (The read may also have planned the file's promotion.)
        let steps: Vec<Step> = r.queued().into_iter().filter(|s| s.reason == Reason::Held).collect();
        assert_eq!(steps.iter().map(|s| s.ino).collect::<Vec<_>>(), held);
        for s in steps {
            assert_eq!((s.mv, s.reason), (Move::Demote, Reason::Held));
            assert_eq!(r.engine.execute(s, &NoCrash, false), Ran::Done);
        }
        for ino in held {
            assert_eq!(r.vol.record(ino).unwrap().placement, Placement::On(Tier::Hdd));
        }
        assert_eq!(r.engine.hdd_report(r.clock.now()).held_files, 0);
    }

    #[test]
    fn held_files_go_to_a_sleeping_hdd_once_they_fill_the_hold() {
        let r = rig(64 << 10);
        // The root's first reconciliation lists its HDD copy (a directory
        // never listed there may hold names the database does not know).
        r.write("first", b"x");
        r.clock.advance(IDLE);
        r.tick();
        assert!(r.engine.hdd_closed());
        let (a, _) = r.write("a", &[1; 40 << 10]);
        r.tick();
        assert!(r.engine.hdd_closed(), "40K held of 64K: {:?}", r.engine.hdd_report(r.clock.now()));
        assert!(r.queued().is_empty());
        let (b, _) = r.write("b", &[2; 40 << 10]);
        r.tick();
        assert_eq!(r.engine.hdd_report(r.clock.now()).open, Some(Open::Held));
        let held: Vec<Ino> = r.queued().into_iter().filter(|s| s.reason == Reason::Held).map(|s| s.ino).collect();
        assert_eq!(held, vec![a, b]);
    }

    #[test]
    fn background_moves_wait_while_the_hdd_sleeps_but_pins_and_copy_drops_do_not() {
        let r = rig(1 << 30);
        r.clock.advance(IDLE);
        r.tick();
        let step = |mv, reason| Step { ino: 5, mv, reason, size: 1 };
        assert!(r.engine.quiet_holds(&step(Move::Promote, Reason::HotOnRead { counter: 9, threshold: 1 })));
        assert!(r.engine.quiet_holds(&step(Move::Demote, Reason::Evict { counter: 1 })));
        assert!(!r.engine.quiet_holds(&step(Move::Promote, Reason::Pinned)));
        assert!(!r.engine.quiet_holds(&step(Move::Demote, Reason::Evacuate)));
        assert!(!r.engine.quiet_holds(&step(Move::DropCopy, Reason::Evict { counter: 1 })));
        assert!(!r.engine.chunk_move(), "no chunk move either");
    }

    /// A power cut: what was made durable survives; then a mount again.
    fn cut(r: Rig) -> Rig {
        let stores = r.stores.clone();
        drop(r);
        stores.0.crash();
        stores.1.crash();
        stores.2.crash();
        rig_on(stores, 1 << 30)
    }

    fn read(r: &Rig, name: &str) -> Vec<u8> {
        let a = r.vol.lookup(ROOT_INO, OsStr::new(name)).unwrap();
        let o = r.vol.open(a.ino, libc::O_RDONLY).unwrap();
        let b = r.vol.read(o.fh, 0, 1 << 20).unwrap();
        r.vol.release(o.fh).unwrap();
        b
    }

    #[test]
    fn fsynced_files_held_on_the_ssd_survive_a_power_cut() {
        let r = rig(1 << 30);
        r.write("first", b"before");
        r.clock.advance(IDLE);
        r.tick();
        assert!(r.engine.hdd_closed());
        for i in 0..5u8 {
            r.write(&format!("held{i}"), &[i; 3000]);
        }
        r.tick();
        assert_eq!(r.engine.hdd_report(r.clock.now()).held_files, 5);
        let r = cut(r);
        assert_eq!(read(&r, "first"), b"before");
        for i in 0..5u8 {
            assert_eq!(read(&r, &format!("held{i}")), vec![i; 3000], "held{i}");
        }
    }

    #[test]
    fn a_power_cut_at_every_step_of_the_flush_of_a_held_file_loses_nothing() {
        for step in crate::migrate::Step::ALL {
            let r = rig(1 << 30);
            r.write("first", b"before");
            r.clock.advance(IDLE);
            r.tick();
            let (ino, _) = r.write("held", b"held data");
            // The HDD wakes (a read of a file on it): the held file goes.
            read(&r, "first");
            r.tick();
            let s = r.queued().into_iter().find(|s| s.reason == Reason::Held).expect("the held file's move");
            assert_eq!(s.ino, ino);
            let ran = r.engine.execute(s, &crate::migrate::CrashAt(step), false);
            assert_ne!(ran, Ran::Done, "{step:?}");
            let r = cut(r);
            assert_eq!(read(&r, "held"), b"held data", "cut at {step:?}");
            assert_eq!(read(&r, "first"), b"before", "cut at {step:?}");
        }
    }

    #[test]
    fn a_directory_opted_out_of_the_quiet_mode_gets_its_new_files_where_its_policy_says() {
        let r = rig(1 << 30);
        r.write("first", b"x");
        let out = r.vol.mkdir(&CTX, ROOT_INO, OsStr::new("out"), 0o755, 0).unwrap().ino;
        let set = |v: &[u8]| r.engine.xattr_change(&CTX, out, OsStr::new("user.tierfs.quiet"), Some(v), 0).unwrap();
        set(b"off").unwrap();
        assert!(set(b"maybe").is_err());
        r.clock.advance(IDLE);
        r.tick();
        assert!(r.engine.hdd_closed());
        let make = |parent: Ino, name: &str| {
            let (a, o) = r.vol.create(&CTX, parent, OsStr::new(name), 0o644, 0, libc::O_RDWR).unwrap();
            r.vol.release(o.fh).unwrap();
            r.vol.record(a.ino).unwrap().placement
        };
        assert_eq!(make(out, "f"), Placement::On(Tier::Hdd), "opted out: the policy's tier");
        assert_eq!(make(ROOT_INO, "g"), Placement::On(Tier::Ssd), "quiet: held on the SSD");
        assert!(!r.engine.quiet_dir(out) && r.engine.quiet_dir(ROOT_INO));
        set(b"on").unwrap();
        assert!(r.engine.quiet_dir(out));
    }
}
