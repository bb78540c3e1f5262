//! opendir, readdir, releasedir, fsyncdir.
//!
//! A directory handle is a cursor into the directory's entries in the state
//! database, which are ordered by name: each readdir reads the next few
//! entries after the last name it returned, so a listing costs the same per
//! call however big the directory is, and holds no copy of it. Offsets are
//! positions in one handle's listing; the handle remembers the name at each
//! offset of its last answer, which is where the kernel continues (it asks
//! again from the last entry that fitted in its buffer). An entry present
//! for the whole listing is returned exactly once, whatever else is added
//! or removed meanwhile; one added or removed during it at most once.
//!
//! A directory not reconciled during this mount is listed from a preview
//! of its backing directories while the adopter reconciles it (see
//! `vfs::adopt`); the handle reads the database again, from the same
//! name on, once the reconciliation is over.
//!
//! A handle on a reconciled directory of at most [`KEYED_LISTING_MAX`]
//! entries (`VolumeConfig::keyed_listing_max`) is *keyed* instead: the kernel may keep its listing (see
//! [`Volume::listing_is_keyed`]), and it mixes in the listing it keeps the
//! answers of every handle that reads the directory meanwhile and goes on
//! from any of their offsets, in another handle or after the directory
//! changed. So a keyed listing is a snapshot of the directory in the
//! order of a hash of each name, and an entry's offset is that hash: the
//! same in every handle and every state of the directory, and "after
//! offset c" means the same thing to all of them. The snapshot is read at
//! opendir (or is the last one read, if no name came or went since:
//! [`KeptSnapshots`]) and again by the first readdir after a name was
//! added to the directory (or its own name changed, for `..`;
//! `Namespace::names_changed`), at whatever offset; after names were
//! only removed, each entry answered is looked up instead (a loop that
//! removes the names it lists costs a
//! lookup per name, not a reading of the directory per answer). So a
//! handle never answers from a state older than the one the kernel's copy
//! was started from, and going on "after c" in a newer state lists every
//! name present throughout exactly once.
//!
//! The kernel checks its copy only when a listing starts (offset 0): a
//! listing that started after a change and goes on from the kernel's copy,
//! completed meanwhile by a handle that started before the change, would
//! miss what the change added. So while a keyed listing of a directory is
//! in progress (read from, and not yet at its end), a change of its names
//! through the mount also drops the kernel's copy
//! ([`Volume::listing_touched`], called by the FUSE adapter).

use super::Volume;
use crate::error::{err, Error, Result};
use crate::state::ns::{Dentry, Ino, NameChanges, ROOT_INO};
use crate::store::{FileKind, Store};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::hash::{BuildHasher, RandomState};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// One entry returned by readdir.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntryOut {
    /// Inode.
    pub ino: Ino,
    /// Offset of the entry after this one.
    pub next: u64,
    /// Kind.
    pub kind: FileKind,
    /// Name.
    pub name: OsString,
}

/// How many entries one readdir reads from the state database: more than
/// a kernel readdir buffer (4 KiB, a page) usually holds.
pub const READDIR_BATCH: usize = 256;

/// How many entries one plain readdir of a keyed handle answers when it
/// looks each up (after names were removed).
pub(crate) const READDIR_CHECKED: usize = 64;

/// By default, the most entries a directory has for its listing to be
/// keyed (see the module documentation): a keyed handle holds them all,
/// about 1 MiB.
pub const KEYED_LISTING_MAX: usize = 16_384;

/// The offset after `name` in a keyed listing: a hash of the name with the
/// mount's own key (names that collide cannot be made up in advance),
/// above the offsets of `.` and `..` and below 2^63 (offsets are signed).
fn cookie(name: &OsStr, key: &RandomState) -> u64 {
    3 + (key.hash_one(name.as_bytes()) >> 2)
}

/// A directory's entries in keyed order, each with its offset. Of names
/// whose hashes are equal (about once in 10^11 listings of
/// [`KEYED_LISTING_MAX`] entries) the later in name order takes the next
/// free offset (and so may the entries right after it), so offsets stay
/// unique; only then may two snapshots disagree on an offset.
fn keyed(entries: Vec<Dentry>, key: &RandomState) -> Vec<(u64, Dentry)> {
    let mut v: Vec<(u64, Dentry)> = entries.into_iter().map(|e| (cookie(&e.name, key), e)).collect();
    v.sort_unstable_by(|a, b| (a.0, &a.1.name).cmp(&(b.0, &b.1.name)));
    for i in 1..v.len() {
        if v[i].0 <= v[i - 1].0 {
            v[i].0 = v[i - 1].0 + 1;
        }
    }
    v
}

/// The entries `.` and `..` of directory `ino` a listing from offset `off`
/// starts with.
fn dots(ino: Ino, parent: Ino, off: u64) -> Vec<DirEntryOut> {
    let mut out = Vec::new();
    if off == 0 {
        out.push(DirEntryOut { ino, next: 1, kind: FileKind::Dir, name: ".".into() });
    }
    if off <= 1 {
        out.push(DirEntryOut { ino: parent, next: 2, kind: FileKind::Dir, name: "..".into() });
    }
    out
}

/// The snapshot a keyed handle lists.
#[derive(Clone, Debug)]
pub(crate) struct Snapshot {
    entries: Arc<Vec<(u64, Dentry)>>,
    /// The directory's parent (`..`) when it was read.
    parent: Ino,
    /// `Namespace::names_changed` of the directory, read before it.
    changes: NameChanges,
}

/// How many entries the snapshots kept between handles hold at most
/// (about 8 MiB, each directory's own cost counted as [`KEPT_DIR_COST`]
/// entries): those of a tree of some 60 000 names listed again and again,
/// as `git status` does.
const KEPT_SNAPSHOT_ENTRIES: usize = 65_536;

/// What keeping a directory costs besides its entries (its slot in the
/// map, the snapshot's own allocation), counted in entries.
const KEPT_DIR_COST: usize = 2;

/// What a kept snapshot counts against [`KEPT_SNAPSHOT_ENTRIES`].
fn kept_cost(s: &Option<Snapshot>) -> usize {
    KEPT_DIR_COST + s.as_ref().map_or(0, |s| s.entries.len())
}

/// The last snapshot read of each directory, for the next handle on it
/// while no name was added to or removed from it since: a listing the
/// kernel keeps is then opened without reading the directory again (its
/// handle is not read from at all). `None`: the directory had more than
/// `keyed_listing_max` entries then. A leaf lock (`Volume::snapshots`);
/// what it drops is returned, to be freed after the lock is released.
#[derive(Debug, Default)]
pub(crate) struct KeptSnapshots {
    dirs: std::collections::HashMap<Ino, (NameChanges, Option<Snapshot>)>,
    /// What they hold, in entries ([`kept_cost`]).
    entries: usize,
}

/// Directories [`Volume::fsyncdir`] remembers the HDD sync of (forgotten
/// all at once past it: each then syncs once more).
const HDD_DIRS_SYNCED_MAX: usize = 65_536;

impl KeptSnapshots {
    /// Directory `dir`'s snapshot if it was read when the directory's
    /// names were at `changes`.
    fn get(&self, dir: Ino, changes: NameChanges) -> Option<Option<Snapshot>> {
        self.dirs.get(&dir).filter(|(c, _)| *c == changes).map(|(_, s)| s.clone())
    }

    /// Keeps `snap` (read at `changes`) for directory `dir` instead of the
    /// one kept, unless that one was read after more changes (a slower
    /// reader), and drops others (any) while they hold too many entries
    /// together.
    #[must_use = "what is dropped is freed after the lock"]
    fn put(&mut self, dir: Ino, changes: NameChanges, snap: Option<Snapshot>) -> Vec<Option<Snapshot>> {
        let mut dropped = Vec::new();
        if let Some((c, _)) = self.dirs.get(&dir) {
            if *c != changes && c.added >= changes.added && c.removed >= changes.removed {
                dropped.push(snap);
                return dropped;
            }
        }
        dropped.extend(self.forget(dir));
        let n = kept_cost(&snap);
        if n > KEPT_SNAPSHOT_ENTRIES {
            dropped.push(snap);
            return dropped;
        }
        if self.entries + n > KEPT_SNAPSHOT_ENTRIES {
            // One pass over the map, in its order, down to three quarters
            // of the bound: a pass every so many entries kept, not one
            // each while the bound is reached.
            let mut excess = (self.entries + n).saturating_sub(KEPT_SNAPSHOT_ENTRIES / 4 * 3);
            let entries = &mut self.entries;
            self.dirs.retain(|_, (_, s)| {
                if excess == 0 {
                    return true;
                }
                let c = kept_cost(s);
                excess = excess.saturating_sub(c);
                *entries -= c;
                dropped.push(s.take());
                false
            });
        }
        self.entries += n;
        self.dirs.insert(dir, (changes, snap));
        dropped
    }

    /// Forgets directory `dir` (removed), returning what it kept.
    #[must_use = "what is dropped is freed after the lock"]
    pub(super) fn forget(&mut self, dir: Ino) -> Option<Option<Snapshot>> {
        let (_, old) = self.dirs.remove(&dir)?;
        self.entries -= kept_cost(&old);
        Some(old)
    }
}

/// An open directory.
#[derive(Debug)]
pub(crate) struct DirHandle {
    ino: Ino,
    parent: Ino,
    /// Offset -> the name of the entry that ends there, for the entries of
    /// the last answer (where the next readdir continues).
    marks: Mutex<BTreeMap<u64, OsString>>,
    /// The entries of a directory whose reconciliation is pending, in
    /// name order (see `vfs::adopt`); `None`: read from the database.
    preview: Mutex<Option<Arc<super::adopt::Preview>>>,
    /// A keyed handle's snapshot (see the module documentation); `None`:
    /// offsets are positions.
    keyed: Option<Mutex<Snapshot>>,
    /// A keyed handle's listing is in progress (counted in
    /// `Volume::listings`).
    reading: AtomicBool,
}

impl<S: Store> Volume<S> {
    /// Opens a directory for reading.
    pub fn opendir(&self, ino: Ino) -> Result<u64> {
        let rec = self.record(ino)?;
        if rec.kind != FileKind::Dir {
            return err(libc::ENOTDIR);
        }
        let preview = if self.is_verified(ino) { None } else { self.preview(ino)? };
        if preview.is_none() {
            self.reconcile(ino, false)?;
        }
        let changes = self.ns.names_changed(ino);
        let max = self.cfg.keyed_listing_max;
        let keyable = preview.is_none() && max > 0;
        let kept = if keyable { self.snapshots.lock().get(ino, changes) } else { None };
        // Kept, the parent is that of the snapshot: a new one (a rename
        // of the directory) would have moved `changes`.
        let (parent, keyed) = match kept {
            Some(Some(s)) => (s.parent, Some(s)),
            Some(None) => (self.dir_parent(ino)?, None),
            None if !keyable => (self.dir_parent(ino)?, None),
            None => {
                let parent = self.dir_parent(ino)?;
                let all = self.ns.children_after(ino, None, max.saturating_add(1))?;
                let snap = (all.len() <= max).then(|| Snapshot {
                    entries: Arc::new(keyed(all, &self.listing_key)),
                    parent,
                    changes,
                });
                self.keep_snapshot(ino, changes, snap.as_ref());
                (parent, snap)
            }
        };
        let keyed = keyed.map(Mutex::new);
        let fh = self.new_fh();
        let h = DirHandle {
            ino,
            parent,
            marks: Mutex::new(BTreeMap::new()),
            preview: Mutex::new(preview),
            keyed,
            reading: AtomicBool::new(false),
        };
        self.dir_handles.lock().insert(fh, Arc::new(h));
        Ok(fh)
    }

    /// Keeps what was read of directory `ino` at `changes` for the next
    /// handle ([`KeptSnapshots`]): `snap` while it is small enough to be
    /// keyed, else (or without one) the verdict that it is not.
    fn keep_snapshot(&self, ino: Ino, changes: NameChanges, snap: Option<&Snapshot>) {
        let kept = snap.filter(|s| s.entries.len() <= self.cfg.keyed_listing_max).cloned();
        // Bound after the lock's guard: what is dropped is freed without it.
        let _dropped = self.snapshots.lock().put(ino, changes, kept);
    }

    /// The parent of directory `ino` (the root is its own).
    fn dir_parent(&self, ino: Ino) -> Result<Ino> {
        if ino == ROOT_INO {
            return Ok(ROOT_INO);
        }
        Ok(self.link_of(ino)?.0)
    }

    /// Marks a keyed handle's listing as in progress or over.
    fn set_reading(&self, d: &DirHandle, on: bool) {
        if d.reading.swap(on, Ordering::SeqCst) == on {
            return;
        }
        let mut l = self.listings.lock();
        if on {
            *l.entry(d.ino).or_default() += 1;
        } else if let Some(n) = l.get_mut(&d.ino) {
            *n -= 1;
            if *n == 0 {
                l.remove(&d.ino);
            }
        }
    }

    /// The names in directory `dir` changed through the mount: while a
    /// keyed listing of it is in progress, the kernel drops its copy (see
    /// the module documentation). Called holding no lock.
    pub fn listing_touched(&self, dir: Ino) {
        let listing = self.listings.lock().contains_key(&dir);
        if listing {
            self.listing_changed(dir);
        }
    }

    /// Whether the kernel may keep what handle `fh` lists and answer later
    /// listings from it: the handle is keyed (see the module
    /// documentation), and it reads the state database, where every change
    /// of a reconciled directory is made by a request on it (which the
    /// kernel sees) or is told to the kernel (see [`KernelCache`]). A
    /// preview is not the directory's final listing.
    ///
    /// [`KernelCache`]: super::KernelCache
    pub fn listing_is_keyed(&self, fh: u64) -> bool {
        let d = self.dir_handles.lock().get(&fh).cloned();
        d.is_some_and(|d| d.keyed.is_some())
    }

    /// Up to [`READDIR_BATCH`] entries from offset `off` on (none at the
    /// end).
    pub fn readdir(&self, fh: u64, off: u64) -> Result<Vec<DirEntryOut>> {
        self.read_dir(fh, off, false, READDIR_BATCH)
    }

    /// As [`Volume::readdir`], up to `max` entries (as many as the
    /// kernel's buffer may hold: each is looked up, and its attributes
    /// read by the caller), for an answer that carries attributes: every
    /// entry returned is in the database (a pending adoption is waited for
    /// up to the last of them), with the inode the database has for its
    /// name. An answer that holds the whole directory refreshes the
    /// attributes the kernel keeps of every entry: after a read through
    /// passthrough, the kernel asks for a file's attributes again at its
    /// next stat, unless a listing with attributes came between (`git
    /// status` reads the files it is unsure of, then lists each
    /// directory, and the next status stats every file).
    pub fn readdirplus(&self, fh: u64, off: u64, max: usize) -> Result<Vec<DirEntryOut>> {
        self.read_dir(fh, off, true, max.clamp(1, READDIR_BATCH))
    }

    fn read_dir(&self, fh: u64, off: u64, plus: bool, limit: usize) -> Result<Vec<DirEntryOut>> {
        let d = self.dir_handles.lock().get(&fh).cloned().ok_or_else(|| Error::errno(libc::EBADF))?;
        if let Some(k) = &d.keyed {
            return self.keyed_page(&d, k, off, limit, plus);
        }
        let mut out = dots(d.ino, d.parent, off);
        if plus && !out.is_empty() && self.live_preview(&d).is_some() {
            // The first readdirplus of a directory being adopted answers
            // `.` and `..` alone: the kernel asks for the rest by plain
            // readdir (it uses readdirplus from offset 0, and later only
            // after lookups), which does not wait for the adopter.
            return Ok(out);
        }
        let want = limit.saturating_sub(out.len());
        // Not held while a page is read: that may wait for the adopter.
        let mark = if off <= 2 { None } else { d.marks.lock().get(&off).cloned() };
        let entries = if off <= 2 {
            self.page(&d, None, want, plus)?
        } else if let Some(after) = mark {
            self.page(&d, Some(&after), want, plus)?
        } else {
            // An offset of an older answer (seekdir): count from the start.
            let mut skip = off - 2;
            let mut after: Option<OsString> = None;
            loop {
                let page = self.page(&d, after.as_deref(), READDIR_BATCH, plus)?;
                let Some(last) = page.last() else { break Vec::new() };
                if (page.len() as u64) <= skip {
                    skip -= page.len() as u64;
                    after = Some(last.name.clone());
                    continue;
                }
                let mut rest = page;
                rest.drain(..skip as usize);
                rest.truncate(want);
                break rest;
            }
        };
        let first = off.max(2);
        let mut marks = d.marks.lock();
        // At the end the marks stay: a readdir at the end again (without a
        // rewind) is answered from them, not by counting from the start.
        if !entries.is_empty() {
            marks.clear();
        }
        for (i, e) in entries.into_iter().enumerate() {
            let next = first + i as u64 + 1;
            marks.insert(next, e.name.clone());
            out.push(DirEntryOut { ino: e.ino, next, kind: e.kind, name: e.name });
        }
        Ok(out)
    }

    /// Up to `limit` entries of a keyed handle's listing after offset `off`
    /// (`.` at 1, `..` at 2, then the snapshot). For an answer with
    /// attributes, each entry has the inode the database has for its name
    /// now, and a name gone since the snapshot is left out.
    fn keyed_page(
        &self,
        d: &DirHandle,
        k: &Mutex<Snapshot>,
        off: u64,
        limit: usize,
        plus: bool,
    ) -> Result<Vec<DirEntryOut>> {
        // In progress again after its end: a rewind or a seek.
        self.set_reading(d, true);
        let changes = self.ns.names_changed(d.ino);
        let (old, parent) = {
            let k = k.lock();
            (k.changes.added != changes.added, k.parent)
        };
        if old {
            // Read without the handle's lock, a leaf. A directory removed
            // while open keeps the parent it had.
            let (parent, removed) = match self.dir_parent(d.ino) {
                Ok(p) => (p, false),
                Err(e) if e.is(libc::ENOENT) => (parent, true),
                Err(e) => return Err(e),
            };
            let entries = Arc::new(keyed(self.ns.children_after(d.ino, None, usize::MAX)?, &self.listing_key));
            let snap = Snapshot { entries, parent, changes };
            if !removed {
                self.keep_snapshot(d.ino, changes, Some(&snap));
            }
            *k.lock() = snap;
        }
        let (entries, parent, removed) = {
            let k = k.lock();
            (k.entries.clone(), k.parent, k.changes.removed != changes.removed)
        };
        // Each entry looked up: a page about what a kernel buffer of them
        // holds, not more (an answer with attributes is already sized so).
        let check = plus || removed;
        let limit = if removed && !plus { limit.min(READDIR_CHECKED) } else { limit };
        let mut out = dots(d.ino, parent, off);
        let limit = limit.saturating_sub(out.len());
        if limit == 0 {
            return Ok(out);
        }
        let mut start = if off <= 2 { 0 } else { entries.partition_point(|(c, _)| *c <= off) };
        let first = out.len();
        while start < entries.len() && out.len() == first {
            let page = &entries[start..(start + limit).min(entries.len())];
            start += page.len();
            for (c, e) in page {
                let (ino, kind) = if check {
                    match self.ns.lookup(d.ino, &e.name)? {
                        Some(now) => now,
                        None => continue,
                    }
                } else {
                    (e.ino, e.kind)
                };
                out.push(DirEntryOut { ino, next: *c, kind, name: e.name.clone() });
            }
            // An empty answer would end the listing: go on while every
            // name of a page is gone.
        }
        if out.is_empty() {
            self.set_reading(d, false);
        }
        Ok(out)
    }

    /// Up to `limit` entries of the handle's directory after the name
    /// `after`, from its preview while the directory's reconciliation is
    /// pending, from the database otherwise. Both are in name order, so a
    /// listing goes on from the same name when the preview is dropped.
    fn page(&self, d: &DirHandle, after: Option<&OsStr>, limit: usize, plus: bool) -> Result<Vec<Dentry>> {
        let Some(p) = self.live_preview(d) else { return self.ns.children_after(d.ino, after, limit) };
        let p = &p.entries;
        let mut after = after.map(OsStr::to_os_string);
        loop {
            let start = after.as_deref().map_or(0, |a| p.partition_point(|e| e.name.as_os_str() <= a));
            let mut page: Vec<Dentry> = p[start..].iter().take(limit).cloned().collect();
            let Some(last) = page.last().map(|e| e.name.clone()) else { return Ok(page) };
            if !plus {
                return Ok(page);
            }
            self.await_adopted(d.ino, &last)?;
            // What the reconciliation made of each name: a second name of
            // a hard-linked file has its first name's inode; a name gone
            // meanwhile is left out (its old number may name a file that
            // lives on elsewhere).
            let mut kept = Vec::with_capacity(page.len());
            for mut e in page.drain(..) {
                if let Some((ino, kind)) = self.ns.lookup(d.ino, &e.name)? {
                    e.ino = ino;
                    e.kind = kind;
                    kept.push(e);
                }
            }
            if !kept.is_empty() {
                return Ok(kept);
            }
            // Not an empty answer, which would end the listing.
            after = Some(last);
        }
    }

    /// The handle's preview while its directory's reconciliation is
    /// pending; dropped once it is over.
    fn live_preview(&self, d: &DirHandle) -> Option<Arc<super::adopt::Preview>> {
        // The handle's lock is a leaf: not held while `verified` is read.
        let p = d.preview.lock().clone()?;
        if self.is_verified(d.ino) {
            *d.preview.lock() = None;
            return None;
        }
        Some(p)
    }

    /// Which snapshot handle `fh` lists (its address), if keyed: two
    /// handles list the same one when the second took the kept one.
    #[cfg(test)]
    pub(crate) fn listing_snapshot(&self, fh: u64) -> Option<usize> {
        let d = self.dir_handles.lock().get(&fh).cloned()?;
        let k = d.keyed.as_ref()?;
        let at = Arc::as_ptr(&k.lock().entries) as usize;
        Some(at)
    }

    /// Closes a directory handle.
    pub fn releasedir(&self, fh: u64) -> Result<()> {
        let d = self.dir_handles.lock().remove(&fh).ok_or_else(|| Error::errno(libc::EBADF))?;
        self.set_reading(&d, false);
        Ok(())
    }

    /// Makes a directory's entries durable on every tier. Under the quiet
    /// HDD mode the HDD's copy (or its absence) is synced once, and again
    /// only after a call through the HDD's store changed some name or
    /// attributes there: a mail server that syncs its directory after each
    /// delivery to the SSD does not wake the HDD each time.
    pub fn fsyncdir(&self, ino: Ino) -> Result<()> {
        for t in crate::tier::Tier::ALL {
            let s = self.tiers.store(t);
            let quiet = t == crate::tier::Tier::Hdd && self.hooks().quiet_dir(ino);
            let changes = s.changes().filter(|_| quiet);
            if changes.is_some() && self.hdd_dirs_synced.lock().get(&ino) == changes.as_ref() {
                continue;
            }
            match self.tiers.dir(ino, t, false) {
                Ok(d) => s.sync_dir(&d)?,
                Err(e) if e.is(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
            if let Some(c) = changes {
                // The count read before the sync: a change made since makes
                // the next sync happen.
                let mut m = self.hdd_dirs_synced.lock();
                if m.len() >= HDD_DIRS_SYNCED_MAX {
                    m.clear();
                }
                m.insert(ino, c);
            }
        }
        self.ns.kv().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(n: usize) -> Option<Snapshot> {
        let entries = (0..n)
            .map(|i| (i as u64 + 3, Dentry { name: format!("f{i}").into(), ino: i as Ino + 2, kind: FileKind::File }))
            .collect();
        Some(Snapshot { entries: Arc::new(entries), parent: ROOT_INO, changes: NameChanges { added: 0, removed: 0 } })
    }

    #[test]
    fn kept_snapshots_stay_within_their_bound_and_match_only_their_changes() {
        let mut k = KeptSnapshots::default();
        let at = |added| NameChanges { added, removed: 0 };
        let held = |k: &KeptSnapshots| k.dirs.values().map(|(_, s)| kept_cost(s)).sum::<usize>();
        for dir in 0..100 {
            let _dropped = k.put(dir, at(dir), snapshot(KEPT_SNAPSHOT_ENTRIES / 10));
            assert_eq!(held(&k), k.entries);
            assert!(k.entries <= KEPT_SNAPSHOT_ENTRIES, "{} entries held", k.entries);
            assert!(k.get(dir, at(dir)).is_some(), "the one just kept");
        }
        assert!(k.get(99, at(98)).is_none(), "other changes");
        let _dropped = k.put(99, at(100), None);
        assert!(matches!(k.get(99, at(100)), Some(None)), "too big is kept too");
        let _dropped = k.put(99, at(90), snapshot(3));
        assert!(matches!(k.get(99, at(100)), Some(None)), "not replaced by an older reading");
        let _dropped = k.put(7, at(0), snapshot(KEPT_SNAPSHOT_ENTRIES));
        assert!(k.get(7, at(0)).is_none(), "a snapshot bigger than the bound is not kept");
        // Many small ones, then a big one: one pass makes room.
        const BIG: Ino = 1 << 40;
        for dir in 1000..1000 + KEPT_SNAPSHOT_ENTRIES as Ino {
            let _dropped = k.put(dir, at(0), None);
        }
        assert!(k.entries <= KEPT_SNAPSHOT_ENTRIES);
        let dropped = k.put(BIG, at(0), snapshot(KEPT_SNAPSHOT_ENTRIES / 2));
        assert!(!dropped.is_empty());
        assert!(k.entries <= KEPT_SNAPSHOT_ENTRIES);
        assert_eq!(held(&k), k.entries);
        assert!(k.get(BIG, at(0)).is_some());
        assert!(k.forget(BIG).is_some() && k.forget(BIG).is_none());
        assert_eq!(held(&k), k.entries);
    }
}
