//! Writes statistics for N files into a state directory, as a daemon with
//! N tracked files would have left them; for the memory benchmark.
//!
//! cargo run --release --example seed_stats -- STATE_DIR [N]

use std::sync::Arc;
use tierfs_core::state::{FjallKv, Kv};
use tierfs_core::stats::{FileStats, Residence, Stats, StatsStore, DEFAULT_AGING};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: seed_stats STATE_DIR [N]");
        std::process::exit(2);
    };
    let n: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let kv: Arc<dyn Kv> = Arc::new(FjallKv::open(std::path::Path::new(&dir)).expect("open state"));
    let store = StatsStore::new(kv.clone());
    let mut done = 0;
    while done < n {
        let mut s = Stats::new(DEFAULT_AGING);
        for ino in done..(done + 100_000).min(n) {
            let residence = if ino % 4 == 0 { Residence::Ssd } else { Residence::Hdd };
            let f = FileStats {
                counter: (ino % 9973) as u32,
                seq: ino,
                residence,
                size: 4096,
                reads: 3,
                ..FileStats::default()
            };
            s.insert(ino + 1_000_000, f);
        }
        store.flush(&mut s).expect("write statistics");
        done = (done + 100_000).min(n);
    }
    kv.flush().expect("flush");
    println!("{n} files");
}
