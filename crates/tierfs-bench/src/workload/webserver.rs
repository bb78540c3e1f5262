//! filebench's webserver (Loris §V-C3, §V-C4): 25 000 files (median 32 KB,
//! 20 to a directory); each loop reads ten whole files (uniformly or with a
//! Zipf distribution) and appends 16 KB to one log file. And the shifting
//! locality variant: two such sets, the first pushed off the SSD by the
//! second, then the first read.

use super::{FileSet, Fs, Params, Recorder, Report, Workload};
use crate::rng::{Rng, Zipf};
use std::io;
use std::path::Path;

/// See the module documentation.
pub struct WebServer {
    /// Settings.
    pub p: Params,
    /// Zipf file choice instead of uniform.
    pub zipf: bool,
    /// Subdirectory holding the set ("" for the root).
    pub sub: &'static str,
}

fn nfiles(p: &Params) -> u64 {
    p.scaled(25_000, 20)
}

/// Creates one web file set below `dir`.
pub fn make_set(fs: &dyn Fs, dir: &Path, p: &Params, seed: u64) -> io::Result<FileSet> {
    let set = FileSet::new(dir.to_path_buf(), nfiles(p), 20);
    set.make_dirs(fs)?;
    let mut r = Rng::new(seed);
    for f in &set.files {
        fs.write_file(f, r.size(32 << 10), 1 << 20, 0x77)?;
    }
    Ok(set)
}

/// The measured loop over an existing set.
pub fn run_set(
    fs: &dyn Fs,
    set: &FileSet,
    log: &Path,
    p: &Params,
    zipf: bool,
    seed: u64,
    name: &str,
) -> io::Result<Report> {
    let mut r = Rng::new(seed ^ 0xabcd);
    let z = Zipf::new(set.files.len(), 1.0);
    let mut rec = Recorder::new(fs);
    let t = fs.start();
    while p.going(fs, t, rec.ops(), set.files.len() as u64) {
        for _ in 0..10 {
            let i = if zipf { z.sample(&mut r) } else { r.below(set.files.len() as u64) as usize };
            rec.op(|| Ok((fs.read_whole(&set.files[i], 1 << 20)?, 0)))?;
        }
        rec.op(|| Ok((0, fs.append(log, 16 << 10, 16 << 10, 0x5a)?)))?;
    }
    Ok(rec.report(name, fs.elapsed(t).as_secs_f64(), set.files.len() as u64 + 1))
}

impl WebServer {
    fn dir(&self, root: &Path) -> std::path::PathBuf {
        if self.sub.is_empty() {
            root.to_path_buf()
        } else {
            root.join(self.sub)
        }
    }
}

impl Workload for WebServer {
    fn name(&self) -> &'static str {
        if self.zipf {
            "webserver-zipf"
        } else {
            "webserver"
        }
    }
    fn prepare(&self, fs: &dyn Fs, dir: &Path) -> io::Result<()> {
        let d = self.dir(dir);
        fs.create_dir_all(&d)?;
        make_set(fs, &d.join("htdocs"), &self.p, self.p.seed).map(drop)
    }
    fn run(&self, fs: &dyn Fs, dir: &Path) -> io::Result<Report> {
        let d = self.dir(dir);
        let set = FileSet::new(d.join("htdocs"), nfiles(&self.p), 20);
        run_set(fs, &set, &d.join("weblog"), &self.p, self.zipf, self.p.seed, self.name())
    }
}

/// Shifting locality (Loris §V-C4): set A then set B are created; the
/// measured run reads set A with Zipf locality.
pub struct Shifting {
    /// Settings.
    pub p: Params,
}

impl Workload for Shifting {
    fn name(&self) -> &'static str {
        "shifting"
    }
    fn prepare(&self, fs: &dyn Fs, dir: &Path) -> io::Result<()> {
        make_set(fs, &dir.join("set-a"), &self.p, self.p.seed)?;
        make_set(fs, &dir.join("set-b"), &self.p, self.p.seed + 1).map(drop)
    }
    fn run(&self, fs: &dyn Fs, dir: &Path) -> io::Result<Report> {
        let set = FileSet::new(dir.join("set-a"), nfiles(&self.p), 20);
        run_set(fs, &set, &dir.join("weblog"), &self.p, true, self.p.seed, self.name())
    }
}
