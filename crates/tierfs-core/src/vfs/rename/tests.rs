//! Renames racing the operations that find a file's backing copy by its
//! name: getattr, setattr of a closed file, readlink, the stored xattrs,
//! the first open and the lazy open of an open file's primary. Each
//! operation is held on the tiers right where it uses the name; meanwhile
//! another thread renames the file away and creates another file under the
//! name. What the held operation then does must reach its own file.

use crate::migrate::tests::read_all;
use crate::migrate::{Move, NoCrash, Outcome};
use crate::state::ns::{Ino, ROOT_INO};
use crate::store::mem::MemStore;
use crate::testutil::hold;
use crate::vfs::{Ctx, SetAttr, Volume};
use std::ffi::OsStr;
use std::sync::Arc;
use std::time::Duration;

const CTX: Ctx = Ctx { uid: 0, gid: 0, pid: 1 };

/// A volume whose new files go to the HDD, and its HDD store.
fn volume() -> (Arc<Volume<MemStore>>, MemStore) {
    let (v, hdd) = crate::testutil::hdd_volume();
    (Arc::new(v), hdd)
}

/// A regular file `name` holding `data`.
fn file(v: &Volume<MemStore>, name: &str, data: &[u8]) -> Ino {
    let (a, o) = v.create(&CTX, ROOT_INO, OsStr::new(name), 0o644, 0, libc::O_RDWR).unwrap();
    v.write(o.fh, 0, data).unwrap();
    v.release(o.fh).unwrap();
    a.ino
}

/// A symbolic link `name` to `data`.
fn symlink(v: &Volume<MemStore>, name: &str, data: &[u8]) -> Ino {
    let target = std::str::from_utf8(data).unwrap();
    v.symlink(&CTX, ROOT_INO, OsStr::new(name), OsStr::new(target)).unwrap().ino
}

/// A file `name` whose xattr `user.x` holds `data`.
fn tagged(v: &Volume<MemStore>, name: &str, data: &[u8]) -> Ino {
    let ino = file(v, name, b"");
    v.setxattr_stored(ino, OsStr::new("user.x"), data, 0).unwrap();
    ino
}

const OURS: &[u8] = b"AAAA";
const THEIRS: &[u8] = b"CCCCCCCC";

/// Makes `a` with `make`, runs `op` on it in a thread of its own, holds
/// that thread at the backing operation `gate` on the name "a", renames
/// "a" to "c" and makes another "a" (with [`THEIRS`]) from a second
/// thread, then lets the held operation go on. Returns the volume, what
/// `op` returned, the first file and the second.
fn race<T: Send + 'static>(
    make: fn(&Volume<MemStore>, &str, &[u8]) -> Ino,
    prepare: impl FnOnce(&Volume<MemStore>, Ino),
    gate: &'static str,
    op: impl FnOnce(&Volume<MemStore>, Ino) -> T + Send + 'static,
) -> (Arc<Volume<MemStore>>, T, Ino, Ino) {
    let (v, hdd) = volume();
    let a = make(&v, "a", OURS);
    prepare(&v, a);
    let (held, release) = hold(&hdd, gate, "a", "held");
    let v1 = v.clone();
    let t1 = std::thread::Builder::new().name("held".into()).spawn(move || op(&v1, a)).unwrap();
    held.recv_timeout(Duration::from_secs(5)).unwrap_or_else(|_| panic!("the operation never reached {gate} of \"a\""));
    let v2 = v.clone();
    let t2 = std::thread::spawn(move || {
        v2.rename(ROOT_INO, OsStr::new("a"), ROOT_INO, OsStr::new("c"), 0).unwrap();
        make(&v2, "a", THEIRS)
    });
    // Time for the rename and the create to run, if nothing holds them.
    std::thread::sleep(Duration::from_millis(300));
    release.send(()).unwrap();
    let r = t1.join().unwrap();
    let other = t2.join().unwrap();
    hdd.set_gate(None);
    assert_ne!(a, other);
    (v, r, a, other)
}

fn nothing(_: &Volume<MemStore>, _: Ino) {}

#[test]
fn a_getattr_racing_a_rename_reports_its_own_file() {
    let (_, attr, a, _) = race(file, nothing, "stat", |v, a| v.getattr(a).unwrap());
    assert_eq!((attr.ino, attr.size), (a, OURS.len() as u64), "the attributes of the file the name went to");
}

#[test]
fn a_truncate_racing_a_rename_cuts_its_own_file_not_the_one_now_under_the_name() {
    let (v, (), a, other) = race(file, nothing, "open", |v, a| {
        v.setattr(a, None, &SetAttr { size: Some(1), ..SetAttr::default() }).unwrap();
    });
    assert_eq!(read_all(&v, other), THEIRS, "another user's file was cut");
    assert_eq!(read_all(&v, a), &OURS[..1]);
}

#[test]
fn a_chmod_racing_a_rename_changes_its_own_file_not_the_one_now_under_the_name() {
    let (v, (), a, other) = race(file, nothing, "chmod", |v, a| {
        v.setattr(a, None, &SetAttr { mode: Some(0o600), ..SetAttr::default() }).unwrap();
    });
    assert_eq!(v.getattr(other).unwrap().perm, 0o644, "another user's file was chmod-ed");
    assert_eq!(v.getattr(a).unwrap().perm, 0o600);
}

#[test]
fn a_readlink_racing_a_rename_reads_its_own_link() {
    let (_, target, _, _) = race(symlink, nothing, "readlink", |v, a| v.readlink(a).unwrap());
    assert_eq!(target.as_encoded_bytes(), OURS);
}

#[test]
fn a_getxattr_racing_a_rename_reads_its_own_file() {
    let (_, value, _, _) =
        race(tagged, nothing, "getxattr", |v, a| v.getxattr_stored(a, OsStr::new("user.x")).unwrap());
    assert_eq!(value, OURS);
}

#[test]
fn a_setxattr_racing_a_rename_sets_its_own_file() {
    let (v, (), a, other) = race(tagged, nothing, "setxattr", |v, a| {
        v.setxattr_stored(a, OsStr::new("user.x"), b"mine", 0).unwrap();
    });
    assert_eq!(v.getxattr_stored(other, OsStr::new("user.x")).unwrap(), THEIRS, "another user's file was changed");
    assert_eq!(v.getxattr_stored(a, OsStr::new("user.x")).unwrap(), b"mine");
}

#[test]
fn an_open_racing_a_rename_opens_its_own_file() {
    let (v, data, _, other) = race(file, nothing, "open", |v, a| {
        let o = v.open(a, libc::O_RDWR).unwrap();
        let data = v.read(o.fh, 0, 64).unwrap();
        // Written through this handle: must land in its own file.
        v.write(o.fh, 0, b"Z").unwrap();
        v.release(o.fh).unwrap();
        data
    });
    assert_eq!(data, OURS);
    assert_eq!(read_all(&v, other), THEIRS, "written into another user's file");
}

#[test]
fn the_primary_of_an_open_cached_file_opened_late_is_its_own_file() {
    // A cached file read through its SSD copy opens its HDD primary only
    // when needed (here: the copy missed a change), by name, long after
    // the open.
    let keep = Arc::new(parking_lot::Mutex::new(None));
    let kept = keep.clone();
    let (v, attr, a, other) = race(
        file,
        move |v, a| {
            assert!(matches!(v.migrate(a, Move::Copy, &NoCrash).unwrap(), Outcome::Done(_)));
            let o = v.open(a, libc::O_RDONLY).unwrap();
            let oi = v.open_inode(a).unwrap();
            assert!(oi.io.read().primary_open().is_none(), "a reader of a cached file opens no primary");
            v.mark_copy_stale(&oi);
            *kept.lock() = Some(o.fh);
        },
        "open",
        |v, a| v.getattr(a).unwrap(),
    );
    assert_eq!(attr.size, OURS.len() as u64);
    let fh = keep.lock().take().unwrap();
    assert_eq!(v.read(fh, 0, 64).unwrap(), OURS, "the handle reads another user's file");
    v.release(fh).unwrap();
    assert_eq!(read_all(&v, other), THEIRS);
    let _ = a;
}

#[test]
fn an_operation_on_a_file_whose_record_is_gone_answers_estale() {
    // The kernel names the file by a number it still holds; ESTALE makes
    // it look the name up again (a new file may have it now), where
    // ENOENT failed the call.
    let (v, _) = volume();
    let f = file(&v, "f", OURS);
    let l = symlink(&v, "l", OURS);
    v.unlink(ROOT_INO, OsStr::new("f")).unwrap();
    v.unlink(ROOT_INO, OsStr::new("l")).unwrap();
    let stale = |r: crate::Result<()>, what: &str| {
        let e = r.expect_err(what);
        assert!(e.is(libc::ESTALE), "{what}: {e}");
    };
    stale(v.getattr(f).map(drop), "getattr");
    stale(v.setattr(f, None, &SetAttr { mode: Some(0o600), ..SetAttr::default() }).map(drop), "setattr");
    stale(v.open(f, libc::O_RDONLY).map(drop), "open");
    stale(v.readlink(l).map(drop), "readlink");
    stale(v.getxattr_stored(f, OsStr::new("user.x")).map(drop), "getxattr");
    stale(v.setxattr_stored(f, OsStr::new("user.x"), b"v", 0), "setxattr");
}
