//! A write-heavy workload for measurement-driven migration (Wu-Reddy
//! §IV, finding 8): small files of two kinds, logs and journals written
//! 90 % of the time and tables read 90 % of the time, one 4 KiB request at
//! a random place of a file chosen by Zipf popularity (s = 1.0, the hot
//! files laid over both kinds by a fixed permutation). Half the requests
//! write, at random: on an SSD whose garbage collection cannot keep up
//! with random writes, the write-mostly files are better served by the
//! HDD and the read-mostly ones by the SSD.

use super::{Fs, Params, Recorder, Report, Workload};
use crate::rng::{Rng, Zipf};
use std::io;
use std::path::{Path, PathBuf};

/// Files at scale 1.
pub const FILES: u64 = 20_000;
/// Size of each file.
pub const FILE_SIZE: u64 = 64 << 10;
/// One request.
pub const REQUEST: u64 = 4 << 10;
/// Share of a write-mostly file's requests that write (and of a
/// read-mostly file's that read).
pub const MOSTLY: f64 = 0.9;
/// Seed of the layout (which files are hot): a property of the set, the
/// same for the warm-up and the measured run.
const LAYOUT_SEED: u64 = 0x0bd;

/// See the module documentation.
pub struct Updates {
    /// Settings.
    pub p: Params,
}

impl Updates {
    fn paths(&self, dir: &Path) -> Vec<PathBuf> {
        let n = self.p.scaled(FILES, 20);
        (0..n).map(|i| dir.join("updates").join(format!("d{}", i / 100)).join(format!("f{i}"))).collect()
    }
}

/// File `i` is written mostly (logs, journals) if even, read mostly if odd.
fn write_mostly(i: usize) -> bool {
    i.is_multiple_of(2)
}

impl Workload for Updates {
    fn name(&self) -> &'static str {
        "updates"
    }
    fn prepare(&self, fs: &dyn Fs, dir: &Path) -> io::Result<()> {
        for (i, p) in self.paths(dir).iter().enumerate() {
            if let Some(d) = p.parent() {
                fs.create_dir_all(d)?;
            }
            fs.write_file(p, FILE_SIZE, FILE_SIZE as usize, i as u8)?;
        }
        Ok(())
    }
    fn run(&self, fs: &dyn Fs, dir: &Path) -> io::Result<Report> {
        let paths = self.paths(dir);
        let files = paths.iter().map(|p| fs.open_rw(p)).collect::<io::Result<Vec<_>>>()?;
        let mut order: Vec<usize> = (0..files.len()).collect();
        let mut layout = Rng::new(LAYOUT_SEED);
        for i in (1..order.len()).rev() {
            let j = layout.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
        let zipf = Zipf::new(files.len(), 1.0);
        let mut rng = Rng::new(self.p.seed ^ 0x0bd);
        let mut rec = Recorder::new(fs);
        let t = fs.start();
        while self.p.going(fs, t, rec.ops(), files.len() as u64) {
            let i = order[zipf.sample(&mut rng)];
            let at = rng.below(FILE_SIZE / REQUEST) * REQUEST;
            let write = rng.chance(MOSTLY) == write_mostly(i);
            let f = &files[i];
            if write {
                let byte = rng.below(256) as u8;
                rec.op(|| f.write_at(at, REQUEST as usize, byte).map(|n| (0, n)))?;
            } else {
                rec.op(|| f.read_at(at, REQUEST as usize).map(|n| (n, 0)))?;
            }
        }
        Ok(rec.report(self.name(), fs.elapsed(t).as_secs_f64(), files.len() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn updates_writes_about_half_of_its_requests() {
        let tmp = tempfile::tempdir().unwrap();
        let w =
            Updates { p: Params { scale: 0.002, seed: 3, duration: Duration::from_millis(300), ops_per_file: None } };
        w.prepare(&super::super::Real, tmp.path()).unwrap();
        assert_eq!(w.paths(tmp.path()).len(), 40);
        let r = w.run(&super::super::Real, tmp.path()).unwrap();
        let share = r.bytes_written as f64 / (r.bytes_read + r.bytes_written) as f64;
        assert!((0.3..0.7).contains(&share), "written share {share}: {r:?}");
        assert_eq!(r.files, 40);
    }
}
