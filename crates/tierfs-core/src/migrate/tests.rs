//! Crash simulation of the migration protocol: for every step, a crash
//! there (keeping only what was made durable, on both stores and the state
//! database), then recovery at the next mount, must leave every file
//! exactly once with its full content on one tier, and for a cached file
//! its HDD copy complete.

use super::*;
use crate::clock::{ManualClock, Timestamp};
use crate::event::NoEvents;
use crate::state::ns::{Namespace, ROOT_INO};
use crate::state::MemKv;
use crate::store::mem::MemStore;
use crate::store::FileKind;
use crate::vfs::{Ctx, Volume, VolumeConfig};
use std::ffi::OsStr;
use std::sync::Arc;

struct Rig {
    ssd: MemStore,
    hdd: MemStore,
    kv: MemKv,
}

impl Rig {
    fn new() -> Self {
        Rig { ssd: MemStore::new(), hdd: MemStore::new(), kv: MemKv::new() }
    }
    fn mount(&self) -> Volume<MemStore> {
        let v = Volume::new(
            self.ssd.clone(),
            self.hdd.clone(),
            Namespace::new(Arc::new(self.kv.clone())),
            VolumeConfig::default(),
            Arc::new(NoEvents),
            Arc::new(ManualClock::new(Timestamp::from_secs(1))),
        )
        .unwrap();
        v.recover().unwrap();
        v
    }
    fn crash(&self) {
        self.ssd.crash();
        self.hdd.crash();
        self.kv.crash();
    }
}

const CTX: Ctx = Ctx { uid: 0, gid: 0, pid: 1 };

fn content(tag: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| tag.wrapping_add((i % 251) as u8)).collect()
}

fn lookup(v: &Volume<MemStore>, path: &str) -> Ino {
    let mut ino = ROOT_INO;
    for c in path.split('/') {
        ino = v.lookup(ino, OsStr::new(c)).unwrap_or_else(|e| panic!("lookup {path}: {e}")).ino;
    }
    ino
}

fn read_all(v: &Volume<MemStore>, ino: Ino) -> Vec<u8> {
    let o = v.open(ino, libc::O_RDONLY).unwrap();
    let d = v.read(o.fh, 0, 1 << 22).unwrap();
    v.release(o.fh).unwrap();
    d
}

/// The files of the scenario: path, content, and what to do to it.
struct Scenario {
    files: Vec<(&'static str, Vec<u8>)>,
}

/// Builds the tree, with every file and directory durable.
fn setup(rig: &Rig) -> Scenario {
    let v = rig.mount();
    let d = v.mkdir(&CTX, ROOT_INO, OsStr::new("d"), 0o755, 0).unwrap().ino;
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("d/one", content(1, 10_000)),
        ("two", content(2, 70_000)),
        ("on-ssd", content(3, 5_000)),
        ("cached", content(4, 3_000)),
    ];
    for (path, data) in &files {
        let (parent, name) = match path.split_once('/') {
            Some((_, n)) => (d, n),
            None => (ROOT_INO, *path),
        };
        let (_, o) = v.create(&CTX, parent, OsStr::new(name), 0o640, 0, libc::O_RDWR).unwrap();
        v.write(o.fh, 0, data).unwrap();
        v.fsync(o.fh, false).unwrap();
        v.release(o.fh).unwrap();
    }
    // A second name for "two", in another directory.
    let two = lookup(&v, "two");
    v.link(two, d, OsStr::new("two-link")).unwrap();
    assert_eq!(v.migrate(lookup(&v, "on-ssd"), Move::Promote, &NoCrash).unwrap(), Outcome::Done(5_000));
    assert!(matches!(v.migrate(lookup(&v, "cached"), Move::Copy, &NoCrash).unwrap(), Outcome::Done(_)));
    for dir in [ROOT_INO, d] {
        v.fsyncdir(dir).unwrap();
    }
    v.sync_state().unwrap();
    // A clean unmount.
    v.mark_clean().unwrap();
    let mut files = files;
    files.push(("d/two-link", content(2, 70_000)));
    Scenario { files }
}

/// Every invariant a recovered volume must hold.
fn check(rig: &Rig, sc: &Scenario, what: &str) {
    let v = rig.mount();
    for (path, data) in &sc.files {
        let ino = lookup(&v, path);
        assert_eq!(&read_all(&v, ino), data, "{what}: content of {path}");
        let rec = v.record(ino).unwrap();
        assert_eq!(rec.kind, FileKind::File);
        // The file is on exactly the tiers its placement names.
        let (p, n) = (path.rsplit_once('/').map(|x| x.0), path.rsplit('/').next().unwrap());
        let parent = p.map(|p| lookup(&v, p)).unwrap_or(ROOT_INO);
        for t in Tier::ALL {
            let here = v.stat_on(parent, OsStr::new(n), t).is_ok();
            assert_eq!(
                here,
                rec.placement.tiers().contains(&t),
                "{what}: {path} on {t} with placement {:?}",
                rec.placement
            );
        }
        if rec.placement == Placement::Cached {
            assert_eq!(
                v.stat_on(parent, OsStr::new(n), Tier::Ssd).unwrap().size as usize,
                data.len(),
                "{what}: copy of {path}"
            );
        }
    }
    // Hard links still share one inode, on one tier.
    assert_eq!(lookup(&v, "two"), lookup(&v, "d/two-link"), "{what}");
    assert!(v.ns.journal().unwrap().is_empty(), "{what}: journal empty after recovery");
    // No stray temporary files.
    for (store, t) in [(&rig.ssd, "ssd"), (&rig.hdd, "hdd")] {
        let strays: Vec<_> = store
            .dump()
            .into_iter()
            .filter(|(p, k, _)| p.starts_with("/.tierfs/staging/") && *k == FileKind::File)
            .collect();
        assert!(strays.is_empty(), "{what}: strays on {t}: {strays:?}");
    }
}

#[test]
fn every_crash_point_of_every_migration_recovers() {
    let cases: [(&str, Move); 5] = [
        ("d/one", Move::Promote),
        ("two", Move::Promote),
        ("on-ssd", Move::Demote),
        ("d/one", Move::Copy),
        ("cached", Move::DropCopy),
    ];
    for (path, mv) in cases {
        for step in Step::ALL {
            let rig = Rig::new();
            let sc = setup(&rig);
            let what = format!("{mv:?} {path}, crash at {}", step.name());
            {
                let v = rig.mount();
                let ino = lookup(&v, path);
                match v.migrate(ino, mv, &CrashAt(step)) {
                    Err(Error::SimulatedCrash(s)) => assert_eq!(s, step.name()),
                    Ok(Outcome::Done(_)) => {
                        // This migration has no such step (DropCopy copies nothing).
                        assert!(
                            mv == Move::DropCopy
                                && matches!(
                                    step,
                                    Step::Copied
                                        | Step::Verified
                                        | Step::Synced
                                        | Step::Journaled
                                        | Step::Linked
                                        | Step::DirSynced
                                ),
                            "{what}"
                        );
                    }
                    other => panic!("{what}: {other:?}"),
                }
            }
            rig.crash();
            check(&rig, &sc, &what);
        }
    }
}

#[test]
fn a_finished_migration_survives_a_crash_right_after() {
    let rig = Rig::new();
    let sc = setup(&rig);
    {
        let v = rig.mount();
        let ino = lookup(&v, "two");
        assert!(matches!(v.migrate(ino, Move::Promote, &NoCrash).unwrap(), Outcome::Done(_)));
    }
    rig.crash();
    check(&rig, &sc, "after a complete promotion");
    let v = rig.mount();
    assert_eq!(v.record(lookup(&v, "two")).unwrap().placement, Placement::On(Tier::Ssd), "the move is durable");
}

#[test]
fn an_unclean_shutdown_drops_cached_copies_and_keeps_the_hdd_copy() {
    let rig = Rig::new();
    let sc = setup(&rig);
    // Mounted, then a crash instead of an unmount.
    drop(rig.mount());
    rig.crash();
    let v = rig.mount();
    assert_eq!(v.record(lookup(&v, "cached")).unwrap().placement, Placement::On(Tier::Hdd));
    drop(v);
    check(&rig, &sc, "unclean shutdown");
}

#[test]
fn a_source_that_changes_while_copying_is_copied_again() {
    // A control that writes to the file when the copy is done (once).
    struct Meddle<'a> {
        v: &'a Volume<MemStore>,
        ino: Ino,
        done: std::sync::atomic::AtomicBool,
    }
    impl Control for Meddle<'_> {
        fn at(&self, step: Step) -> crate::Result<()> {
            if step == Step::Copied && !self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
                let o = self.v.open(self.ino, libc::O_WRONLY).unwrap();
                self.v.write(o.fh, 0, b"NEW").unwrap();
                self.v.release(o.fh).unwrap();
            }
            Ok(())
        }
    }
    let rig = Rig::new();
    setup(&rig);
    let v = rig.mount();
    let ino = lookup(&v, "d/one");
    let m = Meddle { v: &v, ino, done: false.into() };
    assert!(matches!(v.migrate(ino, Move::Promote, &m).unwrap(), Outcome::Done(_)));
    assert_eq!(&read_all(&v, ino)[..3], b"NEW", "the write made during the copy is not lost");
    assert_eq!(v.record(ino).unwrap().placement, Placement::On(Tier::Ssd));
}

#[test]
fn open_handles_follow_the_file_to_its_new_tier() {
    let rig = Rig::new();
    setup(&rig);
    let v = rig.mount();
    let ino = lookup(&v, "d/one");
    let o = v.open(ino, libc::O_RDWR).unwrap();
    v.write(o.fh, 0, b"before").unwrap();
    assert!(matches!(v.migrate(ino, Move::Promote, &NoCrash).unwrap(), Outcome::Done(_)));
    v.write(o.fh, 6, b"-after").unwrap();
    assert_eq!(&v.read(o.fh, 0, 12).unwrap(), b"before-after");
    v.release(o.fh).unwrap();
    // The data is on the SSD copy, nothing is left on the HDD.
    assert!(v.stat_on(lookup(&v, "d"), OsStr::new("one"), Tier::Hdd).is_err());
    assert_eq!(&read_all(&v, ino)[..12], b"before-after");
}

#[test]
fn the_ctime_does_not_move_with_the_file() {
    let rig = Rig::new();
    setup(&rig);
    let v = rig.mount();
    let ino = lookup(&v, "d/one");
    let before = v.getattr(ino).unwrap();
    assert!(matches!(v.migrate(ino, Move::Promote, &NoCrash).unwrap(), Outcome::Done(_)));
    let after = v.getattr(ino).unwrap();
    assert_eq!(
        (before.ctime, before.mtime, before.ino, before.size),
        (after.ctime, after.mtime, after.ino, after.size)
    );
    // A later change moves it again.
    v.setattr(ino, None, &crate::vfs::SetAttr { mode: Some(0o600), ..Default::default() }).unwrap();
    assert!(v.getattr(ino).unwrap().ctime > before.ctime);
}

/// A control that appends `chunk` to the file at every paced copy step, up
/// to `times` times: a log written to while it migrates.
struct Appender<'a> {
    v: &'a Volume<MemStore>,
    ino: Ino,
    chunk: Vec<u8>,
    times: std::sync::atomic::AtomicUsize,
    written: parking_lot::Mutex<Vec<u8>>,
}

impl Control for Appender<'_> {
    fn pace(&self, _bytes: u64) {
        let left = self.times.load(std::sync::atomic::Ordering::SeqCst);
        if left == 0 {
            return;
        }
        self.times.store(left - 1, std::sync::atomic::Ordering::SeqCst);
        let o = self.v.open(self.ino, libc::O_WRONLY | libc::O_APPEND).unwrap();
        self.v.write(o.fh, 0, &self.chunk).unwrap();
        self.v.release(o.fh).unwrap();
        self.written.lock().extend_from_slice(&self.chunk);
    }
}

fn appender<'a>(v: &'a Volume<MemStore>, ino: Ino, times: usize) -> Appender<'a> {
    Appender { v, ino, chunk: content(9, 4096), times: times.into(), written: Default::default() }
}

#[test]
fn a_log_appended_to_while_it_moves_is_not_stuck_on_its_tier() {
    // Before, every append made the copy start again, so a file written
    // all the time could never move (a web server's log stayed on a full
    // SSD). Now only the new tail is copied. 3 appends are caught up before
    // the switch-over; 20 outlast the catch-ups, and the switch-over copies
    // the rest with writes held.
    for (path, mv, times) in [
        ("d/one", Move::Promote, 3),
        ("d/one", Move::Promote, 20),
        ("on-ssd", Move::Demote, 20),
        ("two", Move::Copy, 20),
    ] {
        let rig = Rig::new();
        setup(&rig);
        let v = rig.mount();
        let ino = lookup(&v, path);
        let before = read_all(&v, ino);
        let a = appender(&v, ino, times);
        let out = v.migrate(ino, mv, &a).unwrap();
        let mut want = before;
        want.extend_from_slice(&a.written.lock());
        // With more appends than catch-ups, the migration ends while the
        // writer could go on: the catch-up loop is bounded.
        let left = a.times.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(left == 0, times <= CATCH_UPS as usize, "{path}: {left} appends left");
        assert_eq!(out, Outcome::Done(want.len() as u64), "{path} {mv:?} with {times} appends");
        assert_eq!(read_all(&v, ino), want, "{path}: no appended byte lost");
        let (parent, name) = match path.rsplit_once('/') {
            Some((d, n)) => (lookup(&v, d), n),
            None => (ROOT_INO, path),
        };
        let on = |t| v.stat_on(parent, OsStr::new(name), t).map(|s| s.size);
        match mv {
            Move::Promote => assert_eq!((on(Tier::Ssd).ok(), on(Tier::Hdd).ok()), (Some(want.len() as u64), None)),
            Move::Demote => assert_eq!((on(Tier::Hdd).ok(), on(Tier::Ssd).ok()), (Some(want.len() as u64), None)),
            _ => {
                assert_eq!(v.record(ino).unwrap().placement, Placement::Cached);
                assert_eq!(on(Tier::Ssd).unwrap(), want.len() as u64, "the cached copy has the tail");
            }
        }
        if mv == Move::Copy {
            // The appends to the HDD copy were never fsynced.
            continue;
        }
        // A moved file is durable where it now lives, tail included.
        drop(v);
        rig.crash();
        let v = rig.mount();
        assert_eq!(read_all(&v, ino).len(), want.len(), "{path}: the copied tail was synced");
    }
}

#[test]
fn a_write_before_the_end_during_a_catch_up_copies_again() {
    // Appends, then an overwrite at offset 0 while the tail is copied: the
    // catch-up must not take the file for one that only grew.
    struct Both<'a>(Appender<'a>, std::sync::atomic::AtomicBool);
    impl Control for Both<'_> {
        fn pace(&self, b: u64) {
            self.0.pace(b);
            if self.0.times.load(std::sync::atomic::Ordering::SeqCst) == 0
                && !self.1.swap(true, std::sync::atomic::Ordering::SeqCst)
            {
                let o = self.0.v.open(self.0.ino, libc::O_WRONLY).unwrap();
                self.0.v.write(o.fh, 0, b"OVER").unwrap();
                self.0.v.release(o.fh).unwrap();
            }
        }
    }
    let rig = Rig::new();
    setup(&rig);
    let v = rig.mount();
    let ino = lookup(&v, "d/one");
    let mut want = read_all(&v, ino);
    let b = Both(appender(&v, ino, 2), false.into());
    assert!(matches!(v.migrate(ino, Move::Promote, &b).unwrap(), Outcome::Done(_)));
    want.extend_from_slice(&b.0.written.lock());
    want[..4].copy_from_slice(b"OVER");
    assert_eq!(read_all(&v, ino), want);
}

/// Stops a migration at one step until the test lets it go on.
struct PauseAt {
    step: Step,
    paused: std::sync::mpsc::SyncSender<()>,
    resume: parking_lot::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl Control for PauseAt {
    fn at(&self, step: Step) -> crate::Result<()> {
        if step == self.step {
            let _ = self.paused.send(());
            let _ = self.resume.lock().recv_timeout(std::time::Duration::from_secs(10));
        }
        Ok(())
    }
}

#[test]
fn a_second_migration_of_the_same_file_does_not_delete_the_first_ones_copy() {
    // Issue 16: an fsynced file vanished from both tiers. A write that found
    // no SSD room demoted its own file in the request thread while the
    // migrator demoted the same file. Both staged their copy under the name
    // INO.0, so the second one's start unlinked the first one's staging name;
    // the first switch-over then linked the second one's copy and committed.
    // Between that commit and the removal of the source, the second
    // migration's checks still passed: its switch-over deleted the committed
    // copy as a stray and failed to link its own, whose staging name was gone.
    // Then the source was removed. Reproduced here step by step: A stops after
    // its copy is synced, B runs and is held just before it removes the
    // source, then A goes on.
    let rig = Rig::new();
    let sc = setup(&rig);
    let v = Arc::new(rig.mount());
    let ino = lookup(&v, "on-ssd");
    let (a_paused_tx, a_paused) = std::sync::mpsc::sync_channel(1);
    let (a_resume, a_resume_rx) = std::sync::mpsc::sync_channel(1);
    let va = v.clone();
    let a = std::thread::spawn(move || {
        let ctl = PauseAt { step: Step::Synced, paused: a_paused_tx, resume: parking_lot::Mutex::new(a_resume_rx) };
        va.migrate(ino, Move::Demote, &ctl)
    });
    a_paused.recv_timeout(std::time::Duration::from_secs(5)).expect("A reaches its switch-over");
    // Hold B where it removes the source, after its switch-over.
    let (held_tx, held) = std::sync::mpsc::sync_channel(1);
    let (release, release_rx) = std::sync::mpsc::sync_channel::<()>(1);
    let release_rx = Arc::new(parking_lot::Mutex::new(release_rx));
    rig.ssd.set_gate(Some(Arc::new(move |op, name| {
        if op == "unlink" && name == "on-ssd" && std::thread::current().name() == Some("second") {
            let _ = held_tx.try_send(());
            let _ = release_rx.lock().recv_timeout(std::time::Duration::from_secs(10));
        }
    })));
    let vb = v.clone();
    let b = std::thread::Builder::new()
        .name("second".into())
        .spawn(move || vb.migrate(ino, Move::Demote, &NoCrash))
        .unwrap();
    let b_held = held.recv_timeout(std::time::Duration::from_secs(2)).is_ok();
    a_resume.send(()).unwrap();
    let ra = a.join().unwrap();
    let _ = release.send(());
    let rb = b.join().unwrap();
    rig.ssd.set_gate(None);
    // At most one of them moved the file; the other did nothing.
    let done = [&ra, &rb].iter().filter(|r| matches!(r, Ok(Outcome::Done(_)))).count();
    assert_eq!(done, 1, "A: {ra:?}, B: {rb:?} (B held in its source removal: {b_held})");
    assert_eq!(read_all(&v, ino), content(3, 5_000), "the file is intact");
    drop(v);
    rig.crash();
    check(&rig, &sc, "two migrations of one file, then a crash");
}
