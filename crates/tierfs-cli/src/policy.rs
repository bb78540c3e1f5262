//! `tierfs policy`: the per-directory settings as commands. `set`, `unset`
//! and `pin` are the `user.tierfs.*` extended attributes; `show` asks the
//! daemon for the policy tree.

use crate::args::{PolicyArgs, PolicyCmd};
use crate::stats::{ask, mount_of, resolve_mount};
use anyhow::{bail, Result};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::ExitCode;
use tierfs_core::config::{format_duration, format_size};
use tierfs_core::policy::PolicyKind;
use tierfs_core::report::{PinReport, Request, Response};
use tierfs_core::settings::{Key, Settings};

fn explain(key: Key, path: &Path, e: std::io::Error) -> anyhow::Error {
    let what = match e.raw_os_error() {
        Some(libc::EPERM) => "only the owner of a directory or root may change its settings".to_string(),
        Some(libc::EINVAL) => format!("the value was rejected (the daemon's log says why); {e}"),
        Some(libc::ENODATA) => "not set there".to_string(),
        _ => e.to_string(),
    };
    anyhow::anyhow!("{} on {}: {what}", key.name(), path.display())
}

fn set(path: &Path, key: Key, value: &str) -> Result<()> {
    // Check locally first, for a clear message.
    Settings::default().set(key, value.as_bytes()).map_err(|e| anyhow::anyhow!("{e}"))?;
    mount_of(path)?;
    let p = CString::new(path.as_os_str().as_bytes())?;
    let n = CString::new(key.name())?;
    // SAFETY: valid NUL-terminated strings and a value buffer of its length.
    let r = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if r != 0 {
        return Err(explain(key, path, std::io::Error::last_os_error()));
    }
    Ok(())
}

fn unset(path: &Path, key: Key) -> Result<()> {
    mount_of(path)?;
    let p = CString::new(path.as_os_str().as_bytes())?;
    let n = CString::new(key.name())?;
    // SAFETY: valid NUL-terminated strings.
    if unsafe { libc::removexattr(p.as_ptr(), n.as_ptr()) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENODATA) {
            return Err(explain(key, path, e));
        }
    }
    Ok(())
}

/// `TIER<TAB>STATE<TAB>PATH` per pin (the path last: it may hold tabs).
fn pin_lines(mnt: &Path, pins: &[PinReport]) -> String {
    let mut o = String::new();
    for p in pins {
        let state = match (&p.placement, p.tier.as_str()) {
            _ if p.directory => "dir",
            (Some(at), "ssd") if at.contains("ssd") => "there",
            (Some(at), "hdd") if at == "hdd" => "there",
            _ => "pending",
        };
        let path = match &p.path {
            Some(rel) => {
                let full = mnt.join(rel.trim_start_matches('/'));
                let slash = if p.directory && rel != "/" { "/" } else { "" };
                format!("{}{slash}", full.display())
            }
            None => format!("(inode {}, no name)", p.ino),
        };
        o += &format!("{}\t{state}\t{path}\n", p.tier);
    }
    o
}

pub fn run(a: &PolicyArgs) -> Result<ExitCode> {
    match &a.cmd {
        PolicyCmd::Set { path, policy, sieve, interval } => {
            if PolicyKind::parse(policy).is_none() {
                bail!(
                    "unknown policy {policy:?} (one of: {})",
                    PolicyKind::ALL.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
                );
            }
            set(path, Key::Policy, policy)?;
            if let Some(s) = sieve {
                set(path, Key::Sieve, s)?;
            }
            if let Some(i) = interval {
                set(path, Key::Interval, i)?;
            }
        }
        PolicyCmd::Unset { path } => {
            for k in [Key::Policy, Key::Sieve, Key::Interval] {
                unset(path, k)?;
            }
        }
        PolicyCmd::Pin { path, tier } => match tier.as_str() {
            "none" => unset(path, Key::Pin)?,
            t => set(path, Key::Pin, t)?,
        },
        PolicyCmd::Pins { mountpoint, json } => {
            let mnt = resolve_mount(mountpoint.as_deref())?;
            let Response::Pins(pins) = ask(&mnt, &Request::Pins)? else { bail!("unexpected answer") };
            if *json {
                println!("{}", serde_json::to_string_pretty(&pins)?);
            } else {
                print!("{}", pin_lines(&mnt, &pins));
            }
        }
        PolicyCmd::Show { mountpoint, json } => {
            let mnt = resolve_mount(mountpoint.as_deref())?;
            let Response::Groups(groups) = ask(&mnt, &Request::Groups)? else { bail!("unexpected answer") };
            if *json {
                println!("{}", serde_json::to_string_pretty(&groups)?);
                return Ok(ExitCode::SUCCESS);
            }
            println!("policy tree of {}", mnt.display());
            for g in &groups {
                let depth = g.dir.matches('/').count().saturating_sub(usize::from(g.dir == "/"));
                let own = if g.own.is_empty() {
                    "(mount options)".to_string()
                } else {
                    g.own
                        .iter()
                        .map(|(k, v)| format!("{}={v}", k.trim_start_matches("user.tierfs.")))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                println!("{}{}  {}", "  ".repeat(depth), g.dir, own);
                println!(
                    "{}  in force: {} (from {}), sieve {}, interval {}{}; {} files ({} ssd, {} hdd, {} cached)",
                    "  ".repeat(depth),
                    g.policy,
                    g.policy_from,
                    format_size(g.sieve),
                    format_duration(std::time::Duration::from_secs_f64(g.interval_secs)),
                    g.pin.as_ref().map(|p| format!(", pinned to {p}")).unwrap_or_default(),
                    g.files,
                    g.files_ssd,
                    g.files_hdd,
                    g.files_cached
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_print_tier_state_and_path_with_directories_marked() {
        let pin = |path: &str, directory, tier: &str, placement: Option<&str>| PinReport {
            ino: 7,
            path: Some(path.into()),
            directory,
            tier: tier.into(),
            placement: placement.map(str::to_string),
        };
        let pins = [
            pin("/", true, "hdd", None),
            pin("/d", true, "ssd", None),
            pin("/d/a b", false, "ssd", Some("hdd+ssd-copy")),
            pin("/f", false, "hdd", Some("hdd+ssd-copy")),
            pin("/g", false, "hdd", Some("hdd")),
            PinReport { path: None, ..pin("", false, "ssd", Some("hdd")) },
        ];
        assert_eq!(
            pin_lines(Path::new("/mnt/t"), &pins),
            "hdd\tdir\t/mnt/t/\nssd\tdir\t/mnt/t/d/\nssd\tthere\t/mnt/t/d/a b\nhdd\tpending\t/mnt/t/f\n\
             hdd\tthere\t/mnt/t/g\nssd\tpending\t(inode 7, no name)\n"
        );
    }
}
