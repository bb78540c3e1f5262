//! A workload's requests without a mount: the generators run on [`Model`],
//! a file system of names and sizes in memory that numbers each file and
//! directory and turns each operation into the records a recording mount
//! would write for it (a whole-file read is an open, the reads, the read
//! that finds the end of the file, and a close), stamped with a virtual
//! time that advances by each request's cost outside the devices
//! ([`Cost`]). Each stream's records go, in batches, down a bounded channel
//! of its own to whoever replays them (the simulator), which takes from a
//! stream only when its replay needs that stream's next request: a stream
//! that runs ahead of the others waits, and memory stays bounded. A
//! time-bounded run given no end of its own runs until the reader hangs
//! up.
//!
//! Each thread of a workload is a stream of its own ([`Fs::thread`]): its
//! parent's stream holds a [`Item::Fork`] where it starts, the thread's
//! stream ends with [`Item::End`], and the parent goes on when all its
//! threads have ended. Streams are numbered in the order they are made and
//! files and directories per stream, so the same workload and seed give
//! the same streams whatever the threads' timing (as long as only one
//! thread makes threads, as every workload here does).

use crate::workload::fs::{Handle, Start, StartAt};
use crate::workload::Fs;
use rustc_hash::FxHashMap;
use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tierfs_core::trace::{Kind, Record, PHASE_RUN};

/// What one request costs outside the devices: the client, the kernel and
/// the daemon. The defaults are what the gaps between the records of
/// recordings of the small preset's workloads without emulation measured on
/// the two-core machine of the results: a read or write of a few KiB took
/// 20 to 25 µs (mail), an open 36 µs, a read with a 1-MiB buffer 30 µs more
/// than one with a 4-KiB buffer, whatever it returned (the kernel maps the
/// whole buffer of a direct read: the web server's read at the end of a
/// file took 53 µs, mail's 20), and each KiB moved about 0.3 µs (a read of
/// 63 KiB, 39 µs). A create took 250 to 350 µs more than that (the file
/// server's create-and-write took 430 to 530 µs against the 180 µs its
/// other requests account for; the default is the low end, since creates on
/// that machine's disk varied from minute to minute), a remove about 60 µs
/// more (85 µs): the state database syncs its journal for each, and the
/// backing file system's create waits for that sync.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    /// Per request.
    pub per_request: Duration,
    /// More for an open or a create.
    pub per_open: Duration,
    /// More again for a create.
    pub per_create: Duration,
    /// More for a remove.
    pub per_remove: Duration,
    /// Per MiB of the buffer a read or write hands the kernel.
    pub per_buffer_mib: Duration,
    /// Per byte read or written, nanoseconds.
    pub per_byte_ns: f64,
}

impl Default for Cost {
    fn default() -> Self {
        Cost {
            per_request: Duration::from_micros(20),
            per_open: Duration::from_micros(16),
            per_create: Duration::from_micros(250),
            per_remove: Duration::from_micros(60),
            per_buffer_mib: Duration::from_micros(30),
            per_byte_ns: 0.3,
        }
    }
}

impl Cost {
    /// Nanoseconds a request of `kind` takes that moves `len` bytes
    /// through a buffer of `buffer` bytes.
    pub fn of(&self, kind: Kind, len: u64, buffer: u64) -> u64 {
        let mut ns = self.per_request.as_nanos() as f64 + len as f64 * self.per_byte_ns;
        if matches!(kind, Kind::Open | Kind::Create) {
            ns += self.per_open.as_nanos() as f64;
        }
        match kind {
            Kind::Create => ns += self.per_create.as_nanos() as f64,
            Kind::Remove => ns += self.per_remove.as_nanos() as f64,
            _ => {}
        }
        if kind.is_io() {
            ns += self.per_buffer_mib.as_nanos() as f64 * buffer as f64 / (1u64 << 20) as f64;
        }
        ns as u64
    }
}

/// One item of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    /// A request, or a mark of the workload's structure.
    Record(Record),
    /// A directory was made in `parent` (the root is its own parent).
    Dir {
        /// The directory.
        dir: u64,
        /// Its parent.
        parent: u64,
    },
    /// Stream `n` starts here, and this one waits for it to end.
    Fork(u32),
    /// The stream ends.
    End,
}

/// A stream's channel: batches of its items.
pub type Batches = Receiver<Vec<Item>>;

/// The reading end of a model: each stream's channel, as streams start.
pub struct Streams {
    started: Receiver<(u32, Batches)>,
    by_id: HashMap<u32, Batches>,
}

impl Streams {
    /// The next batch of stream `n`, waiting for it; `None` once the stream
    /// has ended (its generator dropped it) or never started.
    pub fn next(&mut self, n: u32) -> Option<Vec<Item>> {
        loop {
            if let Some(rx) = self.by_id.get(&n) {
                return rx.recv().ok();
            }
            // A stream's channel is announced before its fork is sent.
            let (id, rx) = self.started.recv().ok()?;
            self.by_id.insert(id, rx);
        }
    }
}

/// Items sent in one message.
const BATCH: usize = 4096;
/// The workload's root directory.
pub const ROOT_DIR: u64 = 1;

#[derive(Clone, Copy, Debug)]
enum Node {
    Dir(u64),
    File { id: u64, dir: u64, size: u64 },
}

struct Shared {
    root: PathBuf,
    /// The reader hung up: every request from now on fails.
    closed: std::sync::atomic::AtomicBool,
    /// The number of the next stream.
    streams: std::sync::atomic::AtomicU32,
    /// Every name's node, by the path's bytes (hashed fast: looked up on
    /// every request; a `Path` key would be hashed component by component).
    names: Mutex<FxHashMap<OsString, Node>>,
    /// Where a new stream's channel is announced.
    started: Mutex<std::sync::mpsc::Sender<(u32, Batches)>>,
    /// Batches a stream's channel holds.
    depth: usize,
    cost: Cost,
}

/// See the module documentation.
pub struct Model {
    shared: Arc<Shared>,
    stream: u32,
    /// Its channel and what is not sent yet, sent under the lock.
    out: Arc<Out>,
    /// The parent's, for a thread's stream: its forks go out before the
    /// thread's first batch.
    parent: Option<Arc<Out>>,
    /// The stream's virtual time, nanoseconds.
    now: AtomicU64,
    next_id: AtomicU64,
}

/// A stream's channel and the items not sent yet.
struct Out {
    buf: Mutex<Vec<Item>>,
    tx: SyncSender<Vec<Item>>,
}

impl Out {
    /// Sends what is buffered, in order (under the lock: a thread may send
    /// its parent's forks while the parent sends).
    fn flush(&self, shared: &Shared) -> io::Result<()> {
        let mut b = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        if b.is_empty() {
            return Ok(());
        }
        let items = std::mem::take(&mut *b);
        self.tx.send(items).map_err(|_| {
            shared.closed.store(true, Ordering::Relaxed);
            closed()
        })
    }
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the replay has all the requests it wants")
}

/// Whether `e` is the end [`Model`] gives once the reader hung up.
pub fn hung_up(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
}

impl Model {
    /// A model of the directory `root` (which exists, empty), sending each
    /// stream down a channel of `depth` batches; the reading end is
    /// returned with it. Stream 0 is the caller's.
    pub fn new(root: &Path, cost: Cost, depth: usize) -> (Model, Streams) {
        let (started_tx, started) = std::sync::mpsc::channel();
        let mut names = FxHashMap::default();
        names.insert(root.as_os_str().to_owned(), Node::Dir(ROOT_DIR));
        let shared = Arc::new(Shared {
            root: root.to_path_buf(),
            closed: std::sync::atomic::AtomicBool::new(false),
            streams: std::sync::atomic::AtomicU32::new(1),
            names: Mutex::new(names),
            started: Mutex::new(started_tx),
            depth: depth.max(1),
            cost,
        });
        let m = Model::stream(shared, 0, 0, None);
        let _ = m.item(Item::Dir { dir: ROOT_DIR, parent: ROOT_DIR });
        (m, Streams { started, by_id: HashMap::new() })
    }

    fn stream(shared: Arc<Shared>, stream: u32, now: u64, parent: Option<Arc<Out>>) -> Model {
        let (tx, rx) = std::sync::mpsc::sync_channel(shared.depth);
        // A reader that is gone shows at the first send.
        let _ = shared.started.lock().unwrap_or_else(|e| e.into_inner()).send((stream, rx));
        Model {
            shared,
            stream,
            out: Arc::new(Out { buf: Mutex::new(Vec::with_capacity(BATCH)), tx }),
            parent,
            now: AtomicU64::new(now),
            // Numbers of stream n start at n * 2^40; 0 and 1 are taken.
            next_id: AtomicU64::new(((stream as u64) << 40) + 2),
        }
    }

    /// The directory number of `path`, if the model has it.
    pub fn dir_id(&self, path: &Path) -> Option<u64> {
        match self.names().get(path.as_os_str()) {
            Some(Node::Dir(d)) => Some(*d),
            _ => None,
        }
    }

    /// Puts a mark of the workload's phase in (see `trace::PHASE_*`).
    pub fn phase(&self, phase: u64) -> io::Result<()> {
        self.push(Kind::Phase, 0, 0, phase, 0, 0)
    }

    /// Lets virtual time pass with no request (a warm-up that idles).
    pub fn idle(&self, d: Duration) {
        self.now.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Sends what is buffered (a thread's stream sends its parent's first:
    /// the forks the replay must see before this stream's items).
    pub fn flush(&self) -> io::Result<()> {
        if let Some(p) = &self.parent {
            p.flush(&self.shared)?;
        }
        self.out.flush(&self.shared)
    }

    fn names(&self) -> std::sync::MutexGuard<'_, FxHashMap<OsString, Node>> {
        // A generator thread that panicked poisons it; the names are
        // still whole (every change is one insert or remove).
        self.shared.names.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn item(&self, item: Item) -> io::Result<()> {
        // Once the reader is gone, for good: an error a caller ignores
        // (an operation's mark) must not let the generator run on.
        if self.shared.closed.load(Ordering::Relaxed) {
            return Err(closed());
        }
        let full = {
            let mut b = self.out.buf.lock().unwrap_or_else(|e| e.into_inner());
            b.push(item);
            b.len() >= BATCH
        };
        if full {
            self.flush()?;
        }
        Ok(())
    }

    /// A record at the stream's time, which then advances by its cost.
    fn push(&self, kind: Kind, file: u64, dir: u64, off: u64, len: u64, cost: u64) -> io::Result<()> {
        let time_ns = self.now.fetch_add(cost, Ordering::Relaxed);
        self.item(Item::Record(Record { time_ns, file, dir, kind, off, len }))
    }

    /// A request that reaches the daemon: a record, and its cost (a read
    /// or write through a buffer of its own length).
    fn request(&self, kind: Kind, file: u64, dir: u64, off: u64, len: u64) -> io::Result<()> {
        self.request_buffered(kind, file, dir, off, len, len)
    }

    /// A request whose buffer is `buffer` bytes (a read asks for more than
    /// the file has).
    fn request_buffered(&self, kind: Kind, file: u64, dir: u64, off: u64, len: u64, buffer: u64) -> io::Result<()> {
        let bytes = if kind.is_io() { len } else { 0 };
        self.push(kind, file, dir, off, len, self.shared.cost.of(kind, bytes, buffer))
    }

    /// The client makes and fills a buffer of `bytes` for a whole-file read
    /// or write: its own time, as much as the kernel's mapping of it.
    fn fill_buffer(&self, bytes: u64) {
        let ns = self.shared.cost.per_buffer_mib.as_nanos() as f64 * bytes as f64 / (1u64 << 20) as f64;
        self.now.fetch_add(ns as u64, Ordering::Relaxed);
    }

    /// A request with no record of its own (mkdir, stat).
    fn unrecorded(&self) {
        self.now.fetch_add(self.shared.cost.of(Kind::Close, 0, 0), Ordering::Relaxed);
    }

    fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn parent_dir(&self, path: &Path) -> io::Result<u64> {
        let parent = path.parent().ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        match self.names().get(parent.as_os_str()) {
            Some(Node::Dir(d)) => Ok(*d),
            Some(Node::File { .. }) => Err(io::Error::from_raw_os_error(libc::ENOTDIR)),
            None => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    }

    fn file(&self, path: &Path) -> io::Result<(u64, u64, u64)> {
        match self.names().get(path.as_os_str()) {
            Some(Node::File { id, dir, size }) => Ok((*id, *dir, *size)),
            Some(Node::Dir(_)) => Err(io::Error::from_raw_os_error(libc::EISDIR)),
            None => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    }

    fn set_size(&self, path: &Path, size: u64) {
        if let Some(Node::File { size: s, .. }) = self.names().get_mut(path.as_os_str()) {
            *s = size;
        }
    }

    /// The file `path`, made (empty) if missing; opened for writing.
    fn open_for_write(&self, path: &Path, truncate: bool) -> io::Result<(u64, u64, u64)> {
        let (id, dir, size) = match self.file(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let dir = self.parent_dir(path)?;
                let id = self.id();
                self.names().insert(path.as_os_str().to_owned(), Node::File { id, dir, size: 0 });
                self.request(Kind::Create, id, dir, 0, 0)?;
                (id, dir, 0)
            }
            Err(e) => return Err(e),
        };
        self.request(Kind::Open, id, dir, 1, size)?;
        if truncate && size > 0 {
            self.set_size(path, 0);
            self.request(Kind::Truncate, id, dir, 0, 0)?;
            return Ok((id, dir, 0));
        }
        Ok((id, dir, size))
    }

    /// Writes `n` bytes at `at` in `io` pieces; returns the new end.
    fn write_pieces(&self, id: u64, dir: u64, at: u64, n: u64, io: usize) -> io::Result<u64> {
        let io = io.max(1) as u64;
        let mut off = at;
        while off < at + n {
            let k = io.min(at + n - off);
            self.request(Kind::Write, id, dir, off, k)?;
            off += k;
        }
        Ok(off)
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        if self.stream != 0 {
            // A thread's stream ends with it; the caller's ends when the
            // replay has it all (the sweep drops the model).
            let _ = self.item(Item::End);
        }
        let _ = self.flush();
    }
}

struct ModelFile<'a> {
    m: &'a Model,
    path: PathBuf,
    id: u64,
    dir: u64,
}

impl Handle for ModelFile<'_> {
    fn read_at(&self, off: u64, len: usize) -> io::Result<u64> {
        let (_, _, size) = self.m.file(&self.path)?;
        let n = (len as u64).min(size.saturating_sub(off));
        self.m.request(Kind::Read, self.id, self.dir, off, n)?;
        if n < len as u64 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        Ok(n)
    }

    fn write_at(&self, off: u64, len: usize, _byte: u8) -> io::Result<u64> {
        let (_, _, size) = self.m.file(&self.path)?;
        self.m.request(Kind::Write, self.id, self.dir, off, len as u64)?;
        if off + len as u64 > size {
            self.m.set_size(&self.path, off + len as u64);
        }
        Ok(len as u64)
    }
}

impl Drop for ModelFile<'_> {
    fn drop(&mut self) {
        let size = self.m.file(&self.path).map_or(0, |f| f.2);
        let _ = self.m.request(Kind::Close, self.id, self.dir, 0, size);
    }
}

impl Fs for Model {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        if !dir.starts_with(&self.shared.root) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{} is outside the model", dir.display())));
        }
        // At least the look at the last component, made or found.
        self.unrecorded();
        let mut made = Vec::new();
        let mut p = dir;
        while !self.names().contains_key(p.as_os_str()) {
            made.push(p.to_path_buf());
            p = p.parent().ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        }
        for d in made.into_iter().rev() {
            let parent = self.parent_dir(&d)?;
            let id = self.id();
            self.names().insert(d.into_os_string(), Node::Dir(id));
            self.item(Item::Dir { dir: id, parent })?;
            // mkdir is a request too, with no record of its own.
            self.unrecorded();
        }
        if let Some(Node::File { .. }) = self.names().get(dir.as_os_str()) {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        Ok(())
    }

    fn write_file(&self, path: &Path, size: u64, io: usize, _byte: u8) -> io::Result<u64> {
        self.fill_buffer(size.min(io as u64));
        let (id, dir, _) = self.open_for_write(path, true)?;
        let end = self.write_pieces(id, dir, 0, size, io)?;
        self.set_size(path, end);
        self.request(Kind::Close, id, dir, 0, end)?;
        Ok(size)
    }

    fn read_whole(&self, path: &Path, io: usize) -> io::Result<u64> {
        let (id, dir, size) = self.file(path)?;
        self.fill_buffer(io as u64);
        self.request(Kind::Open, id, dir, 0, size)?;
        let io = io.max(1) as u64;
        let mut off = 0;
        while off < size {
            let k = io.min(size - off);
            self.request_buffered(Kind::Read, id, dir, off, k, io)?;
            off += k;
        }
        // The read that finds the end.
        self.request_buffered(Kind::Read, id, dir, size, 0, io)?;
        self.request(Kind::Close, id, dir, 0, size)?;
        Ok(size)
    }

    fn append(&self, path: &Path, n: u64, io: usize, _byte: u8) -> io::Result<u64> {
        self.fill_buffer(n.min(io as u64));
        let (id, dir, size) = self.open_for_write(path, false)?;
        let end = self.write_pieces(id, dir, size, n, io)?;
        self.set_size(path, end);
        self.request(Kind::Close, id, dir, 0, end)?;
        Ok(n)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let (id, dir, _) = self.file(path)?;
        self.names().remove(path.as_os_str());
        self.request(Kind::Remove, id, dir, 0, 0)
    }

    fn size(&self, path: &Path) -> io::Result<u64> {
        let (_, _, size) = self.file(path)?;
        // The kernel answers from the attributes it cached (a mount lets it
        // keep them a minute), so no record.
        self.unrecorded();
        Ok(size)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<(String, bool)>> {
        let mut v: Vec<(String, Node)> = {
            let names = self.names();
            match names.get(dir.as_os_str()) {
                Some(Node::Dir(_)) => {}
                Some(Node::File { .. }) => return Err(io::Error::from_raw_os_error(libc::ENOTDIR)),
                None => return Err(io::Error::from(io::ErrorKind::NotFound)),
            }
            names
                .iter()
                .filter(|(p, _)| Path::new(p).parent() == Some(dir))
                .filter_map(|(p, n)| Some((Path::new(p).file_name()?.to_str()?.to_string(), *n)))
                .collect()
        };
        // In a fixed order: a hash map's is not.
        v.sort_by(|a, b| a.0.cmp(&b.0));
        // The listing itself, then each file's attributes, which the kernel
        // asks with the names (readdirplus) and the daemon reads from the
        // file's tier.
        self.unrecorded();
        for (_, n) in &v {
            if let Node::File { id, dir, size } = *n {
                self.request(Kind::Stat, id, dir, 0, size)?;
            }
        }
        Ok(v.into_iter().map(|(name, n)| (name, matches!(n, Node::Dir(_)))).collect())
    }

    fn open_rw(&self, path: &Path) -> io::Result<Box<dyn Handle + '_>> {
        let (id, dir, size) = self.file(path)?;
        self.request(Kind::Open, id, dir, 1, size)?;
        Ok(Box::new(ModelFile { m: self, path: path.to_path_buf(), id, dir }))
    }

    fn elapsed(&self, start: Start) -> Duration {
        match start.0 {
            StartAt::Virtual(t) => Duration::from_nanos(self.now.load(Ordering::Relaxed).saturating_sub(t)),
            StartAt::Real(t) => t.elapsed(),
        }
    }

    fn start(&self) -> Start {
        // Marked for the simulator, which counts the run's time from the
        // workload's clock as the sweep does (a failed send ends the run at
        // its next request).
        let _ = self.push(Kind::Phase, 0, 0, PHASE_RUN, 0, 0);
        Start(StartAt::Virtual(self.now.load(Ordering::Relaxed)))
    }

    fn op_done(&self) {
        // A failed send ends the run at its next request.
        let _ = self.push(Kind::Op, 0, 0, 0, 0, 0);
    }

    fn thread(&self) -> Box<dyn Fs + '_> {
        let n = self.shared.streams.fetch_add(1, Ordering::Relaxed);
        let child = Model::stream(self.shared.clone(), n, self.now.load(Ordering::Relaxed), Some(self.out.clone()));
        // The fork goes in the parent's stream, sent with the child's first
        // batch (so that forks made one after another go out together, and
        // the replay sees them all before the parent waits); a closed
        // channel shows at the child's first request.
        let _ = self.item(Item::Fork(n));
        Box::new(child)
    }

    fn is_model(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{by_name, Params};
    use tierfs_core::trace::PHASE_MEASURE;

    /// Items by stream.
    type ByStream = HashMap<u32, Vec<Item>>;

    /// Everything a model sent, by stream, and the directories it made,
    /// once it is dropped (streams `0..n`).
    fn drain(mut rx: Streams, n: u32) -> (ByStream, Vec<(u64, u64)>) {
        let mut streams: ByStream = HashMap::new();
        let mut dirs = Vec::new();
        for s in 0..n {
            while let Some(items) = rx.next(s) {
                for i in &items {
                    if let Item::Dir { dir, parent } = i {
                        dirs.push((*dir, *parent));
                    }
                }
                streams.entry(s).or_default().extend(items);
            }
        }
        (streams, dirs)
    }

    fn records(items: &[Item]) -> Vec<Record> {
        items
            .iter()
            .filter_map(|i| match i {
                Item::Record(r) => Some(*r),
                _ => None,
            })
            .collect()
    }

    fn kinds(items: &[Item]) -> Vec<Kind> {
        records(items).iter().map(|r| r.kind).collect()
    }

    #[test]
    fn a_whole_file_read_is_an_open_the_reads_the_end_and_a_close() {
        let root = Path::new("/w");
        let (m, rx) = Model::new(root, Cost::default(), 1024);
        m.create_dir_all(&root.join("d")).unwrap();
        m.write_file(&root.join("d/f"), 3000, 1024, 0).unwrap();
        assert_eq!(m.read_whole(&root.join("d/f"), 2048).unwrap(), 3000);
        assert_eq!(m.append(&root.join("d/f"), 100, 100, 0).unwrap(), 100);
        assert_eq!(m.size(&root.join("d/f")).unwrap(), 3100);
        m.remove_file(&root.join("d/f")).unwrap();
        assert!(m.read_whole(&root.join("d/f"), 2048).is_err());
        drop(m);
        let (streams, dirs) = drain(rx, 1);
        assert_eq!(dirs.len(), 2, "the root and d: {dirs:?}");
        use Kind::*;
        assert_eq!(
            kinds(&streams[&0]),
            [Create, Open, Write, Write, Write, Close, Open, Read, Read, Read, Close, Open, Write, Close, Remove]
        );
        let records = records(&streams[&0]);
        let last_read = records[9];
        assert_eq!((last_read.off, last_read.len), (3000, 0), "the read at the end finds nothing");
        // Time advances by each request's cost.
        let times: Vec<u64> = records.iter().map(|r| r.time_ns).collect();
        assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    }

    #[test]
    fn a_listing_reads_the_attributes_of_each_file_and_a_stat_is_the_kernels() {
        // The kernel asks a listing's attributes with its names, and the
        // daemon reads them from each file's tier (on an emulated HDD, a
        // seek each); a stat later is answered from the kernel's cache.
        let root = Path::new("/w");
        let (m, rx) = Model::new(root, Cost::default(), 1024);
        m.create_dir_all(&root.join("d/sub")).unwrap();
        m.write_file(&root.join("d/b"), 10, 10, 0).unwrap();
        m.write_file(&root.join("d/a"), 20, 20, 0).unwrap();
        let names = m.list(&root.join("d")).unwrap();
        assert_eq!(names, [("a".to_string(), false), ("b".to_string(), false), ("sub".to_string(), true)]);
        assert_eq!(m.size(&root.join("d/a")).unwrap(), 20);
        drop(m);
        let (streams, _) = drain(rx, 1);
        let records = records(&streams[&0]);
        let stats: Vec<(u64, u64)> = records.iter().filter(|r| r.kind == Kind::Stat).map(|r| (r.file, r.len)).collect();
        let id = |len| records.iter().find(|r| r.kind == Kind::Close && r.len == len).map(|r| r.file);
        assert_eq!(stats, [(id(20).unwrap(), 20), (id(10).unwrap(), 10)], "one per file, in name order");
    }

    #[test]
    fn the_workloads_clock_is_marked_where_it_starts() {
        let root = Path::new("/w");
        let (m, rx) = Model::new(root, Cost::default(), 1024);
        m.write_file(&root.join("a"), 10, 10, 0).unwrap();
        let t = m.start();
        m.read_whole(&root.join("a"), 10).unwrap();
        assert!(m.elapsed(t) > Duration::ZERO);
        drop(m);
        let (streams, _) = drain(rx, 1);
        let records = records(&streams[&0]);
        let at = records.iter().position(|r| r.kind == Kind::Phase).expect("a phase mark");
        assert_eq!(records[at].off, PHASE_RUN);
        assert_eq!(records[at - 1].kind, Kind::Close, "after the file was written");
        assert_eq!(records[at + 1].kind, Kind::Open, "before it is read");
    }

    #[test]
    fn a_create_and_a_remove_cost_what_the_mount_measured_more_than_other_requests() {
        let c = Cost::default();
        let us = |ns: u64| Duration::from_nanos(ns);
        assert_eq!(us(c.of(Kind::Create, 0, 0) - c.of(Kind::Open, 0, 0)), c.per_create);
        assert_eq!(us(c.of(Kind::Remove, 0, 0) - c.of(Kind::Close, 0, 0)), c.per_remove);
        assert!(c.per_create >= Duration::from_micros(200), "a create syncs the state database");
    }

    #[test]
    fn a_thread_is_a_stream_of_its_own_forked_from_its_parent() {
        let root = Path::new("/w");
        let (m, rx) = Model::new(root, Cost::default(), 1024);
        m.write_file(&root.join("a"), 10, 10, 0).unwrap();
        {
            let t = m.thread();
            t.write_file(&root.join("b"), 10, 10, 0).unwrap();
        }
        drop(m);
        let (streams, _) = drain(rx, 2);
        assert!(streams[&0].contains(&Item::Fork(1)));
        assert_eq!(streams[&1].last(), Some(&Item::End));
        let id = |items: &[Item]| {
            items.iter().find_map(|i| match i {
                Item::Record(r) if r.kind == Kind::Create => Some(r.file),
                _ => None,
            })
        };
        assert_eq!(id(&streams[&1]), Some((1 << 40) + 2), "numbered per stream");
    }

    #[test]
    fn the_same_workload_gives_the_same_streams_and_stops_when_the_reader_hangs_up() {
        let run = || {
            let root = Path::new("/w");
            let (m, rx) = Model::new(root, Cost::default(), 4);
            let p = Params { scale: 0.002, seed: 7, duration: Duration::from_secs(3600), ops_per_file: None };
            let w = by_name("mixed", p).unwrap();
            let h = std::thread::spawn(move || {
                w.prepare(&m, root)?;
                m.phase(PHASE_MEASURE)?;
                w.run(&m, root).map(drop)
            });
            // Stream 0 up to its forks (then it waits for its threads),
            // 60 batches of each thread's, then hang up.
            let mut rx = rx;
            let mut got: HashMap<u32, Vec<Item>> = HashMap::new();
            while !got.get(&0).is_some_and(|v| v.contains(&Item::Fork(2))) {
                let items = rx.next(0).expect("stream 0 forks");
                got.entry(0).or_default().extend(items);
            }
            for stream in [1, 2] {
                for _ in 0..60 {
                    let Some(items) = rx.next(stream) else { break };
                    got.entry(stream).or_default().extend(items);
                }
            }
            drop(rx);
            let e = h.join().unwrap().unwrap_err();
            assert!(hung_up(&e), "{e}");
            got
        };
        let (a, b) = (run(), run());
        assert!(a.contains_key(&1) && a.contains_key(&2), "both halves ran: {:?}", a.keys());
        // The streams are cut wherever the reader stopped; what both have
        // is the same.
        for s in [0, 1, 2] {
            let n = a[&s].len().min(b[&s].len());
            assert!(n > 100, "stream {s}: {n} items");
            assert_eq!(a[&s][..n], b[&s][..n], "stream {s}");
        }
    }

    #[test]
    fn a_generator_whose_marks_meet_the_hang_up_still_stops() {
        // db makes a request and a mark each operation, so the batch that
        // finds the reader gone is sent by a mark, whose error the
        // recorder drops: the model must fail every request after.
        let root = Path::new("/w");
        let (m, rx) = Model::new(root, Cost::default(), 1);
        let p = Params { scale: 0.002, seed: 1, duration: Duration::MAX, ops_per_file: None };
        let w = by_name("db", p).unwrap();
        let (done_tx, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = w.prepare(&m, root).and_then(|()| w.run(&m, root).map(drop));
            let _ = done_tx.send(r);
        });
        let mut rx = rx;
        for _ in 0..10 {
            rx.next(0);
        }
        drop(rx);
        // A watchdog: a generator that does not stop would run for ever.
        let r = done.recv_timeout(Duration::from_secs(30)).expect("the generator stopped");
        let e = r.unwrap_err();
        assert!(hung_up(&e), "{e}");
    }
}
