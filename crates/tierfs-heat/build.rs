//! Compiles the eBPF program (src/heat.bpf.c) with clang into OUT_DIR.
//! Without clang the crate is built without it and the mount falls back to
//! counting opens (the log says so); scripts/setup.sh installs clang.
//! `TIERFS_CLANG` names another compiler.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=src/heat.bpf.c");
    println!("cargo:rerun-if-env-changed=TIERFS_CLANG");
    println!("cargo::rustc-check-cfg=cfg(tierfs_bpf)");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("heat.bpf.o");
    let clang = std::env::var("TIERFS_CLANG").unwrap_or_else(|_| "clang".into());
    let status = Command::new(&clang)
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror", "-c", "src/heat.bpf.c", "-o"])
        .arg(&out)
        .status();
    match status {
        Ok(s) if s.success() => println!("cargo:rustc-cfg=tierfs_bpf"),
        // The program is part of the source: a compiler that rejects it is
        // a bug to fix, not a reason to build without it.
        Ok(s) => panic!("{clang} could not compile src/heat.bpf.c ({s})"),
        Err(e) => {
            // Built again once clang may be there (scripts/setup.sh adds it;
            // a new PATH may find it).
            println!("cargo:rerun-if-env-changed=PATH");
            println!("cargo:rerun-if-changed=/usr/bin/clang");
            println!(
                "cargo:warning=tierfs-heat: {clang} not found ({e}): built without the eBPF heat source; \
                 passthrough files are counted per open (run scripts/setup.sh)"
            )
        }
    }
}
