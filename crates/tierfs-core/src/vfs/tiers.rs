//! The two tiers of a volume and the cache of open backing directories.
//!
//! A directory's backing handle on a tier is found by walking up the
//! namespace (back references) to the nearest cached ancestor and opening
//! the rest one name at a time, so no path is ever joined.

use crate::error::{err, Result};
use crate::state::ns::{Ino, Namespace, ROOT_INO};
use crate::store::{Stat, Store, Target};
use crate::tier::Tier;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::Arc;

/// Name reserved at the root of each tier for tierfs's own files.
pub const RESERVED: &str = ".tierfs";
/// Directory (under [`RESERVED`]) where migrations stage copies.
pub const STAGING: &str = "staging";

type DirCache<S> = HashMap<(Ino, Tier), Arc<<S as Store>::Dir>>;

thread_local! {
    /// True while this thread holds the shape of the tree (see
    /// [`Tiers::lock_shape`]).
    static SHAPE_HELD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The shape of the tree held still; released on drop.
pub(crate) struct ShapeGuard<'a> {
    _g: parking_lot::RwLockWriteGuard<'a, ()>,
}

impl Drop for ShapeGuard<'_> {
    fn drop(&mut self) {
        SHAPE_HELD.set(false);
    }
}

/// Both stores and the directory handle cache.
pub struct Tiers<S: Store> {
    stores: [S; 2],
    cache: Mutex<DirCache<S>>,
    /// The shape of the directory tree. Finding (or making) a directory's
    /// backing copy by walking the names from a cached ancestor holds it
    /// shared; renaming a directory holds it exclusively, so that no copy
    /// is made under a name the directory is leaving. Cached handles need
    /// no lock: a handle follows its directory through renames.
    shape: parking_lot::RwLock<()>,
    cache_cap: usize,
    ns: Namespace,
    /// The tier whose directory copies carry directory attributes.
    pub meta: Tier,
}

impl<S: Store> std::fmt::Debug for Tiers<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tiers(meta={})", self.meta)
    }
}

impl<S: Store> Tiers<S> {
    /// Two stores, SSD first.
    pub fn new(ssd: S, hdd: S, ns: Namespace, meta: Tier) -> Self {
        Tiers {
            stores: [ssd, hdd],
            cache: Mutex::new(HashMap::new()),
            shape: parking_lot::RwLock::new(()),
            cache_cap: 8192,
            ns,
            meta,
        }
    }

    /// The store of a tier.
    pub fn store(&self, t: Tier) -> &S {
        &self.stores[t.idx()]
    }

    /// Forgets cached handles of a directory (after it was removed).
    pub fn forget_dir(&self, ino: Ino) {
        let mut c = self.cache.lock();
        c.remove(&(ino, Tier::Ssd));
        c.remove(&(ino, Tier::Hdd));
    }

    /// Forgets every cached handle.
    pub fn forget_all(&self) {
        self.cache.lock().clear();
    }

    fn cached(&self, ino: Ino, t: Tier) -> Option<Arc<S::Dir>> {
        self.cache.lock().get(&(ino, t)).cloned()
    }

    fn remember(&self, ino: Ino, t: Tier, d: Arc<S::Dir>) {
        let mut c = self.cache.lock();
        if c.len() >= self.cache_cap {
            // Cheap bounded eviction: drop an arbitrary eighth.
            let drop_n = self.cache_cap / 8;
            let keys: Vec<_> = c.keys().take(drop_n).copied().collect();
            for k in keys {
                c.remove(&k);
            }
        }
        c.insert((ino, t), d);
    }

    /// The parent and name of a directory.
    pub fn parent_of(&self, dir: Ino) -> Result<(Ino, OsString)> {
        match self.ns.first_link(dir)? {
            Some(l) => Ok(l),
            None => err(libc::ENOENT),
        }
    }

    /// The backing handle of directory `dir` on tier `t`. With `create`,
    /// missing directories on the way are made, copying mode and owner from
    /// their copy on the other tier. Without it, ENOENT if absent.
    pub fn dir(&self, dir: Ino, t: Tier, create: bool) -> Result<Arc<S::Dir>> {
        if let Some(d) = self.cached(dir, t) {
            return Ok(d);
        }
        // The thread renaming a directory holds the shape already.
        let _shape = (!SHAPE_HELD.get()).then(|| self.shape.read());
        self.resolve(dir, t, create)
    }

    /// Holds the shape of the directory tree still while a directory is
    /// renamed (its backing copies and its name in the namespace). The
    /// holding thread may go on resolving directories.
    pub(crate) fn lock_shape(&self) -> ShapeGuard<'_> {
        let g = self.shape.write();
        SHAPE_HELD.set(true);
        ShapeGuard { _g: g }
    }

    /// [`Tiers::dir`] with the shape lock held.
    fn resolve(&self, dir: Ino, t: Tier, create: bool) -> Result<Arc<S::Dir>> {
        if let Some(d) = self.cached(dir, t) {
            return Ok(d);
        }
        // Walk up to a cached (or the root) ancestor.
        let mut chain: Vec<(Ino, OsString)> = Vec::new();
        let mut cur = dir;
        let mut base = loop {
            if let Some(d) = self.cached(cur, t) {
                break d;
            }
            if cur == ROOT_INO {
                let d = Arc::new(self.store(t).root()?);
                self.remember(ROOT_INO, t, d.clone());
                break d;
            }
            let (p, name) = self.parent_of(cur)?;
            chain.push((cur, name));
            cur = p;
            if chain.len() > 65536 {
                return err(libc::ELOOP);
            }
        };
        let mut parent_ino = cur;
        while let Some((ino, name)) = chain.pop() {
            let s = self.store(t);
            let d = match s.open_dir(&base, &name) {
                Ok(d) => d,
                Err(e) if create && e.raw_os_error() == Some(libc::ENOENT) => {
                    self.make_copy(parent_ino, &base, &name, t)?;
                    s.open_dir(&base, &name)?
                }
                Err(e) => return Err(e.into()),
            };
            let d = Arc::new(d);
            self.remember(ino, t, d.clone());
            base = d;
            parent_ino = ino;
        }
        Ok(base)
    }

    /// Creates the copy of directory `name` (child of `parent_ino`) on tier
    /// `t`, with the mode and owner of its copy on the other tier.
    fn make_copy(&self, parent_ino: Ino, base: &S::Dir, name: &std::ffi::OsStr, t: Tier) -> Result<()> {
        let other = t.other();
        let src: Option<Stat> = self
            .resolve(parent_ino, other, false)
            .ok()
            .and_then(|p| self.store(other).stat(Target::Entry(&p, name)).ok());
        let s = self.store(t);
        let mode = src.map(|st| st.mode & 0o7777).unwrap_or(0o755);
        match s.mkdir(base, name, mode) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        if let Some(st) = src {
            let target = Target::Entry(base, name);
            // Best effort: a non-root daemon cannot give files away.
            let _ = s.chown(target, Some(st.uid), Some(st.gid));
            s.chmod(target, st.mode & 0o7777)?;
        }
        Ok(())
    }

    /// Creates (if needed) and returns `.tierfs/staging` on a tier.
    pub fn staging(&self, t: Tier) -> Result<S::Dir> {
        self.reserved(t, STAGING)
    }

    /// Creates (if needed) and returns `.tierfs/NAME` on a tier.
    pub fn reserved(&self, t: Tier, name: &str) -> Result<S::Dir> {
        let s = self.store(t);
        let root = self.dir(ROOT_INO, t, false)?;
        // Durable at once: shadow files are found through it after a power cut.
        let r = crate::store::durable_dir(s, &root, RESERVED)?;
        Ok(crate::store::durable_dir(s, &r, name)?)
    }
}
