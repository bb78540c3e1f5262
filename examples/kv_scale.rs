//! The state database at scale: records the namespace and statistics of
//! DIRS x FILES adopted files into a fresh state directory the way
//! reconciliation does (batches of BATCH names), then reopens it and lists
//! every directory, printing the process's memory and the database's size
//! after each phase. For comparing state backends (`benches/scale.sh`).
//!
//! cargo run --release --example kv_scale -- sled|fjall STATE_DIR [DIRS] [FILES] [BATCH]

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use tierfs_core::state::ns::{InodeRecord, Namespace, ROOT_INO};
use tierfs_core::state::{FjallKv, Kv, SledKv};
use tierfs_core::store::FileKind;
use tierfs_core::tier::{Placement, Tier};

fn status(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn du(p: &Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let m = e.metadata().expect("metadata");
            n += if m.is_dir() { du(&e.path()) } else { m.blocks() * 512 };
        }
    }
    n
}

fn report(phase: &str, t: Instant, dir: &Path, files: u64) {
    let size = du(dir);
    println!(
        "{phase}: {:.1} s, VmRSS {} MiB, VmHWM {} MiB, database {} MiB ({} bytes per file)",
        t.elapsed().as_secs_f64(),
        status("VmRSS:") / 1024,
        status("VmHWM:") / 1024,
        size >> 20,
        size / files.max(1)
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let backend = args.next().unwrap_or_default();
    let open = |dir: &Path| -> Arc<dyn Kv> {
        match backend.as_str() {
            "sled" => Arc::new(SledKv::open(dir).expect("open state")),
            _ => Arc::new(FjallKv::open(dir).expect("open state")),
        }
    };
    let Some(dir) = args.next() else {
        eprintln!("usage: kv_scale sled|fjall STATE_DIR [DIRS] [FILES] [BATCH]");
        std::process::exit(2);
    };
    let num = |a: Option<String>, d: u64| a.and_then(|s| s.parse().ok()).unwrap_or(d);
    let (dirs, files, batch) = (num(args.next(), 100), num(args.next(), 1000), num(args.next(), 1000));
    let dir = Path::new(&dir);
    let total = dirs * files;
    let t = Instant::now();
    {
        let kv = open(dir);
        let ns = Namespace::new(kv.clone());
        for d in 0..dirs {
            let dino = ns.alloc_ino().expect("ino");
            let mut b = ns.batch();
            b.link(ROOT_INO, &OsString::from(format!("d{d:04}")), dino, FileKind::Dir);
            b.put_record(dino, &InodeRecord::new(FileKind::Dir, Placement::On(Tier::Ssd)));
            ns.commit(b, false).expect("commit");
            let mut b = ns.batch();
            for f in 0..files {
                let ino = ns.alloc_ino().expect("ino");
                b.link(dino, &OsString::from(format!("file-{f:07}.dat")), ino, FileKind::File);
                b.put_record(ino, &InodeRecord::new(FileKind::File, Placement::On(Tier::Hdd)));
                if (f + 1) % batch == 0 {
                    ns.commit(std::mem::take(&mut b), false).expect("commit");
                }
            }
            ns.commit(b, false).expect("commit");
        }
        kv.flush().expect("flush");
        report("adopt", t, dir, total);
    }
    let t = Instant::now();
    let kv = open(dir);
    let ns = Namespace::new(kv);
    report("reopen", t, dir, total);
    let t = Instant::now();
    let mut seen = 0;
    for (_, d) in ns.children(ROOT_INO).expect("root").into_iter().map(|d| (d.name, d.ino)) {
        for c in ns.children(d).expect("list") {
            seen += u64::from(ns.record(c.ino).expect("record").is_some());
        }
    }
    assert_eq!(seen, total);
    report("list", t, dir, total);
}
