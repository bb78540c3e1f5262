//! Policy groups: every directory with settings (`user.tierfs.*`) heads a
//! group; a file belongs to the group of its nearest such ancestor; the
//! root is group 0 and takes the mount options as defaults. Group numbers
//! are stored with the settings, so the group each file's statistics carry
//! stays valid across remounts.

use crate::policy::{Params, PolicyKind};
use crate::settings::Settings;
use crate::state::ns::{Ino, ROOT_INO};
use crate::stats::Group;
use crate::tier::Tier;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// What is stored under an inode: its settings and, for a directory
/// heading a group, the group's number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stored {
    /// The settings.
    #[serde(flatten)]
    pub settings: Settings,
    /// Group number (directories with settings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<Group>,
}

impl Stored {
    /// Encodes for the state database.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("settings serialise")
    }
    /// Decodes; `None` if unreadable.
    pub fn decode(b: &[u8]) -> Option<Self> {
        serde_json::from_slice(b).ok()
    }
}

/// One group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupInfo {
    /// The directory heading it.
    pub dir: Ino,
    /// The settings set on that directory.
    pub own: Settings,
}

/// Settings in force for a group, everything inherited resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Effective {
    /// The policy.
    pub policy: PolicyKind,
    /// Sieve and interval.
    pub params: Params,
    /// Pin of the whole group, if any.
    pub pin: Option<Tier>,
    /// The directory whose setting gave the policy (None: the mount option).
    pub policy_from: Option<Ino>,
}

/// See the module documentation.
#[derive(Debug)]
pub struct Groups {
    defaults: (PolicyKind, Params),
    by_dir: HashMap<Ino, Group>,
    info: HashMap<Group, GroupInfo>,
    next: Group,
    dir_cache: HashMap<Ino, Group>,
    effective: HashMap<Group, Effective>,
    file_pins: HashMap<Ino, Tier>,
}

/// How the tree is walked upwards: the parent of a directory.
pub type ParentOf<'a> = &'a dyn Fn(Ino) -> Option<Ino>;

impl Groups {
    /// Only the root group, with the mount's defaults.
    pub fn new(policy: PolicyKind, params: Params) -> Self {
        let mut g = Groups {
            defaults: (policy, params),
            by_dir: HashMap::new(),
            info: HashMap::new(),
            next: 1,
            dir_cache: HashMap::new(),
            effective: HashMap::new(),
            file_pins: HashMap::new(),
        };
        g.by_dir.insert(ROOT_INO, 0);
        g.info.insert(0, GroupInfo { dir: ROOT_INO, own: Settings::default() });
        g
    }

    /// Loads what the state database holds: `(ino, stored, is_dir)`.
    /// Returns the stored records that need their new group number saved.
    pub fn load(&mut self, items: impl IntoIterator<Item = (Ino, Stored, bool)>) -> Vec<(Ino, Stored)> {
        let mut pending = Vec::new();
        let mut dirs = Vec::new();
        for (ino, st, is_dir) in items {
            if !is_dir {
                if let Some(t) = st.settings.pin {
                    self.file_pins.insert(ino, t);
                }
                continue;
            }
            if ino == ROOT_INO {
                self.info.insert(0, GroupInfo { dir: ROOT_INO, own: st.settings });
                continue;
            }
            if let Some(g) = st.group {
                self.next = self.next.max(g + 1);
            }
            dirs.push((ino, st));
        }
        for (ino, mut st) in dirs {
            if !st.settings.defines_group() {
                continue;
            }
            let g = match st.group {
                Some(g) if !self.info.contains_key(&g) => g,
                _ => {
                    let g = self.next;
                    self.next += 1;
                    st.group = Some(g);
                    pending.push((ino, st));
                    g
                }
            };
            self.by_dir.insert(ino, g);
            self.info.insert(g, GroupInfo { dir: ino, own: st.settings });
        }
        self.invalidate();
        pending
    }

    /// Forgets derived data (after a change of settings or a directory rename).
    pub fn invalidate(&mut self) {
        self.dir_cache.clear();
        self.effective.clear();
    }

    /// Every group.
    pub fn all(&self) -> Vec<(Group, GroupInfo)> {
        let mut v: Vec<_> = self.info.iter().map(|(g, i)| (*g, *i)).collect();
        v.sort_by_key(|x| x.0);
        v
    }

    /// The group a directory heads, if any.
    pub fn group_of_dir_head(&self, dir: Ino) -> Option<Group> {
        self.by_dir.get(&dir).copied()
    }

    /// The group whose files include the entries of directory `dir`.
    pub fn group_of(&mut self, dir: Ino, parent_of: ParentOf<'_>) -> Group {
        if let Some(g) = self.dir_cache.get(&dir) {
            return *g;
        }
        let mut walked = Vec::new();
        let mut cur = dir;
        let g = loop {
            if let Some(g) = self.by_dir.get(&cur).or_else(|| self.dir_cache.get(&cur)) {
                break *g;
            }
            walked.push(cur);
            match parent_of(cur) {
                Some(p) if p != cur && walked.len() < 4096 => cur = p,
                _ => break 0,
            }
        };
        for d in walked {
            self.dir_cache.insert(d, g);
        }
        g
    }

    /// The settings in force for a group.
    pub fn effective(&mut self, g: Group, parent_of: ParentOf<'_>) -> Effective {
        if let Some(e) = self.effective.get(&g) {
            return *e;
        }
        let Some(info) = self.info.get(&g).copied() else {
            return self.effective(0, parent_of);
        };
        let mut s = info.own;
        let mut from = s.policy.map(|_| info.dir);
        let mut cur = info.dir;
        while cur != ROOT_INO {
            let Some(p) = parent_of(cur) else { break };
            let pg = self.group_of(p, parent_of);
            let pi = self.info.get(&pg).copied().unwrap_or(GroupInfo { dir: ROOT_INO, own: Settings::default() });
            if from.is_none() && pi.own.policy.is_some() {
                from = Some(pi.dir);
            }
            s = s.or(pi.own);
            cur = pi.dir;
            if pg == 0 {
                break;
            }
        }
        let (dp, dparams) = self.defaults;
        let e = Effective {
            policy: s.policy.unwrap_or(dp),
            params: Params {
                sieve: s.sieve.unwrap_or(dparams.sieve),
                interval: s.interval.unwrap_or(dparams.interval),
                chunk: s.chunk.unwrap_or(dparams.chunk),
                write_back: s.write_back.unwrap_or(dparams.write_back),
                delta: s.delta.unwrap_or(dparams.delta),
                quiet: s.quiet.unwrap_or(dparams.quiet),
                // The mount's: not a directory setting.
                ..dparams
            },
            pin: s.pin,
            policy_from: from,
        };
        self.effective.insert(g, e);
        e
    }

    /// Records the settings of a directory. Returns the stored record to
    /// write (with its group number).
    pub fn set_dir(&mut self, dir: Ino, own: Settings) -> Stored {
        self.invalidate();
        if dir == ROOT_INO {
            self.info.insert(0, GroupInfo { dir, own });
            return Stored { settings: own, group: None };
        }
        if !own.defines_group() {
            if let Some(g) = self.by_dir.remove(&dir) {
                self.info.remove(&g);
            }
            return Stored { settings: own, group: None };
        }
        let g = match self.by_dir.get(&dir) {
            Some(g) => *g,
            None => {
                let g = self.next;
                self.next += 1;
                self.by_dir.insert(dir, g);
                g
            }
        };
        self.info.insert(g, GroupInfo { dir, own });
        Stored { settings: own, group: Some(g) }
    }

    /// Records a file's own pin.
    pub fn set_file_pin(&mut self, ino: Ino, pin: Option<Tier>) {
        match pin {
            Some(t) => self.file_pins.insert(ino, t),
            None => self.file_pins.remove(&ino),
        };
    }

    /// Every file's own pin.
    pub fn file_pins(&self) -> Vec<(Ino, Tier)> {
        self.file_pins.iter().map(|(i, t)| (*i, *t)).collect()
    }

    /// A file's own pin.
    pub fn file_pin(&self, ino: Ino) -> Option<Tier> {
        self.file_pins.get(&ino).copied()
    }

    /// Drops a file that no longer exists.
    pub fn forget_file(&mut self, ino: Ino) {
        self.file_pins.remove(&ino);
    }

    /// True if the group exists.
    pub fn exists(&self, g: Group) -> bool {
        self.info.contains_key(&g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// / (1) -> www (2) -> img (3) ; / -> shares (4) -> team (5)
    fn parent(i: Ino) -> Option<Ino> {
        match i {
            2 | 4 => Some(1),
            3 => Some(2),
            5 => Some(4),
            _ => None,
        }
    }

    fn settings(policy: Option<PolicyKind>, sieve: Option<u64>) -> Settings {
        Settings { policy, sieve, ..Settings::default() }
    }

    #[test]
    fn inheritance_override_and_removal() {
        let mut g = Groups::new(PolicyKind::DynamicHotDst, Params::default());
        let p = &parent;
        assert_eq!(g.group_of(3, p), 0);
        assert_eq!(g.effective(0, p).policy, PolicyKind::DynamicHotDst);
        let www = g.set_dir(2, settings(Some(PolicyKind::OnDemandCache), None)).group.unwrap();
        assert_eq!(g.group_of(3, p), www, "inherited below");
        assert_eq!(g.group_of(5, p), 0, "other subtrees keep the default");
        let e = g.effective(www, p);
        assert_eq!((e.policy, e.policy_from), (PolicyKind::OnDemandCache, Some(2)));
        // A deeper directory overrides only the sieve: the policy is inherited.
        let img = g.set_dir(3, settings(None, Some(5 << 20))).group.unwrap();
        let e = g.effective(img, p);
        assert_eq!((e.policy, e.params.sieve, e.policy_from), (PolicyKind::OnDemandCache, 5 << 20, Some(2)));
        // Removing the www setting restores inheritance from the root.
        g.set_dir(2, Settings::default());
        assert_eq!(g.group_of(2, p), 0);
        assert_eq!(g.effective(img, p).policy, PolicyKind::DynamicHotDst);
        assert_eq!(g.effective(img, p).policy_from, None);
        // The root's own setting beats the mount option.
        g.set_dir(1, settings(Some(PolicyKind::HddOnly), None));
        assert_eq!(g.effective(0, p).policy, PolicyKind::HddOnly);
        assert_eq!(g.effective(img, p).policy, PolicyKind::HddOnly);
    }

    #[test]
    fn group_numbers_survive_a_reload() {
        let mut g = Groups::new(PolicyKind::DynamicHotDst, Params::default());
        let a = g.set_dir(4, settings(Some(PolicyKind::IntervalCache), None));
        let b = g.set_dir(2, Settings { pin: Some(Tier::Ssd), ..Settings::default() });
        let mut h = Groups::new(PolicyKind::DynamicHotDst, Params::default());
        let pending = h.load([
            (4, a, true),
            (2, b, true),
            (9, Stored { settings: Settings { pin: Some(Tier::Hdd), ..Settings::default() }, group: None }, false),
        ]);
        assert!(pending.is_empty());
        assert_eq!(h.group_of_dir_head(4), a.group);
        assert_eq!(h.group_of_dir_head(2), b.group);
        assert_eq!(h.file_pin(9), Some(Tier::Hdd));
        assert_eq!(h.effective(b.group.unwrap(), &parent).pin, Some(Tier::Ssd));
        // A directory whose settings lost their number gets a fresh one.
        let mut k = Groups::new(PolicyKind::DynamicHotDst, Params::default());
        let pending = k.load([(5, Stored { settings: settings(Some(PolicyKind::HddOnly), None), group: None }, true)]);
        assert_eq!(pending.len(), 1);
        assert!(k.group_of_dir_head(5).is_some());
    }
}
