//! Sub-file extents (Hystor §4, §5.4): the hot chunks of big files on the
//! SSD. The deciding half is pure, like the other policies: accesses and
//! the time come in as values, plans of chunk moves go out.
//!
//! - [`table`]: the three-level block table (region / sub-region / chunk)
//!   with Hystor's inverse-bitmap counters and the per-page overflow shift.
//! - [`choose`]: Program 1, the quota shared out top-down in proportion to
//!   the counters.
//! - [`resident`]: the resident list of the remap area and its smooth
//!   update (at most a fraction of the area replaced per period).
//! - [`Monitor`]: the three together, run once per period.
//! - [`map`]: the persistent extent map (which chunks have an SSD copy,
//!   which HDD copies are stale), its invariants, and how a request is cut
//!   into pieces per tier.
//! - [`split`]: a split file's I/O over the two stores, the chunk mover
//!   with its crash points, and recovery.
//!
//! The volume uses them through `vfs::extent`, the engine through
//! `engine::chunks`, the `hystor` policy turns them on (ARCHITECTURE.md).

pub mod choose;
pub mod map;
pub mod resident;
pub mod split;
pub mod table;
pub mod writeback;

use crate::clock::Timestamp;
use crate::state::ns::Ino;
use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

pub use choose::candidates;
pub use resident::{ResidentList, ResidentPlan};
pub use table::BlockTable;

/// The sector size Hystor's equation 4.1 counts requests in.
pub const SECTOR: u64 = 512;

/// The size of a file's chunks: a power of two from 4 KiB to 1 MiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkSize(u8);

impl ChunkSize {
    /// The smallest chunk, 4 KiB (Hystor's block).
    pub const MIN: ChunkSize = ChunkSize(12);
    /// The largest chunk, 1 MiB (the largest FUSE request).
    pub const MAX: ChunkSize = ChunkSize(20);
    /// The default, 64 KiB: a map entry per 4 KiB costs too much, and a
    /// FUSE request is usually 128 KiB or less.
    pub const DEFAULT: ChunkSize = ChunkSize(16);

    /// The chunk size of `bytes`; `None` unless a power of two within
    /// [`MIN`](Self::MIN)..=[`MAX`](Self::MAX).
    pub fn new(bytes: u64) -> Option<ChunkSize> {
        if !bytes.is_power_of_two() {
            return None;
        }
        let shift = bytes.trailing_zeros() as u8;
        (Self::MIN.0..=Self::MAX.0).contains(&shift).then_some(ChunkSize(shift))
    }

    /// Bytes in a chunk.
    pub fn bytes(self) -> u64 {
        1 << self.0
    }

    /// log2 of [`bytes`](Self::bytes).
    pub fn shift(self) -> u32 {
        u32::from(self.0)
    }

    /// The chunks `len` bytes at `off` touch: `first..end` (empty for 0 bytes).
    pub fn chunks(self, off: u64, len: u64) -> std::ops::Range<u64> {
        if len == 0 {
            return 0..0;
        }
        let last = off.saturating_add(len - 1);
        (off >> self.0)..(last >> self.0) + 1
    }

    /// Chunks needed to hold `size` bytes.
    pub fn count(self, size: u64) -> u64 {
        size.div_ceil(self.bytes())
    }

    /// Bytes of chunk `index` inside a file of `size` bytes (0 past the end).
    pub fn within(self, index: u64, size: u64) -> u64 {
        size.saturating_sub(index.saturating_mul(self.bytes())).min(self.bytes())
    }
}

impl Default for ChunkSize {
    fn default() -> Self {
        ChunkSize::DEFAULT
    }
}

impl fmt::Display for ChunkSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::config::format_size(self.bytes()))
    }
}

/// One chunk of one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkId {
    /// The file.
    pub ino: Ino,
    /// The chunk's index in the file (its offset over the chunk size).
    pub index: u64,
}

impl ChunkId {
    /// Chunk `index` of file `ino`.
    pub fn new(ino: Ino, index: u64) -> Self {
        ChunkId { ino, index }
    }
}

/// Sectors of 512 bytes touched by `len` bytes at `off`.
pub fn sectors(off: u64, len: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    let last = off.saturating_add(len - 1);
    last / SECTOR - off / SECTOR + 1
}

/// Hystor's inverse bitmap (eq. 4.1): a request of `n` sectors adds
/// `2^max(0, 7 - floor(log2 n))` at every level of the block table, so a
/// 512-byte request weighs 128 and one of 64 KiB or more weighs 1. Zero
/// sectors weigh nothing.
pub fn weight(n: u64) -> u16 {
    if n == 0 {
        return 0;
    }
    let log = 63 - n.leading_zeros();
    1 << 7u32.saturating_sub(log)
}

/// Defaults of the monitor (Hystor §5.4.2).
pub mod defaults {
    use std::time::Duration;
    /// How often the monitor chooses chunks.
    pub const PERIOD: Duration = Duration::from_secs(10);
    /// The share of the remap area one period may replace (Hystor: 5–10 %),
    /// in percent.
    pub const UPDATE_PERCENT: u8 = 10;
}

/// The block table, the resident list and the period they are looked at
/// with: Hystor's monitor as a pure value.
#[derive(Debug)]
pub struct Monitor {
    /// Access history of every file with chunk statistics.
    pub table: BlockTable,
    /// The chunks in the remap area, most recently chosen or used first.
    pub resident: ResidentList,
    period: Duration,
    update_percent: u8,
    next: Option<Timestamp>,
    /// The candidates of the last plan.
    chosen_before: HashSet<ChunkId>,
}

impl Monitor {
    /// A monitor that chooses every `period`, replacing at most
    /// `update_percent` % of the remap area each time (clamped to 1..=100).
    pub fn new(period: Duration, update_percent: u8) -> Self {
        Monitor {
            table: BlockTable::new(),
            resident: ResidentList::new(),
            period,
            update_percent: update_percent.clamp(1, 100),
            next: None,
            chosen_before: HashSet::new(),
        }
    }

    /// A request of `len` bytes at `off` on file `ino` (chunks of `chunk`
    /// unless the file already has statistics): counted in the table, and
    /// the resident chunks it touched go to the top of the resident list.
    pub fn on_access(&mut self, ino: Ino, chunk: ChunkSize, off: u64, len: u64) {
        self.on_accesses(ino, chunk, off, len, 1);
    }

    /// `times` such requests at once (a sampled one that stands for them).
    pub fn on_accesses(&mut self, ino: Ino, chunk: ChunkSize, off: u64, len: u64, times: u32) {
        let chunk = self.table.record_times(ino, chunk, off, len, times);
        for index in chunk.chunks(off, len) {
            self.resident.touch(ChunkId::new(ino, index));
        }
    }

    /// The file is gone (its last name removed, or it left chunk tiering).
    /// Returns its resident chunks, whose SSD copies are to be dropped.
    pub fn forget(&mut self, ino: Ino) -> Vec<ChunkId> {
        self.table.forget(ino);
        // A new file may get the inode number: it starts with no history.
        self.chosen_before.retain(|id| id.ino != ino);
        self.resident.forget(ino)
    }

    /// The file was cut to `size` bytes. Returns its resident chunks past
    /// the new end, whose SSD copies are to be dropped.
    pub fn truncate(&mut self, ino: Ino, size: u64) -> Vec<ChunkId> {
        let Some(chunk) = self.table.chunk_size(ino) else {
            // No statistics, so nothing was chosen.
            return self.resident.truncate(ino, 0);
        };
        let keep = chunk.count(size);
        self.table.truncate(ino, keep);
        self.chosen_before.retain(|id| id.ino != ino || id.index < keep);
        self.resident.truncate(ino, keep)
    }

    /// At `now`, with a remap area of `capacity` bytes: when a period has
    /// passed since the first call that found statistics or resident
    /// chunks (or since the last plan), Program 1 chooses the candidates and
    /// the smooth update merges them into the resident list; the plan says
    /// which chunks to copy to the SSD and which to drop from it. `None`
    /// when the period has not passed.
    pub fn on_tick(&mut self, now: Timestamp, capacity: u64) -> Option<ResidentPlan> {
        match self.next {
            // The first period starts with the first statistics: a plan
            // made at once would fill the empty area from a table that has
            // seen almost nothing (a file's creation, a few requests), and
            // the smooth update then needs ten periods to repair it.
            None if self.table.files() == 0 && self.resident.is_empty() => return None,
            None => {
                self.next = Some(now.plus(self.period));
                return None;
            }
            Some(next) if now < next => return None,
            Some(_) => {}
        }
        self.next = Some(now.plus(self.period));
        let updates = candidates(&self.table, capacity);
        let limit = (u128::from(capacity) * u128::from(self.update_percent) / 100) as u64;
        // Hysteresis: only a chunk chosen in this period and the last may
        // push a resident chunk out.
        let chosen: HashSet<ChunkId> = updates.iter().map(|c| c.id).collect();
        let strong: HashSet<ChunkId> = chosen.intersection(&self.chosen_before).copied().collect();
        self.chosen_before = chosen;
        Some(self.resident.smooth_update(&updates, &strong, capacity, limit))
    }
}

impl Default for Monitor {
    fn default() -> Self {
        Monitor::new(defaults::PERIOD, defaults::UPDATE_PERCENT)
    }
}

#[cfg(test)]
mod tests;
