//! The kernel's caches of names, attributes and listings stay true: tierfs
//! lets the kernel keep names and attributes for `--cache-timeout` (60 s
//! by default) and directory listings until they change, and tells it to
//! drop what a migration, a reconciliation or a moved directory changes;
//! changes through the mount, by any process or handle, show at once.

use crate::harness::*;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn sh(script: &str) {
    let o = Command::new("sh").arg("-c").arg(script).output().unwrap();
    assert!(o.status.success(), "{script}: {}", String::from_utf8_lossy(&o.stderr));
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

/// A file with 1 MiB allocated past its 4 KiB of data takes 2 000 more
/// blocks on the SSD than its copy does on the HDD (a move copies the
/// data, not the allocation): a `stat` that still shows the SSD's figure
/// after the move comes from a stale cache.
#[test]
fn a_migration_after_a_policy_change_shows_in_stat_at_once() {
    let area = Area::new();
    let m = Mounted::new(&area, &["--policy", "ssd-only"]);
    fs::create_dir(m.p("d")).unwrap();
    let f = fs::File::create(m.p("d/f")).unwrap();
    std::io::Write::write_all(&mut &f, &[7u8; 4096]).unwrap();
    // SAFETY: a valid descriptor; FALLOC_FL_KEEP_SIZE only allocates.
    let r = unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), libc::FALLOC_FL_KEEP_SIZE, 0, 1 << 20) };
    assert_eq!(r, 0, "fallocate: {}", std::io::Error::last_os_error());
    drop(f);
    let before = fs::metadata(m.p("d/f")).unwrap();
    assert_eq!(before.blocks(), fs::metadata(area.ssd().join("d/f")).unwrap().blocks());
    assert!(before.blocks() >= 2048, "{} blocks", before.blocks());
    let o = tierfs(&["policy", "set", m.p("d").to_str().unwrap(), "hdd-only"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        wait_for(10, || xattr(&m.p("d/f"), "user.tierfs.placement").as_deref() == Some("hdd")),
        "the file moved to the HDD"
    );
    assert_eq!(settled_placement(&area, &m.mnt, "d/f").unwrap(), "hdd");
    let truth = fs::metadata(area.hdd().join("d/f")).unwrap().blocks();
    assert!(truth < 2048, "the copy has {truth} blocks");
    // The move's invalidation reaches the kernel just after the switch-over.
    assert!(
        wait_for(2, || fs::metadata(m.p("d/f")).unwrap().blocks() == truth),
        "stat still shows {} blocks, the HDD copy has {truth}",
        fs::metadata(m.p("d/f")).unwrap().blocks()
    );
    let after = fs::metadata(m.p("d/f")).unwrap();
    assert_eq!((after.ino(), after.len(), after.mtime()), (before.ino(), before.len(), before.mtime()));
    assert_eq!(fs::read(m.p("d/f")).unwrap(), vec![7u8; 4096]);
    m.unmount();
}

/// What another process does through the mount (rename, link, unlink,
/// chmod, create a name this process found missing) shows here at once, in
/// `stat` and in listings.
#[test]
fn names_and_attributes_changed_by_another_process_show_at_once() {
    let area = Area::new();
    let m = Mounted::new(&area, &[]);
    let d = m.p("d");
    fs::create_dir(&d).unwrap();
    fs::write(d.join("a"), b"x").unwrap();
    let ino = fs::metadata(d.join("a")).unwrap().ino();
    assert_eq!(names(&d), ["a"]);
    // A missing name, looked up (the kernel may remember that it is missing).
    assert!(fs::metadata(d.join("x")).is_err());
    let q = |p: &str| d.join(p).display().to_string();

    sh(&format!("mv {} {}", q("a"), q("b")));
    assert!(fs::metadata(d.join("a")).is_err(), "the old name is gone");
    assert_eq!(fs::metadata(d.join("b")).unwrap().ino(), ino);
    assert_eq!(names(&d), ["b"]);

    sh(&format!("ln {} {}", q("b"), q("c")));
    assert_eq!(fs::metadata(d.join("b")).unwrap().nlink(), 2);
    assert_eq!(fs::metadata(d.join("c")).unwrap().ino(), ino);

    sh(&format!("chmod 600 {}", q("b")));
    assert_eq!(fs::metadata(d.join("c")).unwrap().permissions().mode() & 0o7777, 0o600);

    sh(&format!("rm {}", q("b")));
    assert_eq!(fs::metadata(d.join("c")).unwrap().nlink(), 1);
    assert!(fs::metadata(d.join("b")).is_err());
    assert_eq!(names(&d), ["c"]);

    sh(&format!("echo new > {}", q("x")));
    assert_eq!(fs::read(d.join("x")).unwrap(), b"new\n", "a name found missing before, created since");
    assert_eq!(names(&d), ["c", "x"]);

    sh(&format!("mkdir {} && mv {} {}", q("sub"), q("c"), q("sub/c")));
    assert_eq!(fs::metadata(d.join("sub/c")).unwrap().ino(), ino);
    assert!(fs::metadata(d.join("c")).is_err());
    m.unmount();
}

/// A write through one handle (or by another process) shows in `stat` of
/// the path and of another handle at once, in both I/O modes.
#[test]
fn a_write_through_another_handle_shows_in_stat_at_once() {
    for mode in ["userspace", "passthrough"] {
        let area = Area::new();
        let m = Mounted::new(&area, &["--io-mode", mode]);
        let p = m.p("f");
        fs::write(&p, b"").unwrap();
        let reader = fs::File::open(&p).unwrap();
        let writer = fs::OpenOptions::new().write(true).open(&p).unwrap();
        let m0 = fs::metadata(&p).unwrap();
        assert_eq!(m0.len(), 0);
        std::thread::sleep(Duration::from_millis(20));
        std::os::unix::fs::FileExt::write_all_at(&writer, &[1u8; 5000], 0).unwrap();
        let m1 = fs::metadata(&p).unwrap();
        assert_eq!(m1.len(), 5000, "{mode}: size after a write through another handle");
        assert!((m1.mtime(), m1.mtime_nsec()) > (m0.mtime(), m0.mtime_nsec()), "{mode}: mtime moved");
        assert_eq!(reader.metadata().unwrap().len(), 5000, "{mode}: fstat of the other handle");
        sh(&format!("printf abc >> {}", p.display()));
        assert_eq!(fs::metadata(&p).unwrap().len(), 5003, "{mode}: after another process appended");
        writer.set_len(10).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().len(), 10, "{mode}: after a truncate through a handle");
        drop((reader, writer));
        m.unmount();
    }
}

/// Changes made in a tier directory behind tierfs's back show within the
/// cache timeout (here 1 s), not later.
#[test]
fn a_change_behind_the_mount_shows_within_the_cache_timeout() {
    let area = Area::new();
    fs::write(area.hdd().join("f"), b"x").unwrap();
    fs::set_permissions(area.hdd().join("f"), fs::Permissions::from_mode(0o644)).unwrap();
    let m = Mounted::new(&area, &["--cache-timeout", "1s"]);
    assert_eq!(fs::metadata(m.p("f")).unwrap().permissions().mode() & 0o777, 0o644);
    fs::set_permissions(area.hdd().join("f"), fs::Permissions::from_mode(0o600)).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(fs::metadata(m.p("f")).unwrap().permissions().mode() & 0o777, 0o600);
    m.unmount();
    let o = tierfs(&[
        "mount",
        area.ssd().to_str().unwrap(),
        area.hdd().to_str().unwrap(),
        area.mnt().to_str().unwrap(),
        "--cache-timeout",
        "soon",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--cache-timeout"), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The inode number a listing of `dir` gives for `name` (`.` and `..`
/// included, which `read_dir` leaves out).
fn listed_ino(dir: &Path, name: &str) -> Option<u64> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string; the stream is closed below.
    let d = unsafe { libc::opendir(c.as_ptr()) };
    assert!(!d.is_null(), "opendir {}: {}", dir.display(), std::io::Error::last_os_error());
    let mut found = None;
    loop {
        // SAFETY: `d` is an open stream; the entry is read before the next call.
        let e = unsafe { libc::readdir(d) };
        if e.is_null() {
            break;
        }
        // SAFETY: readdir returned a valid entry with a NUL-terminated name.
        let (n, ino) = unsafe { (std::ffi::CStr::from_ptr((*e).d_name.as_ptr()), (*e).d_ino) };
        if n.to_bytes() == name.as_bytes() {
            found = Some(ino);
        }
    }
    // SAFETY: `d` is open and not used after.
    unsafe { libc::closedir(d) };
    found
}

/// The kernel keeps a directory's listing; a directory moved to another
/// parent through the mount lists its new parent as `..` at once (the
/// rename does not change the moved directory's own mtime, so only
/// tierfs's invalidation makes the kernel read it again).
#[test]
fn a_moved_directory_lists_its_new_parent_as_dotdot() {
    let area = Area::new();
    let m = Mounted::new(&area, &[]);
    for d in ["a", "b", "a/d"] {
        fs::create_dir(m.p(d)).unwrap();
    }
    fs::write(m.p("a/d/f"), b"x").unwrap();
    let (a, b) = (fs::metadata(m.p("a")).unwrap().ino(), fs::metadata(m.p("b")).unwrap().ino());
    // Twice: the second listing comes from the kernel's copy.
    for _ in 0..2 {
        assert_eq!(listed_ino(&m.p("a/d"), ".."), Some(a));
    }
    fs::rename(m.p("a/d"), m.p("b/d")).unwrap();
    assert_eq!(listed_ino(&m.p("b/d"), ".."), Some(b), "`..` of the moved directory");
    assert_eq!(listed_ino(&m.p("b/d"), "f"), Some(fs::metadata(m.p("b/d/f")).unwrap().ino()));
    m.unmount();
}

/// A file whose backing copy is deleted behind the mount, found gone by a
/// lookup once the kernel's entry has expired, leaves the listing the
/// kernel keeps at once, though the backing directories' mtimes are put
/// back as they were (nothing but tierfs's invalidation tells the kernel).
#[test]
fn a_copy_deleted_behind_the_mount_leaves_the_kept_listing_once_looked_up() {
    let area = Area::new();
    let m = Mounted::new(&area, &["--cache-timeout", "1s", "--policy", "hdd-only"]);
    fs::create_dir(m.p("d")).unwrap();
    for f in ["f", "g"] {
        fs::write(m.p(&format!("d/{f}")), b"x").unwrap();
    }
    // Twice: the second listing comes from the kernel's copy.
    for _ in 0..2 {
        assert_eq!(names(&m.p("d")), ["f", "g"]);
    }
    let dirs: Vec<_> = [area.ssd().join("d"), area.hdd().join("d")].into_iter().filter(|d| d.exists()).collect();
    let times: Vec<_> = dirs.iter().map(|d| fs::metadata(d).unwrap().modified().unwrap()).collect();
    fs::remove_file(area.hdd().join("d/f")).unwrap();
    for (d, t) in dirs.iter().zip(&times) {
        fs::File::open(d).unwrap().set_modified(*t).unwrap();
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert!(fs::metadata(m.p("d/f")).is_err(), "the name whose copy is gone");
    assert_eq!(names(&m.p("d")), ["g"], "the listing after the lookup found the copy gone");
    m.unmount();
}

/// Regression ("a listing kept by the kernel showed a name twice"): the
/// kernel fills the listing it keeps from every handle reading the
/// directory at the time and goes on in one handle from offsets another
/// gave; with offsets that were positions in each handle's own listing, a
/// listing beside a change showed a name twice or missed one. Readers list
/// a directory over and over while others create, rename and remove names
/// in it: each name present throughout shows exactly once in every listing.
#[test]
fn a_kept_listing_lists_each_name_once_while_the_directory_changes() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    const STABLE: usize = 600;
    let area = Area::new();
    let m = Mounted::new(&area, &[]);
    let d = m.p("d");
    fs::create_dir(&d).unwrap();
    for i in 0..STABLE {
        fs::write(d.join(format!("s{i:04}")), b"").unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for w in 0..2 {
        let (d, stop) = (d.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let a = d.join(format!("c{w}-{i}"));
                fs::write(&a, b"").unwrap();
                let b = d.join(format!("r{w}-{i}"));
                fs::rename(&a, &b).unwrap();
                if i.is_multiple_of(2) {
                    fs::remove_file(&b).unwrap();
                }
                i += 1;
            }
            0
        }));
    }
    for _ in 0..2 {
        let (d, stop) = (d.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut listings = 0;
            while !stop.load(Ordering::Relaxed) {
                let mut seen = std::collections::HashMap::new();
                for e in fs::read_dir(&d).unwrap() {
                    *seen.entry(e.unwrap().file_name().into_string().unwrap()).or_insert(0) += 1;
                }
                let twice: Vec<_> = seen.iter().filter(|(_, c)| **c > 1).collect();
                assert!(twice.is_empty(), "listed twice: {twice:?}");
                let missing: Vec<_> =
                    (0..STABLE).map(|i| format!("s{i:04}")).filter(|s| !seen.contains_key(s)).collect();
                assert!(missing.is_empty(), "missing from a listing: {missing:?}");
                listings += 1;
            }
            listings
        }));
    }
    // The watchdog: the threads are stopped after 5 s and must end soon.
    std::thread::sleep(Duration::from_secs(5));
    stop.store(true, Ordering::Relaxed);
    let end = std::time::Instant::now() + Duration::from_secs(60);
    while !threads.iter().all(|t| t.is_finished()) {
        if std::time::Instant::now() > end {
            let log = m.log_text();
            m.kill();
            panic!("a thread is stuck\n{log}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let counts: Vec<usize> = threads.into_iter().map(|t| t.join().expect("a thread failed")).collect();
    assert!(counts[2] + counts[3] >= 10, "only {} listings", counts[2] + counts[3]);
    m.unmount();
}
