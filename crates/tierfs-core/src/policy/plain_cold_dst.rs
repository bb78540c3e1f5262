//! Plain cold-DST (Loris §IV-B1): new files on the SSD; when it is full the
//! cleaner demotes the coldest, which never come back.

use super::{sieve_on_growth, Plan, Policy, PolicyKind, View};
use crate::event::EventKind;
use crate::state::ns::Ino;
use crate::stats::FileStats;
use crate::tier::Tier;

/// See the module documentation.
pub struct PlainColdDst;

impl Policy for PlainColdDst {
    fn kind(&self) -> PolicyKind {
        PolicyKind::PlainColdDst
    }
    fn initial_tier(&self) -> Tier {
        Tier::Ssd
    }
    fn on_access(&self, v: &View<'_>, ino: Ino, f: &FileStats, ev: &EventKind) -> Plan {
        sieve_on_growth(v, ino, f, ev)
    }
}
