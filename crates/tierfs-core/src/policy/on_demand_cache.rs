//! On-demand caching, write-through-update (Loris §IV-C1): new files on
//! the HDD; a file read from the HDD gets a clean SSD copy if admission
//! allows; writes to a cached file go to both copies; the cleaner drops
//! the coldest copies.

use super::{admit_on_read, sieve_on_growth, Plan, Policy, PolicyKind, View};
use crate::event::EventKind;
use crate::migrate::Move;
use crate::state::ns::Ino;
use crate::stats::FileStats;
use crate::tier::Tier;

/// See the module documentation.
pub struct OnDemandCache;

impl Policy for OnDemandCache {
    fn kind(&self) -> PolicyKind {
        PolicyKind::OnDemandCache
    }
    fn initial_tier(&self) -> Tier {
        Tier::Hdd
    }
    fn caching(&self) -> bool {
        true
    }
    fn on_access(&self, v: &View<'_>, ino: Ino, f: &FileStats, ev: &EventKind) -> Plan {
        let mut p = sieve_on_growth(v, ino, f, ev);
        p.extend(admit_on_read(v, ino, f, ev, Move::Copy));
        p
    }
}
