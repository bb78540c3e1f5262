//! Where a running daemon can be found from its mount point: a directory
//! of pid files and control sockets named after the mount point; and how
//! its background threads are ended.

use std::path::{Component, Path, PathBuf};

/// Joins `h` if it ends by `deadline`; gives it back if it does not (the
/// caller names it in its report).
pub(crate) fn join_by(
    h: std::thread::JoinHandle<()>,
    deadline: std::time::Instant,
) -> Result<(), std::thread::JoinHandle<()>> {
    while !h.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    if !h.is_finished() {
        return Err(h);
    }
    let _ = h.join();
    Ok(())
}

/// The runtime directory: `/run/tierfs` for root, else
/// `$XDG_RUNTIME_DIR/tierfs` or `/tmp/tierfs-UID`.
pub fn runtime_dir() -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        return PathBuf::from("/run/tierfs");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => Path::new(&d).join("tierfs"),
        _ => PathBuf::from(format!("/tmp/tierfs-{uid}")),
    }
}

/// Makes a path absolute and removes `.` and `..` lexically, without
/// touching the file system (a hung FUSE mount must not hang the caller).
pub fn absolute(p: &Path) -> PathBuf {
    let base =
        if p.is_absolute() { PathBuf::new() } else { std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")) };
    let mut out = PathBuf::from("/");
    for c in base.join(p).components() {
        match c {
            Component::RootDir | Component::Prefix(_) | Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
        }
    }
    out
}

fn key(mountpoint: &Path) -> String {
    // FNV-1a: stable across builds, unlike the std hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in absolute(mountpoint).as_os_str().as_encoded_bytes() {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The control socket of the daemon serving `mountpoint`.
pub fn socket_path(mountpoint: &Path) -> PathBuf {
    runtime_dir().join(format!("{}.sock", key(mountpoint)))
}

/// The pid file of the daemon serving `mountpoint`.
pub fn pid_path(mountpoint: &Path) -> PathBuf {
    runtime_dir().join(format!("{}.pid", key(mountpoint)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_is_lexical() {
        assert_eq!(absolute(Path::new("/a/./b/../c/")), PathBuf::from("/a/c"));
        assert_eq!(absolute(Path::new("/..")), PathBuf::from("/"));
        assert_eq!(socket_path(Path::new("/mnt/x/")), socket_path(Path::new("/mnt/./x")));
        assert_ne!(socket_path(Path::new("/mnt/x")), socket_path(Path::new("/mnt/y")));
    }
}
