//! The torture test: threads doing random operations on a real mount, for
//! every policy, on a tiny SSD with unlimited migration rate, so that files
//! move all the time under the operations.
//!
//! Each worker owns one subtree and keeps a model of what each of its names
//! must hold (contents, mode, xattrs, hard links, files held open, unlinked
//! while open), so results are exact although the workers run at once; the
//! engine, the migrator and the cleaner act on all of them together. Every
//! read is checked against the model when it is made; at the end, and
//! again after a remount, the whole tree must equal the model, every file
//! must be on exactly the tiers its placement names, `tierfs stats` must
//! track exactly the live files, and the SSD account must be within one
//! block per file of what the SSD holds.
//!
//! Two configurations (`torture_users_*`) run each worker as a user of its
//! own, in a directory it owns, under write-back caching and hystor with a
//! write-back area, with racers of more users beside them: some rename new
//! files over shared names, the others stat, open and read those names at
//! the same time and check that each read is one whole file, reported with
//! that file's owner and size ([`race_step`]).
//!
//! A watchdog fails the run if one operation takes more than
//! [`OP_LIMIT`]: a hang is a failure, not a hung CI. A failure prints the
//! seed and each worker's last operations. The seed fixes each worker's
//! operations; the interleaving of workers and background threads is the
//! machine's.
//!
//! `TIERFS_TORTURE_SECS` sets the seconds of operations per policy (default
//! 4; `scripts/long-tests.sh` runs 200), `TIERFS_TORTURE_SEED` the seed.

use crate::harness::{account_matches, settled_placement, Area, Mounted};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fs;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest one operation may take.
const OP_LIMIT: Duration = Duration::from_secs(10);
const WORKERS: usize = 4;
const MAX_FILES: usize = 24;
const MAX_DIRS: usize = 6;
const MAX_HELD: usize = 3;

/// A small deterministic generator (xorshift*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> Option<&'a T> {
        (!v.is_empty()).then(|| &v[self.below(v.len() as u64) as usize])
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let b = self.next() as u8;
        (0..n).map(|i| b.wrapping_add((i % 253) as u8)).collect()
    }
    /// Mostly small, sometimes past the 1 MiB sieve.
    fn len(&mut self) -> usize {
        match self.below(100) {
            0..=1 => 1_100_000 + self.below(200_000) as usize,
            2..=20 => self.below(200_000) as usize,
            _ => self.below(12_000) as usize,
        }
    }
}

/// One inode of the model.
#[derive(Clone, Debug, Default)]
struct Inode {
    data: Vec<u8>,
    mode: u32,
    xattr: Option<Vec<u8>>,
}

/// A worker's subtree as it must be.
#[derive(Default)]
struct Model {
    dirs: BTreeSet<String>,
    names: BTreeMap<String, u64>,
    inodes: HashMap<u64, Inode>,
    next: u64,
}

impl Model {
    fn links(&self, id: u64) -> usize {
        self.names.values().filter(|i| **i == id).count()
    }
    fn unlink(&mut self, name: &str, held: &[Held]) {
        if let Some(id) = self.names.remove(name) {
            if self.links(id) == 0 && !held.iter().any(|h| h.id == id) {
                self.inodes.remove(&id);
            }
        }
    }
    fn gc(&mut self, held: &[Held]) {
        let live: BTreeSet<u64> = self.names.values().copied().chain(held.iter().map(|h| h.id)).collect();
        self.inodes.retain(|id, _| live.contains(id));
    }
    fn files(&self) -> Vec<String> {
        self.names.keys().cloned().collect()
    }
    fn dirs(&self) -> Vec<String> {
        self.dirs.iter().cloned().collect()
    }
    /// A new name in one of the directories.
    fn fresh(&mut self, rng: &mut Rng, prefix: &str) -> String {
        let mut dirs = self.dirs();
        dirs.push(String::new());
        let d = rng.pick(&dirs).cloned().unwrap_or_default();
        self.next += 1;
        if d.is_empty() {
            format!("{prefix}{}", self.next)
        } else {
            format!("{d}/{prefix}{}", self.next)
        }
    }
}

/// A file held open by a worker.
struct Held {
    id: u64,
    f: fs::File,
}

/// What a worker is doing, for the watchdog.
#[derive(Default)]
struct Progress {
    op: Option<(Instant, String)>,
    log: VecDeque<String>,
    done: bool,
}

struct Worker {
    root: PathBuf,
    rng: Rng,
    model: Model,
    held: Vec<Held>,
    progress: Arc<Mutex<Progress>>,
}

type OpResult = Result<(), String>;

fn io<T>(what: &str, r: std::io::Result<T>) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

impl Worker {
    fn p(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn begin(&self, what: String) {
        // Each name an operation uses, with the model inode behind it, so
        // that one file can be followed through renames.
        let ids: Vec<String> =
            what.split_whitespace().filter_map(|w| self.model.names.get(w).map(|i| format!("{w}=#{i}"))).collect();
        let line = if ids.is_empty() { what } else { format!("{what}   [{}]", ids.join(" ")) };
        let mut p = self.progress.lock().unwrap();
        p.op = Some((Instant::now(), line.clone()));
        p.log.push_back(line);
    }

    fn step(&mut self) -> OpResult {
        let files = self.model.files();
        let dirs = self.model.dirs();
        let r = self.rng.below(100);
        match r {
            0..=9 if files.len() < MAX_FILES => {
                let name = self.model.fresh(&mut self.rng, "f");
                let n = self.rng.len();
                let data = self.rng.bytes(n);
                self.begin(format!("create {name} ({n} bytes)"));
                io("create", fs::write(self.p(&name), &data))?;
                let mode = io("stat", fs::metadata(self.p(&name)))?.mode() & 0o7777;
                let id = self.model.next;
                self.model.inodes.insert(id, Inode { data, mode, xattr: None });
                self.model.names.insert(name, id);
            }
            10..=24 => {
                let Some(name) = self.rng.pick(&files).cloned() else { return Ok(()) };
                let id = self.model.names[&name];
                let cur = self.model.inodes[&id].data.len() as u64;
                let off = self.rng.below(cur + 4096);
                let n = self.rng.below(20_000) as usize;
                let data = self.rng.bytes(n);
                self.begin(format!("write {name} at {off}, {n} bytes"));
                let f = io("open", fs::OpenOptions::new().write(true).open(self.p(&name)))?;
                io("pwrite", f.write_all_at(&data, off))?;
                write_model(&mut self.model.inodes.get_mut(&id).unwrap().data, off as usize, &data);
            }
            25..=30 => {
                let Some(name) = self.rng.pick(&files).cloned() else { return Ok(()) };
                let id = self.model.names[&name];
                let n = self.rng.below(8_000) as usize;
                let data = self.rng.bytes(n);
                self.begin(format!("append {n} bytes to {name}"));
                let mut f = io("open", fs::OpenOptions::new().append(true).open(self.p(&name)))?;
                io("append", f.write_all(&data))?;
                self.model.inodes.get_mut(&id).unwrap().data.extend_from_slice(&data);
            }
            31..=35 => {
                let Some(name) = self.rng.pick(&files).cloned() else { return Ok(()) };
                let id = self.model.names[&name];
                let len = self.rng.below(self.model.inodes[&id].data.len() as u64 * 2 + 100);
                self.begin(format!("truncate {name} to {len}"));
                let f = io("open", fs::OpenOptions::new().write(true).open(self.p(&name)))?;
                io("truncate", f.set_len(len))?;
                self.model.inodes.get_mut(&id).unwrap().data.resize(len as usize, 0);
            }
            36..=43 => {
                // Rename over an existing file (the replaced one goes).
                let (Some(a), Some(b)) = (self.rng.pick(&files).cloned(), self.rng.pick(&files).cloned()) else {
                    return Ok(());
                };
                self.begin(format!("rename {a} over {b}"));
                io("rename over", fs::rename(self.p(&a), self.p(&b)))?;
                let (ia, ib) = (self.model.names[&a], self.model.names[&b]);
                if ia != ib {
                    self.model.names.remove(&a);
                    self.model.names.insert(b, ia);
                    self.model.gc(&self.held);
                }
            }
            44..=48 => {
                let Some(a) = self.rng.pick(&files).cloned() else { return Ok(()) };
                let b = self.model.fresh(&mut self.rng, "r");
                self.begin(format!("rename {a} to {b}"));
                io("rename", fs::rename(self.p(&a), self.p(&b)))?;
                let id = self.model.names.remove(&a).unwrap();
                self.model.names.insert(b, id);
            }
            49..=50 => {
                // Rename a directory (not into itself).
                let Some(d) = self.rng.pick(&dirs).cloned() else { return Ok(()) };
                let to = self.model.fresh(&mut self.rng, "d");
                if to.starts_with(&format!("{d}/")) {
                    return Ok(());
                }
                self.begin(format!("rename directory {d} to {to}"));
                io("rename dir", fs::rename(self.p(&d), self.p(&to)))?;
                let moved = |p: &str| p == d || p.starts_with(&format!("{d}/"));
                let re = |p: &str| format!("{to}{}", &p[d.len()..]);
                self.model.dirs = self.model.dirs.iter().map(|p| if moved(p) { re(p) } else { p.clone() }).collect();
                self.model.names =
                    self.model.names.iter().map(|(p, i)| (if moved(p) { re(p) } else { p.clone() }, *i)).collect();
            }
            51..=53 if dirs.len() < MAX_DIRS => {
                let d = self.model.fresh(&mut self.rng, "d");
                self.begin(format!("mkdir {d}"));
                io("mkdir", fs::create_dir(self.p(&d)))?;
                self.model.dirs.insert(d);
            }
            54 => {
                let Some(d) = self.rng.pick(&dirs).cloned() else { return Ok(()) };
                let prefix = format!("{d}/");
                if self.model.names.keys().chain(self.model.dirs.iter()).any(|p| p.starts_with(&prefix)) {
                    return Ok(());
                }
                self.begin(format!("rmdir {d}"));
                io("rmdir", fs::remove_dir(self.p(&d)))?;
                self.model.dirs.remove(&d);
            }
            55..=58 if files.len() < MAX_FILES => {
                let Some(a) = self.rng.pick(&files).cloned() else { return Ok(()) };
                let b = self.model.fresh(&mut self.rng, "l");
                self.begin(format!("link {a} as {b}"));
                let id = self.model.names[&a];
                fs::hard_link(self.p(&a), self.p(&b)).map_err(|e| {
                    // The kernel refuses a link of an inode whose link count
                    // it has at 0 (ENOENT) without asking tierfs: tell that
                    // apart from tierfs's own ENOENT (once on GlusterFS).
                    use std::os::unix::fs::MetadataExt;
                    let seen = fs::symlink_metadata(self.p(&a)).map(|m| m.nlink());
                    let names = self.model.names.values().filter(|i| **i == id).count();
                    format!("link: {e} (the mount gives {a} the link count {seen:?}; the model has {names} names)")
                })?;
                self.model.names.insert(b, id);
            }
            59..=64 => {
                let Some(a) = self.rng.pick(&files).cloned() else { return Ok(()) };
                self.begin(format!("unlink {a}"));
                io("unlink", fs::remove_file(self.p(&a)))?;
                self.model.unlink(&a, &self.held);
            }
            65..=68 => {
                let Some(a) = self.rng.pick(&files).cloned() else { return Ok(()) };
                let mode = 0o600 | self.rng.below(0o200) as u32;
                self.begin(format!("chmod {a} {mode:o}"));
                io("chmod", fs::set_permissions(self.p(&a), fs::Permissions::from_mode(mode)))?;
                let id = self.model.names[&a];
                self.model.inodes.get_mut(&id).unwrap().mode = mode;
            }
            69..=72 => {
                let Some(a) = self.rng.pick(&files).cloned() else { return Ok(()) };
                let n = self.rng.below(40) as usize + 1;
                let v = self.rng.bytes(n);
                self.begin(format!("setxattr {a} ({n} bytes)"));
                set_xattr(&self.p(&a), &v)?;
                let id = self.model.names[&a];
                self.model.inodes.get_mut(&id).unwrap().xattr = Some(v);
            }
            73..=86 => {
                let Some(a) = self.rng.pick(&files).cloned() else { return Ok(()) };
                self.begin(format!("read {a}"));
                let got = io("read", fs::read(self.p(&a)))?;
                let want = &self.model.inodes[&self.model.names[&a]].data;
                if &got != want {
                    return Err(format!("read {a}: {} bytes, {}", got.len(), differs(&got, want)));
                }
            }
            87..=88 => {
                let Some(a) = self.rng.pick(&files).cloned() else { return Ok(()) };
                self.begin(format!("fsync {a}"));
                let f = io("open", fs::File::open(self.p(&a)))?;
                io("fsync", f.sync_all())?;
            }
            89..=91 if self.held.len() < MAX_HELD => {
                let Some(a) = self.rng.pick(&files).cloned() else { return Ok(()) };
                self.begin(format!("hold {a} open"));
                let f = io("open", fs::OpenOptions::new().read(true).write(true).open(self.p(&a)))?;
                self.held.push(Held { id: self.model.names[&a], f });
            }
            92..=95 if !self.held.is_empty() => {
                let k = self.rng.below(self.held.len() as u64) as usize;
                let id = self.held[k].id;
                let cur = self.model.inodes[&id].data.len() as u64;
                let off = self.rng.below(cur + 2048);
                let n = self.rng.below(10_000) as usize;
                let data = self.rng.bytes(n);
                self.begin(format!("write {n} bytes at {off} through a held handle of inode {id}"));
                io("held pwrite", self.held[k].f.write_all_at(&data, off))?;
                write_model(&mut self.model.inodes.get_mut(&id).unwrap().data, off as usize, &data);
            }
            96..=97 if !self.held.is_empty() => {
                let k = self.rng.below(self.held.len() as u64) as usize;
                let id = self.held[k].id;
                self.begin(format!("read through a held handle of inode {id}"));
                let f = &mut self.held[k].f;
                io("seek", f.rewind())?;
                let mut got = Vec::new();
                io("held read", f.read_to_end(&mut got))?;
                let want = &self.model.inodes[&id].data;
                if &got != want {
                    return Err(format!("held read of inode {id}: {} bytes, {}", got.len(), differs(&got, want)));
                }
            }
            98..=99 if !self.held.is_empty() => {
                let k = self.rng.below(self.held.len() as u64) as usize;
                self.begin(format!("close a held handle of inode {}", self.held[k].id));
                self.held.swap_remove(k);
                self.model.gc(&self.held);
            }
            _ => {}
        }
        Ok(())
    }

    /// The subtree on the mount equals the model.
    fn verify(&self, when: &str) -> OpResult {
        let mut found_dirs = BTreeSet::new();
        let mut found = BTreeMap::new();
        walk(&self.root, "", &mut found_dirs, &mut found).map_err(|e| format!("{when}: walk: {e}"))?;
        if found_dirs != self.model.dirs {
            return Err(format!("{when}: directories {found_dirs:?}, want {:?}", self.model.dirs));
        }
        let names: BTreeSet<&String> = found.keys().collect();
        let want: BTreeSet<&String> = self.model.names.keys().collect();
        if names != want {
            return Err(format!("{when}: names {names:?}, want {want:?}"));
        }
        let mut ino_of: HashMap<u64, u64> = HashMap::new();
        for (name, id) in &self.model.names {
            let md = found[name].clone();
            let inode = &self.model.inodes[id];
            // One tierfs inode per model inode: hard links share it.
            if *ino_of.entry(*id).or_insert(md.ino()) != md.ino() {
                return Err(format!("{when}: {name} is another inode than its hard links"));
            }
            if md.nlink() != self.model.links(*id) as u64 {
                return Err(format!("{when}: {name} has {} links, want {}", md.nlink(), self.model.links(*id)));
            }
            if md.mode() & 0o7777 != inode.mode {
                return Err(format!("{when}: {name} mode {:o}, want {:o}", md.mode() & 0o7777, inode.mode));
            }
            let got = fs::read(self.p(name)).map_err(|e| format!("{when}: read {name}: {e}"))?;
            if got != inode.data {
                return Err(format!("{when}: {name}: {} bytes, {}", got.len(), differs(&got, &inode.data)));
            }
            let x = crate::harness::xattr_bytes(&self.p(name), "user.t");
            if inode.xattr.is_some() && x != inode.xattr {
                let err = std::io::Error::last_os_error();
                return Err(format!("{when}: {name}: xattr {x:?} ({err}), want {:?}", inode.xattr));
            }
        }
        Ok(())
    }
}

fn write_model(data: &mut Vec<u8>, off: usize, new: &[u8]) {
    // An empty write changes nothing, not even past the end.
    if new.is_empty() {
        return;
    }
    if data.len() < off + new.len() {
        data.resize(off + new.len(), 0);
    }
    data[off..off + new.len()].copy_from_slice(new);
}

/// Where `got` differs from `want`: the first and last differing offsets
/// and the bytes around the first, so that a failure says whose bytes were
/// read (each write of the test has its own first byte).
fn differs(got: &[u8], want: &[u8]) -> String {
    let first = got.iter().zip(want).position(|(a, b)| a != b);
    let last = got.iter().zip(want).rposition(|(a, b)| a != b);
    let near = |v: &[u8], at: usize| v[at.min(v.len())..(at + 12).min(v.len())].to_vec();
    match first {
        Some(at) => format!(
            "want {} bytes; differences from {at} to {last:?}; there got {:?}, want {:?}",
            want.len(),
            near(got, at),
            near(want, at)
        ),
        None => format!("want {} bytes; first difference at {first:?}", want.len()),
    }
}

fn set_xattr(p: &Path, v: &[u8]) -> OpResult {
    use std::os::unix::ffi::OsStrExt;
    let cp = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid NUL-terminated strings and a value buffer of its length.
    let r = unsafe { libc::lsetxattr(cp.as_ptr(), c"user.t".as_ptr(), v.as_ptr().cast(), v.len(), 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(format!("setxattr: {}", std::io::Error::last_os_error()))
    }
}

fn walk(
    root: &Path,
    rel: &str,
    dirs: &mut BTreeSet<String>,
    files: &mut BTreeMap<String, fs::Metadata>,
) -> std::io::Result<()> {
    for e in fs::read_dir(root.join(rel))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let p = if rel.is_empty() { name } else { format!("{rel}/{name}") };
        let md = fs::symlink_metadata(root.join(&p))?;
        if md.is_dir() {
            dirs.insert(p.clone());
            walk(root, &p, dirs, files)?;
        } else {
            files.insert(p, md);
        }
    }
    Ok(())
}

/// Every name on a backing tier below the worker's directory is one of the
/// model's (a file's, or a directory's): a name tierfs removed through the
/// mount and left on a tier would come back at the next mount's
/// reconciliation. Waits up to three seconds, as a migration in flight may
/// hold a name for a moment.
fn no_strays(area: &Area, w: &Worker) -> Result<(), String> {
    let rel = w.root.file_name().unwrap().to_string_lossy().into_owned();
    let mut last = String::new();
    let ok = crate::harness::wait_for(3, || {
        for tier in [area.ssd(), area.hdd()] {
            let top = tier.join(&rel);
            if !top.exists() {
                // No copy of the worker's directory there (yet).
                continue;
            }
            let (mut dirs, mut files) = (BTreeSet::new(), BTreeMap::new());
            if let Err(e) = walk(&top, "", &mut dirs, &mut files) {
                // A name a migration removed while it was listed, say.
                last = format!("walk {}: {e}", tier.display());
                return false;
            }
            let strays: Vec<&String> = files
                .keys()
                .filter(|n| !w.model.names.contains_key(*n))
                .chain(dirs.iter().filter(|d| !w.model.dirs.contains(*d)))
                .collect();
            if !strays.is_empty() {
                last = format!("names on {} that the mount does not have: {strays:?}", tier.display());
                return false;
            }
        }
        true
    });
    if ok {
        Ok(())
    } else {
        Err(format!("{rel}: {last}"))
    }
}

fn seconds() -> u64 {
    std::env::var("TIERFS_TORTURE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(4)
}

fn base_seed() -> u64 {
    std::env::var("TIERFS_TORTURE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x7153_2a5e_9d01_c4b3)
}

/// A mount with `args` on a tiny SSD (64 KiB) with unlimited migration
/// rate and a 1-s interval, so that files move all the time.
fn mount_tiny(area: &Area, args: &[&str]) -> Mounted {
    let state = area.path("state");
    let mut args: Vec<&str> = args.to_vec();
    args.extend(["--ssd-capacity", "64K", "--migrate-rate", "0", "--interval", "1s", "--state-dir"]);
    args.push(state.to_str().unwrap());
    Mounted::new(area, &args)
}

/// Runs the torture test for one configuration, as root.
fn torture(name: &str, args: &[&str]) {
    torture_as(name, args, false);
}

/// The user worker `w` runs as in a configuration with several users.
fn worker_uid(w: usize) -> u32 {
    60_000 + w as u32
}

/// Makes the calling thread act on files as user `uid` (group `uid`, no
/// supplementary groups): its requests reach the mount as that user's.
/// Credentials are per thread: the raw system calls change only this one.
fn become_user(uid: u32) {
    // SAFETY: no memory is passed but an empty group list; each call
    // changes only the calling thread's credentials.
    unsafe {
        libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>());
        libc::syscall(libc::SYS_setfsgid, uid);
        libc::syscall(libc::SYS_setfsuid, uid);
    }
    // SAFETY: as above; u32::MAX changes nothing and returns the current.
    let now = unsafe { libc::syscall(libc::SYS_setfsuid, u32::MAX) };
    assert_eq!(now as u32, uid, "setfsuid");
}

/// Runs the torture test for one configuration; with `users`, each worker
/// runs as a user of its own in a directory it owns, and racers (more
/// users) replace names in a shared directory with renames while others
/// stat, open and read them there ([`race_step`]).
fn torture_as(name: &str, args: &[&str], users: bool) {
    let seed = base_seed() ^ name.bytes().fold(0u64, |h, b| h.wrapping_mul(131).wrapping_add(b as u64));
    let area = Area::new();
    let m = mount_tiny(&area, args);
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    let mut progress = Vec::new();
    for w in 0..WORKERS {
        let root = m.p(&format!("w{w}"));
        fs::create_dir(&root).unwrap();
        if users {
            std::os::unix::fs::chown(&root, Some(worker_uid(w)), Some(worker_uid(w))).unwrap();
        }
        let p = Arc::new(Mutex::new(Progress::default()));
        progress.push(p.clone());
        let stop = stop.clone();
        let mut worker = Worker {
            root,
            rng: Rng(seed.wrapping_add(w as u64 * 0x9E37_79B9) | 1),
            model: Model::default(),
            held: Vec::new(),
            progress: p,
        };
        handles.push(std::thread::spawn(move || {
            if users {
                become_user(worker_uid(w));
            }
            let mut r = Ok(());
            while !stop.load(Ordering::Relaxed) {
                r = worker.step().map_err(|e| format!("worker {w}: {e}"));
                if r.is_err() {
                    break;
                }
            }
            let mut p = worker.progress.lock().unwrap();
            p.op = None;
            p.done = true;
            drop(p);
            (worker, r)
        }));
    }
    let mut racers = Vec::new();
    if users {
        let shared = m.p("shared");
        fs::create_dir(&shared).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).unwrap();
        for r in 0..RACERS {
            let p = Arc::new(Mutex::new(Progress::default()));
            progress.push(p.clone());
            let (stop, shared) = (stop.clone(), shared.clone());
            let mut rng = Rng(seed.wrapping_add(0x5151 * (r as u64 + 1)) | 1);
            racers.push(std::thread::spawn(move || {
                let uid = worker_uid(WORKERS + r);
                become_user(uid);
                let mut made = 0u64;
                let mut res = Ok(());
                while !stop.load(Ordering::Relaxed) {
                    res = race_step(r, uid, &shared, &mut rng, &mut made, &p).map_err(|e| format!("racer {r}: {e}"));
                    if res.is_err() {
                        break;
                    }
                }
                let mut g = p.lock().unwrap();
                g.op = None;
                g.done = true;
                res
            }));
        }
    }
    // The watchdog: every operation answers within OP_LIMIT.
    let end = Instant::now() + Duration::from_secs(seconds());
    // The last operations of every worker; all of them go to a file.
    let report = |progress: &[Arc<Mutex<Progress>>]| -> String {
        let mut s =
            format!("{name}: rerun with TIERFS_TORTURE_SEED={} (this configuration's seed {seed})\n", base_seed());
        let mut all = String::new();
        for (w, p) in progress.iter().enumerate() {
            let p = p.lock().unwrap();
            s.push_str(&format!("worker {w}, last operations:\n"));
            for (i, l) in p.log.iter().enumerate() {
                all.push_str(&format!("w{w} {i} {l}\n"));
                if i + 30 >= p.log.len() {
                    s.push_str(&format!("  {l}\n"));
                }
            }
        }
        let file = std::env::temp_dir().join(format!("tierfs-torture-{name}-{seed}.log"));
        if fs::write(&file, all).is_ok() {
            s.push_str(&format!("every operation: {}\n", file.display()));
        }
        s
    };
    loop {
        std::thread::sleep(Duration::from_millis(100));
        if Instant::now() > end {
            stop.store(true, Ordering::Relaxed);
        }
        let stuck = progress.iter().enumerate().find_map(|(w, p)| {
            let p = p.lock().unwrap();
            p.op.as_ref().filter(|(t, _)| t.elapsed() > OP_LIMIT).map(|(_, op)| (w, op.clone()))
        });
        if let Some((w, op)) = stuck {
            let text = format!("worker {w} stuck for {OP_LIMIT:?} in: {op}\n{}\n{}", report(&progress), m.log_text());
            // Ends the daemon so that the stuck system calls return.
            m.kill();
            panic!("{text}");
        }
        if progress.iter().all(|p| p.lock().unwrap().done) {
            break;
        }
    }
    for r in racers {
        if let Err(e) = r.join().unwrap() {
            panic!("{e}\n{}\n{}", report(&progress), m.log_text());
        }
    }
    let mut workers = Vec::new();
    for h in handles {
        let (w, r) = h.join().unwrap();
        if let Err(e) = r {
            panic!("{e}\n{}\n{}", report(&progress), m.log_text());
        }
        // Close what the worker held: unlinked files it kept alive go.
        let mut w = w;
        w.held.clear();
        w.model.gc(&[]);
        workers.push(w);
    }
    let check = |m: &Mounted, when: &str| {
        for w in &workers {
            if let Err(e) = w.verify(when) {
                panic!("{e}\n{}\n{}", report(&progress), m.log_text());
            }
            for name in w.model.names.keys() {
                let rel = format!("{}/{name}", w.root.file_name().unwrap().to_string_lossy());
                if let Err(e) = settled_placement(&area, &m.mnt, &rel) {
                    panic!("{when}: {e}\n{}", m.log_text());
                }
            }
            if let Err(e) = no_strays(&area, w) {
                panic!("{when}: {e}\n{}\n{}", report(&progress), m.log_text());
            }
        }
        if let Err(e) = account_matches(&area, &m.mnt) {
            panic!("{when}: {e}\n{}", m.log_text());
        }
    };
    check(&m, &format!("{name}, at the end"));
    let ops: usize = progress.iter().map(|p| p.lock().unwrap().log.len()).sum();
    let mv = &crate::harness::stats_json(&m.mnt)["migrations"];
    let moves: u64 = ["promotions", "demotions", "copies", "drops"].iter().map(|k| mv[k].as_u64().unwrap_or(0)).sum();
    let rm = &crate::harness::stats_json(&m.mnt)["remap"];
    let chunk_moves = ["added", "dropped", "unsplit"].iter().map(|k| rm[k].as_u64().unwrap_or(0)).sum::<u64>();
    let wb = &crate::harness::stats_json(&m.mnt)["write_back"];
    let buffered = wb["ssd_writes"].as_u64().unwrap_or(0);
    let scrubbed = wb["scrubbed"].as_u64().unwrap_or(0);
    if args.contains(&"--write-back") || args.contains(&"write-back-cache") {
        // The area was used, and written back under the operations: not a
        // test that could pass without it.
        assert!(buffered > 0 && scrubbed > 0, "{name}: write-back area unused: {wb}");
    }
    let t = Instant::now();
    let first_log = m.unmount_with_log();
    assert!(t.elapsed() < Duration::from_secs(10), "{name}: unmount took {:?}", t.elapsed());
    let m = mount_tiny(&area, args);
    // The first mount's last warnings and errors, for a failure here:
    // what the next mount finds was left by it.
    let noted: Vec<&str> = first_log.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")).collect();
    let noted = &noted[noted.len().saturating_sub(100)..];
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        check(&m, &format!("{name}, after a remount"));
    }));
    if let Err(e) = result {
        eprintln!("the first mount's warnings and errors:\n{}", noted.join("\n"));
        std::panic::resume_unwind(e);
    }
    m.unmount();
    // Shown with --nocapture (scripts/long-tests.sh).
    eprintln!(
        "{name}: {ops} operations by {WORKERS} workers in {} s, {moves} migrations, {chunk_moves} chunk moves, {buffered} writes taken by the SSD, {scrubbed} chunks written back; checked",
        seconds()
    );
}

/// Hystor on files small enough for the tiny SSD: sieve 8K, 4-KiB chunks,
/// a chunk period of 200 ms, so chunks move under the operations too.
#[test]
fn torture_hystor() {
    torture(
        "torture_hystor",
        &["--policy", "hystor", "--io-mode", "userspace", "--sieve", "8K", "--chunk", "4K", "--chunk-period", "200ms"],
    );
}

/// Hystor with a write-back area of 30 % of the tiny SSD: writes to files
/// on the HDD land on the SSD, the scrubber writes them back and frees
/// them, chunks move under the operations.
#[test]
fn torture_hystor_write_back() {
    torture("torture_hystor_write_back", HYSTOR_WRITE_BACK);
}

/// Hystor on files small enough for the tiny SSD, with a write-back area
/// of 30 % of it.
const HYSTOR_WRITE_BACK: &[&str] = &[
    "--policy",
    "hystor",
    "--io-mode",
    "userspace",
    "--sieve",
    "8K",
    "--chunk",
    "4K",
    "--chunk-period",
    "200ms",
    "--write-back",
    "30",
];

/// Several users under write-back caching (whole small files buffered
/// on the SSD, each write as its writer) and hystor with a write-back
/// area: each worker as its own user, racers of more users renaming new
/// files over names that others stat, open and read at the same time.
/// The kernel keeps no attributes or names (`--cache-timeout 0`), so that
/// every stat and open asks the daemon while the renames run.
#[test]
fn torture_users_write_back_cache() {
    torture_as(
        "torture_users_write_back_cache",
        &["--policy", "write-back-cache", "--io-mode", "passthrough", "--cache-timeout", "0"],
        true,
    );
}

#[test]
fn torture_users_hystor_write_back() {
    torture_as("torture_users_hystor_write_back", &[HYSTOR_WRITE_BACK, &["--cache-timeout", "0"]].concat(), true);
}

/// Racers in the shared directory: each also runs as a user of its own.
const RACERS: usize = 4;
/// The names racers replace.
const RACE_NAMES: u64 = 6;

/// The bytes of racer file `n` made by user `uid`: its size follows from
/// `n`, and every 16 bytes say who made it and which it is, so a read of
/// one file can tell whether it got one whole file, and whose.
fn race_content(uid: u32, n: u64) -> Vec<u8> {
    let size = 1 + (n * 7919 % 20_000) as usize;
    let mut rec = [0u8; 16];
    rec[..4].copy_from_slice(&uid.to_be_bytes());
    rec[4..12].copy_from_slice(&n.to_be_bytes());
    rec[12..].copy_from_slice(b"RACE");
    rec.iter().copied().cycle().take(size).collect()
}

/// Checks that `data`, read from one open file whose open descriptor
/// reports `owner` and `size`, is one whole racer file of that owner.
fn race_check(data: &[u8], owner: u32, size: u64) -> Result<(), String> {
    if data.len() < 12 {
        // Too short to say whose: a file of 1..11 bytes is a prefix.
        return if data.len() as u64 == size { Ok(()) } else { Err(format!("{} bytes, size {size}", data.len())) };
    }
    let uid = u32::from_be_bytes(data[..4].try_into().unwrap());
    let n = u64::from_be_bytes(data[4..12].try_into().unwrap());
    let want = race_content(uid, n);
    if data != want.as_slice() {
        return Err(format!(
            "{} bytes that are not file {n} of user {uid} ({} bytes): {}",
            data.len(),
            want.len(),
            differs(data, &want)
        ));
    }
    if uid != owner || data.len() as u64 != size {
        return Err(format!("file {n} of user {uid} ({} bytes) reported as user {owner}'s, {size} bytes", data.len()));
    }
    Ok(())
}

/// One step of racer `r` (user `uid`): even racers make a new file under
/// a name of their own and rename it over one of the shared names, or
/// rename a shared name over another; odd racers stat a shared name, open
/// it and read it whole, and check what they read is one whole file and
/// what the open file reports is that file's owner and size.
fn race_step(
    r: usize,
    uid: u32,
    shared: &Path,
    rng: &mut Rng,
    made: &mut u64,
    progress: &Arc<Mutex<Progress>>,
) -> Result<(), String> {
    let begin = |what: String| {
        let mut p = progress.lock().unwrap();
        p.op = Some((Instant::now(), what.clone()));
        p.log.push_back(what);
        if p.log.len() > 200 {
            p.log.pop_front();
        }
    };
    let name = |k: u64| shared.join(format!("n{k}"));
    if r.is_multiple_of(2) {
        if rng.below(4) == 0 {
            let (a, b) = (rng.below(RACE_NAMES), rng.below(RACE_NAMES));
            begin(format!("rename n{a} over n{b}"));
            match fs::rename(name(a), name(b)) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                r => r.map_err(|e| format!("rename n{a} over n{b}: {e}"))?,
            }
            return Ok(());
        }
        *made += 1;
        let n = *made;
        let tmp = shared.join(format!("t{r}-{n}"));
        let k = rng.below(RACE_NAMES);
        begin(format!("make file {n} of user {uid} and rename it over n{k}"));
        let data = race_content(uid, n);
        let mut f = fs::File::create(&tmp).map_err(|e| format!("create {}: {e}", tmp.display()))?;
        // In pieces, as writers do (the write-back area takes small ones).
        for piece in data.chunks(4096) {
            f.write_all(piece).map_err(|e| format!("write {}: {e}", tmp.display()))?;
        }
        drop(f);
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o644)).map_err(|e| format!("chmod: {e}"))?;
        fs::rename(&tmp, name(k)).map_err(|e| format!("rename {} over n{k}: {e}", tmp.display()))?;
        return Ok(());
    }
    let k = rng.below(RACE_NAMES);
    begin(format!("stat, open and read n{k}"));
    // A name not made yet is absent. A file renamed over between the
    // kernel's lookup and its getattr or open is gone from tierfs (ESTALE,
    // after which the kernel looks the name up once more): twice in a row,
    // the call fails with ESTALE. Never with anything else, nor with
    // another file's attributes or bytes.
    let lost = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESTALE);
    let stat = match fs::metadata(name(k)) {
        Err(e) if lost(&e) => None,
        r => Some(r.map_err(|e| format!("stat n{k}: {e}"))?),
    };
    let mut f = match fs::File::open(name(k)) {
        Err(e) if lost(&e) => return Ok(()),
        r => r.map_err(|e| format!("open n{k}: {e}"))?,
    };
    let md = f.metadata().map_err(|e| format!("fstat n{k}: {e}"))?;
    let mut data = Vec::new();
    f.read_to_end(&mut data).map_err(|e| format!("read n{k}: {e}"))?;
    race_check(&data, md.uid(), md.size()).map_err(|e| format!("n{k}: {e}"))?;
    // A stat of the name that found the same file found its attributes.
    if let Some(st) = stat.filter(|st| st.ino() == md.ino()) {
        if (st.uid(), st.size(), st.mode()) != (md.uid(), md.size(), md.mode()) {
            return Err(format!(
                "n{k}: stat by name says user {} {} bytes mode {:o}, the open file user {} {} bytes mode {:o}",
                st.uid(),
                st.size(),
                st.mode(),
                md.uid(),
                md.size(),
                md.mode()
            ));
        }
    }
    Ok(())
}

/// Write-back caching: whole small files written on the SSD first.
#[test]
fn torture_write_back_cache() {
    torture("torture_write_back_cache", &["--policy", "write-back-cache", "--io-mode", "passthrough"]);
}

/// Write-through-all caching.
#[test]
fn torture_write_through_cache() {
    torture("torture_write_through_cache", &["--policy", "write-through-cache", "--io-mode", "passthrough"]);
}

macro_rules! torture_tests {
    ($($test:ident => $policy:expr, $mode:expr;)*) => {
        $(
            #[test]
            fn $test() {
                torture(stringify!($test), &["--policy", $policy, "--io-mode", $mode]);
            }
        )*
    };
}

torture_tests! {
    torture_dynamic_hot_dst => "dynamic-hot-dst", "userspace";
    torture_interval_hot_dst => "interval-hot-dst", "userspace";
    torture_plain_cold_dst => "plain-cold-dst", "userspace";
    torture_dynamic_cold_dst => "dynamic-cold-dst", "userspace";
    torture_dynamic_cold_dst_bg => "dynamic-cold-dst-bg", "userspace";
    torture_on_demand_cache => "on-demand-cache", "userspace";
    torture_interval_cache => "interval-cache", "userspace";
    torture_hdd_only => "hdd-only", "userspace";
    torture_ssd_only => "ssd-only", "userspace";
    torture_dynamic_hot_dst_passthrough => "dynamic-hot-dst", "passthrough";
    torture_on_demand_cache_passthrough => "on-demand-cache", "passthrough";
}

/// The sequence of a GlusterFS failure of `torture_write_back_cache` (a
/// hard link read back with other bytes from offset 8192 on, after its
/// file was cut, grown and its other name replaced by a rename), run over
/// and over by several threads while the write-back area fills, is
/// scrubbed and evicted under them. Every read must return the file.
///
/// What broke: not tierfs. On GlusterFS the brick held the new bytes while
/// reads through the volume's client, the mount's and the HDD tier's
/// alike, returned zeros from 8192 on: the client's quick-read cache kept
/// a small file's old bytes after tierfs wrote them back. With
/// `performance.quick-read off` (`scripts/gluster.sh`,
/// docs/src/capacity-tiers.md) it passes.
#[test]
fn a_linked_file_cut_grown_and_renamed_over_reads_back_exact_under_write_back() {
    let area = Area::new();
    let m = mount_tiny(&area, &["--policy", "write-back-cache", "--io-mode", "passthrough"]);
    let end = Instant::now() + Duration::from_secs(seconds().max(8));
    // Set by the first worker that fails: the others stop.
    let failed = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..WORKERS)
        .map(|w| {
            let root = m.p(&format!("w{w}"));
            let failed = failed.clone();
            std::thread::spawn(move || -> Result<u64, String> {
                let (a, b) = (root.join("a"), root.join("b"));
                fs::create_dir_all(&a).unwrap();
                fs::create_dir_all(&b).unwrap();
                let mut rng = Rng(0x5eed ^ ((w as u64 + 1) * 0x9E37_79B9));
                let mut rounds = 0;
                while Instant::now() < end && !failed.load(Ordering::Relaxed) {
                    let r = linked_round(w, rounds, &mut rng, &a, &b);
                    if r.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    r?;
                    rounds += 1;
                }
                Ok(rounds)
            })
        })
        .collect();
    let mut errors = Vec::new();
    let mut rounds = 0;
    for t in threads {
        match t.join().unwrap() {
            Ok(n) => rounds += n,
            Err(e) => errors.push(e),
        }
    }
    m.unmount();
    assert!(errors.is_empty(), "{} rounds; {errors:#?}", rounds);
    eprintln!("{rounds} rounds");
}

/// One round of worker `w` of
/// [`a_linked_file_cut_grown_and_renamed_over_reads_back_exact_under_write_back`]:
/// a file in `a` with a hard link in `b`, cut, grown, written, its name in
/// `a` replaced by a rename, and the link read back after each change.
fn linked_round(w: usize, round: u64, rng: &mut Rng, a: &Path, b: &Path) -> Result<(), String> {
    let (f, g, l) = (a.join(format!("f{round}")), a.join(format!("g{round}")), b.join(format!("l{round}")));
    let fail = |what: &str, e: std::io::Error| format!("worker {w} round {round}: {what}: {e}");
    let cut = |want: &mut Vec<u8>, len: usize| -> Result<(), String> {
        fs::OpenOptions::new()
            .write(true)
            .open(&f)
            .and_then(|h| h.set_len(len as u64))
            .map_err(|e| fail(&format!("truncate to {len}"), e))?;
        want.resize(len, 0);
        Ok(())
    };
    let append = |want: &mut Vec<u8>, rng: &mut Rng, n: usize| -> Result<(), String> {
        let more = rng.bytes(n);
        fs::OpenOptions::new()
            .append(true)
            .open(&f)
            .and_then(|mut h| h.write_all(&more))
            .map_err(|e| fail(&format!("append {n}"), e))?;
        want.extend(&more);
        Ok(())
    };
    let check = |want: &[u8], when: &str| -> Result<(), String> {
        let got = fs::read(&l).map_err(|e| fail(&format!("read {when}"), e))?;
        if got != want {
            return Err(format!("worker {w} round {round}: read {when}: {} bytes, {}", got.len(), differs(&got, want)));
        }
        Ok(())
    };
    let mut want = rng.bytes(4439);
    fs::write(&f, &want).map_err(|e| fail("create", e))?;
    append(&mut want, rng, 4798)?;
    fs::hard_link(&f, &l).map_err(|e| fail("link", e))?;
    cut(&mut want, 3605)?;
    append(&mut want, rng, 3155)?;
    let data = rng.bytes(6135);
    fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .and_then(|h| h.write_all_at(&data, 4035))
        .map_err(|e| fail("write", e))?;
    write_model(&mut want, 4035, &data);
    check(&want, "after the write")?;
    cut(&mut want, 9292)?;
    append(&mut want, rng, 1836)?;
    fs::write(&g, rng.bytes(500)).map_err(|e| fail("create", e))?;
    fs::rename(&g, &f).map_err(|e| fail("rename", e))?;
    for i in 0..4 {
        check(&want, &format!("after the rename ({i})"))?;
        std::thread::sleep(Duration::from_millis(rng.below(40)));
    }
    fs::remove_file(&l).map_err(|e| fail("unlink", e))?;
    fs::remove_file(&f).map_err(|e| fail("unlink", e))
}
