//! Where a workload's file operations go: the real file system ([`Real`]),
//! or a model that turns them into the request stream the simulator
//! replays without a mount ([`crate::stream::Model`]). The generators are
//! written once against [`Fs`], so a simulated run replays the very
//! operations a live one makes.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A workload's view of a file system. Paths are the workload's own (below
/// the directory it runs in).
pub trait Fs: Send + Sync {
    /// Makes `dir` and its missing parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Makes `path` (or empties it) and writes `size` bytes in `io` pieces.
    fn write_file(&self, path: &Path, size: u64, io: usize, byte: u8) -> io::Result<u64>;
    /// Reads all of `path` in `io` pieces; returns the bytes read.
    fn read_whole(&self, path: &Path, io: usize) -> io::Result<u64>;
    /// Appends `n` bytes to `path` (made if missing) in `io` pieces.
    fn append(&self, path: &Path, n: u64, io: usize, byte: u8) -> io::Result<u64>;
    /// Removes the file `path`.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// The size of `path` (a `stat`).
    fn size(&self, path: &Path) -> io::Result<u64>;
    /// The names in `dir`, each with whether it is a directory.
    fn list(&self, dir: &Path) -> io::Result<Vec<(String, bool)>>;
    /// Opens `path` for reads and writes at offsets.
    fn open_rw(&self, path: &Path) -> io::Result<Box<dyn Handle + '_>>;
    /// How long since `start` (from [`Fs::start`]), as the workload counts
    /// a time-bounded run.
    fn elapsed(&self, start: Start) -> Duration;
    /// A point to count a run's time from.
    fn start(&self) -> Start;
    /// An operation of the measured run ended (the workload's recorder
    /// calls it).
    fn op_done(&self);
    /// The file system as another thread of the workload sees it: a model
    /// gives each thread a stream of its own, which ends when the box is
    /// dropped (move it into the thread, so that it ends with it).
    fn thread(&self) -> Box<dyn Fs + '_>;
    /// A model, not a real file system (a workload that runs another
    /// program cannot run on it).
    fn is_model(&self) -> bool {
        false
    }
}

/// A point in a run's time, in the clock of the [`Fs`] that gave it.
#[derive(Clone, Copy, Debug)]
pub struct Start(pub(crate) StartAt);

#[derive(Clone, Copy, Debug)]
pub(crate) enum StartAt {
    Real(Instant),
    Virtual(u64),
}

/// An open file, read and written at offsets.
pub trait Handle: Send + Sync {
    /// Reads `len` bytes at `off`; returns how many there were.
    fn read_at(&self, off: u64, len: usize) -> io::Result<u64>;
    /// Writes `len` bytes of `byte` at `off`.
    fn write_at(&self, off: u64, len: usize, byte: u8) -> io::Result<u64>;
}

/// The real file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct Real;

/// Bytes [`Real`] wrote as whole files in this process.
static WRITTEN: AtomicU64 = AtomicU64::new(0);

/// Bytes the generators' files took so far in this process (whole-file
/// writes: preparations and file creations of the runs), for a progress
/// display.
pub fn bytes_written() -> u64 {
    WRITTEN.load(Ordering::Relaxed)
}

struct RealFile(fs::File);

impl Handle for RealFile {
    fn read_at(&self, off: u64, len: usize) -> io::Result<u64> {
        let mut buf = vec![0u8; len];
        self.0.read_exact_at(&mut buf, off)?;
        Ok(len as u64)
    }
    fn write_at(&self, off: u64, len: usize, byte: u8) -> io::Result<u64> {
        self.0.write_all_at(&vec![byte; len], off)?;
        Ok(len as u64)
    }
}

/// Writes `n` bytes of `byte` to `f` in `io` pieces, telling `written`
/// each piece's length.
fn write_pieces(f: &mut fs::File, n: u64, io: usize, byte: u8, mut written: impl FnMut(u64)) -> io::Result<()> {
    let buf = vec![byte; io.min(n as usize).max(1)];
    let mut left = n;
    while left > 0 {
        let k = (left as usize).min(buf.len());
        f.write_all(&buf[..k])?;
        left -= k as u64;
        written(k as u64);
    }
    Ok(())
}

impl Fs for Real {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn write_file(&self, path: &Path, size: u64, io: usize, byte: u8) -> io::Result<u64> {
        let mut f = fs::File::create(path)?;
        write_pieces(&mut f, size, io, byte, |n| {
            WRITTEN.fetch_add(n, Ordering::Relaxed);
        })?;
        Ok(size)
    }

    fn read_whole(&self, path: &Path, io: usize) -> io::Result<u64> {
        let mut f = fs::File::open(path)?;
        let mut buf = vec![0u8; io];
        let mut total = 0;
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                return Ok(total);
            }
            total += n as u64;
        }
    }

    fn append(&self, path: &Path, n: u64, io: usize, byte: u8) -> io::Result<u64> {
        let mut f = fs::OpenOptions::new().append(true).create(true).open(path)?;
        write_pieces(&mut f, n, io, byte, |_| {})?;
        Ok(n)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn size(&self, path: &Path) -> io::Result<u64> {
        Ok(fs::metadata(path)?.len())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<(String, bool)>> {
        let mut v = Vec::new();
        for e in fs::read_dir(dir)? {
            let e = e?;
            if let Ok(name) = e.file_name().into_string() {
                v.push((name, e.file_type()?.is_dir()));
            }
        }
        Ok(v)
    }

    fn open_rw(&self, path: &Path) -> io::Result<Box<dyn Handle + '_>> {
        Ok(Box::new(RealFile(fs::OpenOptions::new().read(true).write(true).open(path)?)))
    }

    fn elapsed(&self, start: Start) -> Duration {
        match start.0 {
            StartAt::Real(t) => t.elapsed(),
            StartAt::Virtual(_) => Duration::ZERO,
        }
    }

    fn start(&self) -> Start {
        Start(StartAt::Real(Instant::now()))
    }

    fn op_done(&self) {
        super::log_op();
    }

    fn thread(&self) -> Box<dyn Fs + '_> {
        Box::new(Real)
    }
}
