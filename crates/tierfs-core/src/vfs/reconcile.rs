//! Reconciliation: making the namespace in the state database agree with
//! what the backing directories hold.
//!
//! Each directory is reconciled once per mount, before its first readdir or
//! the first lookup that misses. Backing entries the database does not know
//! are adopted where they are (a new inode number, placement = the tier
//! they are on); entries whose backing copies vanished are dropped. The
//! same name on both tiers, where it is not a directory on both and not a
//! cached copy, is a conflict: the copy with the newest mtime keeps the
//! name, the other is renamed aside to `NAME.tierfs-conflict-TIER[-N]` on
//! its tier and adopted under that name. Nothing is deleted.

use super::{is_reserved, Volume};
use crate::error::{err, Result};
use crate::event::EventKind;
use crate::state::ns::{Batch, Ino, InodeRecord};
use crate::store::{FileKind, Stat, Store, Target, RENAME_NOREPLACE};
use crate::tier::{Placement, Tier};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::Arc;

/// A name found on both tiers when adopting existing data.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Conflict {
    /// Directory holding the name.
    pub dir: Ino,
    /// The name, kept by the newer copy.
    pub name: String,
    /// Tier whose copy kept the name.
    pub kept: Tier,
    /// Tier whose copy was renamed aside.
    pub moved: Tier,
    /// The name it was given.
    pub new_name: String,
}

/// How many namespace writes one part of a reconciliation commits (about
/// 1 000 adopted names).
const RECONCILE_BATCH: usize = 4096;

/// What listing a backing directory tells of one entry.
pub(crate) enum Listed {
    /// Its kind, from the listing (`d_type`).
    Kind(FileKind),
    /// Its stat, where the listing gave no kind.
    Stat(Stat),
}

struct Listing<S: Store> {
    dirs: [Option<Arc<S::Dir>>; 2],
    /// name -> per-tier stat of the entry there
    names: BTreeMap<OsString, [Option<Stat>; 2]>,
    /// Names whose stats hold only the kind the backing directory listing
    /// reported (see [`Volume::full_stats`]).
    partial: HashSet<OsString>,
    /// The names the database knew before this reconciliation.
    known: BTreeMap<OsString, (Ino, FileKind)>,
    /// Whether the known hard-linked files of this directory were added to
    /// the adopted links (see [`Volume::known_link`]).
    links_learned: bool,
    /// Files that lost a name in the current part and kept their record:
    /// checked again after the part is committed (see
    /// [`Volume::commit_adopted`]).
    kept: Vec<Ino>,
}

/// The inode number the first name adopted of a hard-linked backing file
/// (tier, device, inode) took, which the file's other names join.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LinkClaim {
    ino: Ino,
    /// The directory whose reconciliation claimed it.
    by: Ino,
    /// Not committed yet (for the moment between the claim and its commit,
    /// made at once): the claim holds while that reconciliation runs,
    /// though the database has no record yet. A second reconciliation that
    /// took it for a file gone since made a second inode (regression test
    /// `two_names_of_a_file_adopted_in_two_directories_at_once_are_one_file`).
    pending: bool,
}

/// Marks a directory's reconciliation as running while it lives.
struct Running<'a, S: Store>(&'a Volume<S>, Ino);

impl<S: Store> Drop for Running<'_, S> {
    fn drop(&mut self) {
        self.0.reconciling.lock().remove(&self.1);
    }
}

impl<S: Store> Volume<S> {
    /// The backing copy of directory `dir` on tier `t`, if it has one.
    pub(crate) fn backing_dir(&self, dir: Ino, t: Tier) -> Result<Option<Arc<S::Dir>>> {
        match self.tiers.dir(dir, t, false) {
            Ok(d) => Ok(Some(d)),
            Err(e) if e.is(libc::ENOENT) || e.is(libc::ENOTDIR) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// True if the quiet HDD mode takes the names of `dir` on the HDD
    /// from the state database: it applies to the directory, the directory
    /// was reconciled with its HDD copy listed in some mount, directories
    /// live on the SSD (under an `hdd-only` root they live on the HDD
    /// alone, and a listing without them would lose them), and the mount
    /// does not follow an unclean shutdown (the database may have lost a
    /// create it had not flushed, whose file is on the HDD).
    pub(crate) fn hdd_names_known(&self, dir: Ino) -> Result<bool> {
        Ok(self.quiet_listing(dir) && self.ns.hdd_listed(dir)?)
    }

    /// [`Volume::hdd_names_known`] but for whether `dir` was listed on the
    /// HDD before, for a caller that has read that already.
    fn quiet_listing(&self, dir: Ino) -> bool {
        self.cfg.meta_tier == Tier::Ssd
            && !self.after_crash.load(std::sync::atomic::Ordering::Relaxed)
            && self.hooks().quiet_dir(dir)
    }

    /// Recovery found an unclean shutdown (see [`Volume::hdd_names_known`]).
    pub(crate) fn set_after_crash(&self, unclean: bool) {
        self.after_crash.store(unclean, std::sync::atomic::Ordering::Relaxed);
    }

    /// The names of `dir` on the HDD as the database has them (files whose
    /// placement uses the HDD), if the SSD's listing agrees with it: no
    /// name there that the database places on the HDD alone. Otherwise
    /// `None`, and the HDD copy is listed.
    fn hdd_names_from_db(&self, dir: Ino, on_ssd: &[(OsString, Listed)]) -> Result<Option<Vec<(OsString, FileKind)>>> {
        let known = self.ns.children(dir)?;
        let by_name: std::collections::HashMap<&OsStr, &crate::state::ns::Dentry> =
            known.iter().map(|d| (d.name.as_os_str(), d)).collect();
        for (name, _) in on_ssd {
            let Some(d) = by_name.get(name.as_os_str()) else { continue };
            if d.kind == FileKind::Dir {
                continue;
            }
            if !self.ns.record(d.ino)?.is_some_and(|r| r.placement.uses_ssd()) {
                return Ok(None);
            }
        }
        let mut names = Vec::new();
        for d in known {
            if d.kind == FileKind::Dir {
                continue;
            }
            if self.ns.record(d.ino)?.is_some_and(|r| r.placement.tiers().contains(&Tier::Hdd)) {
                names.push((d.name, d.kind));
            }
        }
        Ok(Some(names))
    }

    /// Lists `dir` on both tiers, without tierfs's own name, calling `f`
    /// with each entry: its kind as the listing reports it, or its stat
    /// where the listing does not say (an entry gone meanwhile is left
    /// out). With `hdd_known` (see [`Volume::hdd_names_known`]) the HDD's
    /// names come from the database unless the SSD's listing disagrees
    /// with it. Returns the backing directories listed.
    pub(crate) fn list_backing(
        &self,
        dir: Ino,
        hdd_known: bool,
        mut f: impl FnMut(Tier, OsString, Listed),
    ) -> Result<[Option<Arc<S::Dir>>; 2]> {
        let mut dirs = [None, None];
        let mut on_ssd = Vec::new();
        for t in Tier::ALL {
            if t == Tier::Hdd && hdd_known {
                if let Some(names) = self.hdd_names_from_db(dir, &on_ssd)? {
                    for (name, listed) in on_ssd.drain(..) {
                        f(Tier::Ssd, name, listed);
                    }
                    for (name, kind) in names {
                        f(Tier::Hdd, name, Listed::Kind(kind));
                    }
                    return Ok(dirs);
                }
            }
            for (name, listed) in on_ssd.drain(..) {
                f(Tier::Ssd, name, listed);
            }
            let Some(d) = self.backing_dir(dir, t)? else { continue };
            let s = self.tiers.store(t);
            for e in s.list(&d)? {
                if is_reserved(dir, &e.name) {
                    continue;
                }
                let listed = match e.kind {
                    Some(kind) => Listed::Kind(kind),
                    None => match s.stat(Target::Entry(&d, &e.name)) {
                        Ok(st) => Listed::Stat(st),
                        Err(err) if err.raw_os_error() == Some(libc::ENOENT) => continue,
                        Err(err) => return Err(err.into()),
                    },
                };
                // The SSD's names are held back until it is known whether
                // the HDD's come from the database (which they must agree
                // with).
                if t == Tier::Ssd && hdd_known {
                    on_ssd.push((e.name, listed));
                } else {
                    f(t, e.name, listed);
                }
            }
            dirs[t.idx()] = Some(d);
        }
        for (name, listed) in on_ssd {
            f(Tier::Ssd, name, listed);
        }
        Ok(dirs)
    }

    /// Lists `dir` on both tiers. Names whose kind the listing reports are
    /// not stat'ed yet: a remount checks a known tree by kinds alone, and
    /// stats only where it must choose between copies or adopt, when it
    /// gets to the name (see [`Volume::full_stats`]); so the first part of
    /// a big directory is committed without waiting for the stats of all.
    fn list_tiers(&self, dir: Ino, known: BTreeMap<OsString, (Ino, FileKind)>, hdd_known: bool) -> Result<Listing<S>> {
        let mut names: BTreeMap<OsString, [Option<Stat>; 2]> = BTreeMap::new();
        let mut partial = HashSet::new();
        let dirs = self.list_backing(dir, hdd_known, |t, name, listed| match listed {
            Listed::Kind(kind) => {
                let st = Stat { mode: kind.mode_bits(), ..Stat::default() };
                names.entry(name.clone()).or_default()[t.idx()] = Some(st);
                partial.insert(name);
            }
            Listed::Stat(st) => names.entry(name).or_default()[t.idx()] = Some(st),
        })?;
        Ok(Listing { dirs, names, partial, known, links_learned: false, kept: Vec::new() })
    }

    /// The whole stats of `name` on each tier, stat'ing it now if the
    /// listing only gave its kind (gone since: `None`).
    fn full_stats(&self, l: &mut Listing<S>, name: &OsStr) -> Result<[Option<Stat>; 2]> {
        if l.partial.remove(name) {
            for t in Tier::ALL {
                let (Some(d), Some(p)) = (l.dirs[t.idx()].clone(), l.names.get_mut(name)) else { continue };
                if p[t.idx()].is_none() {
                    continue;
                }
                p[t.idx()] = match self.tiers.store(t).stat(Target::Entry(&d, name)) {
                    Ok(st) => Some(st),
                    Err(err) if err.raw_os_error() == Some(libc::ENOENT) => None,
                    Err(err) => return Err(err.into()),
                };
            }
        }
        Ok(l.names.get(name).copied().unwrap_or_default())
    }

    /// Reconciles directory `dir` (see the module documentation). Without
    /// `force` it does nothing if already done during this mount. A job
    /// for `dir` queued for the adopter is done here instead; a running
    /// one is waited for (see `vfs::adopt`). The caller holds no lock.
    pub(crate) fn reconcile(&self, dir: Ino, force: bool) -> Result<()> {
        if !force && self.is_verified(dir) {
            return Ok(());
        }
        self.adopter.claim(dir);
        let r = self.reconcile_now(dir, force);
        if force {
            // A forced reconciliation is of a directory the kernel may hold
            // the listing of (only reconciled directories' listings are
            // kept), and it changes that listing without a request, maybe
            // in part before it fails.
            self.listing_changed(dir);
        }
        r
    }

    /// [`Volume::reconcile`] in the thread that has the job.
    pub(crate) fn reconcile_now(&self, dir: Ino, force: bool) -> Result<()> {
        let _doing = crate::quiet::doing("reconcile", dir);
        if !force && self.is_verified(dir) {
            return Ok(());
        }
        let _g = self.locks.lock(&[dir]);
        if !force && self.is_verified(dir) {
            return Ok(());
        }
        self.reconciling.lock().insert(dir);
        let _running = Running(self, dir);
        self.check_tiers()?;
        let mut drec = self.record(dir)?;
        if drec.kind != FileKind::Dir {
            return err(libc::ENOTDIR);
        }
        let known: BTreeMap<OsString, (Ino, FileKind)> =
            self.ns.children(dir)?.into_iter().map(|d| (d.name, (d.ino, d.kind))).collect();
        let listed_before = self.ns.hdd_listed(dir)?;
        // A forced reconciliation is asked for because a backing copy did
        // not match the database: the HDD itself is listed.
        let hdd_known = !force && listed_before && self.quiet_listing(dir);
        let mut l = self.list_tiers(dir, known, hdd_known)?;
        let mut all: BTreeSet<OsString> = l.names.keys().cloned().collect();
        all.extend(l.known.keys().cloned());
        let mut b = self.ns.batch();
        let mut events = Vec::new();
        let mut subdirs = 0u32;
        let mut done = 0usize;
        for name in all {
            let k = l.known.get(&name).copied();
            let mut pres = l.names.get(&name).copied().unwrap_or_default();
            if pres.iter().all(Option::is_some) {
                // Choosing between two copies: by the stats (adopting a
                // name, `adopt_name` stats it itself).
                pres = self.full_stats(&mut l, &name)?;
            }
            let is_dir = if let Some((ino, kind)) = k {
                self.check_known(dir, &name, ino, kind, &pres, &mut l, &mut b, &mut events)?
            } else {
                self.adopt_name(dir, &name, &mut l, &mut b, &mut events)?
            };
            if is_dir {
                subdirs += 1;
            }
            // A big directory is committed in parts, between names (each
            // name's writes are whole in one part), so that adopting it
            // takes memory for one part, not for the whole directory.
            done += 1;
            // The adopter stops soon after the unmount asks, with what it
            // has gathered committed (a part of slow stats can take long).
            let stop = done.is_multiple_of(64) && self.adopter.should_stop(dir);
            if b.len() >= RECONCILE_BATCH || stop {
                self.commit_adopted(std::mem::take(&mut b), std::mem::take(&mut events), std::mem::take(&mut l.kept))?;
                self.adopter.progress(dir, &name);
                if stop {
                    return super::adopt::stopped();
                }
            }
        }
        if drec.subdirs != subdirs {
            drec.subdirs = subdirs;
            b.put_record(dir, &drec);
        }
        if !listed_before {
            b.put_hdd_listed(dir);
        }
        self.commit_adopted(b, events, std::mem::take(&mut l.kept))?;
        self.reconciled(dir);
        Ok(())
    }

    /// Commits one part of a reconciliation, then tells the SSD account and
    /// the engine what it adopted, re-placed or forgot.
    ///
    /// A file that lost a name here and kept its record (`kept`) may have
    /// lost its other names meanwhile: an unlink elsewhere counts them
    /// under the file's inode lock, this under the directory's stripe
    /// only, so each could count the other's name (review finding). Each
    /// is counted again under its inode lock, and a record with no name
    /// left goes.
    fn commit_adopted(&self, b: Batch, events: Vec<(Ino, EventKind)>, kept: Vec<Ino>) -> Result<()> {
        // A tier that vanished since the reconciliation began lists
        // nothing and stats nothing: its names would be dropped or left
        // out as gone (review finding; it was checked at the start only).
        self.check_tiers()?;
        self.ns.commit(b, false)?;
        let hooks = self.hooks();
        for (ino, ev) in &events {
            match ev {
                // As an unlink of the last name: the chunks of a split file
                // and the mark of a stale copy went with it (before, only
                // the SSD charge did, and a split file stayed split).
                EventKind::Remove => self.forget_file(*ino),
                EventKind::Create { placement, .. } | EventKind::Placed { placement } if placement.uses_ssd() => {
                    let on_ssd =
                        self.ns.first_link(*ino).ok().flatten().and_then(|(p, n)| self.stat_on(p, &n, Tier::Ssd).ok());
                    if let Some(st) = on_ssd {
                        hooks.settle_ssd(*ino, 0, Some(st.blocks * 512));
                    }
                }
                EventKind::Placed { .. } => hooks.off_ssd(*ino),
                _ => {}
            }
        }
        for (ino, ev) in events {
            self.emit(ino, ev);
        }
        // Each is checked whatever happens to the others: the part is
        // committed, and no later reconciliation looks at these names again.
        let mut first_error = None;
        for ino in kept {
            let il = self.ilocks.get(ino).write();
            let gone = (|| -> Result<bool> {
                if self.ns.link_count(ino)? > 0 || self.ns.record(ino)?.is_none() {
                    return Ok(false);
                }
                let mut b = self.ns.batch();
                b.del_record(ino);
                self.ns.commit(b, false)?;
                Ok(true)
            })();
            drop(il);
            match gone {
                Ok(true) => self.gone(ino),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(ino, error = %e, "could not check whether a file kept a name");
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// A name the database knows. Returns whether it ends up a directory.
    #[allow(clippy::too_many_arguments)]
    fn check_known(
        &self,
        dir: Ino,
        name: &OsStr,
        ino: Ino,
        kind: FileKind,
        pres: &[Option<Stat>; 2],
        l: &mut Listing<S>,
        b: &mut Batch,
        events: &mut Vec<(Ino, EventKind)>,
    ) -> Result<bool> {
        let rec = self.ns.record(ino)?;
        let kind_at = |t: Tier| pres[t.idx()].and_then(|s| s.kind());
        let forget = |l: &mut Listing<S>, b: &mut Batch, events: &mut Vec<(Ino, EventKind)>| -> Result<()> {
            b.unlink(dir, name, ino);
            // The names left once the batch is applied: two names of one
            // file that both vanished are forgotten in one batch, and each
            // counted the other's (review finding: the record stayed).
            let last = kind == FileKind::Dir || self.ns.link_count(ino)? as i64 + b.names_delta(ino) <= 0;
            #[cfg(test)]
            crate::testutil::point("reconcile counted");
            if last {
                b.del_record(ino);
                if kind == FileKind::File {
                    events.push((ino, EventKind::Remove));
                }
            } else {
                l.kept.push(ino);
            }
            Ok(())
        };
        let Some(mut rec) = rec else {
            forget(l, b, events)?;
            return self.adopt_name(dir, name, l, b, events);
        };
        if kind == FileKind::Dir {
            let dir_tiers: Vec<Tier> = Tier::ALL.into_iter().filter(|t| kind_at(*t) == Some(FileKind::Dir)).collect();
            if dir_tiers.is_empty() {
                tracing::warn!(dir, name = ?name, "directory vanished from the backing stores");
                forget(l, b, events)?;
                self.forget_dir(ino);
                return self.adopt_name(dir, name, l, b, events);
            }
            // A non-directory of the same name on the other tier.
            for t in Tier::ALL {
                if kind_at(t).is_some_and(|k| k != FileKind::Dir) {
                    self.set_aside(dir, name, t, t.other(), l, b, events)?;
                }
            }
            self.tiers.dir(ino, self.tiers.meta, true)?;
            return Ok(true);
        }
        let primary = rec.placement.primary();
        let here = |t: Tier| kind_at(t).is_some_and(|k| k != FileKind::Dir);
        let new_placement = match rec.placement {
            Placement::Cached if here(Tier::Hdd) && here(Tier::Ssd) => Placement::Cached,
            Placement::Cached if here(Tier::Hdd) => Placement::On(Tier::Hdd),
            Placement::Cached if here(Tier::Ssd) => Placement::On(Tier::Ssd),
            Placement::On(t) if here(t) => Placement::On(t),
            Placement::On(t) if here(t.other()) => Placement::On(t.other()),
            _ => {
                tracing::warn!(dir, name = ?name, "file vanished from the backing stores");
                forget(l, b, events)?;
                return self.adopt_name(dir, name, l, b, events);
            }
        };
        if new_placement != rec.placement {
            tracing::warn!(
                ino,
                from = rec.placement.label(),
                to = new_placement.label(),
                "placement corrected from the backing stores"
            );
            rec.placement = new_placement;
            b.put_record(ino, &rec);
            events.push((ino, EventKind::Placed { placement: new_placement }));
        }
        // A copy on a tier the placement does not name is a stray: a
        // conflict if it is a file, a left-over container if an empty dir.
        for t in Tier::ALL {
            if new_placement.tiers().contains(&t) || kind_at(t).is_none() {
                continue;
            }
            if kind_at(t) == Some(FileKind::Dir) {
                let d = l.dirs[t.idx()].clone();
                if let Some(d) = d {
                    if self.tiers.store(t).rmdir(&d, name).is_ok() {
                        continue;
                    }
                }
            }
            let _ = primary;
            // A split file keeps its name whatever the times say (its
            // home's mtime may have been set back): its chunks, the only
            // copy of what was written to them, are reachable only under
            // its inode (review finding: a stray that looked newer took the
            // name and the chunks were lost).
            let kept_newer = self.is_split(ino) || newer(pres, new_placement.primary(), t);
            if kept_newer {
                self.set_aside(dir, name, t, new_placement.primary(), l, b, events)?;
            } else {
                // The stray is newer: it takes the name, ours goes aside.
                for &ours in new_placement.tiers() {
                    self.set_aside(dir, name, ours, t, l, b, events)?;
                }
                // Counted as any forgotten name: the file may have names
                // elsewhere, or have been joined again by the set-aside.
                forget(l, b, events)?;
                self.adopt_one(dir, name, t, pres[t.idx()].as_ref(), l, b, events)?;
                return Ok(kind_at(t) == Some(FileKind::Dir));
            }
        }
        Ok(false)
    }

    /// A name the database does not know. Returns whether it is a directory.
    fn adopt_name(
        &self,
        dir: Ino,
        name: &OsStr,
        l: &mut Listing<S>,
        b: &mut Batch,
        events: &mut Vec<(Ino, EventKind)>,
    ) -> Result<bool> {
        let pres = &self.full_stats(l, name)?;
        let kinds = [pres[0].and_then(|s| s.kind()), pres[1].and_then(|s| s.kind())];
        match kinds {
            [None, None] => Ok(false),
            [Some(FileKind::Dir), Some(FileKind::Dir)] | [Some(_), None] | [None, Some(_)] => {
                let t = if kinds[0].is_some() { Tier::Ssd } else { Tier::Hdd };
                self.adopt_one(dir, name, t, pres[t.idx()].as_ref(), l, b, events)?;
                Ok(kinds[t.idx()] == Some(FileKind::Dir))
            }
            [Some(_), Some(_)] => {
                let keep = if newer(pres, Tier::Ssd, Tier::Hdd) { Tier::Ssd } else { Tier::Hdd };
                self.set_aside(dir, name, keep.other(), keep, l, b, events)?;
                self.adopt_one(dir, name, keep, pres[keep.idx()].as_ref(), l, b, events)?;
                Ok(kinds[keep.idx()] == Some(FileKind::Dir))
            }
        }
    }

    /// Records one backing object found on tier `t` under `name`.
    #[allow(clippy::too_many_arguments)]
    fn adopt_one(
        &self,
        dir: Ino,
        name: &OsStr,
        t: Tier,
        st: Option<&Stat>,
        l: &mut Listing<S>,
        b: &mut Batch,
        events: &mut Vec<(Ino, EventKind)>,
    ) -> Result<()> {
        let Some(st) = st else { return Ok(()) };
        let Some(kind) = st.kind() else { return Ok(()) };
        // Hard links among adopted files share one inode number: the first
        // name adopted claims one, the others join it (see `LinkClaim`).
        let key = (t, st.dev, st.ino);
        let hard = kind != FileKind::Dir && st.nlink > 1;
        // A claim on a file whose names were all unlinked since (those the
        // namespace knew; more may wait in directories not adopted yet):
        // the file is gone, and a name joined to it would have no record,
        // ENOENT for every lookup of it for the rest of the mount (review
        // finding). Its backing file is adopted anew.
        let mut gone = None;
        let existing = if hard {
            let seen = self.adopted_links.lock().get(&key).copied();
            let seen = match seen {
                Some(c) => Some(c),
                None => self.known_link(l, t, key, dir)?,
            };
            match seen {
                Some(c) if self.claim_holds(c, b)? => Some(c.ino),
                Some(c) => {
                    gone = Some(c.ino);
                    None
                }
                None => None,
            }
        } else {
            None
        };
        let placement = if kind == FileKind::Dir { Placement::On(self.tiers.meta) } else { Placement::On(t) };
        let ino = match existing {
            Some(i) => {
                b.link(dir, name, i, kind);
                return Ok(());
            }
            // The number a preview showed for the name, if one did.
            None => match self.adopter.reserved(dir, name) {
                Some(i) => i,
                None => self.ns.alloc_ino()?,
            },
        };
        if hard {
            let mut m = self.adopted_links.lock();
            match m.get(&key).copied() {
                // Claimed by another reconciliation meanwhile: joined.
                Some(c) if Some(c.ino) != gone => {
                    drop(m);
                    b.link(dir, name, c.ino, kind);
                    return Ok(());
                }
                _ => {
                    m.insert(key, LinkClaim { ino, by: dir, pending: true });
                }
            }
            drop(m);
            // Committed at once, as a part of its own: other directories'
            // reconciliations join the file's other names to it from now
            // on, and a name joined to an inode with no record is ENOENT.
            let mut nb = self.ns.batch();
            nb.link(dir, name, ino, kind).put_record(ino, &InodeRecord::new(kind, placement));
            let created = match kind {
                FileKind::File => vec![(ino, EventKind::Create { placement, parent: dir, size: st.size })],
                _ => Vec::new(),
            };
            self.commit_adopted(nb, created, Vec::new())?;
            if let Some(c) = self.adopted_links.lock().get_mut(&key) {
                if c.ino == ino {
                    c.pending = false;
                }
            }
            return Ok(());
        }
        b.link(dir, name, ino, kind).put_record(ino, &InodeRecord::new(kind, placement));
        if kind == FileKind::File {
            events.push((ino, EventKind::Create { placement, parent: dir, size: st.size }));
        }
        if kind == FileKind::Dir {
            // Keep the invariant: every directory has a meta-tier copy.
            // The batch is not committed yet, so make it by hand.
            let meta = self.tiers.meta;
            if t != meta {
                let pd = self.tiers.dir(dir, meta, true)?;
                let s = self.tiers.store(meta);
                match s.mkdir(&pd, name, st.mode & 0o7777) {
                    Ok(()) => {
                        let _ = s.chown(Target::Entry(&pd, name), Some(st.uid), Some(st.gid));
                        let _ = s.chmod(Target::Entry(&pd, name), st.mode & 0o7777);
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }

    /// The inode of a file this directory already knows that is the same
    /// backing file (tier, device, inode) as one being adopted: another
    /// name of it committed by an earlier part of a reconciliation that a
    /// crash cut short. The known hard-linked files of the directory are
    /// stat'ed once, on the first adoption of a hard-linked file.
    fn known_link(&self, l: &mut Listing<S>, t: Tier, key: (Tier, u64, u64), dir: Ino) -> Result<Option<LinkClaim>> {
        if !l.links_learned {
            l.links_learned = true;
            let files: Vec<(OsString, Ino)> =
                l.known.iter().filter(|(_, (_, k))| *k != FileKind::Dir).map(|(n, (i, _))| (n.clone(), *i)).collect();
            for (name, ino) in files {
                if let Some(st) = self.full_stats(l, &name)?[t.idx()] {
                    if st.nlink > 1 {
                        let known = LinkClaim { ino, by: dir, pending: false };
                        self.adopted_links.lock().entry((t, st.dev, st.ino)).or_insert(known);
                    }
                }
            }
        }
        Ok(self.adopted_links.lock().get(&key).copied())
    }

    /// Whether the file a claim names lives: the batch being made writes
    /// its record, or its claimer's reconciliation runs and has not
    /// committed it yet, or the database has its record.
    fn claim_holds(&self, c: LinkClaim, b: &Batch) -> Result<bool> {
        if let Some(put) = b.record_op(c.ino) {
            return Ok(put);
        }
        if c.pending && self.reconciling.lock().contains(&c.by) {
            return Ok(true);
        }
        Ok(self.ns.record(c.ino)?.is_some())
    }

    /// Renames the copy of `name` on tier `t` aside, adopts it under the
    /// new name and reports the conflict.
    #[allow(clippy::too_many_arguments)]
    fn set_aside(
        &self,
        dir: Ino,
        name: &OsStr,
        t: Tier,
        kept: Tier,
        l: &mut Listing<S>,
        b: &mut Batch,
        events: &mut Vec<(Ino, EventKind)>,
    ) -> Result<()> {
        let Some(d) = l.dirs[t.idx()].clone() else { return Ok(()) };
        let st = self.full_stats(l, name)?[t.idx()];
        let s = self.tiers.store(t);
        let mut n = 1;
        let new_name = loop {
            let cand = aside_name(name, t, n);
            let taken = l.names.contains_key(&cand) || self.ns.lookup(dir, &cand)?.is_some();
            if !taken {
                match s.rename(&d, name, &d, &cand, RENAME_NOREPLACE) {
                    Ok(()) => break cand,
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            n += 1;
        };
        tracing::warn!(
            dir,
            name = %name.to_string_lossy(),
            kept = %kept,
            moved = %t,
            new_name = %new_name.to_string_lossy(),
            "the same name was on both tiers: the newer copy keeps it, the other was renamed aside"
        );
        self.conflicts.lock().push(Conflict {
            dir,
            name: name.to_string_lossy().into_owned(),
            kept,
            moved: t,
            new_name: new_name.to_string_lossy().into_owned(),
        });
        if let Some(p) = l.names.get_mut(name) {
            p[t.idx()] = None;
        }
        let mut pres = [None, None];
        pres[t.idx()] = st;
        l.names.insert(new_name.clone(), pres);
        self.adopt_one(dir, &new_name, t, st.as_ref(), l, b, events)
    }
}

/// The `n`-th name (from 1) the copy of `name` on tier `t` is set aside
/// under: `NAME.tierfs-conflict-TIER[-N]`, cut to fit the longest name.
pub(crate) fn aside_name(name: &OsStr, t: Tier, n: u32) -> OsString {
    let mut cand = name.as_bytes().to_vec();
    let suffix = if n == 1 { format!(".tierfs-conflict-{t}") } else { format!(".tierfs-conflict-{t}-{n}") };
    cand.truncate(super::NAME_MAX - suffix.len());
    cand.extend_from_slice(suffix.as_bytes());
    OsString::from_vec(cand)
}

impl<S: Store> Volume<S> {
    /// Renames `from` (in `src`, a directory of tier `t`) to the first
    /// [`aside_name`] of `name` that is free in directory `dir` (in the
    /// namespace and on both tiers), durably, on tier `t`: the next
    /// reconciliation of `dir` adopts it as a file of its own. What recovery
    /// finds under a name and cannot place is set aside so, never deleted.
    /// Returns the new name.
    pub(crate) fn put_aside(&self, t: Tier, src: &S::Dir, from: &OsStr, dir: Ino, name: &OsStr) -> Result<OsString> {
        let s = self.tiers.store(t);
        let d = self.tiers.dir(dir, t, true)?;
        let other = self.tiers.dir(dir, t.other(), false).ok();
        let mut n = 1;
        loop {
            let cand = aside_name(name, t, n);
            n += 1;
            let elsewhere =
                other.as_ref().is_some_and(|o| self.tiers.store(t.other()).stat(Target::Entry(o, &cand)).is_ok());
            if elsewhere || self.ns.lookup(dir, &cand)?.is_some() {
                continue;
            }
            match s.rename(src, from, &d, &cand, RENAME_NOREPLACE) {
                Ok(()) => {
                    s.sync_dir(&d)?;
                    s.sync_dir(src)?;
                    return Ok(cand);
                }
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// True if the copy on `a` is at least as new as the copy on `b`.
fn newer(pres: &[Option<Stat>; 2], a: Tier, b: Tier) -> bool {
    let m = |t: Tier| pres[t.idx()].map(|s| s.mtime).unwrap_or_default();
    m(a) >= m(b)
}
