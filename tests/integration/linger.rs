//! Lingering request threads (`--linger`): they spend CPU only while
//! requests come, and a long watch neither loses nor holds up requests
//! from many clients at once.

use crate::harness::{tierfs, Area, Mounted};
use std::fs;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The daemon's CPU time (user and system), in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) start at ')'.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn an_idle_mount_spends_no_cpu_after_a_burst_of_requests() {
    let a = Area::new();
    // The longest watch there is, so that any lingering past the last
    // request would show.
    let m = Mounted::new(&a, &["--linger", "10ms"]);
    let pid = m.child.as_ref().unwrap().id();
    for i in 0..300 {
        let p = m.p(&format!("f{i}"));
        fs::write(&p, b"x").unwrap();
        fs::metadata(&p).unwrap();
        fs::remove_file(&p).unwrap();
    }
    // The burst's last watch ends within 10 ms; let it, and the engine's
    // reaction to the burst, pass.
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(2));
    let spent = cpu_ticks(pid) - before;
    // Clock ticks are 10 ms: a thread that kept watching would spend 200
    // ticks in 2 s; the background threads' periodic work takes a few.
    assert!(spent <= 20, "an idle mount spent {spent} ticks of CPU in 2 s");
    m.unmount();
}

#[test]
fn lingering_threads_serve_many_clients_at_once_without_losing_a_request() {
    const CLIENTS: usize = 6;
    const RUN: Duration = Duration::from_secs(4);
    let a = Area::new();
    let m = Mounted::new(&a, &["--linger", "10ms", "--threads", "2"]);
    let stop = Arc::new(AtomicBool::new(false));
    // Per client, when its current operation began (ms since t0, 0: idle).
    let busy: Arc<Vec<AtomicU64>> = Arc::new((0..CLIENTS).map(|_| AtomicU64::new(0)).collect());
    let t0 = Instant::now();
    let workers: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (mnt, stop, busy) = (m.mnt.clone(), stop.clone(), busy.clone());
            std::thread::spawn(move || {
                let dir = mnt.join(format!("c{c}"));
                fs::create_dir(&dir).unwrap();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    busy[c].store(t0.elapsed().as_millis() as u64 + 1, Ordering::Relaxed);
                    let p = dir.join(format!("f{}", n % 7));
                    let body = format!("{c}-{n}");
                    fs::write(&p, &body).unwrap();
                    assert_eq!(fs::read_to_string(&p).unwrap(), body, "client {c} read back something else");
                    if n.is_multiple_of(3) {
                        fs::remove_file(&p).unwrap();
                        assert!(fs::metadata(&p).is_err(), "client {c}: {p:?} still there after unlink");
                    }
                    busy[c].store(0, Ordering::Relaxed);
                    n += 1;
                }
                n
            })
        })
        .collect();
    // The watchdog: no operation takes more than 10 s, during the run and
    // while the clients finish their last operation.
    loop {
        std::thread::sleep(Duration::from_millis(100));
        if t0.elapsed() >= RUN {
            stop.store(true, Ordering::Relaxed);
            if workers.iter().all(|w| w.is_finished()) {
                break;
            }
        }
        let now = t0.elapsed().as_millis() as u64;
        if let Some(c) = busy
            .iter()
            .position(|b| b.load(Ordering::Relaxed).checked_sub(1).is_some_and(|s| now.saturating_sub(s) > 10_000))
        {
            let log = m.log_text();
            m.kill();
            panic!("client {c} stuck for 10 s\n{log}");
        }
    }
    let ops: Vec<u64> = workers.into_iter().map(|w| w.join().expect("a client failed")).collect();
    assert!(ops.iter().all(|&n| n > 20), "every client made progress: {ops:?}");
    m.unmount();
}

#[test]
fn a_watch_longer_than_10ms_is_refused() {
    let a = Area::new();
    let o = tierfs(&[
        "mount",
        a.ssd().to_str().unwrap(),
        a.hdd().to_str().unwrap(),
        a.mnt().to_str().unwrap(),
        "--linger",
        "20ms",
    ]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "--linger 20ms must fail");
    assert!(err.contains("--linger") && err.contains("10ms"), "{err}");
}
