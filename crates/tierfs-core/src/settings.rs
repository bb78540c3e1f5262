//! Per-directory (and per-file) settings: the policy, its sieve and
//! interval, and pins. Stored as JSON under the inode in the state
//! database (so they survive remounts and move with a renamed directory),
//! shown and changed through `user.tierfs.*` extended attributes.
//!
//! A directory's setting applies to everything below it until a deeper
//! directory overrides it; the mount options are the root's defaults.

use crate::config::{format_duration, format_size, parse_duration, parse_size};
use crate::error::{Error, Result};
use crate::policy::PolicyKind;
use crate::tier::Tier;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A share of the SSD in percent, `0` to `100`, with or without `%`.
pub fn parse_percent(v: &str) -> std::result::Result<u8, String> {
    let n: u8 = v
        .strip_suffix('%')
        .unwrap_or(v)
        .trim()
        .parse()
        .map_err(|_| format!("{v:?}: a percentage of the SSD, 0 to 100"))?;
    if n > 100 {
        return Err(format!("{v:?}: a percentage of the SSD, 0 to 100"));
    }
    Ok(n)
}

/// `measured`'s δ: a decimal from 0.01 to 100 (`1`, `0.5`), kept in
/// hundredths.
pub fn parse_delta(v: &str) -> std::result::Result<u16, String> {
    let bad =
        || format!("{v:?}: δ is a decimal from 0.01 to 100 (1 moves a file when the other tier costs under half)");
    let x: f64 = v.trim().parse().map_err(|_| bad())?;
    let h = (x * 100.0).round();
    if !(1.0..=10_000.0).contains(&h) {
        return Err(bad());
    }
    Ok(h as u16)
}

/// Shows δ as it was given (`1`, `0.5`, `0.25`).
pub fn format_delta(h: u16) -> String {
    let s = format!("{}.{:02}", h / 100, h % 100);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The xattr namespace tierfs owns.
pub const PREFIX: &str = "user.tierfs.";

/// One settable name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    /// `user.tierfs.policy` (directories).
    Policy,
    /// `user.tierfs.policy.source` (read-only: which directory set the policy).
    PolicySource,
    /// `user.tierfs.sieve` (directories).
    Sieve,
    /// `user.tierfs.interval` (directories).
    Interval,
    /// `user.tierfs.chunk` (directories): chunk size of new split files.
    Chunk,
    /// `user.tierfs.write-back` (directories): the write-back area of
    /// the subtree's files, percent of the SSD capacity (0: none).
    WriteBack,
    /// `user.tierfs.delta` (directories): how much cheaper the other tier
    /// must be before `measured` moves a file (δ, a decimal above 0).
    Delta,
    /// `user.tierfs.pin` (files and directories).
    Pin,
    /// `user.tierfs.quiet` (directories): `on` or `off`, whether the quiet
    /// HDD mode of a `--quiet-hdd` mount applies to the subtree.
    Quiet,
    /// `user.tierfs.placement` (read-only: where a file's data is now,
    /// `ssd`, `hdd` or `hdd+ssd-copy`).
    Placement,
}

impl Key {
    /// Every key, for listing.
    pub const ALL: [Key; 10] = [
        Key::Policy,
        Key::PolicySource,
        Key::Sieve,
        Key::Interval,
        Key::Chunk,
        Key::WriteBack,
        Key::Delta,
        Key::Pin,
        Key::Quiet,
        Key::Placement,
    ];

    /// The full xattr name.
    pub fn name(self) -> &'static str {
        match self {
            Key::Policy => "user.tierfs.policy",
            Key::PolicySource => "user.tierfs.policy.source",
            Key::Sieve => "user.tierfs.sieve",
            Key::Interval => "user.tierfs.interval",
            Key::Chunk => "user.tierfs.chunk",
            Key::WriteBack => "user.tierfs.write-back",
            Key::Delta => "user.tierfs.delta",
            Key::Pin => "user.tierfs.pin",
            Key::Quiet => "user.tierfs.quiet",
            Key::Placement => "user.tierfs.placement",
        }
    }

    /// The key of an xattr name; `Err` for an unknown `user.tierfs.*` name
    /// (so a typo is an error, not a stored attribute), `Ok(None)` for a
    /// name outside the namespace.
    pub fn parse(name: &[u8]) -> Result<Option<Key>> {
        if !name.starts_with(PREFIX.as_bytes()) {
            return Ok(None);
        }
        match Key::ALL.into_iter().find(|k| k.name().as_bytes() == name) {
            Some(k) => Ok(Some(k)),
            None => Err(Error::Invalid(format!(
                "unknown tierfs attribute {:?} (known: user.tierfs.policy, .sieve, .interval, .chunk, .write-back, .delta, .pin, .quiet, .placement)",
                String::from_utf8_lossy(name)
            ))),
        }
    }

    /// True for keys that only directories take.
    pub fn dirs_only(self) -> bool {
        matches!(self, Key::Policy | Key::Sieve | Key::Interval | Key::Chunk | Key::WriteBack | Key::Delta | Key::Quiet)
    }

    /// True for keys that only show what is (they cannot be set).
    pub fn read_only(self) -> bool {
        matches!(self, Key::PolicySource | Key::Placement)
    }
}

/// Settings set on one inode (all optional: unset means inherited).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// Architecture for this subtree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyKind>,
    /// Sieve for this subtree, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sieve: Option<u64>,
    /// Interval for this subtree, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_duration")]
    pub interval: Option<Duration>,
    /// Chunk size of new split files in this subtree, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk: Option<u64>,
    /// Write-back area of this subtree, percent of the SSD capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_back: Option<u8>,
    /// δ of `measured` in this subtree, hundredths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<u16>,
    /// Pin of this file or subtree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin: Option<Tier>,
    /// Whether the quiet HDD mode applies to this subtree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet: Option<bool>,
}

mod opt_duration {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_f64(d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.map(Duration::from_secs_f64))
    }
}

impl Settings {
    /// True if nothing is set.
    pub fn is_empty(&self) -> bool {
        *self == Settings::default()
    }

    /// True if this defines a policy group (anything but a file's own pin).
    pub fn defines_group(&self) -> bool {
        self.policy.is_some()
            || self.sieve.is_some()
            || self.interval.is_some()
            || self.chunk.is_some()
            || self.write_back.is_some()
            || self.delta.is_some()
            || self.pin.is_some()
            || self.quiet.is_some()
    }

    /// Encodes for the state database.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("settings serialise")
    }

    /// Decodes from the state database.
    pub fn decode(b: &[u8]) -> Result<Self> {
        serde_json::from_slice(b).map_err(|e| Error::Corrupt(format!("settings: {e}")))
    }

    /// The value of one key as an xattr would show it, if set here.
    pub fn get(&self, k: Key) -> Option<String> {
        match k {
            Key::Policy => self.policy.map(|p| p.name().to_string()),
            Key::Sieve => self.sieve.map(format_size),
            Key::Interval => self.interval.map(format_duration),
            Key::Chunk => self.chunk.map(format_size),
            Key::WriteBack => self.write_back.map(|p| format!("{p}%")),
            Key::Delta => self.delta.map(format_delta),
            Key::Pin => self.pin.map(|t| t.name().to_string()),
            Key::Quiet => self.quiet.map(|q| if q { "on" } else { "off" }.to_string()),
            Key::PolicySource | Key::Placement => None,
        }
    }

    /// Sets one key from an xattr value; EINVAL (with a message naming the
    /// value) if the value is bad, and nothing changes.
    pub fn set(&mut self, k: Key, value: &[u8]) -> Result<()> {
        let v = std::str::from_utf8(value)
            .map_err(|_| Error::Invalid(format!("{}: value is not text", k.name())))?
            .trim_end_matches(['\n', '\0'])
            .trim();
        let bad = |why: String| Error::Invalid(format!("{}: {why}", k.name()));
        match k {
            Key::Policy => {
                self.policy = Some(PolicyKind::parse(v).ok_or_else(|| {
                    bad(format!(
                        "unknown policy {v:?} (one of: {})",
                        PolicyKind::ALL.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
                    ))
                })?)
            }
            Key::Sieve => self.sieve = Some(parse_size(v).map_err(bad)?),
            Key::Interval => {
                let d = parse_duration(v).map_err(bad)?;
                if d.is_zero() {
                    return Err(bad(format!("{v:?}: the interval must be more than 0")));
                }
                self.interval = Some(d);
            }
            Key::Chunk => {
                let n = parse_size(v).map_err(bad)?;
                if crate::extent::ChunkSize::new(n).is_none() {
                    return Err(bad(format!("{v:?}: a chunk is a power of two from 4K to 1M")));
                }
                self.chunk = Some(n);
            }
            Key::WriteBack => self.write_back = Some(parse_percent(v).map_err(bad)?),
            Key::Delta => self.delta = Some(parse_delta(v).map_err(bad)?),
            Key::Pin => self.pin = Some(Tier::parse(v).ok_or_else(|| bad(format!("unknown tier {v:?} (ssd or hdd)")))?),
            Key::Quiet => {
                self.quiet = Some(match v {
                    "on" => true,
                    "off" => false,
                    _ => return Err(bad(format!("{v:?}: on or off"))),
                })
            }
            Key::PolicySource | Key::Placement => return Err(bad("is read-only".into())),
        }
        Ok(())
    }

    /// Unsets one key; false if it was not set.
    pub fn unset(&mut self, k: Key) -> bool {
        match k {
            Key::Policy => self.policy.take().is_some(),
            Key::Sieve => self.sieve.take().is_some(),
            Key::Interval => self.interval.take().is_some(),
            Key::Chunk => self.chunk.take().is_some(),
            Key::WriteBack => self.write_back.take().is_some(),
            Key::Delta => self.delta.take().is_some(),
            Key::Pin => self.pin.take().is_some(),
            Key::Quiet => self.quiet.take().is_some(),
            Key::PolicySource | Key::Placement => false,
        }
    }

    /// Fills what is unset here from `parent` (the inherited settings).
    pub fn or(self, parent: Settings) -> Settings {
        Settings {
            policy: self.policy.or(parent.policy),
            sieve: self.sieve.or(parent.sieve),
            interval: self.interval.or(parent.interval),
            chunk: self.chunk.or(parent.chunk),
            write_back: self.write_back.or(parent.write_back),
            delta: self.delta.or(parent.delta),
            pin: self.pin.or(parent.pin),
            quiet: self.quiet.or(parent.quiet),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_validated_and_nothing_changes_on_error() {
        let mut s = Settings::default();
        s.set(Key::Policy, b"on-demand-cache").unwrap();
        s.set(Key::Sieve, b"2M\n").unwrap();
        s.set(Key::Interval, b"5s").unwrap();
        s.set(Key::Pin, b"ssd").unwrap();
        let before = s;
        for (k, v) in [
            (Key::Policy, &b"lru"[..]),
            (Key::Sieve, b"big"),
            (Key::Interval, b"0"),
            (Key::Interval, b"5 years"),
            (Key::Pin, b"tape"),
            (Key::Quiet, b"yes"),
            (Key::Policy, b"\xff"),
            (Key::PolicySource, b"/x"),
            (Key::Placement, b"ssd"),
        ] {
            let e = s.set(k, v).unwrap_err();
            assert!(matches!(e, Error::Invalid(_)), "{k:?} {v:?}");
        }
        assert_eq!(s, before);
        assert_eq!(s.get(Key::Sieve).as_deref(), Some("2M"));
        assert_eq!(s.get(Key::Interval).as_deref(), Some("5s"));
        assert_eq!(Settings::decode(&s.encode()).unwrap(), s);
        assert!(s.unset(Key::Pin));
        assert!(!s.unset(Key::Pin));
    }

    #[test]
    fn delta_is_a_decimal_kept_in_hundredths() {
        assert_eq!(parse_delta("1"), Ok(100));
        assert_eq!(parse_delta("0.5"), Ok(50));
        assert_eq!(parse_delta(" 2.25 "), Ok(225));
        for bad in ["0", "-1", "0.001", "101", "one", ""] {
            assert!(parse_delta(bad).is_err(), "{bad}");
        }
        assert_eq!(format_delta(100), "1");
        assert_eq!(format_delta(50), "0.5");
        assert_eq!(format_delta(225), "2.25");
        let mut s = Settings::default();
        s.set(Key::Delta, b"0.5\n").unwrap();
        assert_eq!(s.get(Key::Delta).as_deref(), Some("0.5"));
        assert!(s.defines_group());
        assert!(Key::Delta.dirs_only());
    }

    #[test]
    fn names_and_inheritance() {
        assert_eq!(Key::parse(b"user.tierfs.policy").unwrap(), Some(Key::Policy));
        assert_eq!(Key::parse(b"user.other").unwrap(), None);
        assert!(Key::parse(b"user.tierfs.polcy").is_err());
        let parent = Settings { policy: Some(PolicyKind::HddOnly), sieve: Some(5), ..Settings::default() };
        let child = Settings { sieve: Some(9), ..Settings::default() };
        let eff = child.or(parent);
        assert_eq!((eff.policy, eff.sieve, eff.pin), (Some(PolicyKind::HddOnly), Some(9), None));
    }
}
