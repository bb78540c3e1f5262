//! Least recently used, over bytes: every file accessed is admitted (if it
//! fits the SSD at all), and the files used longest ago make room.

use super::{Access, Held, Outcome, Touch};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// LRU over `log` at an SSD of `capacity` bytes.
pub fn run(log: &[Access], capacity: u64) -> Outcome {
    let mut held = Held::default();
    // Last use of each file held, and the files by last use.
    let mut last: FxHashMap<u64, usize> = FxHashMap::default();
    let mut by_use: BTreeMap<usize, u64> = BTreeMap::new();
    let mut out = Outcome::default();
    for (i, a) in log.iter().enumerate() {
        let here = held.contains(a.file);
        out.requests += u64::from(a.counted());
        if let Some(at) = last.remove(&a.file) {
            by_use.remove(&at);
        }
        match a.touch {
            Touch::Gone => {
                held.remove(a.file);
                continue;
            }
            Touch::Anchor if !here => continue,
            Touch::Anchor => {}
            Touch::Request { .. } => {
                if here {
                    out.hits += u64::from(a.counted());
                } else if a.charge <= capacity {
                    out.bytes_admitted += a.charge;
                }
            }
        }
        if a.charge > capacity {
            held.remove(a.file);
            continue;
        }
        held.insert(a.file, a.charge);
        while held.used > capacity {
            let Some((_, f)) = by_use.pop_first() else { break };
            last.remove(&f);
            held.remove(f);
        }
        last.insert(a.file, i);
        by_use.insert(i, a.file);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::test_log::req;

    #[test]
    fn the_least_recently_used_file_makes_room() {
        // Room for two: 1 2 1 3 evicts 2; 1 hits, 2 misses.
        let log: Vec<Access> = [1, 2, 1, 3, 1, 2].iter().map(|&f| req(f, 10)).collect();
        let o = run(&log, 20);
        assert_eq!((o.hits, o.requests, o.bytes_admitted), (2, 6, 40));
        // A file larger than the SSD is never admitted, and evicts nothing.
        let log = vec![req(1, 10), req(2, 30), req(1, 10)];
        assert_eq!(run(&log, 20).hits, 1);
    }
}
