//! The engine over in-memory tiers, with a manual clock and a watchdog
//! around every step that once hung.

use super::*;
use crate::clock::ManualClock;
use crate::state::ns::{Namespace, ROOT_INO};
use crate::state::MemKv;
use crate::store::mem::MemStore;
use crate::vfs::VolumeConfig;

const CTX: Ctx = Ctx { uid: 0, gid: 0, pid: 1 };

struct Rig {
    vol: Arc<Volume<MemStore>>,
    engine: Arc<Engine<MemStore>>,
    clock: ManualClock,
    rx: Receiver<Event>,
}

fn rig(policy: PolicyKind) -> Rig {
    let kv = Arc::new(MemKv::new());
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let (sink, rx) = queue();
    let vol = Arc::new(
        Volume::new(
            MemStore::new(),
            MemStore::new(),
            Namespace::new(kv.clone()),
            VolumeConfig::default(),
            sink.clone(),
            Arc::new(clock.clone()),
        )
        .unwrap(),
    );
    let cfg = EngineConfig { policy, ..EngineConfig::default() };
    let engine = Engine::new(vol.clone(), kv, Arc::new(clock.clone()), cfg, Some(sink));
    Rig { vol, engine, clock, rx }
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

/// Runs `f` on another thread and fails if it does not return in time.
fn within(secs: u64, what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(secs)).unwrap_or_else(|_| panic!("{what} hung for {secs} s"));
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
    assert!(r.engine.stats.lock().get(attr.ino).is_some());
}
