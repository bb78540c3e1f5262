//! `tierfs migrate`: run every directory's policy once now (autotier's
//! `oneshot`), printing what moves and why; `--dry-run` only prints.

use crate::args::MigrateArgs;
use crate::stats::{ask, resolve_mount};
use anyhow::{bail, Result};
use std::process::ExitCode;
use tierfs_core::config::format_size;
use tierfs_core::report::{Request, Response};

pub fn run(a: &MigrateArgs) -> Result<ExitCode> {
    let mnt = resolve_mount(a.mountpoint.as_deref())?;
    let moves = match ask(&mnt, &Request::Plan { dry_run: a.dry_run })? {
        Response::Plan(m) => m,
        other => bail!("unexpected answer: {other:?}"),
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&moves)?);
        return Ok(ExitCode::SUCCESS);
    }
    for m in &moves {
        let path = m.path.clone().unwrap_or_else(|| format!("(inode {})", m.ino));
        println!("{:<9} {}  {}  ({})", m.action, path, format_size(m.bytes), m.reason);
    }
    let bytes: u64 = moves.iter().map(|m| m.bytes).sum();
    let what = if a.dry_run { "would move (dry run: nothing moved)" } else { "queued for the migrator" };
    println!("{} files, {} {what}", moves.len(), format_size(bytes));
    Ok(ExitCode::SUCCESS)
}
