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

use crate::clock::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
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
        Profile { name: name.into(), read_bw: read_mbps * MB, write_bw: write_mbps * MB, read_access, write_access }
    }

    /// The built-in profiles (design brief: Loris Table I, Hystor Table 1).
    pub fn builtin() -> Vec<Profile> {
        vec![
            Profile::from_iops("hdd-7200", 126.0, 126.0, 112.0, 91.0),
            Profile::from_iops("ssd-sata", 550.0, 500.0, 35_000.0, 75_000.0),
            Profile::from_access("hdd-15k", 125.0, 125.0, Duration::from_micros(3600), Duration::from_micros(3600)),
            Profile::from_access("ssd-slc", 250.0, 180.0, Duration::from_micros(125), Duration::from_micros(125)),
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

/// An LRU set of pages (or metadata keys), bounded in pages.
#[derive(Debug, Default)]
struct Lru {
    cap: usize,
    seq: u64,
    at: HashMap<(u64, u64), u64>,
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
}

/// The key space for metadata entries in the cache (distinct from pages).
const META: u64 = u64::MAX;

impl Device {
    /// A device with a RAM cache of `cache_bytes` (0: none).
    pub fn new(profile: Profile, cache_bytes: u64) -> Self {
        let cache = (cache_bytes > 0).then(|| Lru::new((cache_bytes / PAGE) as usize));
        Device { profile, busy_until: Timestamp(0), last: None, cache, cache_bytes, busy: Duration::ZERO, requests: 0 }
    }

    /// Forgets the cache, the head position and the backlog (a cold start).
    pub fn reset(&mut self, now: Timestamp) {
        if let Some(c) = &mut self.cache {
            c.clear();
        }
        self.last = None;
        self.busy_until = now;
    }

    /// Occupies the device for one request and returns when it completes.
    fn serve(&mut self, now: Timestamp, file: u64, off: u64, len: u64, write: bool) -> Timestamp {
        let continues = self.last == Some((file, off));
        let access = if continues {
            Duration::ZERO
        } else if write {
            self.profile.write_access
        } else {
            self.profile.read_access
        };
        let cost = access + self.profile.transfer(len, write);
        let start = self.busy_until.max(now);
        self.busy_until = start.plus(cost);
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
    fn the_cache_is_bounded_and_evicts_the_least_recent() {
        let mut l = Lru::new(2);
        l.touch((1, 1));
        l.touch((1, 2));
        l.touch((1, 1));
        l.touch((1, 3));
        assert!(l.contains((1, 1)) && l.contains((1, 3)) && !l.contains((1, 2)));
    }
}
