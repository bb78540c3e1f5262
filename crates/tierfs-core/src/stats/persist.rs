//! Statistics in the state database: written in batches (never one write
//! per I/O) and read back at mount. Soft state: a crash may lose the last
//! batch; an entry that cannot be decoded is skipped, never fatal.

use super::{FileStats, Residence, Served, Stats};
use crate::clock::Timestamp;
use crate::error::Result;
use crate::state::ns::Ino;
use crate::state::{Kv, Op, TreeId};
use std::sync::Arc;
use std::time::Duration;

const V1: u8 = 1;
/// The most entries one statistics batch writes (about 5 MB of writes).
pub const FLUSH_BATCH: usize = 50_000;
const META_SEQ: &[u8] = b"\xffseq";
const META_EVICTED: &[u8] = b"\xfflast-evicted";
const META_AGED: &[u8] = b"\xfflast-aged";
const META_SERVED: &[u8] = b"\xffserved";

fn encode(f: &FileStats) -> Vec<u8> {
    let mut v = Vec::with_capacity(64);
    v.push(V1);
    v.extend_from_slice(&f.counter.to_be_bytes());
    v.extend_from_slice(&f.group.to_be_bytes());
    v.push(f.residence.encode());
    v.extend_from_slice(&f.size.to_be_bytes());
    v.extend_from_slice(&f.seq.to_be_bytes());
    v.extend_from_slice(&f.last_access.to_be_bytes());
    v.extend_from_slice(&f.reads.to_be_bytes());
    v.extend_from_slice(&f.writes.to_be_bytes());
    v.extend_from_slice(&f.read_bytes.to_be_bytes());
    v.extend_from_slice(&f.write_bytes.to_be_bytes());
    v.extend_from_slice(&f.ssd_reqs.to_be_bytes());
    v.extend_from_slice(&f.hdd_reqs.to_be_bytes());
    v
}

fn decode(b: &[u8]) -> Option<FileStats> {
    if b.first() != Some(&V1) || b.len() != 62 {
        return None;
    }
    let u32_at = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    Some(FileStats {
        counter: u32_at(1),
        group: u32_at(5),
        residence: Residence::decode(b[9])?,
        size: u64_at(10),
        seq: u64_at(18),
        last_access: u32_at(26),
        reads: u32_at(30),
        writes: u32_at(34),
        read_bytes: u64_at(38),
        write_bytes: u64_at(46),
        ssd_reqs: u32_at(54),
        hdd_reqs: u32_at(58),
    })
}

/// Where statistics are kept.
#[derive(Clone)]
pub struct StatsStore {
    kv: Arc<dyn Kv>,
}

impl std::fmt::Debug for StatsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StatsStore")
    }
}

impl StatsStore {
    /// Statistics in this key-value store's `Stats` tree.
    pub fn new(kv: Arc<dyn Kv>) -> Self {
        StatsStore { kv }
    }

    /// Writes everything that changed since the last flush, in batches of
    /// [`FLUSH_BATCH`]. Returns the number of entries written and removed.
    pub fn flush(&self, s: &mut Stats) -> Result<usize> {
        let mut n = self.flush_part(s, FLUSH_BATCH)?;
        while s.unflushed() > 0 {
            n += self.flush_part(s, FLUSH_BATCH)?;
        }
        Ok(n)
    }

    /// Writes up to `limit` of the entries that changed since the last
    /// flush, in one batch, so that a flush after an aging or an adoption
    /// that changed a million entries neither takes a million entries'
    /// worth of memory nor stalls the engine: the rest goes in later
    /// flushes. Returns the number of entries written and removed.
    pub fn flush_part(&self, s: &mut Stats, limit: usize) -> Result<usize> {
        let (dirty, removed) = s.take_dirty(limit);
        let n = dirty.len() + removed.len();
        let mut ops: Vec<Op> = Vec::with_capacity(n + 4);
        for (ino, f) in dirty {
            ops.push(Op::Put(ino.to_be_bytes().to_vec(), encode(&f)));
        }
        for ino in removed {
            ops.push(Op::Del(ino.to_be_bytes().to_vec()));
        }
        ops.push(Op::Put(META_SEQ.to_vec(), s.seq().to_be_bytes().to_vec()));
        // The aging time and the last evicted counter describe the entries
        // as they are now: written with the part that writes the last of
        // them, or a crash between parts would load entries that missed
        // an aging with the time that says they had it.
        if s.unflushed() == 0 {
            match s.last_evicted {
                Some(c) => ops.push(Op::Put(META_EVICTED.to_vec(), c.to_be_bytes().to_vec())),
                None => ops.push(Op::Del(META_EVICTED.to_vec())),
            }
            if let Some(t) = s.last_aged() {
                ops.push(Op::Put(META_AGED.to_vec(), t.0.to_be_bytes().to_vec()));
            }
        }
        let mut served = Vec::with_capacity(32);
        for x in s.served.reqs.iter().chain(s.served.bytes.iter()) {
            served.extend_from_slice(&x.to_be_bytes());
        }
        ops.push(Op::Put(META_SERVED.to_vec(), served));
        self.kv.apply(TreeId::Stats, ops)?;
        Ok(n)
    }
}

/// Loads statistics. Undecodable entries are skipped and counted; a store
/// that cannot be read at all gives empty statistics (and the error).
pub fn load(kv: &Arc<dyn Kv>, aging: Duration) -> (Stats, usize, Option<crate::Error>) {
    let mut s = Stats::new(aging);
    let mut entries = Vec::new();
    let mut bad = 0;
    let (mut seq, mut aged) = (0, None);
    let u64_of = |v: &[u8]| v.get(..8).map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")));
    let r = kv.for_each(TreeId::Stats, b"", &mut |k, v| {
        if k.len() == 8 {
            let ino: Ino = u64::from_be_bytes(k[..8].try_into().expect("8 bytes"));
            match decode(v) {
                Some(f) => entries.push((ino, f)),
                None => bad += 1,
            }
        } else if k == META_SEQ {
            seq = u64_of(v).unwrap_or(0);
        } else if k == META_EVICTED {
            s.last_evicted = v.get(..4).map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")));
        } else if k == META_AGED {
            aged = u64_of(v).map(Timestamp);
        } else if k == META_SERVED && v.len() == 32 {
            let mut x = [0u64; 4];
            for (i, c) in v.chunks(8).enumerate() {
                x[i] = u64::from_be_bytes(c.try_into().expect("8 bytes"));
            }
            s.served = Served { reqs: [x[0], x[1]], bytes: [x[2], x[3]] };
        }
    });
    if let Err(e) = r {
        return (Stats::new(aging), 0, Some(e));
    }
    s.replace_all(entries);
    s.restore_clock(seq, aged);
    (s, bad, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::MemKv;

    #[test]
    fn roundtrip_and_corrupt_entries_are_skipped() {
        let f = FileStats {
            counter: 7,
            group: 3,
            residence: Residence::Cached,
            size: 9,
            seq: 11,
            last_access: 13,
            reads: 1,
            writes: 2,
            read_bytes: 3,
            write_bytes: 4,
            ssd_reqs: 5,
            hdd_reqs: 6,
        };
        assert_eq!(decode(&encode(&f)), Some(f));
        let kv: Arc<dyn Kv> = Arc::new(MemKv::new());
        let mut s = Stats::new(Duration::from_secs(60));
        s.insert(1, f);
        s.insert(2, FileStats::default());
        s.last_evicted = Some(40);
        let store = StatsStore::new(kv.clone());
        assert_eq!(store.flush(&mut s).unwrap(), 2);
        assert_eq!(store.flush(&mut s).unwrap(), 0, "nothing changed");
        kv.apply(TreeId::Stats, vec![Op::Put(3u64.to_be_bytes().to_vec(), vec![1, 2, 3])]).unwrap();
        let (t, bad, err) = load(&kv, Duration::from_secs(60));
        assert!(err.is_none());
        assert_eq!(bad, 1);
        assert_eq!(t.len(), 2);
        assert_eq!(t.get(1), Some(f));
        assert_eq!(t.last_evicted, Some(40));
        assert_eq!(t.seq(), 11);
        assert!(t.check_index());
    }

    #[test]
    fn a_flush_of_many_changes_goes_in_bounded_parts_and_loses_none() {
        let kv: Arc<dyn Kv> = Arc::new(MemKv::new());
        let mut s = Stats::new(Duration::from_secs(60));
        for ino in 10..1010 {
            s.insert(ino, FileStats { counter: ino as u32, ..FileStats::default() });
        }
        for ino in 10..20 {
            s.remove(ino);
        }
        let store = StatsStore::new(kv.clone());
        let mut parts = 0;
        while s.unflushed() > 0 {
            assert!(store.flush_part(&mut s, 300).unwrap() <= 300);
            parts += 1;
        }
        assert_eq!(parts, 4, "990 changed and 10 removed entries in parts of 300");
        let (t, bad, err) = load(&kv, Duration::from_secs(60));
        assert!(err.is_none() && bad == 0);
        assert_eq!(t.len(), 990);
        assert!((20..1010).all(|i| t.get(i).map(|f| f.counter) == Some(i as u32)));
    }
}
