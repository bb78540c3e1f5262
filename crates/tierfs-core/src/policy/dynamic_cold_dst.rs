//! Dynamic cold-DST (Loris §IV-B2): new files on the SSD; a demoted file
//! read from the HDD moves back if admission allows.

use super::{admit_on_read, sieve_on_growth, Plan, Policy, PolicyKind, View};
use crate::event::EventKind;
use crate::migrate::Move;
use crate::state::ns::Ino;
use crate::stats::FileStats;
use crate::tier::Tier;

/// See the module documentation.
pub struct DynamicColdDst;

impl Policy for DynamicColdDst {
    fn kind(&self) -> PolicyKind {
        PolicyKind::DynamicColdDst
    }
    fn initial_tier(&self) -> Tier {
        Tier::Ssd
    }
    fn on_access(&self, v: &View<'_>, ino: Ino, f: &FileStats, ev: &EventKind) -> Plan {
        let mut p = sieve_on_growth(v, ino, f, ev);
        p.extend(admit_on_read(v, ino, f, ev, Move::Promote));
        p
    }
}
