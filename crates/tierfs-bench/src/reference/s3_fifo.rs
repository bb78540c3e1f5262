//! S3-FIFO (Yang et al., "FIFO queues are all you need for cache
//! eviction", SOSP'23), over bytes: a small FIFO of a tenth of the SSD
//! takes the files not seen lately; a file accessed again while there
//! moves on to the main FIFO when it reaches the small one's end, the
//! others leave and are remembered in a ghost FIFO (as many bytes of them
//! as the main FIFO holds); a file the ghost remembers enters the main
//! FIFO at once. The main FIFO gives each file leaving it another round
//! per access (up to three) since its last round.

use super::{Access, Held, Outcome, Touch};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// The small FIFO's share of the SSD, in tenths (a tenth, as in the paper).
const SMALL_TENTHS: u64 = 1;
/// The most rounds an access count buys (two bits).
const MAX_FREQ: u8 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Queue {
    Small,
    Main,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    queue: Queue,
    freq: u8,
    /// Which of its places in a queue is the live one.
    round: u64,
}

struct Cache {
    capacity: u64,
    held: Held,
    entries: FxHashMap<u64, Entry>,
    /// Files with their rounds, oldest first (a place whose round is not
    /// its file's is stale: the file left or went round again).
    small: VecDeque<(u64, u64)>,
    main: VecDeque<(u64, u64)>,
    small_bytes: u64,
    /// Files evicted from the small FIFO, with their rounds and charges.
    ghost: VecDeque<(u64, u64, u64)>,
    ghosts: FxHashMap<u64, u64>,
    ghost_bytes: u64,
    rounds: u64,
}

impl Cache {
    fn small_limit(&self) -> u64 {
        self.capacity * SMALL_TENTHS / 10
    }

    fn push(&mut self, file: u64, queue: Queue, freq: u8) {
        self.rounds += 1;
        let round = self.rounds;
        self.entries.insert(file, Entry { queue, freq, round });
        match queue {
            Queue::Small => {
                self.small.push_back((file, round));
                self.small_bytes += self.held.charge.get(&file).copied().unwrap_or(0);
            }
            Queue::Main => self.main.push_back((file, round)),
        }
    }

    /// Takes `file` out of the cache (its place in a queue goes stale).
    fn forget(&mut self, file: u64) {
        if let Some(e) = self.entries.remove(&file) {
            if e.queue == Queue::Small {
                self.small_bytes -= self.held.charge.get(&file).copied().unwrap_or(0);
            }
            self.held.remove(file);
        }
    }

    fn remember(&mut self, file: u64, charge: u64) {
        self.rounds += 1;
        self.ghosts.insert(file, self.rounds);
        self.ghost.push_back((file, self.rounds, charge));
        self.ghost_bytes += charge;
        let limit = self.capacity - self.small_limit();
        while self.ghost_bytes > limit {
            let Some((f, round, c)) = self.ghost.pop_front() else { break };
            self.ghost_bytes -= c;
            if self.ghosts.get(&f) == Some(&round) {
                self.ghosts.remove(&f);
            }
        }
    }

    /// Evicts one file (moving the files accessed while in the small FIFO
    /// on to the main one on the way); false if no file is left.
    fn evict(&mut self) -> bool {
        loop {
            let small = !self.small.is_empty() && (self.small_bytes >= self.small_limit() || self.main.is_empty());
            let place = if small { self.small.pop_front() } else { self.main.pop_front() };
            let Some((file, round)) = place else { return false };
            let Some(e) = self.entries.get(&file).copied().filter(|e| e.round == round) else { continue };
            let charge = self.held.charge.get(&file).copied().unwrap_or(0);
            self.entries.remove(&file);
            match (e.queue, e.freq) {
                (Queue::Small, 0) => {
                    self.small_bytes -= charge;
                    self.held.remove(file);
                    self.remember(file, charge);
                    return true;
                }
                (Queue::Small, _) => {
                    self.small_bytes -= charge;
                    self.push(file, Queue::Main, 0);
                }
                (Queue::Main, 0) => {
                    self.held.remove(file);
                    return true;
                }
                (Queue::Main, f) => self.push(file, Queue::Main, f - 1),
            }
        }
    }
}

/// S3-FIFO over `log` at an SSD of `capacity` bytes.
pub fn run(log: &[Access], capacity: u64) -> Outcome {
    let mut c = Cache {
        capacity,
        held: Held::default(),
        entries: FxHashMap::default(),
        small: VecDeque::new(),
        main: VecDeque::new(),
        small_bytes: 0,
        ghost: VecDeque::new(),
        ghosts: FxHashMap::default(),
        ghost_bytes: 0,
        rounds: 0,
    };
    let mut out = Outcome::default();
    for a in log {
        out.requests += u64::from(a.counted());
        match (a.touch, c.entries.get(&a.file).copied()) {
            (Touch::Gone, _) => c.forget(a.file),
            (Touch::Anchor, None) => {}
            (touch, Some(e)) => {
                if matches!(touch, Touch::Request { .. }) {
                    out.hits += u64::from(a.counted());
                    if let Some(e) = c.entries.get_mut(&a.file) {
                        e.freq = (e.freq + 1).min(MAX_FREQ);
                    }
                }
                if a.charge > capacity {
                    c.forget(a.file);
                    continue;
                }
                // It is as long as it is now.
                let old = c.held.charge.get(&a.file).copied().unwrap_or(0);
                if e.queue == Queue::Small {
                    c.small_bytes = c.small_bytes + a.charge - old;
                }
                c.held.insert(a.file, a.charge);
            }
            (Touch::Request { .. }, None) => {
                if a.charge > capacity {
                    continue;
                }
                out.bytes_admitted += a.charge;
                while c.held.used + a.charge > capacity && c.evict() {}
                c.held.insert(a.file, a.charge);
                let queue = if c.ghosts.remove(&a.file).is_some() { Queue::Main } else { Queue::Small };
                c.push(a.file, queue, 0);
            }
        }
        while c.held.used > capacity && c.evict() {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(file: u64) -> Access {
        Access { file, charge: 10, touch: Touch::Request { counted: true } }
    }

    #[test]
    fn one_hit_wonders_leave_through_the_small_fifo_and_the_hot_files_stay() {
        // Room for ten files (one in the small FIFO). Files 1 to 3 are read
        // twice early, then every read is of a file never seen again,
        // with 1 to 3 read again now and then: the scan passes through the
        // small FIFO and 1 to 3 stay in the main one.
        let mut log = Vec::new();
        for f in [1, 2, 3, 1, 2, 3] {
            log.push(req(f));
        }
        for k in 0..200u64 {
            log.push(req(100 + k));
            if k % 20 == 19 {
                log.extend([req(1), req(2), req(3)]);
            }
        }
        let s3 = run(&log, 100);
        let lru = super::super::lru::run(&log, 100);
        // 3 from the start, 30 of the later re-reads.
        assert_eq!(s3.hits, 33, "{s3:?}");
        assert!(lru.hits < s3.hits, "{lru:?}");
    }
}
