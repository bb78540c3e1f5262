//! Modelled devices under the kernel (`tierfs bench devices`): a loop
//! device over a server that delays each request as a device profile says,
//! formatted ext4 and mounted.

use crate::harness::{is_mounted, tierfs, Area};
use std::fs;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tierfs_core::device::Profile;

/// The devices below a folder, taken down when dropped (a failed test
/// leaves no mount, loop device or server behind).
struct DevicesUp(PathBuf);

impl DevicesUp {
    fn up(dir: &Path, extra: &[&str]) -> DevicesUp {
        let mut args = vec!["bench", "devices", "up", "--dir", dir.to_str().unwrap()];
        args.extend(extra);
        let o = tierfs(&args);
        let up = DevicesUp(dir.to_path_buf());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        up
    }

    fn model(&self, device: &str, command: &str) {
        let o = tierfs(&["bench", "devices", "model", device, command, "--dir", self.0.to_str().unwrap()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }

    fn status(&self) -> serde_json::Value {
        let o = tierfs(&["bench", "devices", "status", "--json", "--dir", self.0.to_str().unwrap()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    }

    fn down(&self) -> std::process::Output {
        tierfs(&["bench", "devices", "down", "--dir", self.0.to_str().unwrap()])
    }
}

impl Drop for DevicesUp {
    fn drop(&mut self) {
        let o = self.down();
        if !o.status.success() {
            eprintln!("devices down: {}", String::from_utf8_lossy(&o.stderr));
        }
    }
}

/// A device's entry in `status --json`.
fn device<'a>(status: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    status.as_array().unwrap().iter().find(|d| d["device"]["name"] == name).unwrap()
}

/// The loop devices whose backing file is `file`.
fn loops_over(file: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in fs::read_dir("/sys/block").unwrap().flatten() {
        if let Ok(b) = fs::read_to_string(e.path().join("loop/backing_file")) {
            if Path::new(b.trim()) == file {
                out.push(e.file_name().to_string_lossy().into_owned());
            }
        }
    }
    out
}

/// `reads` O_DIRECT reads of 4 KiB at random block offsets of `f` (never
/// one right after the last); the mean time of one.
fn random_direct_reads(path: &Path, size: u64, reads: u32) -> Duration {
    let f = fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path).unwrap();
    // O_DIRECT wants a buffer aligned to the logical block size.
    let layout = std::alloc::Layout::from_size_align(4096, 4096).unwrap();
    // SAFETY: a non-zero size; freed below with the same layout.
    let ptr = unsafe { std::alloc::alloc(layout) };
    assert!(!ptr.is_null());
    // SAFETY: 4096 bytes allocated above, used only here.
    let buf = unsafe { std::slice::from_raw_parts_mut(ptr, 4096) };
    let blocks = size / 4096;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut last = u64::MAX;
    let t = Instant::now();
    for _ in 0..reads {
        let mut b;
        loop {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b = x % blocks;
            if b != last.wrapping_add(1) && b != last {
                break;
            }
        }
        last = b;
        assert_eq!(f.read_at(buf, b * 4096).unwrap(), 4096);
    }
    let took = t.elapsed();
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(ptr, layout) };
    took / reads
}

/// The proof: ext4 on the modelled HDD, 4-KiB random reads with
/// O_DIRECT take the profile's service time (access plus transfer) within
/// 20 %, and the block layer counts them; the modelled SSD is far faster;
/// an idle HDD spins down and the next read waits for its spin-up; `down`
/// leaves nothing behind.
#[test]
fn direct_random_reads_on_the_modelled_hdd_take_the_profiles_service_time() {
    let area = Area::new();
    let dir = area.path("devices");
    let up =
        DevicesUp::up(&dir, &["--ssd-size", "256M", "--hdd-size", "256M", "--standby", "3s", "--spinup", "1500ms"]);
    let hdd = dir.join("hdd");
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap();
    let line = mounts.lines().find(|l| l.split(' ').nth(1) == Some(hdd.to_str().unwrap())).unwrap();
    assert!(line.starts_with("/dev/loop") && line.split(' ').nth(2) == Some("ext4"), "{line}");
    let backing = dir.join("hdd.dev").join("disk");
    let loops = loops_over(&backing);
    assert_eq!(loops.len(), 1, "{loops:?}");
    let dio = fs::read_to_string(format!("/sys/block/{}/loop/dio", loops[0])).unwrap();
    assert_eq!(dio.trim(), "1", "the loop device uses direct I/O");

    // 32 MiB on each, written with the models paused (fast), on the media.
    let size = 32u64 << 20;
    for d in ["ssd", "hdd"] {
        up.model(d, "pause");
        let f = fs::File::create(dir.join(d).join("data")).unwrap();
        f.write_all_at(&vec![0x5a; size as usize], 0).unwrap();
        f.sync_all().unwrap();
        up.model(d, "resume");
    }
    let before = up.status();
    let reads = 60;
    let hdd_mean = random_direct_reads(&hdd.join("data"), size, reads);
    let after = up.status();

    let p = Profile::named("hdd-7200").unwrap();
    let service = p.read_access + p.transfer(4096, false);
    let ratio = hdd_mean.as_secs_f64() / service.as_secs_f64();
    assert!((0.8..=1.2).contains(&ratio), "mean {hdd_mean:?} against the profile's {service:?}: {ratio:.3}");
    let delta = |v: &serde_json::Value, part: &str, k: &str| {
        device(&after, "hdd")[part][k].as_f64().unwrap() - device(v, "hdd")[part][k].as_f64().unwrap()
    };
    assert!(delta(&before, "block", "reads") >= reads as f64, "the block layer counts them: {after}");
    assert!(delta(&before, "model", "reads") >= reads as f64, "{after}");
    let busy = delta(&before, "model", "busy_secs");
    assert!(busy >= service.as_secs_f64() * reads as f64 * 0.99, "{busy}");

    // The SSD's 4-KiB read is modelled at 28.6 µs; FUSE and the loop
    // device add their own time, but it stays far below the HDD's.
    let ssd_mean = random_direct_reads(&dir.join("ssd/data"), size, 200);
    eprintln!("4-KiB random O_DIRECT reads: HDD {hdd_mean:?} (profile {service:?}), SSD {ssd_mean:?}");
    assert!(ssd_mean * 20 < hdd_mean, "SSD {ssd_mean:?}, HDD {hdd_mean:?}");

    // Idle past the standby time: asleep; the next read spins it up. The
    // timed reads dirtied the file's atime, and ext4's journal commit of
    // it, seconds later, would wake the disk by itself (as it wakes a real
    // one): written out now, nothing else reaches the disk meanwhile.
    {
        let d = fs::File::open(&hdd).unwrap();
        // SAFETY: a valid descriptor, open for the call.
        assert_eq!(unsafe { libc::syncfs(std::os::unix::io::AsRawFd::as_raw_fd(&d)) }, 0);
    }
    let spinups = |s: &serde_json::Value| device(s, "hdd")["model"]["spinups"].as_u64().unwrap();
    let was = spinups(&up.status());
    assert!(crate::harness::wait_for(10, || device(&up.status(), "hdd")["model"]["asleep"] == true), "{}", up.status());
    let woke = random_direct_reads(&hdd.join("data"), size, 1);
    assert!(woke >= Duration::from_millis(1500) + service, "{woke:?}");
    let s = up.status();
    assert_eq!(spinups(&s), was + 1, "{s}");
    assert!(device(&s, "hdd")["model"]["standby_secs"].as_f64().unwrap() > 0.0, "{s}");
    assert_eq!(device(&s, "ssd")["model"]["spinups"], 0, "an SSD does not spin down");

    let o = up.down();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for d in ["ssd", "hdd", "ssd.dev", "hdd.dev"] {
        assert!(!is_mounted(&dir.join(d)), "{d} is still mounted");
    }
    assert!(loops_over(&backing).is_empty(), "a loop device is left");
    assert!(!dir.join("hdd.img").exists() && !dir.join("devices.json").exists());
}

#[test]
fn devices_up_twice_is_refused_and_down_without_devices_does_nothing() {
    let area = Area::new();
    let dir = area.path("devices");
    let up = DevicesUp::up(&dir, &["--only", "ssd", "--ssd-size", "64M"]);
    let o = tierfs(&["bench", "devices", "up", "--dir", dir.to_str().unwrap(), "--only", "ssd"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("already"), "{}", String::from_utf8_lossy(&o.stderr));
    let o = up.down();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = up.down();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("nothing"), "{}", String::from_utf8_lossy(&o.stdout));
}

/// A sweep on the devices: tierfs's baselines and one architecture beside
/// every peer (the plain file systems, mergerfs and its tiered-cache
/// recipe with the mover), each run's device counts kept, nothing left
/// mounted afterwards.
#[test]
fn a_sweep_on_the_devices_runs_tierfs_beside_its_peers() {
    let area = Area::new();
    let dir = area.path("devices");
    let up = DevicesUp::up(&dir, &["--ssd-size", "256M", "--hdd-size", "512M"]);
    let (out, work) = (area.path("out"), area.path("work"));
    let o = tierfs(&[
        "bench",
        "sweep",
        "--devices",
        dir.to_str().unwrap(),
        "--preset",
        "compare",
        "--only",
        "mail",
        "--arch",
        "dynamic-hot-dst",
        "--arch",
        "hdd-alone",
        "--arch",
        "ssd-alone",
        "--arch",
        "mergerfs",
        "--arch",
        "mergerfs-cache",
        "--sizes",
        "50",
        "--scale",
        "0.002",
        "--out",
        out.to_str().unwrap(),
        "--work",
        work.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<tierfs_bench::sweep::Row> =
        serde_json::from_str(&fs::read_to_string(out.join("rows.json")).unwrap()).unwrap();
    let labels: Vec<(&str, u32)> = rows.iter().map(|r| (r.arch.as_str(), r.pct)).collect();
    assert_eq!(
        labels,
        [
            ("hdd-only", 0),
            ("ssd-only", 0),
            ("dynamic-hot-dst", 50),
            ("hdd-alone", 0),
            ("ssd-alone", 0),
            ("mergerfs", 0),
            ("mergerfs-cache", 50)
        ]
    );
    for r in &rows {
        let d = r.devices.as_ref().unwrap_or_else(|| panic!("{}: no device counts", r.arch));
        assert!(r.report.ops > 0 && r.report.txn_time_secs.is_some(), "{r:?}");
        assert!(r.report.txn_time_secs.unwrap() >= d.flush_secs, "the write-back counts in the run: {r:?}");
        let (ssd, hdd) = (d.disk("ssd").unwrap(), d.disk("hdd").unwrap());
        // Whatever a system keeps where, the devices it writes to see it.
        let wrote = |x: &tierfs_bench::sweep::DiskRun| x.model.writes > 0 && x.block.writes > 0;
        match r.arch.as_str() {
            "hdd-only" | "hdd-alone" | "mergerfs" => assert!(wrote(hdd) && !wrote(ssd), "{}: {d:?}", r.arch),
            "ssd-only" | "ssd-alone" => assert!(wrote(ssd) && !wrote(hdd), "{}: {d:?}", r.arch),
            _ => assert!(wrote(ssd) || wrote(hdd), "{}: {d:?}", r.arch),
        }
    }
    let recipe = rows.last().unwrap();
    assert!(recipe.mover.is_some_and(|m| m.runs > 0), "the mover ran: {recipe:?}");
    assert!(rows[2].run_hit_ratio.is_some() && recipe.run_hit_ratio.is_none());
    let readme = fs::read_to_string(out.join("README.md")).unwrap();
    assert!(readme.contains("modelled devices under the kernel") && readme.contains("mergerfs-cache"), "{readme}");
    let table = fs::read_to_string(out.join("table.md")).unwrap();
    assert!(table.contains("run once, on the same devices: hdd-alone"), "{table}");
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(!mounts.contains(work.to_str().unwrap()), "a run's mount is left: {mounts}");
    let o = up.down();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
