//! The offline optimum: the most reads and writes of the measured run an
//! SSD of the given capacity could serve, knowing every request to come,
//! when a file may enter the SSD only right after one of its requests (it
//! was just read from, or written to, the HDD) or where it is created, at
//! once and for nothing, and may always be left out: Belady's MIN with the
//! option not to admit (demand admission with bypass).
//!
//! Keeping a file on the SSD from one of its accesses to its next is an
//! *interval*; it earns a hit if that next access is a request of the
//! measured run, and takes the file's charge for its length. A schedule is
//! a set of intervals the capacity holds at every point; the optimum is
//! the largest.
//!
//! - When every interval's file takes the same room (a block trace cut
//!   into files of one size), keeping at each access the intervals that
//!   end soonest (Belady: the new one is admitted, and if the SSD is then
//!   over its capacity the interval that ends last goes, which may be the
//!   new one) is optimal: the exact optimum, in O(n log n).
//! - With files of different sizes the problem is NP-hard (it holds the
//!   knapsack problem). Up to [`BRUTE_FORCE_MAX`] intervals the optimum is
//!   found by trying every set. Past that it is bounded: from below by the
//!   better of two feasible schedules (Belady's rule above, and the same
//!   rule dropping the interval of the most bytes × accesses first), from
//!   above by the lesser of two relaxations, each at least the optimum:
//!   every file made as small as the smallest (then Belady is exact), and
//!   the capacity kept on average over the log instead of at every point
//!   (the cheapest intervals in bytes × accesses taken first). The report
//!   gives both; the hit ratio called the optimum is the upper bound, which
//!   no schedule, and so no policy admitting files this way, can beat.
//!
//! A policy can exceed this optimum only by moving a file to the SSD later
//! than right after its access (so that the room is someone else's
//! meanwhile): the interval policies, which promote the hottest files
//! between their accesses, and any policy whose moves lag behind the next
//! requests (the simulator's migrator works at the device models' speed).

use super::{Access, Outcome, Touch};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Up to this many intervals of files of different sizes, the optimum is
/// found by trying every set of them.
pub const BRUTE_FORCE_MAX: usize = 20;

/// How the optimum was found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// Every file takes the same room: Belady's rule is exact.
    #[default]
    OneSize,
    /// Few intervals: every set of them tried.
    BruteForce,
    /// Bounded from below and above (see the module documentation).
    Bounds,
}

/// The optimum of one log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Optimum {
    /// The best schedule found; its hits are the optimum unless the method
    /// is [`Method::Bounds`].
    pub best: Outcome,
    /// No schedule serves more requests than this (`best.hits` but for
    /// [`Method::Bounds`]).
    pub bound: u64,
    /// How it was found.
    pub method: Method,
}

impl Optimum {
    /// The optimum's hit ratio: the upper bound, which no schedule beats
    /// (exact unless the method is [`Method::Bounds`]).
    pub fn hit_ratio(&self) -> f64 {
        Outcome { hits: self.bound, ..self.best }.hit_ratio()
    }

    /// Whether `best` is the optimum itself.
    pub fn exact(&self) -> bool {
        self.method != Method::Bounds
    }
}

/// A file kept on the SSD from one access to its next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Interval {
    start: usize,
    end: usize,
    file: u64,
    charge: u64,
}

impl Interval {
    fn len(&self) -> u128 {
        (self.end - self.start) as u128
    }
}

/// The intervals of `log` that earn a hit and fit the capacity, by start
/// (at most one starts at each access).
fn intervals(log: &[Access], capacity: u64) -> Vec<Option<Interval>> {
    let mut next: FxHashMap<u64, usize> = FxHashMap::default();
    let mut starts = vec![None; log.len()];
    for (i, a) in log.iter().enumerate().rev() {
        if let Some(&j) = next.get(&a.file) {
            if a.touch != Touch::Gone && log[j].counted() && a.charge <= capacity {
                starts[i] = Some(Interval { start: i, end: j, file: a.file, charge: a.charge });
            }
        }
        next.insert(a.file, i);
    }
    starts
}

/// What to drop first when the SSD is over its capacity: the greatest key.
#[derive(Clone, Copy)]
enum Drop {
    /// The interval that ends last (Belady).
    LastEnd,
    /// The one that holds the most bytes × accesses.
    MostByteTime,
}

/// The schedule that admits every interval as it starts and, while the
/// SSD is over `capacity`, drops by `drop` (an interval of no bytes last:
/// it never is); every charge is `charge(interval)`. Returns its hits and
/// the bytes it copies to the SSD.
fn greedy(
    log: &[Access],
    starts: &[Option<Interval>],
    capacity: u64,
    drop: Drop,
    charge: impl Fn(&Interval) -> u64,
) -> (u64, u64) {
    let mut held: FxHashMap<u64, (u128, u64)> = FxHashMap::default();
    let mut order: BTreeSet<(u128, u64)> = BTreeSet::new();
    let (mut used, mut hits, mut bytes) = (0u64, 0u64, 0u64);
    for (i, a) in log.iter().enumerate() {
        // An interval held to here ends here: a hit if it is counted.
        let was = match held.remove(&a.file) {
            Some((k, c)) => {
                order.remove(&(k, a.file));
                used -= c;
                hits += u64::from(a.counted());
                true
            }
            None => false,
        };
        let Some(iv) = starts[i] else { continue };
        let c = charge(&iv);
        let k = match (c, drop) {
            (0, _) => 0,
            (_, Drop::LastEnd) => iv.end as u128,
            (_, Drop::MostByteTime) => c as u128 * iv.len(),
        };
        held.insert(iv.file, (k, c));
        order.insert((k, iv.file));
        used += c;
        while used > capacity {
            let Some((_, f)) = order.pop_last() else { break };
            if let Some((_, c)) = held.remove(&f) {
                used -= c;
            }
        }
        if !was && matches!(a.touch, Touch::Request { .. }) && held.contains_key(&iv.file) {
            bytes += c;
        }
    }
    (hits, bytes)
}

/// Bounds of the optimum of `log` at `capacity` for files of any sizes:
/// the better of two feasible schedules, and the lesser of two
/// relaxations (see the module documentation).
pub fn bounds(log: &[Access], capacity: u64) -> (Outcome, u64) {
    let requests = log.iter().filter(|a| a.counted()).count() as u64;
    let starts = intervals(log, capacity);
    let best = [Drop::LastEnd, Drop::MostByteTime]
        .into_iter()
        .map(|d| greedy(log, &starts, capacity, d, |iv| iv.charge))
        .max_by_key(|&(hits, bytes)| (hits, std::cmp::Reverse(bytes)))
        .map(|(hits, bytes_admitted)| Outcome { hits, requests, bytes_admitted })
        .unwrap_or_default();
    // Every file as small as the smallest: Belady is exact there.
    let least = starts.iter().flatten().map(|iv| iv.charge).filter(|&c| c > 0).min().unwrap_or(0);
    let (small, _) = greedy(log, &starts, capacity, Drop::LastEnd, |iv| iv.charge.min(least));
    // The capacity on average: bytes × accesses within capacity × accesses.
    let budget = capacity as u128 * log.len().saturating_sub(1) as u128;
    let mut costs: Vec<u128> = starts.iter().flatten().map(|iv| iv.charge as u128 * iv.len()).collect();
    costs.sort_unstable();
    let mut spent = 0u128;
    let average = costs.iter().take_while(|&&c| {
        spent += c;
        spent <= budget
    });
    let average = average.count() as u64;
    (best, small.min(average).max(best.hits))
}

/// Tries every set of intervals (at most [`BRUTE_FORCE_MAX`] or so: the
/// time doubles with each): the optimum's hits and the bytes its best set
/// copies to the SSD (the least of the best sets).
pub fn brute_force(log: &[Access], capacity: u64) -> Outcome {
    let requests = log.iter().filter(|a| a.counted()).count() as u64;
    let ivs: Vec<Interval> = intervals(log, capacity).into_iter().flatten().collect();
    let mut s =
        Search { log, capacity, load: vec![0; log.len()], chosen: vec![false; ivs.len()], best: None, ivs: &ivs };
    s.search(0, 0);
    let (hits, bytes_admitted) = s.best.unwrap_or((0, 0));
    Outcome { hits, requests, bytes_admitted }
}

/// The state of [`brute_force`]'s search.
struct Search<'a> {
    log: &'a [Access],
    ivs: &'a [Interval],
    capacity: u64,
    /// Bytes held over each point by the intervals chosen.
    load: Vec<u64>,
    chosen: Vec<bool>,
    /// The most hits found, and the fewest bytes copied for them.
    best: Option<(u64, u64)>,
}

impl Search<'_> {
    /// Every choice for the intervals from `k` on, `hits` earned before.
    fn search(&mut self, k: usize, hits: u64) {
        if self.best.is_some_and(|(h, _)| hits + ((self.ivs.len() - k) as u64) < h) {
            return;
        }
        let Some(&iv) = self.ivs.get(k) else {
            let bytes = admitted(self.log, self.ivs, &self.chosen);
            if self.best.is_none_or(|(h, b)| hits > h || (hits == h && bytes < b)) {
                self.best = Some((hits, bytes));
            }
            return;
        };
        if (iv.start..iv.end).all(|g| self.load[g] + iv.charge <= self.capacity) {
            (iv.start..iv.end).for_each(|g| self.load[g] += iv.charge);
            self.chosen[k] = true;
            self.search(k + 1, hits + 1);
            self.chosen[k] = false;
            (iv.start..iv.end).for_each(|g| self.load[g] -= iv.charge);
        }
        self.search(k + 1, hits);
    }
}

/// The bytes a set of intervals copies to the SSD: each chosen one that
/// starts at a request its file was not kept up to.
fn admitted(log: &[Access], ivs: &[Interval], chosen: &[bool]) -> u64 {
    let ends: std::collections::HashSet<usize> =
        ivs.iter().zip(chosen).filter(|(_, &c)| c).map(|(iv, _)| iv.end).collect();
    ivs.iter()
        .zip(chosen)
        .filter(|(iv, &c)| c && matches!(log[iv.start].touch, Touch::Request { .. }) && !ends.contains(&iv.start))
        .map(|(iv, _)| iv.charge)
        .sum()
}

/// The optimum of `log` at an SSD of `capacity` bytes (see the module
/// documentation for how, and when it is bounded rather than exact).
pub fn optimum(log: &[Access], capacity: u64) -> Optimum {
    let starts = intervals(log, capacity);
    let mut sizes = starts.iter().flatten().map(|iv| iv.charge).filter(|&c| c > 0);
    let first = sizes.next();
    if sizes.all(|c| Some(c) == first) {
        let requests = log.iter().filter(|a| a.counted()).count() as u64;
        let (hits, bytes_admitted) = greedy(log, &starts, capacity, Drop::LastEnd, |iv| iv.charge);
        return Optimum { best: Outcome { hits, requests, bytes_admitted }, bound: hits, method: Method::OneSize };
    }
    if starts.iter().flatten().count() <= BRUTE_FORCE_MAX {
        let best = brute_force(log, capacity);
        return Optimum { best, bound: best.hits, method: Method::BruteForce };
    }
    let (best, bound) = bounds(log, capacity);
    Optimum { best, bound, method: Method::Bounds }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::test_log::{arb_log, req};
    use proptest::prelude::*;

    #[test]
    fn belady_keeps_what_comes_back_soonest_and_may_leave_the_new_file_out() {
        // Room for two files. After a, b, c the file that comes back last
        // (c, the one just read) is left out: a and b hit again.
        let log: Vec<Access> = [1, 2, 3, 1, 2, 3, 1, 2].iter().map(|&f| req(f, 10)).collect();
        let o = optimum(&log, 20);
        assert_eq!(o.method, Method::OneSize);
        assert_eq!((o.best.hits, o.best.requests), (4, 8));
        assert_eq!(o.best.hits, brute_force(&log, 20).hits);
    }

    #[test]
    fn a_created_file_may_start_on_the_ssd_and_a_request_outside_the_run_earns_nothing() {
        let log = vec![
            Access { file: 1, charge: 10, touch: Touch::Anchor },
            Access { file: 2, charge: 10, touch: Touch::Request { counted: false } },
            req(1, 10),
            req(2, 10),
            Access { file: 2, charge: 10, touch: Touch::Gone },
            req(2, 10),
        ];
        let o = optimum(&log, 10);
        // File 1 from its creation, then file 2 from its counted request
        // to the next one: it is gone after, so its last request misses.
        assert_eq!((o.best.hits, o.best.requests), (1, 3));
        let o = optimum(&log, 20);
        assert_eq!(o.best.hits, 2);
        // File 2 was copied up after its unmeasured request; file 1 was
        // made there.
        assert_eq!(o.best.bytes_admitted, 10);
    }

    #[test]
    fn files_of_different_sizes_are_bounded_and_the_bounds_hold_the_brute_force_optimum() {
        // One big file read twice, two small ones read twice each, room for
        // the big one or both small ones: the small ones win.
        let log: Vec<Access> =
            [(1, 20), (2, 10), (3, 10), (1, 20), (2, 10), (3, 10)].iter().map(|&(f, c)| req(f, c)).collect();
        assert_eq!(brute_force(&log, 20).hits, 2);
        let (low, high) = bounds(&log, 20);
        assert!(low.hits <= 2 && high >= 2, "{low:?} {high}");
        assert_eq!(optimum(&log, 20).method, Method::BruteForce);
    }

    proptest! {
        #[test]
        fn belady_matches_the_brute_force_optimum_when_files_take_the_same_room(
            log in arb_log(vec![4096], 18), slots in 0u64..5,
        ) {
            let o = optimum(&log, slots * 4096);
            prop_assert_eq!(o.method, Method::OneSize);
            prop_assert_eq!(o.best.hits, brute_force(&log, slots * 4096).hits);
        }

        #[test]
        fn the_bounds_hold_the_brute_force_optimum_whatever_the_sizes(
            log in arb_log(vec![0, 4096, 8192, 20480], 18), cap in 0u64..40_000,
        ) {
            let exact = brute_force(&log, cap).hits;
            let (low, high) = bounds(&log, cap);
            prop_assert!(low.hits <= exact && exact <= high, "{} <= {} <= {}", low.hits, exact, high);
        }
    }
}
