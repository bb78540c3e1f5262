//! The kernel heat source on the default mount (root, passthrough I/O):
//! the requests the kernel serves by itself are counted as the daemon
//! counts its own, Hystor's chunks follow them, and without the source
//! the mount says so and falls back.

use crate::harness::{stats_json, tierfs, wait_for, Area, Mounted};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use tierfs_bench::rng::Rng;

/// `tierfs stats --file --json`.
fn file_stats(path: &Path) -> serde_json::Value {
    let o = tierfs(&["stats", "--file", path.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// What the statistics say of one file: reads, writes, bytes read and
/// written, counter.
fn counts(path: &Path) -> (u64, u64, u64, u64, u64) {
    let v = file_stats(path);
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    (n("reads"), n("writes"), n("read_bytes"), n("write_bytes"), n("counter"))
}

/// The same requests, whatever the mount: writes in one and in several
/// calls, appends, whole-page reads in order and at random (never a read
/// at the end of a file: the daemon counts one, the page cache serves none).
fn requests(mnt: &Path) {
    fs::write(mnt.join("a"), vec![1u8; 64 << 10]).unwrap();
    let mut b = fs::File::create(mnt.join("b")).unwrap();
    for i in 0..4u8 {
        b.write_all(&vec![i; 256 << 10]).unwrap();
    }
    drop(b);
    let mut c = fs::OpenOptions::new().create(true).append(true).mode(0o644).open(mnt.join("c")).unwrap();
    for _ in 0..8 {
        c.write_all(&[3u8; 512]).unwrap();
    }
    drop(c);
    let a = fs::File::open(mnt.join("a")).unwrap();
    let mut page = vec![0u8; 8192];
    for _ in 0..3 {
        for off in (0..64 << 10).step_by(8192) {
            a.read_exact_at(&mut page, off).unwrap();
        }
    }
    let b = fs::File::open(mnt.join("b")).unwrap();
    let mut rng = Rng::new(7);
    for _ in 0..50 {
        b.read_exact_at(&mut page[..4096], rng.below(256) * 4096).unwrap();
    }
    let c = fs::File::open(mnt.join("c")).unwrap();
    c.read_exact_at(&mut page[..4096], 0).unwrap();
}

#[test]
fn a_passthrough_mount_counts_the_kernels_requests_as_the_userspace_path_does() {
    let mut got = Vec::new();
    for mode in ["passthrough", "userspace"] {
        let area = Area::new();
        let m = Mounted::new(&area, &["--io-mode", mode, "--policy", "hdd-only"]);
        requests(&m.mnt);
        let v = stats_json(&m.mnt);
        if mode == "passthrough" {
            assert_eq!(v["heat"]["source"], "ebpf", "{}", v["heat"]);
            assert!(v["counting"].as_str().unwrap().starts_with("per request"), "{}", v["counting"]);
            assert!(m.log_text().contains("heat source: ebpf"), "{}", m.log_text());
        }
        // The engine takes the samples every tick; a write's pieces are
        // joined until its call is over.
        let want_reads = 24 + 50 + 1;
        assert!(
            wait_for(10, || ["a", "b", "c"].iter().map(|f| counts(&m.p(f)).0).sum::<u64>() >= want_reads),
            "{mode}: the reads were not all counted: {}",
            stats_json(&m.mnt)["heat"]
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
        got.push(["a", "b", "c"].map(|f| counts(&m.p(f))));
        if mode == "passthrough" {
            let text = String::from_utf8(tierfs(&["stats", m.mnt.to_str().unwrap()]).stdout).unwrap();
            assert!(text.contains("heat source: ebpf: 75 reads"), "{text}");
            assert!(text.contains("13 writes"), "{text}");
        }
        m.unmount();
    }
    for (i, f) in ["a", "b", "c"].iter().enumerate() {
        let (pt, us) = (got[0][i], got[1][i]);
        // Reads, writes, bytes written and the counter as through the
        // daemon; a read's bytes in whole pages (c is 4 000 bytes long).
        assert_eq!((pt.0, pt.1, pt.3, pt.4), (us.0, us.1, us.3, us.4), "{f}: passthrough {pt:?}, userspace {us:?}");
        assert!(pt.2 >= us.2 && pt.2 - us.2 < 4096 * pt.0.max(1), "{f}: read bytes {} against {}", pt.2, us.2);
    }
    // Spot checks of what the userspace path counts.
    assert_eq!((got[1][0].0, got[1][0].1), (24, 1), "a: 24 reads of 8 KiB, one write");
    assert_eq!(got[1][1].1, 4, "b: four writes");
    assert_eq!(got[1][2].1, 8, "c: eight appends");
}

/// The big file of the scenario, written straight into the HDD directory
/// (adopted at mount).
fn big_file(path: &Path, size: u64) {
    let mut f = fs::File::create(path).unwrap();
    let buf = vec![0x5au8; 1 << 20];
    for _ in 0..size >> 20 {
        f.write_all(&buf).unwrap();
    }
    f.sync_all().unwrap();
}

/// 20 000 reads of 4 KiB at random, 90 % of them in the first 2 MiB, by a
/// process that keeps the file open (a database).
fn hot_head_reads(path: &Path) {
    let f = fs::File::open(path).unwrap();
    let size = f.metadata().unwrap().len();
    let mut rng = Rng::new(1);
    let mut buf = vec![0u8; 4096];
    for _ in 0..20_000 {
        let off = if rng.chance(0.9) { rng.below(512) * 4096 } else { rng.below(size / 4096) * 4096 };
        f.read_exact_at(&mut buf, off).unwrap();
    }
}

#[test]
fn hystor_puts_the_hot_chunks_of_a_file_read_through_passthrough_on_the_ssd() {
    let area = Area::new();
    fs::create_dir(area.hdd().join("db")).unwrap();
    big_file(&area.hdd().join("db/big"), 64 << 20);
    // An SSD of 8 MiB: room for the hot 2 MiB and a few more chunks, not
    // for the file.
    let m = Mounted::new(&area, &["--ssd-capacity", "8M", "--chunk-period", "1s", "--migrate-rate", "0"]);
    let v = stats_json(&m.mnt);
    assert_eq!((v["io_mode"].as_str(), v["heat"]["source"].as_str()), (Some("passthrough"), Some("ebpf")));
    assert!(std::process::Command::new("setfattr")
        .args(["-n", "user.tierfs.policy", "-v", "hystor"])
        .arg(m.p("db"))
        .status()
        .unwrap()
        .success());
    let path = m.p("db/big");
    // A setting reaches the files below its directory at the engine's next
    // round; requests taken in before count under the old policy, which
    // counts no chunks (the 20 000 reads may all fit in one round).
    assert!(wait_for(10, || file_stats(&path)["policy"] == "hystor"), "{}", file_stats(&path));
    hot_head_reads(&path);
    // Past 20 000 requests a second the source samples them, and counts
    // each sample as the requests it stands for: the count is then close,
    // not exact (one in five of 20 000: some 1.6 % off, one time in three).
    let near = |v: &serde_json::Value| v["reads"].as_u64().is_some_and(|n| n.abs_diff(20_000) <= 2_000);
    assert!(wait_for(10, || near(&file_stats(&path))), "the file's reads: {}", file_stats(&path));
    // The reader closed the file: its chunks may move now.
    let hot = |v: &serde_json::Value| {
        v["split"]["hottest"]
            .as_array()
            .map_or(0, |h| h.iter().filter(|c| c[0].as_u64().is_some_and(|i| i < 32) && c[2] == true).count())
    };
    let chunks = |v: &serde_json::Value| v["split"]["ssd_chunks"].as_u64().unwrap_or(0);
    assert!(
        wait_for(30, || {
            let v = file_stats(&path);
            hot(&v) == 10 && chunks(&v) >= 32
        }),
        "the ten hottest chunks, all in the first 2 MiB, and 32 chunks in all are not on the SSD: {}\nheat: {}\n{}",
        file_stats(&path),
        stats_json(&m.mnt)["heat"],
        m.log_tail(20)
    );
    let v = file_stats(&path);
    assert!(v["split"]["ssd_chunks"].as_u64().unwrap() <= 128, "more chunks than the SSD holds: {v}");
    // The human view says how the reads were counted.
    let text = String::from_utf8(tierfs(&["stats", "--file", path.to_str().unwrap()]).stdout).unwrap();
    assert!(["reads 18", "reads 19", "reads 20", "reads 21"].iter().any(|r| text.contains(r)), "{text}");
    m.unmount();
}

#[test]
fn without_the_kernel_heat_source_the_mount_says_so_and_counts_chunked_files_in_userspace() {
    let area = Area::new();
    fs::create_dir(area.hdd().join("db")).unwrap();
    big_file(&area.hdd().join("db/big"), 8 << 20);
    let m = Mounted::new(&area, &["--heat", "opens", "--policy", "hystor"]);
    let v = stats_json(&m.mnt);
    assert_eq!(v["io_mode"], "passthrough");
    assert_eq!(v["heat"]["source"], "opens", "{}", v["heat"]);
    assert!(v["counting"].as_str().unwrap().starts_with("per open"), "{}", v["counting"]);
    assert!(m.log_text().contains("heat source: opens (--heat opens)"), "{}", m.log_text());
    // A small file passes through: its open stands for its reads.
    fs::write(m.p("small"), vec![1u8; 4000]).unwrap();
    let s = fs::File::open(m.p("small")).unwrap();
    let mut buf = vec![0u8; 512];
    for i in 0..4 {
        s.read_exact_at(&mut buf, i * 512).unwrap();
    }
    drop(s);
    // The big file under hystor takes the userspace path: every read counts.
    let f = fs::File::open(m.p("db/big")).unwrap();
    for i in 0..100 {
        f.read_exact_at(&mut buf, i * 8192).unwrap();
    }
    drop(f);
    assert!(
        wait_for(10, || file_stats(&m.p("db/big"))["reads"].as_u64() == Some(100)),
        "{}",
        file_stats(&m.p("db/big"))
    );
    assert!(wait_for(10, || file_stats(&m.p("small"))["reads"].as_u64() == Some(1)), "{}", file_stats(&m.p("small")));
    m.unmount();
}

/// Every file's counter after `workload` ran on a mount in `mode`, by path.
fn counters_after(workload: &str, scale: &str, mode: &str) -> std::collections::HashMap<String, f64> {
    let area = Area::new();
    let m = Mounted::new(&area, &["--io-mode", mode, "--policy", "hdd-only"]);
    let dir = m.p("w");
    let o = tierfs(&[
        "bench",
        "workload",
        workload,
        dir.to_str().unwrap(),
        "--scale",
        scale,
        "--seed",
        "42",
        "--ops-per-file",
        "20",
        "--json",
    ]);
    assert!(o.status.success(), "{workload} on {mode}: {}", String::from_utf8_lossy(&o.stderr));
    // The engine's last tick takes the last samples and ends their writes.
    std::thread::sleep(std::time::Duration::from_millis(600));
    let o = tierfs(&["stats", m.mnt.to_str().unwrap(), "--json", "--top", "100000"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    m.unmount();
    v["hottest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap_or_default().to_string(), f["counter"].as_f64().unwrap()))
        .collect()
}

#[test]
fn the_small_presets_workloads_rank_their_hottest_files_alike_through_passthrough_and_the_daemon() {
    // The small preset's workloads at its scales (mail at its own).
    for (workload, scale) in [
        ("webserver-zipf", "0.02"),
        ("webserver", "0.02"),
        ("shifting", "0.02"),
        ("fileserver", "0.02"),
        ("mail", "0.004"),
        ("mixed", "0.02"),
    ] {
        let pt = counters_after(workload, scale, "passthrough");
        let us = counters_after(workload, scale, "userspace");
        let mut hottest: Vec<(&String, f64)> = us.iter().map(|(p, c)| (p, *c)).collect();
        hottest.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
        hottest.truncate(1000);
        let a: Vec<f64> = hottest.iter().map(|(_, c)| *c).collect();
        let b: Vec<f64> = hottest.iter().map(|(p, _)| pt.get(*p).copied().unwrap_or(0.0)).collect();
        let tau = tierfs_bench::report::kendall_tau(&a, &b);
        eprintln!("heat: {workload}: Kendall's tau of the hottest {} files' counters: {tau:.3}", a.len());
        assert!(a.len() >= 20, "{workload}: only {} files", a.len());
        assert!(tau >= 0.9, "{workload}: tau {tau:.3} over {} files", a.len());
    }
}

/// The chunks of a split file on the SSD: the data of its sparse shadow
/// (`SSD/.tierfs/shadow/INO`), by chunk index.
fn shadow_chunks(ssd: &Path, ino: u64, chunk: u64) -> std::collections::BTreeSet<u64> {
    use std::os::fd::AsRawFd;
    let mut set = std::collections::BTreeSet::new();
    let Ok(f) = fs::File::open(ssd.join(".tierfs/shadow").join(ino.to_string())) else { return set };
    let fd = f.as_raw_fd();
    let mut at: libc::off_t = 0;
    loop {
        // SAFETY: fd is open for the loop.
        let data = unsafe { libc::lseek(fd, at, libc::SEEK_DATA) };
        if data < 0 {
            break;
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        for c in data as u64 / chunk..(hole as u64).div_ceil(chunk) {
            set.insert(c);
        }
        at = hole;
    }
    set
}

/// Runs the db workload for `secs` on a hystor mount in `mode` with an SSD
/// of a tenth of its data, waits for the chunk plans to settle, and returns
/// the chunks on the SSD as (file index, chunk index), with the log of the
/// run.
fn db_chunks(mode: &str, scale: f64, secs: u64) -> (std::collections::HashSet<(usize, u64)>, String) {
    use std::os::unix::fs::MetadataExt;
    let db = tierfs_bench::workload::Db { p: tierfs_bench::workload::Params { scale, ..Default::default() } };
    let data = 4 * db.file_size();
    let area = Area::new();
    let cap = format!("{}", data / 10);
    let m = Mounted::new(
        &area,
        &[
            "--io-mode",
            mode,
            "--policy",
            "hystor",
            "--ssd-capacity",
            &cap,
            "--chunk-period",
            "2s",
            "--migrate-rate",
            "0",
        ],
    );
    let dir = m.p("w");
    let o = tierfs(&[
        "bench",
        "workload",
        "db",
        dir.to_str().unwrap(),
        "--scale",
        &scale.to_string(),
        "--seed",
        "42",
        "--duration",
        &format!("{secs}s"),
    ]);
    assert!(o.status.success(), "db on {mode}: {}", String::from_utf8_lossy(&o.stderr));
    let report = String::from_utf8_lossy(&o.stdout).to_string();
    // Settled: nothing queued and the same chunks over three periods.
    let mut last = (u64::MAX, 0);
    let mut same = 0;
    let settled = wait_for(120, || {
        let r = stats_json(&m.mnt)["remap"].clone();
        let now = (
            r["used_bytes"].as_u64().unwrap_or(0),
            r["added"].as_u64().unwrap_or(0) + r["dropped"].as_u64().unwrap_or(0),
        );
        same = if now == last && r["queued"].as_u64() == Some(0) { same + 1 } else { 0 };
        last = now;
        std::thread::sleep(std::time::Duration::from_secs(2));
        same >= 3
    });
    assert!(settled, "{mode}: the chunks did not settle: {}", stats_json(&m.mnt)["remap"]);
    let mut set = std::collections::HashSet::new();
    for i in 0..4usize {
        let ino = fs::metadata(dir.join(format!("db/table-{i}.dat"))).unwrap().ino();
        for c in shadow_chunks(&area.ssd(), ino, 64 << 10) {
            set.insert((i, c));
        }
    }
    m.unmount();
    (set, report)
}

#[test]
fn the_db_workloads_hot_chunks_on_a_passthrough_mount_cover_what_the_userspace_path_finds() {
    let scale: f64 = std::env::var("TIERFS_HEAT_DB_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(0.02);
    let secs: u64 = std::env::var("TIERFS_HEAT_DB_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let db = tierfs_bench::workload::Db { p: tierfs_bench::workload::Params { scale, ..Default::default() } };
    let share: std::collections::HashMap<(usize, u64), f64> =
        db.chunk_shares().into_iter().map(|(f, c, s)| ((f, c), s)).collect();
    let (us, us_run) = db_chunks("userspace", scale, secs);
    let (pt, pt_run) = db_chunks("passthrough", scale, secs);
    let cover = |set: &std::collections::HashSet<(usize, u64)>| {
        set.iter().map(|c| share.get(c).copied().unwrap_or(0.0)).sum::<f64>()
    };
    let both: std::collections::HashSet<_> = pt.intersection(&us).copied().collect();
    let overlap = cover(&both) / cover(&us).max(f64::MIN_POSITIVE);
    eprintln!(
        "heat: db at scale {scale}, {secs} s: userspace {} chunks covering {:.1} % of the random requests, \
         passthrough {} chunks covering {:.1} %; the passthrough set holds {:.1} % of the userspace set's \
         requests\nuserspace run: {us_run}\npassthrough run: {pt_run}",
        us.len(),
        cover(&us) * 100.0,
        pt.len(),
        cover(&pt) * 100.0,
        overlap * 100.0
    );
    assert!(!us.is_empty(), "no chunk reached the SSD in userspace mode");
    assert!(
        overlap >= 0.9,
        "the passthrough run's chunks hold {:.1} % of the userspace run's requests",
        overlap * 100.0
    );
}

#[test]
fn a_new_files_counts_are_its_own_when_it_gets_the_backing_inode_of_one_just_removed() {
    // ext4 gives a removed file's inode number to the next file made: the
    // removed one's samples, still in the ring, went to the new one.
    let area = Area::new();
    let m = Mounted::new(&area, &["--policy", "hdd-only"]);
    for i in 0..100 {
        fs::write(m.p("gone"), vec![1u8; 8192]).unwrap();
        fs::remove_file(m.p("gone")).unwrap();
        fs::write(m.p(&format!("kept-{i}")), vec![2u8; 4096]).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(800));
    let wrong: Vec<_> =
        (0..100).map(|i| (i, counts(&m.p(&format!("kept-{i}"))))).filter(|(_, c)| (c.1, c.3) != (1, 4096)).collect();
    assert!(wrong.is_empty(), "files with other files' writes (writes, bytes): {wrong:?}");
    m.unmount();
}
