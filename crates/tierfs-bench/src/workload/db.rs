//! A database on big files (the sub-file extents issue): 4 files of 1 GiB
//! at scale 1, read (70 %) and written (30 %) at random in 8 KiB requests
//! with Zipf locality over 64 KiB chunks, the hot chunks scattered over the
//! files by a seeded permutation; every 20 000 requests a sequential scan
//! reads 64 MiB of one file in 1 MiB requests (a report, a backup), which
//! must not flush the hot chunks out. Every file is past the 1 MiB sieve, so
//! file-level architectures leave all of it on the HDD.

use super::{write_file, Params, Recorder, Report, Workload};
use crate::rng::{Rng, Zipf};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Files in the set.
pub const FILES: u64 = 4;
/// Size of a file at scale 1.
pub const FILE_SIZE: u64 = 1 << 30;
/// The unit of locality.
pub const CHUNK: u64 = 64 << 10;
/// One request.
pub const REQUEST: u64 = 8 << 10;
/// Random requests between two scans.
pub const SCAN_EVERY: u64 = 20_000;
/// Bytes one scan reads.
pub const SCAN_BYTES: u64 = 64 << 20;
/// One scan request.
pub const SCAN_REQUEST: usize = 1 << 20;
/// Share of random requests that read.
pub const READ_SHARE: f64 = 0.7;
/// The Zipf exponent over chunks.
pub const ZIPF_S: f64 = 1.0;

/// See the module documentation.
pub struct Db {
    /// Settings.
    pub p: Params,
}

impl Db {
    /// Bytes per file: 1 GiB scaled, whole chunks, at least 2 MiB (past
    /// the default sieve).
    pub fn file_size(&self) -> u64 {
        ((FILE_SIZE as f64 * self.p.scale) as u64 / CHUNK).max(32) * CHUNK
    }

    fn paths(dir: &Path) -> Vec<PathBuf> {
        (0..FILES).map(|i| dir.join("db").join(format!("table-{i}.dat"))).collect()
    }
}

/// A seeded permutation of `0..n` (Fisher-Yates).
fn permutation(n: u64, r: &mut Rng) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    for i in (1..v.len()).rev() {
        let j = r.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
    v
}

impl Workload for Db {
    fn name(&self) -> &'static str {
        "db"
    }
    fn prepare(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir.join("db"))?;
        for (i, p) in Db::paths(dir).iter().enumerate() {
            write_file(p, self.file_size(), 1 << 20, 0x40 + i as u8)?;
        }
        Ok(())
    }
    fn run(&self, dir: &Path) -> io::Result<Report> {
        let files: Vec<File> = Db::paths(dir)
            .iter()
            .map(|p| OpenOptions::new().read(true).write(true).open(p))
            .collect::<io::Result<_>>()?;
        let size = self.file_size();
        let per_file = size / CHUNK;
        let mut r = Rng::new(self.p.seed ^ 0xdb);
        let order = permutation(FILES * per_file, &mut r);
        let z = Zipf::new(order.len(), ZIPF_S);
        let mut buf = vec![0u8; REQUEST as usize];
        let mut scan_buf = vec![0u8; SCAN_REQUEST];
        let mut rec = Recorder::default();
        let mut requests = 0u64;
        let mut scans = 0u64;
        let t = Instant::now();
        while t.elapsed() < self.p.duration {
            requests += 1;
            if requests % SCAN_EVERY == 0 {
                let f = &files[(scans % FILES) as usize];
                let len = SCAN_BYTES.min(size);
                let start = (scans * SCAN_BYTES) % size / CHUNK * CHUNK;
                scans += 1;
                let mut off = 0;
                while off < len && t.elapsed() < self.p.duration {
                    let at = (start + off) % size;
                    let n = (SCAN_REQUEST as u64).min(size - at) as usize;
                    rec.op(|| f.read_exact_at(&mut scan_buf[..n], at).map(|()| (n as u64, 0)))?;
                    off += n as u64;
                }
                continue;
            }
            let chunk = order[z.sample(&mut r)];
            let f = &files[(chunk / per_file) as usize];
            let at = chunk % per_file * CHUNK + r.below(CHUNK / REQUEST) * REQUEST;
            if r.chance(READ_SHARE) {
                rec.op(|| f.read_exact_at(&mut buf, at).map(|()| (REQUEST, 0)))?;
            } else {
                buf.fill(requests as u8);
                rec.op(|| f.write_all_at(&buf, at).map(|()| (0, REQUEST)))?;
            }
        }
        Ok(rec.report(self.name(), t.elapsed().as_secs_f64(), FILES))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_set_is_four_big_files_past_the_sieve_and_the_run_scans_and_writes() {
        let tmp = tempfile::tempdir().unwrap();
        let p = Params { scale: 0.002, seed: 5, duration: Duration::from_millis(1500) };
        let w = Db { p };
        w.prepare(tmp.path()).unwrap();
        for path in Db::paths(tmp.path()) {
            assert_eq!(std::fs::metadata(path).unwrap().len(), 2 << 20);
        }
        let r = w.run(tmp.path()).unwrap();
        assert!(r.bytes_written > 0 && r.bytes_read > 0, "{r:?}");
        // More operations than requests between scans: a scan ran.
        assert!(r.ops > SCAN_EVERY, "{r:?}");
    }

    #[test]
    fn the_hot_chunks_are_scattered_over_the_files() {
        let mut r = Rng::new(1);
        let p = permutation(4 * 32, &mut r);
        let mut sorted = p.clone();
        sorted.sort();
        assert_eq!(sorted, (0..128).collect::<Vec<_>>());
        // The 16 hottest ranks land in more than one file.
        let files: std::collections::HashSet<u64> = p[..16].iter().map(|c| c / 32).collect();
        assert!(files.len() > 1);
    }
}
