//! Dynamic cold-DST with a background cleaner (Loris §IV-B3). As dynamic
//! cold-DST, plus: once a writer had to wait for the cleaner, a background
//! run keeps free SSD space at the amount evicted in the foreground so far
//! (at most half the SSD), evicting the coldest files ahead of writers.

use super::{admit_on_read, evict_for, sieve_on_growth, Plan, Policy, PolicyKind, Reason, View};
use crate::clock::Timestamp;
use crate::event::EventKind;
use crate::migrate::Move;
use crate::state::ns::Ino;
use crate::stats::FileStats;
use crate::tier::Tier;
use std::collections::HashSet;

/// See the module documentation.
pub struct DynamicColdDstBg;

impl Policy for DynamicColdDstBg {
    fn kind(&self) -> PolicyKind {
        PolicyKind::DynamicColdDstBg
    }
    fn initial_tier(&self) -> Tier {
        Tier::Ssd
    }
    fn on_access(&self, v: &View<'_>, ino: Ino, f: &FileStats, ev: &EventKind) -> Plan {
        let mut p = sieve_on_growth(v, ino, f, ev);
        p.extend(admit_on_read(v, ino, f, ev, Move::Promote));
        p
    }
    fn on_tick(&self, v: &View<'_>, _last_run: Option<Timestamp>) -> (Plan, bool) {
        let target = v.evicted_bytes.min(v.space.limit / 2);
        let mut p = Plan::default();
        if target > 0 && v.space.free() < target {
            let (steps, _) = evict_for(v, target, &HashSet::new(), true, |counter| Reason::BackgroundClean { counter });
            p.steps = steps;
        }
        (p, false)
    }
}
