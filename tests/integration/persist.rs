//! State that must survive a remount: names, inode numbers, placement.

use crate::harness::{Area, Mounted};
use crate::ops::lstat;
use std::collections::BTreeMap;

fn inodes(m: &Mounted, names: &[&str]) -> BTreeMap<String, u64> {
    names.iter().map(|n| (n.to_string(), lstat(&m.p(n)).unwrap().st_ino)).collect()
}

#[test]
fn inode_numbers_and_contents_survive_remount() {
    let area = Area::new();
    let names = ["d", "d/f", "d/g", "h", "l", "d/sub", "d/sub/x"];
    let before = {
        let m = Mounted::new(&area, &[]);
        std::fs::create_dir_all(m.p("d/sub")).unwrap();
        std::fs::write(m.p("d/f"), b"ffff").unwrap();
        std::fs::write(m.p("d/sub/x"), b"xx").unwrap();
        std::fs::hard_link(m.p("d/f"), m.p("d/g")).unwrap();
        std::fs::write(m.p("h"), b"hhh").unwrap();
        std::os::unix::fs::symlink("d/f", m.p("l")).unwrap();
        let i = inodes(&m, &names);
        // A rename keeps the inode number.
        std::fs::rename(m.p("h"), m.p("h2")).unwrap();
        assert_eq!(lstat(&m.p("h2")).unwrap().st_ino, i["h"]);
        m.unmount();
        i
    };
    let m = Mounted::new(&area, &[]);
    let mut after = inodes(&m, &names.iter().filter(|n| **n != "h").copied().collect::<Vec<_>>());
    after.insert("h".into(), lstat(&m.p("h2")).unwrap().st_ino);
    assert_eq!(before, after);
    assert_eq!(std::fs::read(m.p("d/g")).unwrap(), b"ffff");
    assert_eq!(std::fs::read_link(m.p("l")).unwrap().to_str(), Some("d/f"));
    assert_eq!(lstat(&m.p("d")).unwrap().st_nlink, 3);
    m.unmount();
}

#[test]
fn placement_survives_remount() {
    let area = Area::new();
    let m = Mounted::new(&area, &["--placement", "ssd"]);
    std::fs::write(m.p("on-ssd"), b"s").unwrap();
    m.unmount();
    let m = Mounted::new(&area, &["--placement", "hdd"]);
    std::fs::write(m.p("on-hdd"), b"h").unwrap();
    assert_eq!(std::fs::read(m.p("on-ssd")).unwrap(), b"s");
    m.unmount();
    assert!(area.ssd().join("on-ssd").exists() && !area.hdd().join("on-ssd").exists());
    assert!(area.hdd().join("on-hdd").exists() && !area.ssd().join("on-hdd").exists());
}

#[test]
fn state_directory_is_hidden_and_reserved() {
    let area = Area::new();
    let m = Mounted::new(&area, &[]);
    let names: Vec<_> = std::fs::read_dir(&m.mnt).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(names.is_empty(), "{names:?}");
    assert_eq!(lstat(&m.p(".tierfs")).unwrap_err(), libc::ENOENT);
    let e = std::fs::create_dir(m.p(".tierfs")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    assert!(area.ssd().join(".tierfs/state").is_dir());
    m.unmount();
}
