//! The architectures on real mounts: files move (or get copies) the way
//! each one says.

use crate::harness::{tierfs, wait_for, Area, LoopFs, Mounted};
use std::fs;
use std::path::Path;

fn status(m: &Mounted) -> serde_json::Value {
    let o = tierfs(&["stats", m.mnt.to_str().unwrap(), "--json", "--top", "100"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn read_n(p: &Path, n: usize) {
    for _ in 0..n {
        let _ = fs::read(p).unwrap();
    }
}

fn on(dir: &Path, name: &str) -> bool {
    dir.join(name).exists()
}

/// Mount arguments for a test: userspace I/O (every read counts), state
/// off the SSD tier so it does not take its space.
fn args<'a>(area: &'a Area, extra: &[&'a str]) -> Vec<String> {
    let mut v: Vec<String> = ["--io-mode", "userspace", "--state-dir", area.path("state").to_str().unwrap()]
        .iter()
        .map(|s| s.to_string())
        .collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn mount(area: &Area, ssd: &Path, extra: &[&str]) -> Mounted {
    let a = args(area, extra);
    let a: Vec<&str> = a.iter().map(|s| s.as_str()).collect();
    Mounted::with(ssd, &area.hdd(), &area.mnt(), &a)
}

#[test]
fn dynamic_hot_dst_promotes_a_small_hot_file_but_never_a_large_one() {
    let area = Area::new();
    let ssd = LoopFs::new(&area, "ssdfs", 32);
    let m = mount(&area, &ssd.dir, &["--policy", "dynamic-hot-dst"]);
    fs::write(m.p("small"), vec![1u8; 8192]).unwrap();
    fs::write(m.p("large"), vec![2u8; 2 << 20]).unwrap();
    assert!(on(&area.hdd(), "small") && on(&area.hdd(), "large"), "new files start on the HDD");
    read_n(&m.p("small"), 3);
    read_n(&m.p("large"), 10);
    assert!(wait_for(5, || on(&ssd.dir, "small") && !on(&area.hdd(), "small")), "the small file moves to the SSD");
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(on(&area.hdd(), "large") && !on(&ssd.dir, "large"), "the 2 MB file is sieved");
    assert_eq!(fs::read(m.p("small")).unwrap(), vec![1u8; 8192]);
    let v = status(&m);
    assert_eq!(v["migrations"]["promotions"], 1, "{v}");
    let o = tierfs(&["stats", "--file", m.p("large").to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("sieved"), "{}", String::from_utf8_lossy(&o.stdout));
    // The placement survives a remount.
    m.unmount();
    let m = mount(&area, &ssd.dir, &["--policy", "dynamic-hot-dst"]);
    assert_eq!(fs::read(m.p("small")).unwrap(), vec![1u8; 8192]);
    assert!(on(&ssd.dir, "small"));
    m.unmount();
}

#[test]
fn a_full_ssd_makes_the_coldest_file_leave_first() {
    let area = Area::new();
    let ssd = LoopFs::new(&area, "ssdfs", 32);
    // The papers' semantics: eviction only when room is needed.
    let m =
        mount(&area, &ssd.dir, &["--policy", "dynamic-hot-dst", "--ssd-capacity", "120K", "--watermarks", "100,100"]);
    for name in ["a", "b", "c", "d"] {
        fs::write(m.p(name), vec![0u8; 40 << 10]).unwrap();
    }
    // Heat: a > b > c, each promoted on its read.
    for (i, (name, reads)) in [("a", 6), ("b", 4), ("c", 2)].into_iter().enumerate() {
        read_n(&m.p(name), reads);
        assert!(wait_for(5, || status(&m)["migrations"]["promotions"] == i as u64 + 1), "{name} promoted");
    }
    // The SSD holds three 40K files; d gets hottest and needs room.
    read_n(&m.p("d"), 8);
    assert!(wait_for(5, || status(&m)["migrations"]["promotions"] == 4), "d promoted: {}", status(&m));
    let where_ = |m: &Mounted| format!("{}\n{}", status(m), m.log_text());
    assert!(
        on(&ssd.dir, "d") && on(&area.hdd(), "c") && !on(&ssd.dir, "c"),
        "c, the coldest, was evicted: {}",
        where_(&m)
    );
    assert!(on(&ssd.dir, "a") && on(&ssd.dir, "b"), "a and b stay: {}", where_(&m));
    let v = status(&m);
    assert_eq!(v["migrations"]["evictions"], 1, "{v}");
    assert!(v["admission_threshold"].as_u64().unwrap() > 0, "the eviction raised the admission threshold: {v}");
    for name in ["a", "b", "c", "d"] {
        assert_eq!(fs::read(m.p(name)).unwrap().len(), 40 << 10);
    }
    m.unmount();
}

#[test]
fn cold_dst_writes_land_on_the_hdd_when_the_real_ssd_is_full() {
    let area = Area::new();
    let ssd = LoopFs::new(&area, "ssdfs", 8);
    let m = mount(&area, &ssd.dir, &["--policy", "plain-cold-dst"]);
    // Twice what the SSD holds, in files under the sieve: no ENOSPC.
    for i in 0..16 {
        fs::write(m.p(&format!("f{i}")), vec![i as u8; 900 << 10]).unwrap_or_else(|e| panic!("write f{i}: {e}"));
    }
    for i in 0..16 {
        assert_eq!(fs::read(m.p(&format!("f{i}"))).unwrap(), vec![i as u8; 900 << 10]);
    }
    let on_hdd = (0..16).filter(|i| on(&area.hdd(), &format!("f{i}"))).count();
    let on_ssd = (0..16).filter(|i| on(&ssd.dir, &format!("f{i}"))).count();
    assert_eq!(on_hdd + on_ssd, 16, "each file exactly once");
    assert!(on_hdd >= 8 && on_ssd >= 1, "{on_ssd} on SSD, {on_hdd} on HDD");
    // The oldest (coldest) files left first.
    assert!(on(&area.hdd(), "f0"), "f0 was the coldest");
    m.unmount();
}

#[test]
fn plain_cold_dst_never_brings_a_file_back_but_dynamic_cold_dst_does() {
    for (policy, comes_back) in [("plain-cold-dst", false), ("dynamic-cold-dst", true)] {
        let area = Area::new();
        let ssd = LoopFs::new(&area, "ssdfs", 32);
        let m = mount(&area, &ssd.dir, &["--policy", policy, "--ssd-capacity", "100K"]);
        fs::write(m.p("old"), vec![1u8; 60 << 10]).unwrap();
        assert!(on(&ssd.dir, "old"), "{policy}: new files start on the SSD");
        fs::write(m.p("new"), vec![2u8; 60 << 10]).unwrap();
        assert!(on(&area.hdd(), "old"), "{policy}: the SSD was full, old was demoted");
        read_n(&m.p("old"), 5);
        let back = wait_for(3, || on(&ssd.dir, "old"));
        assert_eq!(back, comes_back, "{policy}");
        m.unmount();
    }
}

#[test]
fn interval_hot_dst_moves_the_hottest_at_each_interval() {
    let area = Area::new();
    let ssd = LoopFs::new(&area, "ssdfs", 32);
    let m = mount(&area, &ssd.dir, &["--policy", "interval-hot-dst", "--interval", "1s"]);
    fs::write(m.p("hot"), vec![1u8; 4096]).unwrap();
    fs::write(m.p("cold"), vec![2u8; 4096]).unwrap();
    read_n(&m.p("hot"), 5);
    assert!(wait_for(5, || on(&ssd.dir, "hot")), "moved at an interval run");
    assert!(wait_for(5, || on(&ssd.dir, "cold")), "written once, so warm enough with an empty SSD");
    m.unmount();
}

#[test]
fn on_demand_cache_copies_writes_through_and_drops_a_copy_that_grows_past_the_sieve() {
    let area = Area::new();
    let ssd = LoopFs::new(&area, "ssdfs", 32);
    let m = mount(&area, &ssd.dir, &["--policy", "on-demand-cache"]);
    fs::write(m.p("page"), b"version 1").unwrap();
    read_n(&m.p("page"), 3);
    assert!(wait_for(5, || on(&ssd.dir, "page")), "read from the HDD: cached");
    assert!(on(&area.hdd(), "page"), "the HDD keeps the primary copy");
    fs::write(m.p("page"), b"version 2").unwrap();
    assert_eq!(fs::read(m.p("page")).unwrap(), b"version 2");
    assert_eq!(fs::read(ssd.dir.join("page")).unwrap(), b"version 2", "write-through updates the copy");
    assert_eq!(fs::read(area.hdd().join("page")).unwrap(), b"version 2");
    // Appending past the 1 MiB sieve invalidates the copy.
    use std::io::Write;
    let mut f = fs::OpenOptions::new().append(true).open(m.p("page")).unwrap();
    f.write_all(&vec![7u8; 2 << 20]).unwrap();
    drop(f);
    assert!(wait_for(5, || status(&m)["migrations"]["drops"] == 1), "copy dropped: {}", status(&m));
    assert!(!on(&ssd.dir, "page"));
    assert_eq!(fs::read(m.p("page")).unwrap().len(), 9 + (2 << 20));
    assert_eq!(status(&m)["migrations"]["copies"], 1);
    m.unmount();
}

#[test]
fn hard_linked_files_move_with_all_their_names() {
    let area = Area::new();
    let ssd = LoopFs::new(&area, "ssdfs", 32);
    let m = mount(&area, &ssd.dir, &["--policy", "dynamic-hot-dst"]);
    fs::create_dir(m.p("d")).unwrap();
    fs::write(m.p("f"), b"linked").unwrap();
    fs::hard_link(m.p("f"), m.p("d/g")).unwrap();
    read_n(&m.p("d/g"), 3);
    assert!(wait_for(5, || status(&m)["migrations"]["promotions"] == 1), "moved");
    assert!(on(&ssd.dir, "f") && on(&ssd.dir, "d/g"), "both names moved");
    assert!(!on(&area.hdd(), "f") && !on(&area.hdd(), "d/g"));
    use std::os::unix::fs::MetadataExt;
    assert_eq!(fs::metadata(ssd.dir.join("f")).unwrap().ino(), fs::metadata(ssd.dir.join("d/g")).unwrap().ino());
    assert_eq!(fs::metadata(m.p("f")).unwrap().nlink(), 2);
    m.unmount();
}

#[test]
fn passthrough_defers_a_move_until_the_last_close() {
    let area = Area::new();
    let ssd = LoopFs::new(&area, "ssdfs", 32);
    let state = area.path("state");
    let a = ["--io-mode", "passthrough", "--policy", "dynamic-hot-dst", "--state-dir", state.to_str().unwrap()];
    let m = Mounted::with(&ssd.dir, &area.hdd(), &area.mnt(), &a);
    fs::write(m.p("f"), b"passthrough").unwrap();
    let held = fs::File::open(m.p("f")).unwrap();
    read_n(&m.p("f"), 2);
    assert!(wait_for(5, || status(&m)["migrations"]["deferred"].as_array().unwrap().len() == 1), "{}", status(&m));
    assert!(on(&area.hdd(), "f") && !on(&ssd.dir, "f"), "not moved while open");
    drop(held);
    assert!(wait_for(5, || status(&m)["migrations"]["promotions"] == 1), "moved after the last close");
    assert!(on(&ssd.dir, "f") && !on(&area.hdd(), "f"));
    assert_eq!(fs::read(m.p("f")).unwrap(), b"passthrough");
    m.unmount();
}

#[test]
fn baselines_never_move_anything() {
    for (policy, tier) in [("hdd-only", "hdd"), ("ssd-only", "ssd")] {
        let area = Area::new();
        let ssd = LoopFs::new(&area, "ssdfs", 32);
        let m = mount(&area, &ssd.dir, &["--policy", policy]);
        fs::create_dir(m.p("d")).unwrap();
        fs::write(m.p("d/f"), b"x").unwrap();
        read_n(&m.p("d/f"), 10);
        std::thread::sleep(std::time::Duration::from_millis(400));
        let dir = if tier == "hdd" { area.hdd() } else { ssd.dir.clone() };
        assert!(on(&dir, "d/f"), "{policy}");
        let v = status(&m);
        assert_eq!(v["migrations"]["promotions"], 0, "{policy}: {v}");
        if policy == "hdd-only" {
            // Directories, too, live on the HDD in the HDD-only baseline.
            assert!(!on(&ssd.dir, "d"), "hdd-only keeps directory metadata on the HDD");
        }
        m.unmount();
    }
}

#[test]
fn bad_policy_options_are_refused() {
    let area = Area::new();
    for (args, needle) in [
        (vec!["--policy", "lru"], "unknown policy"),
        (vec!["--ssd-capacity", "lots"], "--ssd-capacity"),
        (vec!["--sieve", "1Q"], "--sieve"),
        (vec!["--interval", "0"], "--interval"),
    ] {
        let (s, h, m) = (area.ssd(), area.hdd(), area.mnt());
        let mut a = vec!["mount", s.to_str().unwrap(), h.to_str().unwrap(), m.to_str().unwrap()];
        a.extend(args);
        let o = tierfs(&a);
        assert!(!o.status.success());
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(needle), "{e}");
    }
}

#[test]
fn the_demo_promotes_the_small_files_it_reads_and_unmounts() {
    let area = crate::harness::Area::new();
    let dir = area.path("demo");
    let o = crate::harness::tierfs(&["demo", "--dir", dir.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", String::from_utf8_lossy(&o.stderr));
    let line =
        |name: &str| out.lines().find(|l| l.trim_start().starts_with(name) && !l.contains("bytes")).unwrap_or("");
    assert!(line("docs/readme.txt").contains("SSD"), "{out}");
    assert!(line("big.bin").contains("HDD"), "{out}");
    assert!(dir.join("ssd/docs/readme.txt").exists() && dir.join("hdd/big.bin").exists());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(!mounts.contains(dir.join("mnt").to_str().unwrap()), "the demo unmounts");
}

/// Hystor's data mover works in idle times (§5.4.2): while requests come
/// fast, promotions start at most `--busy-moves` a second, a pin goes at
/// once, and once the load stops the rest follow.
#[test]
fn moves_are_spaced_while_the_mount_is_busy_and_follow_once_it_is_idle() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let area = Area::new();
    let ssd = LoopFs::new(&area, "ssdfs", 32);
    // No kernel caching: each stat of the load is a request.
    let m = mount(&area, &ssd.dir, &["--policy", "dynamic-hot-dst", "--busy-moves", "2", "--cache-timeout", "0"]);
    let names: Vec<String> = (0..30).map(|i| format!("f{i}")).collect();
    for n in &names {
        fs::write(m.p(n), vec![7u8; 4096]).unwrap();
    }
    fs::write(m.p("pinned"), b"p").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (stop, p) = (stop.clone(), m.p("absent"));
        std::thread::spawn(move || {
            let (mut n, t) = (0u64, Instant::now());
            while !stop.load(Ordering::Relaxed) {
                let _ = fs::symlink_metadata(&p);
                n += 1;
            }
            n as f64 / t.elapsed().as_secs_f64()
        })
    };
    // The engine measures the rate every tick (100 ms).
    std::thread::sleep(Duration::from_millis(400));
    let t0 = Instant::now();
    for n in &names {
        read_n(&m.p(n), 3);
    }
    let ok = std::process::Command::new("setfattr")
        .args(["-n", "user.tierfs.pin", "-v", "ssd"])
        .arg(m.p("pinned"))
        .status()
        .unwrap();
    assert!(ok.success());
    let pinned = wait_for(5, || on(&ssd.dir, "pinned"));
    std::thread::sleep(Duration::from_secs(2));
    let promoted = names.iter().filter(|n| on(&ssd.dir, n)).count();
    let secs = t0.elapsed().as_secs_f64();
    let busy = status(&m)["migrations"]["busy"].clone();
    stop.store(true, Ordering::Relaxed);
    let rate = load.join().unwrap();
    assert!(rate >= 2000.0, "the load made only {rate:.0} requests a second: too few to test the gate");
    assert!(pinned, "a pin is the user's and goes at once under load");
    assert_eq!(busy, true, "tierfs stats says the mount is busy");
    assert!(
        promoted as f64 <= 2.0 * secs + 3.0,
        "{promoted} of 30 files promoted in {secs:.1} s under load, at 2 moves a second"
    );
    assert!(promoted >= 1, "moves are spaced under load, not stopped");
    assert!(wait_for(15, || names.iter().all(|n| on(&ssd.dir, n))), "the rest follow once the mount is idle");
    assert_eq!(status(&m)["migrations"]["busy"], false);
    for n in &names {
        assert_eq!(fs::read(m.p(n)).unwrap(), vec![7u8; 4096]);
    }
    m.unmount();
}

/// `--admission repeat` on a real mount: a file read once stays on the HDD
/// (a one-hit wonder), and its second read admits it; the default, `first`,
/// admits a file at its first read.
#[test]
fn admission_repeat_leaves_a_file_read_once_on_the_hdd_and_admits_it_at_its_second_read() {
    for (rule, first_read_admits) in [("first", true), ("repeat", false)] {
        let area = Area::new();
        let ssd = LoopFs::new(&area, "ssdfs", 32);
        // A file that was there before the mount: no access has heated it
        // (a write through the mount would count as its first access).
        fs::create_dir_all(area.hdd()).unwrap();
        fs::write(area.hdd().join("x"), vec![7u8; 4096]).unwrap();
        let m = mount(&area, &ssd.dir, &["--policy", "dynamic-hot-dst", "--admission", rule]);
        read_n(&m.p("x"), 1);
        let admitted = wait_for(3, || on(&ssd.dir, "x"));
        assert_eq!(admitted, first_read_admits, "{rule}: after one read: {}", status(&m));
        if !first_read_admits {
            let o = tierfs(&["stats", "--file", m.p("x").to_str().unwrap()]);
            let text = String::from_utf8_lossy(&o.stdout).to_string();
            assert!(text.contains("not admitted"), "{rule}: the file says why it stays: {text}");
            read_n(&m.p("x"), 1);
            assert!(wait_for(5, || on(&ssd.dir, "x")), "{rule}: the second read admits it: {}", status(&m));
        }
        assert_eq!(fs::read(m.p("x")).unwrap(), vec![7u8; 4096]);
        m.unmount();
    }
}

#[test]
fn admission_and_aging_rules_that_do_not_exist_are_refused_at_mount() {
    let area = Area::new();
    for (flag, value) in [("--admission", "sometimes"), ("--aging-rule", "weekly")] {
        let a = args(&area, &[flag, value]);
        let (ssd, hdd, mnt) = (area.ssd(), area.hdd(), area.mnt());
        let mut cmd = vec!["mount", ssd.to_str().unwrap(), hdd.to_str().unwrap(), mnt.to_str().unwrap()];
        cmd.extend(a.iter().map(|s| s.as_str()));
        let o = tierfs(&cmd);
        assert!(!o.status.success(), "{flag} {value} accepted");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(value), "{flag} {value}: {err}");
    }
}
