//! Access statistics through a real mount, and `tierfs stats`.

use crate::harness::{tierfs, wait_for, Area, Mounted};
use std::io::Read;
use std::os::unix::fs::MetadataExt;

fn status(m: &Mounted) -> serde_json::Value {
    let o = tierfs(&["stats", m.mnt.to_str().unwrap(), "--json", "--top", "50"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn counter_of(v: &serde_json::Value, path: &str) -> u64 {
    v["hottest"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("{path} not among the hottest: {v}"))["counter"]
        .as_u64()
        .unwrap()
}

fn read_in(path: &std::path::Path, chunk: usize) {
    let mut f = std::fs::File::open(path).unwrap();
    let mut buf = vec![0u8; chunk];
    while f.read(&mut buf).unwrap() > 0 {}
}

/// Waits until the engine has taken the events (it runs every 100 ms).
fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(400));
}

/// The HDD-only baseline keeps files where they are, so that this test
/// sees the statistics alone.
const STILL: [&str; 4] = ["--io-mode", "userspace", "--policy", "hdd-only"];

#[test]
fn small_random_reads_rank_hotter_and_counters_survive_remount() {
    let area = Area::new();
    let m = Mounted::new(&area, &STILL);
    std::fs::write(m.p("small"), vec![1u8; 64 << 10]).unwrap();
    std::fs::write(m.p("large"), vec![2u8; 8 << 20]).unwrap();
    read_in(&m.p("small"), 4096);
    read_in(&m.p("large"), 1 << 20);
    settle();
    let v = status(&m);
    let (small, large) = (counter_of(&v, "/small"), counter_of(&v, "/large"));
    // 16 reads of one page (64 each) and one 16-page write (4).
    assert_eq!(small, 16 * 64 + 4, "{v}");
    // 8 reads of 256 pages (1 each) and one 8 MiB write, which the kernel
    // splits into 1 MiB pieces that count as one request (1).
    assert_eq!(large, 9, "{v}");
    assert!(small > large);
    assert_eq!(v["hottest"][0]["path"], "/small");
    assert_eq!(v["counting"], "per request");
    let hdd_requests = v["tiers"][1]["requests"].as_u64().unwrap();
    // 16 + 1 reads of the small file, 8 + 1 of the large one, 2 writes.
    assert_eq!(hdd_requests, 17 + 9 + 2, "{v}");
    // The last five minutes, hour and day saw all of it.
    let h = v["history"].as_array().unwrap();
    assert_eq!(h.iter().map(|w| w["span_secs"].as_u64().unwrap()).collect::<Vec<_>>(), [300, 3600, 86_400]);
    for w in h {
        assert_eq!(w["totals"]["reqs"][1].as_u64(), Some(hdd_requests), "{w}");
        assert_eq!(w["ssd_hit_ratio"].as_f64(), Some(0.0), "{w}");
    }
    let ino = std::fs::metadata(m.p("small")).unwrap().ino();
    m.unmount();

    let m = Mounted::new(&area, &STILL);
    let v = status(&m);
    assert_eq!(counter_of(&v, "/small"), small, "counters survive a remount");
    // The requests before the remount are not this mount's last five minutes.
    assert_eq!(v["history"][0]["totals"]["reqs"][1].as_u64(), Some(0), "{v}");
    let text = String::from_utf8(tierfs(&["stats", m.mnt.to_str().unwrap()]).stdout).unwrap();
    assert!(text.contains("last 5 min") && text.contains("last day"), "{text}");
    assert_eq!(counter_of(&v, "/large"), large);
    let o = tierfs(&["stats", "--file", m.p("small").to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let f: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(f["ino"].as_u64(), Some(ino));
    assert_eq!(f["counter"].as_u64(), Some(small));
    assert_eq!(f["placement"], "hdd");
    // 16 reads of a page and the read that found the end of the file.
    assert_eq!(f["reads"].as_u64(), Some(17));
    m.unmount();
}

#[test]
fn without_a_heat_source_passthrough_counts_opens_as_whole_file_accesses() {
    let area = Area::new();
    let m = Mounted::new(&area, &["--io-mode", "passthrough", "--policy", "hdd-only", "--heat", "opens"]);
    std::fs::write(m.p("small"), vec![1u8; 4000]).unwrap();
    std::fs::write(m.p("large"), vec![2u8; 4 << 20]).unwrap();
    for _ in 0..3 {
        read_in(&m.p("small"), 512);
        read_in(&m.p("large"), 512);
    }
    settle();
    let v = status(&m);
    assert_eq!(v["io_mode"], "passthrough");
    // The create counts as a write of the (then empty) file: one page.
    assert_eq!(counter_of(&v, "/small"), 64 + 3 * 64, "{v}");
    assert_eq!(counter_of(&v, "/large"), 64 + 3, "{v}");
    m.unmount();
}

#[test]
fn stats_without_a_mount_is_a_clear_error() {
    let area = Area::new();
    let o = tierfs(&["stats", area.mnt().to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no tierfs is mounted at"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1);
}

#[test]
fn statistics_can_be_switched_off() {
    let area = Area::new();
    let m = Mounted::new(&area, &["--io-mode", "userspace", "--no-stats"]);
    std::fs::write(m.p("f"), b"x").unwrap();
    let _ = std::fs::read(m.p("f")).unwrap();
    settle();
    let v = status(&m);
    assert_eq!(v["stats_enabled"], false);
    assert_eq!(v["tracked_files"], 0);
    m.unmount();
}

/// A free TCP port on the loopback (another process could take it before
/// the mount does; the mount then fails with a clear message).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `GET path` on 127.0.0.1:`port`: (status line, body).
fn http_get(port: u16, path: &str) -> (String, String) {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (head.lines().next().unwrap_or("").to_string(), body.to_string())
}

#[test]
fn metrics_are_served_for_prometheus_and_pass_promtool() {
    let area = Area::new();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let m = Mounted::new(&area, &["--io-mode", "userspace", "--metrics", &addr]);
    std::fs::write(m.p("f"), vec![3u8; 64 << 10]).unwrap();
    read_in(&m.p("f"), 4096);
    settle();
    // A move with a reason: the file pinned to the other tier.
    let (there, kind) = if area.ssd().join("f").exists() { ("hdd", "demotion") } else { ("ssd", "promotion") };
    let o = tierfs(&["policy", "pin", m.p("f").to_str().unwrap(), there]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Counted once the move is done, just after the file is on its tier.
    let pinned = format!("tierfs_moves_total{{kind=\"{kind}\",reason=\"pinned\"}} 1");
    assert!(
        wait_for(10, || http_get(port, "/metrics").1.lines().any(|l| l == pinned)),
        "the pinned file moves to the {there}"
    );
    let (status, body) = http_get(port, "/metrics");
    let (missing, _) = http_get(port, "/nothing");
    m.unmount();
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    assert!(missing.contains("404"), "{missing}");
    let value = |name: &str| -> f64 {
        body.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')).and_then(|v| v.parse().ok()))
            .unwrap_or_else(|| panic!("no {name} in\n{body}"))
    };
    let requests = value("tierfs_requests_total{tier=\"ssd\"}") + value("tierfs_requests_total{tier=\"hdd\"}");
    assert!(requests >= 17.0, "16 reads of the file and its write at least: {requests}\n{body}");
    let ratio = value("tierfs_ssd_hit_ratio");
    assert!((0.0..=1.0).contains(&ratio));
    // In userspace mode the daemon sees every request: no heat source.
    assert_eq!(value("tierfs_heat_source{source=\"opens\"}"), 1.0, "{body}");
    let pinned = format!("{{kind=\"{kind}\",reason=\"pinned\"}}");
    assert_eq!(value(&format!("tierfs_moves_total{pinned}")), 1.0, "{body}");
    assert_eq!(value(&format!("tierfs_moved_bytes_total{pinned}")), 65536.0, "{body}");
    // The stores' response times, as histograms: the reads were measured.
    let reads =
        ["ssd", "hdd"].map(|t| value(&format!("tierfs_request_duration_seconds_count{{op=\"read\",tier=\"{t}\"}}")));
    assert!(reads[0] + reads[1] >= 1.0, "{body}");
    // Debian's promtool (scripts/setup.sh installs it) lints the exposition.
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (from the prometheus package; run scripts/setup.sh)");
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Mounts `area` with `--metrics addr`, which must fail: its error.
fn refused_metrics(area: &Area, addr: &str) -> String {
    let o = tierfs(&[
        "mount",
        area.ssd().to_str().unwrap(),
        area.hdd().to_str().unwrap(),
        area.mnt().to_str().unwrap(),
        "--metrics",
        addr,
    ]);
    assert!(!o.status.success(), "--metrics {addr} must fail");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_bad_metrics_address_is_a_clear_error() {
    let err = refused_metrics(&Area::new(), "localhost");
    assert!(err.contains("--metrics") && err.contains("127.0.0.1:9877"), "{err}");
}

#[test]
fn a_taken_metrics_port_fails_the_mount_before_it_starts() {
    let area = Area::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let err = refused_metrics(&area, &addr);
    assert!(err.contains("cannot serve metrics") && err.contains(&addr), "{err}");
    assert!(
        !std::fs::read_to_string("/proc/self/mountinfo").unwrap().contains(area.mnt().to_str().unwrap()),
        "nothing mounted"
    );
}
