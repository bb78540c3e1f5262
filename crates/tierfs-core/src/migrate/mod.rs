//! The migration protocol: moving a file between tiers, adding and dropping
//! the SSD copy of a cached file, and recovery of half-done migrations.
//!
//! A move or copy runs in this fixed order; each [`Step`] is a point where
//! tests simulate a crash:
//!
//! 1. copy data, owner, xattrs (after the owner: a chown drops
//!    `security.capability`), mode and times to a temporary file in the
//!    target tier's `.tierfs/staging` ([`Step::Copied`]);
//! 2. check the source did not change while copying, else retry up to
//!    [`MAX_ATTEMPTS`] times; a source that only grew (appends: see
//!    [`Volume::change_gen`]) is caught up by copying its new tail, at most
//!    `CATCH_UPS` times ([`Step::Verified`]); on the last attempt a file of
//!    at most [`HELD_COPY_MAX`] bytes that changed is copied again in the
//!    switch-over, with writes held, into a fresh staging file, so that a
//!    small file written without pause still moves;
//! 3. fsync the copy ([`Step::Synced`]);
//! 4. switch-over, with I/O on the file and changes to its directories
//!    blocked: check again (copying, fsynced, the tail a growing file
//!    gained since the last catch-up); check that nothing else has the
//!    file's names on the target tier; write a `Prepared` journal entry,
//!    with the backing identities of the source and of the staged copy, and
//!    flush the state ([`Step::Journaled`]); link the copy under every name
//!    of the file and remove the staging name ([`Step::Linked`]); fsync the
//!    target directories ([`Step::DirSynced`]); commit the new placement
//!    with the journal entry turned `Committed`, and flush
//!    ([`Step::Committed`]); point open handles at the new copy; unlink the
//!    source names (still under the locks, so that no rename can put
//!    another file under one of them first); set back the mtime of the
//!    meta-tier directories that gained or lost a backing name (read
//!    before the link), so that a move changes no directory's reported
//!    mtime (their ctime still moves);
//! 5. fsync the source directories ([`Step::SourceRemoved`]); drop the
//!    journal entry ([`Step::Done`]).
//!
//! At most one migration of a file runs at a time, and each attempt stages
//! its copy under a name of its own (`INO.SEQ`).
//!
//! Recovery at mount rolls `Prepared` entries back (removes the target
//! names) and `Committed` ones forward (removes the source names), then
//! empties the staging directories. A name is removed only if the namespace
//! still gives it to the file and the backing object is the one the entry
//! recorded. After an unclean shutdown it also drops every cached SSD copy,
//! since a write-through may have reached only one of the two copies.

use crate::error::{Error, Result};
use crate::event::EventKind;
use crate::state::ns::{BackingId, CtimeFix, Ino, JournalEntry, JournalOp, JournalState};
use crate::store::{read_full, write_full, FileKind, SetTime, Stat, Store, Target, TimeSpec};
use crate::tier::{Placement, Tier};
use crate::vfs::tiers::STAGING;
use crate::vfs::Volume;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

pub mod cost;

/// How often a migration retries when the source keeps changing.
pub const MAX_ATTEMPTS: u32 = 3;
/// The largest file the last attempt of a migration copies again with the
/// file's writes held when it changed during the copy (one copy chunk):
/// the writers wait for one read and one write of at most this size.
/// A larger file that never stops changing is left where it is
/// ([`Skip::Busy`]); the policy tries it again later.
pub const HELD_COPY_MAX: u64 = CHUNK as u64;
/// How often a migration copies the new tail of a file that keeps growing
/// before it copies the last one in the switch-over.
const CATCH_UPS: u32 = 8;
const CHUNK: usize = 1 << 20;

/// What to do with a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Move {
    /// Move the only copy to the SSD.
    Promote,
    /// Move the only copy to the HDD, or drop the SSD copy of a cached file.
    Demote,
    /// Add a clean SSD copy of an HDD file.
    Copy,
    /// Drop the SSD copy of a cached file.
    DropCopy,
}

impl Move {
    /// Every move's kind as the metrics and reports name it, in
    /// [`Move::index`] order.
    pub const LABELS: [&'static str; 4] = ["promotion", "demotion", "copy", "drop"];

    /// Its place in [`Move::LABELS`].
    pub fn index(self) -> usize {
        match self {
            Move::Promote => 0,
            Move::Demote => 1,
            Move::Copy => 2,
            Move::DropCopy => 3,
        }
    }
}

/// Named points of the protocol (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// The temporary copy is complete.
    Copied,
    /// The source was found unchanged.
    Verified,
    /// The temporary copy is durable.
    Synced,
    /// The `Prepared` journal entry is durable.
    Journaled,
    /// The copy has every name on the target tier.
    Linked,
    /// The target directories are durable.
    DirSynced,
    /// The new placement is durable.
    Committed,
    /// The source names are gone.
    SourceRemoved,
    /// The journal entry is gone.
    Done,
}

impl Step {
    /// Every step, in protocol order.
    pub const ALL: [Step; 9] = [
        Step::Copied,
        Step::Verified,
        Step::Synced,
        Step::Journaled,
        Step::Linked,
        Step::DirSynced,
        Step::Committed,
        Step::SourceRemoved,
        Step::Done,
    ];
    /// The step's name.
    pub fn name(self) -> &'static str {
        match self {
            Step::Copied => "copied",
            Step::Verified => "verified",
            Step::Synced => "synced",
            Step::Journaled => "journaled",
            Step::Linked => "linked",
            Step::DirSynced => "dir-synced",
            Step::Committed => "committed",
            Step::SourceRemoved => "source-removed",
            Step::Done => "done",
        }
    }
}

/// What a migration may be told from outside: a crash point for tests and
/// a pace for the rate limit.
pub trait Control: Sync {
    /// Called at each step; an error stops the migration there, as a crash.
    fn at(&self, _step: Step) -> Result<()> {
        Ok(())
    }
    /// Called before copying `bytes`; may sleep to keep a rate.
    fn pace(&self, _bytes: u64) {}
    /// How long the switch-over may wait for the file's locks (None:
    /// as long as it takes). A request that cleans space on the way must
    /// not wait for a file another request is using.
    fn io_wait(&self) -> Option<std::time::Duration> {
        None
    }
    /// True when the migration should stop (the mount is shutting down):
    /// checked between copied chunks.
    fn cancelled(&self) -> bool {
        false
    }
}

/// Takes a lock, waiting at most as long as the control allows.
macro_rules! lock_within {
    ($ctl:expr, $lock:expr, $write:ident, $try:ident) => {
        match $ctl.io_wait() {
            None => Some($lock.$write()),
            Some(d) => $lock.$try(d),
        }
    };
}

/// No crash, no pacing.
#[derive(Debug, Default)]
pub struct NoCrash;
impl Control for NoCrash {}

/// Crashes at one step.
#[derive(Debug)]
pub struct CrashAt(pub Step);
impl Control for CrashAt {
    fn at(&self, step: Step) -> Result<()> {
        if step == self.0 {
            Err(Error::SimulatedCrash(step.name()))
        } else {
            Ok(())
        }
    }
}

/// Why a migration did nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Skip {
    /// The file no longer exists.
    Gone,
    /// Not a regular file.
    NotRegular,
    /// It is already where it should go.
    AlreadyThere,
    /// It kept changing while being copied, or its locks stayed taken
    /// longer than the caller may wait (the foreground cleaner).
    Busy,
    /// It has passthrough handles open; it moves after the last close.
    Deferred,
    /// No SSD room under the configured capacity.
    NoSpace,
    /// Something that is not the file has its name on the target tier.
    Obstructed,
}

/// The result of one migration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done; bytes copied.
    Done(u64),
    /// Not done, and why.
    Skipped(Skip),
}

/// What recovery did at mount.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Recovery {
    /// Half-done migrations rolled back.
    pub rolled_back: u32,
    /// Half-done migrations finished.
    pub rolled_forward: u32,
    /// Stray temporary files removed.
    pub strays: u32,
    /// Cached copies dropped after an unclean shutdown.
    pub copies_dropped: u32,
    /// The previous shutdown was unclean.
    pub unclean: bool,
    /// Split files whose chunks were dropped (the file or its shadow was
    /// gone), and stray shadow files removed.
    #[serde(default)]
    pub split_files_fixed: u32,
}

impl Recovery {
    /// True if placements may differ from what the statistics last saw.
    pub fn changed(&self) -> bool {
        self.unclean || self.rolled_back + self.rolled_forward + self.copies_dropped + self.split_files_fixed > 0
    }
}

/// What tells a source unchanged since its copy: the same backing file
/// (device and inode: a name replaced by another file with the same size
/// and times is not the source) with the same size and times.
fn identity(st: &Stat) -> (u64, u64, u64, crate::store::TimeSpec, crate::store::TimeSpec) {
    (st.dev, st.ino, st.size, st.mtime, st.ctime)
}

/// Where a copy stands against its source (see `Volume::catch_up`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CatchUp {
    /// The copy matches the source.
    Current,
    /// The source grew and the copy took its new tail; it may grow again.
    Grew,
    /// The source changed otherwise (or the SSD has no room for the
    /// tail): copy again.
    Changed,
}

/// The times of a directory's meta copy before a migration changed its
/// names (see `Volume::meta_dir_times`).
struct DirTimes {
    dir: Ino,
    mtime: TimeSpec,
    ctime: TimeSpec,
}

/// Copies bytes `start..end` of `src` to the same offsets of `dst`
/// (sparse-aware: holes stay holes) and sets `dst`'s length to `end`.
fn copy_range<S: Store>(
    (sf, src): (&S, &S::File),
    (st, dst): (&S, &S::File),
    start: u64,
    end: u64,
    ctl: &dyn Control,
) -> Result<()> {
    let mut buf = vec![0u8; CHUNK.min((end - start) as usize)];
    let mut off = start;
    // Holes are skipped only where SEEK_DATA is sure to see every write.
    let holes = sf.holes_coherent();
    while off < end {
        // Skip holes where the store can tell.
        match if holes { sf.seek(src, off as i64, libc::SEEK_DATA) } else { Ok(off as i64) } {
            Ok(d) if d as u64 >= end => break,
            Ok(d) => off = d as u64,
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => break,
            Err(_) => {}
        }
        let want = ((end - off) as usize).min(CHUNK);
        if ctl.cancelled() {
            return Err(Error::Cancelled);
        }
        ctl.pace(want as u64);
        let n = read_full(sf, src, &mut buf[..want], off)?;
        if n == 0 {
            break;
        }
        write_full(st, dst, &buf[..n], off)?;
        off += n as u64;
    }
    st.set_len(dst, end)?;
    Ok(())
}

/// Held while a migration of one file runs; a second migration of the same
/// file finds it taken and does nothing ([`Skip::Busy`]).
pub(crate) struct Exclusive<'a, S: Store> {
    vol: &'a Volume<S>,
    ino: Ino,
}

impl<S: Store> Drop for Exclusive<'_, S> {
    fn drop(&mut self) {
        self.vol.migrating.lock().remove(&self.ino);
    }
}

fn backing_id(st: &Stat) -> BackingId {
    (st.dev, st.ino)
}

/// True for the errors of a simulated crash: the protocol stops there and
/// cleans nothing up, as a real crash would not.
fn is_crash(e: &Error) -> bool {
    matches!(e, Error::SimulatedCrash(_))
}

impl<S: Store> Volume<S> {
    pub(crate) fn exclusive(&self, ino: Ino) -> Option<Exclusive<'_, S>> {
        // Its own statement: the guard must be gone before an `Exclusive`
        // exists (its drop locks the set again), and none may be made for a
        // file that is taken (its drop would free the other's mark).
        let fresh = self.migrating.lock().insert(ino);
        fresh.then(|| Exclusive { vol: self, ino })
    }

    /// Runs one migration (see the module documentation). At most one
    /// migration of a file runs at a time: another one asked for meanwhile
    /// returns [`Skip::Busy`] at once.
    /// The kernel's copy of the file's attributes is dropped when the
    /// migration changed what tierfs reports (see `switch_over`), and
    /// always after a dropped copy or a split file's chunks brought back
    /// (`unsplit_held`).
    pub fn migrate(&self, ino: Ino, mv: Move, ctl: &dyn Control) -> Result<Outcome> {
        let _doing = crate::quiet::doing("migrate", ino);
        self.migrate_held(ino, mv, ctl)
    }

    /// `r`, the outcome of moving `ino`'s data (a migration or a chunk
    /// operation), once the kernel's caches were told if it was done: the
    /// file's blocks (and, for a cached file, where its attributes come
    /// from) changed, so the kernel's copy goes.
    pub(crate) fn told_kernel(&self, ino: Ino, r: Result<Outcome>) -> Result<Outcome> {
        if matches!(r, Ok(Outcome::Done(_))) {
            self.attrs_changed(ino);
        }
        r
    }

    fn migrate_held(&self, ino: Ino, mv: Move, ctl: &dyn Control) -> Result<Outcome> {
        let Some(_only) = self.exclusive(ino) else { return Ok(Outcome::Skipped(Skip::Busy)) };
        let Some(rec) = self.ns.record(ino)? else { return Ok(Outcome::Skipped(Skip::Gone)) };
        if rec.kind != FileKind::File {
            return Ok(Outcome::Skipped(Skip::NotRegular));
        }
        let op = match (mv, rec.placement) {
            (Move::Promote, Placement::On(Tier::Hdd)) => JournalOp::Move { from: Tier::Hdd, to: Tier::Ssd },
            (Move::Demote, Placement::On(Tier::Ssd)) => JournalOp::Move { from: Tier::Ssd, to: Tier::Hdd },
            (Move::Demote | Move::DropCopy, Placement::Cached) => JournalOp::DropCopy,
            (Move::Copy, Placement::On(Tier::Hdd)) => JournalOp::Copy,
            _ => return Ok(Outcome::Skipped(Skip::AlreadyThere)),
        };
        if let Some(oi) = self.open_inode(ino) {
            if oi.handle_counts().1 > 0 {
                return Ok(Outcome::Skipped(Skip::Deferred));
            }
        }
        if op == JournalOp::DropCopy {
            return self.drop_copy(ino, ctl);
        }
        // A split file moves whole: its chunks leave the SSD first (written
        // back where dirty); the mark held here keeps new ones out.
        if let Some(skipped) = self.unsplit_held(ino, ctl)? {
            return Ok(skipped);
        }
        let (from, to) = match op {
            JournalOp::Move { from, to } => (from, to),
            _ => (Tier::Hdd, Tier::Ssd),
        };
        let (p, n) = match self.ns.first_link(ino)? {
            Some(l) => l,
            None => return Ok(Outcome::Skipped(Skip::Gone)),
        };
        let src = match self.stat_on(p, &n, from) {
            Err(e) if self.raced(ino, &(p, n), &e, ctl) => return self.gone_or_busy(ino),
            r => r?,
        };
        let hooks = self.hooks();
        // What the copy will occupy on the SSD: what the source occupies
        // (holes stay holes), plus what a file that grows while it is copied
        // adds. The switch-over settles it to what the copy really takes.
        let mut reserved = if to == Tier::Ssd { src.blocks * 512 } else { 0 };
        if !hooks.reserve_ssd(ino, reserved) {
            return Ok(Outcome::Skipped(Skip::NoSpace));
        }
        let r = self.move_or_copy(ino, op, from, to, &mut reserved, ctl);
        hooks.settle_ssd(ino, reserved, None);
        r
    }

    /// Whether `e`, from using the name `link` of `ino` on a tier, says the
    /// name went away since it was read from the namespace (without its
    /// directory's lock: an unlink or rename may come between). Such a
    /// file is skipped or tried again under its new name; a migration
    /// that raced a delete is not a failure.
    fn raced(&self, ino: Ino, link: &(Ino, OsString), e: &Error, ctl: &dyn Control) -> bool {
        if !e.is(libc::ENOENT) {
            return false;
        }
        // An unlink or rename changes the tier and then the namespace,
        // holding the directory's lock: once that is free, the namespace
        // says what happened. A caller with a bound on its waits that
        // cannot have the lock in time takes the directory as changing:
        // the file is tried again later.
        let settled = self.locks.lock_within(&[link.0], ctl.io_wait());
        settled.is_none() || self.ns.first_link(ino).ok().flatten().as_ref() != Some(link)
    }

    /// Creates a staging file under a name no other migration uses.
    fn stage(&self, st: &S, staging: &S::Dir, ino: Ino) -> Result<(OsString, S::File)> {
        loop {
            let seq = self.staging_seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let tmp = OsString::from(format!("{ino}.{seq}"));
            match st.open(staging, &tmp, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o600) {
                Ok(f) => return Ok((tmp, f)),
                // Left from before a crash, not yet cleaned: take the next.
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn move_or_copy(
        &self,
        ino: Ino,
        op: JournalOp,
        from: Tier,
        to: Tier,
        reserved: &mut u64,
        ctl: &dyn Control,
    ) -> Result<Outcome> {
        let sf = self.tiers.store(from);
        let st = self.tiers.store(to);
        let staging = self.tiers.staging(to)?;
        for attempt in 0..MAX_ATTEMPTS {
            if ctl.cancelled() {
                return Err(Error::Cancelled);
            }
            let Some((p, n)) = self.ns.first_link(ino)? else { return Ok(Outcome::Skipped(Skip::Gone)) };
            let v0 = self.change_gen(ino);
            let opened = self.tiers.dir(p, from, false).and_then(|sd| {
                Ok(match sf.open(&sd, &n, libc::O_RDONLY | libc::O_NOATIME, 0) {
                    Err(e) if e.raw_os_error() == Some(libc::EPERM) => sf.open(&sd, &n, libc::O_RDONLY, 0)?,
                    r => r?,
                })
            });
            let src = match opened {
                // Unlinked or renamed since: the next attempt finds out which.
                Err(e) if self.raced(ino, &(p, n), &e, ctl) => continue,
                r => r?,
            };
            let mut staged = self.stage(st, &staging, ino)?;
            // The staging name is this attempt's alone (a held copy makes
            // a fresh one in its place): whatever happens below, removing
            // it (if still there) removes nothing else.
            let last = attempt + 1 == MAX_ATTEMPTS;
            let r = self.attempt(ino, op, (from, to), &src, (&staging, &mut staged), v0, last, reserved, ctl);
            match r {
                Err(e) if is_crash(&e) => return Err(e),
                r => {
                    // Gone already after a switch-over; a stray otherwise.
                    let _ = st.unlink(&staging, &staged.0);
                    if let Some(out) = r? {
                        return Ok(out);
                    }
                }
            }
        }
        self.gone_or_busy(ino)
    }

    /// The outcome of a migration that gave up on a file that kept
    /// changing: gone if it has no name left.
    fn gone_or_busy(&self, ino: Ino) -> Result<Outcome> {
        let gone = self.ns.first_link(ino)?.is_none();
        Ok(Outcome::Skipped(if gone { Skip::Gone } else { Skip::Busy }))
    }

    /// One attempt: copy, catch up, sync, switch over. `None`: the source
    /// changed, try again. On the `last` attempt a small source that
    /// changed is copied again in the switch-over (see [`HELD_COPY_MAX`]).
    #[allow(clippy::too_many_arguments)]
    fn attempt(
        &self,
        ino: Ino,
        op: JournalOp,
        (from, to): (Tier, Tier),
        src: &S::File,
        (staging, staged): (&S::Dir, &mut (OsString, S::File)),
        v0: u64,
        last: bool,
        reserved: &mut u64,
        ctl: &dyn Control,
    ) -> Result<Option<Outcome>> {
        let sf = self.tiers.store(from);
        let st = self.tiers.store(to);
        let dst = &staged.1;
        let mut cur = sf.fstat(src)?;
        self.copy_contents((sf, src), (st, dst), &cur, ctl)?;
        ctl.at(Step::Copied)?;
        // A file that is being appended to (a log) only grows: copy the
        // new tail as long as it keeps growing, a bounded number of
        // times; the switch-over copies the last one with writes held.
        let mut state = CatchUp::Grew;
        for _ in 0..CATCH_UPS {
            state = self.catch_up(ino, v0, (sf, src), (st, dst), to, &mut cur, reserved, ctl)?;
            if state != CatchUp::Grew {
                break;
            }
        }
        let held = last && cur.size <= HELD_COPY_MAX;
        if state == CatchUp::Changed && !held {
            return Ok(None);
        }
        ctl.at(Step::Verified)?;
        if state != CatchUp::Changed {
            // (A copy known to be stale is copied again, and synced, in
            // the switch-over.)
            st.fsync(dst, false)?;
        }
        ctl.at(Step::Synced)?;
        self.switch_over(ino, op, from, to, (staging, staged), (sf, src), &mut cur, v0, held, reserved, ctl)
    }

    /// Copies data (sparse-aware: holes stay holes), xattrs, owner, mode
    /// and times, all from the open source: what a name of the file now
    /// points at does not matter (it may have been renamed meanwhile).
    fn copy_contents(
        &self,
        (sf, src): (&S, &S::File),
        (st, dst): (&S, &S::File),
        st0: &Stat,
        ctl: &dyn Control,
    ) -> Result<()> {
        copy_range((sf, src), (st, dst), 0, st0.size, ctl)?;
        // The owner before the xattrs: a chown makes the kernel drop
        // `security.capability`, so a file's capabilities set first would
        // be lost. The mode after both (a chown clears set-id bits).
        if self.cfg.can_chown {
            st.file_chown(dst, Some(st0.uid), Some(st0.gid))?;
        }
        let list = match sf.file_listxattr(src) {
            Ok(l) => l,
            // A file system without extended attributes.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTSUP)) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        for raw in list.split(|b| *b == 0).filter(|x| !x.is_empty()) {
            let key = OsStr::from_bytes(raw);
            match sf.file_getxattr(src, key) {
                Ok(v) => {
                    if let Err(e) = st.file_setxattr(dst, key, &v, 0) {
                        // A tier that cannot hold it (GlusterFS and
                        // `security.capability`): the file stays where it is.
                        tracing::warn!(name = ?key, error = %e, "the target tier cannot store an extended attribute of the file: it is not moved");
                        return Err(e.into());
                    }
                }
                // Removed since it was listed: the change counter moved.
                Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {}
                Err(e) => return Err(e.into()),
            }
        }
        st.file_chmod(dst, st0.mode & 0o7777)?;
        st.file_utimens(dst, SetTime::At(st0.atime), SetTime::At(st0.mtime))?;
        Ok(())
    }

    /// Brings the copy up to date with a source that only grew since `cur`
    /// was taken (see [`Volume::change_gen`]): copies the new tail and the
    /// times.
    #[allow(clippy::too_many_arguments)]
    fn catch_up(
        &self,
        ino: Ino,
        v0: u64,
        (sf, src): (&S, &S::File),
        (st, dst): (&S, &S::File),
        to: Tier,
        cur: &mut Stat,
        reserved: &mut u64,
        ctl: &dyn Control,
    ) -> Result<CatchUp> {
        if v0 != self.change_gen(ino) {
            return Ok(CatchUp::Changed);
        }
        let now = sf.fstat(src)?;
        if identity(&now) == identity(cur) {
            return Ok(CatchUp::Current);
        }
        if now.size < cur.size {
            return Ok(CatchUp::Changed);
        }
        // No room means copying again later.
        if !self.reserve_more(ino, to, crate::vfs::alloc_growth(cur.size, now.size), reserved) {
            return Ok(CatchUp::Changed);
        }
        copy_range((sf, src), (st, dst), cur.size, now.size, ctl)?;
        st.file_utimens(dst, SetTime::At(now.atime), SetTime::At(now.mtime))?;
        *cur = now;
        Ok(CatchUp::Grew)
    }

    /// The switch-over (step 4 and 5). `None`: the source changed, retry.
    /// `held`: a source that changed since the copy and is still at most
    /// [`HELD_COPY_MAX`] bytes is copied again here, with writes held.
    #[allow(clippy::too_many_arguments)]
    fn switch_over(
        &self,
        ino: Ino,
        op: JournalOp,
        from: Tier,
        to: Tier,
        (staging, staged): (&S::Dir, &mut (OsString, S::File)),
        src: (&S, &S::File),
        st0: &mut Stat,
        v0: u64,
        held: bool,
        reserved: &mut u64,
        ctl: &dyn Control,
    ) -> Result<Option<Outcome>> {
        let st = self.tiers.store(to);
        let links = self.ns.links(ino)?;
        if links.is_empty() {
            return Ok(Some(Outcome::Skipped(Skip::Gone)));
        }
        let parents: Vec<Ino> = links.iter().map(|l| l.0).collect();
        // The foreground cleaner must not wait for a directory another
        // request holds: that request may be waiting for the very file
        // whose write is cleaning.
        let Some(dirs) = self.locks.lock_within(&parents, ctl.io_wait()) else {
            return Ok(Some(Outcome::Skipped(Skip::Busy)));
        };
        let Some(ilock) = lock_within!(ctl, self.ilocks.get(ino), write, try_write_for) else {
            return Ok(Some(Outcome::Skipped(Skip::Busy)));
        };
        if self.ns.links(ino)? != links {
            return Ok(None);
        }
        let oi = self.open_inode(ino);
        let mut io = match &oi {
            None => None,
            Some(o) => match lock_within!(ctl, o.io, write, try_write_for) {
                Some(g) => Some(g),
                None => return Ok(Some(Outcome::Skipped(Skip::Busy))),
            },
        };
        if let Some(io) = &io {
            if io.backed > 0 {
                return Ok(Some(Outcome::Skipped(Skip::Deferred)));
            }
        }
        // Writes are held now: the last tail of a growing file is copied
        // here, unpaced, and made durable with the rest.
        match self.catch_up(ino, v0, src, (st, &staged.1), to, st0, reserved, &NoCrash)? {
            CatchUp::Changed if held && self.copy_held(ino, src, st, (staging, &mut *staged), to, st0, reserved)? => {}
            CatchUp::Changed => return Ok(None),
            CatchUp::Grew => st.fsync(&staged.1, false)?,
            CatchUp::Current => {}
        }
        let (tmp, dst) = (staged.0.as_os_str(), &staged.1);
        let (p0, n0) = &links[0];
        let now = self.stat_on(*p0, n0, from)?;
        if identity(&now) != identity(st0) {
            return Ok(None);
        }
        // Nothing else may have the file's names on the target tier; what
        // does is left alone (reconciliation sets it aside at the next
        // mount), never deleted.
        for (p, n) in &links {
            let d = self.tiers.dir(*p, to, true)?;
            if !name_is_free(st, &d, n)? {
                tracing::error!(ino, tier = %to, name = ?n, "the target tier has something else under the file's name");
                return Ok(Some(Outcome::Skipped(Skip::Obstructed)));
            }
        }
        let target = backing_id(&st.fstat(dst)?);
        let source = match op {
            JournalOp::Move { .. } => Some(backing_id(&now)),
            _ => None,
        };
        // The record cannot change while the locks are held.
        let mut rec = self.record(ino)?;
        let old_rec = rec;
        let mut j =
            JournalEntry { ino, op, state: JournalState::Prepared, links: links.clone(), source, target: Some(target) };
        let mut b = self.ns.batch();
        b.put_journal(&j);
        self.ns.commit(b, true)?;
        ctl.at(Step::Journaled)?;
        // Names are added on the target tier and, for a move, removed on
        // the source tier: the meta tier's directories keep their times.
        let mut dir_times = self.meta_dir_times(&parents, to);
        if let JournalOp::Move { .. } = op {
            dir_times.extend(self.meta_dir_times(&parents, from));
        }
        // Until the commit, a failure undoes what was linked: the file stays
        // where it was.
        let undo = |e: Error| -> Error {
            if !is_crash(&e) {
                self.unlink_checked(to, ino, &links, Some(target));
                self.restore_dir_times(&dir_times);
                let mut b = self.ns.batch();
                b.del_journal(ino);
                let _ = self.ns.commit(b, false);
            }
            e
        };
        let writable = io.as_ref().is_some_and(|io| io.writable() || io.primary_open().is_none());
        let (new_fd, linked) = self
            .link_target(to, &links, (staging, tmp), io.is_some().then_some(writable), ctl)
            .and_then(|f| Ok((f, st.fstat(dst)?)))
            .map_err(undo)?;
        let placement = match op {
            JournalOp::Move { .. } => Placement::On(to),
            _ => Placement::Cached,
        };
        // The file's attributes come from the new copy now (a cached
        // file's from its SSD copy): linking set its ctime, which is
        // reported as the ctime the file had until the copy changes.
        let logical = match rec.ctime_fix {
            Some(f) if f.backing == st0.ctime => f.logical,
            _ => st0.ctime,
        };
        rec.ctime_fix = Some(CtimeFix { backing: linked.ctime, logical });
        rec.placement = placement;
        // What tierfs reports, from the stats taken under the locks: a move
        // keeps the size, the times (the ctime through `ctime_fix`) and
        // usually the allocation, and the kernel is told only if something
        // changed. Every attribute dropped cost a GETATTR: a `git status`
        // after one that promoted a hundred files sent a hundred more. A
        // change by a request was answered to the kernel by the request.
        let names = links.len() as u64;
        let reported_changed = self.make_attr(ino, &old_rec, &now, names) != self.make_attr(ino, &rec, &linked, names);
        j.state = JournalState::Committed;
        let mut b = self.ns.batch();
        b.put_record(ino, &rec).put_journal(&j);
        if op == JournalOp::Copy {
            b.put_copy_id(ino, target);
        }
        if let Err(e) = self.ns.commit(b, true) {
            // Applied but not made durable, or not applied at all: the
            // record says which. Not applied, the file stays where it was.
            if self.ns.record(ino).ok().flatten().map(|r| r.placement) != Some(placement) {
                return Err(undo(e));
            }
            // Applied: new opens use the target, so open handles must follow
            // it; the source stays (the journal says what to do with it).
            tracing::error!(ino, error = %e, "the new placement may not be durable; the source is kept");
            self.restore_dir_times(&dir_times);
            if let (Some(io), Some(f)) = (io.as_mut(), new_fd) {
                self.use_copy(io, op, placement, f, writable, oi.as_deref());
            }
            drop(io);
            drop(ilock);
            drop(dirs);
            if reported_changed {
                self.attrs_changed(ino);
            }
            return Err(e);
        }
        ctl.at(Step::Committed)?;
        if to == Tier::Ssd {
            // The copy is the file's (or its cached copy) now: it is charged
            // what it occupies, and the reservation is used up.
            self.hooks().settle_ssd(ino, std::mem::take(reserved), Some(linked.blocks * 512));
        }
        if let (Some(io), Some(f)) = (io.as_mut(), new_fd) {
            self.use_copy(io, op, placement, f, writable, oi.as_deref());
        }
        // The source names go while the locks are held: otherwise a rename
        // over one of them could put another file there first, and that
        // file would be the one removed.
        let removed = match op {
            JournalOp::Move { .. } => self.unlink_names(from, &links),
            _ => Ok(Vec::new()),
        };
        self.restore_dir_times(&dir_times);
        if from == Tier::Ssd && removed.is_ok() {
            self.hooks().off_ssd(ino);
        }
        drop(io);
        drop(ilock);
        drop(dirs);
        if reported_changed {
            self.attrs_changed(ino);
        }
        let removed = removed?;
        self.sync_dirs(from, &removed)?;
        ctl.at(Step::SourceRemoved)?;
        let mut b = self.ns.batch();
        b.del_journal(ino);
        self.ns.commit(b, false)?;
        ctl.at(Step::Done)?;
        self.emit(ino, EventKind::Placed { placement });
        Ok(Some(Outcome::Done(st0.size)))
    }

    /// Adds `bytes` to a copy's SSD reservation `reserved` when it goes to
    /// the SSD; false if there is no room. Never waits for room: the
    /// switch-over holds the file's locks when it asks.
    fn reserve_more(&self, ino: Ino, to: Tier, bytes: u64, reserved: &mut u64) -> bool {
        if to != Tier::Ssd || bytes == 0 {
            return true;
        }
        if !self.hooks().reserve_ssd(ino, bytes) {
            return false;
        }
        *reserved += bytes;
        true
    }

    /// Copies the source again, with the file's writes held by the caller,
    /// into a fresh staged file that takes the place of `staged` (the
    /// stale one goes: it may hold xattrs the source lost, and not every
    /// xattr can be removed, `security.selinux` for one): data, xattrs,
    /// owner, mode and times; then fsyncs it. False, copying nothing: the
    /// source grew past [`HELD_COPY_MAX`], or the SSD has no room for what
    /// it grew by.
    #[allow(clippy::too_many_arguments)]
    fn copy_held(
        &self,
        ino: Ino,
        (sf, src): (&S, &S::File),
        st: &S,
        (staging, staged): (&S::Dir, &mut (OsString, S::File)),
        to: Tier,
        cur: &mut Stat,
        reserved: &mut u64,
    ) -> Result<bool> {
        let now = sf.fstat(src)?;
        if now.size > HELD_COPY_MAX {
            return Ok(false);
        }
        if !self.reserve_more(ino, to, (now.blocks * 512).saturating_sub(*reserved), reserved) {
            return Ok(false);
        }
        // From here the caller removes the fresh name whatever happens.
        let stale = std::mem::replace(staged, self.stage(st, staging, ino)?);
        let _ = st.unlink(staging, &stale.0);
        self.copy_contents((sf, src), (st, &staged.1), &now, &NoCrash)?;
        st.fsync(&staged.1, false)?;
        *cur = now;
        Ok(true)
    }

    /// Points an open file's handles at its new copy: the primary of a moved
    /// file, or the SSD copy of a cached one (fresh: readable again).
    fn use_copy(
        &self,
        io: &mut crate::vfs::IoState<S>,
        op: JournalOp,
        placement: Placement,
        f: S::File,
        writable: bool,
        oi: Option<&crate::vfs::OpenInode<S>>,
    ) {
        let f = Arc::new(f);
        match op {
            JournalOp::Move { .. } => {
                let cell = std::sync::OnceLock::new();
                let _ = cell.set((f, writable));
                io.primary = cell;
            }
            _ => {
                io.copy = Some(f);
                if let Some(oi) = oi {
                    oi.copy_is_fresh();
                }
            }
        }
        io.placement = placement;
    }

    /// Links the staged copy under every name on the target tier, removes
    /// the staging name and makes the target directories durable; opens the
    /// new copy for the file's open handles (`Some(writable)`).
    fn link_target(
        &self,
        to: Tier,
        links: &[(Ino, OsString)],
        (staging, tmp): (&S::Dir, &OsStr),
        open: Option<bool>,
        ctl: &dyn Control,
    ) -> Result<Option<S::File>> {
        let st = self.tiers.store(to);
        for (p, n) in links {
            let d = self.tiers.dir(*p, to, true)?;
            st.link(staging, tmp, &d, n)?;
        }
        st.unlink(staging, tmp)?;
        ctl.at(Step::Linked)?;
        let mut synced = Vec::new();
        for (p, _) in links {
            if !synced.contains(p) {
                st.sync_dir(&*self.tiers.dir(*p, to, false)?)?;
                synced.push(*p);
            }
        }
        // The staging directory is not synced: a staging name that comes
        // back after a crash is one more link of the copy, and recovery
        // empties the staging directories before any request.
        ctl.at(Step::DirSynced)?;
        let Some(writable) = open else { return Ok(None) };
        let (p0, n0) = &links[0];
        let d = self.tiers.dir(*p0, to, false)?;
        Ok(Some(st.open(&d, n0, if writable { libc::O_RDWR } else { libc::O_RDONLY }, 0)?))
    }

    /// Unlinks every name of a file on one tier (missing ones are fine) and
    /// returns the directories to sync.
    fn unlink_names(&self, t: Tier, links: &[(Ino, OsString)]) -> Result<Vec<Ino>> {
        let s = self.tiers.store(t);
        let mut dirs = Vec::new();
        for (p, n) in links {
            let d = match self.tiers.dir(*p, t, false) {
                Ok(d) => d,
                Err(e) if e.is(libc::ENOENT) => continue,
                Err(e) => return Err(e),
            };
            match s.unlink(&d, n) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(e.into()),
            }
            if !dirs.contains(p) {
                dirs.push(*p);
            }
        }
        Ok(dirs)
    }

    /// The modification times of the meta-tier copies of `dirs`, when a
    /// migration is about to add or remove names in them on tier `t`, to be
    /// put back by [`Volume::restore_dir_times`]: a directory's reported
    /// times are its meta copy's, and moving a file's data changes no name
    /// in it. A promotion moved the directory's mtime (the kernel then also
    /// dropped its copy of the listing and read it again). Called, like the
    /// restore, with the directories' stripes held, so that no change of
    /// their names (each moves the time itself, under the stripe) runs in
    /// between.
    fn meta_dir_times(&self, dirs: &[Ino], t: Tier) -> Vec<DirTimes> {
        let meta = self.tiers.meta;
        if t != meta {
            return Vec::new();
        }
        let mut saved: Vec<DirTimes> = Vec::new();
        for &p in dirs {
            if saved.iter().any(|s| s.dir == p) {
                continue;
            }
            if let Ok(st) = self.meta_dir(p).and_then(|d| Ok(self.tiers.store(meta).stat(Target::This(&d))?)) {
                saved.push(DirTimes { dir: p, mtime: st.mtime, ctime: st.ctime });
            }
        }
        saved
    }

    /// Puts back the times [`Volume::meta_dir_times`] saved (a failure
    /// leaves the directory's time moved, as before). Its ctime, which the
    /// names and setting the mtime back moved, cannot be set: the
    /// directory's record reports the one it had until its meta copy
    /// changes again (`ctime_fix`, as a moved file's).
    fn restore_dir_times(&self, saved: &[DirTimes]) {
        let s = self.tiers.store(self.tiers.meta);
        let mut b = self.ns.batch();
        for t in saved {
            let Ok(d) = self.meta_dir(t.dir) else { continue };
            if let Err(e) = s.utimens(Target::This(&d), SetTime::Omit, SetTime::At(t.mtime)) {
                tracing::debug!(dir = t.dir, error = %e, "could not put back a directory's time after a migration");
                continue;
            }
            let (Ok(now), Ok(Some(mut rec))) = (s.stat(Target::This(&d)), self.ns.record(t.dir)) else { continue };
            if now.ctime == t.ctime {
                continue;
            }
            let logical = match rec.ctime_fix {
                Some(f) if f.backing == t.ctime => f.logical,
                _ => t.ctime,
            };
            rec.ctime_fix = Some(CtimeFix { backing: now.ctime, logical });
            b.put_record(t.dir, &rec);
        }
        if !b.is_empty() {
            if let Err(e) = self.ns.commit(b, false) {
                tracing::debug!(error = %e, "could not keep the ctime of a migrated file's directories");
            }
        }
    }

    fn sync_dirs(&self, t: Tier, dirs: &[Ino]) -> Result<()> {
        for p in dirs {
            match self.tiers.dir(*p, t, false) {
                Ok(d) => self.tiers.store(t).sync_dir(&d)?,
                Err(e) if e.is(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Removes the names of `ino` on tier `t` that still are what a journal
    /// entry says: the namespace still gives the name to `ino`, and the
    /// backing object is `id` (when known). Anything else under such a name
    /// (another file renamed there, a directory) stays, with a warning.
    /// Returns how many names were removed.
    fn unlink_checked(&self, t: Tier, ino: Ino, links: &[(Ino, OsString)], id: Option<BackingId>) -> u32 {
        let s = self.tiers.store(t);
        let mut removed = 0;
        for (p, n) in links {
            if !matches!(self.ns.lookup(*p, n), Ok(Some((i, _))) if i == ino) {
                tracing::warn!(ino, tier = %t, name = ?n, "left alone: the name now belongs to another file");
                continue;
            }
            let Ok(d) = self.tiers.dir(*p, t, false) else { continue };
            let st = match s.stat(Target::Entry(&d, n)) {
                Ok(st) => st,
                Err(_) => continue,
            };
            // The inode number identifies a file within its tier's file
            // system while it exists; the device number may change across
            // reboots (btrfs, LVM), so it is recorded but not compared.
            if st.kind() == Some(FileKind::Dir) || id.is_some_and(|id| id.1 != st.ino) {
                tracing::warn!(ino, tier = %t, name = ?n, "left alone: not the copy the journal names");
                continue;
            }
            if s.unlink(&d, n).is_ok() {
                removed += 1;
                let _ = s.sync_dir(&d);
            }
        }
        removed
    }

    /// Drops the SSD copy of a cached file: commit first, then unlink the
    /// copy's names while the locks are still held.
    fn drop_copy(&self, ino: Ino, ctl: &dyn Control) -> Result<Outcome> {
        let links = self.ns.links(ino)?;
        let parents: Vec<Ino> = links.iter().map(|l| l.0).collect();
        let (size, removed) = {
            let Some(_dirs) = self.locks.lock_within(&parents, ctl.io_wait()) else {
                return Ok(Outcome::Skipped(Skip::Busy));
            };
            let Some(_ilock) = lock_within!(ctl, self.ilocks.get(ino), write, try_write_for) else {
                return Ok(Outcome::Skipped(Skip::Busy));
            };
            if self.ns.links(ino)? != links {
                return Ok(Outcome::Skipped(Skip::Busy));
            }
            let mut rec = match self.ns.record(ino)? {
                Some(r) if r.placement == Placement::Cached => r,
                Some(_) => return Ok(Outcome::Skipped(Skip::AlreadyThere)),
                None => return Ok(Outcome::Skipped(Skip::Gone)),
            };
            let oi = self.open_inode(ino);
            let mut io = match &oi {
                None => None,
                Some(o) => match lock_within!(ctl, o.io, write, try_write_for) {
                    Some(g) => Some(g),
                    None => return Ok(Outcome::Skipped(Skip::Busy)),
                },
            };
            if io.as_ref().is_some_and(|io| io.backed > 0) {
                return Ok(Outcome::Skipped(Skip::Deferred));
            }
            let copy = match links.first() {
                Some((p, n)) => self.stat_on(*p, n, Tier::Ssd).ok(),
                None => None,
            };
            rec.placement = Placement::On(Tier::Hdd);
            let j = JournalEntry {
                ino,
                op: JournalOp::DropCopy,
                state: JournalState::Committed,
                links: links.clone(),
                source: copy.as_ref().map(backing_id),
                target: None,
            };
            let mut b = self.ns.batch();
            b.put_record(ino, &rec).put_journal(&j);
            self.ns.commit(b, true)?;
            ctl.at(Step::Committed)?;
            if let Some(io) = io.as_mut() {
                io.copy = None;
                io.placement = Placement::On(Tier::Hdd);
            }
            let dir_times = self.meta_dir_times(&parents, Tier::Ssd);
            let removed = self.unlink_names(Tier::Ssd, &links);
            self.restore_dir_times(&dir_times);
            if removed.is_ok() {
                self.hooks().off_ssd(ino);
                self.copy_dropped(ino);
            }
            (copy.map(|c| c.size).unwrap_or(0), removed)
        };
        // The attributes come from the HDD copy now.
        self.attrs_changed(ino);
        let removed = removed?;
        self.sync_dirs(Tier::Ssd, &removed)?;
        ctl.at(Step::SourceRemoved)?;
        let mut b = self.ns.batch();
        b.del_journal(ino);
        self.ns.commit(b, false)?;
        ctl.at(Step::Done)?;
        self.emit(ino, EventKind::Placed { placement: Placement::On(Tier::Hdd) });
        Ok(Outcome::Done(size))
    }

    /// Finishes or rolls back half-done migrations, removes stray temporary
    /// files, and after an unclean shutdown drops every cached copy. Runs
    /// at mount, before any request is served. A journaled name is removed
    /// only if it still is what the entry says (see `unlink_checked`).
    /// It emits no events (nothing takes them yet): when it changed
    /// anything ([`Recovery::changed`]), the engine checks its statistics
    /// against the namespace.
    pub fn recover(&self) -> Result<Recovery> {
        let mut rep = Recovery { unclean: self.ns.meta("clean")?.as_deref() == Some(&[0]), ..Recovery::default() };
        self.set_after_crash(rep.unclean);
        for j in self.ns.journal()? {
            let undo = match (j.state, j.op) {
                (JournalState::Prepared, JournalOp::Move { to, .. }) => Some((to, j.target, false)),
                (JournalState::Prepared, JournalOp::Copy) => Some((Tier::Ssd, j.target, false)),
                (JournalState::Committed, JournalOp::Move { from, .. }) => Some((from, j.source, true)),
                (_, JournalOp::DropCopy) => Some((Tier::Ssd, j.source, true)),
                (JournalState::Committed, JournalOp::Copy) => None,
            };
            match undo {
                Some((t, id, forward)) => {
                    self.unlink_checked(t, j.ino, &j.links, id);
                    if forward {
                        rep.rolled_forward += 1;
                    } else {
                        rep.rolled_back += 1;
                    }
                }
                None => rep.rolled_forward += 1,
            }
            let mut b = self.ns.batch();
            b.del_journal(j.ino);
            self.ns.commit(b, false)?;
        }
        for t in Tier::ALL {
            let s = self.tiers.store(t);
            let Ok(staging) = self.tiers.staging(t) else { continue };
            for e in s.list(&staging)? {
                let _ = s.unlink(&staging, &e.name);
                rep.strays += 1;
            }
            s.sync_dir(&staging)?;
        }
        if rep.unclean {
            for ino in self.ns.cached()? {
                let links = self.ns.links(ino)?;
                let removed = self.drop_copy_at_recovery(ino, &links)?;
                self.sync_dirs(Tier::Ssd, &removed)?;
                if let Some(mut rec) = self.ns.record(ino)? {
                    rec.placement = Placement::On(Tier::Hdd);
                    let mut b = self.ns.batch();
                    b.put_record(ino, &rec);
                    self.ns.commit(b, false)?;
                }
                rep.copies_dropped += 1;
            }
        }
        rep.split_files_fixed = self.recover_extents(!rep.unclean)?;
        let mut b = self.ns.batch();
        b.put_meta("clean", vec![0]);
        self.ns.commit(b, true)?;
        if rep != Recovery::default() {
            tracing::info!(?rep, "recovery at mount");
        }
        Ok(rep)
    }

    /// Removes the SSD names of cached file `ino` that are its copy, as
    /// the copy's making recorded it (`Namespace::copy_id`); anything else
    /// under one of them is set aside (`Volume::put_aside`), never deleted:
    /// a rename over the file, killed between its backing renames and its
    /// commit, leaves the only copy of another file there. A copy made by
    /// an older build, whose identity is unknown, is taken for the file's
    /// if it has the size and modification time of the file's HDD copy
    /// under the same name (as a copy is made). Returns the directories it
    /// removed names from.
    fn drop_copy_at_recovery(&self, ino: Ino, links: &[(Ino, OsString)]) -> Result<Vec<Ino>> {
        let id = self.ns.copy_id(ino)?;
        let s = self.tiers.store(Tier::Ssd);
        let mut removed = Vec::new();
        for (p, n) in links {
            let d = match self.tiers.dir(*p, Tier::Ssd, false) {
                Ok(d) => d,
                Err(e) if e.is(libc::ENOENT) => continue,
                Err(e) => return Err(e),
            };
            let st = match s.stat(Target::Entry(&d, n)) {
                Ok(st) => st,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                Err(e) => return Err(e.into()),
            };
            if st.kind() == Some(FileKind::Dir) {
                tracing::warn!(ino, name = ?n, "left alone: a directory under a cached file's name");
                continue;
            }
            // The inode number, as `unlink_checked` compares it.
            let ours = match id {
                Some(id) => id.1 == st.ino,
                None => self.stat_on(*p, n, Tier::Hdd).is_ok_and(|h| (h.size, h.mtime) == (st.size, st.mtime)),
            };
            if ours {
                s.unlink(&d, n)?;
                if !removed.contains(p) {
                    removed.push(*p);
                }
                continue;
            }
            let aside = self.put_aside(Tier::Ssd, &d, n, *p, n).map_err(|e| {
                // The mount stops rather than delete what it cannot place.
                Error::State(format!("setting aside what is under the name {n:?} of cached file inode {ino}: {e}"))
            })?;
            tracing::warn!(ino, name = ?n, aside = ?aside, known = id.is_some(),
                "recovery: not the cached copy it recorded under the file's name on the SSD: set aside");
        }
        Ok(removed)
    }

    /// Marks a clean shutdown (after everything else is flushed).
    pub fn mark_clean(&self) -> Result<()> {
        let mut b = self.ns.batch();
        b.put_meta("clean", vec![1]);
        self.ns.commit(b, true)
    }
}

/// True if nothing has `n` on the target tier; an empty directory there (a
/// left-over container) is removed.
fn name_is_free<S: Store>(s: &S, d: &S::Dir, n: &OsStr) -> Result<bool> {
    match s.stat(Target::Entry(d, n)) {
        Ok(st) if st.kind() == Some(FileKind::Dir) => Ok(s.rmdir(d, n).is_ok()),
        Ok(_) => Ok(false),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(true),
        Err(e) => Err(e.into()),
    }
}

/// Name of the staging directory, for documentation and tests.
pub const STAGING_DIR: &str = STAGING;

#[cfg(test)]
mod powercut;
#[cfg(test)]
pub(crate) mod tests;
