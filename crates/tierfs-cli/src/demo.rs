//! `tierfs demo`: the whole life of a mount on two fresh directories.

use crate::args::DemoArgs;
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::{Command, ExitCode};
use tierfs_core::report::{ask, Request, Response};

fn tier_of(ssd: &Path, hdd: &Path, rel: &str) -> &'static str {
    match (ssd.join(rel).exists(), hdd.join(rel).exists()) {
        (true, true) => "HDD + SSD copy",
        (true, false) => "SSD",
        (false, true) => "HDD",
        (false, false) => "nowhere?",
    }
}

pub fn run(a: &DemoArgs) -> Result<ExitCode> {
    let exe = std::env::current_exe().context("cannot find the tierfs executable")?;
    let base = crate::mounts::mounts();
    let dir = tierfs_fuse::runtime::absolute(&a.dir);
    let (ssd, hdd, mnt) = (dir.join("ssd"), dir.join("hdd"), dir.join("mnt"));
    if base.iter().any(|m| m.target == mnt) {
        bail!("{} is still mounted; run: tierfs umount {}", mnt.display(), mnt.display());
    }
    for d in [&ssd, &hdd, &mnt] {
        if d.exists() {
            std::fs::remove_dir_all(d).with_context(|| format!("cannot reset {}", d.display()))?;
        }
        std::fs::create_dir_all(d)?;
    }
    println!("tierfs demo in {}", dir.display());
    println!("  SSD tier: {}\n  HDD tier: {}\n  mount:    {}", ssd.display(), hdd.display(), mnt.display());
    let st = Command::new(&exe).arg("mount").arg(&ssd).arg(&hdd).arg(&mnt).arg("--daemon").status()?;
    if !st.success() {
        bail!("mount failed");
    }
    let result = (|| -> Result<()> {
        std::fs::create_dir_all(mnt.join("docs/reports"))?;
        let files = [
            ("docs/readme.txt", b"tierfs keeps hot files on the SSD\n".repeat(10)),
            ("docs/reports/q3.csv", b"quarter,revenue\nq3,42\n".repeat(100)),
            ("big.bin", vec![7u8; 4 << 20]),
        ];
        println!("\nwriting through the mount:");
        for (name, data) in &files {
            std::fs::write(mnt.join(name), data)?;
            println!("  wrote {name:<22} {:>8} bytes", data.len());
        }
        println!("\nreading back:");
        for (name, data) in &files {
            let back = std::fs::read(mnt.join(name))?;
            let ok = if &back == data { "ok" } else { "MISMATCH" };
            println!("  read  {name:<22} {:>8} bytes  {ok}", back.len());
            if &back != data {
                bail!("{name} read back different data");
            }
        }
        // The reads were served by the HDD, where new files start; the
        // default policy (dynamic hot-DST) moves the small ones to the SSD
        // in the background. Wait for those moves.
        let socket = tierfs_fuse::runtime::socket_path(&mnt);
        let t = std::time::Instant::now();
        let mut moved = 0;
        while t.elapsed() < std::time::Duration::from_secs(10) {
            if let Ok(Response::Status(s)) = ask(&socket, &Request::Status { top: 0 }) {
                moved = s.migrations.promotions;
                if s.migrations.queued == 0 && moved >= 2 {
                    break;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        println!("\nwhere the files are (new files start on the HDD; {moved} promoted after being read):");
        for (name, data) in &files {
            let why = if data.len() > 1 << 20 { "  (larger than the 1 MiB sieve: never promoted)" } else { "" };
            println!("  {name:<28} {}{why}", tier_of(&ssd, &hdd, name));
        }
        Ok(())
    })();
    let st = Command::new(&exe).arg("umount").arg(&mnt).status()?;
    result?;
    if !st.success() {
        bail!("unmount failed");
    }
    println!("\nunmounted; the files stay in the backing directories:");
    for (label, d) in [("SSD", &ssd), ("HDD", &hdd)] {
        let mut names = Vec::new();
        walk(d, d, &mut names);
        println!("  {label}: {}", if names.is_empty() { "(empty)".to_string() } else { names.join(", ") });
    }
    Ok(ExitCode::SUCCESS)
}

fn walk(root: &Path, d: &Path, out: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(d) else { return };
    let mut entries: Vec<_> = rd.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        if e.file_name() == ".tierfs" {
            continue;
        }
        let p = e.path();
        if p.is_dir() {
            walk(root, &p, out);
        } else if let Ok(r) = p.strip_prefix(root) {
            out.push(r.display().to_string());
        }
    }
}
