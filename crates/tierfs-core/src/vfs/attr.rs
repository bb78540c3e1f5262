//! getattr, setattr, readlink, statfs, access.

use super::{Attr, Ctx, SetAttr, VolStats, Volume};
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
                (self.io_stat(ino, &io)?, io.placement)
            };
            let rec = self.ns.record(ino)?.unwrap_or_else(|| InodeRecord::new(FileKind::File, placement));
            return Ok(self.make_attr(ino, &rec, &st));
        }
        let rec = self.record(ino)?;
        if rec.kind == FileKind::Dir {
            let d = self.meta_dir(ino)?;
            let st = self.tiers.store(self.tiers.meta).stat(Target::This(&d))?;
            return Ok(self.make_attr(ino, &rec, &st));
        }
        let (p, n) = self.link_of(ino)?;
        // A cached file is answered from its SSD copy (kept in step with the
        // primary), so that reading it never costs an HDD access.
        let st = match rec.placement {
            Placement::Cached => self.stat_on(p, &n, Tier::Ssd).or_else(|_| self.stat_on(p, &n, Tier::Hdd))?,
            pl => self.stat_on(p, &n, pl.primary())?,
        };
        Ok(self.make_attr(ino, &rec, &st))
    }

    /// Changes attributes. Size changes go through the open file when there
    /// is one, so open handles and the SSD accounting stay right.
    pub fn setattr(&self, ino: Ino, fh: Option<u64>, sa: &SetAttr) -> Result<Attr> {
        let rec = match self.ns.record(ino)? {
            Some(r) => r,
            None if self.open_inode(ino).is_some() => {
                InodeRecord::new(FileKind::File, crate::tier::Placement::On(Tier::Hdd))
            }
            None => return err(libc::ENOENT),
        };
        if rec.kind == FileKind::Dir {
            if sa.size.is_some() {
                return err(libc::EISDIR);
            }
            self.set_dir_attrs(ino, sa)?;
            return self.getattr(ino);
        }
        if let Some(size) = sa.size {
            if rec.kind != FileKind::File {
                return err(libc::EINVAL);
            }
            self.truncate(ino, fh, size)?;
        }
        if sa.uid.is_some() || sa.gid.is_some() || sa.mode.is_some() || sa.atime.is_some() || sa.mtime.is_some() {
            let atime = sa.atime.unwrap_or(SetTime::Omit);
            let mtime = sa.mtime.unwrap_or(SetTime::Omit);
            if let Some(oi) = self.open_inode(ino) {
                let io = oi.io.read();
                let primary = self.primary_of(ino, &io)?;
                let copies = [Some((io.placement.primary(), primary)), io.copy.clone().map(|c| (Tier::Ssd, c))];
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
                            s.file_utimens(&f, atime, mtime)?;
                        }
                        Ok(())
                    })();
                    match r {
                        Err(e) if i == 0 => return Err(e.into()),
                        Err(_) => self.hooks().copy_failed(ino),
                        Ok(()) => {}
                    }
                }
            } else {
                let (p, n) = self.link_of(ino)?;
                // The primary first; a cached copy follows so that reads of
                // its attributes stay right.
                for (i, &t) in rec.placement.tiers().iter().enumerate() {
                    let r = (|| -> Result<()> {
                        let d = self.tiers.dir(p, t, false)?;
                        let s = self.tiers.store(t);
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
                            s.utimens(target, atime, mtime)?;
                        }
                        Ok(())
                    })();
                    match r {
                        Err(e) if i == 0 => return Err(e),
                        Err(_) => self.hooks().copy_failed(ino),
                        Ok(()) => {}
                    }
                }
            }
            // A migration copying the file must see this (the ctime alone
            // is not checked when the file only grew).
            self.note_change(ino);
        }
        self.getattr(ino)
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
        let rec = self.record(ino)?;
        if rec.kind != FileKind::Symlink {
            return err(libc::EINVAL);
        }
        let (p, n) = self.link_of(ino)?;
        let t = rec.placement.primary();
        let d = self.tiers.dir(p, t, false)?;
        Ok(self.tiers.store(t).readlink(&d, &n)?)
    }

    /// Capacity of both tiers together.
    pub fn statfs(&self) -> Result<VolStats> {
        let a = self.tiers.store(Tier::Ssd).statfs()?;
        let b = self.tiers.store(Tier::Hdd).statfs()?;
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

    /// Sets the size of a file, through its open state if it has one.
    pub(crate) fn truncate(&self, ino: Ino, fh: Option<u64>, size: u64) -> Result<()> {
        let oi = match fh.and_then(|f| self.handle(f).ok()) {
            Some(h) => Some(h.oi.clone()),
            None => self.open_inode(ino),
        };
        let hooks = self.hooks();
        match oi {
            Some(oi) => {
                let io = oi.io.read();
                let old = oi.size.load(std::sync::atomic::Ordering::Acquire);
                let uses_ssd = io.placement.uses_ssd();
                if uses_ssd && size > old && !hooks.reserve_ssd(ino, size - old) {
                    return err(libc::ENOSPC);
                }
                let primary = self.primary_of(ino, &io)?;
                self.tiers.store(io.placement.primary()).set_len(&primary, size)?;
                if let Some(c) = &io.copy {
                    if self.tiers.store(Tier::Ssd).set_len(c, size).is_err() {
                        hooks.copy_failed(ino);
                    }
                }
                oi.size.store(size, std::sync::atomic::Ordering::Release);
                self.note_change(ino);
                if uses_ssd && size < old {
                    hooks.release_ssd(old - size);
                }
            }
            None => {
                let rec = self.record(ino)?;
                let (p, n) = self.link_of(ino)?;
                let mut old = None;
                for &t in rec.placement.tiers() {
                    let d = self.tiers.dir(p, t, false)?;
                    let s = self.tiers.store(t);
                    let f = s.open(&d, &n, libc::O_WRONLY, 0)?;
                    let cur = s.fstat(&f)?.size;
                    if t == Tier::Ssd && size > cur && !hooks.reserve_ssd(ino, size - cur) {
                        return err(libc::ENOSPC);
                    }
                    s.set_len(&f, size)?;
                    self.note_change(ino);
                    if t == Tier::Ssd && size < cur {
                        hooks.release_ssd(cur - size);
                    }
                    old.get_or_insert(cur);
                }
            }
        }
        self.emit(ino, EventKind::Resize { size });
        Ok(())
    }
}
