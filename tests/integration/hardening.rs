//! Regression tests, on real mounts, for what once hung a mount, leaked
//! from the statistics or lost data. Each test is named after what broke.

use crate::harness::{tierfs, Area, Mounted};
use std::fs;
use std::time::{Duration, Instant};

/// Runs `f` on another thread and fails if it does not return in time.
pub fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs)).unwrap_or_else(|_| panic!("{what} hung for {secs} s"))
}

#[test]
fn renaming_a_directory_then_creating_in_it_does_not_freeze_the_mount() {
    // The engine regrouped the renamed directory's subtree holding its
    // groups mutex twice: within two seconds every create blocked for
    // ever and unmount left a daemon that never exited.
    let area = Area::new();
    let m = Mounted::new(&area, &["--io-mode", "userspace"]);
    let mnt = m.mnt.clone();
    within(10, "mkdir, mv, touch", move || {
        fs::create_dir_all(mnt.join("a/b")).unwrap();
        fs::rename(mnt.join("a/b"), mnt.join("c")).unwrap();
        fs::write(mnt.join("c/x"), b"x").unwrap();
    });
    // Give the engine a few ticks to regroup, then use the mount again.
    std::thread::sleep(Duration::from_millis(500));
    let mnt = m.mnt.clone();
    within(10, "a create after the regroup", move || fs::write(mnt.join("c/y"), b"y").unwrap());
    let mnt = m.mnt.to_str().unwrap().to_string();
    let t = Instant::now();
    let o = within(20, "tierfs umount", move || tierfs(&["umount", &mnt]));
    assert!(o.status.success(), "umount: {}", String::from_utf8_lossy(&o.stderr));
    assert!(t.elapsed() < Duration::from_secs(5), "unmount took {:?}", t.elapsed());
    drop(m);
}
