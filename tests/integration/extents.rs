//! Sub-file extents through a real mount: the hot chunks of a big file
//! read at random end up on the SSD and serve most reads, with the bytes
//! always right; split files survive a remount.

use crate::harness::{stats_json, tierfs, Area, Mounted};
use std::fs;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};
use tierfs_bench::rng::{Rng, Zipf};

const CHUNK: u64 = 64 << 10;

/// The byte at `off` of the test file.
fn byte_at(off: u64) -> u8 {
    (off / 4096 * 7 + off % 251) as u8
}

/// Writes a file of `size` bytes of [`byte_at`] directly in a backing
/// directory (adopted at mount), and syncs it.
fn make_file(path: &Path, size: u64) {
    let mut f = fs::File::create(path).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < size {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = byte_at(off + i as u64);
        }
        f.write_all(&buf).unwrap();
        off += buf.len() as u64;
    }
    f.sync_all().unwrap();
}

/// `tierfs stats --file` as JSON: (read requests, of which served by the SSD).
fn split_reads(path: &Path) -> (u64, u64, serde_json::Value) {
    let o = tierfs(&["stats", "--file", path.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stats --file: {e}: {}", String::from_utf8_lossy(&o.stderr)));
    let s = &v["split"];
    (s["reads"].as_u64().unwrap_or(0), s["ssd_reads"].as_u64().unwrap_or(0), v)
}

/// Reads `n` random 8-KiB requests with Zipf locality over the file's
/// chunks (a fixed permutation, so hot chunks are spread), checking every
/// byte.
fn zipf_reads(f: &fs::File, size: u64, rng: &mut Rng, zipf: &Zipf, n: usize) {
    let chunks = size / CHUNK;
    let mut buf = vec![0u8; 8192];
    for _ in 0..n {
        let rank = zipf.sample(rng) as u64;
        // A permutation of the chunk numbers (odd multiplier mod a power of two).
        let chunk = rank.wrapping_mul(0x9E37_79B9_7F4A_7C15 | 1) % chunks;
        let off = chunk * CHUNK + rng.below(CHUNK / 8192) * 8192;
        f.read_exact_at(&mut buf, off).unwrap();
        if let Some(i) = (0..buf.len()).find(|&i| buf[i] != byte_at(off + i as u64)) {
            panic!("byte {} of the file is {:#x}, want {:#x}", off + i as u64, buf[i], byte_at(off + i as u64));
        }
    }
}

#[test]
fn hot_chunks_of_a_big_file_read_at_random_serve_most_reads_from_the_ssd() {
    let size: u64 = std::env::var("TIERFS_EXTENT_FILE_MB").ok().and_then(|s| s.parse().ok()).unwrap_or(1024) << 20;
    let area = Area::new();
    make_file(&area.hdd().join("big"), size);
    let m = Mounted::new(
        &area,
        &[
            "--policy",
            "hystor",
            "--io-mode",
            "userspace",
            "--ssd-capacity",
            "96M",
            "--chunk-period",
            "1s",
            "--migrate-rate",
            "0",
        ],
    );
    let path = m.p("big");
    let f = fs::File::open(&path).unwrap();
    let mut rng = Rng::new(42);
    let zipf = Zipf::new((size / CHUNK) as usize, 1.2);
    // Warm-up: the monitor counts, chooses every second, the migrator copies.
    let warm = Instant::now();
    let mut ready = false;
    while warm.elapsed() < Duration::from_secs(60) {
        zipf_reads(&f, size, &mut rng, &zipf, 5000);
        let v = stats_json(&m.mnt);
        let rm = &v["remap"];
        if rm["used_bytes"].as_u64().unwrap_or(0) > 0 && rm["queued"].as_u64() == Some(0) {
            ready = true;
            break;
        }
    }
    assert!(ready, "no chunks reached the SSD within a minute: {}", m.log_text());
    let (r0, s0, _) = split_reads(&path);
    zipf_reads(&f, size, &mut rng, &zipf, 20_000);
    let (r1, s1, v) = split_reads(&path);
    let ratio = (s1 - s0) as f64 / (r1 - r0).max(1) as f64;
    let split = &v["split"];
    eprintln!(
        "extents: {} MiB file, {} chunks ({} MiB) on the SSD, {:.1} % of {} reads after warm-up served by the SSD",
        size >> 20,
        split["ssd_chunks"],
        split["ssd_bytes"].as_u64().unwrap_or(0) >> 20,
        ratio * 100.0,
        r1 - r0
    );
    assert!(r1 - r0 >= 19_000, "the reads were counted: {r0} -> {r1}");
    assert!(ratio >= 0.8, "only {:.1} % of reads served by the SSD: {split}", ratio * 100.0);
    // The human view says the same.
    let text = String::from_utf8(tierfs(&["stats", "--file", path.to_str().unwrap()]).stdout).unwrap();
    assert!(text.contains("SSD hit ratio") && text.contains("on the SSD"), "{text}");
    let all = String::from_utf8(tierfs(&["stats", m.mnt.to_str().unwrap()]).stdout).unwrap();
    assert!(all.contains("sub-file extents: 1 split files"), "{all}");
    drop(f);
    // A write through a hot chunk, a remount: the bytes and the chunks stay.
    let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    let hot = 0u64.wrapping_mul(0x9E37_79B9_7F4A_7C15 | 1) % (size / CHUNK) * CHUNK;
    f.write_all_at(b"written on a chunk", hot + 100).unwrap();
    drop(f);
    m.unmount();
    let m = Mounted::new(&area, &["--policy", "hystor", "--io-mode", "userspace", "--ssd-capacity", "96M"]);
    let v = stats_json(&m.mnt);
    assert!(v["remap"]["split_files"].as_u64() == Some(1), "still split after a remount: {}", v["remap"]);
    let mut got = vec![0u8; 18];
    fs::File::open(m.p("big")).unwrap().read_exact_at(&mut got, hot + 100).unwrap();
    assert_eq!(&got, b"written on a chunk");
    m.unmount();
}
