//! How much `cachestat(2)` (Linux 6.5+) could tell a heat source, measured
//! on the heat issue's scenario: a 64 MiB file read 20 000 times at random
//! in 4 KiB requests, 90 % of them in its first 2 MiB (32 of its 1 024
//! chunks of 64 KiB), over `SECS` seconds, while a sampler asks cachestat
//! about every chunk every 100 ms and counts the pages that became resident
//! since its last look (all a sampler of the page cache can see of reads:
//! a page read again while resident changes nothing).
//!
//! Prints the sampler's cost and how well its ranking finds the hot chunks
//! (how many of its top 32 are the real hot ones, and the share of the
//! requests its top 32 chunks get), against the requests themselves, which
//! is what the eBPF heat source counts.
//!
//! With `warm` the file stays in the page cache from its writing, as a
//! file in use does: then no read makes a page resident.
//!
//! cargo run --release --example heat_cachestat -- DIR [SECS] [warm]

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use tierfs_bench::rng::Rng;

const SIZE: u64 = 64 << 20;
const CHUNK: u64 = 64 << 10;
const HOT: u64 = 32;
const READS: u64 = 20_000;

/// `struct cachestat_range` and `struct cachestat` of the kernel's uapi.
#[repr(C)]
struct Range {
    off: u64,
    len: u64,
}
#[repr(C)]
#[derive(Default)]
struct Stat {
    cache: u64,
    dirty: u64,
    writeback: u64,
    evicted: u64,
    recently_evicted: u64,
}

/// cachestat's number on x86_64 and aarch64 (the unified table).
const SYS_CACHESTAT: libc::c_long = 451;

fn cachestat(fd: i32, off: u64, len: u64) -> std::io::Result<Stat> {
    let r = Range { off, len };
    let mut st = Stat::default();
    // SAFETY: valid pointers to the kernel's structures for the call; flags 0.
    let rc = unsafe { libc::syscall(SYS_CACHESTAT, fd, &r as *const Range, &mut st as *mut Stat, 0u32) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: heat_cachestat DIR [SECS] [warm]");
        std::process::exit(2);
    };
    let secs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(10);
    let warm = args.next().as_deref() == Some("warm");
    let path = std::path::Path::new(&dir).join("heat-cachestat.dat");
    std::fs::write(&path, vec![0x5au8; SIZE as usize]).expect("write the file");
    let f = std::fs::File::open(&path).expect("open");
    let fd = f.as_raw_fd();
    f.sync_all().expect("sync");
    if !warm {
        // The page cache starts cold, as after a reboot or under pressure.
        // SAFETY: fd is open.
        unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
    let chunks = (SIZE / CHUNK) as usize;
    let mut truth = vec![0u64; chunks];
    let mut seen = vec![0u64; chunks];
    // What is resident before the reads begin.
    let mut resident: Vec<u64> =
        (0..chunks).map(|c| cachestat(fd, c as u64 * CHUNK, CHUNK).map_or(0, |st| st.cache)).collect();
    let reader = {
        let f = f.try_clone().expect("dup");
        std::thread::spawn(move || {
            use std::os::unix::fs::FileExt;
            let mut rng = Rng::new(1);
            let mut buf = vec![0u8; 4096];
            let mut counts = vec![0u64; chunks];
            let pace = Duration::from_secs(secs) / READS as u32;
            let start = Instant::now();
            for i in 0..READS {
                let off = if rng.below(10) < 9 { rng.below(HOT * 16) * 4096 } else { rng.below(SIZE / 4096) * 4096 };
                f.read_exact_at(&mut buf, off).expect("read");
                counts[(off / CHUNK) as usize] += 1;
                if let Some(wait) = (pace * (i as u32 + 1)).checked_sub(start.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
            counts
        })
    };
    let mut calls = 0u64;
    let mut spent = Duration::ZERO;
    let mut samples = 0u64;
    while !reader.is_finished() {
        std::thread::sleep(Duration::from_millis(100));
        let t = Instant::now();
        for (c, r) in resident.iter_mut().enumerate() {
            let st = cachestat(fd, c as u64 * CHUNK, CHUNK).expect("cachestat");
            calls += 1;
            seen[c] += st.cache.saturating_sub(*r);
            *r = st.cache;
        }
        spent += t.elapsed();
        samples += 1;
    }
    for (t, n) in truth.iter_mut().zip(reader.join().expect("reader")) {
        *t = n;
    }
    // Ties are broken at random: a sampler that saw nothing knows nothing.
    let mut by_seen: Vec<usize> = (0..chunks).collect();
    let mut shuffle = Rng::new(7);
    for i in (1..by_seen.len()).rev() {
        by_seen.swap(i, shuffle.below(i as u64 + 1) as usize);
    }
    by_seen.sort_by_key(|&c| std::cmp::Reverse(seen[c]));
    let top = &by_seen[..HOT as usize];
    let hot_found = top.iter().filter(|&&c| (c as u64) < HOT).count();
    let total: u64 = truth.iter().sum();
    let covered: u64 = top.iter().map(|&c| truth[c]).sum();
    let ideal: u64 = truth[..HOT as usize].iter().sum();
    let tied = seen.iter().filter(|&&s| s == seen[by_seen[0]]).count();
    println!(
        "cachestat sampler, {READS} reads over {secs} s of a {} MiB file, {chunks} chunks, page cache {}:",
        SIZE >> 20,
        if warm { "warm" } else { "cold" }
    );
    println!(
        "  cost: {samples} samples, {calls} calls, {:.1} us a call, {:.2} % of one core",
        spent.as_secs_f64() * 1e6 / calls.max(1) as f64,
        spent.as_secs_f64() * 100.0 / (samples as f64 * 0.1)
    );
    println!(
        "  its top {HOT} chunks: {hot_found} of the {HOT} hot ones; they got {:.1} % of the requests (the hot ones: {:.1} %); {tied} chunks tie for first",
        covered as f64 * 100.0 / total as f64,
        ideal as f64 * 100.0 / total as f64
    );
    std::fs::remove_file(&path).expect("remove");
}
