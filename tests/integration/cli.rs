//! The command itself: its version, shell completions and manual page.

use crate::harness::tierfs;
use std::io::Write;
use std::process::{Command, Stdio};

fn stdout_of(args: &[&str]) -> String {
    let o = tierfs(args);
    assert!(o.status.success(), "tierfs {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn the_version_names_the_commit() {
    let v = stdout_of(&["--version"]);
    assert!(v.starts_with("tierfs ") && v.contains(" (commit "), "{v}");
    // Built from a git checkout (CI clones one): a real commit, not "unknown".
    let head = Command::new("git").args(["rev-parse", "--short=10", "HEAD"]).output().unwrap();
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    if !head.is_empty() {
        assert!(v.contains(&head), "{v} does not name HEAD {head}");
    }
}

#[test]
fn completions_for_each_shell_and_the_manual_page_are_generated() {
    let bash = stdout_of(&["completions", "bash"]);
    assert!(bash.contains("complete") && bash.contains("mount") && bash.contains("--ssd-capacity"), "{bash}");
    // bash parses what it would source.
    let mut sh = Command::new("bash").arg("-n").stdin(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    sh.stdin.take().unwrap().write_all(bash.as_bytes()).unwrap();
    let o = sh.wait_with_output().unwrap();
    assert!(o.status.success(), "bash -n: {}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout_of(&["completions", "zsh"]).starts_with("#compdef tierfs"));
    assert!(stdout_of(&["completions", "fish"]).contains("complete -c tierfs"));
    let man = stdout_of(&["manpage"]);
    assert!(man.starts_with(".ie") || man.starts_with(".TH"), "{}", &man[..man.len().min(200)]);
    assert!(man.contains(".TH tierfs 1") && man.contains("mount"), "{}", &man[..man.len().min(400)]);
    let o = tierfs(&["completions", "tcsh"]);
    assert!(!o.status.success());
}

#[test]
fn where_tells_the_tier_of_each_file_one_line_each() {
    use crate::harness::{Area, Mounted};
    let area = Area::new();
    let m = Mounted::new(&area, &["--policy", "hdd-only"]);
    std::fs::create_dir(m.p("d")).unwrap();
    std::fs::write(m.p("d/a"), b"a").unwrap();
    std::fs::write(m.p("b"), b"b").unwrap();
    std::os::unix::fs::symlink("b", m.p("link")).unwrap();
    let listed = stdout_of(&["where", "-r", m.mnt.to_str().unwrap()]);
    let one = stdout_of(&["where", m.p("b").to_str().unwrap()]);
    let dir = tierfs(&["where", m.p("d").to_str().unwrap()]);
    let outside = tierfs(&["where", "/tmp"]);
    let (b, a) = (m.p("b"), m.p("d/a"));
    m.unmount();
    let want = format!("hdd\t{}\nhdd\t{}\n", b.display(), a.display());
    assert_eq!(listed, want, "files only, sorted, the symbolic link left out");
    assert_eq!(one, format!("hdd\t{}\n", b.display()));
    assert!(!dir.status.success() && String::from_utf8_lossy(&dir.stderr).contains("-r"));
    assert!(!outside.status.success() && String::from_utf8_lossy(&outside.stderr).contains("not on a tierfs mount"));
}

#[test]
fn migrate_runs_the_policy_once_now_and_dry_run_moves_nothing() {
    use crate::harness::{xattr, Area, Mounted};
    let area = Area::new();
    // An hour's interval: after the run at mount, the policy waits.
    let m = Mounted::new(&area, &["--policy", "interval-hot-dst", "--interval", "1h", "--io-mode", "userspace"]);
    // The engine's first run (at its first tick) is over before the files exist.
    std::thread::sleep(std::time::Duration::from_secs(1));
    std::fs::write(m.p("hot"), vec![1u8; 16 << 10]).unwrap();
    std::fs::write(m.p("cold"), vec![2u8; 16 << 10]).unwrap();
    for _ in 0..20 {
        std::fs::read(m.p("hot")).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(400));
    let place = |f: &str| xattr(&m.p(f), "user.tierfs.placement").unwrap_or_default();
    let mnt = m.mnt.to_str().unwrap().to_string();
    let dry = stdout_of(&["migrate", &mnt, "--dry-run"]);
    let hot_dry = place("hot");
    let json = stdout_of(&["migrate", &mnt, "--dry-run", "--json"]);
    let done = stdout_of(&["migrate", &mnt]);
    let moved = crate::harness::wait_for(20, || place("hot") == "ssd");
    m.unmount();
    assert!(dry.contains("promote") && dry.contains("/hot") && dry.contains("dry run: nothing moved"), "{dry}");
    assert_eq!(hot_dry, "hdd", "a dry run moves nothing");
    let planned: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(planned.as_array().unwrap().iter().any(|p| p["path"] == "/hot" && p["action"] == "promote"), "{json}");
    assert!(done.contains("queued for the migrator"), "{done}");
    assert!(moved, "the hot file was promoted: {done}");
}

/// Review finding: migrate ran the policy-change moves too, which demote
/// every file a caching policy finds on the SSD, such as those
/// `--placement ssd` puts there.
#[test]
fn migrate_leaves_files_the_placement_put_on_the_ssd() {
    use crate::harness::{xattr, Area, Mounted};
    let area = Area::new();
    let m = Mounted::new(&area, &["--policy", "on-demand-cache", "--placement", "ssd", "--io-mode", "userspace"]);
    std::fs::write(m.p("f"), b"placed").unwrap();
    let placed = xattr(&m.p("f"), "user.tierfs.placement").unwrap_or_default();
    let json = stdout_of(&["migrate", m.mnt.to_str().unwrap(), "--dry-run", "--json"]);
    m.unmount();
    assert_eq!(placed, "ssd");
    let planned: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(!planned.as_array().unwrap().iter().any(|p| p["path"] == "/f"), "{json}");
}

#[test]
fn pins_are_listed_with_their_tier_and_whether_the_file_is_there() {
    use crate::harness::{wait_for, Area, Mounted};
    let area = Area::new();
    let m = Mounted::new(&area, &["--policy", "hdd-only", "--io-mode", "userspace"]);
    let mnt = m.mnt.to_str().unwrap().to_string();
    assert_eq!(stdout_of(&["policy", "pins", &mnt]), "", "no pins yet");
    std::fs::create_dir(m.p("d")).unwrap();
    std::fs::write(m.p("d/a"), b"a").unwrap();
    std::fs::write(m.p("f"), b"f").unwrap();
    let pin = |p: &str, t: &str| stdout_of(&["policy", "pin", m.p(p).to_str().unwrap(), t]);
    pin("d", "hdd");
    pin("f", "ssd");
    // "there" once the move is committed.
    let mut listed = String::new();
    let moved = wait_for(10, || {
        listed = stdout_of(&["policy", "pins", &mnt]);
        listed.contains("ssd\tthere\t")
    });
    assert!(moved && area.ssd().join("f").exists(), "the pinned file moves: {listed}");
    let json: serde_json::Value = serde_json::from_str(&stdout_of(&["policy", "list-pins", &mnt, "--json"])).unwrap();
    pin("f", "none");
    let after = stdout_of(&["policy", "pins", &mnt]);
    let (d, f) = (m.p("d"), m.p("f"));
    m.unmount();
    assert_eq!(listed, format!("hdd\tdir\t{}/\nssd\tthere\t{}\n", d.display(), f.display()));
    assert_eq!(json[1]["path"], "/f");
    assert_eq!(json[1]["placement"], "ssd");
    assert_eq!(json[0]["directory"], true);
    assert_eq!(after, format!("hdd\tdir\t{}/\n", d.display()), "an unpinned file leaves the list");
}

/// Runs `tierfs ARGS` on a pseudo-terminal (util-linux `script`), as a
/// user at a shell would: what it printed there, escapes included.
fn on_a_terminal(args: &[&str]) -> (bool, String) {
    let bin = env!("CARGO_BIN_EXE_tierfs");
    let cmd = std::iter::once(bin).chain(args.iter().copied()).collect::<Vec<_>>().join(" ");
    let o = Command::new("script").args(["-qec", &cmd, "/dev/null"]).output().expect("script (util-linux)");
    (o.status.success(), String::from_utf8_lossy(&o.stdout).into_owned())
}

#[test]
fn umount_shows_the_write_back_on_a_terminal() {
    use crate::harness::{is_mounted, stats_json, Area, Mounted};
    let area = Area::new();
    let emulated = ["--emulate", "ssd=ssd-sata,hdd=hdd-7200,cache=0"];
    let args = [&["--policy", "write-back-cache", "--ssd-capacity", "16M"][..], &emulated].concat();
    let m = Mounted::new(&area, &args);
    // Small new files: each lands whole in the write-back area, a dirty
    // chunk the unmount writes back with a seek of the emulated disk.
    for i in 0..300 {
        std::fs::write(m.p(&format!("f{i}")), [7u8; 4096]).unwrap();
    }
    let dirty = stats_json(&m.mnt)["write_back"]["dirty_bytes"].as_u64().unwrap();
    assert!(dirty >= 100 * 4096, "the writes are in the area: {dirty} bytes dirty");
    let mnt = m.mnt.clone();
    let (ok, shown) = on_a_terminal(&["umount", mnt.to_str().unwrap()]);
    let left_mounted = is_mounted(&mnt);
    m.unmount();
    assert!(ok && !left_mounted, "{shown}");
    assert!(shown.contains("writing back to the HDD"), "no bar on the terminal: {shown:?}");
}

#[test]
fn bench_workload_draws_bars_only_on_a_terminal() {
    let area = crate::harness::Area::new();
    let dir = area.path("w");
    let args = ["bench", "workload", "webserver", dir.to_str().unwrap(), "--scale", "0.002", "--duration", "1s"];
    let (ok, shown) = on_a_terminal(&args);
    assert!(ok, "{shown}");
    assert!(shown.contains("preparing webserver") && shown.contains("running webserver"), "{shown:?}");
    let plain = tierfs(&args);
    let err = String::from_utf8_lossy(&plain.stderr);
    assert!(plain.status.success(), "{err}");
    assert!(!err.contains('\x1b') && !err.contains("running webserver"), "no bar without a terminal: {err:?}");
    assert!(err.contains("prepared webserver in"), "{err}");
}
