//! Per-file access statistics (soft state).
//!
//! [`Stats`] is pure: it is fed [`Event`]s carrying their own time and never
//! reads a clock. It keeps, per file, the inverse-bitmap counter
//! ([`counter`]), the recency of the last access, read and write counts and
//! bytes, and which tier served the requests; and an ordered index per
//! (policy group, residence) so that the hottest and coldest files are found
//! in O(log n) among millions.
//!
//! Ordering: hottest = highest counter, the most recent access breaking a
//! tie; coldest = lowest counter, the least recent access breaking a tie.
//! Recency is a logical sequence number of accesses (so ties are broken
//! exactly, even within one clock tick); the inode number breaks the rest.

pub mod counter;
pub mod history;
mod persist;

pub use persist::{load, StatsStore, FLUSH_BATCH};

use crate::clock::Timestamp;
use crate::event::{Event, EventKind};
use crate::state::ns::Ino;
use crate::tier::{Placement, Tier};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// Where a file's data is, as the statistics index it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Residence {
    /// Only on the SSD.
    Ssd,
    /// Only on the HDD.
    #[default]
    Hdd,
    /// On the HDD with a copy on the SSD.
    Cached,
}

impl From<Placement> for Residence {
    fn from(p: Placement) -> Self {
        match p {
            Placement::On(Tier::Ssd) => Residence::Ssd,
            Placement::On(Tier::Hdd) => Residence::Hdd,
            Placement::Cached => Residence::Cached,
        }
    }
}

impl Residence {
    /// True if the file takes SSD space.
    pub fn on_ssd(self) -> bool {
        self != Residence::Hdd
    }
    /// One byte for persistence.
    pub fn encode(self) -> u8 {
        self as u8
    }
    /// Inverse of [`Residence::encode`].
    pub fn decode(v: u8) -> Option<Self> {
        [Residence::Ssd, Residence::Hdd, Residence::Cached].get(v as usize).copied()
    }
}

/// A policy group: the files governed by one policy directory (0 = the
/// mount's root default).
pub type Group = u32;

/// The statistics of one file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStats {
    /// Inverse-bitmap counter.
    pub counter: u32,
    /// Policy group.
    pub group: Group,
    /// Where the data is.
    pub residence: Residence,
    /// Last known size in bytes.
    pub size: u64,
    /// Logical time of the last access (higher = more recent).
    pub seq: u64,
    /// Wall time of the last access, in seconds since the epoch.
    pub last_access: u32,
    /// Read requests.
    pub reads: u32,
    /// Write requests.
    pub writes: u32,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Requests served by the SSD.
    pub ssd_reqs: u32,
    /// Requests served by the HDD.
    pub hdd_reqs: u32,
}

/// The SSD's share of requests counted per tier (SSD, HDD); 0 without any.
pub fn ssd_share(reqs: [u64; 2]) -> f64 {
    let total = reqs[0] + reqs[1];
    if total == 0 {
        0.0
    } else {
        reqs[0] as f64 / total as f64
    }
}

/// Requests and bytes served per tier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Served {
    /// Requests, indexed by tier (SSD, HDD).
    pub reqs: [u64; 2],
    /// Bytes, indexed by tier.
    pub bytes: [u64; 2],
}

impl Served {
    /// Hystor's hit ratio: the share of requests served by the SSD.
    pub fn ssd_hit_ratio(&self) -> f64 {
        ssd_share(self.reqs)
    }
    fn add(&mut self, t: Tier, reqs: u64, bytes: u64) {
        self.reqs[t.idx()] += reqs;
        self.bytes[t.idx()] += bytes;
    }
}

type Key = (u32, u64, Ino);

/// See the module documentation.
#[derive(Debug, Default)]
pub struct Stats {
    files: Files,
    /// The order of the files accessed at least once, per group and
    /// residence.
    index: FxHashMap<(Group, Residence), BTreeSet<Key>>,
    /// The files never accessed (key `(0, 0, ino)`: colder than every
    /// other, among themselves in inode order), as bitmaps.
    unaccessed: FxHashMap<(Group, Residence), InoSet>,
    seq: u64,
    /// Counter of the file last evicted from the SSD (admission threshold).
    pub last_evicted: Option<u32>,
    /// Requests and bytes served, since the statistics were created.
    pub served: Served,
    /// Per-group requests and bytes served.
    pub served_by_group: HashMap<Group, Served>,
    dirty: InoSet,
    removed: InoSet,
    last_aged: Option<Timestamp>,
    /// Entries added one by one since the maps were last built in bulk.
    grown: usize,
    /// Every this long all counters are halved.
    pub aging_period: Duration,
    /// The heat (the counters' weights) of the requests each tier served,
    /// by [`Tier::idx`].
    heat_served: [u64; 2],
    /// The window of [`Stats::age_on_shift`].
    shift: ShiftWindow,
    /// The requests served when [`Stats::age_by_requests`] last halved or
    /// last found the SSD with room; None until it first looks (the
    /// totals loaded at mount are not requests since a halving).
    requests_aged: Option<u64>,
}

/// Default aging period: ten minutes.
pub const DEFAULT_AGING: Duration = Duration::from_secs(600);

/// Accesses per file on the SSD between two halvings of
/// [`Stats::age_by_requests`]: TinyLFU's sample of ten per cache entry.
pub const REQUESTS_PER_SSD_FILE: u64 = 10;

/// [`Stats::age_on_shift`]'s window holds at least this much heat: 500
/// requests of 4 KiB.
pub const SHIFT_WINDOW_MIN: u64 = 500 * 64;

/// A window whose SSD share of the heat is below this fraction of the
/// running average says the hot set moved. A window of as many 4-KiB
/// requests as the SSD holds files, at a hit ratio of 45 %, varies by 2
/// points (one standard deviation, at 800 files); a moved hot set took
/// the share from 0.50 to 0.14 in the shifting block trace.
pub const SHIFT_DROP: f64 = 0.85;

/// Halvings when the hot set moved (counters divided by 8): one halving
/// left the old hot set's counters above the new one's for most of a
/// phase at 25 % of the footprint.
pub const SHIFT_HALVINGS: u32 = 3;

/// The weight of a window in the running average of the SSD's share.
const SHIFT_MEAN_WEIGHT: f64 = 0.2;

/// Where [`Stats::age_on_shift`]'s window began, and the SSD's average
/// share of the heat over the windows before.
#[derive(Clone, Copy, Debug, Default)]
struct ShiftWindow {
    start: [u64; 2],
    mean: Option<f64>,
}

fn key(f: &FileStats, ino: Ino) -> Key {
    (f.counter, f.seq, ino)
}

/// Whether a file is ordered by the bitmaps of never accessed files.
fn unaccessed(f: &FileStats) -> bool {
    f.counter == 0 && f.seq == 0
}

impl Stats {
    /// Empty statistics with the given aging period.
    pub fn new(aging_period: Duration) -> Self {
        Stats { aging_period, ..Stats::default() }
    }

    /// Number of tracked files.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// True if no file is tracked.
    pub fn is_empty(&self) -> bool {
        self.files.len() == 0
    }

    /// One file's statistics.
    pub fn get(&self, ino: Ino) -> Option<FileStats> {
        self.files.get(ino)
    }

    /// All files, in inode order.
    pub fn iter(&self) -> impl Iterator<Item = (Ino, FileStats)> + '_ {
        self.files.iter()
    }

    /// The admission threshold: a file may enter the SSD only if its
    /// counter is above this.
    pub fn admission_threshold(&self) -> u32 {
        self.last_evicted.unwrap_or(0)
    }

    fn unindex(&mut self, ino: Ino, f: &FileStats) {
        let at = (f.group, f.residence);
        if unaccessed(f) {
            if let Some(s) = self.unaccessed.get_mut(&at) {
                s.remove(ino);
            }
        } else if let Some(s) = self.index.get_mut(&at) {
            s.remove(&key(f, ino));
        }
    }

    fn reindex(&mut self, ino: Ino, f: &FileStats) {
        let at = (f.group, f.residence);
        if unaccessed(f) {
            self.unaccessed.entry(at).or_default().insert(ino);
        } else {
            self.index.entry(at).or_default().insert(key(f, ino));
        }
    }

    /// The keys of one group and residence, coldest first.
    fn keys(&self, group: Group, r: Residence) -> impl DoubleEndedIterator<Item = Key> + '_ {
        let cold = self.unaccessed.get(&(group, r)).into_iter().flat_map(|s| s.iter()).map(|i| (0, 0, i));
        cold.chain(self.index.get(&(group, r)).into_iter().flat_map(|s| s.iter().copied()))
    }

    /// Every (group, residence) with files.
    fn sets(&self) -> Vec<(Group, Residence)> {
        let mut v: Vec<_> = self.index.keys().chain(self.unaccessed.keys()).copied().collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Changes one file through `change`, keeping the index right.
    fn update(&mut self, ino: Ino, change: impl FnOnce(&mut FileStats)) -> bool {
        let Some(old) = self.files.get(ino) else { return false };
        let mut new = old;
        change(&mut new);
        if new != old {
            if key(&old, ino) != key(&new, ino) || (old.group, old.residence) != (new.group, new.residence) {
                // (A file leaves the never accessed only by a change of
                // its key, so this also moves it between the two orders.)
                self.unindex(ino, &old);
                self.reindex(ino, &new);
            }
            self.files.insert(ino, new);
            self.dirty.insert(ino);
        }
        true
    }

    /// Starts tracking a file (or replaces its entry).
    pub fn insert(&mut self, ino: Ino, f: FileStats) {
        match self.files.insert(ino, f) {
            Some(old) => self.unindex(ino, &old),
            None => self.grown += 1,
        }
        self.reindex(ino, &f);
        self.seq = self.seq.max(f.seq);
        self.dirty.insert(ino);
        self.removed.remove(ino);
    }

    /// Replaces every entry at once (after loading). Building the maps in
    /// bulk packs their nodes full: about half the memory of inserting one
    /// by one, which matters at a million files.
    pub fn replace_all(&mut self, entries: Vec<(Ino, FileStats)>) {
        self.seq = entries.iter().map(|(_, f)| f.seq).max().unwrap_or(0).max(self.seq);
        self.files = Files::from_entries(entries);
        self.rebuild_index();
        self.dirty.clear();
    }

    /// Builds the maps again in bulk if more than half of their entries
    /// were added one by one since they last were (at least 10 000): maps
    /// grown by inserts in inode order, as an adoption makes them, have
    /// half-full nodes and take twice the memory. Returns whether it did.
    pub fn compact_if_grown(&mut self) -> bool {
        if self.grown < 10_000 || self.grown * 2 < self.files.len() {
            return false;
        }
        self.rebuild_maps();
        true
    }

    /// Builds both maps again in bulk, which packs their nodes full.
    fn rebuild_maps(&mut self) {
        self.files.rebuild();
        self.rebuild_index();
    }

    fn rebuild_index(&mut self) {
        self.grown = 0;
        let mut index: FxHashMap<(Group, Residence), Vec<Key>> = FxHashMap::default();
        let mut cold: FxHashMap<(Group, Residence), InoSet> = FxHashMap::default();
        for (ino, f) in self.files.iter() {
            if unaccessed(&f) {
                cold.entry((f.group, f.residence)).or_default().insert(ino);
            } else {
                index.entry((f.group, f.residence)).or_default().push(key(&f, ino));
            }
        }
        self.index = index.into_iter().map(|(k, v)| (k, v.into_iter().collect())).collect();
        self.unaccessed = cold;
    }

    /// Stops tracking a file.
    pub fn remove(&mut self, ino: Ino) -> Option<FileStats> {
        let f = self.files.remove(ino)?;
        self.unindex(ino, &f);
        self.dirty.remove(ino);
        self.removed.insert(ino);
        Some(f)
    }

    /// Sets where a file's data is.
    pub fn set_residence(&mut self, ino: Ino, r: Residence) {
        self.update(ino, |f| f.residence = r);
    }

    /// Sets a file's policy group.
    pub fn set_group(&mut self, ino: Ino, g: Group) {
        self.update(ino, |f| f.group = g);
    }

    /// The tail of a split request: its bytes count, nothing else.
    fn fragment(&mut self, ino: Ino, write: bool, bytes: u64, tier: Tier) {
        let group = self.files.get(ino).map(|f| f.group);
        self.update(ino, |f| {
            if write {
                f.write_bytes = f.write_bytes.saturating_add(bytes);
            } else {
                f.read_bytes = f.read_bytes.saturating_add(bytes);
            }
        });
        self.served.bytes[tier.idx()] += bytes;
        if let Some(g) = group {
            self.served_by_group.entry(g).or_default().bytes[tier.idx()] += bytes;
        }
    }

    /// `times` requests of `pages` pages and `bytes` bytes each.
    #[allow(clippy::too_many_arguments)]
    fn access(&mut self, ino: Ino, t: Timestamp, pages: u64, write: bool, bytes: u64, tier: Tier, times: u32) {
        self.seq += 1;
        let seq = self.seq;
        let group = self.files.get(ino).map(|f| f.group);
        let all = bytes.saturating_mul(u64::from(times));
        self.update(ino, |f| {
            f.counter = f.counter.saturating_add(counter::weight(pages).saturating_mul(times));
            f.seq = seq;
            f.last_access = t.secs().min(u32::MAX as u64) as u32;
            if write {
                f.writes = f.writes.saturating_add(times);
                f.write_bytes = f.write_bytes.saturating_add(all);
            } else {
                f.reads = f.reads.saturating_add(times);
                f.read_bytes = f.read_bytes.saturating_add(all);
            }
            match tier {
                Tier::Ssd => f.ssd_reqs = f.ssd_reqs.saturating_add(times),
                Tier::Hdd => f.hdd_reqs = f.hdd_reqs.saturating_add(times),
            }
        });
        self.served.add(tier, u64::from(times), all);
        self.heat_served[tier.idx()] += u64::from(counter::weight(pages)) * u64::from(times);
        if let Some(g) = group {
            self.served_by_group.entry(g).or_default().add(tier, u64::from(times), all);
        }
    }

    /// Takes one event. `group_of` names the policy group of a directory
    /// (for new files); statistics stay pure, the caller knows the tree.
    /// Only `Create` starts tracking a file: an access to a file that is
    /// not tracked (its removal came first) counts for the tiers' totals
    /// but does not bring the file back.
    pub fn apply(&mut self, ev: &Event, group_of: &mut dyn FnMut(Ino) -> Group) {
        let ino = ev.ino;
        match ev.kind {
            EventKind::Read { off, len, tier, fragment } => {
                if fragment {
                    self.fragment(ino, false, len, tier);
                } else {
                    self.access(ino, ev.time, counter::pages(off, len), false, len, tier, ev.times);
                }
            }
            EventKind::Write { off, len, tier, size, fragment } => {
                self.update(ino, |f| f.size = size);
                if fragment {
                    self.fragment(ino, true, len, tier);
                } else {
                    self.access(ino, ev.time, counter::pages(off, len), true, len, tier, ev.times);
                }
            }
            EventKind::Open { write, tier, size, unseen } => {
                self.update(ino, |f| f.size = size);
                if unseen {
                    // The kernel does the I/O and no heat source sees it:
                    // the open counts as one access to the whole file.
                    self.access(ino, ev.time, counter::whole_file_pages(size), write, size, tier, 1);
                }
            }
            EventKind::Close { size } | EventKind::Resize { size } => {
                self.update(ino, |f| f.size = size);
            }
            EventKind::Create { placement, parent, size } => {
                let group = group_of(parent);
                match self.files.get(ino) {
                    Some(_) => {
                        self.update(ino, |f| {
                            f.residence = placement.into();
                            f.size = size;
                            f.group = group;
                        });
                    }
                    None => {
                        self.insert(ino, FileStats { residence: placement.into(), group, size, ..FileStats::default() })
                    }
                }
            }
            EventKind::Placed { placement } => self.set_residence(ino, placement.into()),
            EventKind::Remove => {
                self.remove(ino);
            }
            EventKind::Moved { parent } => {
                let g = group_of(parent);
                self.set_group(ino, g);
            }
            EventKind::DirMoved { .. } => {}
        }
    }

    /// Halves every counter once per aging period elapsed since the last
    /// aging (see [`counter::age`]). Returns how many periods were applied.
    pub fn age(&mut self, now: Timestamp) -> u32 {
        let Some(last) = self.last_aged else {
            self.last_aged = Some(now);
            return 0;
        };
        if self.aging_period.is_zero() {
            return 0;
        }
        let periods = (now.since(last).as_nanos() / self.aging_period.as_nanos()).min(32) as u32;
        if periods == 0 {
            return 0;
        }
        self.last_aged = Some(last.plus(self.aging_period * periods));
        self.halve(periods);
        periods
    }

    /// Halves every counter (and the admission threshold) `times` times.
    fn halve(&mut self, times: u32) {
        // Cold entries have no counter to halve.
        for (ino, f) in self.files.warm.iter_mut() {
            let c = f.counter.checked_shr(times).unwrap_or(0);
            if c != f.counter {
                f.counter = c;
                self.dirty.insert(*ino);
            }
        }
        self.last_evicted = self.last_evicted.map(|c| c.checked_shr(times).unwrap_or(0));
        // The order changed: both maps are built again.
        self.rebuild_maps();
    }

    /// Files taking SSD space (moved there or cached).
    pub fn ssd_files(&self) -> u64 {
        let sets = self.sets().into_iter().filter(|(_, r)| r.on_ssd());
        sets.map(|k| self.index.get(&k).map_or(0, |s| s.len()) + self.unaccessed.get(&k).map_or(0, |s| s.len))
            .sum::<usize>() as u64
    }

    /// Halves every counter once [`REQUESTS_PER_SSD_FILE`] accesses per
    /// file on the SSD came since it last did (`AgingRule::Requests`), once
    /// the SSD is full. TinyLFU's sample is ten accesses per entry the
    /// cache holds: the files on a full SSD are that many. Until a file
    /// has had to leave for room (the admission threshold is set), the SSD
    /// has room and the count starts afresh, which keeps a few files on an
    /// empty SSD from halving every few requests. Returns the halvings
    /// made (0 or 1).
    pub fn age_by_requests(&mut self) -> u32 {
        let requests = self.served.reqs[0] + self.served.reqs[1];
        let since = *self.requests_aged.get_or_insert(requests);
        if self.last_evicted.is_none() {
            self.requests_aged = Some(requests);
            return 0;
        }
        if requests - since < REQUESTS_PER_SSD_FILE * self.ssd_files().max(1) {
            return 0;
        }
        self.requests_aged = Some(requests);
        self.halve(1);
        1
    }

    /// Halves every counter [`SHIFT_HALVINGS`] times when the hot set moved
    /// (`AgingRule::Shift`): the requests are taken in windows of as much
    /// heat as one 4-KiB request per file on the SSD (at least
    /// [`SHIFT_WINDOW_MIN`]), and a window in which the SSD served less
    /// than [`SHIFT_DROP`] of its average share of the heat says the hot
    /// set moved. The heat, not the count: a scan's big requests weigh
    /// little, as they do in the counters, and do not look like a move.
    /// Returns the halvings made.
    pub fn age_on_shift(&mut self) -> u32 {
        let window = (64 * self.ssd_files()).max(SHIFT_WINDOW_MIN);
        let ssd = self.heat_served[0] - self.shift.start[0];
        let all = ssd + self.heat_served[1] - self.shift.start[1];
        if all < window {
            return 0;
        }
        self.shift.start = self.heat_served;
        let share = ssd as f64 / all as f64;
        let moved = self.shift.mean.is_some_and(|m| share < SHIFT_DROP * m);
        if !moved {
            self.shift.mean =
                Some(self.shift.mean.map_or(share, |m| (1.0 - SHIFT_MEAN_WEIGHT) * m + SHIFT_MEAN_WEIGHT * share));
            return 0;
        }
        // The share after a move is the new level to compare with: until
        // the policy has brought the new hot set over, every window is as
        // low, and each would otherwise halve the counters again.
        self.shift.mean = Some(share);
        self.halve(SHIFT_HALVINGS);
        SHIFT_HALVINGS
    }

    /// Files of one group and residence, hottest first.
    pub fn hottest(&self, group: Group, r: Residence) -> impl Iterator<Item = (Ino, FileStats)> + '_ {
        self.keys(group, r).rev().filter_map(move |k| self.files.get(k.2).map(|f| (k.2, f)))
    }

    /// Files of one group and residence, coldest first.
    pub fn coldest(&self, group: Group, r: Residence) -> impl Iterator<Item = (Ino, FileStats)> + '_ {
        self.keys(group, r).filter_map(move |k| self.files.get(k.2).map(|f| (k.2, f)))
    }

    /// The coldest file taking SSD space, over every group, skipping
    /// files for which `skip` is true (pinned, open, already chosen).
    pub fn coldest_on_ssd(&self, skip: &mut dyn FnMut(Ino, &FileStats) -> bool) -> Option<(Ino, FileStats)> {
        let mut best: Option<(Key, FileStats)> = None;
        for (g, r) in self.sets() {
            if !r.on_ssd() {
                continue;
            }
            for k in self.keys(g, r) {
                let Some(f) = self.files.get(k.2) else { continue };
                if skip(k.2, &f) {
                    continue;
                }
                if best.as_ref().is_none_or(|(b, _)| k < *b) {
                    best = Some((k, f));
                }
                break;
            }
        }
        best.map(|(k, f)| (k.2, f))
    }

    /// The files on the SSD (moved there or cached) over all groups,
    /// coldest first, in the order repeated calls of
    /// [`Stats::coldest_on_ssd`] skipping the files already taken would
    /// give them, at the cost of one pass (an eviction of many files looks
    /// at each once).
    pub fn ssd_coldest_first(&self) -> impl Iterator<Item = (Ino, FileStats)> + '_ {
        let mut sets: Vec<std::iter::Peekable<_>> =
            self.sets().into_iter().filter(|(_, r)| r.on_ssd()).map(|(g, r)| self.keys(g, r).peekable()).collect();
        std::iter::from_fn(move || loop {
            // The set whose next key is the least (a few sets: a scan).
            let (i, _) =
                sets.iter_mut().enumerate().filter_map(|(i, s)| s.peek().map(|k| (i, *k))).min_by_key(|&(_, k)| k)?;
            let k = sets[i].next()?;
            if let Some(f) = self.files.get(k.2) {
                return Some((k.2, f));
            }
        })
    }

    /// The hottest file of a residence over all groups.
    pub fn hottest_any(&self, r: Residence) -> Option<(Ino, FileStats)> {
        self.sets()
            .into_iter()
            .filter(|(_, res)| *res == r)
            .filter_map(|(g, r)| self.keys(g, r).next_back())
            .max()
            .and_then(|k| self.files.get(k.2).map(|f| (k.2, f)))
    }

    /// The coldest file of a residence over all groups.
    pub fn coldest_any(&self, r: Residence) -> Option<(Ino, FileStats)> {
        self.sets()
            .into_iter()
            .filter(|(_, res)| *res == r)
            .filter_map(|(g, r)| self.keys(g, r).next())
            .min()
            .and_then(|k| self.files.get(k.2).map(|f| (k.2, f)))
    }

    /// The `n` hottest files overall.
    pub fn top(&self, n: usize) -> Vec<(Ino, FileStats)> {
        let mut all: Vec<Key> = Vec::new();
        for (g, r) in self.sets() {
            all.extend(self.keys(g, r).rev().take(n));
        }
        all.sort_unstable_by(|a, b| b.cmp(a));
        all.truncate(n);
        all.into_iter().filter_map(|k| self.files.get(k.2).map(|f| (k.2, f))).collect()
    }

    /// Count and bytes of files per residence.
    pub fn residence_totals(&self) -> HashMap<Residence, (u64, u64)> {
        let mut out: HashMap<Residence, (u64, u64)> = HashMap::new();
        for (_, f) in self.files.iter() {
            let e = out.entry(f.residence).or_default();
            e.0 += 1;
            e.1 += f.size;
        }
        out
    }

    /// Up to `limit` of the entries changed or removed since they were
    /// last taken (for persistence).
    pub fn take_dirty(&mut self, limit: usize) -> (Vec<(Ino, FileStats)>, Vec<Ino>) {
        let dirty: Vec<_> =
            self.dirty.take(limit).into_iter().filter_map(|i| self.files.get(i).map(|f| (i, f))).collect();
        let removed = self.removed.take(limit.saturating_sub(dirty.len()));
        (dirty, removed)
    }

    /// How many entries changed or went since they were last taken.
    pub fn unflushed(&self) -> usize {
        self.dirty.len() + self.removed.len()
    }

    /// The logical clock (for persistence).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Restores the logical clock and aging time (after loading).
    pub fn restore_clock(&mut self, seq: u64, last_aged: Option<Timestamp>) {
        self.seq = self.seq.max(seq);
        self.last_aged = last_aged;
    }

    /// When counters were last aged.
    pub fn last_aged(&self) -> Option<Timestamp> {
        self.last_aged
    }

    /// A check for tests: the index holds exactly one key per file, in the
    /// right set.
    pub fn check_index(&self) -> bool {
        let n: usize = self.index.values().map(|s| s.len()).sum::<usize>()
            + self.unaccessed.values().map(|s| s.len()).sum::<usize>();
        n == self.files.len()
            && self.files.iter().all(|(i, f)| {
                let at = (f.group, f.residence);
                if unaccessed(&f) {
                    self.unaccessed.get(&at).is_some_and(|s| s.contains(i))
                } else {
                    self.index.get(&at).is_some_and(|s| s.contains(&key(&f, i)))
                }
            })
    }
}

/// The statistics of a file nothing has accessed since it was tracked:
/// a quarter of a [`FileStats`]. Most files of a big adopted tree stay so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cold {
    size: u64,
    group: Group,
    residence: Residence,
}

impl Cold {
    /// `f` as a cold entry, if every counter of it is zero.
    fn of(f: &FileStats) -> Option<Cold> {
        let c = Cold { size: f.size, group: f.group, residence: f.residence };
        (c.stats() == *f).then_some(c)
    }
    fn stats(self) -> FileStats {
        FileStats { size: self.size, group: self.group, residence: self.residence, ..FileStats::default() }
    }
}

/// The entries, each in one of two maps: a file never accessed takes a
/// [`Cold`] entry (24 bytes with its key, against 72), and moves to the
/// warm map at its first access.
#[derive(Debug, Default)]
struct Files {
    warm: BTreeMap<Ino, FileStats>,
    cold: BTreeMap<Ino, Cold>,
}

impl Files {
    fn from_entries(entries: Vec<(Ino, FileStats)>) -> Self {
        let mut warm = Vec::new();
        let mut cold = Vec::new();
        for (ino, f) in entries {
            match Cold::of(&f) {
                Some(c) => cold.push((ino, c)),
                None => warm.push((ino, f)),
            }
        }
        Files { warm: warm.into_iter().collect(), cold: cold.into_iter().collect() }
    }
    fn len(&self) -> usize {
        self.warm.len() + self.cold.len()
    }
    fn get(&self, ino: Ino) -> Option<FileStats> {
        self.warm.get(&ino).copied().or_else(|| self.cold.get(&ino).map(|c| c.stats()))
    }
    /// Stores `f` for `ino`; returns the entry it replaced.
    fn insert(&mut self, ino: Ino, f: FileStats) -> Option<FileStats> {
        match Cold::of(&f) {
            Some(c) => {
                let old = self.cold.insert(ino, c).map(Cold::stats);
                old.or_else(|| self.warm.remove(&ino))
            }
            None => {
                let old = self.warm.insert(ino, f);
                old.or_else(|| self.cold.remove(&ino).map(Cold::stats))
            }
        }
    }
    fn remove(&mut self, ino: Ino) -> Option<FileStats> {
        self.warm.remove(&ino).or_else(|| self.cold.remove(&ino).map(Cold::stats))
    }
    /// Every entry, in inode order.
    fn iter(&self) -> impl Iterator<Item = (Ino, FileStats)> + '_ {
        let mut warm = self.warm.iter().map(|(i, f)| (*i, *f)).peekable();
        let mut cold = self.cold.iter().map(|(i, c)| (*i, c.stats())).peekable();
        std::iter::from_fn(move || match (warm.peek(), cold.peek()) {
            (Some(w), Some(c)) if c.0 < w.0 => cold.next(),
            (Some(_), _) => warm.next(),
            (None, _) => cold.next(),
        })
    }
    /// Builds both maps again in bulk, which packs their nodes full.
    fn rebuild(&mut self) {
        self.warm = std::mem::take(&mut self.warm).into_iter().collect();
        self.cold = std::mem::take(&mut self.cold).into_iter().collect();
    }
}

/// A set of inode numbers as a bitmap in 64-number words: about 2 bits a
/// number where numbers are dense (they are handed out in order), where a
/// hash set takes over 9 bytes each.
#[derive(Debug, Default)]
struct InoSet {
    words: BTreeMap<u64, u64>,
    len: usize,
}

impl InoSet {
    fn insert(&mut self, ino: Ino) {
        let w = self.words.entry(ino >> 6).or_insert(0);
        let bit = 1u64 << (ino & 63);
        if *w & bit == 0 {
            *w |= bit;
            self.len += 1;
        }
    }
    fn remove(&mut self, ino: Ino) {
        let Some(w) = self.words.get_mut(&(ino >> 6)) else { return };
        let bit = 1u64 << (ino & 63);
        if *w & bit != 0 {
            *w &= !bit;
            self.len -= 1;
            if *w == 0 {
                self.words.remove(&(ino >> 6));
            }
        }
    }
    fn len(&self) -> usize {
        self.len
    }
    fn contains(&self, ino: Ino) -> bool {
        self.words.get(&(ino >> 6)).is_some_and(|w| w & (1u64 << (ino & 63)) != 0)
    }
    /// The numbers in increasing order (reversible).
    fn iter(&self) -> impl DoubleEndedIterator<Item = Ino> + '_ {
        self.words.iter().flat_map(|(k, w)| {
            let (k, w) = (*k, *w);
            (0..64u64).filter(move |b| w & (1u64 << b) != 0).map(move |b| (k << 6) | b)
        })
    }
    fn clear(&mut self) {
        self.words.clear();
        self.len = 0;
    }
    /// Takes up to `limit` numbers out of the set, smallest first.
    fn take(&mut self, limit: usize) -> Vec<Ino> {
        let mut out = Vec::new();
        while out.len() < limit {
            let Some(mut e) = self.words.first_entry() else { break };
            let base = *e.key() << 6;
            let w = e.get_mut();
            while *w != 0 && out.len() < limit {
                let b = w.trailing_zeros() as u64;
                *w &= !(1u64 << b);
                out.push(base | b);
            }
            if *w == 0 {
                e.remove();
            }
        }
        self.len -= out.len();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn ev(ino: Ino, secs: u64, kind: EventKind) -> Event {
        Event::new(ino, Timestamp::from_secs(secs), kind)
    }

    fn read(ino: Ino, secs: u64, len: u64) -> Event {
        ev(ino, secs, EventKind::Read { off: 0, len, tier: Tier::Hdd, fragment: false })
    }

    fn create(ino: Ino, p: Placement) -> Event {
        ev(ino, 0, EventKind::Create { placement: p, parent: 1, size: 0 })
    }

    fn no_groups(_: Ino) -> Group {
        0
    }

    #[test]
    fn small_requests_make_a_file_hotter_than_big_ones() {
        let mut s = Stats::new(DEFAULT_AGING);
        s.apply(&create(10, Placement::On(Tier::Hdd)), &mut no_groups);
        s.apply(&create(11, Placement::On(Tier::Hdd)), &mut no_groups);
        for i in 0..4 {
            s.apply(&read(10, i, 4096), &mut no_groups);
            s.apply(&read(11, i, 1 << 20), &mut no_groups);
        }
        assert_eq!(s.get(10).unwrap().counter, 4 * 64);
        assert_eq!(s.get(11).unwrap().counter, 4);
        assert_eq!(s.hottest(0, Residence::Hdd).next().unwrap().0, 10);
        assert_eq!(s.coldest(0, Residence::Hdd).next().unwrap().0, 11);
    }

    #[test]
    fn ties_break_by_recency() {
        let mut s = Stats::new(DEFAULT_AGING);
        for ino in [1, 2, 3] {
            s.apply(&create(ino, Placement::On(Tier::Ssd)), &mut no_groups);
        }
        // Same counter for all, accessed in the order 2, 3, 1.
        for ino in [2, 3, 1] {
            s.apply(&ev(ino, 5, EventKind::Read { off: 0, len: 10, tier: Tier::Ssd, fragment: false }), &mut no_groups);
        }
        let hot: Vec<_> = s.hottest(0, Residence::Ssd).map(|x| x.0).collect();
        assert_eq!(hot, vec![1, 3, 2], "most recent first among equals");
        let cold: Vec<_> = s.coldest(0, Residence::Ssd).map(|x| x.0).collect();
        assert_eq!(cold, vec![2, 3, 1], "least recent first among equals");
        assert_eq!(s.coldest_on_ssd(&mut |_, _| false).unwrap().0, 2);
        assert_eq!(s.coldest_on_ssd(&mut |i, _| i == 2).unwrap().0, 3);
    }

    #[test]
    fn maps_grown_by_an_adoption_are_rebuilt_once_and_keep_every_entry() {
        let mut s = Stats::new(DEFAULT_AGING);
        assert!(!s.compact_if_grown(), "nothing to rebuild");
        for ino in 0..20_000u64 {
            s.insert(ino, FileStats { counter: (ino % 97) as u32, seq: ino, ..FileStats::default() });
        }
        let before: Vec<_> = s.hottest(0, Residence::Hdd).collect();
        assert!(s.compact_if_grown());
        assert!(!s.compact_if_grown(), "rebuilt maps are not rebuilt again");
        assert!(s.check_index());
        let after: Vec<_> = s.hottest(0, Residence::Hdd).collect();
        assert_eq!(before, after);
        // Updates of tracked files do not count as growth.
        for ino in 0..20_000u64 {
            s.insert(ino, FileStats { counter: 1, ..FileStats::default() });
        }
        assert!(!s.compact_if_grown());
    }

    #[test]
    fn aging_halves_counters_per_period_elapsed() {
        let mut s = Stats::new(Duration::from_secs(60));
        s.apply(&create(1, Placement::On(Tier::Hdd)), &mut no_groups);
        s.apply(&read(1, 0, 10), &mut no_groups);
        assert_eq!(s.age(Timestamp::from_secs(0)), 0, "the first call only starts the clock");
        assert_eq!(s.age(Timestamp::from_secs(59)), 0);
        assert_eq!(s.age(Timestamp::from_secs(60)), 1);
        assert_eq!(s.get(1).unwrap().counter, 32);
        assert_eq!(s.age(Timestamp::from_secs(60 + 180)), 3);
        assert_eq!(s.get(1).unwrap().counter, 4);
        assert!(s.check_index());
        assert_eq!(s.age(Timestamp::from_secs(10_000_000)), 32);
        assert_eq!(s.get(1).unwrap().counter, 0);
    }

    #[test]
    fn aging_by_requests_halves_after_ten_accesses_per_ssd_file() {
        let mut s = Stats::new(DEFAULT_AGING);
        for ino in [1, 2] {
            s.apply(&create(ino, Placement::On(Tier::Ssd)), &mut no_groups);
        }
        s.apply(&create(3, Placement::On(Tier::Hdd)), &mut no_groups);
        assert_eq!(s.ssd_files(), 2);
        // Two files on a full SSD (one had to leave): a halving every 20
        // accesses, whenever they come.
        s.last_evicted = Some(0);
        assert_eq!(s.age_by_requests(), 0);
        for i in 0..19 {
            s.apply(&read(3, i, 4096), &mut no_groups);
            assert_eq!(s.age_by_requests(), 0, "after {} accesses", i + 1);
        }
        s.apply(&read(3, 19, 4096), &mut no_groups);
        assert_eq!(s.age_by_requests(), 1);
        assert_eq!(s.get(3).unwrap().counter, 20 * 64 / 2);
        assert_eq!(s.age_by_requests(), 0, "the count starts again");
    }

    #[test]
    fn aging_by_requests_waits_for_a_full_ssd() {
        // One file on an SSD with room: ten accesses would halve.
        let mut s = Stats::new(DEFAULT_AGING);
        s.apply(&create(1, Placement::On(Tier::Ssd)), &mut no_groups);
        for i in 0..100 {
            s.apply(&read(1, i, 4096), &mut no_groups);
            assert_eq!(s.age_by_requests(), 0, "after {} accesses", i + 1);
        }
        // Full from now on: the count starts there.
        s.last_evicted = Some(0);
        for i in 0..9 {
            s.apply(&read(1, i, 4096), &mut no_groups);
            assert_eq!(s.age_by_requests(), 0);
        }
        s.apply(&read(1, 9, 4096), &mut no_groups);
        assert_eq!(s.age_by_requests(), 1);
    }

    #[test]
    fn aging_by_requests_after_a_remount_counts_from_the_mount_not_from_the_first_request_ever() {
        // The served totals are loaded at mount; the first look must not
        // take all of them as requests since a halving.
        let mut s = Stats::new(DEFAULT_AGING);
        s.apply(&create(1, Placement::On(Tier::Ssd)), &mut no_groups);
        for i in 0..1000 {
            s.apply(&read(1, i, 4096), &mut no_groups);
        }
        let counter = s.get(1).unwrap().counter;
        let mut loaded = Stats::new(DEFAULT_AGING);
        loaded.served = s.served;
        loaded.last_evicted = Some(0);
        loaded.insert(1, s.get(1).unwrap());
        assert_eq!(loaded.age_by_requests(), 0, "no request since the mount");
        assert_eq!(loaded.get(1).unwrap().counter, counter);
    }

    #[test]
    fn aging_on_shift_halves_when_the_ssds_share_of_the_heat_falls() {
        let mut s = Stats::new(DEFAULT_AGING);
        s.apply(&create(1, Placement::On(Tier::Ssd)), &mut no_groups);
        s.apply(&create(2, Placement::On(Tier::Hdd)), &mut no_groups);
        let read_on = |s: &mut Stats, ino: Ino, tier: Tier, len: u64| {
            s.apply(&ev(ino, 1, EventKind::Read { off: 0, len, tier, fragment: false }), &mut no_groups)
        };
        // A window is 500 requests of 4 KiB. Three windows at 60 % from
        // the SSD: steady, no halving.
        for _ in 0..3 {
            for k in 0..500 {
                read_on(&mut s, if k % 5 < 3 { 1 } else { 2 }, if k % 5 < 3 { Tier::Ssd } else { Tier::Hdd }, 4096);
            }
            assert_eq!(s.age_on_shift(), 0);
        }
        // A scan (big requests from the HDD, little heat each) does not
        // end a window, nor look like a move.
        for _ in 0..2000 {
            read_on(&mut s, 2, Tier::Hdd, 1 << 20);
        }
        assert_eq!(s.age_on_shift(), 0);
        // The hot set moved: a window at 30 %.
        let before = s.get(2).unwrap().counter;
        for k in 0..500 {
            read_on(&mut s, if k % 10 < 3 { 1 } else { 2 }, if k % 10 < 3 { Tier::Ssd } else { Tier::Hdd }, 4096);
        }
        let heat = before + 350 * 64;
        assert_eq!(s.age_on_shift(), SHIFT_HALVINGS);
        assert_eq!(s.get(2).unwrap().counter, heat >> SHIFT_HALVINGS);
        // While the share stays at its new level (the policy has not
        // brought the new hot set over yet) it halves no more.
        for _ in 0..8 {
            for k in 0..500 {
                read_on(&mut s, if k % 10 < 3 { 1 } else { 2 }, if k % 10 < 3 { Tier::Ssd } else { Tier::Hdd }, 4096);
            }
            assert_eq!(s.age_on_shift(), 0, "one move, one halving");
        }
    }

    #[test]
    fn opens_whose_io_no_heat_source_sees_count_the_whole_file() {
        let mut s = Stats::new(DEFAULT_AGING);
        let open = |ino, size| ev(ino, 1, EventKind::Open { write: false, tier: Tier::Hdd, size, unseen: true });
        for i in 1..=3 {
            s.apply(&create(i, Placement::On(Tier::Hdd)), &mut no_groups);
        }
        s.apply(&open(1, 4000), &mut no_groups);
        s.apply(&open(2, 10 << 20), &mut no_groups);
        s.apply(&ev(3, 1, EventKind::Open { write: false, tier: Tier::Hdd, size: 10, unseen: false }), &mut no_groups);
        assert_eq!(s.get(1).unwrap().counter, 64);
        assert_eq!(s.get(2).unwrap().counter, 1);
        assert_eq!(s.get(3).unwrap().counter, 0, "userspace opens are not accesses");
        assert_eq!(s.served.reqs, [0, 2]);
    }

    #[test]
    fn the_tail_of_a_split_request_is_not_a_request() {
        let mut s = Stats::new(DEFAULT_AGING);
        let r = |off, len, fragment| ev(1, 1, EventKind::Read { off, len, tier: Tier::Hdd, fragment });
        s.apply(&create(1, Placement::On(Tier::Hdd)), &mut no_groups);
        s.apply(&r(0, 1047600, false), &mut no_groups);
        s.apply(&r(1047600, 976, true), &mut no_groups);
        let f = s.get(1).unwrap();
        assert_eq!((f.counter, f.reads, f.read_bytes), (1, 1, 1 << 20));
        assert_eq!(s.served.reqs, [0, 1]);
        assert_eq!(s.served.bytes, [0, 1 << 20]);
    }

    #[test]
    fn an_access_after_the_removal_does_not_bring_a_file_back() {
        // Replacing files by rename(tmp, existing) left the replaced inodes
        // tracked: reads and closes of the old file queued before its
        // removal was taken in came after it and created it again.
        let mut s = Stats::new(DEFAULT_AGING);
        s.apply(&create(1, Placement::On(Tier::Ssd)), &mut no_groups);
        s.apply(&ev(1, 1, EventKind::Remove), &mut no_groups);
        s.apply(&read(1, 1, 4096), &mut no_groups);
        s.apply(
            &ev(1, 1, EventKind::Write { off: 0, len: 1, tier: Tier::Ssd, size: 9, fragment: false }),
            &mut no_groups,
        );
        s.apply(&ev(1, 1, EventKind::Open { write: false, tier: Tier::Ssd, size: 9, unseen: true }), &mut no_groups);
        s.apply(&ev(1, 1, EventKind::Close { size: 9 }), &mut no_groups);
        s.apply(&ev(1, 1, EventKind::Placed { placement: Placement::On(Tier::Hdd) }), &mut no_groups);
        assert_eq!(s.len(), 0);
        assert!(s.check_index());
    }

    #[test]
    fn served_counts_and_hit_ratio() {
        let mut s = Stats::new(DEFAULT_AGING);
        s.apply(&ev(1, 1, EventKind::Read { off: 0, len: 100, tier: Tier::Ssd, fragment: false }), &mut no_groups);
        s.apply(&ev(1, 1, EventKind::Read { off: 0, len: 100, tier: Tier::Ssd, fragment: false }), &mut no_groups);
        s.apply(&ev(1, 1, EventKind::Read { off: 0, len: 100, tier: Tier::Hdd, fragment: false }), &mut no_groups);
        assert_eq!(s.served.reqs, [2, 1]);
        assert!((s.served.ssd_hit_ratio() - 2.0 / 3.0).abs() < 1e-9);
    }

    #[derive(Clone, Debug)]
    enum MOp {
        Create(u64, u8, u32),
        Read(u64, u64),
        Remove(u64),
        Place(u64, u8),
        Group(u64, u32),
        Age(u64),
    }

    fn mop() -> impl Strategy<Value = MOp> {
        let ino = 1..20u64;
        prop_oneof![
            1 => (ino.clone(), 0..3u8, 0..3u32).prop_map(|(i, r, g)| MOp::Create(i, r, g)),
            4 => (ino.clone(), 0..100_000u64).prop_map(|(i, l)| MOp::Read(i, l)),
            1 => (ino.clone()).prop_map(MOp::Remove),
            1 => (ino.clone(), 0..3u8).prop_map(|(i, r)| MOp::Place(i, r)),
            1 => (ino, 0..3u32).prop_map(|(i, g)| MOp::Group(i, g)),
            1 => (0..200u64).prop_map(MOp::Age),
        ]
    }

    /// The naive model: a map scanned in full for every query.
    #[derive(Default)]
    struct Model {
        files: HashMap<Ino, (u32, u64, Residence, Group)>,
        seq: u64,
    }

    proptest! {
        #[test]
        fn index_agrees_with_a_naive_model(ops in proptest::collection::vec(mop(), 1..200)) {
            let mut s = Stats::new(Duration::from_secs(60));
            let mut m = Model::default();
            let mut now = 0u64;
            s.age(Timestamp::from_secs(0));
            let mut last_aged = 0u64;
            let groups: HashMap<Ino, Group> = HashMap::new();
            for op in ops {
                match op {
                    MOp::Create(i, r, g) => {
                        let r = Residence::decode(r).unwrap();
                        s.insert(i, FileStats { residence: r, group: g, ..FileStats::default() });
                        m.files.insert(i, (0, 0, r, g));
                    }
                    MOp::Read(i, len) => {
                        s.apply(&read(i, now, len), &mut |p| groups.get(&p).copied().unwrap_or(0));
                        // Only a tracked file counts the access.
                        m.seq += 1;
                        if let Some(e) = m.files.get_mut(&i) {
                            e.0 = counter::bump(e.0, counter::pages(0, len));
                            e.1 = m.seq;
                        }
                    }
                    MOp::Remove(i) => {
                        s.remove(i);
                        m.files.remove(&i);
                    }
                    MOp::Place(i, r) => {
                        let r = Residence::decode(r).unwrap();
                        s.set_residence(i, r);
                        if let Some(e) = m.files.get_mut(&i) { e.2 = r; }
                    }
                    MOp::Group(i, g) => {
                        s.set_group(i, g);
                        if let Some(e) = m.files.get_mut(&i) { e.3 = g; }
                    }
                    MOp::Age(secs) => {
                        now += secs;
                        let periods = ((now - last_aged) / 60).min(32) as u32;
                        prop_assert_eq!(s.age(Timestamp::from_secs(now)), periods);
                        if periods > 0 {
                            last_aged += 60 * periods as u64;
                            for e in m.files.values_mut() { e.0 = e.0.checked_shr(periods).unwrap_or(0); }
                        }
                    }
                }
                prop_assert!(s.check_index());
                prop_assert_eq!(s.len(), m.files.len());
                // Cold and warm entries together, in inode order.
                let mut want_inos: Vec<Ino> = m.files.keys().copied().collect();
                want_inos.sort_unstable();
                let got_inos: Vec<Ino> = s.iter().map(|(i, _)| i).collect();
                prop_assert_eq!(got_inos, want_inos);
                for g in 0..3u32 {
                    for r in [Residence::Ssd, Residence::Hdd, Residence::Cached] {
                        let mut want: Vec<(u32, u64, Ino)> = m.files.iter()
                            .filter(|(_, e)| e.2 == r && e.3 == g)
                            .map(|(i, e)| (e.0, e.1, *i)).collect();
                        want.sort();
                        let got: Vec<(u32, u64, Ino)> = s.coldest(g, r).map(|(i, f)| (f.counter, f.seq, i)).collect();
                        prop_assert_eq!(&got, &want);
                        let hot = s.hottest(g, r).next().map(|(i, _)| i);
                        prop_assert_eq!(hot, want.last().map(|k| k.2));
                    }
                }
                let want_cold = m.files.iter().filter(|(_, e)| e.2.on_ssd()).map(|(i, e)| (e.0, e.1, *i)).min();
                let got_cold = s.coldest_on_ssd(&mut |_, _| false).map(|(i, f)| (f.counter, f.seq, i));
                prop_assert_eq!(got_cold, want_cold);
                // Every SSD file over all groups, coldest first, in one pass.
                let mut want_all: Vec<(u32, u64, Ino)> =
                    m.files.iter().filter(|(_, e)| e.2.on_ssd()).map(|(i, e)| (e.0, e.1, *i)).collect();
                want_all.sort();
                let got_all: Vec<_> = s.ssd_coldest_first().map(|(i, f)| (f.counter, f.seq, i)).collect();
                prop_assert_eq!(got_all, want_all);
            }
        }
    }

    #[derive(Clone, Debug)]
    enum SetOp {
        Insert(Ino),
        Remove(Ino),
        Take(usize),
    }

    proptest! {
        /// The bitmap set of dirty and removed entries against a BTreeSet.
        #[test]
        fn ino_set_agrees_with_a_btree_set(ops in proptest::collection::vec(prop_oneof![
            3 => (0..300u64).prop_map(SetOp::Insert),
            2 => (0..300u64).prop_map(SetOp::Remove),
            1 => (0..80usize).prop_map(SetOp::Take),
        ], 1..300)) {
            let mut s = InoSet::default();
            let mut m = BTreeSet::new();
            for op in ops {
                match op {
                    SetOp::Insert(i) => { s.insert(i); m.insert(i); }
                    SetOp::Remove(i) => { s.remove(i); m.remove(&i); }
                    SetOp::Take(n) => {
                        let want: Vec<Ino> = m.iter().take(n).copied().collect();
                        for i in &want { m.remove(i); }
                        prop_assert_eq!(s.take(n), want);
                    }
                }
                prop_assert_eq!(s.len(), m.len());
                prop_assert!(s.iter().eq(m.iter().copied()));
                prop_assert!(s.iter().rev().eq(m.iter().rev().copied()));
                prop_assert!((0..300u64).all(|i| s.contains(i) == m.contains(&i)));
            }
            prop_assert_eq!(s.take(usize::MAX), m.into_iter().collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_file_never_accessed_takes_a_cold_entry_until_its_first_access() {
        let mut s = Stats::new(DEFAULT_AGING);
        s.apply(&create(7, Placement::On(Tier::Hdd)), &mut no_groups);
        assert_eq!((s.files.cold.len(), s.files.warm.len()), (1, 0));
        s.apply(&read(7, 10, 4096), &mut no_groups);
        assert_eq!((s.files.cold.len(), s.files.warm.len()), (0, 1));
        let f = s.get(7).unwrap();
        assert_eq!((f.reads, f.read_bytes, f.residence), (1, 4096, Residence::Hdd));
        assert!(f.counter > 0);
        assert_eq!(s.remove(7).map(|f| f.reads), Some(1));
        assert!(s.is_empty());
    }
}
