//! One tierfs per HDD directory. A tier's directory holds one volume's
//! files, and that volume's state lives elsewhere (on its SSD): a second
//! tierfs over the same directory (another node in front of the same shared
//! volume, a mistyped mount) would corrupt both. `HDD/.tierfs/owner` names
//! the volume (an id kept in its state database) and who mounted it last,
//! and is held with a file lock while mounted, which a network file system
//! with POSIX locks (GlusterFS) enforces across nodes.
//!
//! [`decide`] is the pure decision; [`claim`] does the locking and writing.

use crate::mount::MountError;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::Path;
use tierfs_core::state::ns::Namespace;

/// The state database's key for the volume id.
const META_KEY: &str = "volume_id";

/// Who mounted an HDD directory last, as `.tierfs/owner` records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The volume's id (also in its state database).
    pub id: String,
    /// The host that mounted it.
    pub host: String,
    /// The daemon's process id there.
    pub pid: u32,
    /// Its SSD directory.
    pub ssd: String,
}

impl Owner {
    /// Parses the `key=value` lines of the file; `None` without an id.
    pub fn parse(text: &str) -> Option<Owner> {
        let mut o = Owner { id: String::new(), host: String::new(), pid: 0, ssd: String::new() };
        for line in text.lines() {
            match line.split_once('=') {
                Some(("id", v)) => o.id = v.trim().to_string(),
                Some(("host", v)) => o.host = v.trim().to_string(),
                Some(("pid", v)) => o.pid = v.trim().parse().unwrap_or(0),
                Some(("ssd", v)) => o.ssd = v.trim().to_string(),
                _ => {}
            }
        }
        (!o.id.is_empty()).then_some(o)
    }

    /// The file's text.
    pub fn render(&self) -> String {
        format!("id={}\nhost={}\npid={}\nssd={}\n", self.id, self.host, self.pid, self.ssd)
    }

    fn who(&self) -> String {
        format!("host {}, pid {}, SSD {}", self.host, self.pid, self.ssd)
    }
}

/// The volume id to mount with, from the id in the state database
/// (`state`), the owner file (`file`), this host's name and the SSD
/// directory; or why not. A state without an id over a tree this host
/// mounted with the same SSD directory (a replaced SSD, a rebuilt state)
/// takes the tree over; anything else without the tree's id is refused.
pub fn decide(
    state: Option<&str>,
    file: Option<&Owner>,
    (host, ssd): (&str, &str),
    new_id: impl FnOnce() -> String,
) -> Result<String, String> {
    let fix = "if that volume is gone for good, remove .tierfs/owner in the HDD directory and mount again";
    match (state, file) {
        (Some(s), Some(f)) if s == f.id => Ok(s.to_string()),
        (Some(s), Some(f)) => Err(format!(
            "belongs to another tierfs volume (id {}, last mounted by {}; this state's volume is {s}); {fix}",
            f.id,
            f.who()
        )),
        (Some(s), None) => Ok(s.to_string()),
        (None, Some(f)) if f.host == host && f.ssd == ssd => Ok(f.id.clone()),
        (None, Some(f)) if f.host == host => Err(format!(
            "belongs to a tierfs volume with another SSD directory (id {}, last mounted by {}); {fix}",
            f.id,
            f.who()
        )),
        (None, Some(f)) => {
            Err(format!("belongs to a tierfs volume of another host (id {}, last mounted by {}); {fix}", f.id, f.who()))
        }
        (None, None) => Ok(new_id()),
    }
}

/// The HDD directory's owner file, locked while mounted. A thread takes
/// the lock again every minute: a network file system drops the locks of
/// a client that lost its servers for a while (GlusterFS does not heal
/// them), and then another node could claim the directory.
#[derive(Debug)]
pub struct OwnerLock {
    _file: File,
    /// Dropped with the lock: ends the thread.
    _stop: std::sync::mpsc::Sender<()>,
}

/// How often the lock is taken again.
const RELOCK: std::time::Duration = std::time::Duration::from_secs(60);

fn keep_locked(f: File, path: std::path::PathBuf) -> std::sync::mpsc::Sender<()> {
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let run = move || {
        let mut held = true;
        while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(RELOCK) {
            // Taking a lock this description holds again succeeds.
            let now = try_lock(&f);
            match &now {
                Ok(true) if !held => tracing::info!(path = %path.display(), "the HDD directory is locked again"),
                Ok(false) => tracing::error!(
                    path = %path.display(),
                    "another tierfs holds the HDD directory's lock: two tierfs over one directory corrupt each other's state"
                ),
                Err(e) if held => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot lock the HDD directory again")
                }
                _ => {}
            }
            held = matches!(now, Ok(true));
        }
    };
    if let Err(e) = std::thread::Builder::new().name("tierfs-owner".into()).spawn(run) {
        tracing::warn!(error = %e, "cannot start the thread that keeps the HDD directory locked");
    }
    stop
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer and its length match; the result is NUL-terminated
    // when it fits, and the last byte stays 0.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if r != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A new volume id: time and process, as hex (unique enough to tell two
/// volumes apart; not a secret).
fn new_id() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{:x}-{:x}", nanos, std::process::id())
}

/// Takes an open-file-description write lock on the whole file, without
/// waiting. `Ok(false)` if another holds it.
fn try_lock(f: &File) -> std::io::Result<bool> {
    // SAFETY: a zeroed flock is valid; the fields set below are the ones
    // F_OFD_SETLK reads (l_pid must be 0).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: valid descriptor and flock.
    if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLK, &fl) } == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) => Ok(false),
        _ => Err(e),
    }
}

/// Claims `hdd` for the volume whose state is `ns`, or says why not.
pub fn claim(hdd: &Path, ssd: &Path, ns: &Namespace) -> Result<OwnerLock, MountError> {
    use std::os::unix::fs::{DirBuilderExt, FileExt};
    let fail = |msg: String| Err(MountError(format!("HDD directory {} {msg}", hdd.display())));
    let dir = hdd.join(tierfs_core::vfs::tiers::RESERVED);
    if let Err(e) = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir) {
        return fail(format!("cannot hold tierfs's files: {e}"));
    }
    let path = dir.join("owner");
    let mut f = match OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path) {
        Ok(f) => f,
        Err(e) => return fail(format!("cannot open {}: {e}", path.display())),
    };
    // Locked first, then read: what is read is what the last holder wrote.
    let locked = try_lock(&f);
    let mut text = String::new();
    let _ = f.read_to_string(&mut text);
    let recorded = Owner::parse(&text);
    match locked {
        Ok(true) => {}
        Ok(false) => {
            let who = recorded.map(|o| format!(" ({})", o.who())).unwrap_or_default();
            return fail(format!(
                "is in use by another tierfs{who}: two tierfs over one directory would corrupt each other's state"
            ));
        }
        Err(e) => tracing::warn!(
            path = %path.display(),
            error = %e,
            "cannot lock the HDD directory's owner file: a second tierfs over it would not be noticed while this one runs"
        ),
    }
    let state = match ns.meta(META_KEY) {
        Ok(v) => v.map(|b| String::from_utf8_lossy(&b).into_owned()),
        Err(e) => return fail(format!("cannot read the volume id from the state database: {e}")),
    };
    if recorded.is_none() && state.is_none() && !text.trim().is_empty() {
        return fail(format!("has an owner file tierfs cannot read ({}): remove it to mount", path.display()));
    }
    let host = host_name();
    let ssd = ssd.display().to_string();
    let id = match decide(state.as_deref(), recorded.as_ref(), (&host, &ssd), new_id) {
        Ok(id) => id,
        Err(msg) => return fail(msg),
    };
    if state.as_deref() != Some(&id) {
        let mut b = ns.batch();
        b.put_meta(META_KEY, id.clone().into_bytes());
        if let Err(e) = ns.commit(b, true) {
            return fail(format!("cannot record the volume id in the state database: {e}"));
        }
    }
    // Written over the old text, then cut: never an empty file between.
    let me = Owner { id, host, pid: std::process::id(), ssd }.render();
    let written = f.write_all_at(me.as_bytes(), 0).and_then(|_| f.set_len(me.len() as u64));
    if let Err(e) = written.and_then(|_| f.sync_all()) {
        return fail(format!("cannot write {}: {e}", path.display()));
    }
    let stop = match f.try_clone() {
        // The clone shares the open file description, and so the lock.
        Ok(clone) => keep_locked(clone, path),
        Err(_) => std::sync::mpsc::channel().0,
    };
    Ok(OwnerLock { _file: f, _stop: stop })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(id: &str, host: &str) -> Owner {
        Owner { id: id.into(), host: host.into(), pid: 7, ssd: "/ssd".into() }
    }

    #[test]
    fn the_owner_file_round_trips_and_needs_an_id() {
        let o = owner("abc", "node1");
        assert_eq!(Owner::parse(&o.render()), Some(o));
        assert_eq!(Owner::parse("host=x\n"), None);
        assert_eq!(Owner::parse(""), None);
    }

    #[test]
    fn a_volume_keeps_its_tree_and_never_takes_another_volumes() {
        let new = || "new".to_string();
        let me = ("h", "/ssd");
        assert_eq!(decide(None, None, me, new), Ok("new".into()));
        assert_eq!(decide(Some("a"), None, me, new), Ok("a".into()));
        assert_eq!(decide(Some("a"), Some(&owner("a", "other")), me, new), Ok("a".into()));
        let e = decide(Some("a"), Some(&owner("b", "h")), me, new).unwrap_err();
        assert!(e.contains("another tierfs volume (id b") && e.contains("remove .tierfs/owner"), "{e}");
        // A new state on the same host with the same SSD directory (a
        // replaced SSD) takes the tree over; with another SSD directory (a
        // mistyped path) or on another host (a second node) it is refused.
        assert_eq!(decide(None, Some(&owner("b", "h")), me, new), Ok("b".into()));
        let e = decide(None, Some(&owner("b", "h")), ("h", "/other"), new).unwrap_err();
        assert!(e.contains("another SSD directory"), "{e}");
        let e = decide(None, Some(&owner("b", "node2")), me, new).unwrap_err();
        assert!(e.contains("another host") && e.contains("node2"), "{e}");
    }

    #[test]
    fn a_second_open_of_the_owner_file_cannot_take_the_lock_until_the_first_goes() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("owner");
        let open = || OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&p).unwrap();
        let (a, b) = (open(), open());
        assert!(try_lock(&a).unwrap());
        assert!(!try_lock(&b).unwrap(), "open file description locks conflict within one process too");
        drop(a);
        assert!(try_lock(&b).unwrap());
    }
}
