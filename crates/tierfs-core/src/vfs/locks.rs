//! Striped locks that serialise changes to the entries of a directory:
//! namespace operations, reconciliation and migration switch-over take the
//! lock of every directory whose entries they change.

use crate::state::ns::Ino;
use parking_lot::{Mutex, MutexGuard};

const STRIPES: usize = 256;

/// See the module documentation.
pub(crate) struct DirLocks {
    stripes: Vec<Mutex<()>>,
}

/// Held locks; released on drop.
pub(crate) struct DirGuard<'a> {
    _g: Vec<MutexGuard<'a, ()>>,
}

impl DirLocks {
    pub(crate) fn new() -> Self {
        DirLocks { stripes: (0..STRIPES).map(|_| Mutex::new(())).collect() }
    }

    fn stripe(ino: Ino) -> usize {
        (ino.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % STRIPES
    }

    /// The stripes of `dirs`, each once, in the one order every caller
    /// takes them in, so that two callers never deadlock.
    fn ordered(dirs: &[Ino]) -> Vec<usize> {
        let mut idx: Vec<usize> = dirs.iter().map(|d| Self::stripe(*d)).collect();
        idx.sort_unstable();
        idx.dedup();
        idx
    }

    /// Locks the directories.
    pub(crate) fn lock(&self, dirs: &[Ino]) -> DirGuard<'_> {
        DirGuard { _g: Self::ordered(dirs).into_iter().map(|i| self.stripes[i].lock()).collect() }
    }

    /// Like [`DirLocks::lock`], giving up (and releasing what it took) if
    /// the locks are not all free within `wait`.
    pub(crate) fn try_lock_for(&self, dirs: &[Ino], wait: std::time::Duration) -> Option<DirGuard<'_>> {
        let deadline = std::time::Instant::now() + wait;
        let g: Option<Vec<_>> =
            Self::ordered(dirs).into_iter().map(|i| self.stripes[i].try_lock_until(deadline)).collect();
        Some(DirGuard { _g: g? })
    }

    /// [`DirLocks::lock`] without a bound (`None`), else
    /// [`DirLocks::try_lock_for`].
    pub(crate) fn lock_within(&self, dirs: &[Ino], wait: Option<std::time::Duration>) -> Option<DirGuard<'_>> {
        match wait {
            None => Some(self.lock(dirs)),
            Some(d) => self.try_lock_for(dirs, d),
        }
    }
}

/// Striped reader-writer locks on inodes: opening a file (which reads its
/// placement and name and opens the backing copy) holds one for reading; a
/// migration's switch-over and a rename of the file hold it for writing,
/// so no open ever sees a half-moved file, nor a name that is another
/// file's by the time it is used.
pub(crate) struct InodeLocks {
    stripes: Vec<parking_lot::RwLock<()>>,
}

impl InodeLocks {
    pub(crate) fn new() -> Self {
        InodeLocks { stripes: (0..STRIPES).map(|_| parking_lot::RwLock::new(())).collect() }
    }
    pub(crate) fn get(&self, ino: Ino) -> &parking_lot::RwLock<()> {
        &self.stripes[DirLocks::stripe(ino)]
    }

    /// The locks of `inos` for writing, each stripe once, in stripe order:
    /// a rename holds those of the files it renames and replaces, and two
    /// renames take theirs in the same order.
    pub(crate) fn write_all(&self, inos: &[Ino]) -> Vec<parking_lot::RwLockWriteGuard<'_, ()>> {
        DirLocks::ordered(inos).into_iter().map(|i| self.stripes[i].write()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_stripe_twice_does_not_deadlock() {
        let l = DirLocks::new();
        let _g = l.lock(&[5, 5, 5 + STRIPES as u64 * 7, 9]);
    }

    #[test]
    fn a_timed_lock_gives_up_and_takes_nothing() {
        let l = DirLocks::new();
        let held = l.lock(&[9]);
        let d = std::time::Duration::from_millis(20);
        assert!(l.try_lock_for(&[5, 9], d).is_none(), "9 is held");
        assert!(l.try_lock_for(&[5], d).is_some(), "5 was released when it gave up");
        drop(held);
        assert!(l.try_lock_for(&[5, 9], d).is_some());
    }
}
