//! A mail server as postmark runs it (Loris §V-C1): 40 000 files of 4 to
//! 28 KB in 10 subdirectories, then 80 000 transactions, each a whole-file
//! read or an append, paired with a create or a delete, in 4 KB I/O. The
//! measure is the transaction time (preparation excluded).

use super::{Fs, Params, Recorder, Report, Workload};
use crate::rng::Rng;
use std::io;
use std::path::{Path, PathBuf};

/// See the module documentation.
pub struct Mail {
    /// Settings.
    pub p: Params,
}

const LOW: u64 = 4 << 10;
const HIGH: u64 = 28 << 10;
const IO: usize = 4096;

fn path(dir: &Path, i: u64) -> PathBuf {
    dir.join(format!("s{}", i % 10)).join(format!("m{i}"))
}

impl Mail {
    fn files(&self) -> u64 {
        self.p.scaled(40_000, 10)
    }
}

impl Workload for Mail {
    fn name(&self) -> &'static str {
        "mail"
    }
    fn time_bounded(&self) -> bool {
        false
    }
    fn marks_per_op(&self) -> u64 {
        2
    }
    fn prepare(&self, fs: &dyn Fs, dir: &Path) -> io::Result<()> {
        for s in 0..10 {
            fs.create_dir_all(&dir.join(format!("s{s}")))?;
        }
        let mut r = Rng::new(self.p.seed);
        for i in 0..self.files() {
            fs.write_file(&path(dir, i), r.range(LOW, HIGH), IO, 0x4d)?;
        }
        Ok(())
    }
    fn run(&self, fs: &dyn Fs, dir: &Path) -> io::Result<Report> {
        // The mailboxes that exist now (an earlier run may have changed them).
        let mut live: Vec<u64> = Vec::new();
        for s in 0..10 {
            for (name, _) in fs.list(&dir.join(format!("s{s}")))? {
                if let Some(n) = name.strip_prefix('m').and_then(|n| n.parse().ok()) {
                    live.push(n);
                }
            }
        }
        live.sort_unstable();
        let mut next = live.last().map(|x| x + 1).unwrap_or(0);
        let mut r = Rng::new(self.p.seed ^ 0x55);
        let mut rec = Recorder::new(fs);
        let txns = self.p.scaled(80_000, 20);
        let t = fs.start();
        for _ in 0..txns {
            if live.is_empty() {
                break;
            }
            let f = path(dir, live[r.below(live.len() as u64) as usize]);
            if r.chance(0.5) {
                rec.op(|| Ok((fs.read_whole(&f, IO)?, 0)))?;
            } else {
                let n = r.range(LOW, HIGH);
                rec.op(|| Ok((0, fs.append(&f, n, IO, 0x4d)?)))?;
            }
            if r.chance(0.5) {
                let p = path(dir, next);
                let size = r.range(LOW, HIGH);
                rec.op(|| Ok((0, fs.write_file(&p, size, IO, 0x4d)?)))?;
                live.push(next);
                next += 1;
            } else {
                let i = r.below(live.len() as u64) as usize;
                let victim = path(dir, live.swap_remove(i));
                rec.op(|| fs.remove_file(&victim).map(|_| (0, 0)))?;
            }
        }
        let secs = fs.elapsed(t).as_secs_f64();
        let mut rep = rec.report(self.name(), secs, live.len() as u64);
        rep.txn_time_secs = Some(secs);
        rep.ops_per_sec = txns as f64 / secs;
        rep.ops = txns;
        Ok(rep)
    }
}
