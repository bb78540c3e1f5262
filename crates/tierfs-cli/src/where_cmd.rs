//! `tierfs where`: which tier each file is on, one line per file
//! (`TIER<TAB>PATH`, the tier as `user.tierfs.placement` says it: `ssd`,
//! `hdd`, `hdd+ssd-copy`, ...), for scripts, as autotier's `which-tier`.

use crate::args::WhereArgs;
use crate::stats::mount_of;
use anyhow::Result;
use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::ExitCode;

/// The placement attribute of `path` (not following a symbolic link).
fn placement(path: &Path) -> std::io::Result<String> {
    let p = CString::new(path.as_os_str().as_bytes())?;
    let mut buf = [0u8; 256];
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    let n =
        unsafe { libc::lgetxattr(p.as_ptr(), c"user.tierfs.placement".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(String::from_utf8_lossy(&buf[..n as usize]).into_owned())
}

/// Prints the line of each regular file at or below `path` (below only
/// with `recursive`); false if something could not be told.
fn visit(path: &Path, recursive: bool, out: &mut dyn Write) -> Result<bool> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("tierfs where: {}: {e}", path.display());
            return Ok(false);
        }
    };
    if meta.is_dir() {
        if !recursive {
            eprintln!("tierfs where: {}: a directory (-r lists the files below it)", path.display());
            return Ok(false);
        }
        let listed = std::fs::read_dir(path).and_then(|rd| rd.map(|e| e.map(|e| e.path())).collect());
        let mut entries: Vec<std::path::PathBuf> = match listed {
            Ok(e) => e,
            Err(e) => {
                eprintln!("tierfs where: {}: {e}", path.display());
                return Ok(false);
            }
        };
        entries.sort();
        let mut ok = true;
        for e in entries {
            ok &= visit(&e, true, out)?;
        }
        return Ok(ok);
    }
    if !meta.is_file() {
        // Symbolic links, devices, sockets: no data on a tier.
        return Ok(true);
    }
    match placement(path) {
        Ok(t) => {
            writeln!(out, "{t}\t{}", path.display())?;
            Ok(true)
        }
        Err(e) => {
            eprintln!("tierfs where: {}: {e}", path.display());
            Ok(false)
        }
    }
}

pub fn run(a: &WhereArgs) -> Result<ExitCode> {
    for p in &a.paths {
        mount_of(p)?;
    }
    let mut out = std::io::stdout().lock();
    let mut ok = true;
    for p in &a.paths {
        ok &= visit(p, a.recursive, &mut out)?;
    }
    out.flush()?;
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
