//! The data path's regressions that need a file changed behind the
//! daemon's back or attributes compared across opens.

use crate::migrate::{Move, NoCrash, Outcome};
use crate::state::ns::{Ino, ROOT_INO};
use crate::store::mem::MemStore;
use crate::store::Store;
use crate::testutil::hdd_volume as volume;
use crate::tier::Tier;
use crate::vfs::{Ctx, Volume};
use std::ffi::OsStr;

const CTX: Ctx = Ctx { uid: 0, gid: 0, pid: 1 };

fn file(v: &Volume<MemStore>, name: &str, data: &[u8]) -> Ino {
    let (a, o) = v.create(&CTX, ROOT_INO, OsStr::new(name), 0o644, 0, libc::O_RDWR).unwrap();
    v.write(o.fh, 0, data).unwrap();
    v.release(o.fh).unwrap();
    a.ino
}

#[test]
fn a_failed_growing_write_does_not_cut_what_another_writer_added() {
    // The size tierfs last knew of an open file is not the file's when
    // something it does not see grew it meanwhile (the kernel writing
    // through a passthrough handle): a growing write that failed cut the
    // file back to that older size, and the other writer's acknowledged
    // bytes went with it.
    let (v, hdd) = volume();
    let f = file(&v, "f", b"");
    let o = v.open(f, libc::O_RDWR).unwrap();
    // Another writer, past tierfs: 8 KiB.
    let theirs = vec![9u8; 8192];
    {
        let root = hdd.root().unwrap();
        let b = hdd.open(&root, OsStr::new("f"), libc::O_RDWR, 0).unwrap();
        hdd.write_at(&b, &theirs, 0).unwrap();
    }
    hdd.fail_once("write", "", libc::EIO);
    let e = v.write(o.fh, 8192, b"mine").unwrap_err();
    assert!(e.is(libc::EIO), "{e}");
    v.release(o.fh).unwrap();
    let got = crate::migrate::tests::read_all(&v, f);
    assert!(got == theirs, "the other writer's 8192 bytes were cut: {} bytes left", got.len());
}

#[test]
fn the_ctime_of_a_cached_file_is_the_same_open_or_closed_and_does_not_move_when_the_copy_is_made() {
    // Its attributes come from the SSD copy; a writer opens the HDD
    // primary too, and while it was open the ctime reported was the
    // primary's: it flipped as writers opened and closed the file (and
    // backup tools that compare ctimes read the file again each time).
    let (v, _) = volume();
    let f = file(&v, "f", b"some data");
    let before = v.getattr(f).unwrap().ctime;
    assert!(matches!(v.migrate(f, Move::Copy, &NoCrash).unwrap(), Outcome::Done(_)));
    assert_eq!(v.record(f).unwrap().placement, crate::tier::Placement::Cached);
    let closed = v.getattr(f).unwrap();
    assert_eq!(closed.ctime, before, "the copy moved the ctime");
    let o = v.open(f, libc::O_RDWR).unwrap();
    assert_eq!(v.getattr(f).unwrap().ctime, closed.ctime, "a writer's open moved the ctime");
    v.write(o.fh, 0, b"SOME").unwrap();
    let written = v.getattr(f).unwrap();
    v.release(o.fh).unwrap();
    let after = v.getattr(f).unwrap();
    assert_eq!(
        (after.ctime, after.mtime, after.size),
        (written.ctime, written.mtime, written.size),
        "open and closed differ"
    );
    // And through the tiers themselves: the primary's ctime is another.
    let hdd = v.stat_on(ROOT_INO, OsStr::new("f"), Tier::Hdd).unwrap();
    let ssd = v.stat_on(ROOT_INO, OsStr::new("f"), Tier::Ssd).unwrap();
    assert_ne!(hdd.ctime, ssd.ctime, "the test needs copies whose ctimes differ");
}
