//! rename, with RENAME_NOREPLACE and RENAME_EXCHANGE, within and across
//! tiers.
//!
//! The two names may live on different tiers. For each tier the backing
//! operation follows from where the source (A) and the target (B) exist:
//!
//! | A | B | plain rename | exchange |
//! |---|---|---|---|
//! | yes | yes | rename A over B | exchange |
//! | yes | no | rename A to B | rename A to B |
//! | no | yes | remove B (after all renames) | rename B to A |
//!
//! If a backing step fails, the steps already done are undone in reverse.

use super::{check_name, is_reserved, Volume};
use crate::error::{err, Result};
use crate::event::EventKind;
use crate::state::ns::Ino;
use crate::store::{FileKind, Store, RENAME_EXCHANGE, RENAME_NOREPLACE};
use crate::tier::Tier;
use std::ffi::OsStr;

enum Step {
    Renamed { t: Tier, exchange: bool },
}

impl<S: Store> Volume<S> {
    /// The tiers holding a copy of an inode.
    fn tiers_of(&self, ino: Ino, kind: FileKind, parent: Ino, name: &OsStr) -> Result<Vec<Tier>> {
        if kind != FileKind::Dir {
            return Ok(self.record(ino)?.placement.tiers().to_vec());
        }
        let mut out = Vec::new();
        for t in Tier::ALL {
            match self.tiers.dir(parent, t, false) {
                // Only "no such name" means the tier has no copy: a copy
                // taken for absent on another error would not move with
                // the directory, and would come back at the next mount
                // under the old name.
                Ok(d) => match self.tiers.store(t).stat(crate::store::Target::Entry(&d, name)) {
                    Ok(_) => out.push(t),
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                    Err(e) => return Err(e.into()),
                },
                Err(e) if e.is(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Renames `name` in `parent` to `new_name` in `new_parent`.
    pub fn rename(&self, parent: Ino, name: &OsStr, new_parent: Ino, new_name: &OsStr, flags: u32) -> Result<()> {
        // A directory moved to another parent has a new `..`, which the
        // kernel may hold in its copy of the directory's listing.
        for d in self.rename_names(parent, name, new_parent, new_name, flags)? {
            self.listing_changed(d);
        }
        Ok(())
    }

    /// [`Volume::rename`]; returns the directories it moved to another
    /// parent.
    fn rename_names(
        &self,
        parent: Ino,
        name: &OsStr,
        new_parent: Ino,
        new_name: &OsStr,
        flags: u32,
    ) -> Result<Vec<Ino>> {
        check_name(name)?;
        check_name(new_name)?;
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags & RENAME_NOREPLACE != 0 && flags & RENAME_EXCHANGE != 0
        {
            return err(libc::EINVAL);
        }
        if is_reserved(new_parent, new_name) {
            return err(libc::EPERM);
        }
        let exchange = flags & RENAME_EXCHANGE != 0;
        let (a, ka) = self.find(parent, name)?;
        self.reconcile(new_parent, false)?;
        let _g = self.locks.lock(&[parent, new_parent]);
        if self.ns.lookup(parent, name)? != Some((a, ka)) {
            return err(libc::ENOENT);
        }
        let b = self.ns.lookup(new_parent, new_name)?;
        if flags & RENAME_NOREPLACE != 0 && b.is_some() {
            return err(libc::EEXIST);
        }
        if exchange && b.is_none() {
            return err(libc::ENOENT);
        }
        if let Some((bi, _)) = b {
            if bi == a {
                // Two names of one file: POSIX says do nothing.
                return Ok(Vec::new());
            }
        }
        let mut moved = Vec::new();
        if parent != new_parent {
            let exchanged = if exchange { b } else { None };
            moved
                .extend([Some((a, ka)), exchanged].into_iter().flatten().filter(|x| x.1 == FileKind::Dir).map(|x| x.0));
        }
        if !exchange {
            if let Some((bi, kb)) = b {
                match (ka == FileKind::Dir, kb == FileKind::Dir) {
                    (true, false) => return err(libc::ENOTDIR),
                    (false, true) => return err(libc::EISDIR),
                    (true, true) => {
                        drop(_g);
                        self.reconcile(bi, false)?;
                        // (One that starts over tells the kernel itself,
                        // and this again: harmless.)
                        return self
                            .rename_checked_dir_target(parent, name, new_parent, new_name, flags, a, bi)
                            .map(|()| moved);
                    }
                    _ => {}
                }
            }
        }
        self.rename_locked(parent, name, new_parent, new_name, exchange, (a, ka), b).map(|()| moved)
    }

    /// Renaming a directory over a directory: the target must be empty,
    /// which needs it reconciled before the parents are locked again.
    #[allow(clippy::too_many_arguments)]
    fn rename_checked_dir_target(
        &self,
        parent: Ino,
        name: &OsStr,
        new_parent: Ino,
        new_name: &OsStr,
        flags: u32,
        a: Ino,
        bi: Ino,
    ) -> Result<()> {
        let _g = self.locks.lock(&[parent, new_parent, bi]);
        if self.ns.lookup(parent, name)? != Some((a, FileKind::Dir))
            || self.ns.lookup(new_parent, new_name)? != Some((bi, FileKind::Dir))
        {
            // Changed while unlocked: start over.
            drop(_g);
            return self.rename(parent, name, new_parent, new_name, flags);
        }
        if self.ns.has_children(bi)? {
            return err(libc::ENOTEMPTY);
        }
        self.rename_locked(parent, name, new_parent, new_name, false, (a, FileKind::Dir), Some((bi, FileKind::Dir)))
    }

    #[allow(clippy::too_many_arguments)]
    fn rename_locked(
        &self,
        parent: Ino,
        name: &OsStr,
        new_parent: Ino,
        new_name: &OsStr,
        exchange: bool,
        (a, ka): (Ino, FileKind),
        b: Option<(Ino, FileKind)>,
    ) -> Result<()> {
        // The files whose names change (the renamed ones, and one it
        // replaces), each with its inode lock held for writing, and the I/O
        // lock of its open state if it has one. Every operation that reads
        // a file's name and then uses it on a tier (getattr, a closed
        // file's setattr, readlink, the stored xattrs, opening its backing
        // copies) holds one of the two: without them, a name read before
        // the backing renames and used after them reached the file now
        // under it (another user's file truncated, chmod-ed or opened). A
        // replaced file's names are counted and its last one removed under
        // its lock too, as unlink does: an unlink of another of its names
        // elsewhere counts in turn. All before the tree shape, which comes
        // later in the hierarchy.
        let files: Vec<Ino> =
            [Some((a, ka)), b].into_iter().flatten().filter(|(_, k)| *k != FileKind::Dir).map(|(i, _)| i).collect();
        let inode_locks = self.ilocks.write_all(&files);
        let open: Vec<_> = {
            let mut inos = files.clone();
            inos.sort_unstable();
            inos.into_iter().filter_map(|i| self.open_inode(i)).collect()
        };
        let io_locks: Vec<_> = open.iter().map(|oi| oi.io.write()).collect();
        // A directory changes the shape of the tree: no backing copy may be
        // made under the name it leaves while it moves.
        let moves_dir = ka == FileKind::Dir || (exchange && b.is_some_and(|(_, k)| k == FileKind::Dir));
        let shape = moves_dir.then(|| self.tiers.lock_shape());
        let ta = self.tiers_of(a, ka, parent, name)?;
        let tb = match b {
            Some((bi, kb)) => self.tiers_of(bi, kb, new_parent, new_name)?,
            None => Vec::new(),
        };
        // An exchange where a tier holding both names cannot swap them:
        // EINVAL, as the kernel answers for a flag the file system lacks,
        // before anything changed (there is no atomic fallback).
        if exchange && Tier::ALL.iter().any(|t| ta.contains(t) && tb.contains(t) && !self.features(*t).exchange) {
            return err(libc::EINVAL);
        }
        let mut done: Vec<Step> = Vec::new();
        let mut removals: Vec<Tier> = Vec::new();
        let mut touched: Vec<Tier> = Vec::new();
        let r = (|| -> Result<()> {
            for t in Tier::ALL {
                let (ha, hb) = (ta.contains(&t), tb.contains(&t));
                if !ha && !hb {
                    continue;
                }
                let s = self.tiers.store(t);
                let pa = self.tiers.dir(parent, t, true)?;
                let pb = self.tiers.dir(new_parent, t, true)?;
                match (ha, hb, exchange) {
                    (true, true, true) => {
                        s.rename(&pa, name, &pb, new_name, RENAME_EXCHANGE)?;
                        done.push(Step::Renamed { t, exchange: true });
                    }
                    (true, _, _) => {
                        s.rename(&pa, name, &pb, new_name, 0)?;
                        done.push(Step::Renamed { t, exchange: false });
                    }
                    (false, true, true) => {
                        s.rename(&pb, new_name, &pa, name, RENAME_NOREPLACE)?;
                        done.push(Step::Renamed { t, exchange: false });
                    }
                    (false, true, false) => removals.push(t),
                    (false, false, _) => continue,
                }
                touched.push(t);
            }
            Ok(())
        })();
        if let Err(e) = r {
            self.undo_renames(parent, name, new_parent, new_name, &ta, done);
            return Err(e);
        }
        // The replaced target's copies on tiers the source does not use.
        if let Some((bi, kb)) = b {
            for t in removals {
                let r = self.tiers.dir(new_parent, t, false).and_then(|pb| {
                    let s = self.tiers.store(t);
                    Ok(if kb == FileKind::Dir { s.rmdir(&pb, new_name) } else { s.unlink(&pb, new_name) }?)
                });
                // The rename stands (its backing renames are done); what is
                // left is adopted again at the next mount's reconciliation.
                if let Err(e) = r.or_else(|e| if e.is(libc::ENOENT) { Ok(()) } else { Err(e) }) {
                    tracing::error!(ino = bi, tier = %t, name = ?new_name, error = %e,
                        "could not remove the replaced file's copy: the next mount will show it again");
                }
            }
        }
        // The namespace.
        let mut batch = self.ns.batch();
        batch.unlink(parent, name, a);
        let mut removed = None;
        match b {
            Some((bi, kb)) if exchange => {
                batch.unlink(new_parent, new_name, bi).link(parent, name, bi, kb);
            }
            Some((bi, kb)) => {
                batch.unlink(new_parent, new_name, bi);
                if kb == FileKind::Dir || self.ns.link_count(bi)? <= 1 {
                    batch.del_record(bi);
                    removed = Some((bi, kb));
                }
                #[cfg(test)]
                crate::testutil::point("rename counted");
            }
            None => {}
        }
        batch.link(new_parent, new_name, a, ka);
        // Subdirectory counts of the parents.
        let dir_delta = |k: FileKind| i64::from(k == FileKind::Dir);
        let mut dp: i64 = -dir_delta(ka);
        let mut dn: i64 = dir_delta(ka);
        if let Some((_, kb)) = b {
            dn -= dir_delta(kb);
            if exchange {
                dp += dir_delta(kb);
            }
        }
        if parent == new_parent {
            dp += dn;
            dn = 0;
        }
        for (dir, delta) in [(parent, dp), (new_parent, dn)] {
            if delta != 0 {
                let mut r = self.record(dir)?;
                r.subdirs = (r.subdirs as i64 + delta).max(0) as u32;
                batch.put_record(dir, &r);
            }
        }
        if let Err(e) = self.ns.commit(batch, false) {
            // The state could not record it (a full or failing disk): the
            // backing renames are undone, so the source keeps its name and
            // its data. A target the rename replaced is gone from the
            // tiers either way (its name then finds no copy, as after a
            // removal past tierfs); said in the log.
            self.undo_renames(parent, name, new_parent, new_name, &ta, done);
            if b.is_some() && !exchange {
                tracing::error!(error = %e, name = ?new_name,
                    "a rename could not be recorded and was undone; what it replaced is lost");
            }
            return Err(e);
        }
        // The tree has its new shape: nothing below waits while it is held.
        drop(shape);
        drop(io_locks);
        drop(inode_locks);
        for t in touched {
            self.touch_dir(parent, t);
            self.touch_dir(new_parent, t);
        }
        if let Some((bi, kb)) = removed {
            if kb == FileKind::Dir {
                self.forget_dir(bi);
            } else {
                self.gone(bi);
            }
        }
        if parent != new_parent {
            let kind = |k| {
                if k == FileKind::Dir {
                    EventKind::DirMoved { parent: new_parent }
                } else {
                    EventKind::Moved { parent: new_parent }
                }
            };
            self.emit(a, kind(ka));
            if let Some((bi, kb)) = b.filter(|_| exchange) {
                self.emit(
                    bi,
                    if kb == FileKind::Dir { EventKind::DirMoved { parent } } else { EventKind::Moved { parent } },
                );
            }
        }
        Ok(())
    }

    fn undo_renames(&self, parent: Ino, name: &OsStr, new_parent: Ino, new_name: &OsStr, ta: &[Tier], done: Vec<Step>) {
        for Step::Renamed { t, exchange } in done.into_iter().rev() {
            let s = self.tiers.store(t);
            let (Ok(pa), Ok(pb)) = (self.tiers.dir(parent, t, false), self.tiers.dir(new_parent, t, false)) else {
                continue;
            };
            let r = if exchange {
                s.rename(&pa, name, &pb, new_name, RENAME_EXCHANGE)
            } else if ta.contains(&t) {
                s.rename(&pb, new_name, &pa, name, RENAME_NOREPLACE)
            } else {
                s.rename(&pa, name, &pb, new_name, RENAME_NOREPLACE)
            };
            if let Err(e) = r {
                tracing::error!(tier = %t, error = %e, "could not undo a partial rename");
            }
        }
    }
}

#[cfg(test)]
mod tests;
