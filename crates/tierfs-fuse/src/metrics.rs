//! Metrics for Prometheus: with `--metrics ADDR:PORT` the daemon answers
//! `GET /metrics` with the status report in the text exposition format
//! (rendered by the `prometheus` client crate), on a small tokio runtime
//! of its own thread, as the control socket is served. Names follow the
//! Prometheus conventions: `tierfs_` prefix, base units (bytes, seconds),
//! counters end in `_total`.
//!
//! Scrapes are served from a snapshot: a page younger than [`REFRESH`] is
//! answered at once; an older one asks the refresher thread for a new
//! one, which asks the engine for its status at most once a [`REFRESH`]
//! however many clients scrape (the status drains the event queue and
//! walks every file's statistics under the planner lock: computed for each
//! scrape, a few clients looping on it held up creates and unlinks).

use prometheus::proto::{Bucket, Histogram, LabelPair, Metric, MetricFamily, MetricType};
use prometheus::{CounterVec, GaugeVec, IntCounterVec, Opts, Registry, TextEncoder};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tierfs_core::migrate::Move;
use tierfs_core::policy::Reason;
use tierfs_core::report::{Request, Response, StatusReport};
use tierfs_core::store::measured::LATENCY_BOUNDS;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::control::{Handler, ServerThread};

/// The longest a scrape waits for a new page (then it is answered with the
/// last one, or 503 if there is none yet).
const STATUS_WAIT: Duration = Duration::from_secs(10);

/// How old the page a scrape is answered with may be, and how often at
/// most the engine is asked for its status.
pub const REFRESH: Duration = Duration::from_secs(5);

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A registry being filled from one report.
struct Out(Registry);

impl Out {
    /// A counter family: one sample per label values.
    fn counter(&self, name: &str, help: &str, labels: &[&str], samples: &[(&[&str], u64)]) -> prometheus::Result<()> {
        let c = IntCounterVec::new(Opts::new(name, help), labels)?;
        for (values, v) in samples {
            c.with_label_values(values).inc_by(*v);
        }
        self.0.register(Box::new(c))
    }

    /// A counter family of fractional values (seconds).
    fn seconds(&self, name: &str, help: &str, labels: &[&str], samples: &[(&[&str], f64)]) -> prometheus::Result<()> {
        let c = CounterVec::new(Opts::new(name, help), labels)?;
        for (values, v) in samples {
            c.with_label_values(values).inc_by(*v);
        }
        self.0.register(Box::new(c))
    }

    /// A gauge family: one sample per label values.
    fn gauge(&self, name: &str, help: &str, labels: &[&str], samples: &[(&[&str], f64)]) -> prometheus::Result<()> {
        let g = GaugeVec::new(Opts::new(name, help), labels)?;
        for (values, v) in samples {
            g.with_label_values(values).set(*v);
        }
        self.0.register(Box::new(g))
    }
}

/// The report as the text exposition format.
pub fn render(r: &StatusReport) -> prometheus::Result<String> {
    let o = Out(Registry::new());
    let tiers: Vec<&str> = r.tiers.iter().map(|t| t.tier.as_str()).collect();
    let per_tier = |f: &dyn Fn(&tierfs_core::report::TierReport) -> u64| -> Vec<(&[&str], u64)> {
        tiers.iter().zip(&r.tiers).map(|(name, t)| (std::slice::from_ref(name), f(t))).collect()
    };
    let gauge_per_tier = |f: &dyn Fn(&tierfs_core::report::TierReport) -> u64| -> Vec<(&[&str], f64)> {
        per_tier(f).into_iter().map(|(l, x)| (l, x as f64)).collect()
    };
    let tier = &["tier"];
    o.counter(
        "tierfs_requests_total",
        "Read and write requests served, per tier (opens in passthrough I/O mode).",
        tier,
        &per_tier(&|t| t.requests),
    )?;
    o.counter(
        "tierfs_served_bytes_total",
        "Bytes read and written, per tier (whole files per open in passthrough I/O mode).",
        tier,
        &per_tier(&|t| t.bytes_served),
    )?;
    o.gauge(
        "tierfs_tier_capacity_bytes",
        "Size of the tier's file system.",
        tier,
        &gauge_per_tier(&|t| t.capacity_bytes),
    )?;
    o.gauge(
        "tierfs_tier_used_bytes",
        "Bytes used on the tier's file system.",
        tier,
        &gauge_per_tier(&|t| t.used_bytes),
    )?;
    o.gauge(
        "tierfs_tier_free_bytes",
        "Bytes free on the tier's file system.",
        tier,
        &gauge_per_tier(&|t| t.free_bytes),
    )?;
    o.gauge("tierfs_tier_files", "Files with data on the tier.", tier, &gauge_per_tier(&|t| t.files))?;
    o.gauge(
        "tierfs_tier_file_bytes",
        "Bytes of the files with data on the tier.",
        tier,
        &gauge_per_tier(&|t| t.file_bytes),
    )?;
    if let Some(limit) = r.tiers.iter().find_map(|t| t.limit_bytes) {
        o.gauge(
            "tierfs_ssd_limit_bytes",
            "The SSD capacity tierfs may use (--ssd-capacity).",
            &[],
            &[(&[], limit as f64)],
        )?;
    }
    o.gauge(
        "tierfs_ssd_hit_ratio",
        "Requests served by the SSD over all requests, since the statistics were created.",
        &[],
        &[(&[], r.ssd_hit_ratio)],
    )?;
    let windows: Vec<(String, f64)> =
        r.history.iter().map(|w| (window_label(w.span_secs), w.totals.ssd_hit_ratio())).collect();
    let labels: Vec<[&str; 1]> = windows.iter().map(|(l, _)| [l.as_str()]).collect();
    let samples: Vec<(&[&str], f64)> = labels.iter().zip(&windows).map(|(l, (_, v))| (&l[..], *v)).collect();
    o.gauge(
        "tierfs_recent_ssd_hit_ratio",
        "Requests served by the SSD over all requests in the last window (5m, 1h, 1d).",
        &["window"],
        &samples,
    )?;
    let m = &r.migrations;
    // Moves by kind and reason; chunk copies (sub-file extents) as their own
    // kind, so that the bytes sum to everything moved.
    // Every pair, at 0 until it happens: a series that appears only with
    // its first event hides that event from `increase()`.
    let mut moves: Vec<([&str; 2], u64, u64)> = Vec::new();
    for reason in Reason::LABELS {
        for kind in Move::LABELS {
            let done = m.by_reason.iter().find(|b| b.kind == kind && b.reason == reason);
            moves.push(([kind, reason], done.map_or(0, |b| b.moves), done.map_or(0, |b| b.bytes)));
        }
    }
    moves.push((["chunk-copy", "hot-chunks"], r.remap.added, m.chunk_bytes));
    let count: Vec<(&[&str], u64)> = moves.iter().map(|(l, n, _)| (&l[..], *n)).collect();
    let bytes: Vec<(&[&str], u64)> = moves.iter().map(|(l, _, b)| (&l[..], *b)).collect();
    o.counter(
        "tierfs_moves_total",
        "Moves between the tiers done, by kind (promotion, demotion, copy, drop of an SSD copy, chunk-copy) and reason.",
        &["kind", "reason"],
        &count,
    )?;
    o.counter(
        "tierfs_moved_bytes_total",
        "Bytes moved between the tiers, by kind and reason (for a drop, the size of the SSD copy removed).",
        &["kind", "reason"],
        &bytes,
    )?;
    let one = |v: u64| [(&[][..], v)];
    o.counter("tierfs_evictions_total", "Moves off the SSD made to free room.", &[], &one(m.evictions))?;
    o.counter("tierfs_evicted_bytes_total", "Bytes evicted from the SSD to free room.", &[], &one(m.evicted_bytes))?;
    o.counter("tierfs_moves_failed_total", "Moves that failed.", &[], &one(m.failed))?;
    o.counter("tierfs_room_waits_total", "Writes that waited for SSD room.", &[], &one(m.room_waits))?;
    o.counter("tierfs_evacuations_total", "Files taken off the SSD for a write.", &[], &one(m.evacuations))?;
    o.counter(
        "tierfs_diverted_total",
        "Writes and moves the SSD write budget sent to the HDD.",
        &[],
        &one(m.diverted),
    )?;
    o.gauge("tierfs_moves_queued", "Moves waiting in the migrator's queue.", &[], &[(&[], m.queued as f64)])?;
    o.gauge("tierfs_moves_deferred", "Moves waiting for a file's last close.", &[], &[(&[], m.deferred.len() as f64)])?;
    o.counter(
        "tierfs_dropped_events_total",
        "Statistics events dropped because the engine fell behind.",
        &[],
        &one(r.dropped_events),
    )?;
    o.gauge("tierfs_tracked_files", "Files with statistics.", &[], &[(&[], r.tracked_files as f64)])?;
    let h = &r.heat.counts;
    o.gauge(
        "tierfs_heat_source",
        "The heat source that counts the kernel's passthrough requests (1 for the one in use: ebpf, or opens).",
        &["source"],
        &[(&[r.heat.source.as_str()][..], 1.0)],
    )?;
    o.counter(
        "tierfs_heat_requests_total",
        "Passthrough requests the heat source saw, by kind (device_read: reads that needed the device).",
        &["kind"],
        &[(&["read"][..], h.reads), (&["device_read"][..], h.device_reads), (&["write"][..], h.writes)],
    )?;
    o.counter(
        "tierfs_heat_lost_samples_total",
        "Samples the heat source lost because its ring buffer was full.",
        &[],
        &one(h.lost),
    )?;
    o.gauge("tierfs_heat_watched_files", "Files the heat source watches now.", &[], &[(&[], h.watched as f64)])?;
    if let Some(ms) = &r.measured {
        let mut samples: Vec<([&str; 2], f64)> = Vec::new();
        for t in &ms.tiers {
            if let Some(us) = t.read_us {
                samples.push(([t.tier.as_str(), "read"], us / 1e6));
            }
            if let Some(us) = t.write_us {
                samples.push(([t.tier.as_str(), "write"], us / 1e6));
            }
        }
        let s: Vec<(&[&str], f64)> = samples.iter().map(|(l, v)| (&l[..], *v)).collect();
        o.gauge(
            "tierfs_response_seconds",
            "Averaged response time of the tier's store (avg = 0.99 avg + 0.01 sample), per kind.",
            &["tier", "op"],
            &s,
        )?;
    }
    if let Some(reg) = &r.regulator {
        o.counter(
            "tierfs_ssd_written_bytes_total",
            "Bytes written to the SSD, as the write regulator counts them.",
            &[],
            &one(reg.total_written_bytes),
        )?;
        o.gauge(
            "tierfs_ssd_written_today_bytes",
            "Bytes written to the SSD today (UTC).",
            &[],
            &[(&[], reg.today_bytes as f64)],
        )?;
        if let Some(b) = reg.budget_bytes_per_day {
            o.gauge("tierfs_ssd_write_budget_bytes", "The SSD write budget per day.", &[], &[(&[], b as f64)])?;
        }
    }
    hdd_families(&o, &r.hdd)?;
    let x = &r.remap;
    o.gauge(
        "tierfs_split_files",
        "Files with chunks on the SSD (sub-file extents).",
        &[],
        &[(&[], x.split_files as f64)],
    )?;
    o.gauge("tierfs_remap_used_bytes", "Bytes of the chunks on the SSD.", &[], &[(&[], x.used_bytes as f64)])?;
    o.gauge(
        "tierfs_remap_area_bytes",
        "The SSD room chunks may take (what whole files leave, less a margin).",
        &[],
        &[(&[], x.area_bytes as f64)],
    )?;
    o.counter(
        "tierfs_chunk_ops_total",
        "Chunks copied to the SSD (add), dropped from it (drop), and files taken whole off it (unsplit).",
        &["op"],
        &[(&["add"], x.added), (&["drop"], x.dropped), (&["unsplit"], x.unsplit)],
    )?;
    o.gauge("tierfs_chunk_ops_queued", "Chunk moves waiting in the queue.", &[], &[(&[], x.queued as f64)])?;
    let w = &r.write_back;
    if w.areas > 0 {
        o.gauge("tierfs_writeback_size_bytes", "Size of the write-back areas.", &[], &[(&[], w.quota_bytes as f64)])?;
        o.gauge(
            "tierfs_writeback_used_bytes",
            "Bytes of chunks in the write-back areas.",
            &[],
            &[(&[], w.used_bytes as f64)],
        )?;
        o.gauge(
            "tierfs_writeback_dirty_bytes",
            "Bytes written on the SSD and not yet on the HDD (the scrubber's backlog).",
            &[],
            &[(&[], w.dirty_bytes as f64)],
        )?;
        o.counter(
            "tierfs_writeback_writes_total",
            "Writes to HDD files of directories with a write-back area, by where they went.",
            &["tier"],
            &[(&["ssd"], w.ssd_writes), (&["hdd"], w.writes.saturating_sub(w.ssd_writes))],
        )?;
        o.counter(
            "tierfs_writeback_diverted_total",
            "Writes sent to the HDD because an area was full of dirty chunks.",
            &[],
            &one(w.diverted),
        )?;
        o.counter("tierfs_scrubbed_total", "Chunks written back to the HDD.", &[], &one(w.scrubbed))?;
        o.counter("tierfs_scrubbed_bytes_total", "Bytes written back to the HDD.", &[], &one(w.scrubbed_bytes))?;
        o.counter(
            "tierfs_scrub_failures_total",
            "Write-backs that failed (the chunk stays dirty).",
            &[],
            &one(w.scrub_failed),
        )?;
    }
    if !r.emulation.is_empty() {
        let tiers: Vec<[&str; 1]> = r.emulation.iter().map(|d| [d.tier.as_str()]).collect();
        let info: Vec<[&str; 2]> = r.emulation.iter().map(|d| [d.tier.as_str(), d.profile.as_str()]).collect();
        o.gauge(
            "tierfs_emulated_device_info",
            "The device profile an emulated tier runs (1 for the current profile).",
            &["tier", "profile"],
            &info.iter().map(|l| (&l[..], 1.0)).collect::<Vec<_>>(),
        )?;
        o.seconds(
            "tierfs_emulated_busy_seconds_total",
            "Time the emulated device has been busy since the mount (its rate is the utilisation).",
            &["tier"],
            &tiers.iter().zip(&r.emulation).map(|(l, d)| (&l[..], d.busy_secs)).collect::<Vec<_>>(),
        )?;
        o.counter(
            "tierfs_emulated_requests_total",
            "Requests that reached the emulated device (cache misses).",
            &["tier"],
            &tiers.iter().zip(&r.emulation).map(|(l, d)| (&l[..], d.requests)).collect::<Vec<_>>(),
        )?;
    }
    let mut families = o.0.gather();
    if let Some(ms) = r.measured.as_ref().filter(|ms| !ms.tiers.is_empty()) {
        families.push(latency_family(&ms.tiers));
    }
    TextEncoder::new().encode_to_string(&families)
}

/// `tierfs_request_duration_seconds`, a histogram per tier and kind, from
/// the stores' meters (the client crate's histograms observe one value at
/// a time; these counts are kept by the meters, so the family is built
/// from them).
/// The HDD's idleness: how long since its disk and tierfs last used it,
/// its wake-ups, what woke it last, and the quiet mode's held work.
fn hdd_families(o: &Out, h: &tierfs_core::report::HddReport) -> prometheus::Result<()> {
    if let Some(s) = h.disk_idle_secs {
        o.gauge(
            "tierfs_hdd_disk_idle_seconds",
            "Time since the HDD's disk last read or wrote a sector (anyone's I/O).",
            &[],
            &[(&[], s)],
        )?;
    }
    if let Some(s) = h.tierfs_idle_secs {
        o.gauge("tierfs_hdd_idle_seconds", "Time since tierfs's last request to the HDD tier.", &[], &[(&[], s)])?;
        o.counter(
            "tierfs_hdd_requests_total",
            "tierfs's requests to the HDD tier (every kind but statfs).",
            &[],
            &[(&[], h.tierfs_requests)],
        )?;
    }
    if !h.quiet && h.disk.is_none() && h.tierfs_idle_secs.is_none() {
        return Ok(());
    }
    o.counter(
        "tierfs_hdd_wakeups_total",
        "Wake-ups of the HDD: I/O after --hdd-idle without any (from its disk's counters where found).",
        &[],
        &[(&[], h.wakeups_total)],
    )?;
    o.gauge(
        "tierfs_hdd_wakeups_day",
        "Wake-ups of the HDD in the last 24 hours.",
        &[],
        &[(&[], h.wakeups_day as f64)],
    )?;
    if let Some(w) = h.wakes.last() {
        let path = w.path.as_deref().unwrap_or("");
        o.gauge(
            "tierfs_hdd_last_wake_timestamp_seconds",
            "When a request of tierfs last came to the HDD after the idle time, and what it was.",
            &["op", "call", "path"],
            &[(&[w.op.as_str(), w.call.as_str(), path], w.at as f64)],
        )?;
    }
    if h.quiet {
        o.gauge(
            "tierfs_hdd_held_files",
            "Files held on the SSD while the HDD sleeps.",
            &[],
            &[(&[], h.held_files as f64)],
        )?;
        o.gauge("tierfs_hdd_held_bytes", "Their bytes on the SSD.", &[], &[(&[], h.held_bytes as f64)])?;
        o.gauge(
            "tierfs_hdd_open",
            "1 while work held off the HDD may reach it (it is awake, the held bytes are full, or the window is on).",
            &[],
            &[(&[], if h.open.is_some() { 1.0 } else { 0.0 })],
        )?;
    }
    Ok(())
}

fn latency_family(tiers: &[tierfs_core::report::TierSpeed]) -> MetricFamily {
    let mut metrics = Vec::new();
    for t in tiers {
        for (op, lat) in [("read", &t.read_latency), ("write", &t.write_latency)] {
            let mut cumulative = 0;
            let buckets = LATENCY_BOUNDS
                .iter()
                .zip(&lat.counts)
                .map(|(bound, n)| {
                    cumulative += n;
                    let mut b = Bucket::default();
                    b.set_upper_bound(*bound);
                    b.set_cumulative_count(cumulative);
                    b
                })
                .collect();
            let mut h = Histogram::default();
            h.set_bucket(buckets);
            h.set_sample_count(lat.count());
            h.set_sample_sum(lat.sum_secs);
            let label = |name: &str, value: &str| {
                let mut l = LabelPair::default();
                l.set_name(name.into());
                l.set_value(value.into());
                l
            };
            let mut m = Metric::default();
            m.set_label(vec![label("op", op), label("tier", &t.tier)]);
            m.set_histogram(h);
            metrics.push(m);
        }
    }
    let mut f = MetricFamily::default();
    f.set_name("tierfs_request_duration_seconds".into());
    f.set_help("Response times of the tier's store, per kind of request.".into());
    f.set_field_type(MetricType::HISTOGRAM);
    f.set_metric(metrics);
    f
}

/// "5m", "1h", "1d" for the history's windows.
fn window_label(secs: u64) -> String {
    match secs {
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// A rendered page of metrics.
struct Page {
    made: std::time::Instant,
    status: &'static str,
    body: String,
}

/// Whether a scrape wants a new page, and whether the server stopped.
#[derive(Default)]
struct Want {
    wanted: bool,
    stop: bool,
}

/// The page scrapes are answered with, made by the refresher thread.
struct Snapshot {
    page: tokio::sync::watch::Receiver<Option<Arc<Page>>>,
    want: Arc<(parking_lot::Mutex<Want>, parking_lot::Condvar)>,
}

impl Snapshot {
    /// Starts the refresher thread, which makes pages from `handler`'s
    /// status when a scrape wants one, at most once a [`REFRESH`].
    fn start(handler: Arc<dyn Handler>) -> std::io::Result<Self> {
        let (tx, page) = tokio::sync::watch::channel(None);
        let want: Arc<(parking_lot::Mutex<Want>, parking_lot::Condvar)> = Arc::default();
        let w = want.clone();
        std::thread::Builder::new().name("tierfs-metrics-snap".into()).spawn(move || refresh(&*handler, &tx, &w))?;
        Ok(Snapshot { page, want })
    }

    /// The page to answer a scrape with (see the module documentation).
    async fn page(&self) -> Option<Arc<Page>> {
        let fresh = |p: &Option<Arc<Page>>| p.as_ref().is_some_and(|p| p.made.elapsed() < REFRESH);
        let mut rx = self.page.clone();
        if !fresh(&rx.borrow()) {
            let (m, cv) = &*self.want;
            m.lock().wanted = true;
            cv.notify_one();
            let _ = tokio::time::timeout(STATUS_WAIT, rx.wait_for(fresh)).await;
        }
        let page = rx.borrow().clone();
        page
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        // Not joined: a status under way must not hold up the unmount.
        let (m, cv) = &*self.want;
        m.lock().stop = true;
        cv.notify_one();
    }
}

/// The refresher thread: a page from `h`'s status each time a scrape
/// wants one, at most once a [`REFRESH`], until the server stops.
fn refresh(
    h: &dyn Handler,
    tx: &tokio::sync::watch::Sender<Option<Arc<Page>>>,
    want: &(parking_lot::Mutex<Want>, parking_lot::Condvar),
) {
    let (m, cv) = want;
    let mut last: Option<std::time::Instant> = None;
    loop {
        {
            let mut w = m.lock();
            while !w.wanted && !w.stop {
                cv.wait(&mut w);
            }
            if let Some(next) = last.map(|l| l + REFRESH) {
                while !w.stop && std::time::Instant::now() < next {
                    cv.wait_until(&mut w, next);
                }
            }
            if w.stop {
                return;
            }
            w.wanted = false;
        }
        last = Some(std::time::Instant::now());
        // A panicking status answers 500, and the refresher goes on.
        let status = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.handle(Request::Status { top: 0 })));
        let (status, body) = match status {
            Ok(Response::Status(r)) => match render(&r) {
                Ok(text) => ("200 OK", text),
                Err(e) => ("500 Internal Server Error", format!("rendering the metrics: {e}\n")),
            },
            Ok(other) => ("500 Internal Server Error", format!("status: {other:?}\n")),
            Err(_) => ("500 Internal Server Error", "the status panicked\n".to_string()),
        };
        tx.send_replace(Some(Arc::new(Page { made: std::time::Instant::now(), status, body })));
    }
}

/// A running metrics server; stops on drop.
pub struct MetricsServer {
    addr: SocketAddr,
    _server: ServerThread,
}

impl MetricsServer {
    /// Binds `addr` (early, so that a taken port fails the mount before
    /// anything starts).
    pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
        let l = std::net::TcpListener::bind(addr)?;
        l.set_nonblocking(true)?;
        Ok(l)
    }

    /// Answers `GET /metrics` on `listener` (from [`MetricsServer::bind`])
    /// from `handler`'s status.
    pub fn start(listener: std::net::TcpListener, handler: Arc<dyn Handler>) -> std::io::Result<Self> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build()?;
        let listener = {
            let _g = rt.enter();
            TcpListener::from_std(listener)?
        };
        let addr = listener.local_addr()?;
        let snapshot = Arc::new(Snapshot::start(handler)?);
        let server = ServerThread::spawn("tierfs-metrics", rt, listener, move |c| serve_http(c, snapshot.clone()))?;
        Ok(MetricsServer { addr, _server: server })
    }

    /// Where it listens (the port chosen when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// The request head's first line, read within five seconds and 8 KiB.
async fn request_line(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    let read = async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
            let n = stream.read(&mut buf).await.ok()?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Some(())
    };
    tokio::time::timeout(Duration::from_secs(5), read).await.ok()??;
    let text = String::from_utf8_lossy(&head);
    text.lines().next().map(str::to_string)
}

/// One HTTP/1.x exchange, then the connection closes.
async fn serve_http(mut stream: TcpStream, snapshot: Arc<Snapshot>) {
    let Some(line) = request_line(&mut stream).await else { return };
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, body) = match (method, path.split('?').next().unwrap_or("")) {
        ("GET", "/metrics") => match snapshot.page().await {
            Some(p) => (p.status, p.body.clone()),
            None => ("503 Service Unavailable", format!("no status within {STATUS_WAIT:?}\n")),
        },
        ("GET", _) => ("404 Not Found", "tierfs serves /metrics only\n".to_string()),
        _ => ("405 Method Not Allowed", "GET /metrics\n".to_string()),
    };
    let kind = if status.starts_with("200") { CONTENT_TYPE } else { "text/plain; charset=utf-8" };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierfs_core::report::{DeviceReport, ReasonMoves, TierReport, WriteBackReport};
    use tierfs_core::stats::history::{Totals, WindowReport};

    fn report() -> StatusReport {
        let tier = |name: &str, requests, bytes| TierReport {
            tier: name.into(),
            capacity_bytes: 1 << 30,
            requests,
            bytes_served: bytes,
            ..TierReport::default()
        };
        let mut r = StatusReport {
            tiers: vec![tier("ssd", 30, 3 << 20), tier("hdd", 10, 1 << 20)],
            ssd_hit_ratio: 0.75,
            ..StatusReport::default()
        };
        r.migrations.promotions = 4;
        r.migrations.demotions = 1;
        r.migrations.bytes_moved = 8192 + 100 + 3 * 65536;
        r.migrations.by_reason = vec![
            ReasonMoves { kind: "promotion".into(), reason: "hot-on-read".into(), moves: 3, bytes: 6144 },
            ReasonMoves { kind: "promotion".into(), reason: "pinned".into(), moves: 1, bytes: 2048 },
            ReasonMoves { kind: "demotion".into(), reason: "evacuate".into(), moves: 1, bytes: 100 },
        ];
        r.migrations.chunk_bytes = 3 * 65536;
        r.remap.added = 3;
        r.history = vec![WindowReport {
            span_secs: 300,
            covered_secs: 300,
            totals: Totals { reqs: [9, 1], ..Totals::default() },
            ssd_hit_ratio: 0.9,
        }];
        r
    }

    #[test]
    fn the_report_renders_as_prometheus_text_with_base_units_and_totals() {
        let text = render(&report()).unwrap();
        for line in [
            "# TYPE tierfs_requests_total counter",
            "tierfs_requests_total{tier=\"ssd\"} 30",
            "tierfs_requests_total{tier=\"hdd\"} 10",
            "tierfs_served_bytes_total{tier=\"ssd\"} 3145728",
            "tierfs_ssd_hit_ratio 0.75",
            "tierfs_recent_ssd_hit_ratio{window=\"5m\"} 0.9",
            "tierfs_moves_total{kind=\"promotion\",reason=\"hot-on-read\"} 3",
            "tierfs_moves_total{kind=\"promotion\",reason=\"pinned\"} 1",
            "tierfs_moves_total{kind=\"demotion\",reason=\"evacuate\"} 1",
            "tierfs_moves_total{kind=\"chunk-copy\",reason=\"hot-chunks\"} 3",
            "tierfs_moved_bytes_total{kind=\"chunk-copy\",reason=\"hot-chunks\"} 196608",
            "tierfs_chunk_ops_total{op=\"add\"} 3",
            "tierfs_moves_total{kind=\"copy\",reason=\"evict\"} 0",
            "# TYPE tierfs_tier_capacity_bytes gauge",
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line:?} in\n{text}");
        }
        // The bytes by kind and reason add up to everything moved.
        let moved: u64 = text
            .lines()
            .filter(|l| l.starts_with("tierfs_moved_bytes_total{"))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(moved, r_moved());
        // No measured averages, no regulator, no write-back area and no
        // emulated devices in this report.
        for absent in ["tierfs_response_seconds", "tierfs_ssd_written", "tierfs_writeback", "tierfs_emulated"] {
            assert!(!text.contains(absent), "{absent} in\n{text}");
        }
    }

    #[test]
    fn the_hdd_idleness_and_what_woke_it_are_gauges_and_counters() {
        let mut r = report();
        r.hdd = tierfs_core::report::HddReport {
            quiet: true,
            disk: Some("sda".into()),
            disk_idle_secs: Some(12.5),
            tierfs_idle_secs: Some(30.0),
            tierfs_requests: 7,
            wakeups_total: 3,
            wakes: vec![tierfs_core::quiet::Wake {
                at: 1000,
                op: "lookup".into(),
                call: "stat".into(),
                path: Some("/media".into()),
                after_secs: 700,
            }],
            held_files: 2,
            ..Default::default()
        };
        let text = render(&r).unwrap();
        for line in [
            "# TYPE tierfs_hdd_disk_idle_seconds gauge",
            "tierfs_hdd_disk_idle_seconds 12.5",
            "# TYPE tierfs_hdd_idle_seconds gauge",
            "tierfs_hdd_requests_total 7",
            "tierfs_hdd_wakeups_total 3",
            "tierfs_hdd_last_wake_timestamp_seconds{call=\"stat\",op=\"lookup\",path=\"/media\"} 1000",
            "tierfs_hdd_held_files 2",
            "tierfs_hdd_open 0",
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line:?} in\n{text}");
        }
        // Without the quiet mode or a disk, none of it.
        assert!(!render(&report()).unwrap().contains("tierfs_hdd_"));
    }

    fn r_moved() -> u64 {
        report().migrations.bytes_moved
    }

    #[test]
    fn write_back_areas_and_emulated_devices_have_their_families() {
        let r = StatusReport {
            write_back: WriteBackReport {
                areas: 1,
                writes: 10,
                ssd_writes: 7,
                dirty_bytes: 4096,
                ..WriteBackReport::default()
            },
            emulation: vec![DeviceReport {
                tier: "hdd".into(),
                profile: "hdd-7200".into(),
                busy_secs: 1.5,
                requests: 9,
            }],
            ..report()
        };
        let text = render(&r).unwrap();
        for line in [
            "tierfs_writeback_writes_total{tier=\"ssd\"} 7",
            "tierfs_writeback_writes_total{tier=\"hdd\"} 3",
            "tierfs_writeback_dirty_bytes 4096",
            "tierfs_emulated_device_info{profile=\"hdd-7200\",tier=\"hdd\"} 1",
            "# TYPE tierfs_emulated_busy_seconds_total counter",
            "tierfs_emulated_busy_seconds_total{tier=\"hdd\"} 1.5",
            "tierfs_emulated_requests_total{tier=\"hdd\"} 9",
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line:?} in\n{text}");
        }
    }

    #[test]
    fn response_times_are_a_histogram_per_tier_and_kind() {
        use tierfs_core::report::{MeasureReport, TierSpeed};
        use tierfs_core::store::measured::Latency;
        let mut counts = vec![0; LATENCY_BOUNDS.len() + 1];
        counts[0] = 2;
        counts[5] = 1;
        counts[LATENCY_BOUNDS.len()] = 1;
        let speed = TierSpeed {
            tier: "hdd".into(),
            read_us: Some(3000.0),
            read_latency: Latency { counts, sum_secs: 5.003 },
            ..TierSpeed::default()
        };
        let r = StatusReport {
            measured: Some(MeasureReport { tiers: vec![speed], ..MeasureReport::default() }),
            ..report()
        };
        let text = render(&r).unwrap();
        for line in [
            "# TYPE tierfs_request_duration_seconds histogram",
            "tierfs_request_duration_seconds_bucket{op=\"read\",tier=\"hdd\",le=\"0.00001\"} 2",
            "tierfs_request_duration_seconds_bucket{op=\"read\",tier=\"hdd\",le=\"0.01024\"} 3",
            "tierfs_request_duration_seconds_bucket{op=\"read\",tier=\"hdd\",le=\"2.62144\"} 3",
            "tierfs_request_duration_seconds_bucket{op=\"read\",tier=\"hdd\",le=\"+Inf\"} 4",
            "tierfs_request_duration_seconds_count{op=\"read\",tier=\"hdd\"} 4",
            "tierfs_request_duration_seconds_sum{op=\"read\",tier=\"hdd\"} 5.003",
            "tierfs_request_duration_seconds_count{op=\"write\",tier=\"hdd\"} 0",
            "tierfs_response_seconds{op=\"read\",tier=\"hdd\"} 0.003",
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line:?} in\n{text}");
        }
    }

    #[test]
    fn window_labels_are_short() {
        assert_eq!([300, 3600, 86_400, 90].map(window_label), ["5m", "1h", "1d", "90s"]);
    }

    /// A status source that takes `delay` per status and counts them.
    struct Slow {
        calls: std::sync::atomic::AtomicU64,
        delay: Duration,
    }

    impl Handler for Slow {
        fn handle(&self, req: Request) -> Response {
            assert!(matches!(req, Request::Status { .. }));
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(self.delay);
            Response::Status(Box::new(report()))
        }
    }

    /// `GET /metrics` on `addr`: the status line and the body.
    fn get(addr: SocketAddr) -> (String, String) {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut text = String::new();
        c.read_to_string(&mut text).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        (head.lines().next().unwrap().to_string(), body.to_string())
    }

    #[test]
    fn clients_looping_on_the_metrics_ask_the_engine_at_most_once_a_refresh() {
        // Each GET computed the status (the event queue drained, every
        // file's statistics walked under the planner lock) on the blocking
        // pool, and was not cancelled at its timeout: a few clients looping
        // on it held up creates and unlinks. Scrapes are served from a
        // snapshot now, made at most once a refresh.
        let slow = Arc::new(Slow { calls: Default::default(), delay: Duration::from_millis(200) });
        let listener = MetricsServer::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let server = MetricsServer::start(listener, slow.clone()).unwrap();
        let addr = server.addr();
        let clients: Vec<_> = (0..8)
            .map(|_| {
                std::thread::spawn(move || {
                    for _ in 0..10 {
                        let (status, body) = get(addr);
                        assert!(status.contains("200"), "{status}");
                        assert!(body.contains("tierfs_requests_total"));
                    }
                })
            })
            .collect();
        for c in clients {
            c.join().unwrap();
        }
        let calls = slow.calls.load(std::sync::atomic::Ordering::SeqCst);
        assert!(calls <= 2, "80 scrapes asked for {calls} statuses");
        drop(server);
    }
}
