//! The store trait: what tierfs needs from one tier. A real directory
//! ([`dir::DirStore`]), a device-emulating wrapper ([`emulated`]) and an
//! in-memory store that can simulate a crash ([`mem::MemStore`]) implement it.
//!
//! Every operation is relative to an open directory handle and a single
//! name, never a joined path, so paths near PATH_MAX work.

pub mod dir;
pub mod emulated;
pub mod features;
pub mod measured;
pub mod mem;

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::BorrowedFd;

/// A point in time as the kernel keeps it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimeSpec {
    /// Seconds since the epoch.
    pub sec: i64,
    /// Nanoseconds.
    pub nsec: i64,
}

/// How to set one timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetTime {
    /// Leave it alone.
    Omit,
    /// The current time.
    Now,
    /// This time.
    At(TimeSpec),
}

/// The kind of a directory entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// Directory.
    Dir,
    /// Regular file.
    File,
    /// Symbolic link.
    Symlink,
    /// Named pipe.
    Fifo,
    /// Unix socket.
    Socket,
    /// Character device.
    CharDev,
    /// Block device.
    BlockDev,
}

impl FileKind {
    /// From the `S_IFMT` bits of a mode.
    pub fn from_mode(mode: u32) -> Option<FileKind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFDIR => FileKind::Dir,
            libc::S_IFREG => FileKind::File,
            libc::S_IFLNK => FileKind::Symlink,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFCHR => FileKind::CharDev,
            libc::S_IFBLK => FileKind::BlockDev,
            _ => return None,
        })
    }
    /// The `S_IFMT` bits.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::Dir => libc::S_IFDIR,
            FileKind::File => libc::S_IFREG,
            FileKind::Symlink => libc::S_IFLNK,
            FileKind::Fifo => libc::S_IFIFO,
            FileKind::Socket => libc::S_IFSOCK,
            FileKind::CharDev => libc::S_IFCHR,
            FileKind::BlockDev => libc::S_IFBLK,
        }
    }
    /// One byte for the state database.
    pub fn encode(self) -> u8 {
        self as u8
    }
    /// Inverse of [`FileKind::encode`].
    pub fn decode(v: u8) -> Option<FileKind> {
        [
            FileKind::Dir,
            FileKind::File,
            FileKind::Symlink,
            FileKind::Fifo,
            FileKind::Socket,
            FileKind::CharDev,
            FileKind::BlockDev,
        ]
        .get(v as usize)
        .copied()
    }
}

/// The attributes of a backing object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    /// Device of the backing file system.
    pub dev: u64,
    /// Inode number on the backing file system (not tierfs's).
    pub ino: u64,
    /// Type and permission bits.
    pub mode: u32,
    /// Hard links.
    pub nlink: u64,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number for device nodes.
    pub rdev: u64,
    /// Size in bytes.
    pub size: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    /// Preferred I/O size.
    pub blksize: u32,
    /// Last access.
    pub atime: TimeSpec,
    /// Last modification.
    pub mtime: TimeSpec,
    /// Last status change.
    pub ctime: TimeSpec,
}

impl Stat {
    /// The kind from the mode.
    pub fn kind(&self) -> Option<FileKind> {
        FileKind::from_mode(self.mode)
    }
    /// Bytes the object occupies: the larger of its size and its allocation.
    pub fn footprint(&self) -> u64 {
        self.size.max(self.blocks * 512)
    }
}

/// One entry of a backing directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Entry name.
    pub name: OsString,
    /// Kind, if the backing file system reported it.
    pub kind: Option<FileKind>,
}

/// File system capacity, in bytes and inodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsStats {
    /// Total bytes.
    pub total: u64,
    /// Free bytes.
    pub free: u64,
    /// Free bytes for unprivileged users.
    pub avail: u64,
    /// Total inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Longest name.
    pub namelen: u32,
}

/// What a metadata operation applies to: a directory through its own
/// handle, or an entry of a directory (not following a final symlink).
#[derive(Debug)]
pub enum Target<'a, D> {
    /// The directory itself.
    This(&'a D),
    /// `name` inside the directory.
    Entry(&'a D, &'a OsStr),
}

impl<D> Clone for Target<'_, D> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<D> Copy for Target<'_, D> {}

/// rename flags, as in renameat2(2).
pub const RENAME_NOREPLACE: u32 = 1;
/// Swap the two names.
pub const RENAME_EXCHANGE: u32 = 2;

/// One tier's storage. See the module documentation.
pub trait Store: Send + Sync + 'static {
    /// An open directory.
    type Dir: Send + Sync + 'static;
    /// An open non-directory.
    type File: Send + Sync + 'static;

    /// False once the tier's root is no longer the directory it was when
    /// the store was made (removed, renamed away, unmounted).
    fn healthy(&self) -> bool {
        true
    }
    /// True once the store found that its file system refuses
    /// RENAME_NOREPLACE and emulates it (see [`features`]).
    fn emulates_noreplace(&self) -> bool {
        false
    }
    /// False where SEEK_DATA and SEEK_HOLE may miss data just written: a
    /// FUSE or network file system, whose client can hold writes back
    /// (GlusterFS's write-behind answers SEEK_DATA from the server, ENXIO
    /// right after a write). Copies then read holes instead of skipping
    /// them.
    fn holes_coherent(&self) -> bool {
        true
    }
    /// How many calls that change something were made through this store
    /// so far (names, the attributes or data of a named object, and opens
    /// for writing, after which the kernel may write without the store),
    /// each counted once it returned, where it counts them
    /// (`measured::Measured`); `None`: not counted. While it stands still,
    /// what was read from the tier is still true.
    fn changes(&self) -> Option<u64> {
        None
    }
    /// Opens the root directory of the tier.
    fn root(&self) -> io::Result<Self::Dir>;
    /// Opens the directory `name` in `parent` (never following a symlink).
    fn open_dir(&self, parent: &Self::Dir, name: &OsStr) -> io::Result<Self::Dir>;
    /// Attributes (lstat semantics for an entry).
    fn stat(&self, t: Target<'_, Self::Dir>) -> io::Result<Stat>;
    /// The entries of a directory, without "." and "..".
    fn list(&self, dir: &Self::Dir) -> io::Result<Vec<DirEntry>>;
    /// Makes the directory's entries durable.
    fn sync_dir(&self, dir: &Self::Dir) -> io::Result<()>;
    /// Creates a directory.
    fn mkdir(&self, parent: &Self::Dir, name: &OsStr, mode: u32) -> io::Result<()>;
    /// Creates a special file (fifo, socket, device) or an empty regular file.
    fn mknod(&self, parent: &Self::Dir, name: &OsStr, mode: u32, rdev: u64) -> io::Result<()>;
    /// Creates a symbolic link `name` pointing at `target`.
    fn symlink(&self, target: &OsStr, parent: &Self::Dir, name: &OsStr) -> io::Result<()>;
    /// Reads a symbolic link.
    fn readlink(&self, parent: &Self::Dir, name: &OsStr) -> io::Result<OsString>;
    /// Creates a hard link.
    fn link(
        &self,
        old_parent: &Self::Dir,
        old_name: &OsStr,
        new_parent: &Self::Dir,
        new_name: &OsStr,
    ) -> io::Result<()>;
    /// Removes a non-directory.
    fn unlink(&self, parent: &Self::Dir, name: &OsStr) -> io::Result<()>;
    /// Removes an empty directory.
    fn rmdir(&self, parent: &Self::Dir, name: &OsStr) -> io::Result<()>;
    /// Renames, with renameat2 flags.
    fn rename(
        &self,
        old_parent: &Self::Dir,
        old_name: &OsStr,
        new_parent: &Self::Dir,
        new_name: &OsStr,
        flags: u32,
    ) -> io::Result<()>;
    /// Changes permission bits.
    fn chmod(&self, t: Target<'_, Self::Dir>, mode: u32) -> io::Result<()>;
    /// Changes owner and/or group.
    fn chown(&self, t: Target<'_, Self::Dir>, uid: Option<u32>, gid: Option<u32>) -> io::Result<()>;
    /// Sets access and modification times.
    fn utimens(&self, t: Target<'_, Self::Dir>, atime: SetTime, mtime: SetTime) -> io::Result<()>;
    /// Reads an extended attribute.
    fn getxattr(&self, t: Target<'_, Self::Dir>, name: &OsStr) -> io::Result<Vec<u8>>;
    /// Sets an extended attribute (flags as in setxattr(2)).
    fn setxattr(&self, t: Target<'_, Self::Dir>, name: &OsStr, value: &[u8], flags: i32) -> io::Result<()>;
    /// Lists extended attribute names, each followed by a NUL byte.
    fn listxattr(&self, t: Target<'_, Self::Dir>) -> io::Result<Vec<u8>>;
    /// Removes an extended attribute.
    fn removexattr(&self, t: Target<'_, Self::Dir>, name: &OsStr) -> io::Result<()>;
    /// Capacity of the tier.
    fn statfs(&self) -> io::Result<FsStats>;

    /// Opens (or with `O_CREAT` creates) a non-directory.
    fn open(&self, parent: &Self::Dir, name: &OsStr, flags: i32, mode: u32) -> io::Result<Self::File>;
    /// Reads at an offset; short only at end of file.
    fn read_at(&self, f: &Self::File, buf: &mut [u8], off: u64) -> io::Result<usize>;
    /// Writes at an offset.
    fn write_at(&self, f: &Self::File, data: &[u8], off: u64) -> io::Result<usize>;
    /// Attributes of an open file.
    fn fstat(&self, f: &Self::File) -> io::Result<Stat>;
    /// Makes the file's data (and with `!datasync` its metadata) durable.
    fn fsync(&self, f: &Self::File, datasync: bool) -> io::Result<()>;
    /// Truncates or extends.
    fn set_len(&self, f: &Self::File, size: u64) -> io::Result<()>;
    /// fallocate(2).
    fn fallocate(&self, f: &Self::File, mode: i32, off: u64, len: u64) -> io::Result<()>;
    /// lseek(2) for SEEK_DATA / SEEK_HOLE / SEEK_END.
    fn seek(&self, f: &Self::File, off: i64, whence: i32) -> io::Result<i64>;
    /// Copies a range between two files of this store.
    fn copy_range(&self, src: &Self::File, src_off: u64, dst: &Self::File, dst_off: u64, len: u64)
        -> io::Result<usize>;
    /// Changes permission bits of an open file.
    fn file_chmod(&self, f: &Self::File, mode: u32) -> io::Result<()>;
    /// Reads an extended attribute of an open file.
    fn file_getxattr(&self, f: &Self::File, name: &OsStr) -> io::Result<Vec<u8>>;
    /// Sets an extended attribute of an open file (flags as in setxattr(2)).
    fn file_setxattr(&self, f: &Self::File, name: &OsStr, value: &[u8], flags: i32) -> io::Result<()>;
    /// Lists the extended attribute names of an open file, each followed by
    /// a NUL byte.
    fn file_listxattr(&self, f: &Self::File) -> io::Result<Vec<u8>>;
    /// Changes owner and/or group of an open file.
    fn file_chown(&self, f: &Self::File, uid: Option<u32>, gid: Option<u32>) -> io::Result<()>;
    /// Sets the times of an open file.
    fn file_utimens(&self, f: &Self::File, atime: SetTime, mtime: SetTime) -> io::Result<()>;
    /// Sets an open file's mtime and ctime to now, as a write to it would
    /// (for bytes written elsewhere on its behalf: a split file's SSD
    /// chunks). Costs what a write's own time update costs.
    fn touch(&self, f: &Self::File) -> io::Result<()> {
        self.file_utimens(f, SetTime::Omit, SetTime::Now)
    }
    /// Sets an open file's mtime back to `mtime` after tierfs wrote the
    /// file's own bytes into it on its behalf (a split file's dirty chunks
    /// going home). Costs nothing beyond that write's own time update.
    fn keep_mtime(&self, f: &Self::File, mtime: TimeSpec) -> io::Result<()> {
        self.file_utimens(f, SetTime::Omit, SetTime::At(mtime))
    }
    /// The kernel file descriptor, where there is one (for FUSE passthrough).
    fn raw_fd<'a>(&self, f: &'a Self::File) -> Option<BorrowedFd<'a>>;
}

/// Opens directory `name` in `parent`, first making it (mode 0700) and
/// syncing `parent` if it is missing, so that it survives a power cut: for
/// tierfs's own directories below `.tierfs`.
pub fn durable_dir<S: Store + ?Sized>(s: &S, parent: &S::Dir, name: &str) -> io::Result<S::Dir> {
    // Found at once in the common case (every migration asks for its
    // staging directory): a lookup, not a create that fails.
    match s.open_dir(parent, OsStr::new(name)) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        found => return found,
    }
    match s.mkdir(parent, OsStr::new(name), 0o700) {
        Ok(()) => s.sync_dir(parent)?,
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
        Err(e) => return Err(e),
    }
    s.open_dir(parent, OsStr::new(name))
}

/// Reads until `buf` is full or end of file.
pub fn read_full<S: Store + ?Sized>(s: &S, f: &S::File, buf: &mut [u8], off: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match s.read_at(f, &mut buf[done..], off + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Writes all of `data`.
pub fn write_full<S: Store + ?Sized>(s: &S, f: &S::File, data: &[u8], off: u64) -> io::Result<()> {
    let mut done = 0;
    while done < data.len() {
        match s.write_at(f, &data[done..], off + done as u64) {
            Ok(0) => return Err(io::Error::from_raw_os_error(libc::EIO)),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
