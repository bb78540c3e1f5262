//! The engine's part of the write-back area (Hystor §5.5): one
//! [`Area`] per policy group whose `user.tierfs.write-back` is above 0,
//! the hooks that let a write take room in it, and the scrubber thread
//! that writes dirty chunks back (past the high watermark, when idle, and
//! all of them at unmount) and frees the oldest clean ones when room runs
//! short. The volume does the I/O (`Volume::buffer_write`,
//! `Volume::scrub_chunk`); the area decides.

use super::{Engine, Group};
use crate::clock::Timestamp;
use crate::extent::writeback::{charge, Area, WATERMARKS};
use crate::extent::{ChunkId, ChunkSize};
use crate::migrate::{NoCrash, Outcome, Skip};
use crate::report::WriteBackReport;
use crate::state::ns::Ino;
use crate::store::Store;
use crate::vfs::extent::ChunkOp;
use crate::vfs::WriteBackUse;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How often the scrubber looks at the areas when nothing wakes it.
const SCRUB_TICK: Duration = Duration::from_millis(250);

/// The window the scrub rate is measured over.
const RATE_WINDOW: Duration = Duration::from_secs(10);

/// How long the cleaner waits for a file's locks to free one of its clean
/// chunks (it skips the chunk otherwise).
const CLEAN_WAIT: Duration = Duration::from_millis(50);

/// How often a full area is noted in the log.
const BACKLOG_NOTE_EVERY: Duration = Duration::from_secs(10);

/// Every write-back area and its counters (a leaf lock but for the extent
/// map's, which the plans read).
#[derive(Debug, Default)]
pub(crate) struct WriteBack {
    pub areas: HashMap<Group, Area>,
    /// Writes to HDD files of groups with an area: all, and those the SSD
    /// took (buffered, or to a chunk already there).
    pub writes: u64,
    pub ssd_writes: u64,
    /// Writes the area had no room for (full of dirty chunks).
    pub diverted: u64,
    pub scrubbed: u64,
    pub scrubbed_bytes: u64,
    pub scrub_failed: u64,
    pub freed: u64,
    /// Bytes written back, by time, over the rate window.
    recent: VecDeque<(Timestamp, u64)>,
    last_note: Option<Timestamp>,
    /// The areas' shares (percent of the SSD): their sum and the largest,
    /// which scale each area's quota ([`crate::extent::writeback::quota`]);
    /// taken again each scrubber round and when an area is made.
    shares: (u64, u8),
}

impl<S: Store> Engine<S> {
    /// The share of the SSD group `g`'s area asks for, percent.
    fn wb_share(&self, g: Group) -> u8 {
        let e = self.effective(g);
        crate::policy::write_back_percent(e.policy, &e.params)
    }

    /// The area of group `g` in bytes: its share of the capacity, scaled
    /// down with every other area's when together they ask for more than
    /// the areas may take ([`crate::extent::writeback::quota`]).
    pub(super) fn wb_quota(&self, g: Group) -> u64 {
        let share = self.wb_share(g);
        let limit = self.account.lock().limit();
        let (sum, largest) = self.wb.lock().shares;
        crate::extent::writeback::quota(limit, share, sum, largest)
    }

    /// Takes the areas' shares again (see [`WriteBack::shares`]).
    fn wb_refresh_shares(&self) {
        let groups: Vec<Group> = self.wb.lock().areas.keys().copied().collect();
        let shares: Vec<u8> = groups.into_iter().map(|g| self.wb_share(g)).collect();
        let sum = shares.iter().map(|&s| u64::from(s)).sum();
        self.wb.lock().shares = (sum, shares.into_iter().max().unwrap_or(0));
    }

    /// The area of group `g`, made (with the shares taken again) if it has
    /// none yet.
    fn wb_area_made(&self, g: Group) {
        let fresh = {
            let mut wb = self.wb.lock();
            let fresh = !wb.areas.contains_key(&g);
            wb.areas.entry(g).or_default();
            fresh
        };
        if fresh {
            self.wb_refresh_shares();
        }
    }

    /// Sum of the areas, bytes: the remap area leaves them out.
    pub(super) fn wb_quota_total(&self) -> u64 {
        let groups: Vec<Group> = self.wb.lock().areas.keys().copied().collect();
        groups.into_iter().map(|g| self.wb_quota(g)).sum()
    }

    /// The hooks' answer to "may writes to `ino` use an area?".
    /// `parent` is the directory of a file just created.
    pub(super) fn write_back_use(&self, ino: Ino, parent: Option<Ino>) -> WriteBackUse {
        let Some(parent) = parent.or_else(|| self.parent_of(ino)) else { return WriteBackUse::default() };
        let g = self.group_of(parent);
        let e = self.effective(g);
        if crate::policy::write_back_percent(e.policy, &e.params) == 0 || self.cfg.write_back_max == 0 {
            return WriteBackUse::default();
        }
        let chunk = if e.policy.policy().whole_file_write_back() {
            // Whole small files: a file up to the sieve is one chunk.
            ChunkSize::MAX
        } else {
            ChunkSize::new(e.params.chunk).unwrap_or_default()
        };
        WriteBackUse { max_write: self.cfg.write_back_max, area: g, chunk }
    }

    pub(super) fn wb_reserve(&self, g: Group, bytes: u64) -> bool {
        let Some(admitted) = self.admit_ssd_at(bytes) else {
            // The SSD write budget is spent for now: to the HDD.
            self.counters.diverted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return false;
        };
        self.wb_area_made(g);
        let quota = self.wb_quota(g);
        let now = self.clock.now();
        let mut wb = self.wb.lock();
        let area = wb.areas.entry(g).or_insert_with(|| Area::new(quota));
        area.quota = quota;
        if area.reserve(bytes) {
            return true;
        }
        drop(wb);
        // Admitted by the budget, refused by the area: the room goes back.
        self.regulator.lock().release(admitted, bytes);
        let mut wb = self.wb.lock();
        wb.diverted += 1;
        let note = wb.last_note.is_none_or(|t| now.since(t) >= BACKLOG_NOTE_EVERY);
        if note {
            wb.last_note = Some(now);
            tracing::info!(
                group = g,
                "write-back area full: writes go to the HDD until the scrubber frees room ({} diverted so far)",
                wb.diverted
            );
        }
        drop(wb);
        self.wb_cv.notify_one();
        false
    }

    pub(super) fn wb_admitted(&self, g: Group, ino: Ino, chunks: &[(u64, u64)], reserved: u64) {
        let ids: Vec<(ChunkId, u64)> = chunks.iter().map(|&(i, b)| (ChunkId::new(ino, i), b)).collect();
        let now = self.clock.now();
        if let Some(a) = self.wb.lock().areas.get_mut(&g) {
            a.admit(&ids, reserved, now);
        }
        if !ids.is_empty() {
            self.wb_cv.notify_one();
        }
    }

    /// An access event of a file in group `g` (statistics applied): writes
    /// are counted and make their chunks the newest of the area; a removed
    /// file's chunks leave it.
    pub(super) fn wb_event(&self, ino: Ino, g: Group, ev: &crate::event::EventKind, on_hdd: bool) {
        use crate::event::EventKind;
        match *ev {
            EventKind::Remove => {
                for a in self.wb.lock().areas.values_mut() {
                    a.forget_file(ino);
                }
            }
            EventKind::Write { off, len, tier, size, .. } if on_hdd => {
                let now = self.clock.now();
                let chunk = self.vol.chunk_size(ino);
                let mut wb = self.wb.lock();
                let Some(a) = wb.areas.get_mut(&g) else { return };
                if let Some(chunk) = chunk {
                    for i in chunk.chunks(off, len) {
                        a.touch(ChunkId::new(ino, i), Some(charge(chunk, i, size)), now);
                    }
                }
                wb.writes += 1;
                wb.ssd_writes += u64::from(tier == crate::tier::Tier::Ssd);
            }
            _ => {}
        }
    }

    /// The remap area took a chunk the write-back area held.
    pub(super) fn wb_handover(&self, id: ChunkId) {
        for a in self.wb.lock().areas.values_mut() {
            a.forget(id);
        }
    }

    /// At start: dirty chunks of files whose group has an area join it, so
    /// that they are written back (after an unclean shutdown that is every
    /// chunk). Returns the chunks it took.
    pub(super) fn wb_load(&self) -> std::collections::HashSet<ChunkId> {
        let mut taken = std::collections::HashSet::new();
        let now = self.clock.now();
        for (ino, _) in self.vol.split_files() {
            let u = self.write_back_use(ino, None);
            if u.max_write == 0 {
                continue;
            }
            let Some(chunk) = self.vol.chunk_size(ino) else { continue };
            let size = self.vol.getattr(ino).map_or(0, |a| a.size);
            let dirty: Vec<(ChunkId, u64)> = self
                .vol
                .chunk_indices(ino)
                .into_iter()
                .map(|i| ChunkId::new(ino, i))
                .filter(|&id| self.vol.chunk_dirty(id) == Some(true))
                .map(|id| (id, charge(chunk, id.index, size)))
                .collect();
            if dirty.is_empty() {
                continue;
            }
            self.wb_area_made(u.area);
            let quota = self.wb_quota(u.area);
            let mut wb = self.wb.lock();
            let a = wb.areas.entry(u.area).or_insert_with(|| Area::new(quota));
            a.quota = quota;
            a.admit(&dirty, 0, now);
            taken.extend(dirty.iter().map(|d| d.0));
        }
        taken
    }

    /// The scrubber thread.
    pub(super) fn scrubber(&self) {
        loop {
            {
                let mut wb = self.wb.lock();
                if !self.stop.load(Ordering::Acquire) {
                    self.wb_cv.wait_for(&mut wb, SCRUB_TICK);
                }
            }
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            // Writing back reaches the HDD: the dirty chunks wait on the
            // SSD while it is held asleep (a full area sends writes to the
            // HDD, which wakes it and opens the gate).
            if self.hdd_closed() {
                continue;
            }
            self.scrub_round(false);
        }
    }

    /// One round: every area's plan carried out. With `all`, every dirty
    /// chunk is written back (unmount). Returns the dirty chunks left.
    pub(super) fn scrub_round(&self, all: bool) -> usize {
        let now = self.clock.now();
        // Settings may have changed the shares since.
        self.wb_refresh_shares();
        let groups: Vec<Group> = self.wb.lock().areas.keys().copied().collect();
        let quotas: Vec<(Group, u64)> = groups.into_iter().map(|g| (g, self.wb_quota(g))).collect();
        let mut scrub = Vec::new();
        let mut free = Vec::new();
        {
            let mut wb = self.wb.lock();
            for (g, quota) in quotas {
                let Some(a) = wb.areas.get_mut(&g) else { continue };
                a.quota = quota;
                let mut plan = a.plan(now, WATERMARKS, |id| self.vol.chunk_dirty(id));
                if all {
                    plan.scrub = a.oldest_first().filter(|&id| self.vol.chunk_dirty(id) == Some(true)).collect();
                    plan.free.clear();
                }
                scrub.extend(plan.scrub);
                free.extend(plan.free);
            }
        }
        let mut left = 0;
        for id in scrub {
            if self.stop.load(Ordering::Acquire) && !all {
                return 0;
            }
            self.doing("scrubber", format!("writing back chunk {} of inode {}", id.index, id.ino));
            match self.vol.scrub_chunk(id, &mut |_| Ok(())) {
                Ok(Some(true)) => {
                    let bytes = self.vol.chunk_size(id.ino).map_or(0, |c| c.bytes());
                    let mut wb = self.wb.lock();
                    wb.scrubbed += 1;
                    wb.scrubbed_bytes += bytes;
                    wb.recent.push_back((self.clock.now(), bytes));
                }
                Ok(Some(false)) | Ok(None) => left += 1,
                Err(e) => {
                    left += 1;
                    // The chunk stays dirty and keeps serving reads; the
                    // next round tries again.
                    self.wb.lock().scrub_failed += 1;
                    self.counters.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(ino = id.ino, chunk = id.index, error = %e, "write-back of a dirty chunk failed");
                }
            }
        }
        for id in free {
            self.doing("scrubber", format!("freeing chunk {} of inode {}", id.index, id.ino));
            self.wb_free(id, &NoCrash);
        }
        self.doing("scrubber", "idle");
        left
    }

    /// Takes clean chunk `id` off the SSD (and out of its area); true if
    /// it is off the SSD now.
    fn wb_free(&self, id: ChunkId, ctl: &dyn crate::migrate::Control) -> bool {
        match self.vol.chunk_op(id.ino, ChunkOp::Drop(id.index), ctl, &mut |_| Ok(())) {
            Ok(Outcome::Done(_)) | Ok(Outcome::Skipped(Skip::AlreadyThere | Skip::Gone)) => {
                let mut wb = self.wb.lock();
                wb.freed += 1;
                for a in wb.areas.values_mut() {
                    a.forget(id);
                }
                true
            }
            Ok(Outcome::Skipped(_)) => false,
            Err(e) => {
                tracing::warn!(ino = id.ino, chunk = id.index, error = %e, "freeing a clean chunk failed");
                false
            }
        }
    }

    /// Frees clean chunks of the write-back areas (their bytes are on the
    /// HDD too), oldest first and taking turns among the areas, until
    /// `want` bytes are freed: the cleaner's first source of room, before
    /// whole files. Each area frees its own clean chunks only when it runs
    /// short itself, so without this the areas' clean chunks stayed while
    /// every other user's files were evicted. Returns the bytes freed.
    pub(super) fn wb_reclaim(&self, want: u64) -> u64 {
        let lists: Vec<Vec<(ChunkId, u64)>> = {
            let wb = self.wb.lock();
            wb.areas.values().map(|a| a.clean(|id| self.vol.chunk_dirty(id))).collect()
        };
        let longest = lists.iter().map(Vec::len).max().unwrap_or(0);
        let mut freed = 0;
        for (id, bytes) in (0..longest).flat_map(|i| lists.iter().filter_map(move |l| l.get(i).copied())) {
            if freed >= want || self.stop.load(Ordering::Acquire) {
                break;
            }
            self.doing("cleaner", format!("freeing clean chunk {} of inode {}", id.index, id.ino));
            if self.wb_free(id, &super::Bounded(self, CLEAN_WAIT)) {
                freed += bytes;
                // Waiters may have room already.
                self.room_cv.notify_all();
            }
        }
        freed
    }

    /// At unmount: every dirty chunk of every area written back, with
    /// progress in the log. Gives up after rounds that make no progress.
    pub(super) fn flush_write_back(&self) {
        self.flushing.store(true, Ordering::Release);
        self.flush_write_back_now();
        self.flushing.store(false, Ordering::Release);
    }

    /// True while the unmount writes the write-back areas back (the
    /// daemon's watchdog waits for it).
    pub fn flushing(&self) -> bool {
        self.flushing.load(Ordering::Acquire)
    }

    fn flush_write_back_now(&self) {
        let dirty = |e: &Self| {
            let wb = e.wb.lock();
            wb.areas.values().flat_map(|a| a.oldest_first()).filter(|&id| e.vol.chunk_dirty(id) == Some(true)).count()
        };
        let total = dirty(self);
        if total == 0 {
            return;
        }
        tracing::info!(chunks = total, "unmount: writing the write-back area back to the HDD");
        let mut stalled = 0;
        let mut last = total;
        loop {
            let left = self.scrub_round(true);
            if left == 0 {
                tracing::info!(chunks = total, "unmount: write-back area written back");
                return;
            }
            tracing::info!(done = total - left.min(total), total, "unmount: writing back");
            stalled = if left >= last { stalled + 1 } else { 0 };
            last = left;
            if stalled >= 20 {
                tracing::error!(left, "unmount: dirty chunks could not be written back; they stay on the SSD and are written back after the next mount");
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The write-back areas for `tierfs stats`.
    pub(super) fn wb_report(&self) -> WriteBackReport {
        let now = self.clock.now();
        let mut wb = self.wb.lock();
        while wb.recent.front().is_some_and(|(t, _)| now.since(*t) > RATE_WINDOW) {
            wb.recent.pop_front();
        }
        let mut r = WriteBackReport {
            areas: wb.areas.len() as u64,
            writes: wb.writes,
            ssd_writes: wb.ssd_writes,
            diverted: wb.diverted,
            scrubbed: wb.scrubbed,
            scrubbed_bytes: wb.scrubbed_bytes,
            scrub_failed: wb.scrub_failed,
            freed: wb.freed,
            scrub_rate: wb.recent.iter().map(|r| r.1).sum::<u64>() / RATE_WINDOW.as_secs().max(1),
            high_percent: WATERMARKS.high,
            low_percent: WATERMARKS.low,
            flushing: self.flushing(),
            ..WriteBackReport::default()
        };
        for a in wb.areas.values() {
            r.quota_bytes += a.quota;
            r.used_bytes += a.used();
            r.dirty_bytes += a.dirty_bytes(|id| self.vol.chunk_dirty(id));
        }
        r
    }
}
