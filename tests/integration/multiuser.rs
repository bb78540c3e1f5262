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

#[test]
fn a_user_writes_into_a_write_back_area() {
    // A write the area buffers commits its chunks to the state database,
    // in a directory only the daemon's user may read; run wholly as the
    // writer, the commit failed (an empty file and "I/O error", every
    // time), and a commit that rotated the database's journal left it
    // refusing every later change until a remount.
    let area = Area::new();
    let m = Mounted::new(&area, &["--policy", "write-back-cache"]);
    let d = m.p("pub");
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let o = as_user(65534, &format!("echo hi > {0}/f && echo more >> {0}/f && cat {0}/f", d.display()));
    assert!(o.status.success(), "{}", out(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "hi\nmore\n");
    assert_eq!(std::fs::read(m.p("pub/f")).unwrap(), b"hi\nmore\n");
    let w = crate::harness::stats_json(&m.mnt)["write_back"]["ssd_writes"].as_u64().unwrap_or(0);
    assert!(w > 0, "the write-back area took no write");
    // The mount goes on taking changes, the user's and root's.
    for i in 0..50 {
        std::fs::write(m.p(&format!("pub/r{i}")), b"x").unwrap();
        std::fs::rename(m.p(&format!("pub/r{i}")), m.p(&format!("pub/s{i}"))).unwrap();
        std::fs::remove_file(m.p(&format!("pub/s{i}"))).unwrap();
    }
    let o = as_user(65534, &format!("echo again > {0}/g && cat {0}/g", d.display()));
    assert!(o.status.success(), "{}", out(&o));
    m.unmount();
}

/// What a user does to a shared directory: create, write, append, cut,
/// grow, rename (over a name too), chmod, set an xattr, and read back.
fn user_script(d: &std::path::Path, round: u32) -> String {
    let d = d.display();
    format!(
        "set -e; cd {d}
         echo hello{round} > f1
         seq {round} 30000 | head -c 98304 > big{round}
         echo more >> f1
         head -c 5000 big{round} > f2
         truncate -s 100 f2
         truncate -s 9000 f2
         printf tail >> f2
         mv f1 f3
         cp f3 f4
         mv f4 f3
         mv big{round} moved{round}
         chmod 600 f3
         chmod 640 moved{round}
         setfattr -n user.note -v mine{round} f3
         cat f3 f2 moved{round} > /dev/null
         seq 7 3000 | head -c 3072 | dd of=moved{round} bs=1k seek=10 conv=notrunc status=none
         cat moved{round} > /dev/null"
    )
}

/// Each regular file and directory below `root` (relative path): its mode,
/// owner, size, a digest of its bytes and its `user.note`.
fn tree(root: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    use std::hash::{Hash, Hasher};
    use std::os::unix::fs::MetadataExt;
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let md = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let mut h = std::collections::hash_map::DefaultHasher::new();
            if md.is_dir() {
                stack.push(p.clone());
            } else {
                std::fs::read(&p).unwrap().hash(&mut h);
            }
            let note = crate::harness::xattr(&p, "user.note");
            out.insert(
                rel,
                format!(
                    "mode {:o} owner {}:{} size {} data {:x} note {note:?}",
                    md.mode(),
                    md.uid(),
                    md.gid(),
                    if md.is_dir() { 0 } else { md.size() },
                    h.finish()
                ),
            );
        }
    }
    out
}

#[test]
fn every_policy_serves_another_user_as_a_local_file_system_does() {
    // A second user creates, writes, appends, cuts, renames, chmods and
    // sets xattrs in a shared directory, on a mount with a tiny SSD where
    // files move, chunks are made and writes are buffered while it works;
    // the same script on a local directory gives the same tree.
    let modes = ["passthrough", "userspace"];
    for (policy, mode) in tierfs_core::policy::PolicyKind::ALL.iter().flat_map(|p| modes.map(|m| (p, m))) {
        let name = policy.name();
        let area = Area::new();
        let state = area.path("state");
        let mut args = vec!["--policy", name, "--io-mode", mode, "--ssd-capacity", "64K", "--migrate-rate", "0"];
        args.extend(["--interval", "1s"]);
        args.extend(["--state-dir", state.to_str().unwrap()]);
        if name == "hystor" {
            args.extend(["--sieve", "8K", "--chunk", "4K", "--chunk-period", "200ms", "--write-back", "30"]);
        }
        let m = Mounted::new(&area, &args);
        let plain = area.path("plain");
        for d in [m.p("pub"), plain.join("pub")] {
            std::fs::create_dir(&d).unwrap();
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        }
        for round in 0..3 {
            for d in [m.p("pub"), plain.join("pub")] {
                let o = as_user(65534, &user_script(&d, round));
                assert!(
                    o.status.success(),
                    "{name} ({mode}), round {round}, in {}: {}\n{}",
                    d.display(),
                    out(&o),
                    m.log_tail(30)
                );
            }
            // Time for the engine to move what the round made.
            std::thread::sleep(std::time::Duration::from_millis(600));
        }
        let (mine, local) = (tree(&m.p("pub")), tree(&plain.join("pub")));
        assert_eq!(mine, local, "{name} ({mode}): the mount's tree differs from the local one\n{}", m.log_tail(30));
        for rel in mine.keys() {
            if let Err(e) = crate::harness::settled_placement(&area, &m.mnt, &format!("pub/{rel}")) {
                panic!("{name} ({mode}): {e}\n{}", m.log_tail(30));
            }
        }
        if let Err(e) = crate::harness::account_matches(&area, &m.mnt) {
            panic!("{name} ({mode}): {e}\n{}", m.log_tail(30));
        }
        let st = crate::harness::stats_json(&m.mnt);
        let mv = &st["migrations"];
        let moves: u64 =
            ["promotions", "demotions", "copies", "drops"].iter().map(|k| mv[k].as_u64().unwrap_or(0)).sum();
        let chunks: u64 = ["added", "dropped", "unsplit"].iter().map(|k| st["remap"][k].as_u64().unwrap_or(0)).sum();
        let buffered = st["write_back"]["ssd_writes"].as_u64().unwrap_or(0);
        eprintln!("{name} ({mode}): {moves} migrations, {chunks} chunk moves, {buffered} writes buffered");
        // Not a test that could pass without them.
        assert!(moves > 0 || name == "hdd-only", "{name} ({mode}): nothing moved");
        assert!(chunks > 0 || name != "hystor", "{name} ({mode}): no chunk moved");
        if name == "write-back-cache" || name == "hystor" {
            assert!(buffered > 0, "{name} ({mode}): the write-back area took none of the user's writes");
        }
        let log = m.unmount_with_log();
        assert!(!log.contains("panicked"), "{name} ({mode}): {log}");
    }
}
