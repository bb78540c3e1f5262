//! filebench's fileserver (Loris §V-C2): 10 000 files (median 128 KB, 20 to
//! a directory); each loop creates and writes a file, appends to one, reads
//! one whole, deletes one and stats one, uniformly, with 1 MB I/O.

use super::{FileSet, Fs, Params, Recorder, Report, Workload};
use crate::rng::Rng;
use std::io;
use std::path::Path;

/// See the module documentation.
pub struct FileServer {
    /// Settings.
    pub p: Params,
    /// Subdirectory holding the set ("" for the root).
    pub sub: &'static str,
}

const IO: usize = 1 << 20;

impl FileServer {
    fn set(&self, dir: &Path) -> FileSet {
        let root = if self.sub.is_empty() { dir.join("fileset") } else { dir.join(self.sub).join("fileset") };
        FileSet::new(root, self.p.scaled(10_000, 20), 20)
    }
}

impl Workload for FileServer {
    fn name(&self) -> &'static str {
        "fileserver"
    }
    fn prepare(&self, fs: &dyn Fs, dir: &Path) -> io::Result<()> {
        let set = self.set(dir);
        set.make_dirs(fs)?;
        let mut r = Rng::new(self.p.seed);
        for f in &set.files {
            fs.write_file(f, r.size(128 << 10), IO, 0x66)?;
        }
        Ok(())
    }
    fn run(&self, fs: &dyn Fs, dir: &Path) -> io::Result<Report> {
        self.run_set(fs, self.scan(fs, dir)?)
    }
}

impl FileServer {
    /// The files of the set that exist now (a run may follow another that
    /// created and deleted files).
    pub fn scan(&self, fs: &dyn Fs, dir: &Path) -> io::Result<FileSet> {
        FileSet::scan(fs, self.set(dir).root, 20)
    }

    /// The measured loop over `set`, as [`FileServer::scan`] found it.
    pub fn run_set(&self, fs: &dyn Fs, mut set: FileSet) -> io::Result<Report> {
        let files = set.files.len() as u64;
        let mut r = Rng::new(self.p.seed ^ 0x1234);
        let mut rec = Recorder::new(fs);
        let t = fs.start();
        let pick = |r: &mut Rng, set: &FileSet| set.files[r.below(set.files.len() as u64) as usize].clone();
        while self.p.going(fs, t, rec.ops(), files) {
            let new = set.new_path();
            fs.create_dir_all(new.parent().expect("in a directory"))?;
            let size = r.size(128 << 10);
            rec.op(|| Ok((0, fs.write_file(&new, size, IO, 0x66)?)))?;
            set.files.push(new);
            let a = pick(&mut r, &set);
            let n = r.range(1, 32 << 10);
            rec.op(|| Ok((0, fs.append(&a, n, n as usize, 0x5a)?)))?;
            let f = pick(&mut r, &set);
            rec.op(|| Ok((fs.read_whole(&f, IO)?, 0)))?;
            if set.files.len() > 1 {
                let i = r.below(set.files.len() as u64) as usize;
                let d = set.files.swap_remove(i);
                rec.op(|| fs.remove_file(&d).map(|_| (0, 0)))?;
            }
            let s = pick(&mut r, &set);
            rec.op(|| fs.size(&s).map(|_| (0, 0)))?;
        }
        let n = set.files.len() as u64;
        Ok(rec.report(self.name(), fs.elapsed(t).as_secs_f64(), n))
    }
}
