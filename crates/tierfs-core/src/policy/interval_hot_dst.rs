//! Interval hot-DST (Loris §IV-A2): new files on the HDD; every interval
//! the hottest HDD files move to the SSD until the next one is not hotter
//! than the last file evicted.

use super::{interval_due, interval_run, sieve_on_growth, Plan, Policy, PolicyKind, View};
use crate::clock::Timestamp;
use crate::event::EventKind;
use crate::migrate::Move;
use crate::state::ns::Ino;
use crate::stats::FileStats;
use crate::tier::Tier;

/// See the module documentation.
pub struct IntervalHotDst;

impl Policy for IntervalHotDst {
    fn kind(&self) -> PolicyKind {
        PolicyKind::IntervalHotDst
    }
    fn initial_tier(&self) -> Tier {
        Tier::Hdd
    }
    fn on_access(&self, v: &View<'_>, ino: Ino, f: &FileStats, ev: &EventKind) -> Plan {
        sieve_on_growth(v, ino, f, ev)
    }
    fn on_tick(&self, v: &View<'_>, last_run: Option<Timestamp>) -> (Plan, bool) {
        if interval_due(v, last_run) {
            (interval_run(v, Move::Promote), true)
        } else {
            (Plan::default(), false)
        }
    }
}
