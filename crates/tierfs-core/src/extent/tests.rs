//! The monitor as a whole, with a manual clock: periods, the smooth update
//! over successive periods, a scan that must not flush the hot chunks, and
//! the tests of the inverse bitmap and chunk arithmetic.

use super::*;
use crate::clock::{Clock, ManualClock};

const C: u64 = 65536;

/// The first plan: the tick that finds the first statistics starts the
/// period, and the tick a period later chooses.
fn first_plan(m: &mut Monitor, clock: &ManualClock, period: Duration, capacity: u64) -> ResidentPlan {
    assert_eq!(m.on_tick(clock.now(), capacity), None);
    clock.advance(period);
    m.on_tick(clock.now(), capacity).expect("a period after the first statistics")
}

#[test]
fn hystor_equation_4_1() {
    assert_eq!(weight(0), 0);
    assert_eq!(weight(1), 128);
    assert_eq!(weight(2), 64);
    assert_eq!(weight(3), 64);
    assert_eq!(weight(8), 16); // 4 KiB
    assert_eq!(weight(16), 8); // 8 KiB
    assert_eq!(weight(127), 2);
    assert_eq!(weight(128), 1); // 64 KiB
    assert_eq!(weight(1 << 20), 1);
    assert_eq!(sectors(0, 4096), 8);
    assert_eq!(sectors(511, 2), 2);
    assert_eq!(sectors(7, 0), 0);
}

#[test]
fn chunk_sizes_are_powers_of_two_from_4k_to_1m() {
    assert_eq!(ChunkSize::new(65536), Some(ChunkSize::DEFAULT));
    assert_eq!(ChunkSize::new(4096), Some(ChunkSize::MIN));
    assert_eq!(ChunkSize::new(1 << 20), Some(ChunkSize::MAX));
    for bad in [0, 2048, 3 << 12, 2 << 20, u64::MAX] {
        assert_eq!(ChunkSize::new(bad), None, "{bad}");
    }
    let k64 = ChunkSize::DEFAULT;
    assert_eq!(k64.chunks(0, 0), 0..0);
    assert_eq!(k64.chunks(65535, 1), 0..1);
    assert_eq!(k64.chunks(65535, 2), 0..2);
    assert_eq!(k64.chunks(u64::MAX - 1, 5), (u64::MAX >> 16)..(u64::MAX >> 16) + 1);
    assert_eq!(k64.count(0), 0);
    assert_eq!(k64.count(65537), 2);
    assert_eq!((k64.within(0, 100), k64.within(1, 100), k64.within(1, 65536 + 7)), (100, 0, 7));
    assert_eq!((k64.within(0, 1 << 20), k64.within(u64::MAX, u64::MAX)), (65536, 0));
    assert_eq!(k64.to_string(), "64K");
}

#[test]
fn the_monitor_chooses_once_per_period() {
    let clock = ManualClock::new(Timestamp::from_secs(100));
    let mut m = Monitor::new(Duration::from_secs(10), 10);
    // No statistics: no period starts.
    assert_eq!(m.on_tick(clock.now(), 4 * C), None);
    clock.advance(Duration::from_secs(60));
    m.on_access(1, ChunkSize::DEFAULT, 0, 8192);
    // The first tick with statistics starts the first period.
    assert_eq!(m.on_tick(clock.now(), 4 * C), None);
    clock.advance(Duration::from_secs(10));
    let p = m.on_tick(clock.now(), 4 * C).expect("a period after the first statistics");
    assert_eq!(p.add.iter().map(|c| c.id).collect::<Vec<_>>(), vec![ChunkId::new(1, 0)]);
    clock.advance(Duration::from_secs(9));
    assert_eq!(m.on_tick(clock.now(), 4 * C), None);
    clock.advance(Duration::from_secs(1));
    let p = m.on_tick(clock.now(), 4 * C).expect("a period passed");
    assert!(p.is_empty(), "{p:?}");
}

/// 100 hot chunks of a 64 MiB file are read at random in 8 KiB requests
/// (weight 8 each); then, every period, the reads go on and a scan reads
/// the whole file in 1 MiB requests (weight 1 per chunk). An LRU cache of
/// 100 chunks would hold only scanned chunks after each scan; here each
/// period replaces at most 10 % of the area, and the scan's chunks, counted
/// 1 per pass, win only the share Program 1's proportions give them.
#[test]
fn a_scan_does_not_flush_the_hot_chunks() {
    let clock = ManualClock::new(Timestamp::from_secs(0));
    let mut m = Monitor::new(Duration::from_secs(10), 10);
    let k64 = ChunkSize::DEFAULT;
    let hot: Vec<u64> = (0..100).map(|i| i * 7 + 3).collect();
    let capacity = 100 * C;
    let reads = |m: &mut Monitor, round: usize| {
        for (n, &c) in hot.iter().enumerate() {
            for k in 0..(8 + (n + round) % 5) {
                m.on_access(1, k64, c * C + (k as u64 % 8) * 8192, 8192);
            }
        }
    };
    for round in 0..5 {
        reads(&mut m, round);
        m.on_tick(clock.now(), capacity);
        clock.advance(Duration::from_secs(10));
    }
    let resident: std::collections::HashSet<u64> = m.resident.top_down().map(|id| id.index).collect();
    assert_eq!(resident.len(), 100);
    assert!(hot.iter().all(|c| resident.contains(c)), "warm-up did not place the hot chunks");
    for round in 5..10 {
        reads(&mut m, round);
        for off in (0..64u64 << 20).step_by(1 << 20) {
            m.on_access(1, k64, off, 1 << 20);
        }
        let p = m.on_tick(clock.now(), capacity).expect("period");
        assert!(p.drop.len() <= 10, "{} replaced in one period", p.drop.len());
        clock.advance(Duration::from_secs(10));
    }
    let kept = m.resident.top_down().filter(|id| hot.contains(&id.index)).count();
    assert!(kept >= 90, "five scans flushed {} of 100 hot chunks", 100 - kept);
}

/// The hot set moves to other chunks: the area follows it at no more than
/// the update share per period (10 % of 50 chunks: 5), and has nearly
/// followed it after enough periods. The old set keeps a share in
/// proportion to its counters: the block table forgets only by its
/// overflow shifts (Hystor §4.2).
#[test]
fn the_area_follows_a_moving_hot_set_gradually() {
    let clock = ManualClock::new(Timestamp::from_secs(0));
    let mut m = Monitor::new(Duration::from_secs(5), 10);
    let k64 = ChunkSize::DEFAULT;
    let capacity = 50 * C;
    let heat = |m: &mut Monitor, base: u64, times: usize| {
        for c in base..base + 50 {
            for _ in 0..times {
                m.on_access(7, k64, c * C, 4096);
            }
        }
    };
    heat(&mut m, 0, 2);
    first_plan(&mut m, &clock, Duration::from_secs(5), capacity);
    assert_eq!(m.resident.len(), 50);
    for period in 1..=30 {
        heat(&mut m, 1000, 4);
        clock.advance(Duration::from_secs(5));
        let p = m.on_tick(clock.now(), capacity).expect("period");
        assert!(p.drop.len() <= 5, "period {period}: {} replaced", p.drop.len());
        let new = m.resident.top_down().filter(|id| id.index >= 1000).count();
        assert!(new <= 5 * period, "period {period}: {new} new chunks");
    }
    let new = m.resident.top_down().filter(|id| id.index >= 1000).count();
    assert!(new >= 45, "after 30 periods only {new} of 50 chunks follow the new hot set");
}

#[test]
fn forget_and_truncate_clear_statistics_and_resident_chunks() {
    let clock = ManualClock::new(Timestamp::from_secs(0));
    let mut m = Monitor::default();
    for c in 0..10 {
        m.on_access(3, ChunkSize::DEFAULT, c * C, 4096);
    }
    first_plan(&mut m, &clock, defaults::PERIOD, 10 * C);
    assert_eq!(m.resident.len(), 10);
    let gone = m.truncate(3, 5 * C + 1);
    assert_eq!(gone.iter().map(|id| id.index).collect::<Vec<_>>(), vec![6, 7, 8, 9]);
    assert_eq!(m.table.counter(ChunkId::new(3, 5)), 16);
    assert_eq!(m.table.counter(ChunkId::new(3, 6)), 0);
    assert_eq!(m.forget(3).len(), 6);
    assert_eq!(m.table.files(), 0);
    assert!(m.resident.is_empty());
}

/// Found in review: the candidates of the last period outlived a forgotten
/// file, so a new file given the same inode number found its first chosen
/// chunk already strong, and it pushed a resident chunk out at once.
#[test]
fn a_forgotten_files_last_candidates_do_not_make_a_new_files_chunks_strong() {
    let clock = ManualClock::new(Timestamp::from_secs(0));
    let period = Duration::from_secs(10);
    let mut m = Monitor::new(period, 100);
    let k64 = ChunkSize::DEFAULT;
    m.on_access(2, k64, 0, 4096);
    m.on_access(2, k64, C, 4096);
    first_plan(&mut m, &clock, period, 2 * C);
    let resident = |m: &Monitor| {
        let mut v: Vec<_> = m.resident.top_down().map(|id| (id.ino, id.index)).collect();
        v.sort();
        v
    };
    assert_eq!(resident(&m), vec![(2, 0), (2, 1)]);
    let heat = |m: &mut Monitor| {
        for _ in 0..100 {
            m.on_access(1, k64, 5 * C, 4096);
        }
    };
    let tick = |m: &mut Monitor| {
        clock.advance(period);
        m.on_tick(clock.now(), 2 * C).expect("a period");
    };
    // Chosen once: not yet strong.
    heat(&mut m);
    tick(&mut m);
    assert_eq!(resident(&m), vec![(2, 0), (2, 1)]);
    // The file goes; a new one with its inode number is as hot at once.
    m.forget(1);
    heat(&mut m);
    tick(&mut m);
    assert_eq!(resident(&m), vec![(2, 0), (2, 1)], "a new file's chunk was strong at once");
    // Chosen twice: it replaces the resident chunk not chosen.
    tick(&mut m);
    assert_eq!(resident(&m), vec![(1, 5), (2, 0)]);
}
