//! lookup, mknod, mkdir, symlink, link, unlink, rmdir and the creation of
//! new non-directories shared with create.

use super::{check_name, is_reserved, Attr, Ctx, InodeGuard, Volume};
use crate::error::{err, Error, Result};
use crate::event::EventKind;
use crate::state::ns::{Ino, InodeRecord};
use crate::store::{FileKind, Store, Target};
use crate::tier::{Placement, Tier};
use std::ffi::OsStr;
use std::io;

impl<S: Store> Volume<S> {
    /// Looks up `name` in `parent`.
    pub fn lookup(&self, parent: Ino, name: &OsStr) -> Result<Attr> {
        self.lookup_present(parent, name)?.ok_or_else(|| Error::errno(libc::ENOENT))
    }

    /// [`Volume::lookup`] with the absence of the name as `Ok(None)`: the
    /// namespace's answer, which needs no look at the tiers where the
    /// directory was reconciled before (every create of a new name asks
    /// it), and is given after checking them where it rests on what the
    /// backing directories showed just now (an adoption, or a copy that
    /// vanished), since a vanished tier shows nothing either. Every error
    /// is an error, never an absence: a state database that cannot be read
    /// is not a missing name. Review finding: with the absence an ENOENT,
    /// the FUSE adapter could not tell it from a failed read of the state
    /// database on a vanished SSD and answered that with a cached
    /// negative entry.
    pub fn lookup_present(&self, parent: Ino, name: &OsStr) -> Result<Option<Attr>> {
        check_name(name)?;
        if is_reserved(parent, name) {
            return Ok(None);
        }
        for attempt in 0..2 {
            // Read before the namespace is: a directory verified by then has
            // every name its reconciliation found committed, so a miss below
            // is an absence. Read after, a reconciliation could commit the
            // name and mark the directory between the two reads, and the
            // name not adopted yet was answered absent: a negative entry
            // the kernel then kept (regression: "a lookup racing the end of
            // an adoption answered an adopted name absent").
            let verified = self.is_verified(parent);
            let found = self.ns.lookup(parent, name)?;
            #[cfg(test)]
            if found.is_none() {
                crate::testutil::point("lookup missed");
            }
            match found {
                Some((ino, _)) => match self.getattr(ino) {
                    Ok(a) => return Ok(Some(a)),
                    // Removed (or renamed over) since it was found: look
                    // again.
                    Err(e) if e.is(libc::ESTALE) && attempt == 0 => continue,
                    // The backing copy went away behind our back: look again.
                    Err(e) if e.is(libc::ENOENT) && attempt == 0 => self.reconcile(parent, true)?,
                    Err(e) => return Err(e),
                },
                // Not in the database yet: the name may be waiting for its
                // adoption (up to it when the adopter has the directory).
                None if attempt == 0 && !verified => self.await_adopted(parent, name)?,
                None if attempt == 0 => return Ok(None),
                None => break,
            }
        }
        self.check_tiers()?;
        Ok(None)
    }

    fn parent_dir_record(&self, parent: Ino) -> Result<InodeRecord> {
        let r = self.record(parent)?;
        if r.kind != FileKind::Dir {
            return err(libc::ENOTDIR);
        }
        Ok(r)
    }

    /// Owner of a new object: the caller, and the caller's group unless the
    /// parent directory is set-group-ID (then the backing file system has
    /// already given it the parent's group).
    fn give_to_caller(&self, ctx: &Ctx, s: &S, pd: &S::Dir, name: &OsStr) -> io::Result<()> {
        if !self.cfg.can_chown || (ctx.uid == 0 && ctx.gid == 0) {
            return Ok(());
        }
        let setgid = s.stat(Target::This(pd))?.mode & libc::S_ISGID != 0;
        let gid = if setgid { None } else { Some(ctx.gid) };
        s.chown(Target::Entry(pd, name), Some(ctx.uid), gid)
    }

    /// Creates a non-directory with `make` on the tier chosen for new files
    /// (falling back to the HDD when the SSD is full) and records it.
    /// Returns with the new inode's lock held for reading: nothing can
    /// migrate the file before the caller has it open (a demotion in
    /// between would leave it writing to an unlinked copy).
    pub(crate) fn create_node<T>(
        &self,
        ctx: &Ctx,
        parent: Ino,
        name: &OsStr,
        kind: FileKind,
        id_bits: u32,
        make: impl Fn(&S, &S::Dir) -> io::Result<T>,
    ) -> Result<(Ino, Tier, T, InodeGuard<'_>)> {
        check_name(name)?;
        if is_reserved(parent, name) {
            return err(libc::EPERM);
        }
        self.reconcile(parent, false)?;
        let _g = self.locks.lock(&[parent]);
        self.parent_dir_record(parent)?;
        if self.ns.lookup(parent, name)?.is_some() {
            return err(libc::EEXIST);
        }
        let first = self.hooks().initial_tier(parent).unwrap_or(self.cfg.default_tier);
        let mut result = None;
        for t in [first, first.other()] {
            let pd = self.tiers.dir(parent, t, true)?;
            let s = self.tiers.store(t);
            // Made as the caller: ownership, the set-group-ID rules, quotas
            // and reserved blocks are the caller's.
            let as_caller = super::creds::AsCaller::new(ctx, true);
            let made = make(s, &pd);
            let switched = as_caller.active();
            if made.is_ok() && id_bits != 0 && may_restore(ctx, switched) {
                restore_id_bits(s, &pd, name, id_bits);
            }
            drop(as_caller);
            match made {
                Ok(x) => {
                    if let Err(e) = if switched { Ok(()) } else { self.give_to_caller(ctx, s, &pd, name) } {
                        let _ = s.unlink(&pd, name);
                        return Err(e.into());
                    }
                    result = Some((t, x));
                    break;
                }
                // No ENOSPC while the HDD has room.
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) && t == Tier::Ssd => continue,
                Err(e) => return Err(e.into()),
            }
        }
        let (t, x) = result.ok_or_else(|| Error::errno(libc::ENOSPC))?;
        let recorded = self.ns.alloc_ino().and_then(|ino| {
            let mut b = self.ns.batch();
            b.create(parent, name, ino, &InodeRecord::new(kind, Placement::On(t)));
            self.ns.commit(b, false).map(|()| ino)
        });
        let ino = recorded.inspect_err(|_| {
            // The state could not record it (a full or failing disk): the
            // made file goes again, or the next mount would adopt a name
            // whose creation failed.
            let r = self.tiers.dir(parent, t, false).and_then(|pd| Ok(self.tiers.store(t).unlink(&pd, name)?));
            if let Err(e) = r {
                tracing::warn!(tier = %t, name = ?name, error = %e, "a name the state could not record stays on the tier");
            }
        })?;
        // Taken before the directory's lock goes (the hierarchy's order).
        let il = self.ilocks.get(ino).read();
        // Under the directory's stripe, as every change of its time: a
        // migration puts back the time it found (`meta_dir_times`).
        self.touch_dir(parent, t);
        drop(_g);
        if kind == FileKind::File {
            self.hooks().created(ino, parent, t);
            self.emit(ino, EventKind::Create { placement: Placement::On(t), parent, size: 0 });
        }
        Ok((ino, t, x, il))
    }

    /// Creates a special file (fifo, socket, device) or an empty regular file.
    pub fn mknod(&self, ctx: &Ctx, parent: Ino, name: &OsStr, mode: u32, umask: u32, rdev: u64) -> Result<Attr> {
        let kind = FileKind::from_mode(mode).ok_or_else(|| Error::errno(libc::EINVAL))?;
        if kind == FileKind::Dir || kind == FileKind::Symlink {
            return err(libc::EINVAL);
        }
        let perm = mode & 0o7777 & !umask;
        let (ino, _, _, il) = self.create_node(ctx, parent, name, kind, perm & ID_BITS, |s, pd| {
            s.mknod(pd, name, kind.mode_bits() | perm, rdev)
        })?;
        drop(il);
        self.after_naming(parent, name, self.getattr(ino))
    }

    /// The answer of an operation that has committed `name` in `parent`.
    /// The kernel drops its copy of the directory's listing, and of what
    /// it knew of the name (its absence, from the lookup before a create),
    /// only when the operation succeeds: if it fails after all the kernel
    /// is told, or it would answer the name absent for the cache timeout.
    pub(crate) fn after_naming<T>(&self, parent: Ino, name: &OsStr, r: Result<T>) -> Result<T> {
        if r.is_err() {
            self.listing_changed(parent);
            self.entry_changed(parent, name);
        }
        r
    }

    /// Creates a symbolic link.
    pub fn symlink(&self, ctx: &Ctx, parent: Ino, name: &OsStr, target: &OsStr) -> Result<Attr> {
        if target.len() >= libc::PATH_MAX as usize {
            return err(libc::ENAMETOOLONG);
        }
        let (ino, _, _, il) =
            self.create_node(ctx, parent, name, FileKind::Symlink, 0, |s, pd| s.symlink(target, pd, name))?;
        drop(il);
        self.after_naming(parent, name, self.getattr(ino))
    }

    /// Creates a directory on the meta tier.
    pub fn mkdir(&self, ctx: &Ctx, parent: Ino, name: &OsStr, mode: u32, umask: u32) -> Result<Attr> {
        check_name(name)?;
        if is_reserved(parent, name) {
            return err(libc::EEXIST);
        }
        self.reconcile(parent, false)?;
        let _g = self.locks.lock(&[parent]);
        let mut prec = self.parent_dir_record(parent)?;
        if self.ns.lookup(parent, name)?.is_some() {
            return err(libc::EEXIST);
        }
        let meta = self.tiers.meta;
        let pd = self.meta_dir(parent)?;
        let s = self.tiers.store(meta);
        let as_caller = super::creds::AsCaller::new(ctx, true);
        let made = s.mkdir(&pd, name, mode & 0o7777 & !umask);
        let switched = as_caller.active();
        if made.is_ok() && may_restore(ctx, switched) {
            // A new directory inherits the set-group-ID bit of its parent.
            let inherited = s.stat(Target::This(&pd)).map_or(0, |st| st.mode & libc::S_ISGID);
            restore_id_bits(s, &pd, name, (mode & !umask & ID_BITS) | inherited);
        }
        drop(as_caller);
        made?;
        if let Err(e) = if switched { Ok(()) } else { self.give_to_caller(ctx, s, &pd, name) } {
            let _ = s.rmdir(&pd, name);
            return Err(e.into());
        }
        prec.subdirs += 1;
        let recorded = self.ns.alloc_ino().and_then(|ino| {
            let mut b = self.ns.batch();
            b.link(parent, name, ino, FileKind::Dir)
                .put_record(ino, &InodeRecord::new(FileKind::Dir, Placement::On(meta)))
                .put_record(parent, &prec)
                // Made empty here: the database has all its names from the start.
                .put_hdd_listed(ino);
            self.ns.commit(b, false).map(|()| ino)
        });
        // Not recorded: the made directory goes again (see `create_node`).
        let ino = recorded.inspect_err(|_| {
            let _ = s.rmdir(&pd, name);
        })?;
        self.mark_verified(ino);
        let r = self.getattr(ino);
        drop(_g);
        self.after_naming(parent, name, r)
    }

    /// Adds the name `new_name` in `new_parent` for `ino`, on every tier
    /// holding the file.
    pub fn link(&self, ino: Ino, new_parent: Ino, new_name: &OsStr) -> Result<Attr> {
        check_name(new_name)?;
        if is_reserved(new_parent, new_name) {
            return err(libc::EPERM);
        }
        self.reconcile(new_parent, false)?;
        if self.kernel_record(ino)?.kind == FileKind::Dir {
            return err(libc::EPERM);
        }
        let (p, n) = self.kernel_link(ino)?;
        let _g = self.locks.lock(&[p, new_parent]);
        // The file's tiers are read, and linked on, with its inode lock held:
        // a migration cannot move it in between.
        let il = self.ilocks.get(ino).read();
        if self.ns.lookup(p, &n)?.map(|x| x.0) != Some(ino) {
            // The name used as the source went meanwhile: try again.
            drop(il);
            drop(_g);
            return self.link(ino, new_parent, new_name);
        }
        let rec = self.kernel_record(ino)?;
        self.parent_dir_record(new_parent)?;
        if self.ns.lookup(new_parent, new_name)?.is_some() {
            return err(libc::EEXIST);
        }
        let mut done = Vec::new();
        let undo = |done: &[Tier]| {
            for &t in done {
                if let Ok(d) = self.tiers.dir(new_parent, t, false) {
                    let _ = self.tiers.store(t).unlink(&d, new_name);
                }
            }
        };
        for &t in rec.placement.tiers() {
            let r = (|| -> Result<()> {
                let src = self.tiers.dir(p, t, false)?;
                let dst = self.tiers.dir(new_parent, t, true)?;
                // The name is the file's and its tiers are held: a missing
                // source is the backing file system's doing (a warning, so
                // that such a failure can be told from the kernel's own
                // refusal).
                self.tiers.store(t).link(&src, &n, &dst, new_name).inspect_err(|e| {
                    if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESTALE)) {
                        tracing::warn!(ino, tier = %t, name = ?n, error = %e, "the backing file system could not link a name of the file");
                    }
                })?;
                Ok(())
            })();
            if let Err(e) = r {
                undo(&done);
                return Err(e);
            }
            done.push(t);
        }
        let mut b = self.ns.batch();
        b.link(new_parent, new_name, ino, rec.kind);
        // Not recorded: the new names go again (see `create_node`).
        self.ns.commit(b, false).inspect_err(|_| undo(&done))?;
        drop(il);
        self.touch_dir(new_parent, rec.placement.primary());
        drop(_g);
        self.after_naming(new_parent, new_name, self.getattr(ino))
    }

    /// Removes a non-directory name.
    pub fn unlink(&self, parent: Ino, name: &OsStr) -> Result<()> {
        check_name(name)?;
        let (ino, kind) = self.find(parent, name)?;
        let _g = self.locks.lock(&[parent]);
        if self.ns.lookup(parent, name)? != Some((ino, kind)) {
            return err(libc::ENOENT);
        }
        if kind == FileKind::Dir {
            return err(libc::EISDIR);
        }
        // Held until the names are committed: two unlinks of two names of
        // one file in different directories (different stripes) each
        // counted the other's name and neither removed the record, which
        // then stayed for ever with its SSD charge and statistics (review
        // finding). Link takes it too, so a link and an unlink count in turn.
        let il = self.ilocks.get(ino).write();
        let rec = self.record(ino)?;
        let primary = rec.placement.primary();
        for &t in rec.placement.tiers() {
            let d = match self.tiers.dir(parent, t, false) {
                Ok(d) => d,
                Err(e) if e.is(libc::ENOENT) && t != primary => continue,
                Err(e) => return Err(e),
            };
            match self.tiers.store(t).unlink(&d, name) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) && t != primary => {}
                Err(e) => return Err(e.into()),
            }
        }
        let last = self.ns.link_count(ino)? <= 1;
        #[cfg(test)]
        crate::testutil::point("unlink counted");
        let mut b = self.ns.batch();
        b.unlink(parent, name, ino);
        if last {
            b.del_record(ino);
        }
        self.ns.commit(b, false)?;
        drop(il);
        self.touch_dir(parent, primary);
        if last {
            self.gone(ino);
        }
        Ok(())
    }

    /// A file's last name is gone: it leaves the SSD account at once (if it
    /// is still open, its last close settles it again) and the statistics.
    pub(crate) fn gone(&self, ino: Ino) {
        self.forget_file(ino);
        self.emit(ino, EventKind::Remove);
    }

    /// What [`Volume::gone`] does but the event: the file's chunks (at
    /// once if it is not open), its SSD charge and its stale-copy mark go.
    pub(crate) fn forget_file(&self, ino: Ino) {
        self.chunks_gone(ino);
        self.hooks().off_ssd(ino);
        self.copy_dropped(ino);
    }

    /// Removes an empty directory from every tier.
    pub fn rmdir(&self, parent: Ino, name: &OsStr) -> Result<()> {
        check_name(name)?;
        if name == "." {
            return err(libc::EINVAL);
        }
        let (ino, kind) = self.find(parent, name)?;
        if kind != FileKind::Dir {
            return err(libc::ENOTDIR);
        }
        self.reconcile(ino, false)?;
        let _g = self.locks.lock(&[parent, ino]);
        if self.ns.has_children(ino)? {
            return err(libc::ENOTEMPTY);
        }
        let meta = self.tiers.meta;
        // The other copy first, so a failure leaves the directory whole.
        for t in [meta.other(), meta] {
            let d = match self.tiers.dir(parent, t, false) {
                Ok(d) => d,
                Err(e) if e.is(libc::ENOENT) && t != meta => continue,
                Err(e) => return Err(e),
            };
            match self.tiers.store(t).rmdir(&d, name) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) && t != meta => {}
                Err(e) => return Err(e.into()),
            }
        }
        let mut prec = self.parent_dir_record(parent)?;
        prec.subdirs = prec.subdirs.saturating_sub(1);
        let mut b = self.ns.batch();
        b.unlink(parent, name, ino).del_record(ino).put_record(parent, &prec);
        self.ns.commit(b, false)?;
        self.forget_dir(ino);
        Ok(())
    }

    /// The entry `name` of `parent`, reconciling the directory first if a
    /// miss could be a backing entry not seen yet.
    pub(crate) fn find(&self, parent: Ino, name: &OsStr) -> Result<(Ino, FileKind)> {
        if is_reserved(parent, name) {
            return err(libc::ENOENT);
        }
        // Read first, as in `lookup_present`: verified after the miss, the
        // reconciliation may have committed the name in between.
        let verified = self.is_verified(parent);
        if let Some(x) = self.ns.lookup(parent, name)? {
            return Ok(x);
        }
        #[cfg(test)]
        crate::testutil::point("find missed");
        if !verified {
            self.reconcile(parent, false)?;
            if let Some(x) = self.ns.lookup(parent, name)? {
                return Ok(x);
            }
        }
        err(libc::ENOENT)
    }
}

/// The set-user-ID and set-group-ID bits.
pub(super) const ID_BITS: u32 = libc::S_ISUID | libc::S_ISGID;

/// True if a chmod now would be judged as the caller's: the creation ran as
/// the caller, or the caller is root, or the daemon is not root (then it is
/// the only user). Otherwise (the caller's groups unreadable) the daemon
/// could keep a bit the kernel would take from the caller.
fn may_restore(ctx: &Ctx, switched: bool) -> bool {
    // SAFETY: geteuid has no preconditions.
    switched || ctx.uid == 0 || unsafe { libc::geteuid() } != 0
}

/// Gives back the set-ID bits `want` that a backing file system dropped
/// from a new object (GlusterFS drops both at creation), adding only them
/// to the mode the object has, by a chmod made, like the creation, as the
/// caller: the kernel then applies its own rules for who may keep them, as
/// a local file system would have. The caller holds the parent's lock, so
/// the name is the new object. A failure leaves the bits off, as a stricter
/// file system would.
pub(super) fn restore_id_bits<S: Store>(s: &S, pd: &S::Dir, name: &OsStr, want: u32) {
    let want = want & ID_BITS;
    if want == 0 {
        return;
    }
    match s.stat(Target::Entry(pd, name)) {
        Ok(st) if st.mode & want != want => {
            if let Err(e) = s.chmod(Target::Entry(pd, name), (st.mode & 0o7777) | want) {
                tracing::debug!(error = %e, "could not restore set-ID bits the backing file system dropped");
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;
