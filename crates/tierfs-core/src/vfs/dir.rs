//! opendir, readdir, releasedir, fsyncdir. A directory handle holds a
//! snapshot of the entries taken at opendir, so offsets stay valid while
//! the directory changes.

use super::Volume;
use crate::error::{err, Error, Result};
use crate::state::ns::{Ino, ROOT_INO};
use crate::store::{FileKind, Store};
use std::ffi::OsString;
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

impl<S: Store> Volume<S> {
    /// Opens a directory for reading.
    pub fn opendir(&self, ino: Ino) -> Result<u64> {
        let rec = self.record(ino)?;
        if rec.kind != FileKind::Dir {
            return err(libc::ENOTDIR);
        }
        self.reconcile(ino, false)?;
        let parent = if ino == ROOT_INO { ROOT_INO } else { self.link_of(ino)?.0 };
        let mut out = Vec::new();
        out.push(DirEntryOut { ino, next: 1, kind: FileKind::Dir, name: ".".into() });
        out.push(DirEntryOut { ino: parent, next: 2, kind: FileKind::Dir, name: "..".into() });
        for (i, d) in self.ns.children(ino)?.into_iter().enumerate() {
            out.push(DirEntryOut { ino: d.ino, next: i as u64 + 3, kind: d.kind, name: d.name });
        }
        let fh = self.new_fh();
        self.dir_handles.lock().insert(fh, Arc::new(out));
        Ok(fh)
    }

    /// The entries from offset `off` on.
    pub fn readdir(&self, fh: u64, off: u64) -> Result<Vec<DirEntryOut>> {
        let d = self.dir_handles.lock().get(&fh).cloned().ok_or_else(|| Error::errno(libc::EBADF))?;
        Ok(d.iter().skip(off as usize).cloned().collect())
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
