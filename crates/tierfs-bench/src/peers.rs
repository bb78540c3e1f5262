//! The systems `tierfs bench sweep --devices` measures beside tierfs on
//! the same modelled devices, each as a user sets it up: the HDD or the
//! SSD alone (a plain ext4), mergerfs over the HDD, and mergerfs's
//! "tiered cache" recipe (a pool of the SSD in front of the HDD that
//! creates files on the SSD, and a mover that a schedule runs to move the
//! files with the oldest access time to a pool of the HDD when the SSD is
//! fuller than a threshold; `benches/mergerfs-mover.sh`).

use crate::devices::run;
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A peer of tierfs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Peer {
    /// The HDD's file system alone.
    HddAlone,
    /// The SSD's file system alone.
    SsdAlone,
    /// mergerfs with the HDD as its only branch.
    Mergerfs,
    /// The tiered-cache recipe: files created on the SSD up to the SSD
    /// size of the run, the mover run every `every` and moving files
    /// while the SSD holds more than `percent` % of that size.
    MergerfsCache {
        /// How often the mover runs (the recipe: an hourly cron job; the
        /// sweep's runs last seconds).
        every: Duration,
        /// The mover's threshold, percent of the SSD size.
        percent: u32,
    },
}

impl Peer {
    /// Its label in tables.
    pub fn label(self) -> &'static str {
        match self {
            Peer::HddAlone => "hdd-alone",
            Peer::SsdAlone => "ssd-alone",
            Peer::Mergerfs => "mergerfs",
            Peer::MergerfsCache { .. } => "mergerfs-cache",
        }
    }

    /// Whether it runs at each SSD size (else once).
    pub fn sized(self) -> bool {
        matches!(self, Peer::MergerfsCache { .. })
    }

    /// Every peer, the recipe's mover every `every` at 80 % (the
    /// threshold of the recipe's crontab example).
    pub fn all(every: Duration) -> [Peer; 4] {
        [Peer::HddAlone, Peer::SsdAlone, Peer::Mergerfs, Peer::MergerfsCache { every, percent: 80 }]
    }
}

/// mergerfs's options for every pool: no page cache of its own (direct
/// I/O, as tierfs's userspace mode) and inode numbers from the branches,
/// as its manual's basic setup; but the page cache of the branches' files
/// kept at close (the basic setup's `dropcacheonclose=true` drops it, and
/// every reread then goes to the device: it is meant against the double
/// caching of `cache.files=partial`); no free space kept on a branch (its
/// default of 4G is more than the devices hold) unless a branch says so.
const MERGERFS_OPTS: &str = "cache.files=off,allow_other,use_ino,minfreespace=0";

/// Mounts a mergerfs pool of `branches` (as mergerfs takes them:
/// `a=RW,MINFREE:b`) on `mnt` with `options` besides the common ones.
pub fn mount_pool(branches: &str, mnt: &Path, options: &str) -> io::Result<()> {
    let opts = if options.is_empty() { MERGERFS_OPTS.to_string() } else { format!("{MERGERFS_OPTS},{options}") };
    run(Command::new("mergerfs").args(["-o", &opts, branches]).arg(mnt)).map(drop)
}

/// Unmounts a pool (retrying while busy).
pub fn unmount_pool(mnt: &Path) -> io::Result<()> {
    let mut last = None;
    for _ in 0..50 {
        match run(Command::new("fusermount3").arg("-u").arg(mnt)) {
            Ok(_) => return Ok(()),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(last.unwrap_or_else(|| io::Error::other("cannot unmount")))
}

/// The branch list of the recipe's cache pool: the SSD first, taking new
/// files while it has more than `free - capacity` bytes free (mergerfs's
/// per-branch minfreespace), so that the SSD holds at most `capacity`
/// bytes of new files; then the HDD.
pub fn cache_branches(ssd: &Path, hdd: &Path, ssd_free: u64, capacity: u64) -> String {
    format!("{}=RW,{}:{}=RW", ssd.display(), ssd_free.saturating_sub(capacity).max(1), hdd.display())
}

/// Bytes free for an unprivileged user on the file system of `p`.
pub fn free_bytes(p: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: a valid path and an out pointer to zeroed memory.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(s.f_bavail as u64 * s.f_frsize as u64)
}

/// What the mover did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoverCounts {
    /// Times it ran.
    pub runs: u64,
    /// Files it moved.
    pub moved: u64,
    /// Runs that failed (a file the workload removed while rsync copied
    /// it, for one).
    pub failed: u64,
}

/// The mover, run on a schedule by a thread until stopped.
pub struct Mover {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<MoverCounts>,
}

impl Mover {
    /// Runs `script CACHE BASE CAPACITY PERCENT` every `every`.
    pub fn start(
        script: PathBuf,
        cache: PathBuf,
        base: PathBuf,
        capacity: u64,
        percent: u32,
        every: Duration,
    ) -> Mover {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let mut c = MoverCounts::default();
            let mut next = Instant::now() + every;
            loop {
                match stopped.recv_timeout(next.saturating_duration_since(Instant::now())) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return c,
                }
                let out = Command::new("bash")
                    .arg(&script)
                    .arg(&cache)
                    .arg(&base)
                    .arg(capacity.to_string())
                    .arg(percent.to_string())
                    .stdin(Stdio::null())
                    .stderr(Stdio::null())
                    .output();
                c.runs += 1;
                match out {
                    Ok(o) => {
                        c.moved +=
                            String::from_utf8_lossy(&o.stdout).lines().filter(|l| l.starts_with("moved ")).count()
                                as u64;
                        if !o.status.success() {
                            c.failed += 1;
                        }
                    }
                    Err(_) => c.failed += 1,
                }
                // As cron: the next run at its time, not a period after this one ended.
                next = (next + every).max(Instant::now());
            }
        });
        Mover { stop, thread }
    }

    /// Stops the schedule (a run under way finishes) and says what it did.
    pub fn stop(self) -> MoverCounts {
        let _ = self.stop.send(());
        self.thread.join().unwrap_or_default()
    }
}

/// The mover's script (`benches/mergerfs-mover.sh`), written to `dir`.
pub fn write_mover_script(dir: &Path) -> io::Result<PathBuf> {
    let p = dir.join("mergerfs-mover.sh");
    std::fs::write(&p, include_str!("../../../benches/mergerfs-mover.sh"))?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_pool_keeps_the_ssd_to_its_size() {
        let b = cache_branches(Path::new("/d/ssd/run"), Path::new("/d/hdd/run"), 900, 250);
        assert_eq!(b, "/d/ssd/run=RW,650:/d/hdd/run=RW");
        // An SSD size past the free space: the SSD takes files while any space is left.
        assert!(cache_branches(Path::new("/s"), Path::new("/h"), 100, 250).starts_with("/s=RW,1:"));
    }

    #[test]
    fn peers_are_named_and_only_the_cache_recipe_runs_at_each_size() {
        let all = Peer::all(Duration::from_secs(2));
        let labels: Vec<&str> = all.iter().map(|p| p.label()).collect();
        assert_eq!(labels, ["hdd-alone", "ssd-alone", "mergerfs", "mergerfs-cache"]);
        assert_eq!(all.iter().filter(|p| p.sized()).count(), 1);
        let json = serde_json::to_string(&all[3]).unwrap();
        assert!(json.contains("mergerfs-cache"), "{json}");
    }

    /// The mover moves the oldest files until the branch is under its
    /// threshold (needs rsync: scripts/setup.sh installs it).
    #[test]
    fn the_mover_moves_the_oldest_files_until_the_branch_is_under_its_threshold() {
        if Command::new("rsync").arg("--version").output().is_err() {
            panic!("rsync is missing: run scripts/setup.sh");
        }
        let dir = tempfile::tempdir().unwrap();
        let (cache, base) = (dir.path().join("cache"), dir.path().join("base"));
        std::fs::create_dir_all(cache.join("d")).unwrap();
        std::fs::create_dir_all(&base).unwrap();
        // Four files of 1000 bytes, accessed in the order of their names.
        for (i, n) in ["a", "b", "c", "d"].iter().enumerate() {
            let p = cache.join("d").join(n);
            std::fs::write(&p, vec![0u8; 1000]).unwrap();
            let t = libc::timespec { tv_sec: 1_000_000 + i as i64, tv_nsec: 0 };
            let times = [t, t];
            let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
            // SAFETY: a valid path and two timespecs.
            assert_eq!(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) }, 0);
        }
        let script = write_mover_script(dir.path()).unwrap();
        // Capacity 4000, threshold 60 %: 2400 bytes at most, so two files go.
        let out = Command::new("bash").arg(&script).arg(&cache).arg(&base).args(["4000", "60"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "moved d/a\nmoved d/b\n");
        assert!(base.join("d/a").exists() && base.join("d/b").exists() && !cache.join("d/a").exists());
        assert!(cache.join("d/c").exists() && cache.join("d/d").exists());
        // Under the threshold: nothing to do.
        let out = Command::new("bash").arg(&script).arg(&cache).arg(&base).args(["4000", "60"]).output().unwrap();
        assert!(out.status.success() && out.stdout.is_empty());
    }
}
