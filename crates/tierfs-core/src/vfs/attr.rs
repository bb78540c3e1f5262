//! getattr, setattr, readlink, statfs, access.

use super::{Attr, Ctx, OpenInode, SetAttr, VolStats, Volume};
use crate::error::{err, Result};
use crate::event::EventKind;
use crate::state::ns::{Ino, InodeRecord};
use crate::store::{FileKind, SetTime, Store, Target};
use crate::tier::{Placement, Tier};
use std::ffi::OsString;

impl<S: Store> Volume<S> {
    /// Attributes of an inode. An open file is answered from its open
    /// backing descriptor, so it works after the last name is gone.
    pub fn getattr(&self, ino: Ino) -> Result<Attr> {
        if let Some(oi) = self.open_inode(ino) {
            let (st, placement) = {
                let io = oi.io.read();
                (self.io_stat(&oi, &io)?, io.placement)
            };
            let rec = self.ns.record(ino)?.unwrap_or_else(|| InodeRecord::new(FileKind::File, placement));
            let names = self.ns.link_count(ino)?;
            return Ok(self.make_attr(ino, &rec, &st, names));
        }
        let rec = self.kernel_record(ino)?;
        if rec.kind == FileKind::Dir {
            let d = self.meta_dir(ino)?;
            let st = self.tiers.store(self.tiers.meta).stat(Target::This(&d))?;
            return Ok(self.make_attr(ino, &rec, &st, 0));
        }
        // A migration switches the file's tier, and a rename its names,
        // holding this lock: the record, the name and the copy it names
        // are read together.
        let _il = self.ilocks.get(ino).read();
        let rec = self.kernel_record(ino)?;
        let names = self.ns.links(ino)?;
        let Some((p, n)) = names.first().cloned() else { return err(libc::ESTALE) };
        // A cached file is answered from its SSD copy (kept in step with the
        // primary), so that reading it never costs an HDD access.
        let st = match rec.placement {
            Placement::Cached if !self.copy_is_stale(ino) => {
                self.stat_on(p, &n, Tier::Ssd).or_else(|_| self.stat_on(p, &n, Tier::Hdd))?
            }
            // Kept under the quiet mode: `ls -l` of a directory on the HDD
            // does not wake it.
            Placement::On(Tier::Hdd) => {
                self.kept_hdd(ino, p, |k| k.stat, |k, st| k.stat = Some(*st), || self.stat_on(p, &n, Tier::Hdd))?
            }
            pl => self.stat_on(p, &n, pl.primary())?,
        };
        Ok(self.make_attr(ino, &rec, &st, names.len() as u64))
    }

    /// Changes attributes. A change and the switch-over of a migration
    /// exclude each other (the inode lock), so no change lands on a copy
    /// that is being replaced; an open file is changed through its open
    /// descriptors, in order with its writes.
    pub fn setattr(&self, ino: Ino, fh: Option<u64>, sa: &SetAttr) -> Result<Attr> {
        let rec = match self.ns.record(ino)? {
            Some(r) => r,
            None if self.open_inode(ino).is_some() || fh.is_some() => {
                InodeRecord::new(FileKind::File, crate::tier::Placement::On(Tier::Hdd))
            }
            None => return err(libc::ESTALE),
        };
        if rec.kind == FileKind::Dir {
            if sa.size.is_some() {
                return err(libc::EISDIR);
            }
            self.set_dir_attrs(ino, sa)?;
            return self.getattr(ino);
        }
        if sa.size.is_some() && rec.kind != FileKind::File {
            return err(libc::EINVAL);
        }
        let lost_copy = {
            let _il = self.ilocks.get(ino).write();
            let oi = match fh.and_then(|f| self.handle(f).ok()) {
                Some(h) => Some(h.oi.clone()),
                None => self.open_inode(ino),
            };
            match oi {
                Some(oi) => self.set_open_attrs(&oi, sa)?,
                None => self.set_closed_attrs(ino, sa)?,
            }
        };
        if lost_copy {
            self.drop_stale_copy(ino);
        }
        if let Some(size) = sa.size {
            self.emit(ino, EventKind::Resize { size });
        }
        self.getattr(ino)
    }

    /// setattr of an open file, through its descriptors. Returns true if the
    /// cached copy missed the change.
    fn set_open_attrs(&self, oi: &OpenInode<S>, sa: &SetAttr) -> Result<bool> {
        let ino = oi.ino;
        if let Some(size) = sa.size {
            // The inode lock (held) keeps the chunk set still.
            if oi.split.load(std::sync::atomic::Ordering::Acquire) {
                self.split_set_len(oi, size)?;
                return self.set_open_attrs(oi, &SetAttr { size: None, ..*sa });
            }
        }
        let io = oi.io.read();
        let _order = oi.order.lock();
        let primary = self.primary_of(ino, &io)?;
        let copy = self.live_copy(oi, &io).cloned();
        let mut lost_copy = false;
        if let Some(size) = sa.size {
            self.tiers.store(io.placement.primary()).set_len(&primary, size)?;
            if let Some(c) = &copy {
                if self.tiers.store(Tier::Ssd).set_len(c, size).is_err() {
                    lost_copy = true;
                }
            }
            oi.size.store(size, std::sync::atomic::Ordering::Release);
            self.note_change(ino);
        }
        if has_attrs(sa) {
            let copies = [Some((io.placement.primary(), primary)), copy.map(|c| (Tier::Ssd, c))];
            for (i, (t, f)) in copies.into_iter().flatten().enumerate() {
                let s = self.tiers.store(t);
                let r = (|| -> std::io::Result<()> {
                    if sa.uid.is_some() || sa.gid.is_some() {
                        s.file_chown(&f, sa.uid, sa.gid)?;
                    }
                    if let Some(m) = sa.mode {
                        s.file_chmod(&f, m & 0o7777)?;
                    }
                    if sa.atime.is_some() || sa.mtime.is_some() {
                        s.file_utimens(&f, sa.atime.unwrap_or(SetTime::Omit), sa.mtime.unwrap_or(SetTime::Omit))?;
                    }
                    Ok(())
                })();
                match r {
                    Err(e) if i == 0 => return Err(e.into()),
                    Err(_) => lost_copy = true,
                    Ok(()) => {}
                }
            }
            // A migration copying the file must see this (the ctime alone
            // is not checked when the file only grew).
            self.note_change(ino);
        }
        if lost_copy {
            self.mark_copy_stale(oi);
        }
        if let Some(b) = self.ssd_bytes(oi, &io) {
            self.hooks().settle_ssd(ino, 0, Some(b));
        }
        Ok(lost_copy)
    }

    /// setattr of a file nobody has open (the caller holds its inode lock
    /// for writing, so nobody can open, migrate or rename it meanwhile): on
    /// every copy, the primary first. Returns true if the cached copy
    /// missed the change.
    fn set_closed_attrs(&self, ino: Ino, sa: &SetAttr) -> Result<bool> {
        let rec = self.kernel_record(ino)?;
        let (p, n) = self.kernel_link(ino)?;
        let stale = self.copy_is_stale(ino);
        let mut lost_copy = false;
        for (i, &t) in rec.placement.tiers().iter().enumerate() {
            if i > 0 && stale {
                break;
            }
            let r = (|| -> Result<()> {
                let d = self.tiers.dir(p, t, false)?;
                let s = self.tiers.store(t);
                // A split file's two copies are cut by the extent code.
                let split_done = match sa.size {
                    Some(size) if t == Tier::Hdd => self.split_truncate_closed(ino, size)?,
                    _ => false,
                };
                if let Some(size) = sa.size.filter(|_| !split_done) {
                    let f = s.open(&d, &n, libc::O_WRONLY, 0)?;
                    s.set_len(&f, size)?;
                    if t == Tier::Ssd {
                        self.hooks().settle_ssd(ino, 0, Some(s.fstat(&f)?.blocks * 512));
                    }
                }
                let target = Target::Entry(&*d, &n);
                if sa.uid.is_some() || sa.gid.is_some() {
                    s.chown(target, sa.uid, sa.gid)?;
                }
                if let Some(m) = sa.mode {
                    if rec.kind != FileKind::Symlink {
                        s.chmod(target, m & 0o7777)?;
                    }
                }
                if sa.atime.is_some() || sa.mtime.is_some() {
                    s.utimens(target, sa.atime.unwrap_or(SetTime::Omit), sa.mtime.unwrap_or(SetTime::Omit))?;
                }
                Ok(())
            })();
            match r {
                Err(e) if i == 0 => return Err(e),
                Err(_) => lost_copy = true,
                Ok(()) => {}
            }
        }
        if sa.size.is_some() || has_attrs(sa) {
            self.note_change(ino);
        }
        if lost_copy {
            self.stale_copies.lock().insert(ino);
        }
        Ok(lost_copy)
    }

    /// Clears set-user-ID (and set-group-ID when group-executable) bits, as a
    /// local file system does when an unprivileged user writes or truncates.
    pub fn kill_privs(&self, ino: Ino) -> Result<()> {
        let a = self.getattr(ino)?;
        let mut mode = a.perm as u32;
        mode &= !libc::S_ISUID;
        if mode & libc::S_IXGRP != 0 {
            mode &= !libc::S_ISGID;
        }
        if mode != a.perm as u32 {
            self.setattr(ino, None, &SetAttr { mode: Some(mode), ..SetAttr::default() })?;
        }
        Ok(())
    }

    /// Applies attribute changes to every copy of a directory, meta copy first.
    fn set_dir_attrs(&self, ino: Ino, sa: &SetAttr) -> Result<()> {
        let meta = self.tiers.meta;
        // Under the directory's stripe, as every change of its times: a
        // migration that adds or removes a backing name in it puts back
        // the mtime it read before, and would undo a change made between.
        let _g = self.locks.lock(&[ino]);
        for t in [meta, meta.other()] {
            let d = match self.tiers.dir(ino, t, t == meta) {
                Ok(d) => d,
                Err(e) if e.is(libc::ENOENT) && t != meta => continue,
                Err(e) => return Err(e),
            };
            let s = self.tiers.store(t);
            let target = Target::This(&*d);
            if sa.uid.is_some() || sa.gid.is_some() {
                s.chown(target, sa.uid, sa.gid)?;
            }
            if let Some(m) = sa.mode {
                s.chmod(target, m & 0o7777)?;
            }
            if t == meta && (sa.atime.is_some() || sa.mtime.is_some()) {
                s.utimens(target, sa.atime.unwrap_or(SetTime::Omit), sa.mtime.unwrap_or(SetTime::Omit))?;
            }
        }
        Ok(())
    }

    /// Reads a symbolic link.
    pub fn readlink(&self, ino: Ino) -> Result<OsString> {
        let rec = self.kernel_record(ino)?;
        if rec.kind != FileKind::Symlink {
            return err(libc::EINVAL);
        }
        // The name is read and used holding this lock (see `getattr`).
        let _il = self.ilocks.get(ino).read();
        let rec = self.kernel_record(ino)?;
        let (p, n) = self.kernel_link(ino)?;
        let t = rec.placement.primary();
        let d = self.tiers.dir(p, t, false)?;
        Ok(self.tiers.store(t).readlink(&d, &n)?)
    }

    /// Capacity of both tiers together. While the HDD is held asleep its
    /// part is its last answer (the counters of a local file system are in
    /// memory, but a tier on a network or FUSE file system asks its server).
    pub fn statfs(&self) -> Result<VolStats> {
        let a = self.tiers.store(Tier::Ssd).statfs()?;
        let kept = if self.hooks().hdd_asleep() { *self.hdd_statfs.lock() } else { None };
        let b = match kept {
            Some(b) => b,
            None => {
                let b = self.tiers.store(Tier::Hdd).statfs()?;
                *self.hdd_statfs.lock() = Some(b);
                b
            }
        };
        const BS: u64 = 4096;
        Ok(VolStats {
            bsize: BS as u32,
            blocks: (a.total + b.total) / BS,
            bfree: (a.free + b.free) / BS,
            bavail: (a.avail + b.avail) / BS,
            files: a.files.saturating_add(b.files),
            ffree: a.ffree.saturating_add(b.ffree),
            namelen: a.namelen.min(b.namelen).min(super::NAME_MAX as u32),
        })
    }

    /// access(2) by mode bits. With `default_permissions` (always set by
    /// tierfs) the kernel checks permissions itself and never asks.
    pub fn access(&self, ctx: &Ctx, ino: Ino, mask: i32) -> Result<()> {
        let a = self.getattr(ino)?;
        if mask == libc::F_OK || ctx.uid == 0 {
            if ctx.uid == 0 && mask & libc::X_OK != 0 && a.kind != FileKind::Dir && a.perm & 0o111 == 0 {
                return err(libc::EACCES);
            }
            return Ok(());
        }
        let bits = if ctx.uid == a.uid {
            (a.perm >> 6) & 7
        } else if ctx.gid == a.gid {
            (a.perm >> 3) & 7
        } else {
            a.perm & 7
        } as i32;
        if mask & bits == mask {
            Ok(())
        } else {
            err(libc::EACCES)
        }
    }
}

/// True if setattr changes owner, mode or times.
fn has_attrs(sa: &SetAttr) -> bool {
    sa.uid.is_some() || sa.gid.is_some() || sa.mode.is_some() || sa.atime.is_some() || sa.mtime.is_some()
}
