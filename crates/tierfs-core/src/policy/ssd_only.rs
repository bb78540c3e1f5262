//! The SSD-only baseline: everything on the SSD, nothing ever moves (a
//! write that finds no SSD room still lands on the HDD, as for every
//! architecture: no ENOSPC while the HDD has room).

use super::{Policy, PolicyKind};
use crate::tier::Tier;

/// See the module documentation.
pub struct SsdOnly;

impl Policy for SsdOnly {
    fn kind(&self) -> PolicyKind {
        PolicyKind::SsdOnly
    }
    fn initial_tier(&self) -> Tier {
        Tier::Ssd
    }
    fn baseline(&self) -> bool {
        true
    }
}
