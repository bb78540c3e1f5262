//! A metadata loop for benchmarks: N times create a file, stat it, unlink
//! it, in DIR. Prints operations (create + stat + unlink = 3) per second.
//!
//! cargo run --release --example metaloop -- DIR [N]

use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: metaloop DIR [N]");
        std::process::exit(2);
    };
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).expect("create dir");
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
