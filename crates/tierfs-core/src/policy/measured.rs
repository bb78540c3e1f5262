//! Measurement-driven migration (Wu-Reddy §III): new files on the SSD;
//! a recently used file moves to the other tier when its expected cost
//! there is much lower, as the measured response times of the two tiers
//! say. The cost of file j on tier i is
//! `C_ji = (R_j r_i + W_j w_i) / (R_j + W_j)`, with R and W its read and
//! write requests and r, w the tier's averaged read and write response
//! times; j moves when `C_current > (1 + δ) C_other`. Moves are paid for
//! with tokens of a bucket the engine fills at a configured rate, taken by
//! the most frequently, then most recently, used candidates first; a file
//! that already moved [`MAX_MOVES_PER_HOUR`] times in the last hour stays
//! where it is (the dampening the paper gets from δ and a conservative
//! token rate, made a bound), and no token goes to a promotion the SSD
//! write regulator would divert.
//!
//! The SSD is not assumed faster: while it is slowed by write load, the
//! write-heavy files leave it, and they come back when it recovers.

use super::{never_fits, sieve_on_growth, NotMoved, Plan, Policy, PolicyKind, Reason, View};
use crate::clock::Timestamp;
use crate::event::EventKind;
use crate::migrate::Move;
use crate::state::ns::Ino;
use crate::stats::{FileStats, Residence};
use crate::store::measured::Speed;
use crate::tier::Tier;
use std::time::Duration;

/// Only files used this recently are candidates (the paper moves blocks
/// "currently being read or written").
pub const RECENT: Duration = Duration::from_secs(60);

/// Candidates (files used lately) taken per tier and tick, hottest first.
pub const SCAN: usize = 512;

/// Files looked at per tier and tick to find them, hottest first: a bound
/// on the work of one tick whatever the number of files. Counters age
/// slowly (halved every ten minutes), so the hottest files of a tier may
/// not have been used lately; looking past them lets recently used files
/// with lower counters be candidates too.
pub const SCAN_LIMIT: usize = 8 * SCAN;

/// The most moves of one file the policy makes in an hour.
pub const MAX_MOVES_PER_HOUR: u32 = 4;

/// Default δ, in hundredths (the paper chose δ = 1).
pub const DEFAULT_DELTA: u16 = 100;

/// The expected response time of a file with `reads` and `writes`
/// requests on a tier of speed `s`, seconds; None without the figures (no
/// access, or the tier not measured yet).
pub fn cost(reads: u32, writes: u32, s: Speed) -> Option<f64> {
    let (r, w) = (reads as f64, writes as f64);
    if r + w == 0.0 {
        return None;
    }
    let rt = if reads > 0 { s.read? } else { 0.0 };
    let wt = if writes > 0 { s.write? } else { 0.0 };
    Some((r * rt + w * wt) / (r + w))
}

/// True if a file whose cost is `here` where it is and `there` on the
/// other tier should move: `here > (1 + δ) there`, δ in hundredths.
pub fn worth_moving(here: f64, there: f64, delta: u16) -> bool {
    here > (1.0 + delta as f64 / 100.0) * there
}

/// See the module documentation.
pub struct Measured;

impl Policy for Measured {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Measured
    }
    fn initial_tier(&self) -> Tier {
        Tier::Ssd
    }
    fn on_access(&self, v: &View<'_>, ino: Ino, f: &FileStats, ev: &EventKind) -> Plan {
        sieve_on_growth(v, ino, f, ev)
    }
    fn on_tick(&self, v: &View<'_>, _last_run: Option<Timestamp>) -> (Plan, bool) {
        (measured_run(v), false)
    }
}

/// Why a file moves, in microseconds of expected response time.
fn reason(here: f64, there: f64) -> Reason {
    Reason::Measured { here_us: (here * 1e6).round() as u32, there_us: (there * 1e6).round() as u32 }
}

/// One run: candidates of both tiers, hottest first, each moved if the
/// cost test says so, until the tokens are spent.
pub fn measured_run(v: &View<'_>) -> Plan {
    let mut p = Plan::default();
    if v.tokens == 0 {
        return p;
    }
    // Bytes of the promotions planned so far: the regulator is asked for
    // them all, so that no token goes to a promotion it would divert.
    let mut promoting = 0u64;
    let mut over_budget = false;
    let since = v.now.secs().saturating_sub(RECENT.as_secs());
    let recent = |f: &FileStats| f.last_access as u64 >= since;
    let candidates =
        |r: Residence| v.stats.hottest(v.group, r).take(SCAN_LIMIT).filter(move |(_, f)| recent(f)).take(SCAN);
    let mut ssd = candidates(Residence::Ssd).peekable();
    let mut hdd = candidates(Residence::Hdd).peekable();
    loop {
        if p.steps.len() >= v.tokens as usize {
            break;
        }
        // The hotter of the two heads: counter, then recency.
        let from_ssd = match (ssd.peek(), hdd.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((_, a)), Some((_, b))) => (a.counter, a.seq) >= (b.counter, b.seq),
        };
        let next = if from_ssd { ssd.next() } else { hdd.next() };
        let Some((ino, f)) = next else { break };
        let (here, there, to) =
            if from_ssd { (Tier::Ssd, Tier::Hdd, Tier::Hdd) } else { (Tier::Hdd, Tier::Ssd, Tier::Ssd) };
        let (Some(c_here), Some(c_there)) =
            (cost(f.reads, f.writes, v.speeds[here.idx()]), cost(f.reads, f.writes, v.speeds[there.idx()]))
        else {
            continue;
        };
        if !worth_moving(c_here, c_there, v.params.delta) {
            continue;
        }
        if (v.resting)(ino) {
            continue;
        }
        if (v.busy)(ino) {
            p.skip(ino, NotMoved::Busy);
            continue;
        }
        if let Some(t) = (v.pin)(ino) {
            p.skip(ino, NotMoved::Pinned { tier: t });
            continue;
        }
        let moved = (v.moves)(ino);
        if moved >= MAX_MOVES_PER_HOUR {
            p.skip(ino, NotMoved::Damped { moves: moved });
            continue;
        }
        if to == Tier::Ssd {
            if let Some(why) = never_fits(v, &f) {
                p.skip(ino, why);
                continue;
            }
            if !(v.ssd_admits)(promoting.saturating_add(f.size)) {
                // Noted once a run: with the budget spent every candidate
                // of the HDD would be, ten times a second.
                if !over_budget {
                    p.skip(ino, NotMoved::OverBudget);
                    over_budget = true;
                }
                continue;
            }
            promoting = promoting.saturating_add(f.size);
            p.push(ino, Move::Promote, reason(c_here, c_there), f.size);
        } else {
            p.push(ino, Move::Demote, reason(c_here, c_there), f.size);
        }
    }
    p
}
