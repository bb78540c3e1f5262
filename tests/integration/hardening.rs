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

/// 64 small files replaced 5 000 times by rename(tmp, existing) while a
/// reader keeps migrations going, on a 96 KiB SSD.
fn replace_over_and_over(policy: &str) {
    let area = Area::new();
    let state = area.path("state");
    let args = ["--policy", policy, "--ssd-capacity", "96K", "--io-mode", "userspace", "--interval", "1s"];
    let mut args: Vec<&str> = args.to_vec();
    args.extend(["--state-dir", state.to_str().unwrap()]);
    let m = Mounted::new(&area, &args);
    const FILES: usize = 64;
    for i in 0..FILES {
        fs::write(m.p(&format!("f{i}")), vec![i as u8; 1024 + i * 97]).unwrap();
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (mnt, stop) = (m.mnt.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut k = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                k = (k * 7 + 3) % FILES;
                let _ = fs::read(mnt.join(format!("f{}", k % 9)));
                let _ = fs::read(mnt.join(format!("f{k}")));
            }
        })
    };
    let mnt = m.mnt.clone();
    within(120, "5000 replacements", move || {
        for n in 0..5000usize {
            let i = (n * 31) % FILES;
            let tmp = mnt.join(format!(".tmp{i}"));
            fs::write(&tmp, vec![(n % 251) as u8; 512 + (n * 131) % 3000]).unwrap();
            fs::rename(&tmp, mnt.join(format!("f{i}"))).unwrap();
        }
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    reader.join().unwrap();
    if let Err(e) = crate::harness::account_matches(&area, &m.mnt) {
        panic!("{policy}, after the replacements: {e}\n{}", m.log_text());
    }
    m.unmount();
    let m = Mounted::new(&area, &args);
    if let Err(e) = crate::harness::account_matches(&area, &m.mnt) {
        panic!("{policy}, after a remount: {e}\n{}", m.log_text());
    }
    m.unmount();
}

#[test]
fn replaced_files_leave_the_statistics_and_the_ssd_account_under_dynamic_hot_dst() {
    replace_over_and_over("dynamic-hot-dst");
}

#[test]
fn replaced_files_leave_the_statistics_and_the_ssd_account_under_interval_hot_dst() {
    replace_over_and_over("interval-hot-dst");
}

#[test]
fn replaced_files_leave_the_statistics_and_the_ssd_account_under_on_demand_cache() {
    replace_over_and_over("on-demand-cache");
}

#[test]
fn replaced_files_leave_the_statistics_and_the_ssd_account_under_dynamic_cold_dst_bg() {
    replace_over_and_over("dynamic-cold-dst-bg");
}

#[test]
fn sigterm_ends_the_daemon_even_with_files_open_on_the_mount() {
    // A lazily unmounted mount stays alive as long as files are open on
    // it, and with it the daemon: SIGTERM (systemd's stop) must still end
    // it in seconds. The open files then fail instead of hanging.
    let area = Area::new();
    let mut m = Mounted::new(&area, &["--io-mode", "userspace"]);
    fs::write(m.p("f"), b"held open").unwrap();
    let held = fs::File::open(m.p("f")).unwrap();
    let pid = m.child.as_ref().unwrap().id() as i32;
    let t = Instant::now();
    // SAFETY: the daemon is our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let mut child = m.child.take().unwrap();
    let status = within(20, "the daemon's exit", move || child.wait().unwrap());
    assert!(t.elapsed() < Duration::from_secs(15), "the daemon took {:?}", t.elapsed());
    let _ = status;
    let mut buf = [0u8; 4];
    use std::os::unix::fs::FileExt;
    assert!(held.read_at(&mut buf, 0).is_err(), "the open file fails instead of hanging");
    drop(held);
}

/// On GlusterFS an unlink, create or stat below a directory failed with
/// ENOENT or ESTALE while that directory was being renamed, the name still
/// there (and a stat or utimens of a directory below it with ESTALE): a migration that took the ENOENT of its source's unlink for
/// "already gone" left the old copy on the HDD tier, and the next mount
/// adopted a file the user had deleted (`torture_hystor` on the GlusterFS
/// HDD tier, after a remount). The tier's store now holds such operations
/// back while a directory is renamed. A directory of the HDD tier is
/// renamed back and forth while files are made and removed through a
/// handle of a directory below it; every call must succeed. On a local
/// file system the kernel does this itself; the test bites where the HDD
/// tier is a FUSE or network file system (`scripts/gluster.sh`).
#[test]
fn operations_below_a_directory_being_renamed_on_a_tier_do_not_fail() {
    use std::ffi::OsStr;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tierfs_core::store::{dir::DirStore, Store};
    let area = Area::new();
    let s = Arc::new(DirStore::new(area.hdd()).unwrap());
    let root = s.root().unwrap();
    s.mkdir(&root, OsStr::new("a"), 0o755).unwrap();
    let a = s.open_dir(&root, OsStr::new("a")).unwrap();
    s.mkdir(&a, OsStr::new("sub"), 0o755).unwrap();
    let sub = s.open_dir(&a, OsStr::new("sub")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let renamer = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let root = s.root().unwrap();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let (from, to) = if n.is_multiple_of(2) { ("a", "b") } else { ("b", "a") };
                s.rename(&root, OsStr::new(from), &root, OsStr::new(to), 0).unwrap();
                n += 1;
            }
            n
        })
    };
    let end = Instant::now() + Duration::from_secs(3);
    let mut failures = Vec::new();
    let mut done = 0;
    while Instant::now() < end {
        let name = format!("f{done}");
        let name = OsStr::new(&name);
        use tierfs_core::store::{SetTime, Target};
        let r = s
            .open(&sub, name, libc::O_CREAT | libc::O_WRONLY | libc::O_EXCL, 0o644)
            .and_then(|_| s.stat(Target::Entry(&sub, name)))
            .and_then(|_| s.unlink(&sub, name))
            // The directory below the renamed one itself (ESTALE).
            .and_then(|_| s.stat(Target::This(&sub)))
            .and_then(|_| s.utimens(Target::This(&sub), SetTime::Omit, SetTime::Now));
        if let Err(e) = r {
            failures.push(format!("{name:?}: {e}"));
        }
        done += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let renames = renamer.join().unwrap();
    let left = s.list(&sub).unwrap();
    assert!(renames > 10 && done > 10, "{renames} renames, {done} files: the two did not overlap");
    assert!(
        failures.is_empty() && left.is_empty(),
        "{} of {done} files failed while the directory was renamed {renames} times (first: {:?}); left: {:?}",
        failures.len(),
        failures.first(),
        left.iter().take(5).map(|e| &e.name).collect::<Vec<_>>()
    );
}

#[test]
fn a_passthrough_writer_filling_the_ssd_does_not_stop_the_state_database() {
    // A writer passing through to an SSD file (no capacity limit: the
    // kernel writes it, the daemon sees only the open) filled the file
    // system the state database is on: the database's next journal write
    // failed, and it refused every change of every user (creates,
    // renames, unlinks: EIO) until a remount, also once there was room
    // again. The user's write fails first now, and the database goes on.
    let area = Area::new();
    // Passthrough for writers of SSD files needs 1 GiB free on the SSD.
    let ssd = crate::harness::LoopFs::new(&area, "ssdfs", 1200);
    let m = Mounted::with(&ssd.dir, &area.hdd(), &area.mnt(), &["--policy", "ssd-only", "--io-mode", "passthrough"]);
    let big = m.p("big");
    // Held open while the rest runs: nothing can move it off the SSD.
    let mut writer = fs::File::create(&big).unwrap();
    for size in [1 << 20, 4096, 512] {
        let block = vec![7u8; size];
        let full = loop {
            use std::io::Write;
            if let Err(e) = writer.write_all(&block) {
                break e;
            }
        };
        assert_eq!(full.raw_os_error(), Some(libc::ENOSPC), "{full}");
    }
    let mnt = m.mnt.clone();
    let r = within(60, "changes of the namespace on a full SSD", move || -> Result<(), String> {
        for i in 0..200 {
            let (f, g) = (mnt.join(format!("f{i}")), mnt.join(format!("g{i}")));
            fs::File::create(&f).map_err(|e| format!("create {i}: {e}"))?;
            fs::rename(&f, &g).map_err(|e| format!("rename {i}: {e}"))?;
            fs::remove_file(&g).map_err(|e| format!("unlink {i}: {e}"))?;
        }
        Ok(())
    });
    let log = m.log_tail(20);
    drop(writer);
    let removed = fs::remove_file(&big);
    let after = fs::write(m.p("after"), b"room again");
    m.unmount();
    r.unwrap_or_else(|e| panic!("{e}\n{log}"));
    removed.unwrap_or_else(|e| panic!("unlink of the big file: {e}\n{log}"));
    after.unwrap();
}
