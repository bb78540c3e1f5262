//! Issue 16's kill -9 loop: files written under fresh names are made
//! durable (write, fsync of the file, fsync of its directory) and only then
//! counted as acknowledged, while readers keep migrations and the cleaner
//! busy on a tiny SSD; the daemon is killed with SIGKILL and remounted, and
//! every acknowledged file must be there, once, on one tier, with its
//! content. `TIERFS_KILL_ROUNDS` sets the rounds per policy (default 3;
//! the long run in `scripts/long-tests.sh` uses 20).

use crate::harness::{settled_placement, stats_json, Area, HddLoop, Mounted};
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const BASE_FILES: usize = 200;

/// Deterministic content of a file: its size and bytes follow from `tag`.
fn content(tag: u64) -> Vec<u8> {
    let mut x = tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let n = 4096 + (x % (156 * 1024)) as usize;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn sync_dir(d: &Path) -> std::io::Result<()> {
    fs::File::open(d)?.sync_all()
}

fn write_durably(dir: &Path, name: &str, data: &[u8]) -> std::io::Result<()> {
    let mut f = fs::File::create(dir.join(name))?;
    f.write_all(data)?;
    f.sync_all()?;
    drop(f);
    sync_dir(dir)
}

fn rounds() -> usize {
    std::env::var("TIERFS_KILL_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3)
}

struct Loop {
    /// The HDD tier's own file system, if it has one (dropped before the
    /// area that holds its mount point).
    hdd: Option<HddLoop>,
    area: Area,
    args: Vec<String>,
    /// Relative path -> content tag, for every acknowledged file.
    acked: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl Loop {
    fn mount(&self) -> Mounted {
        let a: Vec<&str> = self.args.iter().map(|s| s.as_str()).collect();
        Mounted::new(&self.area, &a)
    }

    /// Every acknowledged file is present with its content, and on exactly
    /// the tiers its placement names (one, or both for a cached copy).
    fn check(&self, m: &Mounted, when: &str) {
        let acked = self.acked.lock().unwrap().clone();
        for (rel, tag) in &acked {
            let got = match fs::read(m.p(rel)) {
                Ok(g) => g,
                Err(e) => panic!(
                    "{when}: acknowledged file {rel} is lost ({e}); on ssd={} hdd={}\n{}",
                    self.area.ssd().join(rel).exists(),
                    self.area.hdd().join(rel).exists(),
                    m.log_text()
                ),
            };
            assert!(got == content(*tag), "{when}: {rel} has {} bytes, not its acknowledged content", got.len());
            if let Err(e) = settled_placement(&self.area, &m.mnt, rel) {
                panic!("{when}: {e}\n{}", m.log_text());
            }
        }
    }
}

/// Creates files under fresh names until stopped or the daemon is gone.
fn writer(mnt: PathBuf, round: usize, stop: Arc<AtomicBool>, acked: Arc<Mutex<BTreeMap<String, u64>>>) {
    let dir = mnt.join("new");
    for i in 0.. {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let name = format!("r{round}-{i}");
        let tag = (round as u64) << 32 | i as u64;
        if write_durably(&dir, &name, &content(tag)).is_err() {
            return;
        }
        acked.lock().unwrap().insert(format!("new/{name}"), tag);
    }
}

/// Reads the base files at random so that promotions and the cleaner run.
fn reader(mnt: PathBuf, seed: u64, stop: Arc<AtomicBool>) {
    let mut x = seed | 1;
    while !stop.load(Ordering::Relaxed) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Zipf-like: low numbers much more often.
        let k = ((x % 1000) * (x % 1000) / 5000) as usize % BASE_FILES;
        if fs::read(mnt.join(format!("base/f{k}"))).is_err() && !mnt.join("base").exists() {
            return;
        }
    }
}

fn kill_loop(policy: &str) {
    kill_loop_with(policy, &[]);
}

fn kill_loop_with(policy: &str, extra: &[&str]) {
    let area = Area::new();
    let state = area.path("state");
    let mut args: Vec<String> =
        ["--policy", policy, "--ssd-capacity", "1M", "--io-mode", "userspace", "--interval", "1s"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect();
    args.push("--state-dir".to_string());
    args.push(state.to_str().unwrap().to_string());
    let l = Loop { hdd: None, area, args, acked: Arc::new(Mutex::new(BTreeMap::new())) };
    {
        let m = l.mount();
        for d in ["base", "new"] {
            fs::create_dir(m.p(d)).unwrap();
        }
        for k in 0..BASE_FILES {
            write_durably(&m.p("base"), &format!("f{k}"), &content(1 << 40 | k as u64)).unwrap();
            l.acked.lock().unwrap().insert(format!("base/f{k}"), 1 << 40 | k as u64);
        }
        m.unmount();
    }
    let rounds = rounds();
    let write_back = !extra.is_empty() || policy == "write-back-cache";
    let mut buffered = 0;
    for round in 0..rounds {
        let m = l.mount();
        l.check(&m, &format!("{policy}, before round {round}"));
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = vec![{
            let (mnt, stop, acked) = (m.mnt.clone(), stop.clone(), l.acked.clone());
            std::thread::spawn(move || writer(mnt, round, stop, acked))
        }];
        for r in 0..2u64 {
            let (mnt, stop) = (m.mnt.clone(), stop.clone());
            threads.push(std::thread::spawn(move || reader(mnt, round as u64 * 7 + r + 1, stop)));
        }
        std::thread::sleep(Duration::from_millis(1100 + (round as u64 * 331) % 800));
        if write_back {
            buffered += crate::harness::stats_json(&m.mnt)["write_back"]["ssd_writes"].as_u64().unwrap_or(0);
        }
        m.kill();
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
    }
    let m = l.mount();
    l.check(&m, &format!("{policy}, after {rounds} rounds"));
    m.unmount();
    assert!(!write_back || buffered > 0, "{policy}: no write landed in the write-back area");
    let acked = l.acked.lock().unwrap().len();
    // Shown with --nocapture (scripts/long-tests.sh).
    eprintln!("{policy}: {rounds} kill -9 rounds, {acked} acknowledged files all present once with their content");
}

macro_rules! kill_loop_tests {
    ($($name:ident => $policy:expr),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                kill_loop($policy);
            }
        )*
    };
}

kill_loop_tests! {
    fsynced_files_survive_kill_9_under_dynamic_cold_dst_bg => "dynamic-cold-dst-bg",
    fsynced_files_survive_kill_9_under_dynamic_cold_dst => "dynamic-cold-dst",
    fsynced_files_survive_kill_9_under_plain_cold_dst => "plain-cold-dst",
    fsynced_files_survive_kill_9_under_dynamic_hot_dst => "dynamic-hot-dst",
    fsynced_files_survive_kill_9_under_interval_hot_dst => "interval-hot-dst",
    fsynced_files_survive_kill_9_under_on_demand_cache => "on-demand-cache",
    fsynced_files_survive_kill_9_under_interval_cache => "interval-cache",
}

/// The write-back area on: fsynced writes that landed only on the SSD
/// survive kill -9, and after it they are found dirty and written back.
#[test]
fn fsynced_files_survive_kill_9_with_a_write_back_area() {
    kill_loop_with("hystor", &["--write-back", "30", "--chunk", "4K", "--chunk-period", "300ms"]);
}

#[test]
fn fsynced_files_survive_kill_9_under_write_back_cache() {
    kill_loop("write-back-cache");
}

#[test]
fn fsynced_files_survive_kill_9_under_write_through_cache() {
    kill_loop("write-through-cache");
}

/// The quiet HDD mode with writes held: the HDD tier is an ext4 of its own
/// on a loop device (its disk's idleness is then the test's to see), and
/// nothing reads it, so it sleeps. Files written durably meanwhile are held
/// on the SSD; the daemon is killed with them held, and every acknowledged
/// file is there after, once, with its content. The held list itself is not
/// kept: after a crash those files are ordinary SSD files.
#[test]
fn fsynced_files_held_on_the_ssd_for_a_sleeping_hdd_survive_kill_9() {
    let area = Area::new();
    let hdd = HddLoop::new(&area, &area.hdd(), 128);
    let state = area.path("state");
    let args: Vec<String> = [
        "--quiet-hdd",
        "--hdd-idle",
        "1s",
        "--quiet-hold",
        "1G",
        "--io-mode",
        "userspace",
        "--state-dir",
        state.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let l = Loop { hdd: Some(hdd), area, args, acked: Arc::new(Mutex::new(BTreeMap::new())) };
    {
        let m = l.mount();
        for d in ["base", "new"] {
            fs::create_dir(m.p(d)).unwrap();
        }
        for k in 0..20 {
            write_durably(&m.p("base"), &format!("f{k}"), &content(1 << 40 | k as u64)).unwrap();
            l.acked.lock().unwrap().insert(format!("base/f{k}"), 1 << 40 | k as u64);
        }
        m.unmount();
    }
    let hdd = l.hdd.as_ref().unwrap();
    let mut held = 0;
    for round in 0..rounds() {
        let m = l.mount();
        l.check(&m, &format!("quiet, before round {round}"));
        crate::harness::asleep(&m, hdd, 1.0);
        let stop = Arc::new(AtomicBool::new(false));
        let t = {
            let (mnt, stop, acked) = (m.mnt.clone(), stop.clone(), l.acked.clone());
            std::thread::spawn(move || writer(mnt, round, stop, acked))
        };
        std::thread::sleep(Duration::from_millis(1100 + (round as u64 * 331) % 800));
        let h = stats_json(&m.mnt)["hdd"].clone();
        eprintln!("round {round}: {h}");
        held += h["held_files"].as_u64().unwrap_or(0);
        m.kill();
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
    }
    let m = l.mount();
    l.check(&m, "quiet, after the kills");
    m.unmount();
    assert!(held > 0, "no write was held on the SSD");
    let acked = l.acked.lock().unwrap().len();
    eprintln!("quiet HDD: {} kill -9 rounds with {held} files held, {acked} acknowledged files all present once with their content", rounds());
}
