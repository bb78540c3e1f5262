//! What a replay's architecture is measured against: the offline optimum
//! ([`opt`]) and the online cache policies a researcher compares with
//! ([`lru`], [`s3_fifo`]), each run over the same file requests the
//! replay served, at the same SSD capacity and file cut; and the best
//! fixed set of files ([`fixed`]), the ceiling of frequency ranking.
//!
//! The replay logs what the SSD could do at each of its reads and writes
//! ([`Access`]); the baselines run over that log as a cache simulator
//! (libCacheSim's way) does: a file is admitted, or not, at once and for
//! nothing when it is accessed, and the hit ratio is over the reads and
//! writes of the measured run, the replay's own. They see no device, no
//! tick and no migrator: they are what the choice of files alone can
//! reach, where the architectures also pay for their moves' time.

pub mod fixed;
pub mod lru;
pub mod opt;
pub mod s3_fifo;

use serde::{Deserialize, Serialize};

/// What happens to a file at one point of a replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Touch {
    /// A read or write: served by the SSD if the file is there (a hit, if
    /// `counted`: in the measured run). After it, the file may be admitted.
    Request {
        /// Part of the measured run.
        counted: bool,
    },
    /// Created, or resized by other than a write (a truncate, an open that
    /// shows an older file longer): the file may start on the SSD from here
    /// without a move (a new file is written where the policy puts it).
    Anchor,
    /// Removed.
    Gone,
}

/// One point of the log: a file, its SSD charge from here on (its size
/// in whole allocation units), and what happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// The file.
    pub file: u64,
    /// Bytes it takes on the SSD after this point.
    pub charge: u64,
    /// What happens.
    pub touch: Touch,
}

impl Access {
    /// A read or write of the measured run.
    pub fn counted(self) -> bool {
        self.touch == Touch::Request { counted: true }
    }
}

/// How a baseline did over a log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Requests of the measured run the SSD served.
    pub hits: u64,
    /// Requests of the measured run.
    pub requests: u64,
    /// Bytes copied to the SSD after a request (files created there are
    /// not counted: they are written there, not moved).
    pub bytes_admitted: u64,
}

impl Outcome {
    /// The share of requests the SSD served (0 without requests).
    pub fn hit_ratio(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.hits as f64 / self.requests as f64
        }
    }
}

/// The baselines of one replay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reference {
    /// The offline optimum.
    pub opt: opt::Optimum,
    /// Least recently used, admitting every file accessed.
    pub lru: Outcome,
    /// S3-FIFO (Yang et al., SOSP'23).
    pub s3_fifo: Outcome,
    /// The best fixed set of files ([`fixed`]): the ceiling of policies
    /// that rank files by use on a trace whose popularity does not change.
    #[serde(default)]
    pub fixed: Outcome,
}

impl Reference {
    /// The baselines over `log` at an SSD of `capacity` bytes.
    pub fn of(log: &[Access], capacity: u64) -> Reference {
        Reference {
            opt: opt::optimum(log, capacity),
            lru: lru::run(log, capacity),
            s3_fifo: s3_fifo::run(log, capacity),
            fixed: fixed::run(log, capacity),
        }
    }

    /// The better of the two online baselines' hit ratios.
    pub fn best_online(&self) -> f64 {
        self.lru.hit_ratio().max(self.s3_fifo.hit_ratio())
    }
}

/// The SSD's content in a cache simulation: files with their charges and
/// the bytes they take together.
#[derive(Debug, Default)]
struct Held {
    charge: rustc_hash::FxHashMap<u64, u64>,
    used: u64,
}

impl Held {
    fn contains(&self, file: u64) -> bool {
        self.charge.contains_key(&file)
    }
    fn insert(&mut self, file: u64, charge: u64) {
        let old = self.charge.insert(file, charge).unwrap_or(0);
        self.used = self.used + charge - old;
    }
    fn remove(&mut self, file: u64) -> bool {
        match self.charge.remove(&file) {
            Some(c) => {
                self.used -= c;
                true
            }
            None => false,
        }
    }
}

/// Logs for the baselines' tests.
#[cfg(test)]
pub(crate) mod test_log {
    use super::{Access, Touch};
    use proptest::prelude::*;

    /// A read or write of the measured run.
    pub fn req(file: u64, charge: u64) -> Access {
        Access { file, charge, touch: Touch::Request { counted: true } }
    }

    /// Fewer than `len` points over 5 files whose charges are drawn from
    /// `sizes`: mostly requests, in the measured run or not, some
    /// creations and removals.
    pub fn arb_log(sizes: Vec<u64>, len: usize) -> impl Strategy<Value = Vec<Access>> {
        let touch = prop_oneof![
            8 => any::<bool>().prop_map(|counted| Touch::Request { counted }),
            1 => Just(Touch::Anchor),
            1 => Just(Touch::Gone),
        ];
        proptest::collection::vec((0u64..5, proptest::sample::select(sizes), touch), 1..len)
            .prop_map(|v| v.into_iter().map(|(file, charge, touch)| Access { file, charge, touch }).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::test_log::arb_log;
    use super::*;
    use proptest::prelude::*;

    fn never_beaten(log: &[Access], capacity: u64) -> Result<(), TestCaseError> {
        let r = Reference::of(log, capacity);
        let requests = log.iter().filter(|a| a.counted()).count() as u64;
        for (name, o) in [("LRU", r.lru), ("S3-FIFO", r.s3_fifo), ("fixed set", r.fixed)] {
            prop_assert_eq!(o.requests, requests, "{}", name);
            prop_assert!(
                o.hits <= r.opt.bound,
                "{} served {} of {} requests, the optimum at most {} ({:?})",
                name,
                o.hits,
                requests,
                r.opt.bound,
                r.opt.method
            );
        }
        prop_assert!(r.opt.best.hits <= r.opt.bound);
        Ok(())
    }

    proptest! {
        #[test]
        fn no_baseline_beats_the_optimum_when_files_take_the_same_room(
            log in arb_log(vec![4096], 60), slots in 0u64..5,
        ) {
            never_beaten(&log, slots * 4096)?;
        }

        #[test]
        fn no_baseline_beats_the_optimum_whatever_the_sizes(
            log in arb_log(vec![0, 4096, 8192, 20480], 40), cap in 0u64..40_000,
        ) {
            never_beaten(&log, cap)?;
        }
    }
}
