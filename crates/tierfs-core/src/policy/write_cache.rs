//! The two caching architectures of the Loris table that buffer or copy on
//! writes (Loris §IV-C): `write-through-cache` (write-through-all caching)
//! and `write-back-cache` (write-back caching). Both keep the HDD as the
//! home of every file and cache reads on demand, as `on-demand-cache`.
//!
//! - `write-through-cache`: a write to an uncached file (one served by the
//!   HDD) also makes its SSD copy, under the admission rules of a read;
//!   writes to a cached file go to both copies.
//! - `write-back-cache`: writes to a file on the HDD land on the SSD first,
//!   whole small files in the group's write-back area (one chunk of up to
//!   1 MiB per file: every file under the sieve is one chunk), durably,
//!   and the scrubber writes them to the HDD later (ARCHITECTURE.md,
//!   "The write-back area"). Its area is 50 % of the SSD unless the
//!   directory or the mount sets `write-back`; the rest holds the read
//!   copies. A write to a file that has a read copy goes to both copies.

use super::{admit_on_read, admit_on_write, sieve_on_growth, Plan, Policy, PolicyKind, View};
use crate::event::EventKind;
use crate::migrate::Move;
use crate::state::ns::Ino;
use crate::stats::FileStats;
use crate::tier::Tier;

/// See the module documentation.
pub struct WriteThroughCache;

impl Policy for WriteThroughCache {
    fn kind(&self) -> PolicyKind {
        PolicyKind::WriteThroughCache
    }
    fn initial_tier(&self) -> Tier {
        Tier::Hdd
    }
    fn caching(&self) -> bool {
        true
    }
    fn on_access(&self, v: &View<'_>, ino: Ino, f: &FileStats, ev: &EventKind) -> Plan {
        let mut p = sieve_on_growth(v, ino, f, ev);
        if p.is_empty() {
            p.extend(admit_on_read(v, ino, f, ev, Move::Copy));
            p.extend(admit_on_write(v, ino, f, ev));
        }
        p
    }
}

/// The write-back area a `write-back-cache` group has by default, percent
/// of the SSD.
pub const DEFAULT_WRITE_BACK: u8 = 50;

/// See the module documentation.
pub struct WriteBackCache;

impl Policy for WriteBackCache {
    fn kind(&self) -> PolicyKind {
        PolicyKind::WriteBackCache
    }
    fn initial_tier(&self) -> Tier {
        Tier::Hdd
    }
    fn caching(&self) -> bool {
        true
    }
    fn whole_file_write_back(&self) -> bool {
        true
    }
    fn default_write_back(&self) -> u8 {
        DEFAULT_WRITE_BACK
    }
    fn on_access(&self, v: &View<'_>, ino: Ino, f: &FileStats, ev: &EventKind) -> Plan {
        // Reads are cached as on-demand caching does; writes are the
        // volume's (the write-back area).
        super::on_demand_cache::OnDemandCache.on_access(v, ino, f, ev)
    }
}
