//! What a tier's file system can do, found out once at mount by trying
//! each operation on scratch files in `.tierfs/probe`.
//!
//! Local file systems do everything tierfs asks; network and FUSE file
//! systems often do not (GlusterFS refuses RENAME_EXCHANGE, mergerfs
//! RENAME_NOREPLACE, some copy_file_range implementations copy less than
//! they could). The volume uses the answer to fall back where a fallback
//! is correct and to refuse with the right errno, before touching anything,
//! where none is; the mount logs what each tier lacks and `tierfs stats`
//! shows it.

use super::{Store, Target, RENAME_EXCHANGE, RENAME_NOREPLACE};
use std::ffi::OsStr;
use std::io;

/// The operations a tier was found to support.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// renameat2(RENAME_EXCHANGE).
    pub exchange: bool,
    /// renameat2(RENAME_NOREPLACE) by the file system itself (the store
    /// falls back to an emulation when it is missing).
    pub noreplace: bool,
    /// copy_file_range copies a whole small range in one call.
    pub copy_range: bool,
    /// fallocate(PUNCH_HOLE | KEEP_SIZE).
    pub punch_hole: bool,
    /// fallocate(ZERO_RANGE).
    pub zero_range: bool,
    /// fallocate(COLLAPSE_RANGE).
    pub collapse_range: bool,
    /// fallocate(INSERT_RANGE).
    pub insert_range: bool,
    /// Hard links.
    pub hard_links: bool,
    /// Symbolic links.
    pub symlinks: bool,
    /// Named pipes (mknod of a FIFO).
    pub fifos: bool,
    /// Extended attributes in the `user.` namespace.
    pub user_xattrs: bool,
    /// SEEK_HOLE finds a hole (the file system keeps sparse files sparse
    /// and says so), and what SEEK_DATA says can be trusted (a local file
    /// system; see `Store::holes_coherent`).
    pub sparse: bool,
}

impl Features {
    /// Everything: what a store is assumed to do until probed.
    pub const ALL: Features = Features {
        exchange: true,
        noreplace: true,
        copy_range: true,
        punch_hole: true,
        zero_range: true,
        collapse_range: true,
        insert_range: true,
        hard_links: true,
        symlinks: true,
        fifos: true,
        user_xattrs: true,
        sparse: true,
    };

    /// Short names of what is missing, for the log and the reports.
    pub fn lacks(&self) -> Vec<&'static str> {
        let all = [
            (self.exchange, "rename-exchange"),
            (self.noreplace, "rename-noreplace"),
            (self.copy_range, "copy-file-range"),
            (self.punch_hole, "punch-hole"),
            (self.zero_range, "zero-range"),
            (self.collapse_range, "collapse-range"),
            (self.insert_range, "insert-range"),
            (self.hard_links, "hard-links"),
            (self.symlinks, "symlinks"),
            (self.fifos, "fifos"),
            (self.user_xattrs, "user-xattrs"),
            (self.sparse, "sparse-files"),
        ];
        all.into_iter().filter(|(has, _)| !has).map(|(_, name)| name).collect()
    }
}

impl Default for Features {
    fn default() -> Self {
        Features::ALL
    }
}

/// What file systems answer for an operation they do not have.
const MISSING: [i32; 4] = [libc::EINVAL, libc::ENOSYS, libc::EOPNOTSUPP, libc::ENOTSUP];

/// True if `r` says the operation itself is missing (one of [`MISSING`] or
/// of `also`), rather than that it failed for this once (out of space, a
/// transient error): only then is a feature reported missing.
fn refused<T>(r: &io::Result<T>, also: &[i32]) -> bool {
    matches!(r, Err(e) if e.raw_os_error().is_some_and(|c| MISSING.contains(&c) || also.contains(&c)))
}

/// Probes `s` in `.tierfs/probe` below its root, made if missing. Run on
/// the bare store, before any wrapper that measures or slows its calls.
pub fn probe_store<S: Store + ?Sized>(s: &S) -> io::Result<Features> {
    let reserved = super::durable_dir(s, &s.root()?, crate::vfs::tiers::RESERVED)?;
    probe(s, &super::durable_dir(s, &reserved, PROBE_DIR)?)
}

/// The scratch directory below `.tierfs`.
pub const PROBE_DIR: &str = "probe";

const A: &str = "a";
const B: &str = "b";
const C: &str = "c";
const LINK: &str = "link";
const SYMLINK: &str = "symlink";
const FIFO: &str = "fifo";
const SPARSE: &str = "sparse";
const NAMES: [&str; 7] = [A, B, C, LINK, SYMLINK, FIFO, SPARSE];

/// Tries every operation in `dir` (an empty scratch directory the caller
/// owns) and removes what it made. An operation that fails for another
/// reason than being unsupported counts as supported.
pub fn probe<S: Store + ?Sized>(s: &S, dir: &S::Dir) -> io::Result<Features> {
    clear(s, dir);
    let r = probe_in(s, dir);
    clear(s, dir);
    r
}

fn clear<S: Store + ?Sized>(s: &S, dir: &S::Dir) {
    for n in NAMES {
        let _ = s.unlink(dir, OsStr::new(n));
    }
}

fn probe_in<S: Store + ?Sized>(s: &S, dir: &S::Dir) -> io::Result<Features> {
    let n = OsStr::new;
    let create = |name: &str, data: &[u8]| -> io::Result<S::File> {
        let f = s.open(dir, n(name), libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC, 0o600)?;
        super::write_full(s, &f, data, 0)?;
        Ok(f)
    };
    let mut f = Features::ALL;
    let a = create(A, &[b'a'; 100])?;
    drop(create(B, b"b")?);

    let r = s.rename(dir, n(A), dir, n(B), RENAME_EXCHANGE);
    f.exchange = !refused(&r, &[]);
    if r.is_ok() {
        // Back as they were: `a` the 100-byte file.
        s.rename(dir, n(A), dir, n(B), RENAME_EXCHANGE)?;
    }
    f.noreplace = !s.emulates_noreplace();
    if f.noreplace {
        let r = s.rename(dir, n(B), dir, n(C), RENAME_NOREPLACE);
        f.noreplace = !refused(&r, &[]) && !s.emulates_noreplace();
        if r.is_ok() {
            s.rename(dir, n(C), dir, n(B), 0)?;
        }
    }

    let c = create(C, b"")?;
    let r = s.copy_range(&a, 0, &c, 0, 100);
    // A short count is legal, but a file system that copies less of a
    // small range than it could is not worth asking.
    f.copy_range = !refused(&r, &[libc::EXDEV]) && r.as_ref().map_or(true, |n| *n == 100);

    let fall = |mode: i32, len: u64| {
        let r = s.fallocate(&a, mode, 0, len);
        !refused(&r, &[])
    };
    // COLLAPSE and INSERT need whole blocks: a 128 KiB file, 64 KiB at a time.
    let big = vec![b'a'; 128 << 10];
    super::write_full(s, &a, &big, 0)?;
    f.punch_hole = fall(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, 4096);
    f.zero_range = fall(libc::FALLOC_FL_ZERO_RANGE, 4096);
    f.collapse_range = fall(libc::FALLOC_FL_COLLAPSE_RANGE, 64 << 10);
    f.insert_range = fall(libc::FALLOC_FL_INSERT_RANGE, 64 << 10);

    // EPERM: what file systems without hard links (vfat) answer.
    f.hard_links = !refused(&s.link(dir, n(A), dir, n(LINK)), &[libc::EPERM]);
    f.symlinks = !refused(&s.symlink(n(A), dir, n(SYMLINK)), &[libc::EPERM]);
    f.fifos = !refused(&s.mknod(dir, n(FIFO), libc::S_IFIFO | 0o600, 0), &[libc::EPERM]);
    let r = s.setxattr(Target::Entry(dir, n(A)), n("user.tierfs.probe"), b"1", 0);
    f.user_xattrs = !refused(&r, &[]);

    // One byte at 1 MiB: the first MiB is a hole where sparse files exist.
    let sp = create(SPARSE, b"")?;
    super::write_full(s, &sp, b"x", 1 << 20)?;
    f.sparse = s.holes_coherent() && s.seek(&sp, 0, libc::SEEK_HOLE).is_ok_and(|h| h == 0);
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::dir::DirStore;
    use crate::store::mem::MemStore;

    #[test]
    fn a_local_directory_has_the_rename_flags_and_copies_and_leaves_nothing_behind() {
        let tmp = tempfile::tempdir().unwrap();
        let s = DirStore::new(tmp.path()).unwrap();
        let root = s.root().unwrap();
        let f = probe(&s, &root).unwrap();
        assert!(f.exchange && f.noreplace && f.copy_range && f.hard_links && f.symlinks, "{f:?}");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_store_without_exchange_or_a_full_copy_is_reported_lacking_them() {
        let s = MemStore::new();
        s.set_features(Features { exchange: false, copy_range: false, ..Features::ALL });
        let root = s.root().unwrap();
        let f = probe(&s, &root).unwrap();
        assert!(!f.exchange && !f.copy_range, "{f:?}");
        assert!(f.lacks().contains(&"rename-exchange") && f.lacks().contains(&"copy-file-range"));
        assert!(f.hard_links && f.noreplace, "{f:?}");
        // The probe puts the files back as they were and then removes them.
        assert!(s.list(&root).unwrap().is_empty());
    }

    #[test]
    fn lacks_names_every_missing_feature_once() {
        assert!(Features::ALL.lacks().is_empty());
        let none = Features {
            exchange: false,
            noreplace: false,
            copy_range: false,
            punch_hole: false,
            zero_range: false,
            collapse_range: false,
            insert_range: false,
            hard_links: false,
            symlinks: false,
            fifos: false,
            user_xattrs: false,
            sparse: false,
        };
        let l = none.lacks();
        assert_eq!(l.len(), 12);
        let mut d = l.clone();
        d.dedup();
        assert_eq!(d, l);
    }
}
