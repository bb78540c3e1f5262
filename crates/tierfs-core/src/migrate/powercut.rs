//! Power cuts, beyond the crash at each step of each migration (in
//! `tests`): only what was made durable survives (`MemStore::crash`,
//! `MemKv::crash`). A cut in the middle of a store call is made by killing
//! the thread that makes it (a test gate panics there), then cutting.
//!
//! - the whole life of a cached file (its copy made, written through,
//!   dropped) with a cut at every point of it;
//! - a cut while recovery itself runs, then recovery again;
//! - the protocol under the state database's own durability: a child process runs each
//!   migration over real directories and a real state database and aborts
//!   at each step, flushing nothing; the parent recovers and checks.

use super::tests::{build, check, content, lookup, read_all, verify, Rig, CASES, CTX};
use super::*;
use crate::state::ns::ROOT_INO;
use std::ffi::OsStr;
use std::sync::Arc;

/// Where the life of a cached file is cut.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// At a step of making the copy.
    Copy(Step),
    /// A write-through reached the HDD primary, not the copy.
    BetweenCopies,
    /// The write-through reached both copies, not fsynced.
    BeforeSync,
    /// After the write-through and its fsync.
    AfterSync,
    /// At a step of dropping the copy.
    Drop(Step),
}

/// What a cut file must hold: the last content made durable.
const NEW: &[u8] = b"NEW DATA";

/// Runs a thread named "cut" and waits for it; a panic in it (a gate that
/// kills it) is the cut.
fn run_until_cut<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    std::thread::Builder::new().name("cut".into()).spawn(f).unwrap().join().ok()
}

#[test]
fn the_life_of_a_cached_file_survives_a_cut_at_every_point() {
    let mut cuts: Vec<Cut> = Step::ALL.iter().map(|s| Cut::Copy(*s)).collect();
    cuts.extend([Cut::BetweenCopies, Cut::BeforeSync, Cut::AfterSync]);
    cuts.extend(Step::ALL.iter().map(|s| Cut::Drop(*s)));
    for cut in cuts {
        let rig = Rig::new();
        let mut sc = build(&rig.mount());
        let what = format!("cut {cut:?}");
        let v = Arc::new(rig.mount());
        let ino = lookup(&v, "d/one");
        let mut durable = content(1, 10_000);
        // 1. The copy is made.
        let step = match cut {
            Cut::Copy(s) => Some(s),
            _ => None,
        };
        match v.migrate(ino, Move::Copy, &CrashAt(step.unwrap_or(Step::Done))) {
            Err(Error::SimulatedCrash(_)) if step.is_some() => {}
            Err(Error::SimulatedCrash(_)) => {} // Done, the copy is whole
            other => panic!("{what}: {other:?}"),
        }
        if step.is_none() {
            // 2. A write-through, cut between the two copies or not.
            if matches!(cut, Cut::BetweenCopies) {
                rig.ssd.set_gate(Some(Arc::new(|op, _| {
                    if op == "write" && std::thread::current().name() == Some("cut") {
                        panic!("power cut");
                    }
                })));
            }
            let vw = v.clone();
            let sync = matches!(cut, Cut::AfterSync | Cut::Drop(_));
            let done = run_until_cut(move || {
                let o = vw.open(ino, libc::O_RDWR).unwrap();
                vw.write(o.fh, 0, NEW).unwrap();
                if sync {
                    vw.fsync(o.fh, false).unwrap();
                }
                vw.release(o.fh).unwrap();
            });
            rig.ssd.set_gate(None);
            assert_eq!(done.is_some(), !matches!(cut, Cut::BetweenCopies), "{what}");
            if sync {
                durable[..NEW.len()].copy_from_slice(NEW);
            }
            // 3. The copy is dropped.
            if let Cut::Drop(s) = cut {
                match v.migrate(ino, Move::DropCopy, &CrashAt(s)) {
                    Err(Error::SimulatedCrash(_)) | Ok(Outcome::Done(_)) => {}
                    other => panic!("{what}: {other:?}"),
                }
            }
        }
        drop(v);
        rig.crash();
        sc.files[0].1 = durable;
        check(&rig, &sc, &what);
        // After an unclean shutdown no copy is trusted: it is on the HDD.
        let v = rig.mount();
        assert_eq!(v.record(ino).unwrap().placement, Placement::On(Tier::Hdd), "{what}");
    }
}

#[test]
fn a_cut_while_recovery_runs_is_recovered_at_the_next_mount() {
    for (path, mv) in [("d/one", Move::Promote), ("on-ssd", Move::Demote), ("cached", Move::DropCopy)] {
        for step in [Step::Journaled, Step::Linked, Step::DirSynced, Step::Committed, Step::SourceRemoved] {
            let rig = Rig::new();
            let sc = build(&rig.mount());
            let what = format!("{mv:?} {path} cut at {}, then cut in recovery", step.name());
            {
                let v = rig.mount();
                let _ = v.migrate(lookup(&v, path), mv, &CrashAt(step));
            }
            rig.crash();
            // Recovery starts and is cut at its first unlink.
            for s in [&rig.ssd, &rig.hdd] {
                s.set_gate(Some(Arc::new(|op, _| {
                    if op == "unlink" && std::thread::current().name() == Some("cut") {
                        panic!("power cut during recovery");
                    }
                })));
            }
            let (ssd, hdd, kv) = (rig.ssd.clone(), rig.hdd.clone(), rig.kv.clone());
            let _ = run_until_cut(move || Rig { ssd, hdd, kv }.mount());
            for s in [&rig.ssd, &rig.hdd] {
                s.set_gate(None);
            }
            rig.crash();
            check(&rig, &sc, &what);
        }
    }
}

/// The scenario's volume over real directories and a real state database (fjall) in
/// `dir` (created if needed).
fn real(dir: &std::path::Path) -> Volume<crate::store::dir::DirStore> {
    for d in ["ssd", "hdd", "state"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let kv = crate::state::FjallKv::open(&dir.join("state")).unwrap();
    let v = Volume::new(
        crate::store::dir::DirStore::new(dir.join("ssd")).unwrap(),
        crate::store::dir::DirStore::new(dir.join("hdd")).unwrap(),
        crate::state::ns::Namespace::new(Arc::new(kv)),
        crate::vfs::VolumeConfig::default(),
        Arc::new(crate::event::NoEvents),
        Arc::new(crate::clock::SystemClock),
    )
    .unwrap();
    v.recover().unwrap();
    v
}

/// Aborts the process at one step: nothing is flushed or cleaned after it.
struct AbortAt(Step);

impl Control for AbortAt {
    fn at(&self, step: Step) -> Result<()> {
        if step == self.0 {
            std::process::abort();
        }
        Ok(())
    }
}

const STATE_CHILD: &str = "TIERFS_STATE_CRASH";

#[test]
fn every_crash_point_under_the_real_state_database_recovers() {
    let cases = CASES;
    if let Ok(spec) = std::env::var(STATE_CHILD) {
        // The child: one migration, aborted at one step.
        let mut it = spec.split('|');
        let (dir, case, step) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
        let (path, mv) = cases[case.parse::<usize>().unwrap()];
        let step = Step::ALL[step.parse::<usize>().unwrap()];
        let v = real(std::path::Path::new(dir));
        let _ = v.migrate(lookup(&v, path), mv, &AbortAt(step));
        // The step was not on this migration's way: a crash right after.
        std::process::abort();
    }
    for (case, (path, mv)) in cases.iter().enumerate() {
        for (si, step) in Step::ALL.iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            let sc = {
                let v = real(dir.path());
                build(&v)
            };
            let what = format!("{mv:?} {path}, process aborted at {} under the state database", step.name());
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "migrate::powercut::every_crash_point_under_the_real_state_database_recovers",
                    "--exact",
                    "--nocapture",
                ])
                .env(STATE_CHILD, format!("{}|{case}|{si}", dir.path().display()))
                .output()
                .unwrap();
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(
                out.status.signal(),
                Some(libc::SIGABRT),
                "{what}: the child must abort at the step\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let v = real(dir.path());
            verify(&v, &sc, &what);
            assert_eq!(read_all(&v, lookup(&v, "two")), content(2, 70_000), "{what}");
        }
    }
}

#[test]
fn a_cut_right_after_a_create_keeps_the_tree_consistent() {
    // A new file whose creation was not made durable (no fsync of its
    // directory) may be lost by a cut, but never half there: after
    // recovery it is either absent on both, or whole in the namespace and
    // on one tier.
    let rig = Rig::new();
    let sc = build(&rig.mount());
    {
        let v = rig.mount();
        let (_, o) = v.create(&CTX, ROOT_INO, OsStr::new("new"), 0o644, 0, libc::O_RDWR).unwrap();
        v.write(o.fh, 0, b"not synced").unwrap();
        v.release(o.fh).unwrap();
    }
    rig.crash();
    check(&rig, &sc, "cut after an unsynced create");
    let v = rig.mount();
    if let Ok(a) = v.lookup(ROOT_INO, OsStr::new("new")) {
        let rec = v.record(a.ino).unwrap();
        assert_eq!(rec.placement.tiers().len(), 1);
    }
}
