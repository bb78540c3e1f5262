//! `tierfs umount`.

use crate::args::UmountArgs;
use crate::mounts::mounted_at;
use crate::progress::{self, Progress};
use anyhow::{bail, Context, Result};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tierfs_core::report::{ask_within, Request, Response};
use tierfs_fuse::runtime;

/// True while the daemon runs. A daemon that exited but was not reaped yet
/// by its parent (a zombie) has finished: it holds nothing any more.
fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    if pid <= 0 || unsafe { libc::kill(pid, 0) } != 0 {
        return false;
    }
    any_thread_running(std::path::Path::new(&format!("/proc/{pid}")))
}

/// Whether a thread of the process whose /proc directory is `proc` has not
/// exited yet. The leader turns zombie while the other threads still exit,
/// and they may still hold the process's files (the owner lock among
/// them), so every thread counts.
fn any_thread_running(proc: &std::path::Path) -> bool {
    let running = |stat: &std::path::Path| match std::fs::read_to_string(stat) {
        // The state follows the command name, which is in parentheses.
        Ok(s) => !matches!(s.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()), Some("Z" | "X")),
        Err(_) => false,
    };
    match std::fs::read_dir(proc.join("task")) {
        Ok(tasks) => tasks.flatten().any(|t| running(&t.path().join("stat"))),
        Err(_) => running(&proc.join("stat")),
    }
}

/// Unmounts `mountpoint`; returns the daemon's pid if one was found.
pub fn unmount(mountpoint: &std::path::Path) -> Result<Option<i32>> {
    let abs = runtime::absolute(mountpoint);
    let fstype = mounted_at(&abs);
    let pid: Option<i32> = std::fs::read_to_string(runtime::pid_path(&abs)).ok().and_then(|s| s.trim().parse().ok());
    match fstype.as_deref() {
        Some("fuse.tierfs") => {}
        Some(other) => bail!("{} is a {other} mount, not tierfs", abs.display()),
        None => bail!("no tierfs is mounted at {}", abs.display()),
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        // Root unmounts with the system call, as it mounted with one: this
        // needs no helper binary.
        let c = std::ffi::CString::new(abs.as_os_str().as_encoded_bytes())
            .context("the mount point contains a NUL byte")?;
        // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
        if unsafe { libc::umount2(c.as_ptr(), 0) } != 0 {
            let e = std::io::Error::last_os_error();
            bail!("cannot unmount {}: {e}", abs.display());
        }
        return Ok(pid);
    }
    let out = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg(&abs)
        .output()
        .context("cannot run fusermount3 (install fuse3)")?;
    if !out.status.success() {
        bail!("cannot unmount {}: {}", abs.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(pid)
}

/// Bytes the write-back areas still hold for the HDD while the daemon
/// writes them back at its unmount (None: it does not, or did not answer
/// within a moment).
fn flushing_bytes(socket: &std::path::Path) -> Option<u64> {
    match ask_within(socket, &Request::Status { top: 0 }, Some(Duration::from_millis(300))) {
        Ok(Response::Status(r)) if r.write_back.flushing => Some(r.write_back.dirty_bytes),
        _ => None,
    }
}

pub fn run(a: &UmountArgs) -> Result<ExitCode> {
    let socket = runtime::socket_path(&runtime::absolute(&a.mountpoint));
    let pid = unmount(&a.mountpoint)?;
    if let Some(pid) = pid {
        let deadline = Instant::now() + Duration::from_secs(a.timeout);
        // The daemon writes its write-back areas back before it exits (its
        // control socket answers meanwhile): a bar when that takes long.
        let bar = progress::drawn().then(|| Progress::new(None));
        let (mut first, mut asked): (Option<u64>, Option<Instant>) = (None, None);
        while alive(pid) {
            if Instant::now() > deadline {
                bail!("unmounted, but the daemon (pid {pid}) has not exited after {} s", a.timeout);
            }
            if let Some(bar) = bar.as_ref().filter(|_| asked.is_none_or(|t| t.elapsed() > Duration::from_millis(500))) {
                asked = Some(Instant::now());
                match (first, flushing_bytes(&socket)) {
                    (None, Some(d)) if d > 0 => {
                        first = Some(d);
                        bar.manual("writing back to the HDD", d);
                    }
                    (Some(total), Some(d)) => bar.set(total.saturating_sub(d)),
                    _ => {}
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_proc(states: &[(u32, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (tid, state) in states {
            let t = d.path().join("task").join(tid.to_string());
            std::fs::create_dir_all(&t).unwrap();
            std::fs::write(t.join("stat"), format!("{tid} (tierfs (x)) {state} 1 2 3")).unwrap();
        }
        d
    }

    #[test]
    fn a_zombie_leader_with_a_thread_still_exiting_is_still_running() {
        assert!(any_thread_running(fake_proc(&[(10, "Z"), (11, "D")]).path()));
        assert!(any_thread_running(fake_proc(&[(10, "S")]).path()));
        assert!(!any_thread_running(fake_proc(&[(10, "Z")]).path()));
        assert!(!any_thread_running(fake_proc(&[(10, "Z"), (11, "X")]).path()));
        assert!(any_thread_running(std::path::Path::new("/proc/self")));
    }
}
