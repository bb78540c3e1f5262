//! Program 1 of Hystor (§5.4.1): which chunks deserve the remap area.
//!
//! The quota (bytes of remap area) is shared out over the region entries in
//! proportion to their counters, starting with the region with the fewest
//! chunk entries; each region's share is shared out over its sub-regions
//! the same way; a sub-region's share takes its chunks hottest first while
//! a whole chunk fits and the chunk is at least as hot as the average of
//! the page's chunks not yet chosen (our addition: see `take`). A share not
//! used goes back to the level above and on to the next entry. Integer shares round down, and a share smaller than a
//! chunk buys nothing, so what is left after a pass is shared out again
//! over the chunks not yet chosen, until a pass chooses nothing more.

use super::table::BlockTable;
use super::{ChunkId, ChunkSize};
use std::cmp::Reverse;
use std::collections::HashSet;

/// A chunk chosen for the remap area and the SSD space it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The chunk.
    pub id: ChunkId,
    /// Its size.
    pub bytes: u64,
    /// Its counter when it was chosen: the smooth update admits newcomers
    /// with the highest counters first (counters of different pages are
    /// comparable only roughly, as their pages were shifted at different
    /// times).
    pub heat: u16,
}

/// The hottest chunks of the hottest regions, at most `quota` bytes of
/// them, in the order Program 1 chooses them. Chunks with a counter of
/// zero are never chosen.
pub fn candidates(table: &BlockTable, quota: u64) -> Vec<Candidate> {
    let mut chosen = Vec::new();
    let mut taken = HashSet::new();
    let mut quota = quota;
    loop {
        let before = chosen.len();
        quota = pass(table, quota, &mut chosen, &mut taken);
        if quota == 0 || chosen.len() == before {
            return chosen;
        }
    }
}

/// `quota * counter / total`, rounded down (0 when nothing is counted).
fn share(quota: u64, counter: u64, total: u64) -> u64 {
    if total == 0 {
        return 0;
    }
    (u128::from(quota) * u128::from(counter) / u128::from(total)) as u64
}

/// A sub-region with the chunks still to choose from.
struct Sub {
    counter: u64,
    unique: u16,
    index: usize,
    chunks: Vec<(u64, u16)>,
}

/// One pass of Program 1 over the entries that still have chunks to
/// choose; returns the quota it did not use.
fn pass(table: &BlockTable, mut quota: u64, chosen: &mut Vec<Candidate>, taken: &mut HashSet<ChunkId>) -> u64 {
    let mut regions: Vec<_> = table
        .regions()
        .filter_map(|r| {
            let mut subs: Vec<Sub> = table
                .subs(r.ino, r.region)
                .into_iter()
                .map(|s| Sub {
                    counter: u64::from(s.counter),
                    unique: s.unique,
                    index: s.sub,
                    chunks: table
                        .chunks(r.ino, r.region, s.sub)
                        .into_iter()
                        .filter(|&(i, c)| c > 0 && !taken.contains(&ChunkId::new(r.ino, i)))
                        .collect(),
                })
                .filter(|s| !s.chunks.is_empty())
                .collect();
            if subs.is_empty() {
                return None;
            }
            subs.sort_by_key(|s| (s.unique, Reverse(s.counter), s.index));
            Some((r, subs))
        })
        .collect();
    regions.sort_by_key(|(r, _)| (r.unique, Reverse(r.counter), r.ino, r.region));
    let mut total: u64 = regions.iter().map(|(r, _)| u64::from(r.counter)).sum();
    for (r, subs) in regions {
        if quota == 0 {
            break;
        }
        let mut sub_quota = share(quota, u64::from(r.counter), total);
        total -= u64::from(r.counter);
        quota -= sub_quota;
        let mut sub_total: u64 = subs.iter().map(|s| s.counter).sum();
        for mut s in subs {
            if sub_quota == 0 {
                break;
            }
            let mut chunk_quota = share(sub_quota, s.counter, sub_total);
            sub_total -= s.counter;
            sub_quota -= chunk_quota;
            s.chunks.sort_by_key(|&(i, c)| (Reverse(c), i));
            chunk_quota = take(r.ino, r.chunk, &s.chunks, chunk_quota, chosen, taken);
            sub_quota += chunk_quota;
        }
        quota += sub_quota;
    }
    quota
}

/// Takes chunks in the order given (hottest first) while a whole one fits
/// in `quota` and the chunk is at least as hot as the average of `chunks`
/// (the page's chunks not yet chosen); returns what is left.
///
/// The bar is our addition to Program 1. A sub-region's share follows its
/// counter, and one very hot chunk makes that counter large while the
/// page's other chunks are ordinary: without the bar the share bought them
/// (`db` at 6 552 chunks: a third of the area went to one sub-region
/// holding the hottest chunk, and the hit ratio was 0.87 where the hottest
/// chunks overall would give 0.89; with the bar 0.885 to 0.89, and a
/// quarter of the churn). The trade-off: the bar is relative to the page,
/// so a page with one very hot chunk and several warm ones can lose the
/// warm ones to a later page of lukewarm chunks that are colder than them
/// (its refused share flows to the entries after it). Shares in proportion
/// to the counters of the chunks not yet chosen would avoid that; not done.
fn take(
    ino: u64,
    chunk: ChunkSize,
    chunks: &[(u64, u16)],
    mut quota: u64,
    chosen: &mut Vec<Candidate>,
    taken: &mut HashSet<ChunkId>,
) -> u64 {
    // Only chunks at least as hot as the page's average: a sub-region's
    // share follows its counter, and one very hot chunk makes that counter
    // (and the share) large while the page's other chunks are ordinary; the
    // share they do not earn goes back up and on to other sub-regions, and
    // later passes lower the bar as the hottest chunks are taken.
    let n = chunks.len() as u64;
    let sum: u64 = chunks.iter().map(|&(_, c)| u64::from(c)).sum();
    for &(index, c) in chunks {
        if quota < chunk.bytes() || u64::from(c) * n < sum {
            break;
        }
        let id = ChunkId::new(ino, index);
        taken.insert(id);
        chosen.push(Candidate { id, bytes: chunk.bytes(), heat: c });
        quota -= chunk.bytes();
    }
    quota
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const K64: ChunkSize = ChunkSize::DEFAULT;
    const C: u64 = 65536;

    fn ids(c: &[Candidate]) -> Vec<(u64, u64)> {
        c.iter().map(|c| (c.id.ino, c.id.index)).collect()
    }

    /// `times` requests of 4 KiB (weight 16) on chunk `index` of `ino`.
    fn hit(t: &mut BlockTable, ino: u64, index: u64, times: usize) {
        for _ in 0..times {
            t.record(ino, K64, index * C, 4096);
        }
    }

    #[test]
    fn quota_follows_the_counters_fewest_chunks_first() {
        // File 1: chunk 0 three times, chunk 1 once (region 64, unique 2).
        // File 2: chunks 0..4 once each (region 64, unique 4).
        let mut t = BlockTable::new();
        hit(&mut t, 1, 0, 3);
        hit(&mut t, 1, 1, 1);
        for i in 0..4 {
            hit(&mut t, 2, i, 1);
        }
        // Quota 4 chunks: file 1 (fewer chunks) first, 4 * 64/128 = 2, but
        // its chunk 1 (16) is below its page's average (32): it takes chunk
        // 0 and returns 1. File 2 gets the other 3, its lowest indices among
        // equal counters (all at their average).
        assert_eq!(ids(&candidates(&t, 4 * C)), vec![(1, 0), (2, 0), (2, 1), (2, 2)]);
    }

    #[test]
    fn one_hot_chunk_does_not_spend_its_sub_regions_share_on_cold_ones() {
        // Sub-region 0: chunk 0 read 100 times (1600), chunks 1..=4 once
        // (16 each); counter 1664. Sub-region 1: chunks 512..=516 read 5
        // times each (80); counter 400. Both have 5 chunks, so the hotter
        // sub-region 0 comes first. Quota 5: its share is 5 * 1664/2064 =
        // 4.03 chunks, but only chunk 0 is above its page's average (332):
        // it returns 3.03, and sub-region 1 gets 4 and takes 512..=515.
        // Without the bar the share would have bought chunks 1, 2 and 3
        // (16) instead of three chunks of 80.
        let mut t = BlockTable::new();
        hit(&mut t, 1, 0, 100);
        for i in 1..5 {
            hit(&mut t, 1, i, 1);
        }
        for i in 512..517 {
            hit(&mut t, 1, i, 5);
        }
        assert_eq!(ids(&candidates(&t, 5 * C)), vec![(1, 0), (1, 512), (1, 513), (1, 514), (1, 515)]);
    }

    #[test]
    fn an_unused_share_is_carried_to_the_next_region() {
        // File 1: one chunk with 128 (a 512-byte request). File 2: four
        // chunks of 16. Quota 4: file 1's share is 4 * 128/192 = 2 (rounded
        // down) but it has one chunk, so 3 are left for file 2.
        let mut t = BlockTable::new();
        t.record(1, K64, 0, 512);
        for i in 0..4 {
            hit(&mut t, 2, i, 1);
        }
        assert_eq!(ids(&candidates(&t, 4 * C)), vec![(1, 0), (2, 0), (2, 1), (2, 2)]);
    }

    #[test]
    fn sub_regions_share_their_regions_quota() {
        // One file, one region: sub-region 0 has chunk 0 (16); sub-region 1
        // has chunks 512 (64) and 513 (32). Quota 2: sub 0 (1 chunk) first
        // gets 2 * 16/112 = 0; sub 1 gets 2, hottest first.
        let mut t = BlockTable::new();
        hit(&mut t, 1, 0, 1);
        hit(&mut t, 1, 512, 4);
        hit(&mut t, 1, 513, 2);
        assert_eq!(ids(&candidates(&t, 2 * C)), vec![(1, 512), (1, 513)]);
        // Quota 3: sub 0 gets 3 * 16/112 = 0 again, sub 1 takes its two
        // and returns one; a second pass gives it to chunk 0.
        assert_eq!(ids(&candidates(&t, 3 * C)), vec![(1, 512), (1, 513), (1, 0)]);
    }

    #[test]
    fn a_later_pass_gives_what_is_left_to_the_chunks_not_chosen() {
        // File 2: one chunk of 16 (unique 1, first); file 1: three chunks of
        // 128. Quota 4: file 2 gets 4 * 16/400 = 0, file 1 takes its three
        // and one is left; the second pass, over file 2 alone, uses it.
        let mut t = BlockTable::new();
        for i in 0..3 {
            t.record(1, K64, i * C, 512);
        }
        hit(&mut t, 2, 0, 1);
        assert_eq!(ids(&candidates(&t, 4 * C)), vec![(1, 0), (1, 1), (1, 2), (2, 0)]);
    }

    #[test]
    fn more_quota_than_chunks_chooses_every_counted_chunk_once() {
        let mut t = BlockTable::new();
        hit(&mut t, 1, 0, 1);
        hit(&mut t, 2, 7, 1);
        assert_eq!(candidates(&t, 1 << 40).len(), 2);
        assert!(candidates(&t, C - 1).is_empty());
        assert!(candidates(&BlockTable::new(), 1 << 30).is_empty());
    }

    #[test]
    fn chunk_sizes_of_different_files_are_charged_as_they_are() {
        let mut t = BlockTable::new();
        let big = ChunkSize::new(1 << 20).unwrap();
        t.record(1, big, 0, 512);
        t.record(2, ChunkSize::MIN, 0, 512);
        let c = candidates(&t, (1 << 20) + 4096);
        assert_eq!(c.iter().map(|c| c.bytes).sum::<u64>(), (1 << 20) + 4096);
    }

    proptest! {
        /// Whatever the table: never more than the quota, never a chunk
        /// twice, never a chunk without a count; and when some counted
        /// chunk was left out, the quota left is less than its size.
        #[test]
        fn candidates_respect_the_quota(
            reqs in proptest::collection::vec((1u64..4, 0u64..2000, 1u64..200_000), 1..200),
            quota_chunks in 0u64..300,
        ) {
            let mut t = BlockTable::new();
            for (ino, c, len) in reqs {
                t.record(ino, ChunkSize::MIN, c * 4096 + 1000, len);
            }
            let quota = quota_chunks * 4096 + 123;
            let c = candidates(&t, quota);
            let used: u64 = c.iter().map(|c| c.bytes).sum();
            prop_assert!(used <= quota);
            let set: HashSet<_> = c.iter().map(|c| c.id).collect();
            prop_assert_eq!(set.len(), c.len());
            for cand in &c {
                prop_assert!(t.counter(cand.id) > 0);
            }
            let counted: usize = t.regions().map(|r| {
                t.subs(r.ino, r.region).iter().map(|s| {
                    t.chunks(r.ino, r.region, s.sub).iter().filter(|(_, n)| *n > 0).count()
                }).sum::<usize>()
            }).sum();
            if c.len() < counted {
                prop_assert!(quota - used < 4096, "left {} with {} of {} chosen", quota - used, c.len(), counted);
            }
        }
    }
}
