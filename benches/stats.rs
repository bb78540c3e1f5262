//! Statistics benchmarks: event ingestion rate, hottest/coldest query time
//! at 10^4, 10^5 and 10^6 tracked files, and one aging pass (every counter
//! halved, the maps rebuilt) at 10^5 and 10^6 accessed files.
//!
//! cargo bench --bench stats

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tierfs_core::clock::Timestamp;
use tierfs_core::event::{Event, EventKind};
use tierfs_core::stats::{FileStats, Residence, Stats, DEFAULT_AGING};
use tierfs_core::tier::Tier;

/// `n` files, a quarter on the SSD, with spread-out counters.
fn populated(n: u64) -> Stats {
    let mut s = Stats::new(DEFAULT_AGING);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for ino in 2..n + 2 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let residence = if ino % 4 == 0 { Residence::Ssd } else { Residence::Hdd };
        s.insert(
            ino,
            FileStats { counter: (x % 10_000) as u32, seq: ino, residence, size: 4096, ..FileStats::default() },
        );
    }
    s
}

fn ingestion(c: &mut Criterion) {
    let mut g = c.benchmark_group("ingest");
    let n = 100_000u64;
    let events: Vec<Event> = (0..10_000u64)
        .map(|i| {
            Event::new(
                2 + (i * 7919) % n,
                Timestamp::from_secs(1_000 + i / 1000),
                EventKind::Read { off: (i % 64) * 4096, len: 4096, tier: Tier::Hdd, fragment: false },
            )
        })
        .collect();
    g.throughput(Throughput::Elements(events.len() as u64));
    g.bench_function("4k-reads-into-100k-files", |b| {
        let mut s = populated(n);
        b.iter(|| {
            for e in &events {
                s.apply(e, &mut |_| 0);
            }
        })
    });
    g.finish();
}

fn queries(c: &mut Criterion) {
    let mut g = c.benchmark_group("query");
    for n in [10_000u64, 100_000, 1_000_000] {
        let s = populated(n);
        g.bench_with_input(BenchmarkId::new("hottest-hdd", n), &s, |b, s| {
            b.iter(|| black_box(s.hottest(0, Residence::Hdd).next().map(|x| x.0)))
        });
        g.bench_with_input(BenchmarkId::new("coldest-ssd", n), &s, |b, s| {
            b.iter(|| black_box(s.coldest_on_ssd(&mut |_, _| false).map(|x| x.0)))
        });
    }
    g.finish();
}

fn aging(c: &mut Criterion) {
    let mut g = c.benchmark_group("age");
    g.sample_size(10);
    for n in [100_000u64, 1_000_000] {
        let mut s = populated(n);
        let mut t = 0u64;
        s.age(Timestamp::from_secs(t));
        // One aging period per call: every counter is halved (after 14
        // calls they are all zero, and the pass still visits each file).
        g.bench_function(BenchmarkId::new("one-period", n), |b| {
            b.iter(|| {
                t += DEFAULT_AGING.as_secs();
                black_box(s.age(Timestamp::from_secs(t)))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, ingestion, queries, aging);
criterion_main!(benches);
