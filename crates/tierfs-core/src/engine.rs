//! The tiering engine: the thread that takes access events off the request
//! path, keeps the statistics, flushes them in batches, ages them, and
//! answers queries.

use crate::clock::{Clock, Timestamp};
use crate::event::{Event, EventSink};
use crate::report::{FileReport, StatusReport, TierReport};
use crate::state::ns::Ino;
use crate::state::Kv;
use crate::stats::{self, Group, Residence, Stats, StatsStore};
use crate::store::Store;
use crate::tier::Tier;
use crate::vfs::{IoMode, Volume};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Queue length between the request path and the engine.
pub const QUEUE: usize = 1 << 16;

/// The event sink of the request path: a bounded queue. When the engine
/// falls behind, events are dropped (and counted), never waited for.
#[derive(Debug)]
pub struct QueueSink {
    tx: SyncSender<Event>,
    dropped: AtomicU64,
}

impl EventSink for QueueSink {
    fn record(&self, ev: Event) {
        match self.tx.try_send(ev) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl QueueSink {
    /// Events dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// A queue: its sink for the volume, its receiving end for the engine.
pub fn queue() -> (Arc<QueueSink>, Receiver<Event>) {
    let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
    (Arc::new(QueueSink { tx, dropped: AtomicU64::new(0) }), rx)
}

/// Settings of the engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Counters are halved every this long.
    pub aging: Duration,
    /// Statistics are written to the state database every this long.
    pub flush_every: Duration,
    /// How often the engine wakes without events.
    pub tick: Duration,
    /// Statistics are collected at all.
    pub stats_enabled: bool,
    /// Backing directories, for reports.
    pub tier_paths: [String; 2],
    /// Mount point, for reports.
    pub mountpoint: String,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            aging: stats::DEFAULT_AGING,
            flush_every: Duration::from_secs(5),
            tick: Duration::from_millis(100),
            stats_enabled: true,
            tier_paths: [String::new(), String::new()],
            mountpoint: String::new(),
        }
    }
}

/// See the module documentation.
pub struct Engine<S: Store> {
    vol: Arc<Volume<S>>,
    /// The statistics.
    pub stats: Mutex<Stats>,
    store: StatsStore,
    clock: Arc<dyn Clock>,
    cfg: EngineConfig,
    sink: Option<Arc<QueueSink>>,
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl<S: Store> Engine<S> {
    /// An engine over `vol`, loading statistics from `kv`.
    pub fn new(
        vol: Arc<Volume<S>>,
        kv: Arc<dyn Kv>,
        clock: Arc<dyn Clock>,
        cfg: EngineConfig,
        sink: Option<Arc<QueueSink>>,
    ) -> Arc<Self> {
        let (stats, bad, err) = stats::load(&kv, cfg.aging);
        if let Some(e) = err {
            tracing::warn!(error = %e, "statistics could not be read; starting with none");
        }
        if bad > 0 {
            tracing::warn!(bad, "undecodable statistics entries skipped");
        }
        tracing::info!(files = stats.len(), "statistics loaded");
        // Loading went through a large temporary buffer: give it back.
        // SAFETY: malloc_trim has no preconditions.
        unsafe { libc::malloc_trim(0) };
        Arc::new(Engine {
            vol,
            stats: Mutex::new(stats),
            store: StatsStore::new(kv),
            clock,
            cfg,
            sink,
            stop: AtomicBool::new(false),
            thread: Mutex::new(None),
        })
    }

    /// The policy group of a directory (per-directory policies come later;
    /// everything is group 0).
    fn group_of(&self, _dir: Ino) -> Group {
        0
    }

    /// Applies one event to the statistics (also used by tests).
    pub fn ingest(&self, batch: &[Event]) {
        let mut st = self.stats.lock();
        for ev in batch {
            st.apply(ev, &mut |d| self.group_of(d));
        }
    }

    /// Periodic work: aging and flushing.
    pub fn maintain(&self, now: Timestamp, last_flush: &mut Timestamp, force_flush: bool) {
        let mut st = self.stats.lock();
        let aged = st.age(now);
        if aged > 0 {
            tracing::debug!(periods = aged, "counters aged");
        }
        if force_flush || now.since(*last_flush) >= self.cfg.flush_every {
            match self.store.flush(&mut st) {
                Ok(n) if n > 0 => tracing::debug!(entries = n, "statistics flushed"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "statistics flush failed"),
            }
            *last_flush = now;
        }
    }

    /// Runs the engine loop in a thread, reading events from `rx`.
    pub fn start(self: &Arc<Self>, rx: Receiver<Event>) {
        let me = self.clone();
        let h = std::thread::Builder::new()
            .name("tierfs-engine".into())
            .spawn(move || me.run(rx))
            .expect("spawn engine thread");
        *self.thread.lock() = Some(h);
    }

    fn run(&self, rx: Receiver<Event>) {
        let mut last_flush = self.clock.now();
        let mut batch = Vec::with_capacity(4096);
        loop {
            // Poll instead of blocking on the queue: a receiver blocked in
            // recv makes every request wake this thread, and on a small
            // machine those wake-ups cost more than the statistics.
            let stopping = self.stop.load(Ordering::Acquire);
            if !stopping {
                std::thread::sleep(self.cfg.tick);
            }
            loop {
                match rx.try_recv() {
                    Ok(ev) => {
                        batch.push(ev);
                        if batch.len() >= 4096 {
                            self.ingest(&batch);
                            batch.clear();
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => break,
                }
            }
            if !batch.is_empty() {
                self.ingest(&batch);
                batch.clear();
            }
            self.maintain(self.clock.now(), &mut last_flush, false);
            if stopping {
                break;
            }
        }
        self.maintain(self.clock.now(), &mut last_flush, true);
    }

    /// Stops the thread after it has taken the queued events and flushed.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.thread.lock().take() {
            let _ = h.join();
        }
    }

    /// A report on one file.
    pub fn file_report(&self, ino: Ino) -> Option<FileReport> {
        let rec = self.vol.ns.record(ino).ok().flatten()?;
        let f = self.stats.lock().get(ino).copied().unwrap_or_default();
        Some(FileReport {
            ino,
            path: self.vol.path_of(ino),
            placement: rec.placement.label().to_string(),
            size: f.size,
            counter: f.counter,
            last_access: f.last_access,
            reads: f.reads,
            writes: f.writes,
            read_bytes: f.read_bytes,
            write_bytes: f.write_bytes,
            ssd_requests: f.ssd_reqs,
            hdd_requests: f.hdd_reqs,
            policy: None,
            note: None,
        })
    }

    /// The whole picture.
    pub fn status(&self, top: usize) -> StatusReport {
        let (hot, served, totals, tracked, threshold) = {
            let st = self.stats.lock();
            (st.top(top), st.served, st.residence_totals(), st.len() as u64, st.admission_threshold())
        };
        let mut tiers = Vec::new();
        for t in Tier::ALL {
            let fs = self.vol.tiers.store(t).statfs().unwrap_or_default();
            let (mut files, mut bytes) = (0, 0);
            for (r, (n, b)) in &totals {
                let here = match t {
                    Tier::Ssd => r.on_ssd(),
                    Tier::Hdd => *r != Residence::Ssd,
                };
                if here {
                    files += n;
                    bytes += b;
                }
            }
            tiers.push(TierReport {
                tier: t.name().into(),
                path: self.cfg.tier_paths[t.idx()].clone(),
                capacity_bytes: fs.total,
                used_bytes: fs.total.saturating_sub(fs.free),
                free_bytes: fs.avail,
                limit_bytes: None,
                files,
                file_bytes: bytes,
                requests: served.reqs[t.idx()],
                bytes_served: served.bytes[t.idx()],
            });
        }
        let hottest = hot
            .into_iter()
            .filter_map(|(ino, f)| {
                self.file_report(ino)
                    .or_else(|| Some(FileReport { ino, counter: f.counter, size: f.size, ..FileReport::default() }))
            })
            .collect();
        let io_mode = self.vol.io_mode();
        StatusReport {
            mountpoint: self.cfg.mountpoint.clone(),
            pid: std::process::id(),
            io_mode: match io_mode {
                IoMode::Passthrough => "passthrough".into(),
                IoMode::Userspace => "userspace".into(),
            },
            counting: match io_mode {
                IoMode::Passthrough => "per open (passthrough: reads and writes bypass the daemon)".into(),
                IoMode::Userspace => "per request".into(),
            },
            tiers,
            ssd_hit_ratio: served.ssd_hit_ratio(),
            tracked_files: tracked,
            hottest,
            admission_threshold: threshold,
            aging_period_secs: self.cfg.aging.as_secs(),
            dropped_events: self.sink.as_ref().map(|s| s.dropped()).unwrap_or(0),
            stats_enabled: self.cfg.stats_enabled,
        }
    }
}

impl<S: Store> Drop for Engine<S> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}
