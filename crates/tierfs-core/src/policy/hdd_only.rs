//! The HDD-only baseline: everything on the HDD, nothing ever moves.

use super::{Policy, PolicyKind};
use crate::tier::Tier;

/// See the module documentation.
pub struct HddOnly;

impl Policy for HddOnly {
    fn kind(&self) -> PolicyKind {
        PolicyKind::HddOnly
    }
    fn initial_tier(&self) -> Tier {
        Tier::Hdd
    }
    fn baseline(&self) -> bool {
        true
    }
}
