//! Interval caching, write-through-update (Loris §IV-C2): as interval
//! hot-DST, but the hottest files get clean SSD copies instead of moving.

use super::{interval_due, interval_run, sieve_on_growth, Plan, Policy, PolicyKind, View};
use crate::clock::Timestamp;
use crate::event::EventKind;
use crate::migrate::Move;
use crate::state::ns::Ino;
use crate::stats::FileStats;
use crate::tier::Tier;

/// See the module documentation.
pub struct IntervalCache;

impl Policy for IntervalCache {
    fn kind(&self) -> PolicyKind {
        PolicyKind::IntervalCache
    }
    fn initial_tier(&self) -> Tier {
        Tier::Hdd
    }
    fn caching(&self) -> bool {
        true
    }
    fn on_access(&self, v: &View<'_>, ino: Ino, f: &FileStats, ev: &EventKind) -> Plan {
        sieve_on_growth(v, ino, f, ev)
    }
    fn on_tick(&self, v: &View<'_>, last_run: Option<Timestamp>) -> (Plan, bool) {
        if interval_due(v, last_run) {
            (interval_run(v, Move::Copy), true)
        } else {
            (Plan::default(), false)
        }
    }
}
