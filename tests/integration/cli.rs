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
