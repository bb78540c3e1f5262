//! FUSE passthrough backing ids. The kernel allows one backing file per
//! inode at a time, so concurrent opens of an inode share one id; each
//! handle holds a strong reference, dropped at release.

use fuser::BackingId;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

type ByInode = HashMap<u64, Weak<BackingId>>;
type ByHandle = HashMap<u64, (u64, Arc<BackingId>)>;

/// See the module documentation.
#[derive(Default)]
pub struct Backings {
    inner: Mutex<(ByInode, ByHandle)>,
}

impl Backings {
    /// The backing id of `ino`, made with `make` if no handle holds one;
    /// handle `fh` keeps it alive.
    pub fn get(
        &self,
        ino: u64,
        fh: u64,
        make: impl FnOnce() -> std::io::Result<BackingId>,
    ) -> std::io::Result<Arc<BackingId>> {
        let mut g = self.inner.lock();
        let id = match g.0.get(&ino).and_then(Weak::upgrade) {
            Some(id) => id,
            None => {
                let id = Arc::new(make()?);
                g.0.insert(ino, Arc::downgrade(&id));
                id
            }
        };
        g.1.insert(fh, (ino, id.clone()));
        Ok(id)
    }

    /// Handle `fh` was released.
    pub fn put(&self, fh: u64) {
        let mut g = self.inner.lock();
        if let Some((ino, id)) = g.1.remove(&fh) {
            drop(id);
            if g.0.get(&ino).is_some_and(|w| w.strong_count() == 0) {
                g.0.remove(&ino);
            }
        }
    }
}
