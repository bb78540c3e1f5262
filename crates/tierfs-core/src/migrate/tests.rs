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
