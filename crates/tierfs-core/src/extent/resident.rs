//! The resident list of the remap area and its smooth update (Hystor
//! §5.4.2).
//!
//! The chunks in the remap area are kept in one list, most recently chosen
//! or used at the top. Each period the candidates of Program 1 are merged
//! in, in two steps. First every candidate already resident goes to the
//! top. Then the candidates that are not take free space, or the space of
//! the chunks at the bottom, hottest first. Replacing is bounded: at most
//! `limit` bytes of resident chunks are evicted per update (Hystor: 5–10 %
//! of the area), so a burst of new candidates (a scan, a shift of the
//! workload) changes the area gradually. A chunk chosen or placed in this
//! update is never evicted by it: only chunks Program 1 did not choose make
//! room, and only for a *strong* newcomer: one Program 1 chose in the last
//! period too. Without that hysteresis, chunks that a recent request had
//! lifted into a period's candidates traded places with residents every
//! period at the full replacement limit, each trade an HDD read and, for a
//! dirty chunk, an HDD write (`db` at 6 552 chunks: 60 of 622 chunks every
//! period, the hit ratio unchanged). Program 1 gives a sub-region a quota in
//! proportion to its counter, and one very hot chunk makes that counter
//! large while the shifts it causes leave the page's other counters at 0
//! or a recent request's weight: the rest of the quota went to whatever
//! was read last. The replacements the limit allows go to the hottest
//! (Program 1 lists regions with the fewest chunks first, so in its order
//! the hottest chunk can come last and miss the limit; it did, and at
//! 6 552 chunks `hystor` kept the hottest chunks of a file on the HDD).
//! Only when the area itself shrinks are chunks evicted past the limit.

use super::choose::Candidate;
use super::ChunkId;
use crate::state::ns::Ino;
use std::collections::{BTreeMap, HashSet};

/// What one smooth update asks the executor to do: drop the SSD copies of
/// `drop` first, then copy `add` to the SSD.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResidentPlan {
    /// Chunks to copy to the SSD, in the order chosen.
    pub add: Vec<Candidate>,
    /// Chunks whose SSD copies are to be dropped.
    pub drop: Vec<ChunkId>,
}

impl ResidentPlan {
    /// True if the plan moves nothing.
    pub fn is_empty(&self) -> bool {
        self.add.is_empty() && self.drop.is_empty()
    }
}

/// The chunks of the remap area, most recent at the top.
#[derive(Clone, Debug, Default)]
pub struct ResidentList {
    /// Position (higher is nearer the top) to chunk.
    order: BTreeMap<u64, ChunkId>,
    /// Chunk to its position and size.
    at: BTreeMap<ChunkId, (u64, u64)>,
    next: u64,
    used: u64,
}

impl ResidentList {
    /// An empty list.
    pub fn new() -> Self {
        ResidentList::default()
    }

    /// Chunks in the list.
    pub fn len(&self) -> usize {
        self.at.len()
    }

    /// True if no chunk is resident.
    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }

    /// Bytes of the remap area the list holds.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// True if `id` is resident.
    pub fn contains(&self, id: ChunkId) -> bool {
        self.at.contains_key(&id)
    }

    /// Resident chunks of `ino`, by index.
    pub fn of_file(&self, ino: Ino) -> impl Iterator<Item = ChunkId> + '_ {
        self.at.range(ChunkId::new(ino, 0)..=ChunkId::new(ino, u64::MAX)).map(|(&id, _)| id)
    }

    /// Every resident chunk, top first.
    pub fn top_down(&self) -> impl Iterator<Item = ChunkId> + '_ {
        self.order.values().rev().copied()
    }

    /// A resident chunk was used: it goes to the top. Nothing for others.
    pub fn touch(&mut self, id: ChunkId) {
        if let Some(&(pos, bytes)) = self.at.get(&id) {
            self.order.remove(&pos);
            self.put(id, bytes);
        }
    }

    fn put(&mut self, id: ChunkId, bytes: u64) {
        let pos = self.next;
        self.next += 1;
        self.order.insert(pos, id);
        self.at.insert(id, (pos, bytes));
    }

    /// Adds `id` at the top, or moves it there.
    pub fn insert(&mut self, id: ChunkId, bytes: u64) {
        self.remove(id);
        self.used += bytes;
        self.put(id, bytes);
    }

    /// Takes `id` out of the list (its copy was dropped, or could not be
    /// made); false if it was not there.
    pub fn remove(&mut self, id: ChunkId) -> bool {
        match self.at.remove(&id) {
            Some((pos, bytes)) => {
                self.order.remove(&pos);
                self.used -= bytes;
                true
            }
            None => false,
        }
    }

    /// Takes every chunk of `ino` out; returns them.
    pub fn forget(&mut self, ino: Ino) -> Vec<ChunkId> {
        self.truncate(ino, 0)
    }

    /// Takes the chunks of `ino` from index `keep` on out; returns them.
    pub fn truncate(&mut self, ino: Ino, keep: u64) -> Vec<ChunkId> {
        let gone: Vec<ChunkId> =
            self.at.range(ChunkId::new(ino, keep)..=ChunkId::new(ino, u64::MAX)).map(|(&id, _)| id).collect();
        for &id in &gone {
            self.remove(id);
        }
        gone
    }

    /// The chunk at the bottom and the position it holds.
    fn bottom(&self) -> Option<(u64, ChunkId)> {
        self.order.first_key_value().map(|(&p, &id)| (p, id))
    }

    /// Merges `updates` (Program 1's candidates) into the list for an area
    /// of `capacity` bytes, evicting at most `limit` bytes of resident
    /// chunks not among them, and only for newcomers in `strong`; returns
    /// the copies to make and to drop. The list
    /// is updated as if the plan were carried out; the executor reports a
    /// chunk it could not copy with [`remove`](Self::remove).
    pub fn smooth_update(
        &mut self,
        updates: &[Candidate],
        strong: &HashSet<ChunkId>,
        capacity: u64,
        limit: u64,
    ) -> ResidentPlan {
        let mut plan = ResidentPlan::default();
        let mut dropped = HashSet::new();
        let round = self.next;
        for u in updates {
            self.touch(u.id);
        }
        // The area shrank (whole files took SSD space): fit it first, from
        // the bottom, where the chunks not chosen now are.
        while self.used > capacity {
            let Some((_, id)) = self.bottom() else { break };
            self.remove(id);
            dropped.insert(id);
        }
        let mut newcomers: Vec<Candidate> = updates.iter().filter(|u| !self.contains(u.id)).copied().collect();
        newcomers.sort_by_key(|u| std::cmp::Reverse(u.heat));
        let mut evicted = 0;
        for u in newcomers {
            if u.bytes > capacity {
                continue;
            }
            // Room from the bottom, within the limit, never a chunk chosen
            // or placed by this update, and only for a strong newcomer.
            let mut victims = Vec::new();
            let mut freed = 0;
            let mut fits = true;
            for (&pos, &id) in &self.order {
                if self.used - freed + u.bytes <= capacity {
                    break;
                }
                let bytes = self.at[&id].1;
                if pos >= round || evicted + freed + bytes > limit || !strong.contains(&u.id) {
                    fits = false;
                    break;
                }
                victims.push(id);
                freed += bytes;
            }
            if !fits || self.used - freed + u.bytes > capacity {
                continue;
            }
            for id in victims {
                self.remove(id);
                dropped.insert(id);
            }
            evicted += freed;
            self.insert(u.id, u.bytes);
            // A chunk dropped earlier in this update and chosen again
            // simply stays.
            if !dropped.remove(&u.id) {
                plan.add.push(u);
            }
        }
        plan.drop = dropped.into_iter().collect();
        plan.drop.sort();
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const C: u64 = 65536;

    fn cand(ino: Ino, index: u64) -> Candidate {
        Candidate { id: ChunkId::new(ino, index), bytes: C, heat: 0 }
    }

    /// A smooth update where every candidate is strong.
    fn upd(l: &mut ResidentList, ups: &[Candidate], cap: u64, lim: u64) -> ResidentPlan {
        let strong = ups.iter().map(|c| c.id).collect();
        l.smooth_update(ups, &strong, cap, lim)
    }

    fn top(l: &ResidentList) -> Vec<u64> {
        l.top_down().map(|id| id.index).collect()
    }

    #[test]
    fn free_space_fills_without_limit_and_replacing_is_bounded() {
        let mut l = ResidentList::new();
        let first: Vec<_> = (0..10).map(|i| cand(1, i)).collect();
        // Empty area of 10 chunks: all ten go in even with a limit of 1 chunk.
        let p = upd(&mut l, &first, 10 * C, C);
        assert_eq!(p.add.len(), 10);
        assert!(p.drop.is_empty());
        assert_eq!(l.used(), 10 * C);
        // Ten new candidates: only one chunk (the limit) is replaced, the
        // bottom one (chunk 0).
        let second: Vec<_> = (100..110).map(|i| cand(1, i)).collect();
        let p = upd(&mut l, &second, 10 * C, C);
        assert_eq!(p.add, vec![cand(1, 100)]);
        assert_eq!(p.drop, vec![ChunkId::new(1, 0)]);
        assert_eq!(l.len(), 10);
        // With a limit of 3 chunks, the next three.
        let p = upd(&mut l, &second, 10 * C, 3 * C);
        assert_eq!(p.add, vec![cand(1, 101), cand(1, 102), cand(1, 103)]);
        assert_eq!(p.drop, vec![ChunkId::new(1, 1), ChunkId::new(1, 2), ChunkId::new(1, 3)]);
    }

    #[test]
    fn a_resident_candidate_goes_to_the_top_and_is_kept() {
        let mut l = ResidentList::new();
        upd(&mut l, &[cand(1, 0), cand(1, 1), cand(1, 2)], 3 * C, 0);
        assert_eq!(top(&l), vec![2, 1, 0]);
        // Chunk 0 is chosen again: it moves up, and the new one replaces
        // chunk 1, now the bottom.
        let p = upd(&mut l, &[cand(1, 0), cand(1, 9)], 3 * C, C);
        assert_eq!(p.add, vec![cand(1, 9)]);
        assert_eq!(p.drop, vec![ChunkId::new(1, 1)]);
        assert_eq!(top(&l), vec![9, 0, 2]);
        // An access also moves a chunk up.
        l.touch(ChunkId::new(1, 2));
        assert_eq!(top(&l), vec![2, 9, 0]);
        l.touch(ChunkId::new(1, 55)); // not resident: nothing
        assert_eq!(l.len(), 3);
    }

    #[test]
    fn newcomers_enter_hottest_first_and_never_push_out_a_chosen_chunk() {
        let mut l = ResidentList::new();
        upd(&mut l, &[cand(1, 0), cand(1, 1), cand(1, 2)], 3 * C, 0);
        // Bottom first: 0, 1, 2. The update chooses 9 (cold), 7 (hot) and
        // the resident 0 (the bottom, listed last). With room for one
        // replacement, 7 takes the place of 1, the bottom chunk not chosen;
        // 0 stays although it was at the bottom and listed last.
        let hot = Candidate { heat: 500, ..cand(1, 7) };
        let cold = Candidate { heat: 3, ..cand(1, 9) };
        let p = upd(&mut l, &[cold, hot, cand(1, 0)], 3 * C, C);
        assert_eq!(p.add, vec![hot]);
        assert_eq!(p.drop, vec![ChunkId::new(1, 1)]);
        assert_eq!(top(&l), vec![7, 0, 2]);
    }

    #[test]
    fn a_weak_newcomer_takes_free_space_but_pushes_nobody_out() {
        let mut l = ResidentList::new();
        let none = HashSet::new();
        // Free space: taken by weak candidates too.
        let p = l.smooth_update(&[cand(1, 0), cand(1, 1)], &none, 2 * C, 0);
        assert_eq!(p.add.len(), 2);
        // Full: a weak newcomer waits even with a replacement allowed; a
        // strong one replaces the bottom chunk not chosen.
        let p = l.smooth_update(&[cand(1, 5)], &none, 2 * C, C);
        assert!(p.is_empty(), "{p:?}");
        let strong = HashSet::from([ChunkId::new(1, 5)]);
        let p = l.smooth_update(&[cand(1, 5)], &strong, 2 * C, C);
        assert_eq!((p.add, p.drop), (vec![cand(1, 5)], vec![ChunkId::new(1, 0)]));
    }

    #[test]
    fn an_update_never_evicts_what_it_placed() {
        let mut l = ResidentList::new();
        let p = upd(&mut l, &[cand(1, 0), cand(1, 1), cand(1, 2)], 2 * C, 10 * C);
        assert_eq!(p.add, vec![cand(1, 0), cand(1, 1)]);
        assert!(p.drop.is_empty());
    }

    #[test]
    fn a_shrunk_area_is_fitted_past_the_limit() {
        let mut l = ResidentList::new();
        upd(&mut l, &(0..8).map(|i| cand(1, i)).collect::<Vec<_>>(), 8 * C, 0);
        let p = upd(&mut l, &[], 5 * C, 0);
        assert_eq!(p.drop.len(), 3);
        assert_eq!(p.drop, vec![ChunkId::new(1, 0), ChunkId::new(1, 1), ChunkId::new(1, 2)]);
        assert_eq!(l.used(), 5 * C);
    }

    #[test]
    fn forget_and_truncate_return_the_chunks_to_drop() {
        let mut l = ResidentList::new();
        upd(&mut l, &[cand(1, 0), cand(1, 5), cand(2, 3), cand(1, 9)], 10 * C, 0);
        assert_eq!(l.truncate(1, 5), vec![ChunkId::new(1, 5), ChunkId::new(1, 9)]);
        assert_eq!(l.forget(2), vec![ChunkId::new(2, 3)]);
        assert_eq!(l.of_file(1).collect::<Vec<_>>(), vec![ChunkId::new(1, 0)]);
        assert_eq!(l.used(), C);
    }

    proptest! {
        /// Against a plain vector model of the list: after any sequence of
        /// updates, touches and removals, the area is within its capacity,
        /// each update evicted at most its limit (unless the area shrank),
        /// the plan is exactly the difference of the resident sets, and the
        /// order is the model's. Candidates whose bit is set in a mask
        /// drawn per step are strong; their heats come from the mask too.
        #[test]
        fn smooth_update_matches_a_model(steps in proptest::collection::vec(
            (0u8..4, proptest::collection::vec(0u64..30, 0..12), 1u64..12, 0u64..5, any::<u32>()), 1..40))
        {
            let mut l = ResidentList::new();
            let mut model: Vec<ChunkId> = Vec::new(); // top last
            for (op, idx, cap, lim, mask) in steps {
                let strong: HashSet<ChunkId> =
                    (0..30).filter(|i| mask >> i & 1 == 1).map(|i| ChunkId::new(1, i)).collect();
                match op {
                    0 | 1 => {
                        // Heats 0..4 drawn from the mask's high bits: ties
                        // are common, and kept in their order.
                        let ups: Vec<_> = idx
                            .iter()
                            .map(|&i| Candidate { heat: (mask.rotate_left(i as u32) >> 30) as u16, ..cand(1, i) })
                            .collect::<Vec<_>>();
                        let mut seen = HashSet::new();
                        let ups: Vec<_> = ups.into_iter().filter(|c| seen.insert(c.id)).collect();
                        let before: HashSet<_> = l.top_down().collect();
                        let p = l.smooth_update(&ups, &strong, cap * C, lim * C);
                        let after: HashSet<_> = l.top_down().collect();
                        prop_assert!(l.used() <= cap * C);
                        let added: HashSet<_> = p.add.iter().map(|c| c.id).collect();
                        let dropped: HashSet<_> = p.drop.iter().copied().collect();
                        prop_assert_eq!(&added, &after.difference(&before).copied().collect());
                        prop_assert_eq!(&dropped, &before.difference(&after).copied().collect());
                        let shrink = (before.len() as u64).saturating_sub(cap);
                        prop_assert!(dropped.len() as u64 <= lim + shrink);
                        // The model: every resident candidate to the top;
                        // shrink from the bottom; then each other candidate,
                        // highest heat first (ties in their order), to the
                        // top, into free space or, if it is strong, into
                        // room from the bottom made with chunks not chosen,
                        // within the limit.
                        let mut placed = HashSet::new();
                        for u in &ups {
                            if let Some(k) = model.iter().position(|x| *x == u.id) {
                                model.remove(k);
                                model.push(u.id);
                                placed.insert(u.id);
                            }
                        }
                        while model.len() as u64 > cap { model.remove(0); }
                        let mut evicted = 0;
                        let mut newcomers: Vec<_> = ups.iter().filter(|u| !model.contains(&u.id)).collect();
                        newcomers.sort_by_key(|u| std::cmp::Reverse(u.heat));
                        for u in newcomers {
                            if model.len() as u64 >= cap {
                                if evicted >= lim || placed.contains(&model[0]) || !strong.contains(&u.id) {
                                    continue;
                                }
                                model.remove(0);
                                evicted += 1;
                            }
                            model.push(u.id);
                            placed.insert(u.id);
                        }
                        let got: Vec<_> = l.top_down().collect();
                        let want: Vec<_> = model.iter().rev().copied().collect();
                        prop_assert_eq!(got, want);
                    }
                    2 => {
                        for &i in &idx {
                            let id = ChunkId::new(1, i);
                            l.touch(id);
                            if let Some(k) = model.iter().position(|x| *x == id) {
                                model.remove(k);
                                model.push(id);
                            }
                        }
                    }
                    _ => {
                        for &i in &idx {
                            let id = ChunkId::new(1, i);
                            prop_assert_eq!(l.remove(id), model.contains(&id));
                            model.retain(|x| *x != id);
                        }
                    }
                }
                prop_assert_eq!(l.used(), l.len() as u64 * C);
            }
        }
    }
}
