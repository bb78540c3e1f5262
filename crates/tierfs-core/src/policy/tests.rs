//! Policy rules with hand-built statistics and a manual clock.

use super::*;
use crate::clock::{Clock, ManualClock};
use crate::stats::DEFAULT_AGING;
use crate::store::measured::Speed;

fn stats(files: &[(Ino, u32, Residence, u64)]) -> Stats {
    let mut s = Stats::new(DEFAULT_AGING);
    for (i, (ino, counter, residence, size)) in files.iter().enumerate() {
        s.insert(
            *ino,
            FileStats {
                counter: *counter,
                residence: *residence,
                size: *size,
                seq: i as u64 + 1,
                ..FileStats::default()
            },
        );
    }
    s
}

struct Env {
    clock: ManualClock,
    pins: Vec<(Ino, Tier)>,
    busy: Vec<Ino>,
    resting: Vec<Ino>,
    space: Space,
    evicted: u64,
    params: Params,
    speeds: [Speed; 2],
    tokens: u32,
    moved: Vec<(Ino, u32)>,
    /// Bytes the write regulator would still let go to the SSD (None: no budget).
    budget_left: Option<u64>,
    /// The counter of the event's file before it (`View::counter_before`).
    counter_before: Option<u32>,
}

impl Env {
    fn new(used: u64, limit: u64) -> Self {
        Env {
            clock: ManualClock::new(Timestamp::from_secs(1000)),
            pins: vec![],
            busy: vec![],
            resting: vec![],
            space: Space { used, limit },
            evicted: 0,
            params: Params::default(),
            speeds: [Speed::default(); 2],
            tokens: 0,
            moved: vec![],
            budget_left: None,
            counter_before: None,
        }
    }
    fn with<R>(&self, s: &Stats, f: impl FnOnce(&View<'_>) -> R) -> R {
        let pin = |i: Ino| self.pins.iter().find(|p| p.0 == i).map(|p| p.1);
        let busy = |i: Ino| self.busy.contains(&i);
        let resting = |i: Ino| self.resting.contains(&i);
        let moves = |i: Ino| self.moved.iter().find(|m| m.0 == i).map_or(0, |m| m.1);
        let ssd_admits = |b: u64| self.budget_left.is_none_or(|left| b <= left);
        let v = View {
            stats: s,
            now: self.clock.now(),
            space: self.space,
            group: 0,
            params: self.params,
            pin: &pin,
            busy: &busy,
            resting: &resting,
            evicted_bytes: self.evicted,
            speeds: self.speeds,
            tokens: self.tokens,
            moves: &moves,
            ssd_admits: &ssd_admits,
            counter_before: self.counter_before,
        };
        f(&v)
    }
}

fn read_hdd() -> EventKind {
    EventKind::Read { off: 0, len: 4096, tier: Tier::Hdd, fragment: false }
}

fn moves(p: &Plan) -> Vec<(Ino, Move)> {
    p.steps.iter().map(|s| (s.ino, s.mv)).collect()
}

#[test]
fn admission_needs_a_counter_above_the_last_eviction() {
    let mut s = stats(&[(10, 40, Residence::Hdd, 4096), (11, 80, Residence::Hdd, 4096)]);
    s.last_evicted = Some(40);
    let env = Env::new(0, 1 << 30);
    let pol = PolicyKind::DynamicHotDst.policy();
    let p = env.with(&s, |v| pol.on_access(v, 10, &s.get(10).unwrap(), &read_hdd()));
    assert!(p.is_empty());
    assert_eq!(p.skipped, vec![(10, NotMoved::BelowAdmission { counter: 40, threshold: 40 })]);
    let p = env.with(&s, |v| pol.on_access(v, 11, &s.get(11).unwrap(), &read_hdd()));
    assert_eq!(moves(&p), vec![(11, Move::Promote)]);
    assert_eq!(p.steps[0].reason, Reason::HotOnRead { counter: 80, threshold: 40 });
    // Caching copies instead of moving.
    let p = env.with(&s, |v| PolicyKind::OnDemandCache.policy().on_access(v, 11, &s.get(11).unwrap(), &read_hdd()));
    assert_eq!(moves(&p), vec![(11, Move::Copy)]);
    // Reads served by the SSD, writes and interval policies admit nothing.
    let ssd = EventKind::Read { off: 0, len: 1, tier: Tier::Ssd, fragment: false };
    assert!(env.with(&s, |v| pol.on_access(v, 11, &s.get(11).unwrap(), &ssd)).is_empty());
    let iv = PolicyKind::IntervalHotDst.policy();
    assert!(env.with(&s, |v| iv.on_access(v, 11, &s.get(11).unwrap(), &read_hdd())).is_empty());
}

#[test]
fn repeat_admission_needs_the_heat_before_the_read_above_the_threshold() {
    // 10 read once (64, all of it this read's), 11 read before (96).
    let mut s = stats(&[(10, 64, Residence::Hdd, 4096), (11, 96, Residence::Hdd, 4096)]);
    s.last_evicted = Some(20);
    let mut env = Env::new(0, 1 << 30);
    let pol = PolicyKind::DynamicHotDst.policy();
    let p = env.with(&s, |v| pol.on_access(v, 10, &s.get(10).unwrap(), &read_hdd()));
    assert_eq!(moves(&p), vec![(10, Move::Promote)], "first: any read past the threshold");
    env.params.admission = Admission::Repeat;
    env.counter_before = Some(0);
    let p = env.with(&s, |v| pol.on_access(v, 10, &s.get(10).unwrap(), &read_hdd()));
    assert_eq!(p.skipped, vec![(10, NotMoved::BelowAdmission { counter: 0, threshold: 20 })]);
    env.counter_before = Some(32);
    let p = env.with(&s, |v| pol.on_access(v, 11, &s.get(11).unwrap(), &read_hdd()));
    assert_eq!(moves(&p), vec![(11, Move::Promote)]);
    // A passthrough open that weighs the whole file, and a sampled read
    // standing for several requests: what counts is the counter before.
    env.counter_before = Some(0);
    let open = EventKind::Open { write: false, tier: Tier::Hdd, size: 4096, unseen: true };
    let p = env.with(&s, |v| PolicyKind::OnDemandCache.policy().on_access(v, 10, &s.get(10).unwrap(), &open));
    assert!(p.is_empty(), "{p:?}");
    assert_eq!(Admission::parse("repeat"), Some(Admission::Repeat));
    assert_eq!(AgingRule::parse(" shift"), Some(AgingRule::Shift));
    assert_eq!(AgingRule::parse("never"), None);
}

#[test]
fn a_read_at_the_end_of_a_file_read_once_does_not_admit_it_under_repeat_admission() {
    // A program reads a file whole, then reads once more to find its end:
    // the second request reads no bytes, and with `repeat` the whole
    // counter was "before" it, which admitted a file read once.
    let s = stats(&[(10, 64, Residence::Hdd, 4096)]);
    let mut env = Env::new(0, 1 << 30);
    env.params.admission = Admission::Repeat;
    let eof = EventKind::Read { off: 4096, len: 0, tier: Tier::Hdd, fragment: false };
    for kind in [PolicyKind::DynamicHotDst, PolicyKind::OnDemandCache] {
        let p = env.with(&s, |v| kind.policy().on_access(v, 10, &s.get(10).unwrap(), &eof));
        assert!(p.is_empty(), "{kind:?}: {p:?}");
    }
}

#[test]
fn passthrough_open_for_reading_counts_as_a_read() {
    let s = stats(&[(5, 64, Residence::Hdd, 100)]);
    let env = Env::new(0, 1 << 30);
    let open = EventKind::Open { write: false, tier: Tier::Hdd, size: 100, unseen: true };
    let p = env.with(&s, |v| PolicyKind::DynamicColdDst.policy().on_access(v, 5, &s.get(5).unwrap(), &open));
    assert_eq!(moves(&p), vec![(5, Move::Promote)]);
}

#[test]
fn sieved_files_are_not_admitted_and_growth_past_the_sieve_demotes() {
    let s = stats(&[
        (1, 500, Residence::Hdd, 2 << 20),
        (2, 500, Residence::Ssd, 2 << 20),
        (3, 500, Residence::Cached, 2 << 20),
    ]);
    let env = Env::new(0, 1 << 30);
    let pol = PolicyKind::DynamicHotDst.policy();
    let p = env.with(&s, |v| pol.on_access(v, 1, &s.get(1).unwrap(), &read_hdd()));
    assert_eq!(p.skipped, vec![(1, NotMoved::Sieved { size: 2 << 20, sieve: 1 << 20 })]);
    let grow = EventKind::Write { off: 0, len: 10, tier: Tier::Ssd, size: 2 << 20, fragment: false };
    let p = env.with(&s, |v| pol.on_access(v, 2, &s.get(2).unwrap(), &grow));
    assert_eq!(moves(&p), vec![(2, Move::Demote)]);
    let p = env.with(&s, |v| PolicyKind::OnDemandCache.policy().on_access(v, 3, &s.get(3).unwrap(), &grow));
    assert_eq!(moves(&p), vec![(3, Move::DropCopy)], "a cached copy is invalidated");
    // Baselines never move; a pin to the SSD beats the sieve.
    assert!(env.with(&s, |v| PolicyKind::SsdOnly.policy().on_access(v, 2, &s.get(2).unwrap(), &grow)).is_empty());
    let mut env = env;
    env.pins.push((2, Tier::Ssd));
    assert!(env.with(&s, |v| pol.on_access(v, 2, &s.get(2).unwrap(), &grow)).is_empty());
}

#[test]
fn pinned_and_busy_files_are_left_alone() {
    let s = stats(&[(1, 500, Residence::Hdd, 10)]);
    let mut env = Env::new(0, 1 << 30);
    env.pins.push((1, Tier::Hdd));
    let p = env.with(&s, |v| PolicyKind::DynamicHotDst.policy().on_access(v, 1, &s.get(1).unwrap(), &read_hdd()));
    assert_eq!(p.skipped, vec![(1, NotMoved::Pinned { tier: Tier::Hdd })]);
    env.pins.clear();
    env.busy.push(1);
    let p = env.with(&s, |v| PolicyKind::DynamicHotDst.policy().on_access(v, 1, &s.get(1).unwrap(), &read_hdd()));
    assert!(p.is_empty());
}

#[test]
fn the_cleaner_evicts_coldest_first_and_spares_pinned_files() {
    // Files 1..4 on the SSD with counters 30, 10, 20, 10 (2 older than 4).
    let s = stats(&[
        (1, 30, Residence::Ssd, 100),
        (2, 10, Residence::Cached, 100),
        (3, 20, Residence::Ssd, 100),
        (4, 10, Residence::Ssd, 100),
    ]);
    let mut env = Env::new(400, 400);
    env.pins.push((4, Tier::Ssd));
    let (steps, freed) =
        env.with(&s, |v| evict_for(v, 250, &HashSet::new(), false, |counter| Reason::Evict { counter }));
    let order: Vec<_> = steps.iter().map(|s| (s.ino, s.mv)).collect();
    assert_eq!(order, vec![(2, Move::DropCopy), (3, Move::Demote), (1, Move::Demote)]);
    assert_eq!(freed, 300);
    // Ties go to the least recently used.
    env.pins.clear();
    let (steps, _) = env.with(&s, |v| evict_for(v, 100, &HashSet::new(), false, |counter| Reason::Evict { counter }));
    assert_eq!(steps[0].ino, 2);
}

#[test]
fn interval_runs_only_when_due() {
    let s = stats(&[(1, 100, Residence::Hdd, 10)]);
    let env = Env::new(0, 1 << 30);
    let pol = PolicyKind::IntervalHotDst.policy();
    let (p, ran) = env.with(&s, |v| pol.on_tick(v, None));
    assert!(ran);
    assert_eq!(moves(&p), vec![(1, Move::Promote)]);
    let last = env.clock.now();
    env.clock.advance(Duration::from_secs(79));
    let (p, ran) = env.with(&s, |v| pol.on_tick(v, Some(last)));
    assert!(!ran && p.is_empty());
    env.clock.advance(Duration::from_secs(1));
    let (_, ran) = env.with(&s, |v| pol.on_tick(v, Some(last)));
    assert!(ran, "due after exactly the interval");
    let (p, ran) = env.with(&s, |v| PolicyKind::IntervalCache.policy().on_tick(v, None));
    assert!(ran);
    assert_eq!(moves(&p), vec![(1, Move::Copy)]);
}

#[test]
fn interval_stops_when_the_hottest_hdd_file_is_not_hotter_than_the_coldest_ssd_file() {
    // SSD full with counters 50 and 70; HDD files 90, 60, 40.
    let s = stats(&[
        (1, 50, Residence::Ssd, 100),
        (2, 70, Residence::Ssd, 100),
        (3, 90, Residence::Hdd, 100),
        (4, 60, Residence::Hdd, 100),
        (5, 40, Residence::Hdd, 100),
    ]);
    let env = Env::new(200, 200);
    let p = env.with(&s, |v| interval_run(v, Move::Promote));
    // 3 (90) swaps with 1 (50); then 4 (60) would need 2 (70) out: stop.
    assert_eq!(moves(&p), vec![(1, Move::Demote), (3, Move::Promote)]);
    assert_eq!(p.skipped, vec![(4, NotMoved::NoRoom)]);
}

#[test]
fn interval_stops_at_the_admission_threshold_and_keeps_hottest_first_order() {
    let mut s = stats(&[
        (1, 30, Residence::Hdd, 10),
        (2, 90, Residence::Hdd, 10),
        (3, 90, Residence::Hdd, 10),
        (4, 31, Residence::Hdd, 10),
    ]);
    s.last_evicted = Some(30);
    let env = Env::new(0, 1 << 30);
    let p = env.with(&s, |v| interval_run(v, Move::Promote));
    // 3 was accessed after 2: equal counters, most recent first.
    assert_eq!(moves(&p), vec![(3, Move::Promote), (2, Move::Promote), (4, Move::Promote)]);
}

#[test]
fn background_cleaner_starts_after_the_first_blocking_write() {
    let s = stats(&[(1, 5, Residence::Ssd, 300), (2, 50, Residence::Ssd, 300)]);
    let mut env = Env::new(600, 700);
    let pol = PolicyKind::DynamicColdDstBg.policy();
    let (p, _) = env.with(&s, |v| pol.on_tick(v, None));
    assert!(p.is_empty(), "no eviction seen yet: nothing to do");
    env.evicted = 250;
    let (p, _) = env.with(&s, |v| pol.on_tick(v, None));
    assert_eq!(moves(&p), vec![(1, Move::Demote)]);
    assert_eq!(p.steps[0].reason, Reason::BackgroundClean { counter: 5 });
    // Plain dynamic cold-DST has no background cleaner.
    assert!(env.with(&s, |v| PolicyKind::DynamicColdDst.policy().on_tick(v, None)).0.is_empty());
}

#[test]
fn conform_moves_what_a_new_policy_does_not_keep() {
    let s = stats(&[(1, 5, Residence::Ssd, 1), (2, 5, Residence::Cached, 1), (3, 5, Residence::Hdd, 1)]);
    let env = Env::new(0, 1 << 30);
    let c = |k: PolicyKind| env.with(&s, |v| moves(&k.policy().conform(v)));
    assert_eq!(c(PolicyKind::DynamicHotDst), vec![(2, Move::DropCopy)]);
    assert_eq!(c(PolicyKind::OnDemandCache), vec![(1, Move::Demote)]);
    assert_eq!(c(PolicyKind::HddOnly), vec![(1, Move::Demote), (2, Move::DropCopy)]);
    assert_eq!(c(PolicyKind::SsdOnly), vec![(3, Move::Promote), (2, Move::DropCopy)]);
    let mut env = env;
    env.pins.push((3, Tier::Ssd));
    env.pins.push((1, Tier::Hdd));
    let p = env.with(&s, |v| moves(&PolicyKind::PlainColdDst.policy().conform(v)));
    assert_eq!(p, vec![(1, Move::Demote), (3, Move::Promote), (2, Move::DropCopy)]);
}

#[test]
fn names_roundtrip() {
    for k in PolicyKind::ALL {
        assert_eq!(PolicyKind::parse(k.name()), Some(k));
        assert_eq!(k.policy().kind(), k);
    }
    assert_eq!(PolicyKind::parse("lru"), None);
}

/// Speeds in milliseconds: (read, write) of the SSD, then of the HDD.
fn speeds(ssd: (f64, f64), hdd: (f64, f64)) -> [Speed; 2] {
    let s = |(r, w): (f64, f64)| Speed { read: Some(r / 1e3), write: Some(w / 1e3) };
    [s(ssd), s(hdd)]
}

/// Files with (ino, residence, reads, writes, counter), used at t = 1000 s.
fn used(files: &[(Ino, Residence, u32, u32, u32)]) -> Stats {
    let mut s = Stats::new(DEFAULT_AGING);
    for (i, (ino, residence, reads, writes, counter)) in files.iter().enumerate() {
        s.insert(
            *ino,
            FileStats {
                counter: *counter,
                residence: *residence,
                size: 4096,
                seq: i as u64 + 1,
                last_access: 1000,
                reads: *reads,
                writes: *writes,
                ..FileStats::default()
            },
        );
    }
    s
}

#[test]
fn the_measured_cost_weighs_each_tiers_times_by_the_files_reads_and_writes() {
    use super::measured::{cost, worth_moving};
    let sp = Speed { read: Some(0.001), write: Some(0.010) };
    assert_eq!(cost(1, 0, sp), Some(0.001));
    assert_eq!(cost(0, 1, sp), Some(0.010));
    assert!((cost(3, 1, sp).unwrap() - (3.0 * 0.001 + 0.010) / 4.0).abs() < 1e-12);
    assert_eq!(cost(0, 0, sp), None, "never used: no cost");
    assert_eq!(cost(1, 1, Speed { read: Some(0.001), write: None }), None, "writes not measured yet");
    assert_eq!(cost(5, 0, Speed { read: Some(0.002), write: None }), Some(0.002), "only what it does counts");
    // δ = 1: the other tier must cost under half.
    assert!(worth_moving(2.01, 1.0, 100));
    assert!(!worth_moving(2.0, 1.0, 100));
    assert!(worth_moving(1.6, 1.0, 50), "δ = 0.5");
    assert!(!worth_moving(2.5, 1.0, 200), "δ = 2");
}

#[test]
fn measured_moves_write_heavy_files_off_a_slow_ssd_and_keeps_read_heavy_ones() {
    let pol = PolicyKind::Measured.policy();
    assert_eq!(pol.initial_tier(), Tier::Ssd);
    // SSD: fast reads, writes slowed to 30 ms by garbage collection; HDD 10 ms.
    let s = used(&[
        (1, Residence::Ssd, 1, 99, 500), // write-heavy
        (2, Residence::Ssd, 99, 1, 400), // read-heavy
        (3, Residence::Hdd, 99, 1, 300), // read-heavy, on the HDD
        (4, Residence::Hdd, 1, 99, 200), // write-heavy, on the HDD
    ]);
    let mut env = Env::new(0, 1 << 30);
    env.clock.set(Timestamp::from_secs(1010));
    env.speeds = speeds((0.1, 30.0), (10.0, 10.0));
    env.tokens = 10;
    let p = env.with(&s, |v| pol.on_tick(v, None).0);
    assert_eq!(moves(&p), vec![(1, Move::Demote), (3, Move::Promote)], "hottest first");
    assert!(
        matches!(p.steps[0].reason, Reason::Measured { here_us, there_us } if here_us > 29_000 && there_us == 10_000)
    );
    // The SSD recovered: the write-heavy HDD file comes back.
    env.speeds = speeds((0.1, 0.1), (10.0, 10.0));
    let p = env.with(&s, |v| pol.on_tick(v, None).0);
    assert_eq!(moves(&p), vec![(3, Move::Promote), (4, Move::Promote)]);
    // No figures for a tier: nothing moves.
    env.speeds[1] = Speed::default();
    assert!(env.with(&s, |v| pol.on_tick(v, None).0).is_empty());
}

#[test]
fn measured_spends_at_most_its_tokens_and_damps_a_file_that_moved_often() {
    let pol = PolicyKind::Measured.policy();
    let s = used(&[(1, Residence::Ssd, 0, 10, 50), (2, Residence::Ssd, 0, 10, 40), (3, Residence::Ssd, 0, 10, 30)]);
    let mut env = Env::new(0, 1 << 30);
    env.speeds = speeds((0.1, 30.0), (10.0, 10.0));
    assert!(env.with(&s, |v| pol.on_tick(v, None).0).is_empty(), "no token, no move");
    env.tokens = 2;
    let p = env.with(&s, |v| pol.on_tick(v, None).0);
    assert_eq!(moves(&p), vec![(1, Move::Demote), (2, Move::Demote)], "two tokens, the two hottest");
    env.moved = vec![(1, super::measured::MAX_MOVES_PER_HOUR)];
    env.pins = vec![(2, Tier::Ssd)];
    let p = env.with(&s, |v| pol.on_tick(v, None).0);
    assert_eq!(moves(&p), vec![(3, Move::Demote)]);
    assert_eq!(
        p.skipped,
        vec![
            (1, NotMoved::Damped { moves: super::measured::MAX_MOVES_PER_HOUR }),
            (2, NotMoved::Pinned { tier: Tier::Ssd })
        ]
    );
    // δ: with δ = 3 a 3-times cheaper tier is not enough.
    env.params.delta = 300;
    env.moved.clear();
    env.pins.clear();
    assert!(env.with(&s, |v| pol.on_tick(v, None).0).is_empty());
}

#[test]
fn measured_leaves_files_not_used_lately_and_sieves_promotions() {
    let pol = PolicyKind::Measured.policy();
    let mut s = used(&[(1, Residence::Hdd, 10, 0, 50), (2, Residence::Hdd, 10, 0, 40)]);
    s.insert(
        7,
        FileStats {
            residence: Residence::Hdd,
            size: 4096,
            reads: 10,
            last_access: 100,
            counter: 90,
            seq: 9,
            ..FileStats::default()
        },
    );
    let mut big = s.get(2).unwrap();
    big.size = 2 << 20;
    s.insert(2, big);
    let mut env = Env::new(0, 1 << 30);
    env.speeds = speeds((0.1, 0.1), (10.0, 10.0));
    env.tokens = 10;
    let p = env.with(&s, |v| pol.on_tick(v, None).0);
    assert_eq!(moves(&p), vec![(1, Move::Promote)], "7 was last used 900 s ago; 2 is past the sieve");
    assert_eq!(p.skipped, vec![(2, NotMoved::Sieved { size: 2 << 20, sieve: 1 << 20 })]);
}

#[test]
fn measured_spends_no_token_on_a_promotion_the_regulator_would_divert() {
    let pol = PolicyKind::Measured.policy();
    // Three read-heavy 4-KiB files on the HDD, the SSD faster for reads.
    let s = used(&[(1, Residence::Hdd, 10, 0, 50), (2, Residence::Hdd, 10, 0, 40), (3, Residence::Hdd, 10, 0, 30)]);
    let mut env = Env::new(0, 1 << 30);
    env.speeds = speeds((0.1, 0.1), (10.0, 10.0));
    env.tokens = 2;
    // Room in the budget for one file: the second token is kept.
    env.budget_left = Some(4096 + 100);
    let p = env.with(&s, |v| pol.on_tick(v, None).0);
    assert_eq!(moves(&p), vec![(1, Move::Promote)]);
    assert_eq!(p.skipped, vec![(2, NotMoved::OverBudget)], "noted once a run");
    // A demotion costs the SSD no writes: it is planned whatever the budget.
    let s = used(&[(4, Residence::Ssd, 0, 10, 50)]);
    env.speeds = speeds((0.1, 30.0), (10.0, 10.0));
    env.budget_left = Some(0);
    assert_eq!(moves(&env.with(&s, |v| pol.on_tick(v, None).0)), vec![(4, Move::Demote)]);
}

#[test]
fn measured_finds_recently_used_files_below_many_hotter_idle_ones() {
    use super::measured::SCAN;
    let pol = PolicyKind::Measured.policy();
    // SCAN + 10 files on the SSD, hot but last used 900 s ago, and one
    // write-heavy file used now with a lower counter.
    let mut s = Stats::new(DEFAULT_AGING);
    for i in 0..SCAN as u64 + 10 {
        s.insert(
            100 + i,
            FileStats {
                residence: Residence::Ssd,
                size: 4096,
                writes: 50,
                last_access: 100,
                counter: 1000 + i as u32,
                seq: i + 1,
                ..FileStats::default()
            },
        );
    }
    s.insert(
        7,
        FileStats {
            residence: Residence::Ssd,
            size: 4096,
            writes: 50,
            last_access: 1000,
            counter: 10,
            seq: 10_000,
            ..FileStats::default()
        },
    );
    let mut env = Env::new(0, 1 << 30);
    env.speeds = speeds((0.1, 30.0), (10.0, 10.0));
    env.tokens = 10;
    let p = env.with(&s, |v| pol.on_tick(v, None).0);
    assert_eq!(moves(&p), vec![(7, Move::Demote)]);
}

#[test]
fn an_interval_run_that_swaps_many_files_looks_at_each_ssd_file_once() {
    // A full SSD of 40 000 cold files and as many hotter ones on the HDD:
    // every SSD file goes. Looking for the next victim from the coldest
    // again each time (as the run did) made this 8 * 10^8 looks; the
    // full preset in the simulator stalled on it.
    const N: u64 = 40_000;
    let mut files: Vec<(Ino, u32, Residence, u64)> = (0..N).map(|i| (i + 1, 10, Residence::Ssd, 100)).collect();
    files.extend((0..N).map(|i| (N + i + 1, 20, Residence::Hdd, 100)));
    let s = stats(&files);
    let env = Env::new(N * 100, N * 100);
    let t = std::time::Instant::now();
    let p = env.with(&s, |v| interval_run(v, Move::Promote));
    assert_eq!(p.steps.len() as u64, 2 * N, "every file swapped");
    assert!(t.elapsed() < std::time::Duration::from_secs(20), "took {:?}", t.elapsed());
    // Evictions likewise.
    let t = std::time::Instant::now();
    let (steps, freed) =
        env.with(&s, |v| evict_for(v, N * 100, &HashSet::new(), false, |counter| Reason::Evict { counter }));
    assert_eq!((steps.len() as u64, freed), (N, N * 100));
    assert!(t.elapsed() < std::time::Duration::from_secs(20), "took {:?}", t.elapsed());
}

#[test]
fn a_file_resting_after_a_failed_move_is_planned_by_no_policy_but_still_conformed() {
    let s = stats(&[(1, 500, Residence::Hdd, 10), (2, 400, Residence::Hdd, 10), (3, 5, Residence::Ssd, 10)]);
    let mut env = Env::new(10, 1 << 30);
    env.resting.push(1);
    let hot = PolicyKind::DynamicHotDst.policy();
    let p = env.with(&s, |v| hot.on_access(v, 1, &s.get(1).unwrap(), &read_hdd()));
    assert!(p.is_empty(), "admitted on read while resting: {p:?}");
    // Passed over without a note (its failure's note says for how long),
    // and the next hottest file goes up in its place.
    let interval = PolicyKind::IntervalHotDst.policy();
    let (p, _) = env.with(&s, |v| interval.on_tick(v, None));
    assert_eq!(moves(&p), vec![(2, Move::Promote)]);
    assert!(p.skipped.iter().all(|(i, _)| *i != 1), "{:?}", p.skipped);
    // A pin (or a changed policy) still moves it.
    env.resting.push(3);
    env.pins.push((3, Tier::Hdd));
    let p = env.with(&s, |v| moves(&hot.conform(v)));
    assert_eq!(p, vec![(3, Move::Demote)]);
}

#[test]
fn the_background_clean_of_a_policy_passes_over_a_resting_file() {
    // The coldest SSD file's demotion failed: dynamic-cold-dst-bg's clean,
    // every tick, planned it again (the cleaner's own rest does not cover
    // a policy's moves).
    let s = stats(&[(1, 1, Residence::Ssd, 100), (2, 5, Residence::Ssd, 100)]);
    let mut env = Env::new(200, 200);
    env.evicted = 100;
    let bg = PolicyKind::DynamicColdDstBg.policy();
    let (p, _) = env.with(&s, |v| bg.on_tick(v, None));
    assert_eq!(moves(&p), vec![(1, Move::Demote)]);
    env.resting.push(1);
    let (p, _) = env.with(&s, |v| bg.on_tick(v, None));
    assert_eq!(moves(&p), vec![(2, Move::Demote)], "the resting file was planned again");
    // The cleaner, which needs the room now, keeps its own rest.
    let (steps, _) = env.with(&s, |v| evict_for(v, 100, &HashSet::new(), false, |counter| Reason::Evict { counter }));
    assert_eq!(steps[0].ino, 1);
}

#[test]
fn an_interval_run_evicts_the_next_coldest_when_the_coldest_rests() {
    // The SSD is full: promoting file 1 needs one eviction. The coldest
    // SSD file's last move failed; evicting it again would copy it again
    // for nothing.
    let s = stats(&[(1, 500, Residence::Hdd, 10), (3, 1, Residence::Ssd, 10), (4, 2, Residence::Ssd, 10)]);
    let mut env = Env::new(20, 20);
    let interval = PolicyKind::IntervalHotDst.policy();
    let (p, _) = env.with(&s, |v| interval.on_tick(v, None));
    assert_eq!(moves(&p), vec![(3, Move::Demote), (1, Move::Promote)]);
    env.resting.push(3);
    let (p, _) = env.with(&s, |v| interval.on_tick(v, None));
    assert_eq!(moves(&p), vec![(4, Move::Demote), (1, Move::Promote)], "the resting victim was planned");
}

#[test]
fn growth_past_the_sieve_does_not_plan_a_resting_file_again() {
    let s = stats(&[(2, 500, Residence::Ssd, 2 << 20)]);
    let mut env = Env::new(0, 1 << 30);
    let pol = PolicyKind::DynamicHotDst.policy();
    let grow = EventKind::Write { off: 0, len: 10, tier: Tier::Ssd, size: 2 << 20, fragment: false };
    assert_eq!(moves(&env.with(&s, |v| pol.on_access(v, 2, &s.get(2).unwrap(), &grow))), vec![(2, Move::Demote)]);
    env.resting.push(2);
    let p = env.with(&s, |v| pol.on_access(v, 2, &s.get(2).unwrap(), &grow));
    assert!(p.is_empty(), "sieved again while resting: {p:?}");
}

#[test]
fn measured_passes_over_a_resting_file_without_spending_a_token() {
    let pol = PolicyKind::Measured.policy();
    let s = used(&[(1, Residence::Ssd, 0, 10, 50), (2, Residence::Ssd, 0, 10, 40)]);
    let mut env = Env::new(0, 1 << 30);
    env.speeds = speeds((0.1, 30.0), (10.0, 10.0));
    env.tokens = 1;
    assert_eq!(moves(&env.with(&s, |v| pol.on_tick(v, None).0)), vec![(1, Move::Demote)]);
    env.resting.push(1);
    let p = env.with(&s, |v| pol.on_tick(v, None).0);
    assert_eq!(moves(&p), vec![(2, Move::Demote)], "the token went to the resting file");
    assert!(p.skipped.iter().all(|(i, _)| *i != 1), "a resting file gets no note over its failure's: {:?}", p.skipped);
}
