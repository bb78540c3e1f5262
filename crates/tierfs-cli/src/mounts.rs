//! Reading /proc/self/mountinfo.

use std::path::{Path, PathBuf};

/// One mount.
#[derive(Debug, Clone)]
pub struct MountEntry {
    pub target: PathBuf,
    pub fstype: String,
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v as char);
                i += 4;
                continue;
            }
        }
        out.push(b[i] as char);
        i += 1;
    }
    out
}

/// All mounts of this mount namespace.
pub fn mounts() -> Vec<MountEntry> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            Some(MountEntry { target: PathBuf::from(unescape(f.get(4)?)), fstype: f.get(sep + 1)?.to_string() })
        })
        .collect()
}

/// The type of the file system mounted exactly at `p`, if any.
pub fn mounted_at(p: &Path) -> Option<String> {
    mounts().into_iter().rev().find(|m| m.target == p).map(|m| m.fstype)
}
