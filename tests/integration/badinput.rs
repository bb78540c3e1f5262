//! Bad input gets one line of error, a non-zero exit, and nothing mounted.

use crate::harness::{as_user, is_mounted, tierfs, Area, Mounted};

fn refused(args: &[&str], needle: &str) {
    let o = tierfs(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{args:?} must fail");
    assert_eq!(err.trim_end().lines().count(), 1, "one line of error, got: {err}");
    assert!(err.contains(needle), "{args:?}: expected {needle:?} in {err:?}");
}

#[test]
fn bad_directories_are_refused() {
    let a = Area::new();
    let (s, h, m) = (a.ssd(), a.hdd(), a.mnt());
    let (s, h, m) = (s.to_str().unwrap(), h.to_str().unwrap(), m.to_str().unwrap());
    let missing = a.path("missing");
    refused(&["mount", missing.to_str().unwrap(), h, m], "No such file");
    refused(&["mount", s, s, m], "same directory");
    std::fs::create_dir(a.ssd().join("inner")).unwrap();
    refused(&["mount", s, &format!("{s}/inner"), m], "inside the other");
    std::fs::create_dir(a.mnt().join("x")).unwrap();
    refused(&["mount", s, h, m], "not empty");
    std::fs::remove_dir(a.mnt().join("x")).unwrap();
    std::fs::write(a.path("file"), b"").unwrap();
    refused(&["mount", s, h, a.path("file").to_str().unwrap()], "not a directory");
    refused(&["mount", s, h, &format!("{s}/inner")], "inside the SSD directory");
    refused(&["mount", s, h, m, "--threads", "0"], "--threads");
    assert!(!is_mounted(&a.mnt()));
}

#[test]
fn unreadable_backing_directory_is_refused() {
    let a = Area::new();
    let locked = a.path("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let o = as_user(
        65534,
        &format!("{} mount {} {} {}", crate::harness::BIN, locked.display(), a.hdd().display(), a.mnt().display()),
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("not readable and writable") || err.contains("Permission denied"), "{err}");
    assert!(!is_mounted(&a.mnt()));
}

#[test]
fn state_database_in_use_is_refused() {
    let a = Area::new();
    let m = Mounted::new(&a, &[]);
    std::fs::create_dir_all(a.path("ssd2")).unwrap();
    std::fs::create_dir_all(a.path("mnt2")).unwrap();
    let state = a.ssd().join(".tierfs/state");
    refused(
        &[
            "mount",
            a.path("ssd2").to_str().unwrap(),
            a.path("hdd").to_str().unwrap(),
            a.path("mnt2").to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ],
        "already in use by another tierfs",
    );
    assert!(!is_mounted(&a.path("mnt2")));
    // The same with --daemon: the parent reports the child's failure.
    refused(
        &[
            "mount",
            a.path("ssd2").to_str().unwrap(),
            a.path("hdd").to_str().unwrap(),
            a.path("mnt2").to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
            "--daemon",
        ],
        "already in use by another tierfs",
    );
    assert!(!is_mounted(&a.path("mnt2")));
    m.unmount();
}

/// Two tierfs over one HDD directory would corrupt each other's state
/// (two nodes in front of one shared volume, a mistyped mount): refused
/// while the first runs, and afterwards for a volume that is not the
/// directory's own.
#[test]
fn a_second_tierfs_over_the_same_hdd_directory_is_refused() {
    let a = Area::new();
    let m = Mounted::new(&a, &[]);
    std::fs::write(m.p("f"), b"first").unwrap();
    for d in ["ssd2", "mnt2", "hdd2", "state2"] {
        std::fs::create_dir_all(a.path(d)).unwrap();
    }
    let (ssd2, hdd, mnt2, hdd2, state2) = (a.path("ssd2"), a.hdd(), a.path("mnt2"), a.path("hdd2"), a.path("state2"));
    let run = |h: &std::path::Path, needle: &str| {
        let (s2, h, m2, st2) =
            (ssd2.to_str().unwrap(), h.to_str().unwrap(), mnt2.to_str().unwrap(), state2.to_str().unwrap());
        refused(&["mount", s2, h, m2, "--state-dir", st2], needle);
    };
    run(&hdd, "is in use by another tierfs");
    assert!(!is_mounted(&mnt2));
    m.unmount();
    // The second state belongs to another volume (another HDD directory).
    let other = Mounted::with(&ssd2, &hdd2, &mnt2, &["--state-dir", state2.to_str().unwrap()]);
    other.unmount();
    run(&hdd, "belongs to another tierfs volume");
    assert!(!is_mounted(&mnt2));
    // The first volume mounts again, its file intact.
    let m = Mounted::new(&a, &[]);
    assert_eq!(std::fs::read(m.p("f")).unwrap(), b"first");
    m.unmount();
}

#[test]
fn vanished_backing_directory_gives_eio_not_a_crash() {
    let a = Area::new();
    let m = Mounted::new(&a, &["--io-mode", "userspace"]);
    std::fs::create_dir(m.p("d")).unwrap();
    std::fs::write(m.p("d/f"), b"x").unwrap();
    std::fs::remove_dir_all(a.hdd()).unwrap();
    // The kernel may have cached the entry: drop caches for a fresh lookup.
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "2");
    let e = std::fs::read(m.p("d/f")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    let e = std::fs::write(m.p("d/new"), b"y").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    assert!(is_mounted(&a.mnt()), "the daemon is still serving");
    std::fs::write(m.p("d/f2"), b"y").unwrap_err();
    assert!(std::fs::read_dir(&m.mnt).is_ok(), "unaffected operations still work");
    m.unmount();
}

#[test]
fn umount_command_unmounts_and_waits() {
    let a = Area::new();
    let o =
        tierfs(&["mount", a.ssd().to_str().unwrap(), a.hdd().to_str().unwrap(), a.mnt().to_str().unwrap(), "--daemon"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(is_mounted(&a.mnt()));
    std::fs::write(a.mnt().join("f"), b"x").unwrap();
    let o = tierfs(&["umount", a.mnt().to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!is_mounted(&a.mnt()));
    // Nothing mounted there any more: a clear message.
    let o = tierfs(&["umount", a.mnt().to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no tierfs is mounted"));
    let _ = Mounted::new(&a, &[]);
}
