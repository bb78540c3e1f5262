//! Mounting tierfs for a test, and always unmounting it again.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_tierfs");

/// Is `p` a mount point right now?
pub fn is_mounted(p: &Path) -> bool {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = p.to_string_lossy();
    text.lines().any(|l| l.split(' ').nth(4) == Some(&*want))
}

/// A scratch area with ssd/, hdd/, mnt/ and plain/ (for differential tests).
/// With `TIERFS_TEST_SSD_ROOT` or `TIERFS_TEST_HDD_ROOT` set (the
/// file-system matrix, `scripts/fs-matrix.sh`), the tier directories are
/// made below those instead: another file system, or a mergerfs pool.
pub struct Area {
    pub dir: tempfile::TempDir,
    tiers: [Option<tempfile::TempDir>; 2],
}

/// A tier directory below the root named by `var`, if it is set.
fn tier_under(var: &str) -> Option<tempfile::TempDir> {
    let root = std::env::var_os(var)?;
    let d = tempfile::Builder::new().prefix("tierfs-tier-").tempdir_in(&root).unwrap_or_else(|e| {
        panic!("{var}={}: {e}", Path::new(&root).display());
    });
    Command::new("chmod").arg("755").arg(d.path()).status().unwrap();
    Some(d)
}

impl Area {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new().prefix("tierfs-test-").tempdir_in("/tmp").expect("tempdir");
        for d in ["ssd", "hdd", "mnt", "plain"] {
            fs::create_dir(dir.path().join(d)).unwrap();
        }
        // Let other users reach the test directories (multi-user tests).
        Command::new("chmod").arg("755").arg(dir.path()).status().unwrap();
        Area { dir, tiers: [tier_under("TIERFS_TEST_SSD_ROOT"), tier_under("TIERFS_TEST_HDD_ROOT")] }
    }
    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }
    pub fn ssd(&self) -> PathBuf {
        self.tiers[0].as_ref().map_or_else(|| self.path("ssd"), |d| d.path().to_path_buf())
    }
    pub fn hdd(&self) -> PathBuf {
        self.tiers[1].as_ref().map_or_else(|| self.path("hdd"), |d| d.path().to_path_buf())
    }
    pub fn mnt(&self) -> PathBuf {
        self.path("mnt")
    }
    /// True if both tiers' file systems swap names with RENAME_EXCHANGE
    /// (a mergerfs pool and GlusterFS do not).
    pub fn tiers_exchange(&self) -> bool {
        [self.ssd(), self.hdd()].iter().all(|d| renames_exchange(d))
    }
}

/// Tries RENAME_EXCHANGE on two scratch files in `dir`.
pub fn renames_exchange(dir: &Path) -> bool {
    let d = tempfile::Builder::new().prefix("probe-").tempdir_in(dir).expect("scratch directory");
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    fs::write(&a, b"a").unwrap();
    fs::write(&b, b"b").unwrap();
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let (ca, cb) = (c(&a), c(&b));
    // SAFETY: NUL-terminated paths.
    let r =
        unsafe { libc::syscall(libc::SYS_renameat2, libc::AT_FDCWD, ca.as_ptr(), libc::AT_FDCWD, cb.as_ptr(), 2u32) };
    r == 0
}

/// A running tierfs in the foreground; unmounted (and waited for) on drop,
/// even when the test fails.
pub struct Mounted {
    pub mnt: PathBuf,
    pub child: Option<Child>,
    pub log: PathBuf,
}

impl Mounted {
    /// Mounts ssd/ and hdd/ of `area` on mnt/ with extra arguments.
    pub fn new(area: &Area, extra: &[&str]) -> Self {
        Self::with(&area.ssd(), &area.hdd(), &area.mnt(), extra)
    }

    pub fn with(ssd: &Path, hdd: &Path, mnt: &Path, extra: &[&str]) -> Self {
        let m = Self::in_table(ssd, hdd, mnt, extra);
        m.wait_served();
        m
    }

    /// Mounts and returns as soon as the mount is in the mount table,
    /// maybe before the daemon serves (for tests of what comes first).
    pub fn in_table(ssd: &Path, hdd: &Path, mnt: &Path, extra: &[&str]) -> Self {
        let log = mnt.with_extension(format!("log.{}", std::process::id()));
        let logf = fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
        // Tests drive migrations against requests (the tortures, the crash
        // and kill loops read in tight loops): moves are not held back by
        // the busy gate unless a test asks for it.
        let ungated: &[&str] = if extra.contains(&"--busy-moves") { &[] } else { &["--busy-moves", "0"] };
        let child = Command::new(BIN)
            .arg("mount")
            .arg(ssd)
            .arg(hdd)
            .arg(mnt)
            .args(ungated)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(logf)
            .spawn()
            .expect("spawn tierfs");
        let mut m = Mounted { mnt: mnt.to_path_buf(), child: Some(child), log };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !is_mounted(mnt) {
            if let Some(c) = m.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    panic!("tierfs exited with {st} before mounting:\n{}", m.log_text());
                }
            }
            assert!(Instant::now() < deadline, "tierfs did not mount in time:\n{}", m.log_text());
            std::thread::sleep(Duration::from_millis(10));
        }
        m
    }

    /// Waits until the daemon answers a stat of the mount's root. In the
    /// mount table is not yet serving: the daemon starts its request
    /// threads (over io_uring, after the kernel's INIT) only then, and a
    /// test that looks at the daemon first would race its start. A daemon
    /// that does not answer within 20 s is killed (its death answers the
    /// held stat) and the test fails with its log.
    fn wait_served(&self) {
        let (tx, rx) = std::sync::mpsc::channel();
        let root = self.mnt.clone();
        std::thread::spawn(move || {
            let _ = tx.send(fs::metadata(&root).map(|_| ()));
        });
        let failed = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Ok(())) => return,
            Ok(Err(e)) => format!("does not answer: {e}"),
            Err(_) => "did not answer a stat in 20 s".to_string(),
        };
        if let Some(pid) = self.child.as_ref().map(|c| c.id()) {
            // SAFETY: signals our own child, by its pid.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        panic!("the new mount {} {failed}:\n{}", self.mnt.display(), self.log_text());
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of the daemon's log, for a failure message.
    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    pub fn p(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// Unmounts cleanly and waits for the daemon; panics if it fails.
    pub fn unmount(mut self) {
        self.stop();
    }

    /// Unmounts, waits for the daemon, and returns its whole log.
    pub fn unmount_with_log(mut self) -> String {
        self.stop();
        self.log_text()
    }

    fn stop(&mut self) {
        if is_mounted(&self.mnt) {
            let _ = Command::new("fusermount3").arg("-u").arg(&self.mnt).stderr(Stdio::null()).status();
            if is_mounted(&self.mnt) {
                let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
            }
        }
        if let Some(mut c) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                match c.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                    _ => {
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                }
            }
        }
    }
}

impl Mounted {
    /// Kills the daemon with SIGKILL (a crash) and clears the dead mount.
    pub fn kill(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("fusermount3").arg("-u").arg(&self.mnt).stderr(Stdio::null()).status();
        if is_mounted(&self.mnt) {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        self.stop();
        let _ = fs::remove_file(&self.log);
    }
}

/// Runs the tierfs binary to completion.
pub fn tierfs(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).output().expect("run tierfs")
}

/// Runs a shell command as another user (uid/gid 65534, no supplementary groups).
pub fn as_user(uid: u32, script: &str) -> std::process::Output {
    Command::new("setpriv")
        .args([&format!("--reuid={uid}"), &format!("--regid={uid}"), "--clear-groups", "--", "sh", "-c", script])
        .output()
        .expect("setpriv")
}

/// A small ext4 file system on a loop device, as a full-able SSD tier.
/// Unmounted on drop.
pub struct LoopFs {
    pub dir: PathBuf,
    img: PathBuf,
}

impl LoopFs {
    pub fn new(area: &Area, name: &str, megabytes: u64) -> Self {
        Self::with_reserve(area, name, megabytes, 0)
    }

    /// With `reserve` percent of the blocks reserved for root.
    pub fn with_reserve(area: &Area, name: &str, megabytes: u64, reserve: u32) -> Self {
        let img = area.path(&format!("{name}.img"));
        let dir = area.path(name);
        fs::create_dir_all(&dir).unwrap();
        let f = fs::File::create(&img).unwrap();
        f.set_len(megabytes << 20).unwrap();
        drop(f);
        let ok = Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", &reserve.to_string()])
            .arg(&img)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mkfs.ext4");
        let ok = Command::new("mount").args(["-o", "loop"]).arg(&img).arg(&dir).status().unwrap().success();
        assert!(ok, "mount -o loop");
        let _ = fs::remove_dir(dir.join("lost+found"));
        LoopFs { dir, img }
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if Command::new("umount").arg(&self.dir).status().map(|s| !s.success()).unwrap_or(true) {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
        let _ = fs::remove_file(&self.img);
    }
}

/// Polls `cond` for up to `secs` seconds.
pub fn wait_for(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}

/// An extended attribute of `p` as text, if it has one.
pub fn xattr(p: &Path, name: &str) -> Option<String> {
    String::from_utf8(xattr_bytes(p, name)?).ok()
}

/// An extended attribute of `p`, if it has one.
pub fn xattr_bytes(p: &Path, name: &str) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let cp = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    let cn = std::ffi::CString::new(name).ok()?;
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    let n = unsafe { libc::lgetxattr(cp.as_ptr(), cn.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return None;
    }
    buf.truncate(n as usize);
    Some(buf)
}

/// Waits (up to three seconds: a migration in flight has a file on both
/// tiers for a moment) until the file at `rel` is on the tiers its
/// placement names, as `user.tierfs.placement` tells, and returns that
/// placement; `Err` with what was seen if it never is.
pub fn settled_placement(area: &Area, mnt: &Path, rel: &str) -> Result<String, String> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let on_ssd = area.ssd().join(rel).exists();
        let on_hdd = area.hdd().join(rel).exists();
        let placement = xattr(&mnt.join(rel), "user.tierfs.placement").unwrap_or_default();
        let fits = match placement.as_str() {
            "ssd" => on_ssd && !on_hdd,
            "hdd" => on_hdd && !on_ssd,
            "hdd+ssd-copy" => on_ssd && on_hdd,
            _ => false,
        };
        if fits {
            return Ok(placement);
        }
        if Instant::now() > deadline {
            return Err(format!("{rel}: placement {placement:?}, on ssd={on_ssd} hdd={on_hdd}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What `du` counts for the regular files of a tier: their allocated
/// bytes (each backing inode once), without tierfs's own `.tierfs`; and
/// how many such files there are.
pub fn du_files(tier: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let mut bytes = 0;
    let mut stack = vec![tier.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if d == tier && e.file_name() == ".tierfs" {
                // Shadows of split files are charged to the SSD account.
                stack.push(p.join("shadow"));
                continue;
            }
            let Ok(md) = fs::symlink_metadata(&p) else { continue };
            if md.is_dir() {
                stack.push(p);
            } else if md.is_file() && seen.insert(md.ino()) {
                bytes += md.blocks() * 512;
            }
        }
    }
    (bytes, seen.len() as u64)
}

/// Regular files (distinct inodes) below `dir`, through the mount.
pub fn live_files(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let Ok(md) = fs::symlink_metadata(e.path()) else { continue };
            if md.is_dir() {
                stack.push(e.path());
            } else if md.is_file() {
                seen.insert(md.ino());
            }
        }
    }
    seen.len() as u64
}

/// `tierfs stats --json` of a mount.
pub fn stats_json(mnt: &Path) -> serde_json::Value {
    let o = tierfs(&["stats", mnt.to_str().unwrap(), "--json"]);
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("stats: {e}: {}", String::from_utf8_lossy(&o.stderr)))
}

/// Waits (up to ten seconds: migrations in flight hold reservations) until
/// the statistics track exactly the live files and the SSD account is
/// within one 4-KiB block per file of what the SSD holds; `Err` with the
/// figures if it never is.
pub fn account_matches(area: &Area, mnt: &Path) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = stats_json(mnt);
        let tracked = v["tracked_files"].as_u64().unwrap_or(u64::MAX);
        let charged = v["tiers"][0]["charged_bytes"].as_u64().unwrap_or(u64::MAX);
        let live = live_files(mnt);
        let (du, on_ssd) = du_files(&area.ssd());
        let slack = 4096 * on_ssd.max(1);
        if tracked == live && charged.abs_diff(du) <= slack {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "tracked {tracked} files, {live} live; SSD account {charged} bytes, du {du} bytes in {on_ssd} files"
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// An ext4 file system of its own on a loop device, as an HDD tier whose
/// disk nobody else uses: made without lazy initialisation (ext4lazyinit
/// would write the inode tables in the background for minutes) and mounted
/// `noatime` (a read would write an access time). The loop device is
/// attached explicitly, so its `/sys/block/loopN/stat` is known; dropping
/// it unmounts the file system, detaches the device and removes the image,
/// whatever happened before.
pub struct HddLoop {
    pub dir: PathBuf,
    img: PathBuf,
    /// `/dev/loopN`.
    pub dev: String,
}

impl HddLoop {
    /// `megabytes` of ext4 at `dir` (made if missing), its image in `area`.
    pub fn new(area: &Area, dir: &Path, megabytes: u64) -> Self {
        let img = area.path(&format!("{}.img", dir.file_name().unwrap().to_string_lossy()));
        fs::create_dir_all(dir).unwrap();
        fs::File::create(&img).unwrap().set_len(megabytes << 20).unwrap();
        let ok = Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", "0", "-E", "lazy_itable_init=0,lazy_journal_init=0"])
            .arg(&img)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mkfs.ext4");
        let out = Command::new("losetup").args(["--find", "--show"]).arg(&img).output().unwrap();
        assert!(out.status.success(), "losetup: {}", String::from_utf8_lossy(&out.stderr));
        let dev = String::from_utf8(out.stdout).unwrap().trim().to_string();
        let l = HddLoop { dir: dir.to_path_buf(), img, dev };
        l.mount();
        let _ = fs::remove_dir(dir.join("lost+found"));
        l
    }

    fn mount(&self) {
        let ok = Command::new("mount").args(["-o", "noatime"]).arg(&self.dev).arg(&self.dir).status().unwrap();
        assert!(ok.success(), "mount {}", self.dev);
    }

    /// Unmounts and mounts the file system again: nothing of it is left in
    /// the page, inode or dentry caches, as after a reboot or long memory
    /// pressure.
    pub fn remount(&self) {
        assert!(Command::new("umount").arg(&self.dir).status().unwrap().success(), "umount {}", self.dir.display());
        self.mount();
    }

    /// Writes back whatever the file system holds dirty (syncfs).
    pub fn sync(&self) {
        assert!(Command::new("sync").arg("-f").arg(&self.dir).status().unwrap().success());
    }

    /// The loop device's counters so far, from `/sys/block/loopN/stat`:
    /// requests completed (reads, writes) and sectors (read, written).
    pub fn counts(&self) -> DiskCounts {
        let name = self.dev.trim_start_matches("/dev/");
        let s = fs::read_to_string(format!("/sys/block/{name}/stat")).unwrap();
        let f: Vec<u64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();
        DiskCounts { requests: (f[0], f[4]), sectors: (f[2], f[6]) }
    }
}

/// A disk's counters (see [`HddLoop::counts`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskCounts {
    /// Read and write requests completed.
    pub requests: (u64, u64),
    /// Sectors read and written.
    pub sectors: (u64, u64),
}

impl Drop for HddLoop {
    fn drop(&mut self) {
        if is_mounted(&self.dir) && !Command::new("umount").arg(&self.dir).status().is_ok_and(|s| s.success()) {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
        let _ = fs::remove_file(&self.img);
    }
}

/// Waits until the HDD's disk is quiet and the daemon (a `--quiet-hdd`
/// mount) has seen it idle for its idle time, `idle` seconds (the gate
/// over held work closed), and returns the disk's counters then. The file
/// system is synced first, and no sector may then move for 5 s more: ext4
/// reads a few block bitmaps a second after it is mounted (its lazyinit
/// thread's prefetch), and writes back what the mount wrote.
pub fn asleep(m: &Mounted, hdd: &HddLoop, idle: f64) -> DiskCounts {
    for _ in 0..10 {
        hdd.sync();
        let slept = wait_for(60, || {
            let h = &stats_json(&m.mnt)["hdd"];
            h["open"].is_null() && h["disk_idle_secs"].as_f64().is_some_and(|s| s >= idle)
        });
        assert!(slept, "the HDD never went idle: {}\n{}", stats_json(&m.mnt)["hdd"], m.log_tail(30));
        let c = hdd.counts();
        std::thread::sleep(Duration::from_secs(5));
        if hdd.counts().sectors == c.sectors && stats_json(&m.mnt)["hdd"]["open"].is_null() {
            return c;
        }
        eprintln!("the HDD's disk was not quiet yet: {c:?} -> {:?}", hdd.counts());
    }
    panic!("the HDD's disk never stayed quiet for 5 s: {}", stats_json(&m.mnt)["hdd"]);
}
