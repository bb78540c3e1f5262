//! Measurement-driven migration (Wu-Reddy) and the SSD write regulator
//! (HybridStore) on real mounts with emulated devices.

use crate::harness::*;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tierfs_core::device::Profile;
use tierfs_core::report::{ask, Request, Response};

/// Gives the emulated `tier` of the mount `mnt` another profile.
fn set_profile(mnt: &Path, tier: &str, profile: Profile) {
    let sock = tierfs_core::runtime::socket_path(mnt);
    match ask(&sock, &Request::Profile { tier: tier.into(), profile }) {
        Ok(Response::Done) => {}
        other => panic!("setting the {tier} profile: {other:?}"),
    }
}

fn placement(m: &Mounted, rel: &str) -> String {
    xattr(&m.p(rel), "user.tierfs.placement").unwrap_or_default()
}

/// An SSD whose writes are slowed to 40 ms by garbage collection (a
/// random write on `hdd-7200` takes about 11 ms); reads stay fast.
fn ssd_in_gc() -> Profile {
    let sata = Profile::named("ssd-sata").unwrap();
    Profile { name: "ssd-in-gc".into(), write_access: Duration::from_millis(40), ..sata }
}

#[test]
fn measured_moves_write_heavy_files_off_a_slow_ssd_and_back_when_it_recovers() {
    let area = Area::new();
    let m = Mounted::new(
        &area,
        &["--emulate", "ssd=ssd-sata,hdd=hdd-7200", "--policy", "measured", "--measured-rate", "10"],
    );
    let (writers, readers) = (["w0", "w1", "w2"], ["r0", "r1", "r2"]);
    for f in writers.iter().chain(&readers) {
        fs::write(m.p(f), vec![1u8; 64 << 10]).unwrap();
        assert_eq!(placement(&m, f), "ssd", "{f}: new files start on the SSD");
    }
    // The workload: the w files are written, the r files read, and small
    // new files are written where new files go (the SSD), which keeps the
    // SSD's write average current while the w files are elsewhere.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (stop, mnt) = (stop.clone(), m.mnt.clone());
        std::thread::spawn(move || {
            let open = |f: &str| fs::OpenOptions::new().read(true).write(true).open(mnt.join(f)).unwrap();
            let w: Vec<_> = writers.iter().map(|f| open(f)).collect();
            let r: Vec<_> = readers.iter().map(|f| open(f)).collect();
            let mut buf = [0u8; 4096];
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let off = (i * 7 % 16) * 4096;
                for f in &w {
                    f.write_all_at(&[i as u8; 4096], off).unwrap();
                }
                for f in &r {
                    for k in 0..10 {
                        f.read_exact_at(&mut buf, (k * 4096 + off) % (64 << 10)).unwrap();
                    }
                }
                fs::write(mnt.join(format!("new{}", i % 20)), [i as u8; 4096]).unwrap();
            }
        })
    };
    // Garbage collection slows the SSD's writes below the HDD's.
    set_profile(&m.mnt, "ssd", ssd_in_gc());
    let off = wait_for(60, || writers.iter().all(|f| placement(&m, f) == "hdd"));
    let seen_slow = stats_json(&m.mnt);
    // It recovers: the write-heavy files come back.
    set_profile(&m.mnt, "ssd", Profile::named("ssd-sata").unwrap());
    // All of them, the small new files too: they are written only, so they
    // left the slow SSD as well, and the check that nothing moves after
    // the return must not start while they are still on their way back.
    let news: Vec<String> = (0..20).map(|k| format!("new{k}")).collect();
    let all_back = || {
        writers
            .iter()
            .chain(&readers)
            .map(|f| f.to_string())
            .chain(news.iter().cloned())
            .all(|f| placement(&m, &f) == "ssd")
    };
    let back = off && wait_for(90, all_back);
    // A while longer: nothing moves back and forth.
    let moves = |v: &serde_json::Value| {
        v["migrations"]["promotions"].as_u64().unwrap() + v["migrations"]["demotions"].as_u64().unwrap()
    };
    // A move is counted just after its file shows on the SSD: wait until
    // the count holds still for a second (at most ten) before taking it.
    let mut settled = moves(&stats_json(&m.mnt));
    for _ in 0..10 {
        std::thread::sleep(Duration::from_secs(1));
        let now = moves(&stats_json(&m.mnt));
        if now == settled {
            break;
        }
        settled = now;
    }
    std::thread::sleep(Duration::from_secs(4));
    let stayed = all_back();
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    let v = stats_json(&m.mnt);
    let log = m.log_text();
    m.unmount();
    let speeds = &seen_slow["measured"]["tiers"];
    assert!(
        off,
        "the write-heavy files did not leave the slow SSD; speeds {speeds}, moves {}, files {}\n{log}",
        seen_slow["migrations"], seen_slow["hottest"]
    );
    assert!(back, "the files did not come back to the recovered SSD; {}\n{log}", v["measured"]);
    assert!(
        stayed && moves(&v) == settled,
        "files kept moving after the SSD recovered: {} {}\n{log}",
        v["migrations"],
        v["measured"]
    );
    // Bounded by the policy's four moves a file an hour (here the 23
    // write-heavy files go and come back once each; read-heavy ones whose
    // reads queued behind the slow writes may move too).
    assert!(v["migrations"]["demotions"].as_u64().unwrap() >= 3, "{}", v["migrations"]);
    assert!(moves(&v) <= 4 * 26, "{}", v["migrations"]);
    // The averages are in the statistics, the SSD's write time was the
    // slower one while it collected garbage.
    let w = |i: usize| seen_slow["measured"]["tiers"][i]["write_us"].as_f64().unwrap();
    assert!(w(0) > w(1), "SSD writes {} µs, HDD writes {} µs while slowed", w(0), w(1));
}

#[test]
fn over_its_write_budget_the_ssd_takes_no_new_files_and_nothing_fails() {
    let area = Area::new();
    // 1 MiB a day: the day's pace allows about an hour's worth (43 KiB)
    // plus what the hours so far allow, never more than the day's budget.
    let m = Mounted::new(&area, &["--policy", "dynamic-cold-dst", "--ssd-write-budget", "1M/day"]);
    let mut on_hdd = 0;
    for i in 0..40 {
        let p = m.p(&format!("f{i}"));
        fs::write(&p, vec![7u8; 64 << 10]).unwrap();
        if placement(&m, &format!("f{i}")) == "hdd" {
            on_hdd += 1;
        }
        assert_eq!(fs::read(&p).unwrap(), vec![7u8; 64 << 10], "f{i}");
    }
    // Writes into a file on the SSD past the budget move it to the HDD.
    let v = stats_json(&m.mnt);
    let reg = &v["regulator"];
    let budget = reg["budget_bytes_per_day"].as_u64().unwrap();
    let today = reg["today_bytes"].as_u64().unwrap();
    m.unmount();
    assert_eq!(budget, 1 << 20);
    assert!(on_hdd >= 20, "only {on_hdd} of 40 new files were sent to the HDD");
    assert!(today <= budget, "the SSD took {today} bytes today, over the {budget}-byte budget");
    assert!(v["migrations"]["diverted"].as_u64().unwrap() >= 20, "{}", v["migrations"]);
    // The budget's state survives a remount.
    let m = Mounted::new(&area, &["--policy", "dynamic-cold-dst", "--ssd-write-budget", "1M/day"]);
    let again = stats_json(&m.mnt)["regulator"]["today_bytes"].as_u64().unwrap();
    m.unmount();
    assert!(again >= today, "today's count after a remount: {again}, before: {today}");
}
