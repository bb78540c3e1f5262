//! `tierfs umount`.

use crate::args::UmountArgs;
use crate::mounts::mounted_at;
use anyhow::{bail, Context, Result};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tierfs_fuse::runtime;

/// True while the daemon runs. A daemon that exited but was not reaped yet
/// by its parent (a zombie) has finished: it holds nothing any more.
fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    if pid <= 0 || unsafe { libc::kill(pid, 0) } != 0 {
        return false;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the command name, which is in parentheses.
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, Some("Z") | Some("X"))
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

pub fn run(a: &UmountArgs) -> Result<ExitCode> {
    let pid = unmount(&a.mountpoint)?;
    if let Some(pid) = pid {
        let deadline = Instant::now() + Duration::from_secs(a.timeout);
        while alive(pid) {
            if Instant::now() > deadline {
                bail!("unmounted, but the daemon (pid {pid}) has not exited after {} s", a.timeout);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(ExitCode::SUCCESS)
}
