//! Dynamic hot-DST (Loris §IV-A1): new files on the HDD; a file read from
//! the HDD is moved to the SSD right away if admission allows.

use super::{admit_on_read, sieve_on_growth, Plan, Policy, PolicyKind, View};
use crate::event::EventKind;
use crate::migrate::Move;
use crate::state::ns::Ino;
use crate::stats::FileStats;
use crate::tier::Tier;

/// See the module documentation.
pub struct DynamicHotDst;

impl Policy for DynamicHotDst {
    fn kind(&self) -> PolicyKind {
        PolicyKind::DynamicHotDst
    }
    fn initial_tier(&self) -> Tier {
        Tier::Hdd
    }
    fn on_access(&self, v: &View<'_>, ino: Ino, f: &FileStats, ev: &EventKind) -> Plan {
        let mut p = sieve_on_growth(v, ino, f, ev);
        p.extend(admit_on_read(v, ino, f, ev, Move::Promote));
        p
    }
}
