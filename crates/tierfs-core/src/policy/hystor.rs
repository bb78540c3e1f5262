//! Hystor (Hystor §4–§5.4) with Loris's whole-file tiering for small files:
//! files up to the sieve are tiered whole by dynamic hot-DST; the hot
//! chunks of files past the sieve get SSD copies, chosen every period by
//! the block table, Program 1 and the smooth update (`crate::extent`,
//! driven by the engine). Its remap area is the SSD space whole files
//! leave, less a margin kept free for them (see ARCHITECTURE.md).

use super::{Plan, Policy, PolicyKind, View};
use crate::event::EventKind;
use crate::state::ns::Ino;
use crate::stats::FileStats;
use crate::tier::Tier;

/// See the module documentation.
pub struct Hystor;

impl Policy for Hystor {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Hystor
    }
    fn initial_tier(&self) -> Tier {
        Tier::Hdd
    }
    fn chunks(&self) -> bool {
        true
    }
    /// Whole files exactly as dynamic hot-DST moves them.
    fn on_access(&self, v: &View<'_>, ino: Ino, f: &FileStats, ev: &EventKind) -> Plan {
        super::dynamic_hot_dst::DynamicHotDst.on_access(v, ino, f, ev)
    }
}
