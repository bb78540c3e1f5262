//! Split files in the volume: the shadow files, the data path of a file
//! with chunks on the SSD, the chunk mover's entry points, and what
//! happens to a split file's chunks when it is truncated, migrated as a
//! whole, or removed (see ARCHITECTURE.md, "Sub-file extents").
//!
//! A file's chunk set changes only under its inode lock held for writing
//! and, if it is open, its I/O lock held for writing; reads, writes and
//! punches hold the I/O lock for reading, so they see one chunk set from
//! start to end. Open files carry a copy of "has chunks" that is read
//! without the map's lock, so unsplit files pay nothing for the feature.

use super::file::Handle;
use super::{OpenInode, Volume};
use crate::error::{Error, Result};
use crate::event::EventKind;
use crate::extent::map::ChunkState;
use crate::extent::split::{CrashHook, Split};
use crate::extent::{ChunkId, ChunkSize};
use crate::migrate::{Control, Outcome, Skip};
use crate::state::ns::Ino;
use crate::store::{Stat, Store};
use crate::tier::{Placement, Tier};
use std::ffi::OsString;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How long the scrubber waits for a file's inode lock.
const SCRUB_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// Where a split file's HDD file stands (see `Volume::find_home`).
enum Home<F> {
    /// Found under the file's first name, and it is the file's.
    File(F),
    /// The file is gone, or no longer a plain file on the HDD.
    Gone,
    /// Not under the file's first name (parent, name): the name is gone,
    /// or (`true`) another file has it.
    Lost(Ino, OsString, bool),
}

/// The directory of the shadow files, `.tierfs/shadow` on the SSD tier.
pub const SHADOW_DIR: &str = "shadow";

/// A change of a file's chunk set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkOp {
    /// Copy chunk `index` to the SSD (chunks of the given size, unless the
    /// file has chunks already).
    Add(u64, ChunkSize),
    /// Take chunk `index` off the SSD (written back first if dirty).
    Drop(u64),
    /// Take every chunk off the SSD and remove the shadow file.
    Unsplit,
}

/// A split file's layout, for reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SplitInfo {
    /// Chunk size.
    pub chunk: u64,
    /// Chunks on the SSD.
    pub chunks: u64,
    /// Of which dirty (the HDD copy is stale).
    pub dirty: u64,
}

fn never(_: &'static str) -> Result<()> {
    Ok(())
}

impl<S: Store> Volume<S> {
    /// True if some chunk of `ino` has a copy on the SSD.
    pub fn is_split(&self, ino: Ino) -> bool {
        self.extents.lock().is_split(ino)
    }

    /// The split layout of `ino`, if it has chunks on the SSD.
    pub fn split_info(&self, ino: Ino) -> Option<SplitInfo> {
        let m = self.extents.lock();
        let chunk = m.chunk_size(ino)?;
        let mut info = SplitInfo { chunk: chunk.bytes(), ..SplitInfo::default() };
        for (_, state) in m.chunks(ino) {
            info.chunks += 1;
            info.dirty += u64::from(state == ChunkState::Dirty);
        }
        Some(info)
    }

    /// The indices of the chunks of `ino` on the SSD.
    pub fn chunk_indices(&self, ino: Ino) -> Vec<u64> {
        self.extents.lock().chunks(ino).map(|(i, _)| i).collect()
    }

    /// True if the chunk has a copy on the SSD.
    pub fn has_chunk(&self, id: ChunkId) -> bool {
        self.extents.lock().get(id).is_some()
    }

    /// What the shadow of `ino` occupies on the SSD (allocated bytes, as
    /// `du` counts them): the SSD account's charge of a split file.
    pub fn shadow_bytes(&self, ino: Ino) -> u64 {
        let Ok(Some(f)) = self.shadow(ino, false) else { return 0 };
        self.ssd_alloc(&f)
    }

    /// Every split file and the bytes of its chunks.
    pub fn split_files(&self) -> Vec<(Ino, u64)> {
        let m = self.extents.lock();
        let files: Vec<Ino> = m.files().collect();
        files
            .into_iter()
            .map(|ino| (ino, m.chunk_size(ino).map_or(0, |c| c.bytes() * m.chunks(ino).count() as u64)))
            .collect()
    }

    /// The chunk size of a split file.
    pub fn chunk_size(&self, ino: Ino) -> Option<ChunkSize> {
        self.extents.lock().chunk_size(ino)
    }

    /// A split file's two copies as the extent code sees them.
    pub(crate) fn split_view<'a>(&'a self, ino: Ino, home: &'a S::File, shadow: &'a S::File) -> Split<'a, S> {
        Split { hdd: self.tiers.store(Tier::Hdd), home, ssd: self.tiers.store(Tier::Ssd), shadow, ino, caller: None }
    }

    /// The shadow of a file the map says is split, which must exist.
    fn existing_shadow(&self, ino: Ino) -> Result<Arc<S::File>> {
        self.shadow(ino, false)?
            .ok_or_else(|| Error::Corrupt(format!("file {ino} has chunks on the SSD but no shadow file")))
    }

    /// The shadow file of `ino`, opened on first use; with `create`, made
    /// (and its name synced) if it does not exist. `None` if it does not
    /// exist and may not be made.
    fn shadow(&self, ino: Ino, create: bool) -> Result<Option<Arc<S::File>>> {
        if let Some(f) = self.shadows.lock().get(&ino) {
            return Ok(Some(f.clone()));
        }
        let s = self.tiers.store(Tier::Ssd);
        let d = self.tiers.reserved(Tier::Ssd, SHADOW_DIR)?;
        let name = OsString::from(ino.to_string());
        let f = match s.open(&d, &name, libc::O_RDWR, 0) {
            // About to take chunks: its name must be durable even if the
            // sync after an earlier creation failed. Review finding.
            Ok(f) if create => {
                s.sync_dir(&d)?;
                f
            }
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && create => {
                let f = s.open(&d, &name, libc::O_RDWR | libc::O_CREAT, 0o600)?;
                // The name is durable before any chunk is committed (I1
                // needs the bytes to be findable after a power cut).
                s.sync_dir(&d)?;
                f
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let f = Arc::new(f);
        Ok(Some(self.shadows.lock().entry(ino).or_insert(f).clone()))
    }

    /// Removes the shadow file of a file with no chunk on the SSD.
    fn remove_shadow(&self, ino: Ino) {
        self.shadows.lock().remove(&ino);
        let s = self.tiers.store(Tier::Ssd);
        if let Ok(d) = self.tiers.reserved(Tier::Ssd, SHADOW_DIR) {
            match s.unlink(&d, OsString::from(ino.to_string()).as_os_str()) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                // Left for recovery at the next mount (a shadow without map
                // entries is removed there).
                Err(e) => tracing::warn!(ino, error = %e, "could not remove a shadow file"),
            }
        }
    }

    /// The shadow of an open file if it is split (the caller holds its I/O
    /// lock, so this cannot change meanwhile).
    pub(crate) fn split_shadow(&self, oi: &OpenInode<S>) -> Result<Option<Arc<S::File>>> {
        if !oi.split.load(Ordering::Acquire) {
            return Ok(None);
        }
        self.existing_shadow(oi.ino).map(Some)
    }

    /// Carries out a change of a file's chunk set (see [`ChunkOp`]), unless
    /// a migration of the file runs. Waits for the file's locks at most as
    /// long as `ctl` allows. Tests stop it at the named points with `crash`.
    pub fn chunk_op(&self, ino: Ino, op: ChunkOp, ctl: &dyn Control, crash: CrashHook<'_>) -> Result<Outcome> {
        let _doing = crate::quiet::doing("chunk-move", ino);
        let Some(_only) = self.exclusive(ino) else { return Ok(Outcome::Skipped(Skip::Busy)) };
        if let ChunkOp::Add(_, chunk) = op {
            // Paced before any lock is taken.
            ctl.pace(chunk.bytes());
        }
        self.told_kernel(ino, self.chunk_op_held(ino, op, ctl, crash))
    }

    /// [`Volume::chunk_op`] for a caller that holds the file's migration
    /// mark.
    pub(crate) fn chunk_op_held(
        &self,
        ino: Ino,
        op: ChunkOp,
        ctl: &dyn Control,
        crash: CrashHook<'_>,
    ) -> Result<Outcome> {
        let add = matches!(op, ChunkOp::Add(..));
        if !add && !self.is_split(ino) {
            return Ok(Outcome::Skipped(Skip::AlreadyThere));
        }
        let Some(_il) = self.lock_file(ino, ctl.io_wait()) else {
            return Ok(Outcome::Skipped(Skip::Busy));
        };
        let rec = self.ns.record(ino)?;
        if add {
            match &rec {
                None => return Ok(Outcome::Skipped(Skip::Gone)),
                Some(r) if r.kind != crate::store::FileKind::File => return Ok(Outcome::Skipped(Skip::NotRegular)),
                Some(r) if r.placement != Placement::On(Tier::Hdd) => return Ok(Outcome::Skipped(Skip::AlreadyThere)),
                Some(_) => {}
            }
        }
        let oi = self.open_inode(ino);
        let io = match &oi {
            None => None,
            Some(o) => match ctl.io_wait() {
                None => Some(o.io.write()),
                Some(d) => match o.io.try_write_for(d) {
                    Some(g) => Some(g),
                    None => return Ok(Outcome::Skipped(Skip::Busy)),
                },
            },
        };
        let home = match (&oi, &io) {
            (Some(_), Some(io)) => {
                if io.retired {
                    // Its last handle closed: the close decides (under
                    // this lock) what happens to the chunks.
                    return Ok(Outcome::Skipped(Skip::Busy));
                }
                if io.backed > 0 {
                    // The kernel reads and writes its HDD file directly.
                    return Ok(Outcome::Skipped(Skip::Deferred));
                }
                if io.placement != Placement::On(Tier::Hdd) {
                    return Ok(Outcome::Skipped(Skip::AlreadyThere));
                }
                self.primary_of(ino, io)?
            }
            _ => {
                let Some((p, n)) = self.ns.first_link(ino)? else { return Ok(Outcome::Skipped(Skip::Gone)) };
                let d = self.tiers.dir(p, Tier::Hdd, false)?;
                Arc::new(self.tiers.store(Tier::Hdd).open(&d, &n, libc::O_RDWR, 0)?)
            }
        };
        let shadow = if add {
            self.shadow(ino, true)?.ok_or_else(|| Error::errno(libc::ENOENT))?
        } else {
            self.existing_shadow(ino)?
        };
        let split = self.split_view(ino, &home, &shadow);
        let hooks = self.hooks();
        let mut reserved = 0;
        // Dirty chunks going home write the HDD file: its times (the
        // file's) are put back after. Writers, opens and attribute changes
        // wait for this whole call.
        let times = if add { None } else { self.tiers.store(Tier::Hdd).fstat(&home).ok() };
        let done = match op {
            ChunkOp::Add(index, chunk) => {
                let chunk = self.extents.lock().chunk_size(ino).unwrap_or(chunk);
                if index.saturating_mul(chunk.bytes()) >= split.size()? {
                    // Cut away since it was chosen.
                    Outcome::Skipped(Skip::Gone)
                } else if self.extents.lock().get(ChunkId::new(ino, index)).is_some() {
                    Outcome::Skipped(Skip::AlreadyThere)
                } else if !hooks.reserve_ssd(ino, chunk.bytes()) {
                    Outcome::Skipped(Skip::NoSpace)
                } else {
                    reserved = chunk.bytes();
                    let r = split.add(&self.extents, index, chunk, crash);
                    if r.is_err() {
                        hooks.settle_ssd(ino, reserved, Some(self.shadow_bytes(ino)));
                    }
                    r?;
                    Outcome::Done(chunk.bytes())
                }
            }
            ChunkOp::Drop(index) => {
                let bytes = self.extents.lock().chunk_size(ino).map_or(0, |c| c.bytes());
                if self.extents.lock().get(ChunkId::new(ino, index)).is_none() {
                    Outcome::Skipped(Skip::AlreadyThere)
                } else {
                    split.drop_chunk(&self.extents, index, crash)?;
                    Outcome::Done(bytes)
                }
            }
            ChunkOp::Unsplit => {
                let bytes = self.extents.lock().chunk_size(ino).map_or(0, |c| c.bytes());
                let n = split.unsplit(&self.extents, crash)?;
                Outcome::Done(n * bytes)
            }
        };
        if let Some(before) = &times {
            // (The caller tells the kernel the attributes changed.)
            self.keep_home_mtime(ino, &home, before);
        }
        let split_now = self.is_split(ino);
        if let Some(o) = &oi {
            o.split.store(split_now, Ordering::Release);
        }
        if !split_now {
            self.remove_shadow(ino);
        }
        // The account charges a split file what its shadow occupies.
        hooks.settle_ssd(ino, reserved, Some(self.shadow_bytes(ino)));
        Ok(done)
    }

    /// A write that the file's write-back area takes (Hystor §5.5): the
    /// chunks it touches that are only on the HDD are made on the SSD from
    /// it, durably, and mapped dirty; the scrubber writes them back later.
    /// `None` (nothing done) if the file has no area, the write is too big
    /// or the tail of a bigger one, all its chunks are on the SSD already
    /// (the split file's path takes it), the file is not a plain HDD file
    /// now, or neither the area nor the SSD has room: the write then takes
    /// the usual path. Runs on the request thread: one SSD fdatasync and
    /// one flush of the state, and an HDD read only for the part of a
    /// chunk the write does not cover.
    pub(crate) fn buffer_write(
        &self,
        h: &Handle<S>,
        off: u64,
        data: &[u8],
        crash: crate::extent::split::CrashHook<'_>,
    ) -> Result<Option<u32>> {
        let wb = h.oi.wb;
        let len = data.len() as u64;
        if wb.max_write == 0 || len == 0 || len > wb.max_write || (!h.append && h.continues(off)) {
            return Ok(None);
        }
        let chunk = self.chunk_size(h.ino).unwrap_or(wb.chunk);
        if !h.append && self.extents.lock().unmapped(h.ino, chunk, off, len).is_empty() {
            return Ok(None);
        }
        let Some(_only) = self.exclusive(h.ino) else { return Ok(None) };
        let _il = self.ilocks.get(h.ino).write();
        let io = h.oi.io.write();
        if io.retired || io.backed > 0 || io.placement != Placement::On(Tier::Hdd) || !io.writable() {
            return Ok(None);
        }
        let home = self.primary_of(h.ino, &io)?;
        let hdd = self.tiers.store(Tier::Hdd);
        let off = if h.append { hdd.fstat(&home)?.size } else { off };
        let new = self.extents.lock().unmapped(h.ino, chunk, off, len);
        if new.is_empty() {
            return Ok(None);
        }
        let old = hdd.fstat(&home)?.size;
        let end = off + len;
        if new.iter().any(|&i| {
            let (start, known) = (i * chunk.bytes(), chunk.within(i, old));
            known > 0 && !(off <= start && end >= start + known)
        }) {
            // Making the chunk would read its other bytes from the HDD
            // first: that read costs what the area would save (an append
            // to a file on the HDD, a partial overwrite). The write goes to
            // the HDD.
            return Ok(None);
        }
        // What each new chunk takes on the SSD.
        let size = old.max(end);
        let sized: Vec<(u64, u64)> =
            new.iter().map(|&i| (i, crate::extent::writeback::charge(chunk, i, size))).collect();
        let hooks = self.hooks();
        let bytes: u64 = sized.iter().map(|c| c.1).sum();
        if !hooks.wb_reserve(wb.area, bytes) {
            return Ok(None);
        }
        if !hooks.reserve_ssd(h.ino, bytes) {
            hooks.wb_admitted(wb.area, h.ino, &[], bytes);
            return Ok(None);
        }
        let shadow = match self.shadow(h.ino, true) {
            Ok(Some(s)) => s,
            Ok(None) | Err(_) => {
                hooks.wb_admitted(wb.area, h.ino, &[], bytes);
                hooks.settle_ssd(h.ino, bytes, None);
                return Ok(None);
            }
        };
        let split = Split { caller: Some(h.caller), ..self.split_view(h.ino, &home, &shadow) };
        let r = split.buffer(&self.extents, off, data, chunk, crash);
        let split_now = self.is_split(h.ino);
        h.oi.split.store(split_now, Ordering::Release);
        // What the map has now (a write that failed after the commit left
        // its new chunks mapped and dirty: the area must write them back).
        let added: Vec<(u64, u64)> =
            sized.iter().copied().filter(|c| self.has_chunk(ChunkId::new(h.ino, c.0))).collect();
        hooks.wb_admitted(wb.area, h.ino, &added, bytes);
        if !split_now {
            self.remove_shadow(h.ino);
        }
        hooks.settle_ssd(h.ino, bytes, Some(self.shadow_bytes(h.ino)));
        match r {
            Ok(_) => {}
            // The SSD is full after all: the usual path finds room or
            // writes to the HDD.
            Err(e) if e.is(libc::ENOSPC) => return Ok(None),
            Err(e) => return Err(e),
        }
        self.touch_home(h.ino, &home);
        let end = off + len;
        let old = h.oi.size.fetch_max(end, Ordering::AcqRel);
        self.note_change(h.ino);
        if h.sync {
            split.fsync()?;
        }
        drop(io);
        let fragment = h.fragment(off, len);
        self.emit(h.ino, EventKind::Write { off, len, tier: Tier::Ssd, size: old.max(end), fragment });
        Ok(Some(data.len() as u32))
    }

    /// A write that went to a split file's SSD chunks only sets the file's
    /// times as a write to its home would have: tierfs reports the home's
    /// (else `make`, or a backup that goes by mtime and size, misses the
    /// change). The bytes have landed: a failure is logged, not answered.
    pub(crate) fn touch_home(&self, ino: Ino, home: &S::File) {
        if let Err(e) = self.tiers.store(Tier::Hdd).touch(home) {
            tracing::warn!(ino, error = %e, "a write to SSD chunks could not set the file's mtime");
        }
    }

    /// Puts back the modification time the HDD file had before dirty
    /// chunks were written back into it: tierfs reports that file's times,
    /// the bytes are the file's own (a write already moved the time when it
    /// landed on the SSD), and a time the user set since (`touch -d`,
    /// `rsync -t`, `cp -p`) must stay. The caller kept every write out
    /// since `before`, or saw none. A failure is logged: the bytes are home.
    /// True if it set the time back.
    fn keep_home_mtime(&self, ino: Ino, home: &S::File, before: &Stat) -> bool {
        let hdd = self.tiers.store(Tier::Hdd);
        let r = hdd.fstat(home).and_then(|now| {
            if now.mtime == before.mtime {
                return Ok(false);
            }
            hdd.keep_mtime(home, before.mtime).map(|()| true)
        });
        r.unwrap_or_else(|e| {
            tracing::warn!(ino, error = %e, "a write-back of chunks could not keep the file's mtime");
            false
        })
    }

    /// Writes one dirty chunk back for the scrubber of a write-back area:
    /// its SSD copy is read while the file's writers wait (a moment: one
    /// chunk from the SSD), then written to the HDD file and synced while
    /// they go on; a write that reached the chunk meanwhile keeps it dirty.
    /// The inode lock (and the I/O lock if the file is open), held for
    /// writing while the chunk is read and for reading during the
    /// write-back, keep opens, truncates, chunk moves and migrations out:
    /// a truncate waits for one chunk's write-back, and none can cut the
    /// file while an older copy goes to the HDD. Review finding: with the
    /// locks released, a truncate in between was undone by the write-back.
    /// Then the HDD file's mtime is put back if nothing changed the file
    /// meanwhile (`keep_home_mtime_after_scrub`).
    /// `Ok(None)`: the file is gone or busy, try later; `Ok(Some(clean))`
    /// otherwise.
    pub fn scrub_chunk(&self, id: ChunkId, crash: CrashHook<'_>) -> Result<Option<bool>> {
        let _doing = crate::quiet::doing("write-back", id.ino);
        let ino = id.ino;
        // No chunk move, migration or other scrub of the file until its
        // time is put back (each would read a time this one moved).
        let Some(_only) = self.exclusive(ino) else { return Ok(None) };
        let Some(il) = self.lock_file(ino, Some(SCRUB_LOCK_WAIT)) else { return Ok(None) };
        let oi = self.open_inode(ino);
        let io = oi.as_ref().map(|o| o.io.write());
        let home = match &io {
            Some(io) if io.retired || io.placement != Placement::On(Tier::Hdd) => return Ok(None),
            Some(io) => self.primary_of(ino, io)?,
            None => match self.open_home(ino)? {
                Some(f) => Arc::new(f),
                None => return Ok(None),
            },
        };
        let Some(shadow) = self.shadow(ino, false)? else { return Ok(None) };
        let split = self.split_view(ino, &home, &shadow);
        let Some(copy) = split.read_dirty(&self.extents, id.index)? else {
            return Ok(Some(self.extents.lock().get(id).is_some()));
        };
        // What the file was before the write-back, with every change kept
        // out: its time is put back below if nothing changed it since.
        let before = match copy.writes_home() {
            true => self.tiers.store(Tier::Hdd).fstat(&home).ok().map(|st| (st, self.change_gen(ino))),
            false => None,
        };
        // Writers and opens go on; truncates and chunk moves wait.
        let io = io.map(parking_lot::RwLockWriteGuard::downgrade);
        let il = parking_lot::RwLockWriteGuard::downgrade(il);
        let clean = split.store_back(&self.extents, copy, crash)?;
        drop((io, il));
        if before.is_some_and(|b| self.keep_home_mtime_after_scrub(ino, &home, &b)) {
            // With no lock held: the kernel may have asked meanwhile.
            self.attrs_changed(ino);
        }
        Ok(Some(clean))
    }

    /// [`Volume::keep_home_mtime`] after a scrub that let writers run: with
    /// the file's locks taken again (writes, opens, attribute changes and
    /// migrations held), and only if nothing changed the file since
    /// `before` (its change counter, which every change but an append
    /// moves, and its size, which an append moves) and `home` is still its
    /// HDD file. Otherwise a write or a time the user set since stands.
    /// True if it set the time back.
    fn keep_home_mtime_after_scrub(&self, ino: Ino, home: &S::File, (st, gen): &(Stat, u64)) -> bool {
        let busy = || {
            tracing::debug!(ino, "the file is busy: a scrub leaves its mtime moved");
            false
        };
        let Some(_il) = self.lock_file(ino, Some(SCRUB_LOCK_WAIT)) else { return busy() };
        let oi = self.open_inode(ino);
        let io = match &oi {
            None => None,
            Some(o) => match o.io.try_write_for(SCRUB_LOCK_WAIT) {
                Some(g) => Some(g),
                None => return busy(),
            },
        };
        let hdd = self.tiers.store(Tier::Hdd);
        // A home that lost its last link is no longer the file's.
        let unchanged = self.change_gen(ino) == *gen
            && self.ns.record(ino).ok().flatten().is_some_and(|r| r.placement == Placement::On(Tier::Hdd))
            && hdd.fstat(home).is_ok_and(|now| now.size == st.size && now.nlink > 0);
        let kept = unchanged && self.keep_home_mtime(ino, home, st);
        drop(io);
        kept
    }

    /// The inode lock of `ino` for writing, waited for at most `wait`
    /// (None: as long as it takes). While it is held the file's names are
    /// its own (a rename of the file, or over one of its names, waits for
    /// it), so its HDD file can be opened by name. `None`: busy.
    fn lock_file(&self, ino: Ino, wait: Option<std::time::Duration>) -> Option<parking_lot::RwLockWriteGuard<'_, ()>> {
        let lock = self.ilocks.get(ino);
        match wait {
            None => Some(lock.write()),
            Some(d) => lock.try_write_for(d),
        }
    }

    /// True if some chunk of `ino` on the SSD is dirty.
    fn dirty_chunks(&self, ino: Ino) -> bool {
        self.extents.lock().chunks(ino).any(|(_, s)| s == ChunkState::Dirty)
    }

    /// Whether a chunk is on the SSD and dirty (`Some(true)`), clean
    /// (`Some(false)`), or not on the SSD (`None`).
    pub fn chunk_dirty(&self, id: ChunkId) -> Option<bool> {
        self.extents.lock().get(id).map(|s| s == ChunkState::Dirty)
    }

    /// Takes every chunk of `ino` off the SSD (for a migration of the whole
    /// file, which the caller's migration mark keeps chunks from joining).
    pub(crate) fn unsplit_held(&self, ino: Ino, ctl: &dyn Control) -> Result<Option<Outcome>> {
        if !self.is_split(ino) {
            return Ok(None);
        }
        match self.chunk_op_held(ino, ChunkOp::Unsplit, ctl, &mut never)? {
            Outcome::Done(_) => {
                // The chunks are back on the HDD: its blocks may differ,
                // whatever the move does next.
                self.attrs_changed(ino);
                Ok(None)
            }
            Outcome::Skipped(Skip::AlreadyThere) => Ok(None),
            other => Ok(Some(other)),
        }
    }

    /// A file's last name and last handle are gone: its chunks leave the
    /// map (their bytes are gone with the file) and its shadow is removed.
    /// The caller holds the file's inode lock for writing, or knows no one
    /// can reach the file any more.
    pub(crate) fn forget_chunks(&self, ino: Ino) {
        let indices: Vec<u64> = {
            let m = self.extents.lock();
            if m.chunk_size(ino).is_none() {
                return;
            }
            m.chunks(ino).map(|(i, _)| i).collect()
        };
        let r = self.extents.lock().commit_discarded(ino, &indices);
        match r {
            Ok(()) => {
                self.remove_shadow(ino);
                self.hooks().off_ssd(ino);
            }
            // The entries stay; recovery drops those of files that are gone.
            Err(e) => tracing::warn!(ino, error = %e, "could not drop the chunks of a removed file"),
        }
    }

    /// The last name of `ino` went: a file nobody has open loses its chunks
    /// now; an open one at its last close.
    pub(crate) fn chunks_gone(&self, ino: Ino) {
        // The lock first, then the test: a chunk mover that checked the
        // record before it went may be adding the first chunk now (it
        // holds this lock). Review finding.
        let _il = self.ilocks.get(ino).write();
        if self.is_split(ino) && self.open_inode(ino).is_none() {
            self.forget_chunks(ino);
        }
    }

    /// Truncate of a split file (the caller holds its inode lock for writing
    /// and, if it is open, its I/O lock for writing).
    pub(crate) fn split_truncate(&self, ino: Ino, home: &S::File, shadow: &S::File, size: u64) -> Result<()> {
        self.split_view(ino, home, shadow).truncate(&self.extents, size)
    }

    /// Truncate of an open split file (the caller holds its inode lock for
    /// writing): under its I/O lock held for writing, so no read or write
    /// sees chunks leave half way.
    pub(crate) fn split_set_len(&self, oi: &OpenInode<S>, size: u64) -> Result<()> {
        let io = oi.io.write();
        let home = self.primary_of(oi.ino, &io)?;
        let Some(shadow) = self.split_shadow(oi)? else {
            drop(io);
            // Not split after all: the plain path.
            return Err(Error::Corrupt(format!("file {} lost its chunks under its inode lock", oi.ino)));
        };
        self.split_truncate(oi.ino, &home, &shadow, size)?;
        oi.size.store(size, Ordering::Release);
        self.note_change(oi.ino);
        if !self.is_split(oi.ino) {
            oi.split.store(false, Ordering::Release);
            self.remove_shadow(oi.ino);
        }
        self.hooks().settle_ssd(oi.ino, 0, Some(self.shadow_bytes(oi.ino)));
        Ok(())
    }

    /// Truncate of a split file nobody has open, through its name.
    pub(crate) fn split_truncate_closed(&self, ino: Ino, size: u64) -> Result<bool> {
        if !self.is_split(ino) {
            return Ok(false);
        }
        let (p, n) = self.kernel_link(ino)?;
        let d = self.tiers.dir(p, Tier::Hdd, false)?;
        let home = self.tiers.store(Tier::Hdd).open(&d, &n, libc::O_WRONLY, 0)?;
        let shadow = self.existing_shadow(ino)?;
        self.split_truncate(ino, &home, &shadow, size)?;
        if !self.is_split(ino) {
            self.remove_shadow(ino);
        }
        self.hooks().settle_ssd(ino, 0, Some(self.shadow_bytes(ino)));
        Ok(true)
    }

    /// Where a split file's HDD file (its home) stands: found by its first
    /// name, and checked against the identity the map recorded with its
    /// first chunk.
    fn find_home(&self, ino: Ino) -> Result<Home<S::File>> {
        match self.ns.record(ino)? {
            Some(r) if r.kind == crate::store::FileKind::File && r.placement == Placement::On(Tier::Hdd) => {}
            _ => return Ok(Home::Gone),
        }
        let Some((p, n)) = self.ns.first_link(ino)? else { return Ok(Home::Gone) };
        let hdd = self.tiers.store(Tier::Hdd);
        let opened = self.tiers.dir(p, Tier::Hdd, false).and_then(|d| Ok(hdd.open(&d, &n, libc::O_RDWR, 0)?));
        let f = match opened {
            Ok(f) => f,
            Err(e) if e.is(libc::ENOENT) => return Ok(Home::Lost(p, n, false)),
            Err(e) => return Err(e),
        };
        // The inode number, as recovery compares it everywhere: a device
        // number may change across reboots.
        let recorded = self.extents.lock().home(ino);
        if let Some((_, i)) = recorded {
            if hdd.fstat(&f)?.ino != i {
                return Ok(Home::Lost(p, n, true));
            }
        }
        Ok(Home::File(f))
    }

    /// The HDD file of a split file, opened for reading and writing; None
    /// if it is not a regular file on the HDD, its name is gone, or another
    /// file has it.
    fn open_home(&self, ino: Ino) -> Result<Option<S::File>> {
        Ok(match self.find_home(ino)? {
            Home::File(f) => Some(f),
            Home::Lost(_, n, true) => {
                tracing::error!(ino, name = ?n, "another file has the name of a split file's HDD file: its chunks stay on the SSD");
                None
            }
            Home::Lost(..) | Home::Gone => None,
        })
    }

    /// Loads the extent map at mount (after an unclean shutdown every chunk
    /// is dirty) and brings every split file and the shadow directory in
    /// line: chunks of files that are gone are dropped, shadows without
    /// chunks removed, and each split file recovered ([`Split::recover`]).
    /// Returns how many files needed something.
    pub(crate) fn recover_extents(&self, clean: bool) -> Result<u32> {
        let map = crate::extent::map::ExtentMap::load(self.ns.kv().clone(), clean)?;
        *self.extents.lock() = map;
        let mut fixed = 0;
        let files: Vec<Ino> = self.extents.lock().files().collect();
        for ino in files {
            let home = self.find_home(ino)?;
            let shadow = self.shadow(ino, false)?;
            match (home, shadow) {
                (Home::File(home), Some(shadow)) => {
                    self.split_view(ino, &home, &shadow).recover(&self.extents).map_err(|e| {
                        // The mount stops (its chunks may hold the only copy
                        // of acknowledged writes): say which file.
                        Error::State(format!("recovering the chunks of split file inode {ino}: {e}"))
                    })?;
                }
                (Home::Lost(p, n, other), Some(_)) if self.dirty_chunks(ino) => {
                    // Its name is gone (a rename of the file, or a power
                    // cut before its directory was synced), or another file
                    // has it (a rename over the file, killed between the
                    // backing renames and the commit): the dirty chunks, the
                    // only copy of acknowledged writes, cannot be written
                    // back, and into another file they must not be. The
                    // shadow, the file's image with those chunks, is set
                    // aside where the file was.
                    let d = self.tiers.reserved(Tier::Ssd, SHADOW_DIR)?;
                    let from = OsString::from(ino.to_string());
                    let aside = self.put_aside(Tier::Ssd, &d, &from, p, &n).map_err(|e| {
                        // The mount stops rather than lose the chunks.
                        Error::State(format!("setting aside the chunks of split file inode {ino}: {e}"))
                    })?;
                    tracing::warn!(ino, name = ?n, aside = ?aside, other_file = other,
                        "recovery: a split file's HDD file is not where its name is; its chunks are set aside");
                    self.forget_chunks(ino);
                    fixed += 1;
                }
                _ => {
                    // The file is gone (removed while open, then a crash),
                    // its chunks are copies of its HDD bytes, or the shadow
                    // is gone: nothing of the chunks can be used.
                    tracing::warn!(ino, "chunks of a file that is gone or has no shadow are dropped");
                    self.forget_chunks(ino);
                    fixed += 1;
                }
            }
            if !self.is_split(ino) {
                self.remove_shadow(ino);
            }
        }
        self.shadows.lock().clear();
        let s = self.tiers.store(Tier::Ssd);
        let d = self.tiers.reserved(Tier::Ssd, SHADOW_DIR)?;
        let mut removed = false;
        for e in s.list(&d)? {
            let ino = e.name.to_str().and_then(|n| n.parse::<Ino>().ok());
            if ino.is_some_and(|i| self.is_split(i)) {
                continue;
            }
            let _ = s.unlink(&d, &e.name);
            removed = true;
            fixed += 1;
        }
        if removed {
            s.sync_dir(&d)?;
        }
        Ok(fixed)
    }

    /// At a clean unmount: every split file's shadow and HDD file synced
    /// (a chunk written back since its last sync must not come back stale
    /// in the shadow after a later power cut, with its state saved clean),
    /// then the chunk states saved (flushed by the caller). False if
    /// something failed: the shutdown is then not clean.
    pub fn save_extents(&self) -> bool {
        let mut ok = true;
        // A chunk saved as clean claims its HDD bytes equal the SSD copy:
        // those bytes must be durable as well, or a power cut soon after
        // the unmount takes them while the map keeps the claim, and the
        // file reads one way until the chunk is dropped and another after.
        for (ino, _) in self.split_files() {
            let synced = self.open_home(ino).and_then(|home| match home {
                Some(f) => Ok(self.tiers.store(Tier::Hdd).fsync(&f, true)?),
                None => Ok(()),
            });
            if let Err(e) = synced {
                tracing::error!(ino, error = %e, "could not sync the HDD file of a split file");
                ok = false;
            }
        }
        let shadows: Vec<(Ino, Arc<S::File>)> = self.shadows.lock().iter().map(|(i, f)| (*i, f.clone())).collect();
        for (ino, f) in shadows {
            if let Err(e) = self.tiers.store(Tier::Ssd).fsync(&f, true) {
                tracing::error!(ino, error = %e, "could not sync a shadow file");
                ok = false;
            }
        }
        if let Err(e) = self.extents.lock().save() {
            tracing::error!(error = %e, "could not save the chunk states");
            ok = false;
        }
        ok
    }
}

#[cfg(test)]
mod tests;
