//! Several users on one mount (tierfs as root with allow_other and
//! default_permissions).

use crate::harness::{as_user, Area, LoopFs, Mounted};
use crate::ops::lstat;
use std::os::unix::fs::PermissionsExt;

fn out(o: &std::process::Output) -> String {
    format!(
        "status {} stdout {:?} stderr {:?}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn users_get_their_own_files_and_cannot_touch_others_private_ones() {
    let area = Area::new();
    let m = Mounted::new(&area, &["--io-mode", "userspace"]);
    let pubdir = m.p("pub");
    std::fs::create_dir(&pubdir).unwrap();
    std::fs::set_permissions(&pubdir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::write(m.p("pub/rootonly"), b"secret").unwrap();
    std::fs::set_permissions(m.p("pub/rootonly"), std::fs::Permissions::from_mode(0o600)).unwrap();

    let p = pubdir.display();
    let o = as_user(65534, &format!("umask 077 && echo mine > {p}/u1 && mkdir {p}/u1dir"));
    assert!(o.status.success(), "{}", out(&o));
    let st = lstat(&m.p("pub/u1")).unwrap();
    assert_eq!((st.st_uid, st.st_gid, st.st_mode & 0o777), (65534, 65534, 0o600));
    let st = lstat(&m.p("pub/u1dir")).unwrap();
    assert_eq!((st.st_uid, st.st_gid), (65534, 65534));
    // ... and on the backing tier too.
    let st = lstat(&area.hdd().join("pub/u1")).unwrap();
    assert_eq!((st.st_uid, st.st_gid), (65534, 65534));

    for script in [
        format!("cat {p}/rootonly"),
        format!("echo x >> {p}/rootonly"),
        format!("chmod 666 {p}/rootonly"),
        format!("rm -f {p}/rootonly"),
        format!("mv {p}/rootonly {p}/stolen"),
    ] {
        let o = as_user(65534, &script);
        assert!(!o.status.success(), "{script} must fail: {}", out(&o));
    }
    assert_eq!(std::fs::read(m.p("pub/rootonly")).unwrap(), b"secret");
    // Another user cannot read the first one's 0600 file.
    let o = as_user(65533, &format!("cat {p}/u1"));
    assert!(!o.status.success(), "{}", out(&o));
    m.unmount();
}

#[test]
fn setgid_directories_and_supplementary_groups() {
    let area = Area::new();
    let m = Mounted::new(&area, &[]);
    let d = m.p("team");
    std::fs::create_dir(&d).unwrap();
    std::os::unix::fs::chown(&d, Some(0), Some(4242)).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o2777)).unwrap();
    let o = as_user(65534, &format!("echo hi > {}/f && mkdir {}/sub", d.display(), d.display()));
    assert!(o.status.success(), "{}", out(&o));
    let st = lstat(&m.p("team/f")).unwrap();
    assert_eq!((st.st_uid, st.st_gid), (65534, 4242), "new files take the setgid directory's group");
    let st = lstat(&m.p("team/sub")).unwrap();
    assert_eq!(st.st_gid, 4242);
    assert_ne!(st.st_mode & libc::S_ISGID, 0, "subdirectories inherit setgid");

    // chgrp to a supplementary group of the caller is legal.
    let o = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--groups=4343", "--", "chgrp", "4343"])
        .arg(m.p("team/f"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", out(&o));
    assert_eq!(lstat(&m.p("team/f")).unwrap().st_gid, 4343);
    m.unmount();
}

#[test]
fn unprivileged_writes_clear_set_id_bits_as_locally() {
    for mode in ["userspace", "passthrough"] {
        let area = Area::new();
        let m = Mounted::new(&area, &["--io-mode", mode]);
        let plain = area.path("plain");
        for d in [m.mnt.clone(), plain.clone()] {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        }
        let script = |d: &std::path::Path| {
            let d = d.display();
            format!(
                "echo a > {d}/w && chmod 6775 {d}/w && echo b >> {d}/w && \
                 echo a > {d}/t && chmod 4755 {d}/t && truncate -s 1 {d}/t && \
                 echo a > {d}/g && chmod 2745 {d}/g && echo b >> {d}/g"
            )
        };
        for d in [&m.mnt, &plain] {
            let o = as_user(65534, &script(d));
            assert!(o.status.success(), "{}", out(&o));
        }
        for f in ["w", "t", "g"] {
            let a = lstat(&m.mnt.join(f)).unwrap().st_mode;
            let b = lstat(&plain.join(f)).unwrap().st_mode;
            assert_eq!(a & 0o7777, b & 0o7777, "{mode}: mode of {f}: tierfs {:o}, local {:o}", a & 0o7777, b & 0o7777);
        }
        m.unmount();
    }
}

#[test]
fn only_root_may_pin_to_the_ssd_or_set_ssd_only() {
    // A pinned file is never evicted and ssd-only keeps everything on the
    // SSD: any user could otherwise push every other user's files off it.
    let area = Area::new();
    let m = Mounted::new(&area, &["--io-mode", "userspace"]);
    let d = m.p("mine");
    std::fs::create_dir(&d).unwrap();
    std::os::unix::fs::chown(&d, Some(65534), Some(65534)).unwrap();
    let o = as_user(65534, &format!("echo x > {0}/f", d.display()));
    assert!(o.status.success(), "{}", out(&o));
    let d = d.display();
    for (script, ok) in [
        (format!("setfattr -n user.tierfs.pin -v ssd {d}/f"), false),
        (format!("setfattr -n user.tierfs.pin -v ssd {d}"), false),
        (format!("setfattr -n user.tierfs.policy -v ssd-only {d}"), false),
        (format!("setfattr -n user.tierfs.pin -v hdd {d}/f"), true),
        (format!("setfattr -n user.tierfs.policy -v on-demand-cache {d}"), true),
    ] {
        let o = as_user(65534, &script);
        assert_eq!(o.status.success(), ok, "{script}: {}", out(&o));
        if !ok {
            assert!(String::from_utf8_lossy(&o.stderr).contains("not permitted"), "{script}: {}", out(&o));
        }
    }
    // Root may.
    let o = std::process::Command::new("setfattr")
        .args(["-n", "user.tierfs.pin", "-v", "ssd"])
        .arg(m.p("mine/f"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", out(&o));
    m.unmount();
}

#[test]
fn the_state_directory_is_private() {
    let area = Area::new();
    let m = Mounted::new(&area, &[]);
    let mode = std::fs::metadata(area.ssd().join(".tierfs/state")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "it names every file of the mount");
    m.unmount();
}

#[test]
fn a_user_cannot_fill_the_space_the_backing_file_system_keeps_for_root() {
    // Backing files were written by the daemon as root, so a user could
    // use up the blocks ext4 reserves for root. Now writes run as the
    // user who opened the file.
    let area = Area::new();
    let hdd = LoopFs::with_reserve(&area, "hddfs", 32, 50);
    let m = Mounted::with(&area.ssd(), &hdd.dir, &area.mnt(), &["--policy", "hdd-only", "--io-mode", "userspace"]);
    let d = m.p("pub");
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
    // About 14 MiB are free for users, 30 for root.
    let o = as_user(65534, &format!("dd if=/dev/zero of={}/big bs=1M count=20 status=none", d.display()));
    assert!(!o.status.success(), "a user wrote into root's reserve: {}", out(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("No space left"), "{}", out(&o));
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("rm -f {0}/big && dd if=/dev/zero of={0}/root-big bs=1M count=20 status=none", d.display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "root may: {}", out(&o));
    m.unmount();
}
