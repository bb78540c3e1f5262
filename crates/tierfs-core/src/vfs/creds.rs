//! Running a backing system call as the caller of a request.
//!
//! The daemon runs as root. A backing file created as root and given away
//! afterwards is judged as root: reserved blocks and quotas do not stop it,
//! the group it gets and whether a set-group-ID bit survives follow root's
//! groups. [`AsCaller`] switches the calling thread's file-system user and
//! group, its supplementary groups, and drops `CAP_SYS_RESOURCE`, for the
//! few calls that create or grow a file, and restores them on drop. Linux
//! credentials are per thread; the raw system calls are used because
//! glibc's wrappers of `setgroups` change every thread of the process.
//! Permission checks are the kernel's (the mount uses
//! `default_permissions`), so nothing here decides access.

use super::Ctx;

const CAP_SYS_RESOURCE: u32 = 24;
/// The capabilities a non-zero fsuid takes away (the kernel's CAP_FS_MASK:
/// chown, dac_override, dac_read_search, fowner, fsetid, linux_immutable,
/// mknod; and mac_override in the high word).
const FS_MASK: [u32; 2] = [0b11111 | 1 << 9 | 1 << 27, 1];
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn capget() -> Option<[CapData; 2]> {
    let mut h = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let mut d = [CapData::default(); 2];
    // SAFETY: header and a two-element data array as capget(2) wants them.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut h as *mut CapHeader, d.as_mut_ptr()) };
    (r == 0).then_some(d)
}

fn capset(d: &[CapData; 2]) -> bool {
    let mut h = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    // SAFETY: as above; pid 0 is the calling thread.
    unsafe { libc::syscall(libc::SYS_capset, &mut h as *mut CapHeader, d.as_ptr()) == 0 }
}

fn set_groups(groups: &[libc::gid_t]) -> bool {
    // SAFETY: a valid array of `len` group ids; the raw call changes only
    // the calling thread.
    unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) == 0 }
}

fn get_groups() -> Vec<libc::gid_t> {
    let mut g = vec![0 as libc::gid_t; 256];
    // SAFETY: a buffer of the given length.
    let n = unsafe { libc::syscall(libc::SYS_getgroups, g.len(), g.as_mut_ptr()) };
    g.truncate(n.max(0) as usize);
    g
}

/// Sets this thread's fsuid; true if it took (setfsuid reports no error:
/// asking with an invalid id returns the current one).
fn set_fsuid(uid: u32) -> bool {
    // SAFETY: no memory is involved; the call changes only this thread.
    unsafe { libc::syscall(libc::SYS_setfsuid, uid) };
    // SAFETY: as above; -1 changes nothing and returns the current value.
    (unsafe { libc::syscall(libc::SYS_setfsuid, u32::MAX) }) as u32 == uid
}

/// Sets this thread's fsgid; true if it took.
fn set_fsgid(gid: u32) -> bool {
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_setfsgid, gid) };
    // SAFETY: as above.
    (unsafe { libc::syscall(libc::SYS_setfsgid, u32::MAX) }) as u32 == gid
}

/// The supplementary groups of process `pid`, from /proc; `None` if they
/// cannot be read (the process is gone, or in a pid namespace the daemon
/// does not see).
pub(crate) fn groups_of(pid: u32) -> Option<Vec<libc::gid_t>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix("Groups:"))?;
    Some(line.split_whitespace().filter_map(|x| x.parse().ok()).collect())
}

thread_local! {
    /// This thread's capabilities, and the same without CAP_SYS_RESOURCE
    /// (they do not change while the daemon runs).
    static CAPS: Option<([CapData; 2], [CapData; 2])> = capget().map(|caps| {
        let mut less = caps;
        for (l, m) in less.iter_mut().zip(FS_MASK) {
            l.effective &= !m;
        }
        less[0].effective &= !(1 << CAP_SYS_RESOURCE);
        (caps, less)
    });
}

/// See the module documentation. Does nothing for a root caller, or when
/// the daemon is not root (it cannot switch then, nor give files away).
pub(crate) struct AsCaller {
    /// The capabilities and (if they were changed) groups to restore.
    saved: Option<([CapData; 2], Option<Vec<libc::gid_t>>)>,
}

impl AsCaller {
    /// Switches to the caller; with `groups`, also to its supplementary
    /// groups (needed where the backing file system checks them: creating
    /// a file, which decides its group and set-group-ID bit).
    pub(crate) fn new(ctx: &Ctx, groups: bool) -> Self {
        let none = AsCaller { saved: None };
        // SAFETY: geteuid has no preconditions.
        if ctx.uid == 0 || unsafe { libc::geteuid() } != 0 {
            return none;
        }
        let Some((caps, less)) = CAPS.with(|c| *c) else { return none };
        // Without the caller's groups the backing file system would judge
        // it by too few: better not switch at all (the file is given away
        // afterwards, as the daemon did before).
        let theirs = if groups {
            match groups_of(ctx.pid) {
                Some(g) => Some(g),
                None => return none,
            }
        } else {
            None
        };
        let saved_groups = match theirs {
            Some(g) => {
                let old = get_groups();
                if !set_groups(&g) {
                    return none;
                }
                Some(old)
            }
            None => None,
        };
        let switched = AsCaller { saved: Some((caps, saved_groups)) };
        if !set_fsgid(ctx.gid) || !set_fsuid(ctx.uid) {
            // Restores what was changed (drop) and says so.
            drop(switched);
            return none;
        }
        // The file-system capabilities went with the fsuid; reserved blocks
        // and quotas are judged by CAP_SYS_RESOURCE, which stays otherwise.
        capset(&less);
        switched
    }

    /// True if the thread runs as the caller now.
    pub(crate) fn active(&self) -> bool {
        self.saved.is_some()
    }
}

impl Drop for AsCaller {
    fn drop(&mut self) {
        let Some((caps, groups)) = self.saved.take() else { return };
        set_fsuid(0);
        set_fsgid(0);
        capset(&caps);
        if let Some(g) = groups {
            set_groups(&g);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_read_from_proc() {
        // The test process itself: whatever groups it has, they parse.
        let mine = groups_of(std::process::id()).unwrap();
        let direct = get_groups();
        let mut a = mine.clone();
        let mut b = direct.clone();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
        assert!(groups_of(u32::MAX).is_none(), "no such process");
    }

    #[test]
    fn the_caller_is_restored_after_the_guard() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        // Run on a thread of its own: credentials are per thread.
        std::thread::spawn(|| {
            let before = (capget().unwrap(), get_groups());
            let dir = tempfile::tempdir().unwrap();
            {
                let g = AsCaller::new(&Ctx { uid: 65534, gid: 65534, pid: 1 }, true);
                assert!(g.active());
                let inside = capget().unwrap();
                assert_eq!(inside[0].effective & (1 << CAP_SYS_RESOURCE | 1 << 4), 0, "no sys_resource, no fsetid");
                let p = dir.path().join("made-as-nobody");
                std::fs::write(&p, b"x").unwrap_err(); // the tempdir is root's, 0700
            }
            let after = (capget().unwrap(), get_groups());
            assert_eq!(before.0[0].effective, after.0[0].effective);
            assert_eq!(before.0[1].effective, after.0[1].effective);
            assert_eq!(before.1, after.1);
            std::fs::write(dir.path().join("as-root"), b"x").unwrap();
        })
        .join()
        .unwrap();
    }
}
