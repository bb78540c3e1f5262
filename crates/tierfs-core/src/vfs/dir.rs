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

use super::Volume;
use crate::error::{err, Error, Result};
use crate::state::ns::{Dentry, Ino, ROOT_INO};
use crate::store::{FileKind, Store};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
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
        let parent = if ino == ROOT_INO { ROOT_INO } else { self.link_of(ino)?.0 };
        let fh = self.new_fh();
        let h = DirHandle { ino, parent, marks: Mutex::new(BTreeMap::new()), preview: Mutex::new(preview) };
        self.dir_handles.lock().insert(fh, Arc::new(h));
        Ok(fh)
    }

    /// Up to [`READDIR_BATCH`] entries from offset `off` on (none at the
    /// end).
    pub fn readdir(&self, fh: u64, off: u64) -> Result<Vec<DirEntryOut>> {
        self.read_dir(fh, off, false)
    }

    /// As [`Volume::readdir`], for an answer that carries attributes:
    /// every entry returned is in the database (a pending adoption is
    /// waited for up to the last of them), with the inode the database
    /// has for its name.
    pub fn readdirplus(&self, fh: u64, off: u64) -> Result<Vec<DirEntryOut>> {
        self.read_dir(fh, off, true)
    }

    fn read_dir(&self, fh: u64, off: u64, plus: bool) -> Result<Vec<DirEntryOut>> {
        let d = self.dir_handles.lock().get(&fh).cloned().ok_or_else(|| Error::errno(libc::EBADF))?;
        let mut out = Vec::new();
        if off == 0 {
            out.push(DirEntryOut { ino: d.ino, next: 1, kind: FileKind::Dir, name: ".".into() });
        }
        if off <= 1 {
            out.push(DirEntryOut { ino: d.parent, next: 2, kind: FileKind::Dir, name: "..".into() });
        }
        if plus && !out.is_empty() && self.live_preview(&d).is_some() {
            // The first readdirplus of a directory being adopted answers
            // `.` and `..` alone: the kernel asks for the rest by plain
            // readdir (it uses readdirplus from offset 0, and later only
            // after lookups), which does not wait for the adopter.
            return Ok(out);
        }
        let want = READDIR_BATCH - out.len();
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

    /// Closes a directory handle.
    pub fn releasedir(&self, fh: u64) -> Result<()> {
        self.dir_handles.lock().remove(&fh).map(drop).ok_or_else(|| Error::errno(libc::EBADF))
    }

    /// Makes a directory's entries durable on every tier.
    pub fn fsyncdir(&self, ino: Ino) -> Result<()> {
        for t in crate::tier::Tier::ALL {
            match self.tiers.dir(ino, t, false) {
                Ok(d) => self.tiers.store(t).sync_dir(&d)?,
                Err(e) if e.is(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
        }
        self.ns.kv().flush()
    }
}
