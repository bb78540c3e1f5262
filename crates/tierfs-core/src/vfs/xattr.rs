//! Extended attributes. A non-directory's live on its primary copy; a
//! directory's on every copy (read from the meta copy). POSIX ACL names are
//! refused: the kernel would not enforce them on this mount.

use super::Volume;
use crate::error::{err, Result};
use crate::state::ns::Ino;
use crate::store::{FileKind, Store, Target};
use crate::tier::Tier;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

fn is_acl(name: &OsStr) -> bool {
    name.as_bytes().starts_with(b"system.posix_acl_")
}

impl<S: Store> Volume<S> {
    /// Runs `f` on the object's authoritative copy. For a non-directory the
    /// caller holds the inode lock, so the copy cannot move, nor its name
    /// go to another file, meanwhile.
    fn on_primary<T>(&self, ino: Ino, f: impl FnOnce(&S, Target<'_, S::Dir>) -> std::io::Result<T>) -> Result<T> {
        let rec = self.kernel_record(ino)?;
        if rec.kind == FileKind::Dir {
            let d = self.meta_dir(ino)?;
            return Ok(f(self.tiers.store(self.tiers.meta), Target::This(&d))?);
        }
        let (p, n) = self.kernel_link(ino)?;
        let t = rec.placement.primary();
        let d = self.tiers.dir(p, t, false)?;
        Ok(f(self.tiers.store(t), Target::Entry(&d, &n))?)
    }

    /// Runs `f` on every copy that carries attributes (all copies of a
    /// directory, the primary of anything else).
    fn on_all<T>(&self, ino: Ino, f: impl Fn(&S, Target<'_, S::Dir>) -> std::io::Result<T>) -> Result<()> {
        let rec = self.kernel_record(ino)?;
        if rec.kind != FileKind::Dir {
            self.on_primary(ino, f)?;
            // A migration copying the file must see this.
            self.note_change(ino);
            return Ok(());
        }
        let meta = self.tiers.meta;
        for t in [meta, meta.other()] {
            match self.tiers.dir(ino, t, t == meta) {
                Ok(d) => {
                    f(self.tiers.store(t), Target::This(&d))?;
                }
                Err(e) if e.is(libc::ENOENT) && t != meta => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads a stored extended attribute.
    pub fn getxattr_stored(&self, ino: Ino, name: &OsStr) -> Result<Vec<u8>> {
        if is_acl(name) {
            return err(libc::EOPNOTSUPP);
        }
        let _il = self.ilocks.get(ino).read();
        if let Some(p) = self.hdd_file_dir(ino)? {
            let got = self.kept_hdd(
                ino,
                p,
                |k| k.xattrs.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()),
                |k, v| {
                    if k.xattrs.len() < super::KEPT_XATTRS {
                        k.xattrs.push((name.to_os_string(), v.clone()));
                    }
                },
                || match self.on_primary(ino, |s, t| s.getxattr(t, name)) {
                    Ok(v) => Ok(Some(v)),
                    Err(e) if e.is(libc::ENODATA) => Ok(None),
                    Err(e) => Err(e),
                },
            )?;
            return got.ok_or_else(|| crate::error::Error::errno(libc::ENODATA));
        }
        self.on_primary(ino, |s, t| s.getxattr(t, name))
    }

    /// The directory of `ino` if it is a non-directory on the HDD alone
    /// (its answers may be kept: `Volume::kept_hdd`). The caller holds the
    /// inode lock.
    fn hdd_file_dir(&self, ino: Ino) -> Result<Option<Ino>> {
        let rec = self.kernel_record(ino)?;
        if rec.kind == FileKind::Dir || rec.placement != crate::tier::Placement::On(Tier::Hdd) {
            return Ok(None);
        }
        Ok(Some(self.kernel_link(ino)?.0))
    }

    /// Sets a stored extended attribute. Changes and the switch-over of a
    /// migration exclude each other, so none is lost with the old copy.
    pub fn setxattr_stored(&self, ino: Ino, name: &OsStr, value: &[u8], flags: i32) -> Result<()> {
        if is_acl(name) {
            return err(libc::EOPNOTSUPP);
        }
        let _il = self.ilocks.get(ino).write();
        self.on_all(ino, |s, t| s.setxattr(t, name, value, flags))
    }

    /// Lists stored extended attribute names (NUL-terminated each).
    pub fn listxattr_stored(&self, ino: Ino) -> Result<Vec<u8>> {
        let _il = self.ilocks.get(ino).read();
        if let Some(p) = self.hdd_file_dir(ino)? {
            return self.kept_hdd(
                ino,
                p,
                |k| k.list.clone(),
                |k, v| k.list = Some(v.clone()),
                || self.on_primary(ino, |s, t| s.listxattr(t)),
            );
        }
        self.on_primary(ino, |s, t| s.listxattr(t))
    }

    /// Removes a stored extended attribute.
    pub fn removexattr_stored(&self, ino: Ino, name: &OsStr) -> Result<()> {
        if is_acl(name) {
            return err(libc::EOPNOTSUPP);
        }
        let _il = self.ilocks.get(ino).write();
        self.on_all(ino, |s, t| s.removexattr(t, name))
    }

    /// The tier that holds a file's primary copy (directories: the meta tier).
    pub fn primary_tier(&self, ino: Ino) -> Result<Tier> {
        let rec = self.record(ino)?;
        Ok(if rec.kind == FileKind::Dir { self.tiers.meta } else { rec.placement.primary() })
    }
}
