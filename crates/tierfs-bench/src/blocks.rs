//! Block traces for the simulator: the requests one disk sees, to be cut
//! into files (`tierfs_sim::import::Chunker`) and replayed, so that the
//! architectures are compared on them with the offline optimum and the
//! online cache policies (`crate::reference`).
//!
//! Every trace reads and writes 4-KiB pieces of 64-KiB regions of a 4-GiB
//! disk, the region drawn by Zipf popularity (s = 0.9) over a seeded
//! permutation of the regions (the hot ones are scattered over the disk),
//! 20 % of them writes, at 50 requests a second on average (exponential
//! gaps: an emulated 7 200 rpm disk serves about 110 random requests a
//! second, and the moves need some of its time too). Three shapes:
//!
//! - `zipf`: that alone, the same popularity throughout;
//! - `scan`: the same, and every 10 000 requests a backup or a report
//!   reads 256 MiB of the disk sequentially in 1-MiB requests, from a
//!   random place: data read once, which must not push the hot regions out;
//! - `shifting`: the popularity is drawn anew (another permutation) at
//!   each third of the trace: the hot set moves twice.

use crate::rng::{Rng, Zipf};

/// The shapes, by name.
pub const NAMES: [&str; 3] = ["zipf", "scan", "shifting"];

/// The disk's size.
pub const SPAN: u64 = 4 << 30;
/// The unit of popularity.
pub const REGION: u64 = 64 << 10;
/// A random request.
pub const REQUEST: u64 = 4 << 10;
/// The Zipf exponent over regions.
pub const ZIPF_S: f64 = 0.9;
/// The share of random requests that write.
pub const WRITE_SHARE: f64 = 0.2;
/// The mean time between requests.
pub const MEAN_GAP_NS: u64 = 20_000_000;
/// Random requests between two scans (`scan`).
pub const SCAN_EVERY: u64 = 10_000;
/// Bytes one scan reads.
pub const SCAN_BYTES: u64 = 256 << 20;
/// One scan request.
pub const SCAN_REQUEST: u64 = 1 << 20;
/// The popularity's phases (`shifting`).
pub const PHASES: u64 = 3;
/// The size of the files the disk is cut into unless asked otherwise.
pub const FILE_SIZE: u64 = 256 << 10;
/// The length of a trace unless asked otherwise: 200 000 random requests.
pub const DURATION: std::time::Duration = std::time::Duration::from_secs(4000);

/// The random requests of a trace `duration` long.
pub fn requests_in(duration: std::time::Duration) -> u64 {
    (duration.as_nanos() / u128::from(MEAN_GAP_NS)) as u64
}

/// How the requests are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Zipf popularity throughout.
    Zipf,
    /// Zipf popularity and sequential scans.
    Scan,
    /// Zipf popularity drawn anew at each third.
    Shifting,
}

/// One request to the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockRequest {
    /// Nanoseconds from the start.
    pub time_ns: u64,
    /// Byte address.
    pub off: u64,
    /// Bytes.
    pub len: u64,
    /// A write (else a read).
    pub write: bool,
}

/// A block trace to generate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Blocks {
    /// Its shape.
    pub shape: Shape,
    /// Random requests (a scan's requests come on top).
    pub requests: u64,
    /// Random seed of the requests (the hot regions are a property of the
    /// disk, drawn from a seed of their own).
    pub seed: u64,
}

/// The regions of the disk, hottest first, in popularity phase `phase`.
fn hot_order(phase: u64) -> Vec<u64> {
    let mut r = Rng::new(0xb10c ^ phase.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut v: Vec<u64> = (0..SPAN / REGION).collect();
    for i in (1..v.len()).rev() {
        let j = r.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
    v
}

fn exponential(rng: &mut Rng, mean: f64) -> f64 {
    // 1 - f64() is in (0, 1]: the logarithm is finite.
    -mean * (1.0 - rng.f64()).ln()
}

impl Blocks {
    /// A shape by name ([`NAMES`]).
    pub fn by_name(name: &str, requests: u64, seed: u64) -> Option<Blocks> {
        let shape = match name {
            "zipf" => Shape::Zipf,
            "scan" => Shape::Scan,
            "shifting" => Shape::Shifting,
            _ => return None,
        };
        Some(Blocks { shape, requests, seed })
    }

    /// Its name.
    pub fn name(&self) -> &'static str {
        match self.shape {
            Shape::Zipf => "zipf",
            Shape::Scan => "scan",
            Shape::Shifting => "shifting",
        }
    }

    /// The requests, in time order.
    pub fn generate(&self) -> Vec<BlockRequest> {
        let mut rng = Rng::new(self.seed);
        let zipf = Zipf::new((SPAN / REGION) as usize, ZIPF_S);
        let mut order = hot_order(0);
        let mut phase = 0;
        let mut t = 0f64;
        let mut out = Vec::with_capacity(self.requests as usize);
        for i in 0..self.requests {
            if self.shape == Shape::Shifting {
                let p = i * PHASES / self.requests.max(1);
                if p != phase {
                    phase = p;
                    order = hot_order(p);
                }
            }
            if self.shape == Shape::Scan && i > 0 && i % SCAN_EVERY == 0 {
                let start = rng.below(SPAN / SCAN_REQUEST) * SCAN_REQUEST;
                for k in 0..SCAN_BYTES / SCAN_REQUEST {
                    t += exponential(&mut rng, MEAN_GAP_NS as f64);
                    let off = (start + k * SCAN_REQUEST) % SPAN;
                    out.push(BlockRequest { time_ns: t as u64, off, len: SCAN_REQUEST, write: false });
                }
            }
            t += exponential(&mut rng, MEAN_GAP_NS as f64);
            let region = order[zipf.sample(&mut rng)];
            let off = region * REGION + rng.below(REGION / REQUEST) * REQUEST;
            let write = rng.chance(WRITE_SHARE);
            out.push(BlockRequest { time_ns: t as u64, off, len: REQUEST, write });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn regions(reqs: &[BlockRequest]) -> HashMap<u64, u64> {
        let mut n = HashMap::new();
        for r in reqs.iter().filter(|r| r.len == REQUEST) {
            *n.entry(r.off / REGION).or_insert(0) += 1;
        }
        n
    }

    #[test]
    fn zipf_requests_favour_a_few_regions_and_write_a_fifth() {
        let reqs = Blocks::by_name("zipf", 50_000, 1).unwrap().generate();
        assert_eq!(reqs.len(), 50_000);
        assert!(reqs.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
        let writes = reqs.iter().filter(|r| r.write).count() as f64 / 5e4;
        assert!((0.18..0.22).contains(&writes), "{writes}");
        let mean_gap = reqs.last().unwrap().time_ns as f64 / 5e4;
        assert!((18e6..22e6).contains(&mean_gap), "{mean_gap}");
        let mut counts: Vec<u64> = regions(&reqs).into_values().collect();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        // The hottest tenth of the regions touched take most requests.
        let top: u64 = counts.iter().take(counts.len() / 10).sum();
        assert!(top > 25_000, "{top} of 50 000");
        assert_eq!(reqs, Blocks::by_name("zipf", 50_000, 1).unwrap().generate(), "seeded");
    }

    #[test]
    fn scans_read_long_runs_once_and_the_shifting_hot_set_moves() {
        let reqs = Blocks::by_name("scan", 25_000, 1).unwrap().generate();
        let scans: Vec<&BlockRequest> = reqs.iter().filter(|r| r.len == SCAN_REQUEST).collect();
        assert_eq!(scans.len() as u64, 2 * SCAN_BYTES / SCAN_REQUEST);
        assert!(scans.iter().all(|r| !r.write));
        assert!(scans.windows(2).take(100).all(|w| w[1].off == (w[0].off + SCAN_REQUEST) % SPAN));
        // Shifting: the hottest region of the first third is not among the
        // hot ones of the last.
        let reqs = Blocks::by_name("shifting", 60_000, 1).unwrap().generate();
        let first = regions(&reqs[..20_000]);
        let last = regions(&reqs[40_000..]);
        let hottest = first.iter().max_by_key(|(_, &n)| n).map(|(&r, _)| r).unwrap();
        assert!(first[&hottest] > 200, "{}", first[&hottest]);
        assert!(last.get(&hottest).copied().unwrap_or(0) < 20, "{:?}", last.get(&hottest));
    }
}
