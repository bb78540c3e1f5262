//! Names committed by an operation that then fails.

use crate::state::ns::{Ino, ROOT_INO};
use crate::vfs::{Ctx, KernelCache};
use parking_lot::Mutex;
use std::ffi::{OsStr, OsString};
use std::sync::Arc;

const CTX: Ctx = Ctx { uid: 0, gid: 0, pid: 1 };

/// What the volume told the kernel to drop.
#[derive(Default)]
struct Told {
    entries: Mutex<Vec<(Ino, OsString)>>,
}

impl KernelCache for Told {
    fn attrs_changed(&self, _ino: Ino) {}
    fn listing_changed(&self, _dir: Ino) {}
    fn entry_changed(&self, parent: Ino, name: &OsStr) {
        self.entries.lock().push((parent, name.to_os_string()));
    }
}

#[test]
fn a_name_committed_by_a_create_whose_answer_failed_is_not_left_absent_in_the_kernel() {
    // The kernel looked the name up before the create (absent: a negative
    // entry it keeps for the cache timeout). The create committed the name
    // and then its final getattr failed: the kernel, told of the failure
    // only, kept the name absent for a minute while it existed.
    let (v, hdd) = crate::testutil::hdd_volume();
    let told = Arc::new(Told::default());
    v.set_kernel_cache(told.clone());
    hdd.fail_once("fstat", "", libc::EIO);
    let r = v.create(&CTX, ROOT_INO, OsStr::new("f"), 0o644, 0, libc::O_RDWR);
    assert!(r.is_err(), "the create's answer was to fail");
    assert!(v.lookup(ROOT_INO, OsStr::new("f")).is_ok(), "the name was committed");
    assert_eq!(*told.entries.lock(), vec![(ROOT_INO, OsString::from("f"))], "the kernel keeps the name absent");
    // The same for a symbolic link, whose answer is a stat by name.
    hdd.fail_once("stat", "l", libc::EIO);
    assert!(v.symlink(&CTX, ROOT_INO, OsStr::new("l"), OsStr::new("t")).is_err());
    assert!(told.entries.lock().contains(&(ROOT_INO, OsString::from("l"))));
}
