//! A split file against a plain byte array: random reads, writes,
//! truncates, hole punches, chunk moves, fsyncs, daemon crashes (the state
//! database loses what it did not flush; the files keep everything, as
//! the page cache does) and power cuts at every named step of a chunk move
//! (everything loses what was not synced).

use super::*;
use crate::error::Error;
use crate::state::{Kv, MemKv};
use crate::store::mem::{MemFile, MemStore};
use parking_lot::Mutex;
use proptest::prelude::*;
use std::ffi::OsStr;
use std::sync::Arc;

const C: u64 = 4096;
const CHUNK: ChunkSize = ChunkSize::MIN;
const INO: Ino = 9;

struct Rig {
    hdd: MemStore,
    ssd: MemStore,
    kv: MemKv,
    home: MemFile,
    shadow: MemFile,
    map: Mutex<ExtentMap>,
}

fn open(s: &MemStore, name: &str) -> MemFile {
    let root = s.root().unwrap();
    s.open(&root, OsStr::new(name), libc::O_RDWR | libc::O_CREAT, 0o644).unwrap()
}

impl Rig {
    fn new(initial: &[u8]) -> Rig {
        let (hdd, ssd, kv) = (MemStore::new(), MemStore::new(), MemKv::new());
        let home = open(&hdd, "f");
        hdd.write_at(&home, initial, 0).unwrap();
        hdd.fsync(&home, false).unwrap();
        hdd.sync_dir(&hdd.root().unwrap()).unwrap();
        let shadow = open(&ssd, "shadow");
        ssd.fsync(&shadow, false).unwrap();
        ssd.sync_dir(&ssd.root().unwrap()).unwrap();
        let map = Mutex::new(ExtentMap::load(Arc::new(kv.clone()), true).unwrap());
        Rig { hdd, ssd, kv, home, shadow, map }
    }

    /// Runs `f` on the split file and the map.
    fn with<R>(&mut self, f: impl FnOnce(&Split<'_, MemStore>, &Mutex<ExtentMap>) -> R) -> R {
        let s =
            Split { hdd: &self.hdd, home: &self.home, ssd: &self.ssd, shadow: &self.shadow, ino: INO, caller: None };
        f(&s, &self.map)
    }

    fn split(&self) -> Split<'_, MemStore> {
        Split { hdd: &self.hdd, home: &self.home, ssd: &self.ssd, shadow: &self.shadow, ino: INO, caller: None }
    }

    fn content(&self) -> Vec<u8> {
        let size = self.split().size().unwrap();
        let mut buf = vec![0xee; size as usize + 100];
        let (n, _) = self.split().read(&self.map, 0, &mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    /// The daemon dies: the files keep everything, the state database what
    /// it flushed; at the next start the map is loaded as after an unclean
    /// shutdown and recovery runs.
    fn daemon_crash(&mut self) {
        self.kv.crash();
        self.restart();
    }

    /// The power goes: everything keeps only what was synced.
    fn power_cut(&mut self) {
        self.hdd.crash();
        self.ssd.crash();
        self.kv.crash();
        self.home = open(&self.hdd, "f");
        self.shadow = open(&self.ssd, "shadow");
        self.restart();
    }

    /// A clean unmount and mount: states saved and flushed, believed.
    fn clean_restart(&mut self) {
        self.map.lock().save().unwrap();
        self.kv.flush().unwrap();
        self.map = Mutex::new(ExtentMap::load(Arc::new(self.kv.clone()), true).unwrap());
    }

    fn restart(&mut self) {
        self.map = Mutex::new(ExtentMap::load(Arc::new(self.kv.clone()), false).unwrap());
        let s =
            Split { hdd: &self.hdd, home: &self.home, ssd: &self.ssd, shadow: &self.shadow, ino: INO, caller: None };
        s.recover(&self.map).unwrap();
    }

    fn mover(&mut self, kind: u8, index: u64, crash: CrashHook<'_>) -> Result<()> {
        let s =
            Split { hdd: &self.hdd, home: &self.home, ssd: &self.ssd, shadow: &self.shadow, ino: INO, caller: None };
        let size = s.size()?;
        match kind {
            0 if index * C < size => s.add(&self.map, index, CHUNK, crash),
            0 => Ok(()),
            1 => s.write_back(&self.map, index, crash),
            2 => s.drop_chunk(&self.map, index, crash),
            // A scrub: the copy is read, then stored back while writers run.
            3 => match s.read_dirty(&self.map, index)? {
                Some(copy) => s.store_back(&self.map, copy, crash).map(drop),
                None => Ok(()),
            },
            _ => s.unsplit(&self.map, crash).map(drop),
        }
    }
}

fn never(_: &'static str) -> Result<()> {
    Ok(())
}

#[derive(Clone, Debug)]
enum Step {
    Write {
        off: u64,
        len: u64,
        byte: u8,
    },
    /// A write buffered in the write-back area.
    Buffer {
        off: u64,
        len: u64,
        byte: u8,
    },
    /// A scrub reads a dirty chunk, a write lands on it, the scrub stores
    /// its (older) copy back: the chunk must stay dirty.
    ScrubRace {
        index: u64,
        byte: u8,
    },
    /// An fsync, then a buffered write cut by a power cut at point `at`:
    /// every byte reads its old or its new value.
    BufferCut {
        off: u64,
        len: u64,
        byte: u8,
        at: usize,
    },
    Truncate(u64),
    Punch {
        off: u64,
        len: u64,
    },
    Move {
        kind: u8,
        index: u64,
    },
    Fsync,
    DaemonCrash,
    CleanRestart,
    /// An fsync, then a move cut by a power cut at point `at` (or after
    /// it, if the move never reaches that point).
    PowerCut {
        kind: u8,
        index: u64,
        at: usize,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u64..20 * C, 1u64..3 * C, any::<u8>()).prop_map(|(off, len, byte)| Step::Write { off, len, byte }),
        3 => (0u64..20 * C, 1u64..3 * C, any::<u8>()).prop_map(|(off, len, byte)| Step::Buffer { off, len, byte }),
        1 => (0u64..20, any::<u8>()).prop_map(|(index, byte)| Step::ScrubRace { index, byte }),
        1 => (0u64..20 * C, 1u64..3 * C, any::<u8>(), 0usize..points::ALL.len())
            .prop_map(|(off, len, byte, at)| Step::BufferCut { off, len, byte, at }),
        1 => (0u64..20 * C).prop_map(Step::Truncate),
        1 => (0u64..20 * C, 1u64..3 * C).prop_map(|(off, len)| Step::Punch { off, len }),
        5 => (0u8..5, 0u64..20).prop_map(|(kind, index)| Step::Move { kind, index }),
        1 => Just(Step::Fsync),
        1 => Just(Step::DaemonCrash),
        1 => Just(Step::CleanRestart),
        2 => (0u8..5, 0u64..20, 0usize..points::ALL.len()).prop_map(|(kind, index, at)| Step::PowerCut { kind, index, at }),
    ]
}

fn apply_write(model: &mut Vec<u8>, off: u64, len: u64, byte: u8) {
    let end = (off + len) as usize;
    if model.len() < end {
        model.resize(end, 0);
    }
    model[off as usize..end].fill(byte);
}

fn run(initial: Vec<u8>, steps: Vec<Step>) -> std::result::Result<(), TestCaseError> {
    let mut rig = Rig::new(&initial);
    let mut model = initial;
    for (n, s) in steps.into_iter().enumerate() {
        match s.clone() {
            Step::Write { off, len, byte } => {
                let data = vec![byte; len as usize];
                rig.with(|s, m| s.write(m, off, &data)).unwrap();
                apply_write(&mut model, off, len, byte);
            }
            Step::Buffer { off, len, byte } => {
                let data = vec![byte; len as usize];
                rig.with(|s, m| s.buffer(m, off, &data, CHUNK, &mut never)).unwrap();
                for i in CHUNK.chunks(off, len) {
                    prop_assert_eq!(rig.map.lock().get(ChunkId::new(INO, i)), Some(ChunkState::Dirty));
                }
                apply_write(&mut model, off, len, byte);
            }
            Step::ScrubRace { index, byte } => {
                let copy = rig.with(|s, m| s.read_dirty(m, index)).unwrap();
                let size = model.len() as u64;
                let raced = index * C < size;
                if raced {
                    rig.with(|s, m| s.write(m, index * C, &[byte])).unwrap();
                    model[(index * C) as usize] = byte;
                }
                if let Some(copy) = copy {
                    let clean = rig.with(|s, m| s.store_back(m, copy, &mut never)).unwrap();
                    prop_assert!(!(clean && raced), "a chunk written during its scrub was called clean");
                }
            }
            Step::BufferCut { off, len, byte, at } => {
                rig.split().fsync().unwrap();
                let before = model.clone();
                let mut after = model.clone();
                apply_write(&mut after, off, len, byte);
                let point = points::ALL[at];
                let mut hook = |p: &'static str| if p == point { Err(Error::SimulatedCrash(p)) } else { Ok(()) };
                let data = vec![byte; len as usize];
                match rig.with(|s, m| s.buffer(m, off, &data, CHUNK, &mut hook)) {
                    Ok(_) | Err(Error::SimulatedCrash(_)) => {}
                    Err(e) => panic!("step {n}: {e}"),
                }
                rig.power_cut();
                let got = rig.content();
                for (i, &b) in got.iter().enumerate() {
                    let old = before.get(i).copied().unwrap_or(0);
                    let new = after.get(i).copied().unwrap_or(0);
                    prop_assert!(
                        b == old || b == new,
                        "step {}: byte {} is {:#x}, neither {:#x} nor {:#x}",
                        n,
                        i,
                        b,
                        old,
                        new
                    );
                }
                prop_assert!(got.len() == before.len() || got.len() == after.len(), "size {}", got.len());
                // The model follows the file (the unsynced write may or may not be there).
                model = got;
            }
            Step::Truncate(size) => {
                rig.with(|s, m| s.truncate(m, size)).unwrap();
                model.resize(size as usize, 0);
            }
            Step::Punch { off, len } => {
                rig.split().punch(&rig.map, off, len).unwrap();
                let (a, b) = ((off as usize).min(model.len()), ((off + len) as usize).min(model.len()));
                model[a..b].fill(0);
            }
            Step::Move { kind, index } => rig.mover(kind, index, &mut never).unwrap(),
            Step::Fsync => rig.split().fsync().unwrap(),
            Step::DaemonCrash => rig.daemon_crash(),
            Step::CleanRestart => rig.clean_restart(),
            Step::PowerCut { kind, index, at } => {
                rig.split().fsync().unwrap();
                let point = points::ALL[at];
                let mut hook = |p: &'static str| if p == point { Err(Error::SimulatedCrash(p)) } else { Ok(()) };
                match rig.mover(kind, index, &mut hook) {
                    Ok(()) | Err(Error::SimulatedCrash(_)) => {}
                    Err(e) => panic!("step {n}: {e}"),
                }
                rig.power_cut();
            }
        }
        let got = rig.content();
        prop_assert_eq!(got.len(), model.len(), "size after step {} {:?}", n, s);
        if let Some(i) = (0..got.len()).find(|&i| got[i] != model[i]) {
            return Err(TestCaseError::fail(format!(
                "after step {n} {s:?}: byte {i} is {:#x}, the model says {:#x}; map {:?}",
                got[i],
                model[i],
                rig.map.lock().chunks(INO).collect::<Vec<_>>()
            )));
        }
        // I1 with I4: every mapped chunk is inside the file.
        for (i, _) in rig.map.lock().chunks(INO) {
            prop_assert!(i * C < model.len() as u64, "chunk {} mapped past the end {}", i, model.len());
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    #[test]
    fn a_split_file_reads_like_a_byte_array_through_moves_crashes_and_power_cuts(
        size in 0usize..16 * C as usize,
        steps in proptest::collection::vec(step(), 1..60),
    ) {
        let initial: Vec<u8> = (0..size).map(|i| (i % 251) as u8 + 1).collect();
        run(initial, steps)?;
    }
}

/// Each named point, deterministically: a chunk written on the SSD (dirty)
/// and synced, then dropped (write-back, unmap, punch) with a power cut at
/// the point; then added again and cut at the add points.
#[test]
fn a_power_cut_at_every_step_of_a_chunk_move_keeps_the_synced_bytes() {
    for point in points::ALL {
        let initial: Vec<u8> = (0..5 * C as usize).map(|i| (i % 7) as u8).collect();
        let mut rig = Rig::new(&initial);
        let mut model = initial.clone();
        rig.mover(0, 2, &mut never).unwrap();
        rig.with(|s, m| s.write(m, 2 * C + 10, &[0xab; 100])).unwrap();
        model[2 * C as usize + 10..2 * C as usize + 110].fill(0xab);
        assert_eq!(rig.map.lock().get(ChunkId::new(INO, 2)), Some(ChunkState::Dirty));
        rig.split().fsync().unwrap();
        let mut hook = |p: &'static str| if p == point { Err(Error::SimulatedCrash(p)) } else { Ok(()) };
        let _ = rig.mover(2, 2, &mut hook);
        rig.power_cut();
        assert_eq!(rig.content(), model, "drop cut at {point}");
        let mut hook = |p: &'static str| if p == point { Err(Error::SimulatedCrash(p)) } else { Ok(()) };
        let _ = rig.mover(0, 3, &mut hook);
        rig.power_cut();
        assert_eq!(rig.content(), model, "add cut at {point}");
    }
}

/// A buffered write is acknowledged with its chunks in the map, dirty, and
/// its bytes only on the SSD; it survives the daemon's death, and a power
/// cut once fsynced; a write-back then makes the HDD copy current.
#[test]
fn a_buffered_write_survives_the_daemon_and_a_power_cut_after_fsync_and_is_written_back() {
    let mut rig = Rig::new(&[1u8; 2 * C as usize + 10]);
    let new = rig.with(|s, m| s.buffer(m, C + 5, &[7u8; 10], CHUNK, &mut never)).unwrap();
    assert_eq!(new, vec![1]);
    let mut home = vec![0u8; 10];
    read_full(&rig.hdd, &rig.home, &mut home, C + 5).unwrap();
    assert_eq!(home, [1u8; 10], "the HDD is not written");
    rig.daemon_crash();
    assert_eq!(&rig.content()[C as usize + 4..C as usize + 16], &[1, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 1]);
    // Growing the file: a new chunk past the end, nothing read from the HDD.
    rig.with(|s, m| s.buffer(m, 3 * C, &[8u8; 100], CHUNK, &mut never)).unwrap();
    rig.split().fsync().unwrap();
    rig.power_cut();
    let c = rig.content();
    assert_eq!(c.len() as u64, 3 * C + 100);
    assert!(c[3 * C as usize..].iter().all(|&b| b == 8));
    assert!(c[2 * C as usize + 10..3 * C as usize].iter().all(|&b| b == 0));
    let mapped: Vec<u64> = rig.map.lock().chunks(INO).map(|c| c.0).collect();
    for i in mapped {
        rig.mover(1, i, &mut never).unwrap();
    }
    assert!(rig.map.lock().chunks(INO).all(|(_, s)| s == ChunkState::Clean));
    let mut home = vec![0u8; c.len()];
    read_full(&rig.hdd, &rig.home, &mut home, 0).unwrap();
    assert_eq!(home, c, "written back");
}

/// A write acknowledged to a chunk on the SSD survives the daemon's death
/// without an fsync: the map entry was durable before the write, and the
/// chunk is taken as dirty afterwards, so it is written back before it is
/// dropped.
#[test]
fn a_write_to_an_ssd_chunk_survives_the_daemon_and_is_written_back_before_a_drop() {
    let mut rig = Rig::new(&[1u8; 3 * C as usize]);
    rig.mover(0, 1, &mut never).unwrap();
    rig.map.lock().save().unwrap();
    rig.with(|s, m| s.write(m, C, &[9u8; 10])).unwrap();
    rig.daemon_crash();
    assert_eq!(rig.map.lock().get(ChunkId::new(INO, 1)), Some(ChunkState::Dirty));
    assert_eq!(&rig.content()[C as usize..C as usize + 11], &[9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 1]);
    rig.mover(2, 1, &mut never).unwrap();
    assert!(!rig.map.lock().is_split(INO));
    let mut home = vec![0u8; 11];
    read_full(&rig.hdd, &rig.home, &mut home, C).unwrap();
    assert_eq!(home, [9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 1]);
}

/// A truncate that cuts into a mapped chunk, then an extension: the bytes
/// past the cut read as zeros (I4), also when the daemon died between the
/// two halves of the truncate.
#[test]
fn bytes_past_a_truncate_read_as_zeros_after_the_file_grows_again() {
    let mut rig = Rig::new(&[5u8; 4 * C as usize]);
    rig.mover(0, 1, &mut never).unwrap();
    rig.mover(0, 3, &mut never).unwrap();
    // Only the HDD half of a truncate, as if the daemon died in between.
    rig.hdd.set_len(&rig.home, C + 100).unwrap();
    rig.daemon_crash();
    assert_eq!(rig.map.lock().chunks(INO).map(|(i, _)| i).collect::<Vec<_>>(), vec![1]);
    rig.with(|s, m| s.truncate(m, 3 * C)).unwrap();
    let c = rig.content();
    assert!(c[..C as usize + 100].iter().all(|&b| b == 5));
    assert!(c[C as usize + 100..].iter().all(|&b| b == 0), "stale bytes came back");
}

/// Review finding: a truncate unmapped a dirty chunk durably while the HDD
/// file's new size was not durable; a power cut then brought back the old
/// size with the HDD's stale bytes where fsynced SSD bytes had been.
#[test]
fn a_power_cut_after_a_truncate_does_not_bring_back_stale_hdd_bytes() {
    let mut rig = Rig::new(&[0xa; 3 * C as usize]);
    rig.mover(0, 2, &mut never).unwrap();
    rig.with(|s, m| s.write(m, 2 * C, &[0xb; C as usize])).unwrap();
    rig.split().fsync().unwrap();
    rig.with(|s, m| s.truncate(m, C)).unwrap();
    rig.power_cut();
    let c = rig.content();
    match c.len() as u64 {
        n if n == C => assert!(c.iter().all(|&b| b == 0xa)),
        n if n == 3 * C => assert!(c[2 * C as usize..].iter().all(|&b| b == 0xb), "stale HDD bytes came back"),
        n => panic!("size {n}"),
    }
}

/// Review finding: a truncate into a mapped chunk, then an extension, and
/// only the HDD file reached the disk (the kernel writes files back on its
/// own): after a power cut the shadow's old bytes past the cut came back.
#[test]
fn a_power_cut_after_truncate_and_extension_does_not_bring_back_cut_bytes() {
    let mut rig = Rig::new(&[0xa; 2 * C as usize]);
    rig.mover(0, 1, &mut never).unwrap();
    rig.split().fsync().unwrap();
    rig.with(|s, m| s.truncate(m, C + 100)).unwrap();
    rig.with(|s, m| s.truncate(m, 2 * C)).unwrap();
    rig.hdd.fsync(&rig.home, false).unwrap();
    rig.power_cut();
    let c = rig.content();
    assert_eq!(c.len() as u64, 2 * C);
    assert!(c[..C as usize + 100].iter().all(|&b| b == 0xa));
    assert!(c[C as usize + 100..].iter().all(|&b| b == 0), "bytes past the cut came back");
}
