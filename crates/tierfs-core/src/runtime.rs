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

/// Makes the runtime directory `dir` (its parents as needed, itself mode
/// 0700) if it is missing, and checks that it is this user's own: a real
/// directory (not a symbolic link) owned by the effective user, which
/// nobody else may read or write (an own one that is more open is made
/// 0700). In a shared directory (`/tmp/tierfs-UID`) another user could
/// otherwise make it first, and read or replace the control socket, or
/// plant links where the pid file goes.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    if let Some(p) = dir.parent() {
        std::fs::create_dir_all(p)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let md = std::fs::symlink_metadata(dir)?;
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if !md.file_type().is_dir() || md.uid() != uid {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "the runtime directory {} is not a directory of user {uid} (a {} of user {}): remove it, or set XDG_RUNTIME_DIR",
                dir.display(),
                if md.file_type().is_symlink() { "symbolic link" } else { "file" },
                md.uid()
            ),
        ));
    }
    if md.mode() & 0o077 != 0 {
        // Ours, and nobody else can put anything in its place (it is
        // not a link, and its parent's sticky bit or owner keeps it).
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Writes this process's id into the pid file `path`, in a runtime
/// directory [`private_dir`] checked, never through a symbolic link.
pub fn write_pid_file(path: &Path) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(d) = path.parent() {
        private_dir(d)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    f.write_all(std::process::id().to_string().as_bytes())
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
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn a_runtime_directory_another_user_made_first_is_refused() {
        // /tmp/tierfs-UID was made without a look at who made it: another
        // user could make it first and read the control socket's traffic,
        // replace the socket, or plant links where the pid file goes.
        if !root() {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("tierfs-1000");
        std::fs::create_dir(&d).unwrap();
        std::os::unix::fs::chown(&d, Some(65534), Some(65534)).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(private_dir(&d).is_err(), "another user's directory was taken");
        // A link to a directory of the daemon's own is refused too.
        let mine = t.path().join("mine");
        std::fs::create_dir(&mine).unwrap();
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&mine, &link).unwrap();
        assert!(private_dir(&link).is_err(), "a symbolic link was followed");
        // Its own, too open: made private.
        std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o777)).unwrap();
        private_dir(&mine).unwrap();
        assert_eq!(std::fs::metadata(&mine).unwrap().mode() & 0o777, 0o700);
        let fresh = t.path().join("a/b");
        private_dir(&fresh).unwrap();
        assert_eq!(std::fs::metadata(&fresh).unwrap().mode() & 0o777, 0o700);
    }

    #[test]
    fn the_pid_file_is_never_written_through_a_link() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("run");
        private_dir(&d).unwrap();
        let victim = t.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let pid = d.join("x.pid");
        std::os::unix::fs::symlink(&victim, &pid).unwrap();
        assert!(write_pid_file(&pid).is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        std::fs::remove_file(&pid).unwrap();
        write_pid_file(&pid).unwrap();
        assert_eq!(std::fs::read_to_string(&pid).unwrap(), std::process::id().to_string());
    }

    #[test]
    fn absolute_is_lexical() {
        assert_eq!(absolute(Path::new("/a/./b/../c/")), PathBuf::from("/a/c"));
        assert_eq!(absolute(Path::new("/..")), PathBuf::from("/"));
        assert_eq!(socket_path(Path::new("/mnt/x/")), socket_path(Path::new("/mnt/./x")));
        assert_ne!(socket_path(Path::new("/mnt/x")), socket_path(Path::new("/mnt/y")));
    }
}
