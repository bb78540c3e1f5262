//! Per-directory policies, pins and runtime control through the
//! user.tierfs.* attributes, `tierfs policy`, fstab-style mounting.

use crate::harness::{as_user, is_mounted, tierfs, wait_for, Area, LoopFs, Mounted, BIN};
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn getx(p: &Path, name: &str) -> Result<String, i32> {
    let mut buf = [0u8; 256];
    let n = CString::new(name).unwrap();
    let r = unsafe { libc::getxattr(c(p).as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(String::from_utf8_lossy(&buf[..r as usize]).into_owned())
    }
}

fn setx(p: &Path, name: &str, v: &str) -> Result<(), i32> {
    let n = CString::new(name).unwrap();
    let r = unsafe { libc::setxattr(c(p).as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(())
    }
}

fn rmx(p: &Path, name: &str) -> Result<(), i32> {
    let n = CString::new(name).unwrap();
    if unsafe { libc::removexattr(c(p).as_ptr(), n.as_ptr()) } < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(())
    }
}

fn listx(p: &Path) -> Vec<String> {
    let mut buf = [0u8; 1024];
    let r = unsafe { libc::listxattr(c(p).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(r >= 0);
    buf[..r as usize]
        .split(|b| *b == 0)
        .filter(|x| !x.is_empty())
        .map(|x| String::from_utf8_lossy(x).into_owned())
        .collect()
}

const POLICY: &str = "user.tierfs.policy";

fn status(m: &Mounted) -> serde_json::Value {
    let o = tierfs(&["stats", m.mnt.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn mount(area: &Area, ssd: &Path, extra: &[&str]) -> Mounted {
    let state = area.path("state");
    let mut a = vec!["--io-mode", "userspace", "--state-dir", state.to_str().unwrap()];
    a.extend_from_slice(extra);
    Mounted::with(ssd, &area.hdd(), &area.mnt(), &a)
}

#[test]
fn inheritance_override_removal_rename_and_remount() {
    let area = Area::new();
    let m = mount(&area, &area.ssd(), &[]);
    fs::create_dir_all(m.p("www/img/thumbs")).unwrap();
    fs::create_dir_all(m.p("shares")).unwrap();
    fs::write(m.p("www/index.html"), b"x").unwrap();
    // The mount default everywhere, from the mount option.
    assert_eq!(getx(&m.p("www/index.html"), POLICY).unwrap(), "dynamic-hot-dst");
    assert_eq!(getx(&m.p("www"), "user.tierfs.policy.source").unwrap(), "mount option");
    // Set on a directory: inherited below it.
    setx(&m.p("www"), POLICY, "on-demand-cache").unwrap();
    assert_eq!(getx(&m.p("www/index.html"), POLICY).unwrap(), "on-demand-cache");
    assert_eq!(getx(&m.p("www/img/thumbs"), POLICY).unwrap(), "on-demand-cache");
    assert_eq!(getx(&m.p("www/img/thumbs"), "user.tierfs.policy.source").unwrap(), "/www");
    assert_eq!(getx(&m.p("shares"), POLICY).unwrap(), "dynamic-hot-dst");
    // Visible with plain getfattr -d: listed where it is set, not where inherited.
    assert!(listx(&m.p("www")).contains(&POLICY.to_string()));
    assert!(!listx(&m.p("www/img")).contains(&POLICY.to_string()));
    // A deeper directory overrides.
    setx(&m.p("www/img"), POLICY, "interval-cache").unwrap();
    setx(&m.p("www/img"), "user.tierfs.interval", "5s").unwrap();
    assert_eq!(getx(&m.p("www/img/thumbs"), POLICY).unwrap(), "interval-cache");
    assert_eq!(getx(&m.p("www/img/thumbs"), "user.tierfs.interval").unwrap(), "5s");
    assert_eq!(getx(&m.p("www/index.html"), "user.tierfs.interval").unwrap(), "80s");
    // Removing restores inheritance.
    rmx(&m.p("www/img"), POLICY).unwrap();
    assert_eq!(getx(&m.p("www/img/thumbs"), POLICY).unwrap(), "on-demand-cache");
    assert_eq!(rmx(&m.p("www/img"), POLICY), Err(libc::ENODATA));
    // Renaming a policy directory takes its settings along.
    fs::rename(m.p("www"), m.p("shares/site")).unwrap();
    assert_eq!(getx(&m.p("shares/site/index.html"), POLICY).unwrap(), "on-demand-cache");
    assert_eq!(getx(&m.p("shares/site/img/thumbs"), "user.tierfs.policy.source").unwrap(), "/shares/site");
    // A plain directory moved under a policy directory inherits its policy.
    fs::create_dir(m.p("plain")).unwrap();
    fs::rename(m.p("plain"), m.p("shares/site/plain")).unwrap();
    assert_eq!(getx(&m.p("shares/site/plain"), POLICY).unwrap(), "on-demand-cache");
    m.unmount();
    // Settings survive a remount.
    let m = mount(&area, &area.ssd(), &[]);
    assert_eq!(getx(&m.p("shares/site/index.html"), POLICY).unwrap(), "on-demand-cache");
    assert_eq!(getx(&m.p("shares/site/img"), "user.tierfs.interval").unwrap(), "5s");
    let o = tierfs(&["policy", "show", m.mnt.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("/shares/site") && out.contains("policy=on-demand-cache"), "{out}");
    m.unmount();
}

#[test]
fn bad_values_are_einval_and_change_nothing() {
    let area = Area::new();
    let m = mount(&area, &area.ssd(), &[]);
    fs::create_dir(m.p("d")).unwrap();
    fs::write(m.p("d/f"), b"x").unwrap();
    setx(&m.p("d"), POLICY, "interval-hot-dst").unwrap();
    setx(&m.p("d"), "user.tierfs.sieve", "2M").unwrap();
    for (path, name, value) in [
        ("d", POLICY, "lru"),
        ("d", "user.tierfs.sieve", "huge"),
        ("d", "user.tierfs.sieve", "-5K"),
        ("d", "user.tierfs.interval", "0"),
        ("d", "user.tierfs.interval", "every now and then"),
        ("d", "user.tierfs.pin", "tape"),
        ("d", "user.tierfs.policy.source", "/"),
        ("d", "user.tierfs.polcy", "hdd-only"),
        ("d/f", POLICY, "hdd-only"),
        ("d/f", "user.tierfs.sieve", "1M"),
    ] {
        assert_eq!(setx(&m.p(path), name, value), Err(libc::EINVAL), "{path} {name}={value}");
    }
    assert_eq!(getx(&m.p("d"), POLICY).unwrap(), "interval-hot-dst");
    assert_eq!(getx(&m.p("d"), "user.tierfs.sieve").unwrap(), "2M");
    let log = m.log_text();
    assert!(
        log.contains("unknown policy \"lru\"") && log.contains("unknown tier \"tape\""),
        "the log names the value:\n{log}"
    );
    // The command refuses too, with a message.
    let o = tierfs(&["policy", "set", m.p("d").to_str().unwrap(), "lru"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("unknown policy"));
    m.unmount();
}

#[test]
fn only_the_owner_or_root_may_change_a_policy() {
    let area = Area::new();
    let m = mount(&area, &area.ssd(), &[]);
    fs::create_dir(m.p("rootdir")).unwrap();
    fs::set_permissions(m.p("rootdir"), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    fs::set_permissions(&m.mnt, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let set = |dir: &str| format!("{BIN} policy set {} hdd-only", m.p(dir).display());
    let o = as_user(65534, &set("rootdir"));
    assert!(!o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("only the owner"), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(getx(&m.p("rootdir"), POLICY).unwrap(), "dynamic-hot-dst");
    let o = as_user(65534, &format!("mkdir {} && {}", m.p("mine").display(), set("mine")));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(getx(&m.p("mine"), POLICY).unwrap(), "hdd-only");
    m.unmount();
}

#[test]
fn a_policy_change_moves_files_without_remount_and_pins_win() {
    let area = Area::new();
    let ssd = LoopFs::new(&area, "ssdfs", 32);
    let m = mount(&area, &ssd.dir, &["--policy", "ssd-only"]);
    fs::create_dir(m.p("d")).unwrap();
    for i in 0..5 {
        fs::write(m.p(&format!("d/f{i}")), vec![i as u8; 10_000]).unwrap();
    }
    fs::write(m.p("d/keep"), b"pinned").unwrap();
    assert!(ssd.dir.join("d/f0").exists());
    setx(&m.p("d/keep"), "user.tierfs.pin", "ssd").unwrap();
    tierfs(&["policy", "set", m.p("d").to_str().unwrap(), "hdd-only"]);
    // A move makes the HDD copy before it removes the SSD one: wait for both.
    let on_hdd_only =
        |i: usize| area.hdd().join(format!("d/f{i}")).exists() && !ssd.dir.join(format!("d/f{i}")).exists();
    assert!(wait_for(10, || (0..5).all(on_hdd_only)), "the files moved to the HDD");
    assert!(ssd.dir.join("d/keep").exists(), "a file pinned to the SSD stays");
    assert_eq!(getx(&m.p("d/keep"), "user.tierfs.pin").unwrap(), "ssd");
    assert_eq!(getx(&m.p("d/f0"), "user.tierfs.pin"), Err(libc::ENODATA));
    // Pinning a directory to the SSD brings its files back, whatever the policy.
    setx(&m.p("d"), "user.tierfs.pin", "ssd").unwrap();
    assert!(wait_for(10, || (0..5).all(|i| ssd.dir.join(format!("d/f{i}")).exists())), "pinned to the SSD");
    assert_eq!(getx(&m.p("d/f3"), "user.tierfs.pin").unwrap(), "ssd", "inherited pin");
    for i in 0..5 {
        assert_eq!(fs::read(m.p(&format!("d/f{i}"))).unwrap(), vec![i as u8; 10_000]);
    }
    m.unmount();
}

#[test]
fn a_mixed_tree_caches_one_directory_and_tiers_the_other() {
    let area = Area::new();
    let ssd = LoopFs::new(&area, "ssdfs", 32);
    let m = mount(&area, &ssd.dir, &["--policy", "hdd-only"]);
    fs::create_dir(m.p("www")).unwrap();
    fs::create_dir(m.p("shares")).unwrap();
    setx(&m.p("www"), POLICY, "on-demand-cache").unwrap();
    setx(&m.p("shares"), POLICY, "dynamic-hot-dst").unwrap();
    for i in 0..4 {
        fs::write(m.p(&format!("www/page{i}.html")), vec![b'w'; 20_000]).unwrap();
        fs::write(m.p(&format!("shares/log{i}")), vec![b's'; 20_000]).unwrap();
    }
    fs::write(m.p("other"), b"root: hdd-only").unwrap();
    // Read-mostly pages and appended logs, at the same time.
    use std::io::Write;
    for round in 0..3 {
        for i in 0..4 {
            let _ = fs::read(m.p(&format!("www/page{i}.html"))).unwrap();
            let mut f = fs::OpenOptions::new().append(true).open(m.p(&format!("shares/log{i}"))).unwrap();
            f.write_all(format!("entry {round}\n").as_bytes()).unwrap();
            let _ = fs::read(m.p(&format!("shares/log{i}"))).unwrap();
        }
        let _ = fs::read(m.p("other")).unwrap();
    }
    let cached = |i: usize| {
        ssd.dir.join(format!("www/page{i}.html")).exists() && area.hdd().join(format!("www/page{i}.html")).exists()
    };
    let moved = |i: usize| {
        ssd.dir.join(format!("shares/log{i}")).exists() && !area.hdd().join(format!("shares/log{i}")).exists()
    };
    assert!(wait_for(10, || (0..4).all(cached)), "www: copies on the SSD, primaries on the HDD");
    assert!(wait_for(10, || (0..4).all(moved)), "shares: moved to the SSD");
    assert!(area.hdd().join("other").exists() && !ssd.dir.join("other").exists(), "the root stays hdd-only");
    let v = status(&m);
    let groups = v["groups"].as_array().unwrap();
    let g = |dir: &str| groups.iter().find(|g| g["dir"] == dir).unwrap_or_else(|| panic!("{dir}: {v}"));
    assert_eq!(g("/www")["files_cached"], 4, "{v}");
    assert_eq!(g("/shares")["files_ssd"], 4, "{v}");
    assert_eq!(g("/")["policy"], "hdd-only");
    assert_eq!(v["migrations"]["copies"], 4);
    assert_eq!(v["migrations"]["promotions"], 4);
    // stats shows the groups.
    let o = tierfs(&["stats", m.mnt.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("/www") && out.contains("on-demand-cache") && out.contains("/shares"), "{out}");
    for i in 0..4 {
        assert_eq!(fs::read(m.p(&format!("shares/log{i}"))).unwrap().len(), 20_000 + 3 * 8);
    }
    m.unmount();
}

/// The mount helper for `mount -t fuse.tierfs`, pointed at the test binary
/// while the guard lives (and restored after).
struct Helper {
    before: Option<std::path::PathBuf>,
}

const HELPER: &str = "/usr/sbin/mount.fuse.tierfs";

impl Helper {
    fn install() -> Self {
        let before = fs::read_link(HELPER).ok();
        let _ = fs::remove_file(HELPER);
        std::os::unix::fs::symlink(BIN, HELPER).unwrap();
        Helper { before }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = fs::remove_file(HELPER);
        if let Some(b) = &self.before {
            let _ = std::os::unix::fs::symlink(b, HELPER);
        }
    }
}

#[test]
fn mount_t_fuse_tierfs_with_o_options_and_umount() {
    let area = Area::new();
    let _h = Helper::install();
    let src = format!("{}:{}", area.ssd().display(), area.hdd().display());
    let o = std::process::Command::new("mount")
        .args(["-t", "fuse.tierfs", &src])
        .arg(area.mnt())
        .args(["-o", "rw,policy=on-demand-cache,ssd_capacity=1G,sieve=2M,io_mode=userspace,allow_other,nofail"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(is_mounted(&area.mnt()));
    let guard = scopeguard(area.mnt());
    fs::write(area.mnt().join("f"), b"via mount(8)").unwrap();
    assert_eq!(getx(&area.mnt().join("f"), POLICY).unwrap(), "on-demand-cache");
    assert_eq!(getx(&area.mnt().join("f"), "user.tierfs.sieve").unwrap(), "2M");
    let o = tierfs(&["stats", area.mnt().to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["tiers"][0]["limit_bytes"], 1u64 << 30);
    assert_eq!(v["io_mode"], "userspace");
    let o = std::process::Command::new("umount").arg(area.mnt()).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!is_mounted(&area.mnt()));
    drop(guard);
    // A bad option is refused by the helper, nothing mounted.
    let o = std::process::Command::new("mount")
        .args(["-t", "fuse.tierfs", &src])
        .arg(area.mnt())
        .args(["-o", "policy=lru"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(!is_mounted(&area.mnt()));
}

/// Unmounts on drop (the test may fail while mounted through mount(8)).
struct Unmount(std::path::PathBuf);
impl Drop for Unmount {
    fn drop(&mut self) {
        if is_mounted(&self.0) {
            let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}
fn scopeguard(p: std::path::PathBuf) -> Unmount {
    Unmount(p)
}

#[test]
fn file_capabilities_survive_a_migration() {
    // The migration copied a file's xattrs to the new copy and then set
    // its owner: the kernel drops `security.capability` on a chown, so a
    // program moved between tiers lost its capabilities (found in review).
    // A tier that cannot store the attribute at all (a GlusterFS volume)
    // keeps the file where it is, capability and all.
    let area = Area::new();
    // VFS_CAP_REVISION_2, no flags; permitted: CAP_NET_BIND_SERVICE.
    let mut cap = vec![0u8; 20];
    cap[..4].copy_from_slice(&0x0200_0000u32.to_le_bytes());
    cap[4..8].copy_from_slice(&(1u32 << 10).to_le_bytes());
    let name = CString::new("security.capability").unwrap();
    let set_cap = |p: &Path| {
        // SAFETY: valid NUL-terminated strings and a buffer of the given length.
        let r = unsafe { libc::setxattr(c(p).as_ptr(), name.as_ptr(), cap.as_ptr().cast(), cap.len(), 0) };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    let probe = area.hdd().join("probe");
    fs::write(&probe, b"x").unwrap();
    let hdd_holds_caps = set_cap(&probe).is_ok();
    fs::remove_file(&probe).unwrap();
    let m = Mounted::new(&area, &["--policy", "ssd-only"]);
    fs::write(m.p("prog"), b"#!/bin/true\n").unwrap();
    set_cap(&m.p("prog")).expect("setting the capability through the mount");
    assert_eq!(crate::harness::xattr_bytes(&m.p("prog"), "security.capability"), Some(cap.clone()));
    assert!(area.ssd().join("prog").exists());
    setx(&m.p("prog"), "user.tierfs.pin", "hdd").unwrap();
    let moved = || area.hdd().join("prog").exists() && !area.ssd().join("prog").exists();
    let went = wait_for(if hdd_holds_caps { 10 } else { 2 }, moved);
    let kept = crate::harness::xattr_bytes(&m.p("prog"), "security.capability");
    let on_hdd = crate::harness::xattr_bytes(&area.hdd().join("prog"), "security.capability");
    let log = m.log_text();
    m.unmount();
    if hdd_holds_caps {
        assert!(went, "the pinned file did not move to the HDD\n{log}");
        assert_eq!(on_hdd, Some(cap.clone()), "on the HDD copy");
    } else {
        assert!(!went && area.ssd().join("prog").exists(), "moved to a tier without capabilities\n{log}");
    }
    assert_eq!(kept, Some(cap), "through the mount\n{log}");
}
