//! What the eBPF heat source costs each request, as the kernel counts it:
//! starts the source on a directory, watches a 256 MiB file there and lets
//! another process (fio, psync, one job) read it and then write it at
//! random in 4 KiB requests, while this process drains the samples as the
//! daemon would; then prints each program's runs and nanoseconds a run.
//! Root only.
//!
//!     cargo run --release -p tierfs-heat --example heat_cost -- DIR [EVERY] [SECONDS] [nostats]
//!
//! EVERY is the sampling interval (the daemon's adaptive one is some 25 at
//! the request rates here; 1 samples every request); 0 runs the same load
//! without the source, for the requests' time without it. `nostats` leaves
//! the kernel's run-time statistics off (they add two clock reads to every
//! run), for the requests' time as users see it. `HEAT_COST_RW` names
//! fio's loads (default "randread randwrite"), `HEAT_COST_BS` their
//! request size (default 4k).

use std::os::fd::AsFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tierfs_core::heat::{HeatSource, Op};
use tierfs_core::tier::Tier;
use tierfs_heat::KernelHeat;

/// User and system time of this process's waited-for children.
fn children_cpu_ns() -> u64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: a valid out pointer; getrusage fills it when it returns 0.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, ru.as_mut_ptr()) } != 0 {
        return 0;
    }
    // SAFETY: filled above.
    let ru = unsafe { ru.assume_init() };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    ns(ru.ru_utime) + ns(ru.ru_stime)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(args.get(1).expect("usage: heat_cost DIR [EVERY] [SECONDS]"));
    let every: u32 = args.get(2).map_or(25, |s| s.parse().expect("EVERY"));
    let secs: u32 = args.get(3).map_or(5, |s| s.parse().expect("SECONDS"));
    // Statistics on while the returned descriptor lives.
    let _stats = (args.get(4).map(String::as_str) != Some("nostats"))
        .then(|| aya::sys::enable_stats(aya::sys::Stats::RunTime).expect("enable bpf run-time stats (root?)"));
    let heat = (every > 0).then(|| Arc::new(KernelHeat::start(&dir, &dir).expect("the heat source starts")));
    let path = dir.join(format!("heat_cost.{}.dat", std::process::id()));
    let st = Command::new("fio")
        .args(["--name=prep", "--rw=write", "--bs=1M", "--size=256M", "--ioengine=psync", "--output=/dev/null"])
        .arg(format!("--filename={}", path.display()))
        .status()
        .expect("fio");
    assert!(st.success());
    let f = std::fs::File::open(&path).expect("open");
    if let Some(heat) = &heat {
        heat.watch(1, Tier::Hdd, f.as_fd()).expect("watched");
        heat.set_every(every);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let drainer = {
        let (heat, stop) = (heat.clone(), stop.clone());
        std::thread::spawn(move || {
            let Some(heat) = heat else { return [0; 7] };
            let (mut n, mut out) = ([0u64; 7], Vec::new());
            while !stop.load(Ordering::Relaxed) {
                heat.drain(&mut out);
                for s in out.drain(..) {
                    n[s.op as usize] += 1;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            n
        })
    };
    let stats = || heat.as_ref().map(|h| h.program_stats()).unwrap_or_default();
    let bs = std::env::var("HEAT_COST_BS").unwrap_or_else(|_| "4k".into());
    let rws = std::env::var("HEAT_COST_RW").unwrap_or_else(|_| "randread randwrite".into());
    for rw in rws.split_whitespace() {
        let before = stats();
        let cpu0 = children_cpu_ns();
        let st = Command::new("fio")
            .args(["--name=t", "--ioengine=psync", "--size=256M", "--invalidate=0", "--time_based"])
            .arg(format!("--bs={bs}"))
            .arg(format!("--rw={rw}"))
            .arg(format!("--runtime={secs}"))
            .arg(format!("--filename={}", path.display()))
            .args(["--output-format=terse", "--terse-version=3"])
            .output()
            .expect("fio");
        assert!(st.status.success());
        let terse = String::from_utf8_lossy(&st.stdout);
        let f: Vec<&str> = terse.trim().split(';').collect();
        // terse v3: read IOPS is field 8, write IOPS field 49.
        let iops = if rw.contains("read") { f.get(7) } else { f.get(48) };
        let iops: f64 = iops.and_then(|s| s.parse().ok()).unwrap_or(0.0);
        // CPU time a request (fio's user and system time over its
        // requests) moves less than its rate on a machine others share.
        let cpu = (children_cpu_ns() - cpu0) as f64 / (iops * f64::from(secs));
        println!("{rw}: {iops:.0} IOPS, {cpu:.0} ns of CPU a request (every {every})");
        let after = stats();
        for (name, runs, ns) in &after {
            let Some((_, r0, n0)) = before.iter().find(|(n, _, _)| n == name) else { continue };
            let (dr, dn) = (runs - r0, ns - n0);
            if dr > 0 {
                println!("  {name:14} {dr:10} runs {:6.1} ns/run", dn as f64 / dr as f64);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let n = drainer.join().expect("drainer");
    let (lost, _) = heat.as_ref().map_or((0, 0), |h| h.lost_and_watched());
    println!(
        "samples drained: {} reads, {} writes, {} device, {} faults; lost {lost}",
        n[Op::Read as usize],
        n[Op::Write as usize],
        n[Op::Device as usize],
        n[Op::Fault as usize]
    );
    drop(f);
    let _ = std::fs::remove_file(&path);
}
