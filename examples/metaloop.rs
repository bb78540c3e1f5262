//! Metadata loops for benchmarks, in DIR:
//!
//! - `metaloop DIR [N]`: N times create a file, stat it, unlink it; prints
//!   operations (create + stat + unlink = 3) per second.
//! - `metaloop DIR N stat`: makes 1 000 files, then stats them in turn N
//!   times in all (names and attributes a cache may hold); prints stats per
//!   second, and removes the files.
//!
//! cargo run --release --example metaloop -- DIR [N] [stat]

use std::time::Instant;

const STAT_FILES: usize = 1000;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: metaloop DIR [N] [stat]");
        std::process::exit(2);
    };
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let stat_only = args.next().as_deref() == Some("stat");
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).expect("create dir");
    if stat_only {
        let names: Vec<_> = (0..STAT_FILES).map(|i| dir.join(format!("s{i}"))).collect();
        for p in &names {
            std::fs::write(p, b"x").expect("create");
        }
        let start = Instant::now();
        for i in 0..n {
            std::fs::symlink_metadata(&names[i % STAT_FILES]).expect("stat");
        }
        let secs = start.elapsed().as_secs_f64();
        for p in &names {
            std::fs::remove_file(p).expect("unlink");
        }
        println!("{:.0}", n as f64 / secs);
        return;
    }
    let start = Instant::now();
    for i in 0..n {
        let p = dir.join(format!("m{i}"));
        drop(std::fs::File::create(&p).expect("create"));
        std::fs::symlink_metadata(&p).expect("stat");
        std::fs::remove_file(&p).expect("unlink");
    }
    let secs = start.elapsed().as_secs_f64();
    println!("{:.0}", (3 * n) as f64 / secs);
}
