//! Hystor's write-back area (§5.5), the deciding half: which chunks a
//! group's area holds, how much room a new write may take, and what the
//! scrubber does next. Pure: the time and each chunk's state come in as
//! values, a plan goes out.
//!
//! A write to a chunk that is only on the HDD may land on the SSD instead
//! (the volume makes the chunk there from the write, durably, and maps it
//! dirty); the chunk joins the area. The area keeps its chunks in the
//! order of their last write; whether each is dirty is the extent map's
//! to say (the *dirty list* and the *clean list* of Hystor are the
//! area's chunks the map calls dirty and clean). The scrubber writes dirty
//! chunks back, oldest first, once their bytes pass the high watermark,
//! down to the low one, and all of them after an idle period; it frees
//! the oldest clean chunks when the area has less free room than the
//! reserve. A write finds no room only when the area is full of dirty
//! chunks: it then goes to the HDD, as it would without the area.

use super::ChunkId;
use crate::clock::Timestamp;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// Default largest write the area takes: 64 KiB. Hystor buffers small
/// writes best; a bigger request is part of a stream the HDD takes at its
/// bandwidth, and it would push the small hot writes out of the area.
pub const DEFAULT_MAX_WRITE: u64 = 64 << 10;

/// What chunk `index` of a file of `size` bytes takes in an area: its
/// bytes inside the file, in 4 KiB blocks (a whole small file is one chunk
/// of 1 MiB, mostly hole).
pub fn charge(chunk: super::ChunkSize, index: u64, size: u64) -> u64 {
    chunk.within(index, size).next_multiple_of(4096)
}

/// The largest share of the SSD (percent of its capacity) a user other than
/// root may give a directory's area: anyone else's files could otherwise be
/// pushed off the SSD by one user's areas.
pub const USER_SHARE_MAX: u8 = 10;

/// What the areas together may take of the SSD, percent of its capacity
/// (more only if root gave one area a larger share: then that share).
pub const TOTAL_SHARE: u8 = 50;

/// The quota of an area whose share is `share` percent of a `limit`-byte
/// SSD, among areas whose shares add up to `sum` (this one's included)
/// with `largest` the largest: the shares scaled down, all alike, so that
/// together they take at most [`TOTAL_SHARE`] of the SSD, or the largest
/// share if that is more.
pub fn quota(limit: u64, share: u8, sum: u64, largest: u8) -> u64 {
    let sum = sum.max(u64::from(share));
    let cap = u64::from(TOTAL_SHARE.max(largest).max(share));
    let pct = u128::from(share) * u128::from(cap.min(sum));
    (u128::from(limit) * pct / (100 * u128::from(sum.max(1)))) as u64
}

/// The scrubber's thresholds, percent of the area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watermarks {
    /// Dirty bytes past this start a scrub...
    pub high: u8,
    /// ...down to this.
    pub low: u8,
    /// Free room below this frees the oldest clean chunks (back to it).
    pub reserve: u8,
}

/// Defaults: scrub from 75 % dirty down to 50 %, keep 10 % free.
pub const WATERMARKS: Watermarks = Watermarks { high: 75, low: 50, reserve: 10 };

/// After this long without a write into the area, every dirty chunk is
/// written back (Hystor scrubs in idle periods).
pub const IDLE: Duration = Duration::from_secs(2);

/// What the scrubber should do now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScrubPlan {
    /// Dirty chunks to write back, oldest first.
    pub scrub: Vec<ChunkId>,
    /// Clean chunks to take off the SSD, oldest first.
    pub free: Vec<ChunkId>,
}

impl ScrubPlan {
    /// True if there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.scrub.is_empty() && self.free.is_empty()
    }
}

/// One group's write-back area.
#[derive(Clone, Debug, Default)]
pub struct Area {
    /// Its size, bytes.
    pub quota: u64,
    /// Chunk → (bytes, order of its last write).
    chunks: HashMap<ChunkId, (u64, u64)>,
    /// Order of last write → chunk, oldest first.
    order: BTreeMap<u64, ChunkId>,
    next: u64,
    used: u64,
    /// Room promised to writes in flight.
    pending: u64,
    /// The last write into the area.
    last_write: Option<Timestamp>,
}

impl Area {
    /// An empty area of `quota` bytes.
    pub fn new(quota: u64) -> Self {
        Area { quota, ..Area::default() }
    }

    /// Bytes of the area's chunks.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Chunks in the area.
    pub fn len(&self) -> usize {
        self.chunks.len()
    }

    /// True if the area holds no chunk.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// True if the area holds `id`.
    pub fn contains(&self, id: ChunkId) -> bool {
        self.chunks.contains_key(&id)
    }

    /// The area's chunks, oldest write first.
    pub fn oldest_first(&self) -> impl Iterator<Item = ChunkId> + '_ {
        self.order.values().copied()
    }

    /// Promises `bytes` of room to a write; false if the area has not got
    /// them (the write goes to the HDD).
    pub fn reserve(&mut self, bytes: u64) -> bool {
        if self.used + self.pending + bytes > self.quota {
            return false;
        }
        self.pending += bytes;
        true
    }

    /// A write that reserved `reserved` bytes is over without new chunks.
    pub fn cancel(&mut self, reserved: u64) {
        self.pending = self.pending.saturating_sub(reserved);
    }

    /// A write that reserved `reserved` bytes made `chunks` (with the
    /// bytes each takes on the SSD) there at `now`.
    pub fn admit(&mut self, chunks: &[(ChunkId, u64)], reserved: u64, now: Timestamp) {
        self.cancel(reserved);
        for &(id, bytes) in chunks {
            self.forget(id);
            self.push(id, bytes);
        }
        self.last_write = Some(now);
    }

    /// A write reached chunk `id` of the area at `now`: it is the newest,
    /// and takes `bytes` on the SSD now (`None`: as before; an append can
    /// grow the part of a chunk inside the file).
    pub fn touch(&mut self, id: ChunkId, bytes: Option<u64>, now: Timestamp) {
        if let Some(&(was, _)) = self.chunks.get(&id) {
            self.forget(id);
            self.push(id, bytes.unwrap_or(was).max(was));
            self.last_write = Some(now);
        }
    }

    fn push(&mut self, id: ChunkId, bytes: u64) {
        self.next += 1;
        self.chunks.insert(id, (bytes, self.next));
        self.order.insert(self.next, id);
        self.used += bytes;
    }

    /// The chunk left the area (taken off the SSD, or taken over by the
    /// remap area).
    pub fn forget(&mut self, id: ChunkId) {
        if let Some((bytes, seq)) = self.chunks.remove(&id) {
            self.order.remove(&seq);
            self.used -= bytes;
        }
    }

    /// The chunks of a file that is gone.
    pub fn forget_file(&mut self, ino: crate::state::ns::Ino) {
        let ids: Vec<ChunkId> = self.chunks.keys().copied().filter(|id| id.ino == ino).collect();
        for id in ids {
            self.forget(id);
        }
    }

    /// What to do at `now`: `state` says of each chunk whether it is still
    /// on the SSD and dirty (`Some(true)`), clean (`Some(false)`), or gone
    /// (`None`: it is forgotten here).
    pub fn plan(&mut self, now: Timestamp, w: Watermarks, state: impl Fn(ChunkId) -> Option<bool>) -> ScrubPlan {
        let mut dirty = Vec::new();
        let mut clean = Vec::new();
        let mut gone = Vec::new();
        let mut dirty_bytes = 0;
        for &id in self.order.values() {
            let bytes = self.chunks[&id].0;
            match state(id) {
                Some(true) => {
                    dirty.push((id, bytes));
                    dirty_bytes += bytes;
                }
                Some(false) => clean.push((id, bytes)),
                None => gone.push(id),
            }
        }
        for id in gone {
            self.forget(id);
        }
        let pct = |p: u8| (u128::from(self.quota) * u128::from(p) / 100) as u64;
        let mut plan = ScrubPlan::default();
        let idle = self.last_write.is_none_or(|t| now.since(t) >= IDLE);
        if idle {
            plan.scrub = dirty.iter().map(|d| d.0).collect();
        } else if dirty_bytes > pct(w.high) {
            let mut left = dirty_bytes;
            for &(id, bytes) in &dirty {
                if left <= pct(w.low) {
                    break;
                }
                plan.scrub.push(id);
                left -= bytes;
            }
        }
        let mut free = self.quota.saturating_sub(self.used + self.pending);
        for &(id, bytes) in &clean {
            if free >= pct(w.reserve) {
                break;
            }
            plan.free.push(id);
            free += bytes;
        }
        plan
    }

    /// Dirty bytes of the area, as `state` says (see [`Area::plan`]).
    pub fn dirty_bytes(&self, state: impl Fn(ChunkId) -> Option<bool>) -> u64 {
        self.chunks.iter().filter(|(id, _)| state(**id) == Some(true)).map(|(_, v)| v.0).sum()
    }

    /// The area's clean chunks (as `state` says, see [`Area::plan`]) with
    /// the bytes each takes, oldest write first: what the cleaner may free
    /// at once when the SSD needs room (their bytes are on the HDD too).
    pub fn clean(&self, state: impl Fn(ChunkId) -> Option<bool>) -> Vec<(ChunkId, u64)> {
        self.order.values().filter(|id| state(**id) == Some(false)).map(|id| (*id, self.chunks[id].0)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};
    use std::collections::HashSet;

    const K: u64 = 64 << 10;

    fn id(i: u64) -> ChunkId {
        ChunkId::new(7, i)
    }

    fn all_dirty(_: ChunkId) -> Option<bool> {
        Some(true)
    }

    #[test]
    fn the_areas_together_are_scaled_to_half_the_ssd_or_roots_largest_share() {
        let m = 1000;
        assert_eq!(quota(m, 30, 30, 30), 300, "one area alone gets its share");
        assert_eq!(quota(m, 10, 200, 10), 25, "twenty areas of 10 % share half the SSD");
        assert_eq!(quota(m, 50, 60, 50), 416, "half and a tenth: scaled to half");
        assert_eq!(quota(m, 80, 90, 80), 711, "root's 80 % sets the cap");
        assert_eq!(quota(m, 10, 90, 80), 88);
        assert_eq!(quota(m, 0, 0, 0), 0);
    }

    #[test]
    fn dirty_chunks_past_the_high_watermark_are_scrubbed_oldest_first_down_to_the_low_one() {
        let clock = ManualClock::new(Timestamp::from_secs(100));
        let mut a = Area::new(10 * K);
        for i in 0..7 {
            assert!(a.reserve(K));
            a.admit(&[(id(i), K)], K, clock.now());
        }
        assert!(a.plan(clock.now(), WATERMARKS, all_dirty).is_empty(), "70 % dirty is below 75 %");
        assert!(a.reserve(K));
        a.admit(&[(id(7), K)], K, clock.now());
        // A write to chunk 0 makes it the newest: chunk 1 is the oldest now.
        a.touch(id(0), None, clock.now());
        let p = a.plan(clock.now(), WATERMARKS, all_dirty);
        assert_eq!(p.scrub, vec![id(1), id(2), id(3)], "80 % down to 50 %, oldest write first");
        assert!(p.free.is_empty());
    }

    #[test]
    fn an_idle_area_is_scrubbed_whole() {
        let clock = ManualClock::new(Timestamp::from_secs(100));
        let mut a = Area::new(10 * K);
        assert!(a.reserve(2 * K));
        a.admit(&[(id(0), K), (id(1), K)], 2 * K, clock.now());
        assert!(a.plan(clock.now(), WATERMARKS, all_dirty).is_empty());
        clock.advance(IDLE / 2);
        a.touch(id(0), Some(2 * K), clock.now());
        assert_eq!(a.used(), 3 * K, "an append grew the chunk");
        clock.advance(IDLE / 2);
        assert!(a.plan(clock.now(), WATERMARKS, all_dirty).is_empty(), "the write restarted the idle clock");
        clock.advance(IDLE);
        assert_eq!(a.plan(clock.now(), WATERMARKS, all_dirty).scrub, vec![id(1), id(0)]);
    }

    #[test]
    fn a_full_area_refuses_writes_until_clean_chunks_are_freed() {
        let clock = ManualClock::new(Timestamp::from_secs(100));
        let mut a = Area::new(4 * K);
        assert!(a.reserve(4 * K));
        a.admit(&[(id(0), K), (id(1), K), (id(2), K), (id(3), K)], 4 * K, clock.now());
        assert!(!a.reserve(K), "full of dirty chunks: the write goes to the HDD");
        // Two were written back: the oldest clean ones are freed.
        let clean: HashSet<ChunkId> = [id(0), id(1)].into();
        let state = |c: ChunkId| Some(!clean.contains(&c));
        let p = a.plan(clock.now(), WATERMARKS, state);
        assert_eq!(p.free, vec![id(0)], "down to 10 % free");
        a.forget(id(0));
        assert!(a.reserve(K));
        a.cancel(K);
        assert!(a.reserve(K));
    }

    #[test]
    fn chunks_that_left_the_ssd_leave_the_area() {
        let clock = ManualClock::new(Timestamp::from_secs(100));
        let mut a = Area::new(4 * K);
        assert!(a.reserve(2 * K));
        a.admit(&[(id(0), K), (id(1), K)], 2 * K, clock.now());
        let p = a.plan(clock.now(), WATERMARKS, |c| (c != id(0)).then_some(true));
        assert!(p.is_empty());
        assert!(!a.contains(id(0)));
        assert_eq!(a.used(), K);
        a.forget_file(7);
        assert!(a.is_empty());
        assert_eq!(a.used(), 0);
    }

    #[test]
    fn promised_room_counts_until_the_write_is_over() {
        let mut a = Area::new(2 * K);
        assert!(a.reserve(2 * K));
        assert!(!a.reserve(K));
        a.cancel(2 * K);
        assert!(a.reserve(K));
    }
}

#[cfg(test)]
mod model {
    //! The area against a plain list of (chunk, bytes, dirty), oldest
    //! write first.
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Write { chunk: u64, bytes: u64 },
        Touch { chunk: u64, bytes: u64 },
        Clean(u64),
        Gone(u64),
        Plan { secs: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u64..24, 1u64..3).prop_map(|(chunk, k)| Op::Write { chunk, bytes: k * 4096 }),
            2 => (0u64..24, 1u64..3).prop_map(|(chunk, k)| Op::Touch { chunk, bytes: k * 4096 }),
            1 => (0u64..24).prop_map(Op::Clean),
            1 => (0u64..24).prop_map(Op::Gone),
            2 => prop_oneof![3 => Just(0u64), 1 => Just(3u64)].prop_map(|secs| Op::Plan { secs }),
        ]
    }

    proptest! {
        #[test]
        fn the_area_keeps_its_quota_and_plans_oldest_first_within_the_watermarks(ops in proptest::collection::vec(op(), 1..80)) {
            // Small enough for the writes to pass the high watermark often.
            let quota = 20 * 4096;
            let mut a = Area::new(quota);
            // The model: oldest first; (chunk, bytes, dirty).
            let mut m: Vec<(u64, u64, bool)> = Vec::new();
            let mut now = Timestamp::from_secs(100);
            for o in ops {
                match o {
                    Op::Write { chunk, bytes } => {
                        let id = ChunkId::new(1, chunk);
                        if m.iter().any(|c| c.0 == chunk) {
                            continue;
                        }
                        if a.reserve(bytes) {
                            a.admit(&[(id, bytes)], bytes, now);
                            m.push((chunk, bytes, true));
                        } else {
                            prop_assert!(m.iter().map(|c| c.1).sum::<u64>() + bytes > quota, "refused with room");
                        }
                    }
                    Op::Touch { chunk, bytes } => {
                        a.touch(ChunkId::new(1, chunk), Some(bytes), now);
                        if let Some(i) = m.iter().position(|c| c.0 == chunk) {
                            let mut c = m.remove(i);
                            c.1 = c.1.max(bytes);
                            c.2 = true;
                            m.push(c);
                        }
                    }
                    Op::Clean(chunk) => {
                        if let Some(c) = m.iter_mut().find(|c| c.0 == chunk) {
                            c.2 = false;
                        }
                    }
                    Op::Gone(chunk) => {
                        // As when its file is removed (the engine forgets
                        // the file's chunks; pruning at a plan has its own
                        // test).
                        a.forget(ChunkId::new(1, chunk));
                        m.retain(|c| c.0 != chunk);
                    }
                    Op::Plan { secs } => {
                        now = now.plus(Duration::from_secs(secs));
                        let state = |id: ChunkId| m.iter().find(|c| c.0 == id.index).map(|c| c.2);
                        let p = a.plan(now, WATERMARKS, state);
                        let dirty: Vec<(u64, u64)> = m.iter().filter(|c| c.2).map(|c| (c.0, c.1)).collect();
                        // Scrubs: dirty chunks, the oldest ones, in order.
                        let want: Vec<u64> = p.scrub.iter().map(|id| id.index).collect();
                        prop_assert_eq!(&want[..], &dirty.iter().map(|d| d.0).take(want.len()).collect::<Vec<_>>()[..]);
                        let total: u64 = dirty.iter().map(|d| d.1).sum();
                        let left: u64 = dirty.iter().skip(want.len()).map(|d| d.1).sum();
                        let pct = |p: u8| quota * u64::from(p) / 100;
                        if total > pct(WATERMARKS.high) && left > pct(WATERMARKS.low) {
                            prop_assert!(false, "stopped above the low watermark: {} of {} left", left, total);
                        }
                        // Frees: clean chunks only, oldest first.
                        let clean: Vec<u64> = m.iter().filter(|c| !c.2).map(|c| c.0).collect();
                        let freed: Vec<u64> = p.free.iter().map(|id| id.index).collect();
                        prop_assert_eq!(&freed[..], &clean[..freed.len()]);
                        for id in p.scrub {
                            if let Some(c) = m.iter_mut().find(|c| c.0 == id.index) {
                                c.2 = false;
                            }
                        }
                        for id in p.free {
                            a.forget(id);
                            m.retain(|c| c.0 != id.index);
                        }
                    }
                }
                prop_assert_eq!(a.used(), m.iter().map(|c| c.1).sum::<u64>());
                prop_assert_eq!(a.oldest_first().map(|id| id.index).collect::<Vec<_>>(), m.iter().map(|c| c.0).collect::<Vec<_>>());
            }
        }
    }
}
