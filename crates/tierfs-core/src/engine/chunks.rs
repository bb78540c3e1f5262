//! The engine's part of sub-file extents: Hystor's monitor fed from the
//! access events of big files in `hystor` groups, its plan every period,
//! and the chunk executor, which the migrator thread runs between file
//! moves at the migration rate.
//!
//! The remap area (what the chunks may occupy) is the SSD capacity less
//! what whole files take, less a margin kept free for them: whole files
//! have the first claim, and chunks yield at the next period when whole
//! files grow (the smooth update fits a shrunk area first).

use super::{Engine, Pacer};
use crate::clock::Timestamp;
use crate::error::Error;
use crate::event::EventKind;
use crate::extent::{ChunkId, ChunkSize, Monitor};
use crate::migrate::{Outcome, Skip};
use crate::report::SplitReport;
use crate::state::ns::Ino;
use crate::stats::{FileStats, Residence, Stats};
use crate::store::Store;
use crate::tier::Tier;
use crate::vfs::extent::ChunkOp;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Share of the SSD capacity (percent) the remap area leaves free for
/// whole files to grow into between two periods.
pub const REMAP_MARGIN_PERCENT: u64 = 5;

/// The monitor and the queue of chunk moves (a leaf lock, after `planner`
/// and `groups`).
#[derive(Debug)]
pub(crate) struct Chunks {
    pub monitor: Monitor,
    /// Read requests of counted files: (served wholly by the SSD, all).
    pub reads: HashMap<Ino, (u64, u64)>,
    /// Chunk moves to carry out, drops first.
    pub queue: VecDeque<(ChunkId, ChunkOp)>,
    /// The remap area at the last period, bytes.
    pub area: u64,
    /// Chunk moves done: copies to the SSD, drops, whole files unsplit.
    pub added: u64,
    pub dropped: u64,
    pub unsplit: u64,
}

impl Chunks {
    pub fn new(period: Duration) -> Self {
        Chunks {
            monitor: Monitor::new(period, crate::extent::defaults::UPDATE_PERCENT),
            reads: HashMap::new(),
            queue: VecDeque::new(),
            area: 0,
            added: 0,
            dropped: 0,
            unsplit: 0,
        }
    }
}

impl<S: Store> Engine<S> {
    /// The chunks already on the SSD join the resident list at start (the
    /// block table starts empty: they stay until hotter ones displace them).
    /// Chunks the write-back areas took (`wb`) stay out.
    pub(super) fn load_resident(&self, wb: &HashSet<ChunkId>) {
        let files = self.vol.split_files();
        let mut c = self.chunks.lock();
        for (ino, _) in files {
            let Some(chunk) = self.vol.chunk_size(ino) else { continue };
            for index in self.vol.chunk_indices(ino) {
                let id = ChunkId::new(ino, index);
                if !wb.contains(&id) {
                    c.monitor.resident.insert(id, chunk.bytes());
                }
            }
        }
    }

    /// Feeds one event of file `ino` (statistics `f`, already applied) to
    /// the monitor if the file's policy splits files and it is past the
    /// sieve. The caller holds the statistics.
    pub(super) fn chunk_event(&self, f: &FileStats, ev: &crate::event::Event) {
        let ino = ev.ino;
        match ev.kind {
            EventKind::Remove => {
                let mut c = self.chunks.lock();
                c.monitor.forget(ino);
                c.reads.remove(&ino);
            }
            EventKind::Resize { size } => {
                // The volume already took the chunks past the end off the
                // SSD; the table and the list forget them.
                self.chunks.lock().monitor.truncate(ino, size);
            }
            EventKind::Read { off, len, tier, .. } | EventKind::Write { off, len, tier, .. } => {
                let (kind, params) = self.setting(f.group);
                if !kind.policy().chunks() || f.size <= params.sieve || f.residence != Residence::Hdd {
                    return;
                }
                // The map's size for a split file (a lookup, not a count of
                // its chunks: this runs for every event).
                let chunk = self.vol.chunk_size(ino).or_else(|| ChunkSize::new(params.chunk)).unwrap_or_default();
                let mut c = self.chunks.lock();
                // A sampled event stands for `times` requests.
                c.monitor.on_accesses(ino, chunk, off, len, ev.times);
                if matches!(ev.kind, EventKind::Read { .. }) {
                    let n = u64::from(ev.times);
                    let r = c.reads.entry(ino).or_default();
                    r.0 += if tier == Tier::Ssd { n } else { 0 };
                    r.1 += n;
                }
            }
            _ => {}
        }
    }

    /// Once per period: files that left a splitting policy (or the SSD
    /// account's reach) lose their chunks, and the monitor's plan for the
    /// remap area is queued. The caller holds the statistics.
    pub(super) fn chunk_tick(&self, st: &Stats, now: Timestamp) {
        let split = self.vol.split_files();
        // Its own statement: `setting` locks the groups again.
        let groups = self.groups.lock().all();
        let any_group = groups.into_iter().any(|(g, _)| self.setting(g).0.policy().chunks());
        if !any_group && split.is_empty() {
            return;
        }
        let mut unsplit = Vec::new();
        for &(ino, _) in &split {
            // A file keeps its chunks under a splitting policy past the
            // sieve, and in a group with a write-back area.
            let keep = st.get(ino).is_some_and(|f| {
                let (kind, params) = self.setting(f.group);
                (kind.policy().chunks() && f.size > params.sieve)
                    || crate::policy::write_back_percent(kind, &params) > 0
            });
            if !keep {
                unsplit.push(ino);
            }
        }
        let chunk_bytes: u64 = split.iter().map(|s| s.1).sum();
        let (used, limit) = {
            let a = self.account.lock();
            (a.used(), a.limit())
        };
        let whole = used.saturating_sub(chunk_bytes);
        // The write-back areas have their quota of the SSD (Hystor §5.5).
        let wb = self.wb_quota_total();
        let area = limit.saturating_sub(whole).saturating_sub(wb).saturating_sub(limit / 100 * REMAP_MARGIN_PERCENT);
        let mut c = self.chunks.lock();
        c.area = area;
        for &ino in &unsplit {
            c.monitor.forget(ino);
            c.queue.push_back((ChunkId::new(ino, 0), ChunkOp::Unsplit));
        }
        // Resident chunks that are neither on the SSD nor on their way
        // there (their file was unsplit or migrated whole) leave the list.
        let queued: HashSet<ChunkId> = c.queue.iter().map(|q| q.0).collect();
        let stale: Vec<ChunkId> =
            c.monitor.resident.top_down().filter(|id| !queued.contains(id) && !self.vol.has_chunk(*id)).collect();
        for id in stale {
            c.monitor.resident.remove(id);
        }
        let Some(plan) = c.monitor.on_tick(now, area) else { return };
        if plan.is_empty() {
            return;
        }
        tracing::debug!(area, add = plan.add.len(), drop = plan.drop.len(), "chunk plan");
        for id in plan.drop {
            c.queue.push_back((id, ChunkOp::Drop(id.index)));
        }
        for cand in plan.add {
            let chunk = ChunkSize::new(cand.bytes).unwrap_or_default();
            c.queue.push_back((cand.id, ChunkOp::Add(cand.id.index, chunk)));
        }
        drop(c);
        self.moves_cv.notify_one();
    }

    /// Carries out the next queued chunk move, if any (the migrator
    /// thread). Returns false if there was none.
    pub(super) fn next_chunk_move(&self) -> bool {
        let Some((id, op)) = self.chunks.lock().queue.pop_front() else { return false };
        if let ChunkOp::Add(_, chunk) = op {
            let bytes = self.vol.chunk_size(id.ino).unwrap_or(chunk).bytes();
            if !self.admit_ssd(bytes) {
                // Over the SSD write budget: not copied, so not resident.
                self.chunks.lock().monitor.resident.remove(id);
                self.diverted_note(id.ino, "chunk copy");
                return true;
            }
        }
        self.doing("migrator", format!("{op:?} of inode {}", id.ino));
        let r = self.vol.chunk_op(id.ino, op, &Pacer(self), &mut |_| Ok(()));
        // Looked up before `chunks` is locked: it is a leaf (nothing else,
        // not `notes`, is taken while it is held). Review finding.
        let back = self.vol.chunk_size(id.ino).map(|c| c.bytes());
        let mut handover = false;
        let mapped = self.vol.has_chunk(id);
        let failed = {
            let mut c = self.chunks.lock();
            match (op, r) {
                (ChunkOp::Add(..), Ok(Outcome::Done(bytes))) => {
                    c.added += 1;
                    self.counters.bytes_moved.fetch_add(bytes, Ordering::Relaxed);
                    self.counters.chunk_bytes.fetch_add(bytes, Ordering::Relaxed);
                    None
                }
                (ChunkOp::Add(..), Ok(Outcome::Skipped(Skip::AlreadyThere))) if mapped => {
                    // A write put it in a write-back area: the remap area
                    // takes it over.
                    handover = true;
                    None
                }
                (ChunkOp::Add(..), r) => {
                    // Not on the SSD: not resident either.
                    c.monitor.resident.remove(id);
                    Some(r)
                }
                (ChunkOp::Drop(_), Ok(Outcome::Done(_))) => {
                    c.dropped += 1;
                    None
                }
                (ChunkOp::Drop(_), Ok(Outcome::Skipped(Skip::AlreadyThere | Skip::Gone))) => None,
                (ChunkOp::Drop(_), r) => {
                    // Still on the SSD: back in the list, to be dropped later.
                    if let Some(bytes) = back {
                        c.monitor.resident.insert(id, bytes);
                    }
                    Some(r)
                }
                (ChunkOp::Unsplit, Ok(Outcome::Done(_))) => {
                    c.unsplit += 1;
                    c.monitor.resident.forget(id.ino);
                    None
                }
                (ChunkOp::Unsplit, r) => Some(r),
            }
        };
        if handover {
            self.wb_handover(id);
        }
        if let Some(r) = failed {
            self.chunk_failed(id, op, r);
        }
        true
    }

    fn chunk_failed(&self, id: ChunkId, op: ChunkOp, r: crate::error::Result<Outcome>) {
        match r {
            Ok(Outcome::Skipped(why)) => self.note(id.ino, format!("chunk {op:?} not done: {why:?}")),
            Err(Error::Cancelled) | Ok(Outcome::Done(_)) => {}
            Err(e) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(ino = id.ino, ?op, error = %e, "chunk move failed");
            }
        }
    }

    /// Takes a split file's chunks off the SSD now (the cleaner thread, for
    /// a write that found the SSD full). True when it has none left.
    pub(super) fn unsplit_now(&self, ino: Ino) -> bool {
        let bounded = super::Bounded(self, Duration::from_secs(1));
        let done = self.for_writer(ino, "a file's chunks off the SSD", || {
            self.vol.chunk_op(ino, ChunkOp::Unsplit, &bounded, &mut |_| Ok(()))
        });
        if done.is_some() {
            let mut c = self.chunks.lock();
            c.unsplit += 1;
            c.monitor.resident.forget(ino);
        }
        done.is_some()
    }

    /// The remap area for `tierfs stats`.
    pub(super) fn remap_report(&self) -> crate::report::RemapReport {
        let split = self.vol.split_files();
        let c = self.chunks.lock();
        crate::report::RemapReport {
            split_files: split.len() as u64,
            used_bytes: split.iter().map(|s| s.1).sum(),
            area_bytes: c.area,
            added: c.added,
            dropped: c.dropped,
            unsplit: c.unsplit,
            queued: c.queue.len() as u64,
        }
    }

    /// A split file's layout and hit ratio for `tierfs stats --file`.
    pub(super) fn split_report(&self, ino: Ino, size: u64) -> Option<SplitReport> {
        let info = self.vol.split_info(ino);
        let c = self.chunks.lock();
        let (ssd_reads, reads) = c.reads.get(&ino).copied().unwrap_or_default();
        if info.is_none() && reads == 0 {
            return None;
        }
        let info = info.unwrap_or_default();
        let ssd_bytes = (info.chunks * info.chunk).min(size);
        let hottest = c
            .monitor
            .table
            .hottest(ino, 10)
            .into_iter()
            .map(|(index, counter)| (index, counter, self.vol.has_chunk(ChunkId::new(ino, index))))
            .collect();
        Some(SplitReport {
            chunk: info.chunk,
            ssd_chunks: info.chunks,
            dirty_chunks: info.dirty,
            ssd_bytes,
            hdd_only_bytes: size.saturating_sub(ssd_bytes),
            hottest,
            reads,
            ssd_reads,
            why: if info.chunks > 0 {
                "hot chunks copied to the SSD by hystor: reads and writes take the userspace path".into()
            } else {
                "counted by hystor; no chunk on the SSD yet".into()
            },
        })
    }
}
