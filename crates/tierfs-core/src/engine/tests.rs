//! The engine over in-memory tiers, with a manual clock and a watchdog
//! around every step that once hung.

use super::*;
use crate::clock::ManualClock;
use crate::migrate::tests::read_all;
use crate::migrate::Outcome;
use crate::state::ns::{Namespace, ROOT_INO};
use crate::state::MemKv;
use crate::stats::Residence;
use crate::store::mem::MemStore;
use crate::testutil::within;
use crate::vfs::VolumeConfig;

const CTX: Ctx = Ctx { uid: 0, gid: 0, pid: 1 };

struct Rig {
    vol: Arc<Volume<MemStore>>,
    engine: Arc<Engine<MemStore>>,
    clock: ManualClock,
    rx: Receiver<Event>,
    ssd: MemStore,
    hdd: MemStore,
    kv: MemKv,
}

fn rig(policy: PolicyKind) -> Rig {
    rig_with(EngineConfig { policy, ..EngineConfig::default() })
}

fn rig_with(cfg: EngineConfig) -> Rig {
    let (ssd, hdd, kv) = (MemStore::new(), MemStore::new(), MemKv::new());
    mount(ssd, hdd, kv, cfg)
}

/// A volume and engine over these stores, after recovery, as at mount.
fn mount(ssd: MemStore, hdd: MemStore, kv: MemKv, cfg: EngineConfig) -> Rig {
    crate::lockcheck::watch();
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let (sink, rx) = queue();
    let vcfg = VolumeConfig { default_tier: cfg.policy.policy().initial_tier(), ..VolumeConfig::default() };
    let vol = Arc::new(
        Volume::new(
            ssd.clone(),
            hdd.clone(),
            Namespace::new(Arc::new(kv.clone())),
            vcfg,
            sink.clone(),
            Arc::new(clock.clone()),
        )
        .unwrap(),
    );
    let rec = vol.recover().unwrap();
    let cfg = EngineConfig { audit_space: rec.changed(), ..cfg };
    let engine = Engine::new(vol.clone(), Arc::new(kv.clone()), Arc::new(clock.clone()), cfg, Some(sink));
    Rig { vol, engine, clock, rx, ssd, hdd, kv }
}

fn file(v: &Volume<MemStore>, name: &str, data: &[u8]) -> Ino {
    let (a, o) = v.create(&CTX, ROOT_INO, OsStr::new(name), 0o644, 0, libc::O_RDWR).unwrap();
    v.write(o.fh, 0, data).unwrap();
    v.fsync(o.fh, false).unwrap();
    v.release(o.fh).unwrap();
    v.fsyncdir(ROOT_INO).unwrap();
    a.ino
}

impl Rig {
    /// Feeds the queued events to the engine and runs its periodic work,
    /// failing the test if that does not finish within five seconds.
    fn step(&self) {
        let batch: Vec<Event> = self.rx.try_iter().collect();
        let e = self.engine.clone();
        let now = self.clock.now();
        within(5, "the engine's step", move || {
            e.ingest(&batch);
            let mut last = now;
            e.maintain(now, &mut last, false);
        });
    }
}

#[test]
fn renaming_a_plain_directory_does_not_hang_the_engine() {
    // `regroup_subtree` looked up the group a renamed directory heads and,
    // in the same expression, the group it inherits: the groups mutex was
    // still held by the first lookup's temporary guard when the second
    // took it. Every later request that needed the groups hung.
    let r = rig(PolicyKind::DynamicHotDst);
    let a = r.vol.mkdir(&CTX, ROOT_INO, OsStr::new("a"), 0o755, 0).unwrap().ino;
    let b = r.vol.mkdir(&CTX, a, OsStr::new("b"), 0o755, 0).unwrap().ino;
    r.vol.rename(a, OsStr::new("b"), ROOT_INO, OsStr::new("c"), 0).unwrap();
    r.step();
    // The mount keeps working: a file created in the moved directory is
    // placed by the engine and counted.
    let (attr, o) = r.vol.create(&CTX, b, OsStr::new("x"), 0o644, 0, libc::O_RDWR).unwrap();
    r.vol.release(o.fh).unwrap();
    r.step();
    assert!(r.engine.planner.lock().stats.get(attr.ino).is_some());
}

#[test]
fn cached_copies_dropped_by_recovery_leave_the_statistics_and_the_ssd_account() {
    // After an unclean shutdown recovery drops every cached copy, but the
    // statistics still had those files on the SSD: their space was never
    // given back and they were never admitted again.
    let r = rig(PolicyKind::OnDemandCache);
    let f = file(&r.vol, "page", &[7u8; 8192]);
    assert!(matches!(r.vol.migrate(f, Move::Copy, &crate::migrate::NoCrash).unwrap(), Outcome::Done(_)));
    r.step();
    assert_eq!(r.engine.planner.lock().stats.get(f).unwrap().residence, Residence::Cached);
    assert!(r.engine.ssd_used() >= 8192);
    // The statistics are durable, then the power goes.
    let now = r.clock.now();
    let mut last = now;
    r.engine.maintain(now, &mut last, true);
    r.vol.sync_state().unwrap();
    let Rig { ssd, hdd, kv, engine, vol, .. } = r;
    drop(engine);
    drop(vol);
    ssd.crash();
    hdd.crash();
    kv.crash();
    let r = mount(ssd, hdd, kv, EngineConfig { policy: PolicyKind::OnDemandCache, ..EngineConfig::default() });
    assert_eq!(r.vol.record(f).unwrap().placement, crate::tier::Placement::On(Tier::Hdd), "the copy was dropped");
    assert_eq!(r.engine.planner.lock().stats.get(f).map(|s| s.residence), Some(Residence::Hdd));
    assert_eq!(r.engine.ssd_used(), 0);
}

/// Dynamic cold-DST on a 20 KiB SSD cleaned only on demand, with two
/// files of 8 KiB on it: the next 8 KiB need an eviction.
/// `dynamic-cold-dst` with 20 KiB of SSD and no watermark headroom.
fn small_ssd_rig() -> Rig {
    rig_with(EngineConfig {
        policy: PolicyKind::DynamicColdDst,
        ssd_capacity: Some(20 << 10),
        watermarks: (100, 100),
        ..EngineConfig::default()
    })
}

fn two_files_on_a_full_ssd() -> (Rig, Ino, Ino) {
    let r = small_ssd_rig();
    let a = file(&r.vol, "a", &[1u8; 8192]);
    let b = file(&r.vol, "b", &[2u8; 8192]);
    (r, a, b)
}

#[test]
fn a_write_that_needs_room_never_migrates_in_its_own_thread() {
    // The foreground cleaner ran whole migrations inside the request that
    // needed room, holding its file's I/O lock: two such writes stalled a
    // mount with two request threads, and the cleaner could wait for a
    // lock another request held while that one waited for ours. Now the
    // request waits, holding nothing, and the cleaner thread evicts.
    let (r, a, b) = two_files_on_a_full_ssd();
    assert_eq!(r.vol.record(b).unwrap().placement, crate::tier::Placement::On(Tier::Ssd));
    let movers = Arc::new(Mutex::new(Vec::new()));
    let seen = movers.clone();
    r.hdd.set_gate(Some(Arc::new(move |op, _| {
        if op == "link" {
            seen.lock().push(std::thread::current().name().unwrap_or("?").to_string());
        }
    })));
    let Rig { vol, engine, rx, .. } = r;
    engine.start(rx);
    let v = vol.clone();
    within(10, "a write that needs room", move || {
        std::thread::Builder::new()
            .name("writer".into())
            .spawn(move || {
                let o = v.open(a, libc::O_RDWR).unwrap();
                v.write(o.fh, 8192, &[3u8; 8192]).unwrap();
                v.release(o.fh).unwrap();
            })
            .unwrap()
            .join()
            .unwrap()
    });
    assert_eq!(vol.record(b).unwrap().placement, crate::tier::Placement::On(Tier::Hdd), "b, the coldest, left");
    assert_eq!(vol.record(a).unwrap().placement, crate::tier::Placement::On(Tier::Ssd));
    let movers = movers.lock().clone();
    assert!(!movers.is_empty());
    assert!(movers.iter().all(|t| t.starts_with("tierfs-")), "migrations ran in: {movers:?}");
    assert!(engine.shutdown());
}

#[test]
fn a_writer_whose_room_another_writer_took_waits_for_the_next_pass_instead_of_leaving_the_ssd() {
    // In the live sweep's mixed workload a writer gave up after the pass
    // that started for it, because a second writer that came meanwhile
    // took the room it made: its file was taken off the SSD while the
    // cleaner could still have made room. Here the first writer needs two
    // evictions; the second, 8 KiB, takes the first eviction's room.
    let r = rig_with(EngineConfig {
        policy: PolicyKind::DynamicColdDst,
        ssd_capacity: Some(40 << 10),
        watermarks: (100, 100),
        // Long enough that a loaded machine cannot make the first writer
        // give up on time alone (the behaviour checked against).
        room_wait: Duration::from_secs(30),
        ..EngineConfig::default()
    });
    let cold: Vec<Ino> = (0..4).map(|i| file(&r.vol, &format!("c{i}"), &[1u8; 8192])).collect();
    let a = file(&r.vol, "a", &[2u8; 8192]);
    let on = |v: &Volume<MemStore>, i| v.record(i).unwrap().placement;
    assert!(cold.iter().chain([&a]).all(|&i| on(&r.vol, i) == crate::tier::Placement::On(Tier::Ssd)));
    // The cleaner's first two evictions wait as they stage their copy on
    // the HDD (holding no lock another request needs): the first until
    // the second writer waits, the second until it wrote.
    let (at_link, links) = std::sync::mpsc::sync_channel::<()>(4);
    let (go, gate_go) = std::sync::mpsc::sync_channel::<()>(4);
    let gate_go = Mutex::new(gate_go);
    let held = std::sync::atomic::AtomicUsize::new(0);
    r.hdd.set_gate(Some(Arc::new(move |op, _| {
        let cleaner = std::thread::current().name() == Some("tierfs-cleaner");
        if op == "open" && cleaner && held.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 2 {
            let _ = at_link.send(());
            let _ = gate_go.lock().recv_timeout(Duration::from_secs(10));
        }
    })));
    let Rig { vol, engine, rx, .. } = r;
    engine.start(rx);
    let write = |v: Arc<Volume<MemStore>>, ino: Ino, off: u64, len: usize| {
        std::thread::spawn(move || {
            let o = v.open(ino, libc::O_RDWR).unwrap();
            v.write(o.fh, off, &vec![7u8; len]).unwrap();
            v.release(o.fh).unwrap();
        })
    };
    let first = write(vol.clone(), a, 8192, 16 << 10);
    links.recv_timeout(Duration::from_secs(10)).expect("the first eviction");
    // Made now, so that the pass under way did not choose it as a victim.
    let (n, o) = vol.create(&CTX, ROOT_INO, OsStr::new("n"), 0o644, 0, libc::O_RDWR).unwrap();
    vol.release(o.fh).unwrap();
    let second = write(vol.clone(), n.ino, 0, 8192);
    let waiting = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        engine.status(0).migrations.room_waits >= 2
    });
    assert!(waiting, "the second writer never waited for room");
    go.send(()).unwrap();
    links.recv_timeout(Duration::from_secs(10)).expect("the second eviction");
    within(10, "the second writer", move || second.join().unwrap());
    go.send(()).unwrap();
    within(10, "the first writer", move || first.join().unwrap());
    let m = engine.status(0).migrations;
    assert_eq!(m.evacuations, 0, "{m:?}");
    assert_eq!(on(&vol, a), crate::tier::Placement::On(Tier::Ssd), "the first writer's file left the SSD");
    let o = vol.open(a, libc::O_RDONLY).unwrap();
    let mut want = vec![2u8; 8192];
    want.extend_from_slice(&[7u8; 16 << 10]);
    assert_eq!(vol.read(o.fh, 0, 64 << 10).unwrap(), want);
    vol.release(o.fh).unwrap();
    assert!(engine.shutdown());
}

#[test]
fn the_shutdown_ends_in_seconds_even_if_a_migration_is_stuck() {
    // A background thread stuck in a store call must not keep the daemon
    // from ending: the shutdown gives up after a few seconds, says what
    // each thread was doing, and reports the shutdown as not clean.
    let r = rig(PolicyKind::DynamicHotDst);
    let f = file(&r.vol, "f", &[1u8; 4096]);
    r.hdd.set_gate(Some(Arc::new(|op, _| {
        if op == "unlink" && std::thread::current().name() == Some("tierfs-migrator") {
            std::thread::sleep(Duration::from_secs(30));
        }
    })));
    let Rig { vol, engine, rx, .. } = r;
    engine.start(rx);
    engine.enqueue(Plan {
        steps: vec![Step { ino: f, mv: Move::Promote, reason: Reason::Pinned, size: 4096 }],
        skipped: vec![],
    });
    // The promotion gets stuck removing its source.
    let stuck = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        engine.activity().iter().any(|a| a.starts_with("migrator: Promote"))
    });
    assert!(stuck, "{:?}", engine.activity());
    std::thread::sleep(Duration::from_millis(200));
    let t = std::time::Instant::now();
    let e = engine.clone();
    let clean = within(10, "the shutdown", move || e.shutdown());
    assert!(!clean, "a stuck thread makes the shutdown unclean");
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    drop(vol);
}

#[test]
fn a_write_larger_than_the_ssd_does_not_empty_it() {
    // A request for more room than the capacity made the cleaner evict
    // every file before the writer gave up (found in review): it cannot be
    // met, so the written file goes to the HDD at once.
    let (r, a, b) = two_files_on_a_full_ssd();
    let Rig { vol, engine, rx, .. } = r;
    engine.start(rx);
    let v = vol.clone();
    let c = within(20, "a write larger than the SSD", move || file(&v, "c", &[3u8; 40 << 10]));
    let on = |i| vol.record(i).unwrap().placement;
    assert_eq!(on(c), crate::tier::Placement::On(Tier::Hdd));
    assert_eq!((on(a), on(b)), (crate::tier::Placement::On(Tier::Ssd), crate::tier::Placement::On(Tier::Ssd)));
    assert!(engine.shutdown());
}

#[test]
fn an_evacuation_for_a_write_counts_its_bytes_and_its_reason() {
    // A file taken off the SSD for its own write was counted as a demotion
    // without its bytes, and as an eviction in its notes (found adding the
    // metrics by reason).
    let r = small_ssd_rig();
    let a = file(&r.vol, "a", &[1u8; 8192]);
    assert_eq!(r.vol.record(a).unwrap().placement, crate::tier::Placement::On(Tier::Ssd));
    let Rig { vol, engine, rx, .. } = r;
    engine.start(rx);
    let v = vol.clone();
    within(20, "a write that outgrows the SSD", move || {
        let o = v.open(a, libc::O_RDWR).unwrap();
        v.write(o.fh, 8192, &[3u8; 16 << 10]).unwrap();
        v.release(o.fh).unwrap();
    });
    assert_eq!(vol.record(a).unwrap().placement, crate::tier::Placement::On(Tier::Hdd));
    let m = engine.status(0).migrations;
    assert_eq!(m.evacuations, 1);
    assert_eq!(
        m.by_reason,
        vec![crate::report::ReasonMoves { kind: "demotion".into(), reason: "evacuate".into(), moves: 1, bytes: 8192 }]
    );
    assert_eq!((m.demotions, m.evictions, m.bytes_moved), (1, 0, 8192));
    assert!(engine.file_report(a).unwrap().note.unwrap().contains("no SSD room"));
    assert!(engine.shutdown());
}

#[test]
fn files_adopted_on_the_ssd_are_charged_to_the_account() {
    // Reconciliation adopts what it finds in the backing directories, after
    // the account was computed at mount: the SSD files it adopted were
    // never charged (found in review).
    let (ssd, hdd, kv) = (MemStore::new(), MemStore::new(), MemKv::new());
    {
        use crate::store::Store;
        let f = ssd.open(&ssd.root().unwrap(), OsStr::new("found"), libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        ssd.write_at(&f, &[9u8; 12_000], 0).unwrap();
    }
    let r = mount(ssd, hdd, kv, EngineConfig::default());
    assert_eq!(r.engine.ssd_used(), 0, "not adopted yet");
    let a = r.vol.lookup(ROOT_INO, OsStr::new("found")).unwrap();
    assert_eq!(r.vol.record(a.ino).unwrap().placement, crate::tier::Placement::On(Tier::Ssd));
    assert!(r.engine.ssd_used() >= 12_000, "charged: {}", r.engine.ssd_used());
}

/// An engine whose root group has a write-back area of `pct` % of a 1 MiB
/// SSD, and a 512 KiB file on the HDD (written in one request, too big for
/// the area). Chunks are 64 KiB.
fn write_back_rig(pct: u8) -> (Rig, Ino, u64) {
    let params = crate::policy::Params { write_back: pct, ..crate::policy::Params::default() };
    let r = rig_with(EngineConfig {
        policy: PolicyKind::HddOnly,
        params,
        ssd_capacity: Some(1 << 20),
        ..EngineConfig::default()
    });
    let ino = file(&r.vol, "f", &vec![1u8; 512 << 10]);
    assert!(!r.vol.is_split(ino));
    let o = r.vol.open(ino, libc::O_RDWR).unwrap();
    (r, ino, o.fh)
}

const K64: u64 = 64 << 10;

fn hdd_bytes(r: &Rig, off: u64, n: usize) -> Vec<u8> {
    let root = r.hdd.root().unwrap();
    let f = r.hdd.open(&root, OsStr::new("f"), libc::O_RDONLY, 0).unwrap();
    let mut b = vec![0u8; n];
    r.hdd.read_at(&f, &mut b, off).unwrap();
    b
}

#[test]
fn the_scrubber_writes_back_past_the_high_watermark_when_idle_and_frees_clean_chunks_for_room() {
    let (r, ino, fh) = write_back_rig(50);
    // Whole chunks: a part of a chunk of a file on the HDD would need the
    // rest read from the HDD first, and goes to the HDD.
    let chunk = vec![9u8; K64 as usize];
    r.vol.write(fh, 3 * K64 + 10, &[9u8; 100]).unwrap();
    assert!(!r.vol.is_split(ino), "a partial chunk stayed on the HDD");
    for i in 0..7 {
        r.vol.write(fh, i * K64, &chunk).unwrap();
    }
    let info = r.vol.split_info(ino).unwrap();
    assert_eq!((info.chunks, info.dirty), (7, 7), "every write landed on the SSD");
    assert_eq!(hdd_bytes(&r, 0, 4), [1, 1, 1, 1], "and not on the HDD");
    // 448 KiB dirty of a 512 KiB area: past 75 %, down to 50 %.
    assert_eq!(r.engine.scrub_round(false), 0);
    assert_eq!(r.vol.split_info(ino).unwrap().dirty, 4);
    assert_eq!(hdd_bytes(&r, 0, 4), [9, 9, 9, 9], "the oldest chunk was written back");
    assert_eq!(hdd_bytes(&r, 6 * K64, 4), [1, 1, 1, 1], "the newest was not");
    // Idle: everything.
    r.clock.advance(crate::extent::writeback::IDLE);
    r.engine.scrub_round(false);
    assert_eq!(r.vol.split_info(ino).unwrap().dirty, 0);
    assert_eq!(hdd_bytes(&r, 6 * K64, 4), [9, 9, 9, 9]);
    // The eighth chunk fills the area: the oldest clean one makes room.
    r.vol.write(fh, 7 * K64, &chunk).unwrap();
    r.engine.scrub_round(false);
    let info = r.vol.split_info(ino).unwrap();
    assert_eq!((info.chunks, info.dirty), (7, 1));
    assert!(!r.vol.has_chunk(crate::extent::ChunkId::new(ino, 0)), "the oldest clean chunk went");
    let rep = r.engine.wb_report();
    assert_eq!((rep.scrubbed, rep.freed, rep.writes, rep.ssd_writes), (7, 1, 0, 0), "events not taken in yet");
    r.step();
    assert_eq!(r.engine.wb_report().ssd_writes, 8);
    // And two went to the HDD: the partial one, and the 512-KiB one that made the file.
    assert_eq!(r.engine.wb_report().writes, 10);
    r.vol.release(fh).unwrap();
}

#[test]
fn a_write_back_area_full_of_dirty_chunks_sends_writes_to_the_hdd_not_enospc() {
    let (r, ino, fh) = write_back_rig(10);
    r.vol.write(fh, 0, &vec![7u8; K64 as usize]).unwrap();
    assert_eq!(r.vol.split_info(ino).unwrap().dirty, 1);
    r.vol.write(fh, K64, &vec![8u8; K64 as usize]).unwrap();
    assert_eq!(r.vol.split_info(ino).unwrap().chunks, 1, "no room: the write went to the HDD");
    assert_eq!(hdd_bytes(&r, K64, 2), [8, 8]);
    assert_eq!(r.engine.wb_report().diverted, 1);
    r.vol.release(fh).unwrap();
}

#[test]
fn the_shutdown_writes_the_write_back_area_back() {
    let (r, ino, fh) = write_back_rig(30);
    let mut chunk = vec![1u8; K64 as usize];
    chunk[100..108].copy_from_slice(b"buffered");
    r.vol.write(fh, 0, &chunk).unwrap();
    r.vol.release(fh).unwrap();
    assert_eq!(r.vol.split_info(ino).unwrap().dirty, 1);
    assert!(r.engine.shutdown());
    assert_eq!(r.vol.split_info(ino).unwrap().dirty, 0);
    assert_eq!(&hdd_bytes(&r, 100, 8), b"buffered");
}

/// The daemon dies with a buffered write acknowledged (no fsync, no clean
/// shutdown): at the next mount the chunk is found dirty in the map, joins
/// the area, and the scrubber writes it back.
#[test]
fn after_a_crash_the_dirty_chunks_of_the_area_are_found_and_written_back() {
    let (r, ino, fh) = write_back_rig(30);
    let mut chunk = vec![1u8; K64 as usize];
    chunk[5..17].copy_from_slice(b"acknowledged");
    r.vol.write(fh, 0, &chunk).unwrap();
    r.vol.release(fh).unwrap();
    assert_eq!(hdd_bytes(&r, 5, 12), vec![1u8; 12]);
    let cfg = EngineConfig { ..r.engine.cfg.clone() };
    let (ssd, hdd, kv) = (r.ssd.clone(), r.hdd.clone(), r.kv.clone());
    drop(r);
    kv.crash();
    let r = mount(ssd, hdd, kv, cfg);
    assert_eq!(r.vol.split_info(ino).map(|i| i.dirty), Some(1));
    assert_eq!(r.engine.wb_report().dirty_bytes, K64, "the area has it");
    r.clock.advance(crate::extent::writeback::IDLE);
    r.engine.scrub_round(false);
    assert_eq!(r.vol.split_info(ino).map(|i| i.dirty), Some(0));
    assert_eq!(&hdd_bytes(&r, 5, 12), b"acknowledged");
}

/// Review finding 9 of issue 12: `--placement ssd` put new files on the
/// SSD past the write budget, and a write over the budget took a file
/// pinned to the SSD off it (for the policy to bring it back).
#[test]
fn past_the_budget_placement_ssd_sends_new_files_to_the_hdd_and_a_pinned_file_stays() {
    use crate::store::measured::Meter;
    let ssd_meter = Meter::new();
    let r = rig_with(EngineConfig {
        policy: PolicyKind::DynamicColdDst,
        placement: Some(Tier::Ssd),
        budget: Some(crate::regulator::Budget { bytes_per_day: 24 << 20 }),
        meters: Some([ssd_meter.clone(), Meter::new()]),
        ..EngineConfig::default()
    });
    let on = |name: &str, t: Tier| r.vol.stat_on(ROOT_INO, OsStr::new(name), t).is_ok();
    let p = file(&r.vol, "p", b"pinned");
    assert!(on("p", Tier::Ssd), "within the budget new files go where the placement says");
    r.engine.groups.lock().set_file_pin(p, Some(Tier::Ssd));
    // The meter sees the day's SSD writes pass the budget.
    ssd_meter.write_took(Duration::from_micros(10), 25 << 20);
    let vol = r.vol.clone();
    // Without the fixes the writes wait for an evacuation no cleaner runs.
    within(10, "writes past the budget", move || {
        file(&vol, "n", b"new");
        let o = vol.open(p, libc::O_RDWR).unwrap();
        vol.write(o.fh, 0, &[5u8; 64 << 10]).unwrap();
        vol.write(o.fh, 100, b"over").unwrap();
        vol.release(o.fh).unwrap();
    });
    assert!(on("n", Tier::Hdd) && !on("n", Tier::Ssd), "past the budget a new file goes to the HDD");
    assert!(on("p", Tier::Ssd) && !on("p", Tier::Hdd), "the pinned file grew and was written on the SSD");
    let mut want = vec![5u8; 64 << 10];
    want[100..104].copy_from_slice(b"over");
    let o = r.vol.open(p, libc::O_RDONLY).unwrap();
    assert_eq!(r.vol.read(o.fh, 0, 1 << 20).unwrap(), want);
    r.vol.release(o.fh).unwrap();
    assert!(r.engine.regulator_report().diverted_today_writes >= 1, "the new file was diverted");
    assert_eq!(r.engine.counters.evacuations.load(Ordering::Relaxed), 0, "nothing was taken off the SSD");
}

#[test]
fn a_rename_within_a_policy_group_does_not_conform_the_whole_group() {
    // Every directory rename made each touched group's policy conform all
    // of its files: with a million files in a group, one `mv` of an empty
    // directory rescanned them all.
    let r = rig(PolicyKind::DynamicHotDst);
    let p = r.vol.mkdir(&CTX, ROOT_INO, OsStr::new("p"), 0o755, 0).unwrap().ino;
    r.engine.xattr_change(&CTX, p, OsStr::new("user.tierfs.policy"), Some(b"hdd-only"), 0).unwrap().unwrap();
    let a = r.vol.mkdir(&CTX, p, OsStr::new("a"), 0o755, 0).unwrap().ino;
    let (attr, o) = r.vol.create(&CTX, a, OsStr::new("f"), 0o644, 0, libc::O_RDWR).unwrap();
    r.vol.release(o.fh).unwrap();
    r.step();
    let group = r.engine.planner.lock().stats.get(attr.ino).unwrap().group;
    assert_ne!(group, 0, "the file is in p's group");
    let before = r.engine.conforms.load(Ordering::Relaxed);
    r.vol.rename(p, OsStr::new("a"), p, OsStr::new("b"), 0).unwrap();
    r.step();
    assert_eq!(r.engine.conforms.load(Ordering::Relaxed), before, "nothing changed group");
    assert_eq!(r.engine.planner.lock().stats.get(attr.ino).unwrap().group, group);
    // Out of the group: both groups conform, and the file follows.
    r.vol.rename(p, OsStr::new("b"), ROOT_INO, OsStr::new("b"), 0).unwrap();
    r.step();
    assert_eq!(r.engine.conforms.load(Ordering::Relaxed), before + 2, "the group it left and the one it joined");
    assert_eq!(r.engine.planner.lock().stats.get(attr.ino).unwrap().group, 0);
}

#[test]
fn a_close_racing_an_unlink_leaves_no_charge_for_the_gone_file() {
    // The last close looked at the record (still there), then measured
    // and settled the file's SSD bytes. An unlink that deleted the record
    // and dropped the charge in between (it does not take the file's I/O
    // lock) had its charge put back for a file that no longer existed,
    // until the next mount: the SSD account stayed 8 KiB too high.
    let r = rig(PolicyKind::DynamicColdDst);
    let (attr, o) = r.vol.create(&CTX, ROOT_INO, OsStr::new("f"), 0o644, 0, libc::O_RDWR).unwrap();
    r.vol.write(o.fh, 0, &[5u8; 8192]).unwrap();
    r.step();
    assert_eq!(r.vol.record(attr.ino).unwrap().placement, crate::tier::Placement::On(Tier::Ssd));
    assert!(r.engine.ssd_used() >= 8192);
    // Hold the closing thread in its second fstat: the one that measures
    // the SSD bytes to settle (the first gives the size).
    let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = Arc::new(parking_lot::Mutex::new(go_rx));
    let seen = Arc::new(AtomicU64::new(0));
    r.ssd.set_gate(Some(Arc::new(move |op, _| {
        if op == "fstat" && std::thread::current().name() == Some("closer") && seen.fetch_add(1, Ordering::SeqCst) == 1
        {
            held_tx.send(()).unwrap();
            go_rx.lock().recv().unwrap();
        }
    })));
    let vol = r.vol.clone();
    let closer = std::thread::Builder::new().name("closer".into()).spawn(move || vol.release(o.fh)).unwrap();
    held_rx.recv_timeout(Duration::from_secs(5)).expect("the close reached its second fstat");
    r.vol.unlink(ROOT_INO, OsStr::new("f")).unwrap();
    go_tx.send(()).unwrap();
    within(5, "the close", move || closer.join().unwrap().unwrap());
    r.ssd.set_gate(None);
    r.step();
    assert_eq!(r.engine.ssd_used(), 0, "no charge is left for the removed file");
}

#[test]
fn a_file_whose_move_failed_rests_before_a_policy_moves_it_again() {
    // A promotion that fails because the SSD refuses one of the file's
    // extended attributes has copied the whole file first. The next read
    // planned it again at once, so every read of a hot file copied it
    // again, for nothing.
    use crate::store::features::Features;
    let r = rig(PolicyKind::DynamicHotDst);
    let f = file(&r.vol, "x", &[5u8; 8192]);
    r.vol.setxattr_stored(f, OsStr::new("user.note"), b"kept", 0).unwrap();
    r.ssd.set_features(Features { user_xattrs: false, ..Features::ALL });
    r.step();
    let promote = Step { ino: f, mv: Move::Promote, reason: Reason::Pinned, size: 8192 };
    let queued = |r: &Rig| r.engine.moves.lock().items.iter().any(|s| s.ino == f);
    let take = |r: &Rig| {
        let mut q = r.engine.moves.lock();
        q.items.retain(|s| s.ino != f);
        q.busy.remove(&f);
    };
    assert_ne!(
        r.engine.execute(promote, &crate::migrate::NoCrash, false),
        super::Ran::Done,
        "the SSD refuses user.note"
    );
    assert_eq!(r.engine.counters.failed.load(Ordering::Relaxed), 1);
    assert_eq!(r.vol.record(f).unwrap().placement, crate::tier::Placement::On(Tier::Hdd));
    // Read while it rests: planned by nobody.
    read_all(&r.vol, f);
    r.step();
    assert!(!queued(&r), "planned again at once after a failed move");
    assert!(
        r.engine.notes.lock()[&f].contains("the policies pass it over for 30s"),
        "{:?}",
        r.engine.notes.lock().get(&f)
    );
    r.clock.advance(MOVE_RETRY - Duration::from_secs(1));
    read_all(&r.vol, f);
    r.step();
    assert!(!queued(&r), "planned again before its rest ended");
    // After the rest the policy plans it again, as any hot file.
    r.clock.advance(Duration::from_secs(2));
    read_all(&r.vol, f);
    r.step();
    assert!(queued(&r), "a read after the rest plans the promotion again");
    take(&r);
    // A second failure in a row: twice the rest.
    assert_ne!(r.engine.execute(promote, &crate::migrate::NoCrash, false), super::Ran::Done);
    assert_eq!(move_retry(2), 2 * MOVE_RETRY);
    r.clock.advance(2 * MOVE_RETRY - Duration::from_secs(1));
    assert!(r.engine.move_failed_lately(f), "rests twice as long after its second failure");
    r.clock.advance(Duration::from_secs(2));
    assert!(!r.engine.move_failed_lately(f));
    // Once the SSD can hold the attribute the move succeeds and the
    // failures are forgotten.
    r.ssd.set_features(Features::ALL);
    assert_eq!(r.engine.execute(promote, &crate::migrate::NoCrash, false), super::Ran::Done);
    assert_eq!(r.vol.record(f).unwrap().placement, crate::tier::Placement::On(Tier::Ssd));
    assert_eq!(r.vol.getxattr_stored(f, OsStr::new("user.note")).unwrap(), b"kept");
    assert!(r.engine.failed_moves.lock().is_empty());
}

#[test]
fn the_rest_after_failed_moves_doubles_up_to_an_hour() {
    assert_eq!(move_retry(1), MOVE_RETRY);
    assert_eq!(move_retry(3), 4 * MOVE_RETRY);
    assert_eq!(move_retry(8), MOVE_RETRY_MAX);
    assert_eq!(move_retry(u32::MAX), MOVE_RETRY_MAX);
}

#[test]
fn a_rest_longer_than_it_was_set_for_ends_when_the_clock_steps_back() {
    let r = rig(PolicyKind::DynamicHotDst);
    let f = file(&r.vol, "x", &[5u8; 8192]);
    r.engine.move_failed(f);
    assert!(r.engine.move_failed_lately(f));
    // The wall clock set back ten minutes: the rest would last ten
    // minutes more than it was set for.
    r.clock.set(Timestamp::from_secs(1_000 - 600));
    assert!(!r.engine.move_failed_lately(f), "a rest of 30 s with 630 s to go is over");
}

#[test]
fn a_move_obstructed_on_the_target_tier_rests_like_a_failed_one() {
    // The obstruction is found after the whole copy and lasts until
    // someone clears the name: planned again at once, the file was copied
    // again at every plan.
    let r = rig(PolicyKind::DynamicHotDst);
    let f = file(&r.vol, "x", &[5u8; 8192]);
    r.step();
    // Something that is not the file has its name on the SSD: a
    // directory with an entry.
    let root = r.ssd.root().unwrap();
    r.ssd.mkdir(&root, OsStr::new("x"), 0o755).unwrap();
    let d = r.ssd.open_dir(&root, OsStr::new("x")).unwrap();
    r.ssd.open(&d, OsStr::new("inside"), libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    let promote = Step { ino: f, mv: Move::Promote, reason: Reason::Pinned, size: 8192 };
    assert_ne!(r.engine.execute(promote, &crate::migrate::NoCrash, false), super::Ran::Done);
    assert_eq!(r.vol.record(f).unwrap().placement, crate::tier::Placement::On(Tier::Hdd));
    assert!(r.engine.move_failed_lately(f), "an obstructed move rests");
    assert!(r.engine.notes.lock()[&f].contains("the policies pass it over for 30s"));
    read_all(&r.vol, f);
    r.step();
    assert!(!r.engine.moves.lock().items.iter().any(|s| s.ino == f), "planned again at once");
}

/// A background move the busy gate holds in the queue gives way to a pin
/// planned meanwhile, and is never carried out against a pin set after it
/// was planned.
#[test]
fn a_pin_takes_the_place_of_a_queued_move_and_a_queued_move_never_goes_against_a_pin() {
    let r = rig(PolicyKind::DynamicHotDst);
    let f = file(&r.vol, "f", &[1u8; 4096]);
    r.step();
    let hot = Step { ino: f, mv: Move::Promote, reason: Reason::HotOnRead { counter: 3, threshold: 2 }, size: 4096 };
    r.engine.enqueue(Plan { steps: vec![hot], skipped: vec![] });
    let pin = Step { reason: Reason::Pinned, ..hot };
    r.engine.enqueue(Plan { steps: vec![pin], skipped: vec![] });
    let queued: Vec<Step> = r.engine.moves.lock().items.iter().copied().filter(|s| s.ino == f).collect();
    assert_eq!(queued, vec![pin], "the pin took the queued move's place");
    let demote = Step { mv: Move::Demote, ..hot };
    assert!(!r.engine.against_pin(&hot) && !r.engine.against_pin(&demote), "no pin");
    r.engine.groups.lock().set_file_pin(f, Some(Tier::Hdd));
    assert!(r.engine.against_pin(&hot), "a promotion of a file pinned to the HDD");
    assert!(!r.engine.against_pin(&demote));
    r.engine.groups.lock().set_file_pin(f, Some(Tier::Ssd));
    assert!(r.engine.against_pin(&demote), "a demotion of a file pinned to the SSD");
    assert!(!r.engine.against_pin(&hot));
}

/// A directory `name` in the root owned by `uid`.
fn dir_of(r: &Rig, name: &str, uid: u32) -> Ino {
    let d = r.vol.mkdir(&CTX, ROOT_INO, OsStr::new(name), 0o755, 0).unwrap().ino;
    r.vol.setattr(d, None, &crate::vfs::SetAttr { uid: Some(uid), ..Default::default() }).unwrap();
    d
}

#[test]
fn only_root_may_give_a_directory_a_write_back_area_above_a_tenth_of_the_ssd() {
    // Any directory owner could give a directory an area of the whole SSD
    // (or write-back-cache's half, by its policy alone), on as many
    // directories as they liked, and push every other user's files off.
    let r = rig(PolicyKind::DynamicHotDst);
    let user = Ctx { uid: 1000, gid: 1000, pid: 1 };
    let d = dir_of(&r, "mine", 1000);
    let set =
        |ctx: &Ctx, d: Ino, key: &str, v: &[u8]| r.engine.xattr_change(ctx, d, OsStr::new(key), Some(v), 0).unwrap();
    let e = set(&user, d, "user.tierfs.write-back", b"100").unwrap_err();
    assert!(e.is(libc::EPERM), "{e}");
    let e = set(&user, d, "user.tierfs.policy", b"write-back-cache").unwrap_err();
    assert!(e.is(libc::EPERM), "write-back-cache's own share is half the SSD: {e}");
    set(&user, d, "user.tierfs.write-back", b"10").unwrap();
    set(&user, d, "user.tierfs.policy", b"write-back-cache").unwrap();
    set(&CTX, d, "user.tierfs.write-back", b"60").unwrap();
    // Below a root's area, a user's new group would inherit its share.
    let sub = r.vol.mkdir(&CTX, d, OsStr::new("sub"), 0o755, 0).unwrap().ino;
    r.vol.setattr(sub, None, &crate::vfs::SetAttr { uid: Some(1000), ..Default::default() }).unwrap();
    r.step();
    let e = set(&user, sub, "user.tierfs.sieve", b"2M").unwrap_err();
    assert!(e.is(libc::EPERM), "{e}");
    set(&user, sub, "user.tierfs.write-back", b"5").unwrap();
}

#[test]
fn the_write_back_areas_together_take_at_most_half_the_ssd() {
    let r =
        rig_with(EngineConfig { policy: PolicyKind::HddOnly, ssd_capacity: Some(1 << 20), ..EngineConfig::default() });
    let mut groups = Vec::new();
    for i in 0..4 {
        let d = dir_of(&r, &format!("d{i}"), 0);
        r.engine.xattr_change(&CTX, d, OsStr::new("user.tierfs.write-back"), Some(b"40"), 0).unwrap().unwrap();
        r.step();
        groups.push(r.engine.group_of(d));
    }
    for &g in &groups {
        assert!(r.engine.wb_reserve(g, 4096), "group {g}: quota {}", r.engine.wb_quota(g));
        r.engine.wb.lock().areas.get_mut(&g).unwrap().cancel(4096);
    }
    r.engine.scrub_round(false);
    let total: u64 = groups.iter().map(|&g| r.engine.wb_quota(g)).sum();
    assert!(total <= 512 << 10, "four areas of 40 % take {total} bytes of a 1 MiB SSD");
    assert_eq!(r.engine.wb_report().quota_bytes, total);
}

#[test]
fn the_cleaner_frees_clean_chunks_of_the_write_back_areas_for_room() {
    // Clean chunks (written back, their bytes on the HDD too) were freed
    // only by their own area's plan: the cleaner, asked for room, found no
    // SSD file to evict and gave up while they filled the SSD.
    let (r, ino, fh) = write_back_rig(50);
    let chunk = vec![9u8; K64 as usize];
    for i in 0..6 {
        r.vol.write(fh, i * K64, &chunk).unwrap();
    }
    r.clock.advance(crate::extent::writeback::IDLE);
    r.engine.scrub_round(false);
    let info = r.vol.split_info(ino).unwrap();
    assert_eq!((info.chunks, info.dirty), (6, 0), "six clean chunks");
    let freed = r.engine.evict(4 * K64, 0, &HashSet::new());
    assert!(freed >= 4 * K64, "freed {freed} bytes");
    assert_eq!(r.vol.split_info(ino).map_or(0, |i| i.chunks), 2, "the oldest went");
    r.vol.release(fh).unwrap();
}
