//! `tierfs trace` and `tierfs plan` as a user runs them: a synthetic
//! workload and an imported block trace, planned with the example catalogue.

use crate::harness::BIN;
use std::process::{Command, Output};

fn tierfs(args: &[&str]) -> Output {
    let out = Command::new(BIN).args(args).output().expect("run tierfs");
    eprintln!("tierfs {args:?}:\n{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

fn ok(args: &[&str]) -> String {
    let out = tierfs(args);
    assert!(out.status.success(), "tierfs {args:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_synthetic_random_write_workload_is_planned_onto_flash_and_disks() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("rw3.trace");
    let t = t.to_str().unwrap();
    ok(&["trace", "synth", "RW3", "--out", t, "--duration", "10s", "--span", "10G"]);
    let shown: serde_json::Value = serde_json::from_str(&ok(&["trace", "show", t, "--json"])).unwrap();
    let writes = shown["records"]["write"].as_u64().unwrap();
    let reads = shown["records"]["read"].as_u64().unwrap();
    assert!((90_000..110_000).contains(&(reads + writes)), "{shown}");
    assert!(writes > 3 * reads, "{shown}");
    let text = ok(&["plan", "--trace", t, "--capacity", "1T", "--lifetime", "5y"]);
    assert!(text.contains("Intel X25-E SLC"), "{text}");
    assert!(text.contains("bound by"), "{text}");
    let plan: serde_json::Value =
        serde_json::from_str(&ok(&["plan", "--trace", t, "--capacity", "1T", "--json"])).unwrap();
    let again: serde_json::Value =
        serde_json::from_str(&ok(&["plan", "--trace", t, "--capacity", "1T", "--json"])).unwrap();
    assert_eq!(plan, again, "the same trace gives the same plan");
    assert!(plan["total"].as_f64().unwrap() > 0.0);
}

#[test]
fn an_msr_trace_is_imported_and_bad_inputs_are_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("hm_0.csv");
    let mut text = String::from("Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n");
    for i in 0..1000u64 {
        let kind = if i % 4 == 0 { "Write" } else { "Read" };
        text += &format!("{},hm,0,{kind},{},4096,100\n", 128166372000000000 + i * 10_000, (i * 7919 % 5000) * 4096);
    }
    std::fs::write(&csv, text).unwrap();
    let t = dir.path().join("hm_0.trace");
    let t = t.to_str().unwrap();
    ok(&["trace", "import", csv.to_str().unwrap(), "--out", t]);
    let shown = ok(&["trace", "show", t]);
    assert!(shown.contains("msr:hm_0.csv"), "{shown}");
    assert!(shown.contains("in 750 requests"), "{shown}");
    ok(&["plan", "--trace", t]);

    // A catalogue with a misspelt field, a capacity below what the trace
    // touches, a file that is not a trace: each names what is wrong.
    let cat = dir.path().join("devices.toml");
    std::fs::write(&cat, "[[device]]\nname = \"x\"\ncapacity_gb = 1\n").unwrap();
    for (args, why) in [
        (vec!["plan", "--trace", t, "--devices", cat.to_str().unwrap()], "missing field"),
        (vec!["plan", "--trace", t, "--capacity", "1M"], "more than the capacity"),
        (vec!["plan", "--trace", csv.to_str().unwrap()], "not a tierfs trace"),
        (vec!["trace", "synth", "XX9", "--out", t], "no synthetic workload"),
    ] {
        let out = tierfs(&args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{args:?}: {err}");
    }
    let bad = dir.path().join("bad.trace");
    let out = tierfs(&["trace", "import", "/etc/hostname", "--out", bad.to_str().unwrap(), "--format", "msr"]);
    assert!(!out.status.success());
    assert!(!bad.exists(), "a failed import leaves no trace file behind");
}

#[test]
fn a_mount_records_what_it_sees_until_interrupted_and_the_trace_plans() {
    use crate::harness::{wait_for, Area, Mounted};
    use std::os::unix::fs::MetadataExt;
    let area = Area::new();
    let m = Mounted::new(&area, &["--io-mode", "userspace"]);
    let trace = area.path("mount.trace");
    let mnt = m.mnt.to_str().unwrap().to_string();
    let rec = Command::new(BIN)
        .args(["trace", "record", &mnt, "--out", trace.to_str().unwrap()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_for(10, || trace.exists()), "the recording did not start");
    let again = tierfs(&["trace", "record", &mnt, "--out", "/tmp/other.trace"]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("already running"));
    let inside = m.p("self.trace");
    let on_mount = tierfs(&["trace", "record", &mnt, "--out", inside.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&on_mount.stderr).contains("cannot be written on the mount"));

    std::fs::create_dir(m.p("d")).unwrap();
    let d_ino = std::fs::metadata(m.p("d")).unwrap().ino();
    std::fs::write(m.p("d/a"), vec![7u8; 3 << 16]).unwrap();
    let a_ino = std::fs::metadata(m.p("d/a")).unwrap().ino();
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
    assert_eq!(std::fs::read(m.p("d/a")).unwrap().len(), 3 << 16);
    std::fs::create_dir(m.p("e")).unwrap();
    let e_ino = std::fs::metadata(m.p("e")).unwrap().ino();
    std::fs::rename(m.p("d/a"), m.p("e/b")).unwrap();
    std::fs::remove_file(m.p("e/b")).unwrap();

    // SAFETY: the pid is of the child this test started.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let out = rec.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("records in"), "{err}");

    let r = tierfs_core::trace::open(&trace).unwrap();
    assert_eq!(r.meta().source, format!("mount:{mnt}"));
    let recs: Vec<_> = r.map(|r| r.unwrap()).filter(|r| r.file == a_ino).collect();
    use tierfs_core::trace::Kind;
    let kinds: Vec<Kind> = recs.iter().map(|r| r.kind).collect();
    assert_eq!(kinds.first(), Some(&Kind::Create), "{recs:?}");
    assert_eq!(kinds.last(), Some(&Kind::Remove), "{recs:?}");
    // Every record names the file's directory at the time: d until the
    // rename into e, e after.
    let moved = kinds.iter().position(|k| *k == Kind::Move).expect("a move record");
    assert!(recs[..moved].iter().all(|r| r.dir == d_ino), "{recs:?}");
    assert!(recs[moved..].iter().all(|r| r.dir == e_ino), "{recs:?}");
    let bytes = |k: Kind| recs.iter().filter(|r| r.kind == k).map(|r| r.len).sum::<u64>();
    assert_eq!(bytes(Kind::Write), 3 << 16, "{recs:?}");
    assert_eq!(bytes(Kind::Read), 3 << 16, "{recs:?}");
    assert!(recs.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    ok(&["plan", "--trace", trace.to_str().unwrap()]);

    let stop = tierfs(&["trace", "record", &mnt, "--stop"]);
    assert!(!stop.status.success());
    assert!(String::from_utf8_lossy(&stop.stderr).contains("no recording is running"));
    m.unmount();
}

#[test]
fn a_workload_trace_replays_in_the_simulator_the_same_every_time() {
    use crate::harness::{Area, Mounted};
    let area = Area::new();
    let m = Mounted::new(&area, &["--io-mode", "userspace", "--policy", "hdd-only"]);
    let trace = area.path("web.trace");
    let t = trace.to_str().unwrap();
    let dir = m.p("w");
    let d = dir.to_str().unwrap();
    let out = tierfs(&[
        "bench",
        "workload",
        "webserver-zipf",
        d,
        "--scale",
        "0.004",
        "--duration",
        "1s",
        "--trace",
        t,
        "--warmup",
        "500ms",
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("operations in the measured run"));
    let r = tierfs_core::trace::open(&trace).unwrap();
    let meta = r.meta().clone();
    assert_eq!(meta.source, "workload:webserver-zipf");
    let recs: Vec<_> = r.map(|r| r.unwrap()).collect();
    use tierfs_core::trace::Kind;
    let phases: Vec<u64> = recs.iter().filter(|r| r.kind == Kind::Phase).map(|r| r.off).collect();
    assert_eq!(phases, vec![0, 1, 2], "preparation, warm-up, measured run");
    let ops = recs.iter().filter(|r| r.kind == Kind::Op).count() as u64;
    assert_eq!(meta.ops, Some(ops));
    assert!(ops > 10, "{ops} operations");
    // The tree the generator made is known, so a type-aware replay can
    // find the policy directory of every file.
    assert!(meta.dirs.len() >= 3, "{:?}", meta.dirs);
    let on_mount = tierfs(&["bench", "workload", "webserver", d, "--trace", m.p("x.trace").to_str().unwrap()]);
    assert!(!on_mount.status.success());
    m.unmount();

    let sim = |policy: &str, cap: &str| -> serde_json::Value {
        let args = ["sim", "--trace", t, "--policy", policy, "--ssd-capacity", cap, "--duration", "1s", "--json"];
        serde_json::from_str(&ok(&args)).unwrap()
    };
    let a = ok(&["sim", "--trace", t, "--policy", "on-demand-cache", "--ssd-capacity", "300K", "--json"]);
    let b = ok(&["sim", "--trace", t, "--policy", "on-demand-cache", "--ssd-capacity", "300K", "--json"]);
    assert_eq!(a, b, "the same trace and settings give the same report, byte for byte");
    let hdd = sim("hdd-only", "1M");
    let ssd = sim("ssd-only", "1G");
    let cache = sim("on-demand-cache", "1G");
    let ops = |v: &serde_json::Value| v["report"]["ops_per_sec"].as_f64().unwrap();
    assert_eq!(hdd["ssd_hit_ratio"].as_f64(), Some(0.0), "{hdd}");
    assert_eq!(ssd["ssd_hit_ratio"].as_f64(), Some(1.0), "{ssd}");
    assert!(ops(&ssd) > 3.0 * ops(&hdd), "SSD {} against HDD {}", ops(&ssd), ops(&hdd));
    assert!(cache["moves"].as_u64().unwrap() > 0, "{cache}");
    assert!(ops(&cache) > ops(&hdd), "{cache}");
    for (args, why) in [
        (vec!["sim", "--trace", t, "--policy", "hystor", "--ssd-capacity", "1M"], "not simulated"),
        (vec!["sim", "--trace", t, "--policy", "nope", "--ssd-capacity", "1M"], "unknown policy"),
        (vec!["sim", "--trace", "/etc/hostname", "--ssd-capacity", "1M"], "not a tierfs trace"),
    ] {
        let out = tierfs(&args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(String::from_utf8_lossy(&out.stderr).contains(why), "{args:?}");
    }
}

#[test]
fn the_sweep_runs_in_the_simulator_and_writes_the_usual_results() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let work = dir.path().join("work");
    // A simulated sweep of webserver-zipf, small, into `out`.
    let sweep = |out: &std::path::Path, more: &[&str]| -> Vec<serde_json::Value> {
        let mut args = vec!["bench", "sweep", "--sim", "--only", "webserver-zipf", "--scale", "0.004"];
        args.extend(more);
        args.extend(["--out", out.to_str().unwrap(), "--work", work.to_str().unwrap()]);
        ok(&args);
        serde_json::from_str(&std::fs::read_to_string(out.join("rows.json")).unwrap()).unwrap()
    };
    let rows = sweep(&out, &["--arch", "on-demand-cache"]);
    let archs: Vec<&str> = rows.iter().map(|r| r["arch"].as_str().unwrap()).collect();
    assert_eq!(archs, ["hdd-only", "ssd-only", "on-demand-cache", "on-demand-cache", "on-demand-cache"]);
    assert!(out.join("README.md").exists() && out.join("chart-webserver-zipf.svg").exists());
    // The trace is kept and reused: a second sweep gives the same rows.
    let first = std::fs::read_to_string(out.join("results.csv")).unwrap();
    sweep(&out, &["--arch", "on-demand-cache"]);
    assert_eq!(std::fs::read_to_string(out.join("results.csv")).unwrap(), first);
    // An interval architecture at two phases of its interval: both kept in
    // `repeats`, the row the slower (the lower of the middle two).
    let phased = dir.path().join("phased");
    let rows = sweep(&phased, &["--arch", "interval-hot-dst-2s", "--sizes", "50", "--phases", "2"]);
    let row = rows.iter().find(|r| r["arch"] == "interval-hot-dst-2s").unwrap();
    let runs: Vec<f64> = row["repeats"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(runs.len(), 2, "{row}");
    assert_eq!(row["report"]["ops_per_sec"].as_f64().unwrap(), runs[0].min(runs[1]), "{row}");
    assert!(rows.iter().filter(|r| r["arch"] != "interval-hot-dst-2s").all(|r| r.get("repeats").is_none()));
    assert!(std::fs::read_to_string(phased.join("README.md")).unwrap().contains("phases of its interval"));
    // A live run's phase is not chosen.
    let (p, w) = (phased.to_str().unwrap(), work.to_str().unwrap());
    let out = tierfs(&["bench", "sweep", "--phases", "2", "--out", p, "--work", w]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--phases goes with --sim"));
}
