//! Tiers and placement: where a file's data lives.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One of the two storage tiers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// The small fast directory.
    Ssd = 0,
    /// The big slow directory.
    Hdd = 1,
}

impl Tier {
    /// Both tiers, SSD first.
    pub const ALL: [Tier; 2] = [Tier::Ssd, Tier::Hdd];

    /// Index for per-tier arrays.
    pub fn idx(self) -> usize {
        self as usize
    }

    /// The other tier.
    pub fn other(self) -> Tier {
        match self {
            Tier::Ssd => Tier::Hdd,
            Tier::Hdd => Tier::Ssd,
        }
    }

    /// Lower-case name, as used on the command line and in xattrs.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Ssd => "ssd",
            Tier::Hdd => "hdd",
        }
    }

    /// Parses "ssd" or "hdd".
    pub fn parse(s: &str) -> Option<Tier> {
        match s.trim().to_ascii_lowercase().as_str() {
            "ssd" => Some(Tier::Ssd),
            "hdd" => Some(Tier::Hdd),
            _ => None,
        }
    }

    fn from_u8(v: u8) -> Option<Tier> {
        match v {
            0 => Some(Tier::Ssd),
            1 => Some(Tier::Hdd),
            _ => None,
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the data of a non-directory lives.
///
/// Today a file is either whole on one tier, or whole on the HDD with a clean
/// copy on the SSD (the caching architectures). Sub-file extents will add a
/// third variant whose chunks span both tiers; code that matches on
/// `Placement` must therefore not assume "one tier" beyond what it asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// The only copy is on this tier.
    On(Tier),
    /// The primary copy is on the HDD, a clean (identical) copy on the SSD.
    Cached,
}

impl Placement {
    /// The tier holding the authoritative copy.
    pub fn primary(self) -> Tier {
        match self {
            Placement::On(t) => t,
            Placement::Cached => Tier::Hdd,
        }
    }

    /// The tier reads are served from.
    pub fn read_tier(self) -> Tier {
        match self {
            Placement::On(t) => t,
            Placement::Cached => Tier::Ssd,
        }
    }

    /// Tiers that hold a copy of the data.
    pub fn tiers(self) -> &'static [Tier] {
        match self {
            Placement::On(Tier::Ssd) => &[Tier::Ssd],
            Placement::On(Tier::Hdd) => &[Tier::Hdd],
            Placement::Cached => &[Tier::Hdd, Tier::Ssd],
        }
    }

    /// True if the SSD holds data of this file (moved or cached).
    pub fn uses_ssd(self) -> bool {
        !matches!(self, Placement::On(Tier::Hdd))
    }

    /// Short label for humans: "ssd", "hdd" or "hdd+ssd-copy".
    pub fn label(self) -> &'static str {
        match self {
            Placement::On(t) => t.name(),
            Placement::Cached => "hdd+ssd-copy",
        }
    }

    /// One byte for the state database.
    pub fn encode(self) -> u8 {
        match self {
            Placement::On(t) => t as u8,
            Placement::Cached => 2,
        }
    }

    /// Inverse of [`Placement::encode`].
    pub fn decode(v: u8) -> Option<Placement> {
        match v {
            2 => Some(Placement::Cached),
            v => Tier::from_u8(v).map(Placement::On),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_roundtrip_and_tiers() {
        for p in [Placement::On(Tier::Ssd), Placement::On(Tier::Hdd), Placement::Cached] {
            assert_eq!(Placement::decode(p.encode()), Some(p));
        }
        assert_eq!(Placement::decode(9), None);
        assert_eq!(Placement::Cached.primary(), Tier::Hdd);
        assert_eq!(Placement::Cached.read_tier(), Tier::Ssd);
        assert!(Placement::Cached.uses_ssd());
        assert!(!Placement::On(Tier::Hdd).uses_ssd());
        assert_eq!(Tier::parse(" SSD "), Some(Tier::Ssd));
        assert_eq!(Tier::parse("tape"), None);
    }
}
