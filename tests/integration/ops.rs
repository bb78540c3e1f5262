//! A small interpreter of file system operations by raw system calls, so
//! results and errno can be compared between a tierfs mount and a plain
//! directory (differential testing, as mergerfs's posix parity tests do).

use proptest::prelude::*;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub const PATHS: &[&str] = &["a", "b", "c", "d", "d/a", "d/b", "d/e", "d/e/a", "e", "e/a"];

#[derive(Clone, Debug)]
pub enum Op {
    Create(usize, u32),
    Mkdir(usize, u32),
    Write(usize, u64, usize, u8),
    Append(usize, usize, u8),
    Read(usize, u64, usize),
    Truncate(usize, u64),
    Unlink(usize),
    Rmdir(usize),
    Rename(usize, usize, u32),
    Link(usize, usize),
    Symlink(usize, usize),
    Readlink(usize),
    Chmod(usize, u32),
    Stat(usize),
    List(usize),
    SetXattr(usize, u8, u8, i32),
    GetXattr(usize, u8),
    RemoveXattr(usize, u8),
    ListXattr(usize),
    Mkfifo(usize),
    Utime(usize, i64),
    Fallocate(usize, u64, u64),
    Hold(usize, usize),
    HoldWrite(usize, u64, usize, u8),
    HoldRead(usize, u64, usize),
    HoldStat(usize),
    HoldTruncate(usize, u64),
    Release(usize),
}

/// Random operations; with `exchange` false, renames never ask for
/// RENAME_EXCHANGE (for tiers whose file systems lack it, where tierfs
/// answers EINVAL and a plain local directory swaps).
pub fn op_strategy(exchange: bool) -> impl Strategy<Value = Op> {
    let flags = if exchange { vec![0u32, 1, 2] } else { vec![0u32, 1] };
    let p = 0..PATHS.len();
    let mode = prop_oneof![Just(0o644u32), Just(0o600), Just(0o755), Just(0o000), Just(0o4755)];
    let slot = 0..3usize;
    prop_oneof![
        3 => (p.clone(), mode.clone()).prop_map(|(a, m)| Op::Create(a, m)),
        2 => (p.clone(), mode.clone()).prop_map(|(a, m)| Op::Mkdir(a, m)),
        3 => (p.clone(), 0..20000u64, 0..9000usize, any::<u8>()).prop_map(|(a, o, l, b)| Op::Write(a, o, l, b)),
        1 => (p.clone(), 0..5000usize, any::<u8>()).prop_map(|(a, l, b)| Op::Append(a, l, b)),
        2 => (p.clone(), 0..20000u64, 0..9000usize).prop_map(|(a, o, l)| Op::Read(a, o, l)),
        1 => (p.clone(), 0..30000u64).prop_map(|(a, s)| Op::Truncate(a, s)),
        2 => p.clone().prop_map(Op::Unlink),
        1 => p.clone().prop_map(Op::Rmdir),
        2 => (p.clone(), p.clone(), proptest::sample::select(flags)).prop_map(|(a, b, f)| Op::Rename(a, b, f)),
        1 => (p.clone(), p.clone()).prop_map(|(a, b)| Op::Link(a, b)),
        1 => (p.clone(), p.clone()).prop_map(|(a, b)| Op::Symlink(a, b)),
        1 => p.clone().prop_map(Op::Readlink),
        1 => (p.clone(), mode).prop_map(|(a, m)| Op::Chmod(a, m)),
        3 => p.clone().prop_map(Op::Stat),
        2 => p.clone().prop_map(Op::List),
        1 => (p.clone(), 0..3u8, any::<u8>(), prop_oneof![Just(0), Just(libc::XATTR_CREATE), Just(libc::XATTR_REPLACE)])
            .prop_map(|(a, n, v, f)| Op::SetXattr(a, n, v, f)),
        1 => (p.clone(), 0..3u8).prop_map(|(a, n)| Op::GetXattr(a, n)),
        1 => (p.clone(), 0..3u8).prop_map(|(a, n)| Op::RemoveXattr(a, n)),
        1 => p.clone().prop_map(Op::ListXattr),
        1 => p.clone().prop_map(Op::Mkfifo),
        1 => (p.clone(), 1_000_000i64..2_000_000_000).prop_map(|(a, t)| Op::Utime(a, t)),
        1 => (p.clone(), 0..20000u64, 1..20000u64).prop_map(|(a, o, l)| Op::Fallocate(a, o, l)),
        2 => (slot.clone(), p).prop_map(|(s, a)| Op::Hold(s, a)),
        2 => (slot.clone(), 0..20000u64, 0..5000usize, any::<u8>()).prop_map(|(s, o, l, b)| Op::HoldWrite(s, o, l, b)),
        2 => (slot.clone(), 0..20000u64, 0..5000usize).prop_map(|(s, o, l)| Op::HoldRead(s, o, l)),
        1 => slot.clone().prop_map(Op::HoldStat),
        1 => (slot.clone(), 0..30000u64).prop_map(|(s, n)| Op::HoldTruncate(s, n)),
        1 => slot.prop_map(Op::Release),
    ]
}

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn res(r: libc::c_int) -> Result<String, i32> {
    if r < 0 {
        Err(errno())
    } else {
        Ok(String::new())
    }
}

/// Attributes that must agree between tierfs and a local file system.
pub fn stat_line(st: &libc::stat) -> String {
    let kind = st.st_mode & libc::S_IFMT;
    let size = if kind == libc::S_IFDIR { 0 } else { st.st_size };
    format!(
        "kind={kind:o} perm={:o} nlink={} uid={} gid={} size={size}",
        st.st_mode & 0o7777,
        st.st_nlink,
        st.st_uid,
        st.st_gid
    )
}

pub fn lstat(p: &Path) -> Result<libc::stat, i32> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::lstat(c(p).as_ptr(), &mut st) } < 0 {
        Err(errno())
    } else {
        Ok(st)
    }
}

fn hash(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for x in b {
        h ^= *x as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// Runs ops against one root, keeping open descriptors between ops.
pub struct Runner {
    pub root: PathBuf,
    fds: [i32; 3],
}

impl Drop for Runner {
    fn drop(&mut self) {
        for fd in self.fds {
            if fd >= 0 {
                unsafe { libc::close(fd) };
            }
        }
    }
}

fn xname(n: u8) -> CString {
    CString::new(format!("user.t{n}")).unwrap()
}

impl Runner {
    pub fn new(root: PathBuf) -> Self {
        Runner { root, fds: [-1; 3] }
    }

    fn p(&self, i: usize) -> PathBuf {
        self.root.join(PATHS[i])
    }

    pub fn run(&mut self, op: &Op) -> Result<String, i32> {
        unsafe {
            match *op {
                Op::Create(a, m) => {
                    let fd = libc::open(c(&self.p(a)).as_ptr(), libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, m);
                    if fd < 0 {
                        return Err(errno());
                    }
                    libc::close(fd);
                    Ok(String::new())
                }
                Op::Mkdir(a, m) => res(libc::mkdir(c(&self.p(a)).as_ptr(), m)),
                Op::Write(a, off, len, b) => self.with_fd(a, libc::O_WRONLY, |fd| {
                    let buf = vec![b; len];
                    let n = libc::pwrite(fd, buf.as_ptr().cast(), len, off as i64);
                    if n < 0 {
                        Err(errno())
                    } else {
                        Ok(format!("{n}"))
                    }
                }),
                Op::Append(a, len, b) => self.with_fd(a, libc::O_WRONLY | libc::O_APPEND, |fd| {
                    let buf = vec![b; len];
                    let n = libc::write(fd, buf.as_ptr().cast(), len);
                    if n < 0 {
                        Err(errno())
                    } else {
                        Ok(format!("{n}"))
                    }
                }),
                Op::Read(a, off, len) => self.with_fd(a, libc::O_RDONLY, |fd| {
                    let mut buf = vec![0u8; len];
                    let n = libc::pread(fd, buf.as_mut_ptr().cast(), len, off as i64);
                    if n < 0 {
                        Err(errno())
                    } else {
                        Ok(format!("{n}:{:x}", hash(&buf[..n as usize])))
                    }
                }),
                Op::Truncate(a, s) => res(libc::truncate(c(&self.p(a)).as_ptr(), s as i64)),
                Op::Unlink(a) => res(libc::unlink(c(&self.p(a)).as_ptr())),
                Op::Rmdir(a) => res(libc::rmdir(c(&self.p(a)).as_ptr())),
                Op::Rename(a, b, f) => res(libc::renameat2(
                    libc::AT_FDCWD,
                    c(&self.p(a)).as_ptr(),
                    libc::AT_FDCWD,
                    c(&self.p(b)).as_ptr(),
                    f,
                )),
                Op::Link(a, b) => res(libc::link(c(&self.p(a)).as_ptr(), c(&self.p(b)).as_ptr())),
                Op::Symlink(a, b) => res(libc::symlink(c(Path::new(PATHS[a])).as_ptr(), c(&self.p(b)).as_ptr())),
                Op::Readlink(a) => {
                    let mut buf = [0u8; 256];
                    let n = libc::readlink(c(&self.p(a)).as_ptr(), buf.as_mut_ptr().cast(), buf.len());
                    if n < 0 {
                        Err(errno())
                    } else {
                        Ok(String::from_utf8_lossy(&buf[..n as usize]).into_owned())
                    }
                }
                Op::Chmod(a, m) => res(libc::chmod(c(&self.p(a)).as_ptr(), m)),
                Op::Stat(a) => lstat(&self.p(a)).map(|st| stat_line(&st)),
                Op::List(a) => match std::fs::read_dir(self.p(a)) {
                    Ok(rd) => {
                        let mut v: Vec<String> = rd
                            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()).unwrap_or_default())
                            .collect();
                        v.sort();
                        Ok(v.join(","))
                    }
                    Err(e) => Err(e.raw_os_error().unwrap_or(0)),
                },
                Op::SetXattr(a, n, v, f) => {
                    let val = [v; 3];
                    res(libc::lsetxattr(c(&self.p(a)).as_ptr(), xname(n).as_ptr(), val.as_ptr().cast(), 3, f))
                }
                Op::GetXattr(a, n) => {
                    let mut buf = [0u8; 64];
                    let r = libc::lgetxattr(c(&self.p(a)).as_ptr(), xname(n).as_ptr(), buf.as_mut_ptr().cast(), 64);
                    if r < 0 {
                        Err(errno())
                    } else {
                        Ok(format!("{:?}", &buf[..r as usize]))
                    }
                }
                Op::RemoveXattr(a, n) => res(libc::lremovexattr(c(&self.p(a)).as_ptr(), xname(n).as_ptr())),
                Op::ListXattr(a) => {
                    let mut buf = [0u8; 1024];
                    let r = libc::llistxattr(c(&self.p(a)).as_ptr(), buf.as_mut_ptr().cast(), 1024);
                    if r < 0 {
                        return Err(errno());
                    }
                    let mut v: Vec<String> = buf[..r as usize]
                        .split(|x| *x == 0)
                        .filter(|x| !x.is_empty())
                        .map(|x| String::from_utf8_lossy(x).into_owned())
                        .filter(|x| x.starts_with("user."))
                        .collect();
                    v.sort();
                    Ok(v.join(","))
                }
                Op::Mkfifo(a) => res(libc::mkfifo(c(&self.p(a)).as_ptr(), 0o644)),
                Op::Utime(a, t) => {
                    let ts = [libc::timespec { tv_sec: t, tv_nsec: 5 }, libc::timespec { tv_sec: t + 7, tv_nsec: 9 }];
                    res(libc::utimensat(
                        libc::AT_FDCWD,
                        c(&self.p(a)).as_ptr(),
                        ts.as_ptr(),
                        libc::AT_SYMLINK_NOFOLLOW,
                    ))?;
                    lstat(&self.p(a)).map(|st| format!("{} {} {}", st.st_mtime, st.st_mtime_nsec, st.st_atime))
                }
                Op::Fallocate(a, off, len) => self.with_fd(a, libc::O_WRONLY, |fd| {
                    let r = libc::fallocate(fd, 0, off as i64, len as i64);
                    if r < 0 {
                        Err(errno())
                    } else {
                        Ok(String::new())
                    }
                }),
                Op::Hold(s, a) => {
                    if self.fds[s] >= 0 {
                        libc::close(self.fds[s]);
                        self.fds[s] = -1;
                    }
                    let fd = libc::open(c(&self.p(a)).as_ptr(), libc::O_RDWR | libc::O_NONBLOCK);
                    if fd < 0 {
                        return Err(errno());
                    }
                    self.fds[s] = fd;
                    Ok(String::new())
                }
                Op::HoldWrite(s, off, len, b) => {
                    let buf = vec![b; len];
                    let n = libc::pwrite(self.fds[s], buf.as_ptr().cast(), len, off as i64);
                    if n < 0 {
                        Err(errno())
                    } else {
                        Ok(format!("{n}"))
                    }
                }
                Op::HoldRead(s, off, len) => {
                    let mut buf = vec![0u8; len];
                    let n = libc::pread(self.fds[s], buf.as_mut_ptr().cast(), len, off as i64);
                    if n < 0 {
                        Err(errno())
                    } else {
                        Ok(format!("{n}:{:x}", hash(&buf[..n as usize])))
                    }
                }
                Op::HoldStat(s) => {
                    let mut st: libc::stat = std::mem::zeroed();
                    if libc::fstat(self.fds[s], &mut st) < 0 {
                        return Err(errno());
                    }
                    Ok(stat_line(&st))
                }
                Op::HoldTruncate(s, n) => res(libc::ftruncate(self.fds[s], n as i64)),
                Op::Release(s) => {
                    if self.fds[s] < 0 {
                        return Err(libc::EBADF);
                    }
                    let r = libc::close(self.fds[s]);
                    self.fds[s] = -1;
                    res(r)
                }
            }
        }
    }

    fn with_fd(&self, a: usize, flags: i32, f: impl FnOnce(i32) -> Result<String, i32>) -> Result<String, i32> {
        let fd = unsafe { libc::open(c(&self.p(a)).as_ptr(), flags | libc::O_NONBLOCK) };
        if fd < 0 {
            return Err(errno());
        }
        let r = f(fd);
        unsafe { libc::close(fd) };
        r
    }

    /// Every object below the root with its attributes and content hash.
    pub fn dump(&self) -> Vec<String> {
        let mut out = Vec::new();
        for rel in PATHS {
            let p = self.root.join(rel);
            if let Ok(st) = lstat(&p) {
                let content = if st.st_mode & libc::S_IFMT == libc::S_IFREG {
                    std::fs::read(&p).map(|d| format!("{:x}", hash(&d))).unwrap_or_else(|e| format!("err {e}"))
                } else {
                    String::new()
                };
                out.push(format!("{rel}: {} {content}", stat_line(&st)));
            }
        }
        out
    }
}
