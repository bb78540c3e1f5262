//! Device models for emulation and simulation (design brief, "Device
//! profiles"). Pure: the time comes in, a completion time goes out.
//!
//! A request costs an access time unless it continues the previous request
//! on that device (same file, next offset), plus its size over the
//! device's bandwidth. The device serves one request at a time: a request
//! starts when the previous one finished. With a modelled RAM cache, reads
//! of cached pages and metadata lookups of recently seen entries cost
//! nothing, and writes are written back: the caller goes on at once unless
//! the backlog of unwritten data exceeds a quarter of the cache.
//!
//! A profile may also degrade under write load, as an SSD does when its
//! garbage collection cannot keep up with random writes (HybridStore §I,
//! Wu-Reddy §III): every random write (one that pays the access time) adds
//! its length to a debt, the debt drains at the device's garbage-collection
//! rate over the time between requests, and once it is past a threshold
//! every request's access time is multiplied by a factor until the debt
//! is back at a recovery mark ([`Degrade`]).
//!
//! A spinning disk may also go to standby ([`Standby`]): after an idle
//! time without a request its platters stop, and the next request that
//! reaches them waits for the spin-up first.

use crate::clock::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::time::Duration;

const PAGE: u64 = 4096;

/// How fast a device is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Name.
    pub name: String,
    /// Sequential read bandwidth, bytes per second.
    pub read_bw: f64,
    /// Sequential write bandwidth, bytes per second.
    pub write_bw: f64,
    /// Access time of a read that does not continue the previous request.
    pub read_access: Duration,
    /// Access time of a write that does not continue the previous request.
    pub write_access: Duration,
    /// How the device slows down under random writes (default: never).
    #[serde(default)]
    pub degrade: Option<Degrade>,
}

/// Degradation under write load: the device's garbage collection absorbs
/// `write_rate` bytes of random writes per second; what it cannot absorb
/// is a debt, and while the debt exceeds `threshold` the access time of
/// every write is multiplied by `factor` and of every read by
/// `read_factor` (reads wait less: the collector frees blocks for writes). Values are not checked here:
/// `write_rate` and `threshold` should be positive and `factor` at least 1
/// (a factor whose product is not a valid duration leaves access times as
/// they are).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Degrade {
    /// Bytes per second of random writes the device absorbs without
    /// falling behind (its garbage-collection rate); the debt drains at it.
    pub write_rate: f64,
    /// Bytes of debt past which the device is degraded.
    pub threshold: f64,
    /// While degraded, the access time of every write (data or metadata)
    /// is multiplied by this (>= 1).
    pub factor: f64,
    /// ... and of every read (>= 1; 1 when not given).
    #[serde(default = "unit_factor")]
    pub read_factor: f64,
    /// Debt at or below which a degraded device is fast again (at most
    /// `threshold`; the threshold when not given): an SSD's collector,
    /// once behind, works in the foreground until it has a reserve of free
    /// blocks again, so it stays slow for a while after the load eases.
    #[serde(default)]
    pub recover: Option<f64>,
}

fn unit_factor() -> f64 {
    1.0
}

/// Standby of a spinning disk, as a host sets it with `hdparm -S`: after
/// `idle` without a request the platters stop; the next request that
/// reaches them (not one its cache answers, nor a sync with nothing to
/// write) waits `spinup` first, and the head position is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Standby {
    /// Idle time after which the disk spins down.
    pub idle: Duration,
    /// How long a spin-up takes.
    pub spinup: Duration,
}

const MB: f64 = 1e6;

impl Profile {
    /// A profile from the figures data sheets give: MB/s and random 4-KB
    /// IOPS. The access time is what is left of one random request after
    /// transferring its 4 KB.
    pub fn from_iops(name: &str, read_mbps: f64, write_mbps: f64, read_iops: f64, write_iops: f64) -> Self {
        let access = |iops: f64, bw: f64| Duration::from_secs_f64((1.0 / iops - PAGE as f64 / bw).max(0.0));
        Profile {
            name: name.into(),
            read_bw: read_mbps * MB,
            write_bw: write_mbps * MB,
            read_access: access(read_iops, read_mbps * MB),
            write_access: access(write_iops, write_mbps * MB),
            degrade: None,
        }
    }

    /// A profile from MB/s and access times.
    pub fn from_access(
        name: &str,
        read_mbps: f64,
        write_mbps: f64,
        read_access: Duration,
        write_access: Duration,
    ) -> Self {
        Profile {
            name: name.into(),
            read_bw: read_mbps * MB,
            write_bw: write_mbps * MB,
            read_access,
            write_access,
            degrade: None,
        }
    }

    /// This profile, degrading under write load as `d` says.
    pub fn degrading(self, d: Degrade) -> Profile {
        Profile { degrade: Some(d), ..self }
    }

    /// The built-in profiles (design brief: Loris Table I, Hystor Table 1).
    pub fn builtin() -> Vec<Profile> {
        vec![
            Profile::from_iops("hdd-7200", 126.0, 126.0, 112.0, 91.0),
            Profile::from_iops("ssd-sata", 550.0, 500.0, 35_000.0, 75_000.0),
            Profile::from_access("hdd-15k", 125.0, 125.0, Duration::from_micros(3600), Duration::from_micros(3600)),
            Profile::from_access("ssd-slc", 250.0, 180.0, Duration::from_micros(125), Duration::from_micros(125)),
            // ssd-sata's figures, degrading under random writes as the
            // Transcend drive of Wu-Reddy §V-B did, whose writes were slower
            // than the magnetic disk's: its garbage collection absorbs
            // 256 KB/s (62.5 random 4-KB writes a second, fewer than
            // hdd-7200's 91), it degrades past 8 MB of debt and stays
            // degraded until the debt is back at 4 MB. The factor makes a
            // degraded random 4-KB write cost about three times hdd-7200's:
            //   ssd-sata write access = 1/75 000 - 4096/500e6 = 13.333 - 8.192 = 5.141 µs
            //   hdd-7200 random 4-KB write = 1/91 = 10.989 ms; three times that = 32.967 ms
            //   factor = (32.967 ms - 8.192 µs) / 5.141 µs = 6411, rounded to 6400
            //   degraded 4-KB write = 6400 × 5.141 µs + 8.192 µs = 32.91 ms (2.99 × hdd-7200)
            // Reads wait for the collector less: 20 × 21.124 µs + 7.447 µs =
            // 0.43 ms for a degraded random 4-KB read, still 20 times
            // faster than hdd-7200's.
            Profile::from_iops("ssd-gc", 550.0, 500.0, 35_000.0, 75_000.0).degrading(Degrade {
                write_rate: 256e3,
                threshold: 8e6,
                factor: 6400.0,
                read_factor: 20.0,
                recover: Some(4e6),
            }),
        ]
    }

    /// A built-in profile by name.
    pub fn named(name: &str) -> Option<Profile> {
        Profile::builtin().into_iter().find(|p| p.name == name)
    }

    /// Time to transfer `bytes`.
    pub fn transfer(&self, bytes: u64, write: bool) -> Duration {
        let bw = if write { self.write_bw } else { self.read_bw };
        Duration::from_secs_f64(bytes as f64 / bw)
    }
}

/// A request to a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Req {
    /// Read `len` bytes at `off` of object `file`.
    Read {
        /// Object identity (backing inode).
        file: u64,
        /// Offset.
        off: u64,
        /// Length.
        len: u64,
    },
    /// Write.
    Write {
        /// Object identity.
        file: u64,
        /// Offset.
        off: u64,
        /// Length.
        len: u64,
    },
    /// A read or write that bypasses the RAM cache (`O_DIRECT`): the device
    /// serves it whatever is cached, and a write is not absorbed.
    Direct {
        /// Object identity.
        file: u64,
        /// Offset.
        off: u64,
        /// Length.
        len: u64,
        /// A write.
        write: bool,
    },
    /// A metadata lookup (stat, open, readdir) of entry `key`.
    MetaRead {
        /// Entry identity.
        key: u64,
    },
    /// A metadata change (create, unlink, rename, chmod ...) of entry `key`.
    MetaWrite {
        /// Entry identity.
        key: u64,
    },
    /// Wait until everything written so far is on the device.
    Sync,
}

impl Req {
    /// Number of kinds [`Req::kind`] tells apart.
    pub const KINDS: usize = 5;
    /// Names of the kinds, by [`Req::kind`].
    pub const KIND_NAMES: [&'static str; Req::KINDS] = ["read", "write", "meta-read", "meta-write", "sync"];

    /// Its kind: 0 read, 1 write (direct ones included), 2 metadata read,
    /// 3 metadata write, 4 sync.
    pub fn kind(&self) -> usize {
        match self {
            Req::Read { .. } | Req::Direct { write: false, .. } => 0,
            Req::Write { .. } | Req::Direct { write: true, .. } => 1,
            Req::MetaRead { .. } => 2,
            Req::MetaWrite { .. } => 3,
            Req::Sync => 4,
        }
    }
}

/// An LRU set of pages (or metadata keys), bounded in pages.
#[derive(Debug, Default)]
struct Lru {
    cap: usize,
    seq: u64,
    /// Each key's latest touch (hashed fast: looked up on every request).
    at: rustc_hash::FxHashMap<(u64, u64), u64>,
    order: VecDeque<((u64, u64), u64)>,
}

impl Lru {
    fn new(cap: usize) -> Self {
        Lru { cap, ..Lru::default() }
    }
    fn contains(&self, k: (u64, u64)) -> bool {
        self.at.contains_key(&k)
    }
    fn touch(&mut self, k: (u64, u64)) {
        if self.cap == 0 {
            return;
        }
        self.seq += 1;
        self.at.insert(k, self.seq);
        self.order.push_back((k, self.seq));
        while self.at.len() > self.cap {
            let Some((old, s)) = self.order.pop_front() else { break };
            if self.at.get(&old) == Some(&s) {
                self.at.remove(&old);
            }
        }
        // Keep the queue from growing without bound on repeated touches.
        if self.order.len() > 4 * self.cap + 1024 {
            let at = &self.at;
            self.order.retain(|(k, s)| at.get(k) == Some(s));
        }
    }
    fn clear(&mut self) {
        self.at.clear();
        self.order.clear();
    }
}

/// One emulated device. See the module documentation.
#[derive(Debug)]
pub struct Device {
    /// Its profile.
    pub profile: Profile,
    busy_until: Timestamp,
    last: Option<(u64, u64)>,
    cache: Option<Lru>,
    cache_bytes: u64,
    /// Busy time accumulated (for reports).
    pub busy: Duration,
    /// Requests that reached the device (cache misses).
    pub requests: u64,
    /// Requests that reached the device while it was degraded.
    pub degraded_requests: u64,
    /// Requests submitted (cache hits included), by kind: see [`Req::kind`].
    pub submitted: [u64; Req::KINDS],
    /// Random-write bytes garbage collection has not absorbed yet.
    debt: f64,
    /// Until when the debt has been drained.
    debt_at: Timestamp,
    /// Whether the last request found the device degraded.
    degraded: bool,
    /// Its standby setting (none: it never spins down).
    standby: Option<Standby>,
    /// When it was last active (the end of its last request, or a reset);
    /// none before either, when it is taken to be spinning.
    active_at: Option<Timestamp>,
    /// When it was told to spin down ([`Device::spin_down`]), if it was
    /// and no request came since.
    told_down: Option<Timestamp>,
    /// Spin-ups so far.
    pub spinups: u64,
    /// Standby time of the stretches that ended (see [`Device::standby_time`]).
    standby_done: Duration,
}

/// The key space for metadata entries in the cache (distinct from pages).
const META: u64 = u64::MAX;

impl Device {
    /// A device with a RAM cache of `cache_bytes` (0: none).
    pub fn new(profile: Profile, cache_bytes: u64) -> Self {
        let cache = (cache_bytes > 0).then(|| Lru::new((cache_bytes / PAGE) as usize));
        Device {
            profile,
            busy_until: Timestamp(0),
            last: None,
            cache,
            cache_bytes,
            busy: Duration::ZERO,
            requests: 0,
            degraded_requests: 0,
            submitted: [0; Req::KINDS],
            debt: 0.0,
            debt_at: Timestamp(0),
            degraded: false,
            standby: None,
            active_at: None,
            told_down: None,
            spinups: 0,
            standby_done: Duration::ZERO,
        }
    }

    /// This device, spinning down when idle as `s` says.
    pub fn with_standby(mut self, s: Standby) -> Self {
        self.standby = Some(s);
        self
    }

    /// Its standby setting.
    pub fn standby(&self) -> Option<Standby> {
        self.standby
    }

    /// When the platters stopped (or will stop if nothing comes), given
    /// that nothing has reached them since their last activity.
    fn sleeps_at(&self) -> Option<Timestamp> {
        let natural = self.standby.and_then(|s| Some(self.active_at?.plus(s.idle)));
        match (self.told_down, natural) {
            (Some(t), Some(n)) => Some(t.min(n)),
            (t, n) => t.or(n),
        }
    }

    /// Whether the disk is in standby at `now`.
    pub fn asleep(&self, now: Timestamp) -> bool {
        self.sleeps_at().is_some_and(|t| t <= now && self.busy_until <= t)
    }

    /// Time spent in standby up to `now` (the current stretch included).
    pub fn standby_time(&self, now: Timestamp) -> Duration {
        let current = match self.sleeps_at() {
            Some(t) if self.asleep(now) => now.since(t),
            _ => Duration::ZERO,
        };
        self.standby_done + current
    }

    /// Spins the disk down at `now` (`hdparm -y`), or when the request it
    /// serves has finished; nothing without a standby setting.
    pub fn spin_down(&mut self, now: Timestamp) {
        if self.standby.is_some() {
            self.told_down = Some(now.max(self.busy_until));
        }
    }

    /// Forgets the cache, the head position, the backlog and the
    /// garbage-collection debt (a cold start).
    pub fn reset(&mut self, now: Timestamp) {
        // A disk in standby stays there (its stretch so far counted);
        // one spinning is active now.
        if self.asleep(now) {
            self.standby_done = self.standby_time(now);
            self.told_down = Some(now);
        } else {
            self.active_at = Some(now);
            self.told_down = None;
        }
        if let Some(c) = &mut self.cache {
            c.clear();
        }
        self.last = None;
        self.busy_until = now;
        self.debt = 0.0;
        self.debt_at = now;
        self.degraded = false;
    }

    /// Whether the device was degraded for the last request that reached
    /// it (false without a [`Degrade`] model, before any request and after
    /// a reset).
    pub fn degraded(&self) -> bool {
        self.degraded
    }

    /// Drains the debt for the time since the last request, adds
    /// `random_write` bytes and returns whether the device is degraded now.
    fn account_debt(&mut self, now: Timestamp, random_write: u64) -> bool {
        let Some(g) = &self.profile.degrade else {
            // A profile without the model (perhaps just swapped in): not
            // degraded, and a later degrading profile starts from that.
            self.degraded = false;
            return false;
        };
        let elapsed = now.since(self.debt_at).as_secs_f64();
        self.debt_at = self.debt_at.max(now);
        self.debt = (self.debt - g.write_rate * elapsed).max(0.0) + random_write as f64;
        // A mark above the threshold (a profile sent over the socket is
        // not checked) counts as the threshold.
        let limit = if self.degraded { g.recover.unwrap_or(g.threshold).min(g.threshold) } else { g.threshold };
        self.degraded = self.debt > limit;
        self.degraded
    }

    /// Occupies the device for one request and returns when it completes.
    fn serve(&mut self, now: Timestamp, file: u64, off: u64, len: u64, write: bool) -> Timestamp {
        let mut start = self.busy_until.max(now);
        if let Some(s) = self.standby {
            if self.asleep(start) {
                self.standby_done = self.standby_time(start);
                self.spinups += 1;
                start = start.plus(s.spinup);
                self.last = None;
            }
        }
        self.told_down = None;
        let continues = self.last == Some((file, off));
        let degraded = self.account_debt(now, if write && !continues { len } else { 0 });
        let mut access = if continues {
            Duration::ZERO
        } else if write {
            self.profile.write_access
        } else {
            self.profile.read_access
        };
        if degraded {
            self.degraded_requests += 1;
            if let Some(g) = &self.profile.degrade {
                let f = if write { g.factor } else { g.read_factor };
                access = Duration::try_from_secs_f64(access.as_secs_f64() * f).unwrap_or(access);
            }
        }
        let cost = access + self.profile.transfer(len, write);
        self.busy_until = start.plus(cost);
        self.active_at = Some(self.busy_until);
        self.busy += cost;
        self.requests += 1;
        self.last = Some((file, off + len));
        self.busy_until
    }

    /// When writes return: at once while the backlog is under a quarter of
    /// the cache's worth of sequential writing, else when it is back there.
    fn write_back(&self, now: Timestamp, done: Timestamp) -> Timestamp {
        let allowance = self.profile.transfer(self.cache_bytes / 4, true);
        let backlog = done.since(now);
        if backlog <= allowance {
            now
        } else {
            now.plus(backlog - allowance)
        }
    }

    /// Submits a request at `now`; returns when the caller may go on.
    pub fn submit(&mut self, now: Timestamp, req: Req) -> Timestamp {
        self.submitted[req.kind()] += 1;
        match req {
            Req::Read { file, off, len } => {
                if len == 0 {
                    return now;
                }
                let first = off / PAGE;
                let last = (off + len - 1) / PAGE;
                if let Some(c) = &mut self.cache {
                    if (first..=last).all(|p| c.contains((file, p))) {
                        for p in first..=last {
                            c.touch((file, p));
                        }
                        return now;
                    }
                    for p in first..=last {
                        c.touch((file, p));
                    }
                }
                self.serve(now, file, off, len, false)
            }
            Req::Write { file, off, len } => {
                if len == 0 {
                    return now;
                }
                let done = self.serve(now, file, off, len, true);
                match &mut self.cache {
                    None => done,
                    Some(c) => {
                        for p in off / PAGE..=(off + len - 1) / PAGE {
                            c.touch((file, p));
                        }
                        self.write_back(now, done)
                    }
                }
            }
            Req::Direct { len: 0, .. } => now,
            Req::Direct { file, off, len, write } => self.serve(now, file, off, len, write),
            Req::MetaRead { key } => {
                if let Some(c) = &mut self.cache {
                    if c.contains((META, key)) {
                        c.touch((META, key));
                        return now;
                    }
                    c.touch((META, key));
                }
                self.serve(now, META, key, 0, false)
            }
            Req::MetaWrite { key } => {
                let done = self.serve(now, META, key, 0, true);
                match &mut self.cache {
                    None => done,
                    Some(c) => {
                        c.touch((META, key));
                        self.write_back(now, done)
                    }
                }
            }
            Req::Sync => self.busy_until.max(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};

    fn ms(x: f64) -> Duration {
        Duration::from_secs_f64(x / 1000.0)
    }

    fn close(a: Duration, b: Duration) -> bool {
        (a.as_secs_f64() - b.as_secs_f64()).abs() < 1e-6
    }

    #[test]
    fn profiles_reproduce_their_data_sheet_iops() {
        let hdd = Profile::named("hdd-7200").unwrap();
        let one = hdd.read_access + hdd.transfer(4096, false);
        assert!((1.0 / one.as_secs_f64() - 112.0).abs() < 1e-3);
        let ssd = Profile::named("ssd-sata").unwrap();
        let w = ssd.write_access + ssd.transfer(4096, true);
        assert!((1.0 / w.as_secs_f64() / 75_000.0 - 1.0).abs() < 1e-3, "within the nanosecond rounding");
        assert_eq!(Profile::named("hdd-15k").unwrap().read_access, Duration::from_micros(3600));
        assert!(Profile::named("floppy").is_none());
    }

    #[test]
    fn random_requests_pay_the_access_time_sequential_ones_do_not() {
        let clock = ManualClock::new(Timestamp::from_secs(10));
        let p = Profile::from_access("t", 100.0, 50.0, ms(5.0), ms(7.0));
        let mut d = Device::new(p.clone(), 0);
        let t0 = clock.now();
        let a = d.submit(t0, Req::Read { file: 1, off: 0, len: 1_000_000 });
        assert!(close(a.since(t0), ms(5.0) + ms(10.0)), "access + 1 MB at 100 MB/s");
        // Continues the previous request: bandwidth only.
        clock.set(a);
        let b = d.submit(clock.now(), Req::Read { file: 1, off: 1_000_000, len: 1_000_000 });
        assert!(close(b.since(a), ms(10.0)));
        // Another file: access time again; writes use the write figures.
        let c = d.submit(b, Req::Write { file: 2, off: 0, len: 500_000 });
        assert!(close(c.since(b), ms(7.0) + ms(10.0)));
        assert_eq!(d.requests, 3);
    }

    #[test]
    fn one_request_at_a_time_queues_the_next() {
        let p = Profile::from_access("t", 100.0, 100.0, ms(10.0), ms(10.0));
        let mut d = Device::new(p, 0);
        let t0 = Timestamp::from_secs(1);
        let a = d.submit(t0, Req::MetaRead { key: 1 });
        let b = d.submit(t0, Req::MetaRead { key: 2 });
        assert!(close(a.since(t0), ms(10.0)));
        assert!(close(b.since(t0), ms(20.0)), "the second waits for the first");
        // A request after the device went idle starts at once.
        let late = t0.plus(Duration::from_secs(1));
        assert!(close(d.submit(late, Req::MetaRead { key: 3 }).since(late), ms(10.0)));
        assert_eq!(d.submit(late, Req::Sync), late.plus(ms(10.0)));
    }

    #[test]
    fn the_ram_cache_serves_reread_pages_and_absorbs_writes() {
        let p = Profile::from_access("t", 100.0, 100.0, ms(10.0), ms(10.0));
        // 16 MB: writes may run 4 MB (40 ms at 100 MB/s) ahead of the device.
        let mut d = Device::new(p, 4096 * 4096);
        let t0 = Timestamp::from_secs(1);
        let a = d.submit(t0, Req::Read { file: 1, off: 0, len: 8192 });
        assert!(a > t0);
        assert_eq!(d.submit(a, Req::Read { file: 1, off: 4096, len: 100 }), a, "cached page: free");
        let b = d.submit(a, Req::Read { file: 1, off: 4096, len: 8192 });
        assert!(b > a, "one page missing: the device is used");
        // Writes go on at once while the backlog is small ...
        assert_eq!(d.submit(b, Req::Write { file: 3, off: 0, len: 4096 }), b);
        // ... but fsync waits for them.
        assert!(d.submit(b, Req::Sync) > b);
        // A backlog over a quarter of the cache makes the writer wait.
        let mut t = b;
        for i in 0..200 {
            t = d.submit(t, Req::Write { file: 4 + i, off: 0, len: 4096 });
        }
        assert!(t > b, "the writer was throttled");
        // Metadata lookups are cached like pages.
        let m = d.submit(t, Req::MetaRead { key: 77 });
        assert_eq!(d.submit(m, Req::MetaRead { key: 77 }), m);
        // A cold start forgets it all.
        d.reset(m);
        assert!(d.submit(m, Req::MetaRead { key: 77 }) > m);
    }

    #[test]
    fn direct_requests_reach_the_device_whatever_is_cached() {
        let p = Profile::from_access("t", 100.0, 100.0, ms(10.0), ms(10.0));
        let mut d = Device::new(p, 16 << 20);
        let t0 = Timestamp::from_secs(10);
        let read = Req::Read { file: 1, off: 0, len: 4096 };
        let first = d.submit(t0, read);
        assert!(first > t0);
        assert_eq!(d.submit(first, read), first, "a buffered reread comes from the cache");
        let direct = d.submit(first, Req::Direct { file: 1, off: 0, len: 4096, write: false });
        assert!(direct.since(first) >= ms(10.0), "a direct read pays the access time");
        let w = d.submit(direct, Req::Write { file: 1, off: 0, len: 4096 });
        assert_eq!(w, direct, "a buffered write is absorbed");
        let dw = d.submit(w, Req::Direct { file: 1, off: 8192, len: 4096, write: true });
        assert!(dw.since(w) >= ms(10.0), "a direct write waits for the device");
    }

    #[test]
    fn the_cache_is_bounded_and_evicts_the_least_recent() {
        let mut l = Lru::new(2);
        l.touch((1, 1));
        l.touch((1, 2));
        l.touch((1, 1));
        l.touch((1, 3));
        assert!(l.contains((1, 1)) && l.contains((1, 3)) && !l.contains((1, 2)));
    }

    /// 1 ms reads, 2 ms writes, 100 MB/s; degraded (×10) past 1 MB of
    /// random-write debt, which drains at 1 MB/s.
    fn degrading() -> Device {
        let p = Profile::from_access("t", 100.0, 100.0, ms(1.0), ms(2.0)).degrading(Degrade {
            write_rate: 1e6,
            threshold: 1e6,
            factor: 10.0,
            read_factor: 10.0,
            recover: None,
        });
        Device::new(p, 0)
    }

    /// Random 100-KB writes to `files` at `now` (queued, so no time drains the debt).
    fn random_writes(d: &mut Device, now: Timestamp, files: std::ops::RangeInclusive<u64>) {
        for f in files {
            d.submit(now, Req::Write { file: f, off: 0, len: 100_000 });
        }
    }

    #[test]
    fn a_burst_of_random_writes_slows_every_request_until_the_debt_drains() {
        let mut d = degrading();
        let t0 = Timestamp::from_secs(10);
        random_writes(&mut d, t0, 1..=10);
        assert!(!d.degraded(), "a debt of exactly the threshold is not past it");
        assert_eq!(d.degraded_requests, 0);
        random_writes(&mut d, t0, 11..=11);
        assert!(d.degraded(), "1.1 MB of debt");
        assert_eq!(d.degraded_requests, 1, "the write that crosses the threshold is slowed too");
        // Later requests pay ten times the access time; the transfer is unchanged.
        let queued = d.submit(t0, Req::Sync);
        let r = d.submit(t0, Req::Read { file: 50, off: 0, len: 100_000 });
        assert!(close(r.since(queued), ms(10.0) + ms(1.0)), "{:?}", r.since(queued));
        let w = d.submit(t0, Req::Write { file: 51, off: 0, len: 1000 });
        assert!(close(w.since(r), ms(20.0) + ms(0.01)), "{:?}", w.since(r));
        let m = d.submit(t0, Req::MetaRead { key: 3 });
        assert!(close(m.since(w), ms(10.0)), "metadata too");
        assert_eq!(d.degraded_requests, 4);
        // 1.101 MB of debt: 50 ms drain 50 KB, not enough ...
        let t1 = t0.plus(ms(50.0));
        let queued = d.submit(t1, Req::Sync);
        let r = d.submit(t1, Req::Read { file: 60, off: 0, len: 100_000 });
        assert!(d.degraded());
        assert!(close(r.since(queued.max(t1)), ms(11.0)));
        // ... 200 ms drain 200 KB: back under the threshold, fast again.
        let t2 = t0.plus(ms(200.0));
        assert!(d.submit(t2, Req::Sync) <= t2, "the device is idle");
        let r = d.submit(t2, Req::Read { file: 61, off: 0, len: 100_000 });
        assert!(!d.degraded());
        assert!(close(r.since(t2), ms(2.0)));
        let w = d.submit(r, Req::Write { file: 62, off: 0, len: 100_000 });
        assert!(close(w.since(r), ms(3.0)));
        assert_eq!(d.degraded_requests, 5);
    }

    #[test]
    fn a_device_with_a_recovery_mark_stays_degraded_until_the_debt_is_back_there() {
        let mut d = degrading();
        if let Some(g) = &mut d.profile.degrade {
            g.recover = Some(0.5e6);
        }
        let t0 = Timestamp::from_secs(10);
        random_writes(&mut d, t0, 1..=11);
        assert!(d.degraded(), "1.1 MB of debt");
        // 1.1 MB, then 200 ms drain 200 KB: under the threshold, still
        // over the recovery mark.
        let t1 = t0.plus(ms(200.0));
        d.submit(t1, Req::Read { file: 60, off: 0, len: 1000 });
        assert!(d.degraded(), "0.9 MB of debt, past the 0.5-MB mark");
        // 400 ms more: 0.5 MB, at the mark: fast again ...
        let t2 = t1.plus(ms(400.0));
        d.submit(t2, Req::Read { file: 61, off: 0, len: 1000 });
        assert!(!d.degraded(), "0.5 MB of debt");
        // ... and degraded again only past the threshold, not the mark.
        random_writes(&mut d, t2, 1..=5);
        assert!(!d.degraded(), "1.0 MB of debt");
        random_writes(&mut d, t2, 6..=6);
        assert!(d.degraded(), "1.1 MB of debt");
    }

    #[test]
    fn sequential_writes_never_degrade_the_device() {
        let mut d = degrading();
        let t0 = Timestamp::from_secs(10);
        // One random write, then 100 MB continuing it, all at once.
        let mut t = d.submit(t0, Req::Write { file: 1, off: 0, len: 100_000 });
        for i in 1..=1000 {
            let next = d.submit(t0, Req::Write { file: 1, off: i * 100_000, len: 100_000 });
            assert!(close(next.since(t), ms(1.0)), "bandwidth only");
            t = next;
        }
        assert!(!d.degraded());
        assert_eq!(d.degraded_requests, 0);
        let r = d.submit(t0, Req::Read { file: 2, off: 0, len: 100_000 });
        assert!(close(r.since(t), ms(2.0)));
    }

    #[test]
    fn reset_clears_the_debt() {
        let mut d = degrading();
        let t0 = Timestamp::from_secs(10);
        random_writes(&mut d, t0, 1..=20);
        assert!(d.degraded());
        d.reset(t0);
        assert!(!d.degraded());
        let r = d.submit(t0, Req::Read { file: 50, off: 0, len: 100_000 });
        assert!(close(r.since(t0), ms(2.0)), "{:?}", r.since(t0));
        assert!(!d.degraded());
        // The count is a report figure: a reset keeps it.
        assert_eq!(d.degraded_requests, 10);
    }

    #[test]
    fn without_a_degrade_model_random_writes_cost_the_same_forever() {
        let mut d = Device::new(Profile::from_access("t", 100.0, 100.0, ms(1.0), ms(2.0)), 0);
        let t0 = Timestamp::from_secs(10);
        random_writes(&mut d, t0, 1..=1000);
        let queued = d.submit(t0, Req::Sync);
        let w = d.submit(t0, Req::Write { file: 5000, off: 0, len: 100_000 });
        assert!(close(w.since(queued), ms(3.0)));
        assert!(!d.degraded());
        assert_eq!(d.degraded_requests, 0);
    }

    #[test]
    fn ssd_gc_degraded_is_slower_than_hdd_7200_and_faster_when_not() {
        let hdd = Profile::named("hdd-7200").unwrap();
        let hdd_write = hdd.write_access + hdd.transfer(4096, true);
        let hdd_read = hdd.read_access + hdd.transfer(4096, false);
        let gc = Profile::named("ssd-gc").unwrap();
        let sata = Profile::named("ssd-sata").unwrap();
        assert_eq!(Profile { name: "ssd-sata".into(), degrade: None, ..gc.clone() }, sata, "ssd-sata's figures");
        let collects = gc.degrade.as_ref().unwrap().write_rate;
        assert!(
            collects / 4096.0 < 1.0 / hdd_write.as_secs_f64(),
            "it collects fewer random writes than the HDD takes"
        );
        let mut d = Device::new(gc, 0);
        let t0 = Timestamp::from_secs(10);
        let w = d.submit(t0, Req::Write { file: 0, off: 0, len: 4096 });
        assert!(w.since(t0) * 100 < hdd_write, "fresh: {:?}", w.since(t0));
        // 8 MB / 4 KB = 1953.1: the 1954th random 4-KB write crosses the threshold.
        for f in 1..=2000 {
            d.submit(t0, Req::Write { file: f, off: 0, len: 4096 });
        }
        assert!(d.degraded());
        assert_eq!(d.degraded_requests, 2001 - 1953);
        let queued = d.submit(t0, Req::Sync);
        let w = d.submit(t0, Req::Write { file: 9000, off: 0, len: 4096 });
        let slow = w.since(queued);
        assert!(slow > hdd_write, "degraded: {slow:?} vs {hdd_write:?}");
        let ratio = slow.as_secs_f64() / hdd_write.as_secs_f64();
        assert!((2.9..3.1).contains(&ratio), "about three times hdd-7200: {ratio}");
        let r = d.submit(t0, Req::Read { file: 9001, off: 0, len: 4096 });
        let read = r.since(w);
        assert!(read * 10 < hdd_read && read > Duration::from_micros(400), "degraded reads wait less: {read:?}");
        // The debt is about 8.2 MB, the queue of degraded writes is over
        // after 49 × 33 ms. 4 s at 256 KB/s drain 1 MB: under the
        // threshold, still degraded ...
        let later = t0.plus(Duration::from_secs(4));
        assert!(d.submit(later, Req::Sync) <= later);
        d.submit(later, Req::Read { file: 9002, off: 0, len: 4096 });
        assert!(d.degraded(), "over the 4-MB recovery mark");
        // ... 17 s drain 4.35 MB: fast again.
        let recovered = t0.plus(Duration::from_secs(17));
        let w = d.submit(recovered, Req::Write { file: 9003, off: 0, len: 4096 });
        assert!(!d.degraded());
        assert!(w.since(recovered) * 100 < hdd_write, "fast again: {:?}", w.since(recovered));
    }

    fn secs(x: u64) -> Duration {
        Duration::from_secs(x)
    }

    /// 10-ms access, 100 MB/s; standby after 60 s idle, 8-s spin-up.
    fn sleepy(cache: u64) -> Device {
        let p = Profile::from_access("t", 100.0, 100.0, ms(10.0), ms(10.0));
        Device::new(p, cache).with_standby(Standby { idle: secs(60), spinup: secs(8) })
    }

    #[test]
    fn an_idle_disk_spins_down_and_the_next_request_waits_for_the_spin_up() {
        let mut d = sleepy(0);
        let t0 = Timestamp::from_secs(100);
        assert!(!d.asleep(t0.plus(secs(3600))), "a disk that never served a request spins");
        let a = d.submit(t0, Req::Read { file: 1, off: 0, len: 4096 });
        assert!(close(a.since(t0), ms(10.0) + ms(0.04096)));
        // 59 s idle: still spinning, and the next request continues the last.
        let t1 = a.plus(secs(59));
        assert!(!d.asleep(t1));
        let b = d.submit(t1, Req::Read { file: 1, off: 4096, len: 4096 });
        assert!(close(b.since(t1), ms(0.04096)), "{:?}", b.since(t1));
        // 61 s idle: asleep for the last second.
        let t2 = b.plus(secs(61));
        assert!(d.asleep(t2));
        assert_eq!(d.standby_time(t2), secs(1));
        assert_eq!(d.spinups, 0);
        // The spin-up comes first and the head position is lost: the
        // request that continues the last one pays the access time too.
        let c = d.submit(t2, Req::Read { file: 1, off: 8192, len: 4096 });
        assert!(close(c.since(t2), secs(8) + ms(10.0) + ms(0.04096)), "{:?}", c.since(t2));
        assert_eq!(d.spinups, 1);
        // A request queued behind it waits for it, not for another spin-up.
        let q = d.submit(t2, Req::Read { file: 2, off: 0, len: 4096 });
        assert!(close(q.since(c), ms(10.0) + ms(0.04096)));
        assert_eq!(d.spinups, 1);
        assert_eq!(d.standby_time(q.plus(secs(10))), secs(1), "awake again");
        assert_eq!(d.standby_time(q.plus(secs(65))), secs(6), "asleep again after 60 s");
    }

    #[test]
    fn what_the_cache_answers_and_an_empty_sync_leave_the_disk_asleep() {
        let mut d = sleepy(1 << 20);
        let t0 = Timestamp::from_secs(100);
        let a = d.submit(t0, Req::Read { file: 1, off: 0, len: 4096 });
        let t1 = a.plus(secs(120));
        assert!(d.asleep(t1));
        assert_eq!(d.submit(t1, Req::Read { file: 1, off: 0, len: 4096 }), t1, "from the cache");
        assert_eq!(d.submit(t1, Req::Sync), t1, "nothing to write");
        assert!(d.asleep(t1));
        assert_eq!(d.spinups, 0);
        // A write to a sleeping disk spins it up, and with a cache the
        // writer goes on only once the backlog is back under its allowance.
        let w = d.submit(t1, Req::Write { file: 3, off: 0, len: 4096 });
        assert_eq!(d.spinups, 1);
        assert!(w > t1.plus(secs(7)), "a spin-up is more backlog than the cache absorbs");
    }

    #[test]
    fn a_disk_told_to_spin_down_sleeps_at_once_and_a_reset_keeps_it_asleep() {
        let mut d = sleepy(0);
        let t0 = Timestamp::from_secs(100);
        let a = d.submit(t0, Req::Read { file: 1, off: 0, len: 4096 });
        // Told while busy: it spins down when the request is done.
        d.spin_down(t0);
        assert!(!d.asleep(t0));
        assert!(d.asleep(a));
        assert_eq!(d.standby_time(a.plus(secs(5))), secs(5));
        d.reset(a.plus(secs(5)));
        assert!(d.asleep(a.plus(secs(6))), "a cold start does not spin the disk up");
        assert_eq!(d.standby_time(a.plus(secs(6))), secs(6));
        let b = d.submit(a.plus(secs(6)), Req::Write { file: 1, off: 0, len: 4096 });
        assert_eq!(d.spinups, 1);
        assert!(b.since(a.plus(secs(6))) > secs(8));
        // Without a standby setting nothing sleeps.
        let mut plain = Device::new(Profile::from_access("t", 100.0, 100.0, ms(1.0), ms(1.0)), 0);
        plain.submit(t0, Req::MetaRead { key: 1 });
        plain.spin_down(t0);
        assert!(!plain.asleep(t0.plus(secs(3600))));
        assert_eq!(plain.standby_time(t0.plus(secs(3600))), Duration::ZERO);
    }

    #[test]
    fn profiles_without_a_degrade_field_deserialize_as_never_degrading() {
        let sata = Profile::named("ssd-sata").unwrap();
        let mut json = serde_json::to_value(&sata).unwrap();
        json.as_object_mut().unwrap().remove("degrade");
        let back: Profile = serde_json::from_value(json).unwrap();
        assert_eq!(back, sata);
        let gc = Profile::named("ssd-gc").unwrap();
        let back: Profile = serde_json::from_str(&serde_json::to_string(&gc).unwrap()).unwrap();
        assert_eq!(back, gc);
    }
}
