//! The engine's side of measurement-driven migration (Wu-Reddy §III) and
//! of the SSD write regulator (HybridStore §IV-C).
//!
//! Deciding is pure and lives elsewhere: the averages are kept by the
//! tiers' [`Meter`](crate::store::measured::Meter)s, the cost test by
//! [`crate::policy::measured`], the budget by [`crate::regulator`]. Here
//! they meet the engine: each `measured` group's token bucket, the moves of
//! each file in the last hour (the bound on oscillation), probes that keep
//! a tier's averages current when no request reaches it, and the
//! regulator's inputs (the SSD meter's byte count), decisions, and state in
//! the state database.

use super::Engine;
use crate::clock::Timestamp;
use crate::policy::PolicyKind;
use crate::regulator::{Regulator, RegulatorReport};
use crate::report::{MeasureReport, TierSpeed};
use crate::state::ns::Ino;
use crate::state::{Op, TreeId};
use crate::stats::Group;
use crate::store::measured::{Meter, Speed};
use crate::store::{read_full, write_full, Store};
use crate::tier::Tier;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::rate::Tokens;

/// A tier whose averages of one kind got no sample for this long is probed.
pub const PROBE_IDLE: Duration = Duration::from_secs(1);

/// A probe counts as this many samples: it stands for the requests the
/// idle tier did not serve, so that its average follows a recovered (or
/// slowed) device within some twenty probes instead of two hundred.
pub const PROBE_WEIGHT: u32 = 10;

/// The room under the write budget's pace a new file needs to be created
/// on the SSD: a first write of the usual size (FUSE hands writes over in
/// pieces of up to 128 KiB; most small files are written in one).
pub(super) const NEW_FILE_ROOM: u64 = 64 << 10;

/// Size of a probe request, and of the probe file it lands in.
const PROBE_IO: usize = 4096;
const PROBE_FILE: u64 = 1 << 20;

/// The window of [`crate::policy::measured::MAX_MOVES_PER_HOUR`].
const HOUR: Duration = Duration::from_secs(3600);

/// Key of the regulator's state in the statistics tree.
const REGULATOR_KEY: &[u8] = b"\xffregulator";

/// Tokens saved up at most, in seconds of the rate.
const TOKEN_BURST_SECS: f64 = 10.0;

/// What the engine keeps for `measured` (a leaf lock: nothing else is
/// taken while it is held).
#[derive(Debug, Default)]
pub(super) struct Measure {
    tokens: HashMap<Group, Tokens>,
    /// Moves of each file in the last hour, oldest first.
    moved: HashMap<Ino, VecDeque<Timestamp>>,
    /// Sample counts (SSD, HDD) at the last probe check, and its time.
    seen: [(u64, u64); 2],
    last_check: Option<Timestamp>,
    probes: u64,
    pos: u64,
}

/// The [`PROBE_IO`] bytes of `raw` (twice that long) that start at a
/// multiple of [`PROBE_IO`], as direct I/O needs.
fn aligned(raw: &mut [u8]) -> &mut [u8] {
    let skip = raw.as_ptr().align_offset(PROBE_IO).min(PROBE_IO);
    &mut raw[skip..skip + PROBE_IO]
}

/// Forgets the moves of a file that are an hour old or older.
fn forget_old(q: &mut VecDeque<Timestamp>, now: Timestamp) {
    while q.front().is_some_and(|t| now.since(*t) >= HOUR) {
        q.pop_front();
    }
}

impl Measure {
    fn prune(&mut self, now: Timestamp) {
        self.moved.retain(|_, q| {
            forget_old(q, now);
            !q.is_empty()
        });
    }
}

impl<S: Store> Engine<S> {
    /// The measured speeds of both tiers (none without meters).
    pub(super) fn speeds(&self) -> [Speed; 2] {
        match &self.cfg.meters {
            Some(m) => [m[0].speed(), m[1].speed()],
            None => [Speed::default(); 2],
        }
    }

    /// Moves group `g` may plan now (its token bucket).
    pub(super) fn tokens(&self, g: Group, now: Timestamp) -> u32 {
        let rate = self.cfg.measured_rate;
        let mut m = self.measure.lock();
        m.tokens.entry(g).or_insert_with(|| Tokens::new(rate, (rate * TOKEN_BURST_SECS).max(1.0))).available(now)
    }

    /// Spends `n` of group `g`'s tokens.
    pub(super) fn spend_tokens(&self, g: Group, n: u32) {
        if let Some(t) = self.measure.lock().tokens.get_mut(&g) {
            t.spend(n);
        }
    }

    /// Moves of `ino` in the last hour.
    pub(super) fn moves_of(&self, ino: Ino, now: Timestamp) -> u32 {
        let m = self.measure.lock();
        m.moved.get(&ino).map_or(0, |q| q.iter().filter(|t| now.since(**t) < HOUR).count() as u32)
    }

    /// Records a move of `ino` that was carried out.
    pub(super) fn moved(&self, ino: Ino) {
        let now = self.clock.now();
        let mut m = self.measure.lock();
        let q = m.moved.entry(ino).or_default();
        forget_old(q, now);
        q.push_back(now);
        if m.moved.len() > 100_000 {
            m.prune(now);
        }
    }

    /// True if some group runs `measured` (only then are tiers probed).
    fn any_measured(&self) -> bool {
        let groups = self.groups.lock().all();
        groups.into_iter().any(|(g, _)| self.setting(g).0 == PolicyKind::Measured)
    }

    /// Probes each tier whose read or write averages got no sample for
    /// [`PROBE_IDLE`]: without it a tier no request reaches (every
    /// write-heavy file left the slow SSD) would keep its old average
    /// forever, and files would never come back when it recovers. One
    /// 4-KiB request at a scattered offset of `.tierfs/probe/probe`,
    /// weighing [`PROBE_WEIGHT`] samples. At most 4 KiB a second is
    /// written to an idle tier (about 350 MB a day, counted by the write
    /// regulator). Only while some directory uses `measured`. Called by the
    /// prober thread holding no lock.
    pub(super) fn probe_tiers(&self, now: Timestamp) {
        let Some(meters) = &self.cfg.meters else { return };
        let due = {
            let mut m = self.measure.lock();
            if m.last_check.is_some_and(|t| now.since(t) < PROBE_IDLE) {
                return;
            }
            m.last_check = Some(now);
            let cur = [meters[0].samples(), meters[1].samples()];
            let due = [0, 1].map(|i| (cur[i].0 == m.seen[i].0, cur[i].1 == m.seen[i].1));
            m.seen = cur;
            m.pos = m.pos.wrapping_add(1);
            due
        };
        if !self.any_measured() {
            return;
        }
        let pos = self.measure.lock().pos;
        for t in Tier::ALL {
            let (read, write) = due[t.idx()];
            // Never wake a sleeping HDD just to time it.
            if !(read || write) || (t == Tier::Hdd && self.hdd_closed()) {
                continue;
            }
            self.doing("prober", format!("a probe of the {t}"));
            if let Err(e) = self.probe(t, read, write, pos, &meters[t.idx()]) {
                tracing::debug!(tier = %t, error = %e, "probe failed");
            }
            self.doing("prober", "idle");
        }
        let seen = [meters[0].samples(), meters[1].samples()];
        let mut m = self.measure.lock();
        m.seen = seen;
        m.probes += 1;
    }

    /// The prober thread: every tick, the tiers that are due get a probe
    /// ([`Engine::probe_tiers`]), until the engine stops.
    pub(super) fn prober(&self) {
        while !self.stop.load(Ordering::Acquire) {
            std::thread::sleep(self.cfg.tick);
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            self.probe_tiers(self.clock.now());
        }
    }

    fn probe(&self, t: Tier, read: bool, write: bool, pos: u64, meter: &Meter) -> crate::Result<()> {
        let _doing = crate::quiet::doing("probe", 0);
        let s = self.vol.tiers.store(t);
        let f = self.probe_file(t)?;
        // Scattered: a probe pays the access time, as a random request does.
        let slots = PROBE_FILE / PROBE_IO as u64;
        let off = (pos.wrapping_mul(7919) % slots) * PROBE_IO as u64;
        let mut raw = vec![0u8; 2 * PROBE_IO];
        let buf = aligned(&mut raw);
        // The store's meter takes one sample of each; the rest of the
        // probe's weight is added here.
        let r = (|| {
            if read {
                let t0 = Instant::now();
                read_full(s, &f, buf, off)?;
                meter.weigh(false, t0.elapsed(), PROBE_WEIGHT - 1);
            }
            // A write probe of the SSD counts against its budget like any write.
            if write && (t != Tier::Ssd || self.admit_ssd(PROBE_IO as u64)) {
                let t0 = Instant::now();
                write_full(s, &f, buf, (off + PROBE_FILE / 2) % PROBE_FILE)?;
                meter.weigh(true, t0.elapsed(), PROBE_WEIGHT - 1);
            }
            Ok::<_, std::io::Error>(())
        })();
        if r.is_err() {
            // Opened afresh (and checked) next time.
            self.probe_files.lock()[t.idx()] = None;
        }
        Ok(r?)
    }

    /// The probe file of tier `t`, `.tierfs/probe/probe`: opened once, for
    /// direct I/O where the file system has it (a probe must reach the
    /// device, not the page cache, or an idle tier would look as fast as
    /// RAM; an emulated tier's model bypasses its cache likewise), and
    /// written through once, since holes and unwritten extents are read
    /// without touching the device.
    fn probe_file(&self, t: Tier) -> crate::Result<Arc<S::File>> {
        if let Some(f) = self.probe_files.lock()[t.idx()].clone() {
            return Ok(f);
        }
        let s = self.vol.tiers.store(t);
        let dir = self.vol.tiers.reserved(t, "probe")?;
        let name: &std::ffi::OsStr = "probe".as_ref();
        let f = match s.open(&dir, name, libc::O_RDWR | libc::O_CREAT | libc::O_DIRECT, 0o600) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                s.open(&dir, name, libc::O_RDWR | libc::O_CREAT, 0o600)?
            }
            r => r?,
        };
        let st = s.fstat(&f)?;
        if st.size < PROBE_FILE || st.blocks * 512 < PROBE_FILE {
            if t == Tier::Ssd && !self.admit_ssd(PROBE_FILE) {
                return Err(crate::Error::errno(libc::ENOSPC));
            }
            let mut raw = vec![0u8; 2 * PROBE_IO];
            let buf = aligned(&mut raw);
            buf.fill(0xa5);
            for off in (0..PROBE_FILE).step_by(PROBE_IO) {
                if self.stop.load(Ordering::Acquire) {
                    return Err(crate::Error::errno(libc::ESHUTDOWN));
                }
                write_full(s, &f, buf, off)?;
            }
            s.fsync(&f, true)?;
        }
        let f = Arc::new(f);
        self.probe_files.lock()[t.idx()] = Some(f.clone());
        Ok(f)
    }

    /// The regulator, told the SSD's bytes written so far.
    pub(super) fn regulator(&self, now: Timestamp) -> parking_lot::MutexGuard<'_, Regulator> {
        let mut r = self.regulator.lock();
        if let Some(m) = &self.cfg.meters {
            r.observe(now, m[0].written());
        }
        r
    }

    /// May a write that could go to the HDD instead (a new file, a
    /// promotion or copy, a buffered write, a chunk) put `bytes` on the
    /// SSD? False: it goes to the HDD (counted as diverted).
    pub(super) fn admit_ssd(&self, bytes: u64) -> bool {
        self.admit_ssd_at(bytes).is_some()
    }

    /// [`Self::admit_ssd`], telling when the bytes were allowed (what
    /// [`Regulator::release`] needs).
    pub(super) fn admit_ssd_at(&self, bytes: u64) -> Option<Timestamp> {
        let now = self.clock.now();
        self.regulator(now).admit(now, bytes).then_some(now)
    }

    /// May a new file be created on the SSD? Only with room under the
    /// write budget's pace for its first write ([`NEW_FILE_ROOM`]).
    pub(super) fn admit_new_file(&self) -> bool {
        let now = self.clock.now();
        self.regulator(now).admit_new(now, NEW_FILE_ROOM)
    }

    /// May a write of `bytes` to data already on the SSD go there? False:
    /// the file leaves the SSD first.
    pub(super) fn required_ssd(&self, bytes: u64) -> bool {
        let now = self.clock.now();
        self.regulator(now).required(now, bytes)
    }

    /// True if a write budget is set (every SSD write must then be seen).
    pub(super) fn regulated(&self) -> bool {
        self.cfg.budget.is_some()
    }

    /// Reads the regulator's state (at mount).
    pub(super) fn load_regulator(&self) {
        match self.kv.get(TreeId::Stats, REGULATOR_KEY) {
            Ok(Some(b)) => {
                if !self.regulator.lock().restore(&b) {
                    tracing::warn!("the SSD write regulator's state could not be read; today starts at zero");
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "cannot read the SSD write regulator's state"),
        }
    }

    /// Writes the regulator's state (with the statistics, and at shutdown).
    pub(super) fn save_regulator(&self) {
        let now = self.clock.now();
        let b = self.regulator(now).encode();
        if let Err(e) = self.kv.apply(TreeId::Stats, vec![Op::Put(REGULATOR_KEY.to_vec(), b)]) {
            tracing::warn!(error = %e, "cannot store the SSD write regulator's state");
        }
    }

    /// The regulator's figures now.
    pub(super) fn regulator_report(&self) -> RegulatorReport {
        let now = self.clock.now();
        self.regulator(now).report(now)
    }

    /// The measured speeds and probes, for `tierfs stats`.
    pub(super) fn measure_report(&self) -> Option<MeasureReport> {
        let meters = self.cfg.meters.as_ref()?;
        let tiers = Tier::ALL
            .iter()
            .map(|t| {
                let m = &meters[t.idx()];
                let sp = m.speed();
                let (reads, writes) = m.samples();
                let [read_latency, write_latency] = m.latency();
                TierSpeed {
                    tier: t.name().into(),
                    read_us: sp.read.map(|s| s * 1e6),
                    write_us: sp.write.map(|s| s * 1e6),
                    reads,
                    writes,
                    read_bytes: m.read_bytes(),
                    written_bytes: m.written(),
                    read_latency,
                    write_latency,
                }
            })
            .collect();
        let probes = self.measure.lock().probes;
        Some(MeasureReport { tiers, probes, token_rate: self.cfg.measured_rate })
    }

    /// Counts a divertible write the regulator sent to the HDD.
    pub(super) fn diverted_note(&self, ino: Ino, what: &str) {
        self.counters.diverted.fetch_add(1, Ordering::Relaxed);
        self.note(ino, format!("{what} not done: the SSD write budget is spent for now (write regulator)"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_buffers_are_aligned_for_direct_io() {
        for _ in 0..8 {
            let mut raw = vec![0u8; 2 * PROBE_IO];
            let b = aligned(&mut raw);
            assert_eq!(b.len(), PROBE_IO);
            assert_eq!(b.as_ptr() as usize % PROBE_IO, 0);
        }
    }
}
