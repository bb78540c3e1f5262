//! The best fixed set: the files that earn the most hits of the measured
//! run when each is kept on the SSD from its first access on (admitted
//! there as the other baselines admit, at once and for nothing), as many
//! as the SSD holds, never evicted. On a trace whose popularity does not
//! change (each request drawn from the same distribution, as in the `zipf`
//! block trace) keeping the most popular files is the best any online
//! policy can do on average, and this set, chosen knowing the counts, is
//! at least that: the ceiling of policies that rank files by how often
//! they are used. It is a schedule the offline optimum may choose too, so
//! the optimum is never below it; the optimum is above it because it also
//! knows when each file is used.
//!
//! Files of one size are taken by hits; files of different sizes by hits
//! per byte (a knapsack, so then it is a good set, not always the best).

use super::{Access, Outcome, Touch};
use rustc_hash::FxHashMap;

/// What one file earns when kept: its hits, its largest charge (the room
/// it needs), whether it was there (accessed since it was last removed)
/// when scanning, and whether it ever outgrows the SSD.
#[derive(Clone, Copy, Default)]
struct Earned {
    hits: u64,
    charge: u64,
    present: bool,
    too_big: bool,
}

/// The best fixed set over `log` at an SSD of `capacity` bytes: its hits,
/// and the bytes it copies to the SSD (each file at a request that finds
/// it absent; a file created there is written there, not moved).
pub fn run(log: &[Access], capacity: u64) -> Outcome {
    let mut by_file: FxHashMap<u64, Earned> = FxHashMap::default();
    let mut requests = 0;
    for a in log {
        requests += u64::from(a.counted());
        let e = by_file.entry(a.file).or_default();
        if a.touch == Touch::Gone {
            e.present = false;
            continue;
        }
        // A request earns a hit if the file was kept since its last access.
        e.hits += u64::from(a.counted() && e.present);
        e.present = true;
        e.charge = e.charge.max(a.charge);
        e.too_big |= a.charge > capacity;
    }
    let mut files: Vec<(u64, Earned)> = by_file.into_iter().filter(|(_, e)| e.hits > 0 && !e.too_big).collect();
    // Most hits per byte first (a file of no bytes first of all); the file
    // number breaks ties, for the same answer every time.
    files.sort_unstable_by(|(fa, a), (fb, b)| {
        (b.hits as u128 * a.charge as u128).cmp(&(a.hits as u128 * b.charge as u128)).then(fa.cmp(fb))
    });
    let mut used = 0u64;
    let mut kept: FxHashMap<u64, bool> = FxHashMap::default();
    for (f, e) in files {
        if used + e.charge <= capacity {
            used += e.charge;
            kept.insert(f, false);
        }
    }
    let (mut hits, mut bytes_admitted) = (0u64, 0u64);
    for a in log {
        let Some(present) = kept.get_mut(&a.file) else { continue };
        match a.touch {
            Touch::Gone => *present = false,
            Touch::Anchor => *present = true,
            Touch::Request { counted } => {
                if *present {
                    hits += u64::from(counted);
                } else {
                    bytes_admitted += a.charge;
                }
                *present = true;
            }
        }
    }
    Outcome { hits, requests, bytes_admitted }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::test_log::req;

    #[test]
    fn the_files_that_come_back_most_the_ssd_holds_from_their_first_access() {
        // Room for two: files 1 and 2 come back (2 and 1 times), 3 and 4
        // never do. Each file's first request copies it up and misses.
        let log: Vec<Access> = [1, 2, 1, 3, 1, 2, 4].iter().map(|&f| req(f, 10)).collect();
        let o = run(&log, 20);
        assert_eq!((o.hits, o.requests, o.bytes_admitted), (3, 7, 20));
        // A file created before its requests is there for its first one; a
        // request outside the measured run earns nothing but keeps it there.
        let mut log = vec![Access { file: 5, charge: 10, touch: Touch::Anchor }];
        log.extend([req(5, 10), req(5, 10)]);
        log.push(Access { file: 6, charge: 10, touch: Touch::Request { counted: false } });
        log.push(req(6, 10));
        assert_eq!((run(&log, 10).hits, run(&log, 10).bytes_admitted), (2, 0));
        assert_eq!((run(&log, 20).hits, run(&log, 20).bytes_admitted), (3, 10));
        // A removed file is not there for its next request.
        let log = vec![req(7, 10), Access { file: 7, charge: 10, touch: Touch::Gone }, req(7, 10), req(7, 10)];
        assert_eq!((run(&log, 10).hits, run(&log, 10).bytes_admitted), (1, 20));
    }
}
