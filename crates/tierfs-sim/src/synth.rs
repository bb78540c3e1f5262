//! Synthetic block workloads: HybridStore's (Table IV), sequential or
//! random, read or write dominant, at low, medium or high intensity; and
//! the Zipf, scan and shifting traces of `tierfs_bench::blocks` ([`blocks`]).
//!
//! | name | reads | mean request | mean inter-arrival |
//! |---|---|---|---|
//! | SR1, SR2, SR3 | 80 % | 128 KiB, sequential | 100, 2, 0.1 ms |
//! | RR1, RR2, RR3 | 80 % | 4 KiB, random | 100, 2, 0.1 ms |
//! | SW1, SW2, SW3 | 20 % | 128 KiB, sequential | 100, 2, 0.1 ms |
//! | RW1, RW2, RW3 | 20 % | 4 KiB, random | 100, 2, 0.1 ms |
//!
//! As in the paper, inter-arrival times and request sizes are drawn from
//! exponential distributions with those means (sizes rounded up to whole
//! 512-byte sectors). A sequential request continues where the previous
//! one ended; a random one starts at a sector-aligned address drawn
//! uniformly over the span. The requests go through the same
//! [`Chunker`](crate::import::Chunker) as imported block traces.

use crate::import::{cut_size, BlockIo, Chunker};
use tierfs_bench::blocks::Blocks;
use tierfs_bench::rng::Rng;
use tierfs_core::trace::{Meta, Record};

/// One of Table IV's workloads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Synthetic {
    /// Its name (SR1 ... RW3).
    pub name: &'static str,
    /// Share of requests that read.
    pub read_share: f64,
    /// Mean request size, bytes.
    pub mean_size: u64,
    /// Sequential (else random).
    pub sequential: bool,
    /// Mean time between requests, nanoseconds.
    pub mean_gap_ns: u64,
}

/// Table IV.
pub fn table_iv() -> Vec<Synthetic> {
    const NAMES: [[&str; 3]; 4] =
        [["SR1", "SR2", "SR3"], ["RR1", "RR2", "RR3"], ["SW1", "SW2", "SW3"], ["RW1", "RW2", "RW3"]];
    const KINDS: [(f64, u64, bool); 4] =
        [(0.8, 128 << 10, true), (0.8, 4 << 10, false), (0.2, 128 << 10, true), (0.2, 4 << 10, false)];
    const GAPS_NS: [u64; 3] = [100_000_000, 2_000_000, 100_000];
    let mut v = Vec::new();
    for (names, (read_share, mean_size, sequential)) in NAMES.iter().zip(KINDS) {
        for (name, mean_gap_ns) in names.iter().zip(GAPS_NS) {
            v.push(Synthetic { name, read_share, mean_size, sequential, mean_gap_ns });
        }
    }
    v
}

/// Looks a workload up by name (case does not matter).
pub fn by_name(name: &str) -> Option<Synthetic> {
    table_iv().into_iter().find(|s| s.name.eq_ignore_ascii_case(name))
}

fn exponential(rng: &mut Rng, mean: f64) -> f64 {
    // 1 - f64() is in (0, 1]: the logarithm is finite.
    -mean * (1.0 - rng.f64()).ln()
}

impl Synthetic {
    /// The requests of `duration_ns` of this workload over `span` bytes,
    /// cut into files of `file_size`, as trace records.
    pub fn generate(&self, duration_ns: u64, span: u64, file_size: u64, seed: u64) -> Vec<Record> {
        let mut rng = Rng::new(seed);
        let mut chunker = Chunker::new(file_size);
        let sectors = (span / 512).max(1);
        let (mut t, mut next) = (0f64, 0u64);
        loop {
            t += exponential(&mut rng, self.mean_gap_ns as f64);
            if t >= duration_ns as f64 {
                break;
            }
            let len = (exponential(&mut rng, self.mean_size as f64) / 512.0).ceil().max(1.0) as u64 * 512;
            let len = len.min(sectors * 512);
            let start = if self.sequential { next } else { rng.below(sectors) * 512 };
            let start = if start + len > sectors * 512 { 0 } else { start };
            next = start + len;
            let write = !rng.chance(self.read_share);
            chunker.push(&BlockIo { time_ns: t as u64, disk: "synthetic".into(), write, off: start, len });
        }
        chunker.finish()
    }
}

/// `b`'s requests cut into files of `file_size` (the disk is one
/// directory; its files exist before the trace), with the trace's
/// metadata.
pub fn blocks(b: &Blocks, file_size: u64) -> (Meta, Vec<Record>) {
    let mut chunker = Chunker::new(file_size);
    for r in b.generate() {
        chunker.push(&BlockIo { time_ns: r.time_ns, disk: b.name().into(), write: r.write, off: r.off, len: r.len });
    }
    let meta = Meta {
        source: format!("synthetic:{}", b.name()),
        note: format!("{} random requests, seed {}, files of {} bytes", b.requests, b.seed, cut_size(file_size)),
        existing_size: Some(cut_size(file_size)),
        ..Meta::default()
    };
    (meta, chunker.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierfs_core::trace::Kind;

    #[test]
    fn table_iv_has_twelve_workloads_with_the_papers_parameters() {
        let t = table_iv();
        assert_eq!(t.len(), 12);
        let rw3 = by_name("rw3").unwrap();
        assert_eq!((rw3.read_share, rw3.mean_size, rw3.sequential, rw3.mean_gap_ns), (0.2, 4096, false, 100_000));
        let sr1 = by_name("SR1").unwrap();
        assert_eq!((sr1.read_share, sr1.mean_size, sr1.sequential, sr1.mean_gap_ns), (0.8, 131072, true, 100_000_000));
    }

    #[test]
    fn generated_requests_match_the_rates_and_mixes_asked_for() {
        let w = by_name("RR2").unwrap();
        let recs = w.generate(20_000_000_000, 1 << 30, 64 << 20, 7);
        let io: Vec<_> = recs.iter().filter(|r| r.kind.is_io()).collect();
        // 20 s at one request per 2 ms: about 10 000 (random requests
        // rarely cross a file boundary).
        assert!((9_500..10_500).contains(&io.len()), "{}", io.len());
        let reads = io.iter().filter(|r| r.kind == Kind::Read).count() as f64 / io.len() as f64;
        assert!((0.77..0.83).contains(&reads), "{reads}");
        let mean = io.iter().map(|r| r.len).sum::<u64>() as f64 / io.len() as f64;
        assert!((3800.0..4800.0).contains(&mean), "mean size {mean}");
        assert_eq!(recs, w.generate(20_000_000_000, 1 << 30, 64 << 20, 7), "same seed, same trace");
    }

    #[test]
    fn a_block_trace_is_cut_into_files_that_exist_before_it() {
        let b = Blocks::by_name("scan", 10_001, 3).unwrap();
        let (meta, recs) = blocks(&b, 256 << 10);
        assert_eq!(meta.existing_size, Some(256 << 10));
        assert!(recs.iter().all(|r| r.kind.is_io() && r.off + r.len <= 256 << 10));
        // A scan's 1-MiB requests are four whole files each.
        let whole = recs.iter().filter(|r| r.len == 256 << 10).count() as u64;
        assert_eq!(whole, 4 * tierfs_bench::blocks::SCAN_BYTES / tierfs_bench::blocks::SCAN_REQUEST);
    }

    #[test]
    fn sequential_requests_continue_each_other() {
        let recs = by_name("SW2").unwrap().generate(2_000_000_000, 1 << 40, 1 << 40, 1);
        let io: Vec<_> = recs.iter().filter(|r| r.kind.is_io()).collect();
        for p in io.windows(2) {
            assert_eq!(p[1].off, p[0].off + p[0].len);
        }
    }
}
