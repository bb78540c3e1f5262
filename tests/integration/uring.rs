//! FUSE over io_uring (`--io-uring`): where the kernel offers it (Linux
//! 6.14+ with the fuse module's `enable_uring` set, as `scripts/test.sh`
//! does for the run), requests and answers go through per-CPU rings, and
//! everything a client does works as over `/dev/fuse`.

use crate::harness::{Area, Mounted};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Whether new FUSE connections are offered io_uring. When the test
/// script says it turned it on, it must be.
fn offered() -> bool {
    let on = fs::read_to_string(PARAM).map(|s| s.trim() == "Y").unwrap_or(false);
    if !on {
        assert!(std::env::var_os("TIERFS_TEST_URING").is_none(), "scripts/test.sh turned {PARAM} on, but it reads off");
        eprintln!("skipped: {PARAM} is off or missing (scripts/test.sh turns it on)");
    }
    on
}

/// How many of the daemon's threads serve a ring.
fn ring_threads(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.starts_with("fuser-ring-"))
        .count()
}

/// The daemon's ring threads once it has started them (after the kernel's
/// INIT; `Mounted::new` returns once a request was answered, which over
/// the rings is after they registered, so this waits only as a safeguard),
/// or after 10 s.
fn ring_threads_started(pid: u32) -> usize {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let n = ring_threads(pid);
        if n >= 2 || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Bytes that differ at every offset, so that a misplaced block shows.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ seed).collect()
}

/// The operations of a small session through the mount: large writes and
/// reads (a payload of a whole ring entry), names, links, attributes.
fn exercise(mnt: &Path) {
    let data = pattern(3 << 20, 7);
    fs::create_dir(mnt.join("d")).unwrap();
    fs::write(mnt.join("d/big"), &data).unwrap();
    assert!(fs::read(mnt.join("d/big")).unwrap() == data, "a 3-MiB file read back differs");
    fs::rename(mnt.join("d/big"), mnt.join("d/moved")).unwrap();
    fs::hard_link(mnt.join("d/moved"), mnt.join("link")).unwrap();
    assert_eq!(fs::metadata(mnt.join("link")).unwrap().len(), data.len() as u64);
    std::os::unix::fs::symlink("d/moved", mnt.join("sym")).unwrap();
    assert_eq!(fs::read_link(mnt.join("sym")).unwrap(), Path::new("d/moved"));
    fs::set_permissions(mnt.join("link"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(fs::metadata(mnt.join("d/moved")).unwrap().permissions().mode() & 0o777, 0o600);
    let mut names: Vec<String> =
        fs::read_dir(mnt).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["d", "link", "sym"]);
    fs::OpenOptions::new().write(true).open(mnt.join("link")).unwrap().set_len(10).unwrap();
    assert_eq!(fs::read(mnt.join("d/moved")).unwrap(), &data[..10]);
    for n in ["link", "sym", "d/moved"] {
        fs::remove_file(mnt.join(n)).unwrap();
    }
    fs::remove_dir(mnt.join("d")).unwrap();
    assert!(fs::metadata(mnt.join("d")).is_err());
}

#[test]
fn with_io_uring_offered_requests_come_over_the_rings_in_either_io_mode() {
    if !offered() {
        return;
    }
    for args in [
        &["--io-mode", "passthrough"][..],
        &["--io-mode", "userspace"],
        &["--io-mode", "userspace", "--io-uring", "always"],
    ] {
        let a = Area::new();
        let m = Mounted::new(&a, args);
        exercise(&m.mnt);
        let pid = m.child.as_ref().unwrap().id();
        assert!(ring_threads(pid) >= 2, "{args:?}: no ring threads\n{}", m.log_tail(20));
        let text = m.unmount_with_log();
        assert!(text.contains("requests come over FUSE's io_uring rings"), "{args:?}:\n{text}");
        assert!(text.contains("clean shutdown"), "{args:?}: the daemon did not shut down cleanly:\n{text}");
    }
}

#[test]
fn without_io_uring_requests_come_from_dev_fuse() {
    if !offered() {
        return;
    }
    for args in [&["--io-uring", "never"][..], &["--io-mode", "userspace", "--io-uring", "never"]] {
        let a = Area::new();
        let m = Mounted::new(&a, args);
        exercise(&m.mnt);
        let pid = m.child.as_ref().unwrap().id();
        assert_eq!(ring_threads(pid), 0, "{args:?}");
        assert!(!m.log_text().contains("io_uring rings"), "{args:?}");
        m.unmount();
    }
}

/// Read system calls the process has made (all its threads).
fn read_calls(pid: u32) -> u64 {
    let io = fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    io.lines().find_map(|l| l.strip_prefix("syscr: ")).unwrap().trim().parse().unwrap()
}

/// Over the rings, `/dev/fuse` carries the FORGETs, one per inode the
/// kernel drops: an `rm -rf` of 20 000 files cost the daemon 20 000 reads
/// of it, each a wake-up of its thread. That thread now pauses after a
/// FORGET, and the kernel hands it the ones queued meanwhile in one read
/// (rm -rf of 20 000 files: 1 500 reads, 10 % faster).
#[test]
fn over_the_rings_the_forgets_of_a_burst_of_removals_are_read_together() {
    if !offered() {
        return;
    }
    let a = Area::new();
    let m = Mounted::new(&a, &[]);
    let pid = m.child.as_ref().unwrap().id();
    // Counted straight after the mount, the threads were not there yet
    // once under CI's load (the FORGET test failed "no ring threads").
    assert!(ring_threads_started(pid) >= 2, "no ring threads\n{}", m.log_tail(20));
    let d = m.mnt.join("d");
    fs::create_dir(&d).unwrap();
    let n: u32 = 2000;
    for i in 0..n {
        fs::write(d.join(format!("f{i}")), b"x").unwrap();
    }
    let before = read_calls(pid);
    // Each removal drops the file's inode in the kernel: a FORGET each.
    let start = Instant::now();
    for i in 0..n {
        fs::remove_file(d.join(format!("f{i}"))).unwrap();
    }
    let took = start.elapsed();
    std::thread::sleep(Duration::from_millis(200));
    let reads = read_calls(pid) - before;
    // FORGETs pile up during a pause only if removals come faster than
    // one each half pause (about 85 µs each in a release build).
    if took > Duration::from_micros(400) * n {
        eprintln!("not judged: {n} removals took {took:?}, too slow to see FORGETs batched ({reads} reads)");
    } else {
        assert!(reads < u64::from(n) / 2, "{reads} reads for the FORGETs of {n} removals in {took:?}");
    }
    fs::remove_dir(&d).unwrap();
    m.unmount();
}

/// The kernel holds a mount's requests until every CPU's queue has a ring
/// entry and then hands them out at once: one could complete within the
/// registration of the last entry, and the ring thread took it for the
/// registration's answer and dropped it. Its client waited for ever (seen
/// as the watchdog's `stat` of the mount point hanging in about one mount
/// in six, and the daemon not ending at the unmount).
const ROUNDS: usize = 30;

/// Whether a thread of the daemon waits for an answer from a FUSE mount
/// (its watchdog `stat`s its own mount point).
fn daemon_waits_on_fuse(pid: u32) -> bool {
    fs::read_dir(format!("/proc/{pid}/task"))
        .map(|ts| {
            ts.filter_map(|t| fs::read_to_string(t.ok()?.path().join("wchan")).ok())
                .any(|w| w.trim() == "request_wait_answer")
        })
        .unwrap_or(false)
}

/// Aborts the FUSE connection of `mnt` through fusectl (mounted if it is
/// not), so that a request nobody will answer ends and the test can clean up.
fn abort_connection(mnt: &Path) {
    use std::os::unix::fs::MetadataExt;
    let dev = fs::metadata(mnt).map(|m| m.dev()).unwrap_or(0);
    let ctl = Path::new("/sys/fs/fuse/connections");
    if fs::read_dir(ctl).map(|mut d| d.next().is_none()).unwrap_or(true) {
        let _ = std::process::Command::new("mount").args(["-t", "fusectl", "none"]).arg(ctl).status();
    }
    let _ = fs::write(ctl.join(libc::minor(dev).to_string()).join("abort"), "1");
}

#[test]
fn a_request_that_comes_with_the_registration_of_the_rings_is_answered() {
    if !offered() {
        return;
    }
    for round in 0..ROUNDS {
        let a = Area::new();
        fs::write(a.hdd().join("f"), b"x").unwrap();
        let m = Mounted::in_table(&a.ssd(), &a.hdd(), &a.mnt(), &["--io-mode", "passthrough"]);
        // Clients start as soon as the mount exists, before the rings do.
        let done = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = (0..8)
            .map(|_| {
                let (mnt, done) = (m.mnt.clone(), done.clone());
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        fs::metadata(&mnt).unwrap();
                        fs::metadata(mnt.join("f")).unwrap();
                    }
                    done.store(true, Ordering::Relaxed);
                })
            })
            .collect();
        let t0 = Instant::now();
        while !clients.iter().all(|c| c.is_finished()) {
            if t0.elapsed() > Duration::from_secs(10) {
                let log = m.log_text();
                // Ends the daemon, whose death answers the held request.
                m.kill();
                panic!("round {round}: a client waited 10 s for an answer\n{log}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for c in clients {
            c.join().expect("a client failed");
        }
        assert!(m.log_text().contains("requests come over FUSE's io_uring rings"), "round {round}: no rings");
        assert!(done.load(Ordering::Relaxed));
        let pid = m.child.as_ref().unwrap().id();
        let t0 = Instant::now();
        while daemon_waits_on_fuse(pid) {
            if t0.elapsed() > Duration::from_secs(10) {
                let log = m.log_text();
                abort_connection(&m.mnt);
                m.kill();
                panic!("round {round}: the daemon's own request waited 10 s for an answer\n{log}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // A dropped request can be the daemon's own (its watchdog's first
        // `stat`): its ring thread then waits for ever and the daemon does
        // not end at the unmount.
        let log = m.unmount_with_log();
        assert!(log.contains("clean shutdown"), "round {round}: the daemon did not end by itself\n{log}");
    }
}
