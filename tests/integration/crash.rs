//! A real crash: kill -9 the daemon again and again while a workload writes
//! and migrations run; after each remount every acknowledged file must
//! read back exactly, from exactly one tier.

use crate::harness::{Area, Mounted};
use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const FILES: usize = 40;

fn data(round: usize, i: usize, k: usize) -> Vec<u8> {
    let i = i + round * 100_000;
    let n = 2048 + (k * 7919 + i * 131) % 60_000;
    (0..n).map(|j| (j as u64 ^ (round as u64 * 31 + i as u64 * 7 + k as u64)) as u8).collect()
}

#[derive(Default)]
struct Ledger {
    /// Content last acknowledged (write and close returned success).
    acked: HashMap<usize, Vec<u8>>,
    /// Files a write to which was cut by the crash: their content is
    /// whatever part of the rewrite got through.
    uncertain: HashMap<usize, Vec<u8>>,
}

/// One writer per file: worker `w` of `n` owns the files `k` with `k % n == w`.
fn workload(
    mnt: std::path::PathBuf,
    round: usize,
    (w, n): (usize, usize),
    stop: Arc<AtomicBool>,
    ledger: Arc<Mutex<Ledger>>,
) {
    let mut x: u64 = 0x1234_5678 ^ round as u64;
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let k = (x % (FILES / n) as u64) as usize * n + w;
        let p = mnt.join(format!("d{}/f{k}", k % 4));
        if x.is_multiple_of(3) {
            // Writes: whole files.
            let d = data(round, i, k);
            ledger.lock().unwrap().uncertain.insert(k, d.clone());
            let r = fs::File::create(&p).and_then(|mut f| f.write_all(&d).and_then(|_| f.sync_all()));
            if r.is_err() {
                return; // the daemon is gone
            }
            let mut l = ledger.lock().unwrap();
            l.uncertain.remove(&k);
            l.acked.insert(k, d);
            i += 1;
        } else if fs::read(&p).is_err() && !p.exists() && !mnt.join("d0").exists() {
            return;
        }
    }
}

#[test]
fn kill_9_in_a_loop_loses_no_acknowledged_write() {
    let area = Area::new();
    let state = area.path("state");
    let args_for = |round: usize| -> Vec<String> {
        let policy = ["interval-hot-dst", "dynamic-hot-dst", "interval-cache", "dynamic-cold-dst"][round % 4];
        [
            "--io-mode",
            "userspace",
            "--policy",
            policy,
            "--interval",
            "1s",
            "--ssd-capacity",
            "300K",
            "--state-dir",
            state.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    {
        let a = args_for(0);
        let a: Vec<&str> = a.iter().map(|s| s.as_str()).collect();
        let m = Mounted::new(&area, &a);
        for d in 0..4 {
            fs::create_dir(m.p(&format!("d{d}"))).unwrap();
        }
        m.unmount();
    }
    let mut moves = 0;
    for round in 0..8 {
        let a = args_for(round);
        let a: Vec<&str> = a.iter().map(|s| s.as_str()).collect();
        let m = Mounted::new(&area, &a);
        // Everything acknowledged so far is there, whole, on one tier.
        {
            let mut l = ledger.lock().unwrap();
            let cut: Vec<usize> = l.uncertain.keys().copied().collect();
            for k in cut {
                l.acked.remove(&k);
            }
            l.uncertain.clear();
            for (k, want) in &l.acked {
                let rel = format!("d{}/f{k}", k % 4);
                let got = fs::read(m.p(&rel)).unwrap_or_else(|e| panic!("round {round}: {rel}: {e}\n{}", m.log_text()));
                assert!(&got == want, "round {round}: {rel} has {} bytes, want {}", got.len(), want.len());
                let on_ssd = area.ssd().join(&rel).exists();
                let on_hdd = area.hdd().join(&rel).exists();
                assert!(on_ssd ^ on_hdd, "round {round}: {rel} on ssd={on_ssd} hdd={on_hdd}");
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..2)
            .map(|w| {
                let (mnt, stop, ledger) = (m.mnt.clone(), stop.clone(), ledger.clone());
                std::thread::spawn(move || workload(mnt, round, (w, 2), stop, ledger))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(700 + (round as u64 * 271) % 900));
        let o = crate::harness::tierfs(&["stats", m.mnt.to_str().unwrap(), "--json"]);
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&o.stdout) {
            let mv = &v["migrations"];
            moves +=
                ["promotions", "demotions", "copies", "drops"].iter().map(|k| mv[k].as_u64().unwrap_or(0)).sum::<u64>();
        }
        m.kill();
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().unwrap();
        }
    }
    assert!(moves > 10, "migrations ran during the workload: {moves}");
    let m = Mounted::new(&area, &["--state-dir", state.to_str().unwrap()]);
    let l = ledger.lock().unwrap();
    assert!(l.acked.len() > FILES / 2, "the workload wrote enough: {}", l.acked.len());
    for (k, want) in &l.acked {
        if l.uncertain.contains_key(k) {
            continue;
        }
        let got = fs::read(m.p(&format!("d{}/f{k}", k % 4))).unwrap();
        assert!(&got == want, "final: f{k}");
    }
    m.unmount();
}
