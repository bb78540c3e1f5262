//! Workload generators modelled on the papers' benchmarks. Each has a
//! preparation phase (the file set; not measured) and a measured run, a
//! fixed seed and a scale factor (1.0 = the papers' sizes).

mod db;
mod fileserver;
pub mod fs;
mod mail;
mod mixed;
mod postmark;
mod updates;
mod webserver;

pub use db::Db;
pub use fileserver::FileServer;
pub use fs::{bytes_written, Fs, Real, Start};
pub use mail::Mail;
pub use mixed::Mixed;
pub use postmark::PostmarkReal;
pub use webserver::{Shifting, WebServer};

use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Settings shared by all workloads.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Params {
    /// Size relative to the papers' configuration (file and transaction counts).
    pub scale: f64,
    /// Random seed.
    pub seed: u64,
    /// Length of time-bounded runs.
    pub duration: Duration,
    /// Instead of `duration`: a time-bounded run ends after this many
    /// operations per file of its set (a warm-up that leaves the same file
    /// set however fast the machine is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops_per_file: Option<u64>,
}

impl Default for Params {
    fn default() -> Self {
        Params { scale: 1.0, seed: 42, duration: Duration::from_secs(60), ops_per_file: None }
    }
}

impl Params {
    /// `n` scaled, at least `min`.
    pub fn scaled(&self, n: u64, min: u64) -> u64 {
        ((n as f64 * self.scale).round() as u64).max(min)
    }

    /// Whether a time-bounded run over `files` files that began at `start`
    /// on `fs` and has made `ops` operations goes on.
    pub fn going(&self, fs: &dyn Fs, start: Start, ops: u64, files: u64) -> bool {
        match self.ops_per_file {
            Some(k) => ops < k.saturating_mul(files.max(1)),
            None => fs.elapsed(start) < self.duration,
        }
    }
}

/// Latency percentiles of one run, in microseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// Slowest.
    pub max_us: u64,
    /// Mean.
    #[serde(default)]
    pub mean_us: u64,
}

impl Latency {
    /// The percentiles and mean of `v`, microseconds (sorts `v`).
    pub fn of<T: Copy + Ord + Into<u64>>(v: &mut [T]) -> Latency {
        v.sort_unstable();
        let pct = |q: f64| -> u64 {
            if v.is_empty() {
                0
            } else {
                v[((v.len() - 1) as f64 * q).round() as usize].into()
            }
        };
        Latency {
            p50_us: pct(0.5),
            p90_us: pct(0.9),
            p99_us: pct(0.99),
            max_us: pct(1.0),
            mean_us: v.iter().map(|&l| l.into()).sum::<u64>().checked_div(v.len() as u64).unwrap_or(0),
        }
    }
}

/// What a run measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Report {
    /// Workload name.
    pub workload: String,
    /// Operations done.
    pub ops: u64,
    /// Seconds measured.
    pub secs: f64,
    /// Operations per second.
    pub ops_per_sec: f64,
    /// For transaction-bound workloads (mail): seconds of transactions.
    pub txn_time_secs: Option<f64>,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Operation latencies.
    pub latency: Latency,
    /// Files in the set after the run.
    pub files: u64,
}

/// A workload.
pub trait Workload: Send + Sync {
    /// Its name.
    fn name(&self) -> &'static str;
    /// Directories of the file set that may take their own policy, with
    /// the policy a per-directory ("type-aware") configuration gives them.
    fn type_aware(&self) -> Vec<(&'static str, &'static str)> {
        Vec::new()
    }
    /// Creates the file set below `dir` on `fs` (not measured).
    fn prepare(&self, fs: &dyn Fs, dir: &Path) -> io::Result<()>;
    /// The bytes of its file set, for a workload that removes its files
    /// before it ends (the sweep cannot measure them afterwards).
    fn working_set(&self) -> Option<u64> {
        None
    }
    /// Runs the measured part on `fs`.
    fn run(&self, fs: &dyn Fs, dir: &Path) -> io::Result<Report>;
    /// True if a run lasts `Params::duration` (false: it runs a number of
    /// transactions).
    fn time_bounded(&self) -> bool {
        true
    }
    /// How many times an operation of its report calls the recorder (a
    /// mail transaction: its read or append, then its delivery or delete).
    fn marks_per_op(&self) -> u64 {
        1
    }
}

/// Every workload by name.
pub fn by_name(name: &str, p: Params) -> Option<Box<dyn Workload>> {
    Some(match name {
        "mail" => Box::new(Mail { p }),
        "postmark" => Box::new(PostmarkReal { p }),
        "fileserver" => Box::new(FileServer { p, sub: "" }),
        "webserver" => Box::new(WebServer { p, zipf: false, sub: "" }),
        "webserver-zipf" => Box::new(WebServer { p, zipf: true, sub: "" }),
        "shifting" => Box::new(Shifting { p }),
        "mixed" => Box::new(Mixed { p }),
        "db" => Box::new(Db { p }),
        "updates" => Box::new(updates::Updates { p }),
        _ => return None,
    })
}

/// The workload names.
pub const NAMES: &[&str] =
    &["mail", "postmark", "fileserver", "webserver", "webserver-zipf", "shifting", "mixed", "db", "updates"];

/// Counts operations, bytes and latencies.
pub struct Recorder<'a> {
    fs: &'a dyn Fs,
    lat: Vec<u32>,
    read: u64,
    written: u64,
}

impl<'a> Recorder<'a> {
    /// Counts the operations of a run on `fs`.
    pub fn new(fs: &'a dyn Fs) -> Self {
        Recorder { fs, lat: Vec::new(), read: 0, written: 0 }
    }

    /// Times one operation returning (bytes read, bytes written).
    pub fn op(&mut self, f: impl FnOnce() -> io::Result<(u64, u64)>) -> io::Result<()> {
        let t = Instant::now();
        let (r, w) = f()?;
        self.lat.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
        self.fs.op_done();
        self.read += r;
        self.written += w;
        Ok(())
    }

    /// Operations so far.
    pub fn ops(&self) -> u64 {
        self.lat.len() as u64
    }

    /// The report of a run that took `secs`.
    pub fn report(mut self, workload: &str, secs: f64, files: u64) -> Report {
        let ops = self.lat.len() as u64;
        Report {
            workload: workload.into(),
            ops,
            secs,
            ops_per_sec: if secs > 0.0 { ops as f64 / secs } else { 0.0 },
            txn_time_secs: None,
            bytes_read: self.read,
            bytes_written: self.written,
            latency: Latency::of(&mut self.lat),
            files,
        }
    }
}

/// When each operation ended (nanoseconds since the Unix epoch), while a
/// trace of the workload is being recorded (`bench workload --trace`).
static OP_LOG: std::sync::Mutex<Option<Vec<u64>>> = std::sync::Mutex::new(None);

/// Nanoseconds since the Unix epoch, now (the clock a mount's trace
/// recording counts from).
pub fn unix_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

pub(crate) fn log_op() {
    // A poisoned log (a workload thread panicked) records nothing more.
    if let Ok(mut log) = OP_LOG.lock() {
        if let Some(v) = log.as_mut() {
            v.push(unix_ns());
        }
    }
}

/// Starts logging when operations end (see [`take_op_log`]).
pub fn start_op_log() {
    if let Ok(mut log) = OP_LOG.lock() {
        *log = Some(Vec::new());
    }
}

/// Stops logging and returns the ends of the operations since
/// [`start_op_log`] (nanoseconds since the Unix epoch, in order).
pub fn take_op_log() -> Vec<u64> {
    let mut v = OP_LOG.lock().ok().and_then(|mut l| l.take()).unwrap_or_default();
    v.sort_unstable();
    v
}

/// A file set laid out as filebench does: directories of `width` entries.
#[derive(Clone, Debug)]
pub struct FileSet {
    /// Root of the set.
    pub root: PathBuf,
    /// Files, by number.
    pub files: Vec<PathBuf>,
    width: usize,
    next: u64,
}

impl FileSet {
    /// Names for `n` files below `root`, `width` to a directory.
    pub fn new(root: PathBuf, n: u64, width: usize) -> Self {
        let mut s = FileSet { root, files: Vec::new(), width: width.max(1), next: 0 };
        for _ in 0..n {
            let p = s.new_path();
            s.files.push(p);
        }
        s
    }

    /// The files that exist below `root` on `fs` now (a run may follow
    /// another that created and deleted files), in number order.
    pub fn scan(fs: &dyn Fs, root: PathBuf, width: usize) -> io::Result<Self> {
        let mut found: Vec<(u64, PathBuf)> = Vec::new();
        for (d, is_dir) in fs.list(&root)? {
            if !is_dir {
                continue;
            }
            let d = root.join(d);
            for (f, _) in fs.list(&d)? {
                if let Some(n) = f.strip_prefix('f').and_then(|n| n.parse().ok()) {
                    found.push((n, d.join(f)));
                }
            }
        }
        found.sort();
        let next = found.last().map(|x| x.0 + 1).unwrap_or(0);
        Ok(FileSet { root, files: found.into_iter().map(|x| x.1).collect(), width: width.max(1), next })
    }

    /// The path for the next new file.
    pub fn new_path(&mut self) -> PathBuf {
        let i = self.next;
        self.next += 1;
        self.root.join(format!("d{}", i / self.width as u64)).join(format!("f{i}"))
    }

    /// Creates the directories of every file on `fs`.
    pub fn make_dirs(&self, fs: &dyn Fs) -> io::Result<()> {
        let mut last = None;
        for f in &self.files {
            let d = f.parent().expect("files are in directories");
            if last != Some(d) {
                fs.create_dir_all(d)?;
                last = Some(d);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick() -> Params {
        Params { scale: 0.002, seed: 1, duration: Duration::from_millis(300), ops_per_file: None }
    }

    #[test]
    fn every_workload_prepares_and_runs_on_a_plain_directory() {
        for name in NAMES.iter().filter(|n| **n != "postmark") {
            let tmp = tempfile::tempdir().unwrap();
            let w = by_name(name, quick()).unwrap();
            w.prepare(&Real, tmp.path()).unwrap();
            let r = w.run(&Real, tmp.path()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(r.ops > 0, "{name}: {r:?}");
            assert!(r.bytes_read + r.bytes_written > 0, "{name}");
            assert!(r.latency.p50_us <= r.latency.p99_us && r.latency.p99_us <= r.latency.max_us);
        }
        assert!(by_name("nope", quick()).is_none());
    }

    #[test]
    fn a_run_after_another_run_finds_the_files_that_are_left() {
        for name in ["mail", "fileserver"] {
            let tmp = tempfile::tempdir().unwrap();
            let w = by_name(name, quick()).unwrap();
            w.prepare(&Real, tmp.path()).unwrap();
            let mut warm = quick();
            warm.seed = 99;
            by_name(name, warm).unwrap().run(&Real, tmp.path()).unwrap();
            w.run(&Real, tmp.path()).unwrap_or_else(|e| panic!("{name} after a warm-up: {e}"));
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_file_set() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        for d in [a.path(), b.path()] {
            by_name("webserver", quick()).unwrap().prepare(&Real, d).unwrap();
        }
        let sizes = |d: &Path| -> Vec<u64> {
            let mut v: Vec<u64> = walk(d).into_iter().map(|p| std::fs::metadata(p).unwrap().len()).collect();
            v.sort();
            v
        };
        assert_eq!(sizes(a.path()), sizes(b.path()));
    }

    fn walk(d: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
        out
    }
}
