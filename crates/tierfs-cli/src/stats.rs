//! `tierfs stats`: asks the daemon over its control socket and shows the
//! answer as a table, as JSON, or refreshed like top.

use crate::args::StatsArgs;
use crate::mounts::mounts;
use anyhow::{anyhow, bail, Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use tierfs_core::config::{format_duration, format_size};
use tierfs_core::report::{FileReport, Request, Response, StatusReport};
use tierfs_fuse::runtime;

/// The tierfs mount point a command talks to: the one given, or the only
/// one mounted.
pub fn resolve_mount(given: Option<&Path>) -> Result<PathBuf> {
    let tierfs: Vec<PathBuf> = mounts().into_iter().filter(|m| m.fstype == "fuse.tierfs").map(|m| m.target).collect();
    match given {
        Some(p) => {
            let abs = runtime::absolute(p);
            if !tierfs.contains(&abs) {
                bail!("no tierfs is mounted at {}", abs.display());
            }
            Ok(abs)
        }
        None => match tierfs.as_slice() {
            [one] => Ok(one.clone()),
            [] => bail!("no tierfs is mounted"),
            many => bail!(
                "several tierfs mounts ({}); name one",
                many.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            ),
        },
    }
}

/// The tierfs mount a path lies in (the deepest one).
pub fn mount_of(path: &Path) -> Result<PathBuf> {
    let abs = runtime::absolute(path);
    mounts()
        .into_iter()
        .filter(|m| m.fstype == "fuse.tierfs" && abs.starts_with(&m.target))
        .max_by_key(|m| m.target.as_os_str().len())
        .map(|m| m.target)
        .ok_or_else(|| anyhow!("{} is not on a tierfs mount", abs.display()))
}

/// Sends one request to the daemon of `mnt`.
pub fn ask(mnt: &Path, req: &Request) -> Result<Response> {
    ask_within(mnt, req, None)
}

/// The daemon took a request and did not answer within the time allowed
/// (an error of [`ask_within`]; callers can tell it from the others with
/// `downcast_ref`).
#[derive(Debug)]
pub struct NoAnswer {
    pub mountpoint: PathBuf,
    pub limit: Duration,
}

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the tierfs daemon of {} did not answer within {}",
            self.mountpoint.display(),
            format_duration(self.limit)
        )
    }
}

impl std::error::Error for NoAnswer {}

/// [`ask`], giving up with [`NoAnswer`] if the daemon has not answered
/// within `limit`.
pub fn ask_within(mnt: &Path, req: &Request, limit: Option<Duration>) -> Result<Response> {
    let sock = runtime::socket_path(mnt);
    if !sock.exists() {
        bail!("no tierfs daemon answers for {} (no socket {})", mnt.display(), sock.display());
    }
    tierfs_core::report::ask_within(&sock, req, limit).map_err(|e| match (e.kind(), limit) {
        // A read timeout is EAGAIN (WouldBlock) on Linux, TimedOut elsewhere.
        (std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock, Some(limit)) => {
            anyhow::Error::new(NoAnswer { mountpoint: mnt.to_path_buf(), limit })
        }
        _ => anyhow::Error::new(e).context(format!("asking the tierfs daemon of {}", mnt.display())),
    })
}

/// The heat source's line: what it saw of the kernel's requests.
fn render_heat(h: &tierfs_core::report::HeatReport) -> String {
    if !h.tiers.iter().any(|t| t.reads) {
        return format!("heat source: {} (no source sees the kernel's passthrough requests)\n", h.source);
    }
    let unseen: Vec<String> = h
        .tiers
        .iter()
        .flat_map(|t| {
            [(!t.reads, "reads"), (!t.writes, "writes"), (!t.direct, "direct I/O")]
                .into_iter()
                .filter(|(no, _)| *no)
                .map(move |(_, what)| format!("{} {what}", t.tier))
        })
        .collect();
    let mut o = format!(
        "heat source: {}: {} reads ({} needed the device, the rest came from the page cache), {} writes{}; {} files watched",
        h.source,
        h.counts.reads,
        h.counts.device_reads,
        h.counts.writes,
        if unseen.is_empty() { String::new() } else { format!(" (unseen, counted per open: {})", unseen.join(", ")) },
        h.counts.watched
    );
    if h.counts.every > 1 {
        o += &format!("; sampling one request in {} (a fast load)", h.counts.every);
    }
    if h.counts.lost > 0 {
        o += &format!("; {} samples lost (ring buffer full)", h.counts.lost);
    }
    o + "\n"
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn render_status(r: &StatusReport) -> String {
    let mut o = String::new();
    o += &format!("tierfs at {} (pid {}), {} I/O, accesses counted {}\n\n", r.mountpoint, r.pid, r.io_mode, r.counting);
    o += &format!(
        "{:<4} {:>9} {:>9} {:>9} {:>9} {:>8} {:>10} {:>10} {:>10}  {}\n",
        "tier", "capacity", "used", "free", "limit", "files", "file data", "requests", "served", "directory"
    );
    for t in &r.tiers {
        o += &format!(
            "{:<4} {:>9} {:>9} {:>9} {:>9} {:>8} {:>10} {:>10} {:>10}  {}\n",
            t.tier,
            format_size(t.capacity_bytes),
            format_size(t.used_bytes),
            format_size(t.free_bytes),
            t.limit_bytes.map(format_size).unwrap_or_else(|| "-".into()),
            t.files,
            format_size(t.file_bytes),
            t.requests,
            format_size(t.bytes_served),
            t.path
        );
    }
    for t in r.tiers.iter().filter(|t| !t.lacks.is_empty()) {
        o += &format!("{} file system lacks: {}\n", t.tier, t.lacks.join(", "));
    }
    let total: u64 = r.tiers.iter().map(|t| t.requests).sum();
    o += &format!("\nSSD hit ratio: {} of {} requests served by the SSD\n", pct(r.ssd_hit_ratio), total);
    o += &history_lines(&r.history);
    o += &format!(
        "tracked files: {}   admission threshold: {}   aging: halve every {}s{}\n",
        r.tracked_files,
        r.admission_threshold,
        r.aging_period_secs,
        if r.stats_enabled { String::new() } else { "   (statistics are OFF)".into() }
    );
    let m = &r.migrations;
    o += &format!(
        "policy: {}   moves: {} promoted, {} demoted, {} copied, {} copies dropped ({} evictions), {} moved, {} queued, {} failed\n",
        r.policy,
        m.promotions,
        m.demotions,
        m.copies,
        m.drops,
        m.evictions,
        format_size(m.bytes_moved),
        m.queued,
        m.failed
    );
    if m.busy {
        o += "  the mount is busy: background moves are held back (--busy-moves)\n";
    }
    if !m.by_reason.is_empty() {
        let why: Vec<String> = m
            .by_reason
            .iter()
            .map(|b| format!("{} {} {} ({})", b.moves, b.kind, b.reason, format_size(b.bytes)))
            .collect();
        o += &format!("  why: {}\n", why.join(", "));
    }
    o += &hdd_lines(&r.hdd);
    if !m.deferred.is_empty() {
        o += &format!("deferred until their last passthrough handle closes: {}\n", m.deferred.len());
        for f in &m.deferred {
            o += &format!("  {}\n", f.path.as_deref().unwrap_or("(unlinked)"));
        }
    }
    if r.groups.len() > 1 || r.groups.iter().any(|g| !g.own.is_empty()) {
        o += &format!(
            "\n{:<24} {:<20} {:>7} {:>10} {:>10} {:>9}\n",
            "policy directory", "policy", "files", "ssd data", "hdd data", "SSD hits"
        );
        for g in &r.groups {
            o += &format!(
                "{:<24} {:<20} {:>7} {:>10} {:>10} {:>9}\n",
                g.dir,
                g.policy,
                g.files,
                format_size(g.bytes_ssd),
                format_size(g.bytes_hdd),
                pct(g.ssd_hit_ratio)
            );
        }
    }
    let rm = &r.remap;
    if rm.split_files > 0 || rm.area_bytes > 0 || rm.added > 0 {
        o += &format!(
            "\nsub-file extents: {} split files, {} of chunks on the SSD (remap area {}); {} chunks copied, {} dropped, {} files unsplit, {} queued\n",
            rm.split_files,
            format_size(rm.used_bytes),
            format_size(rm.area_bytes),
            rm.added,
            rm.dropped,
            rm.unsplit,
            rm.queued
        );
    }
    let wb = &r.write_back;
    if wb.areas > 0 {
        let hit =
            if wb.writes > 0 { format!("{:.0}%", 100.0 * wb.ssd_writes as f64 / wb.writes as f64) } else { "-".into() };
        o += &format!(
            "\nwrite-back area: {} of {} used, {} dirty (scrub from {}% down to {}%); {} written back ({}), {}/s now, {} failed; {} clean chunks freed; write hits {} of {} writes, {} sent to the HDD (area full)\n",
            format_size(wb.used_bytes),
            format_size(wb.quota_bytes),
            format_size(wb.dirty_bytes),
            wb.high_percent,
            wb.low_percent,
            wb.scrubbed,
            format_size(wb.scrubbed_bytes),
            format_size(wb.scrub_rate),
            wb.scrub_failed,
            wb.freed,
            hit,
            wb.writes,
            wb.diverted
        );
    }
    if let Some(m) = &r.measured {
        let us = |x: Option<f64>| x.map(|v| format!("{v:.0} µs")).unwrap_or_else(|| "-".into());
        let tiers: Vec<String> = m
            .tiers
            .iter()
            .map(|t| {
                format!(
                    "{} read {} write {} ({} reads, {} writes, {} written)",
                    t.tier,
                    us(t.read_us),
                    us(t.write_us),
                    t.reads,
                    t.writes,
                    format_size(t.written_bytes)
                )
            })
            .collect();
        o += &format!("\nmeasured response times (exponential averages):  {}\n", tiers.join(";  "));
    }
    if let Some(g) = &r.regulator {
        let rate = format_size(g.rate_bytes_per_day as u64);
        match g.budget_bytes_per_day {
            Some(b) => {
                o += &format!(
                    "SSD writes today: {} of a {}/day budget ({} allowed by now); {} writes ({}) sent to the HDD today, {} in all; rate {}/day",
                    format_size(g.today_bytes),
                    format_size(b),
                    format_size(g.allowed_now_bytes.unwrap_or(b)),
                    g.diverted_today_writes,
                    format_size(g.diverted_today_bytes),
                    g.diverted_total_writes,
                    rate
                );
            }
            None => {
                o += &format!("SSD writes today: {} (no write budget); rate {}/day", format_size(g.today_bytes), rate);
            }
        }
        if let Some(d) = g.projected_lifetime_days {
            o += &format!("; projected SSD lifetime at this rate: {:.1} years", d / 365.25);
        }
        o += "\n";
    }
    if r.dropped_events > 0 {
        o += &format!("events dropped (statistics thread behind): {}\n", r.dropped_events);
    }
    if r.heat.passthrough {
        o += &render_heat(&r.heat);
    }
    if !r.hottest.is_empty() {
        o += &format!("\nhottest files:\n{:>10} {:>9} {:<13} {}\n", "counter", "size", "tier", "path");
        for f in &r.hottest {
            o += &format!(
                "{:>10} {:>9} {:<13} {}\n",
                f.counter,
                format_size(f.size),
                f.placement,
                f.path.as_deref().unwrap_or("(unlinked)")
            );
        }
    }
    o
}

fn render_file(f: &FileReport) -> String {
    let age = if f.last_access == 0 {
        "never".to_string()
    } else {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        format!("{}s ago", now.saturating_sub(f.last_access as u64))
    };
    let mut o = format!(
        "{}\n  inode {}   placement {}   size {}\n  counter {}   last access {}\n  reads {} ({})   writes {} ({})\n  requests served: ssd {}, hdd {}\n",
        f.path.as_deref().unwrap_or("(unlinked)"),
        f.ino,
        f.placement,
        format_size(f.size),
        f.counter,
        age,
        f.reads,
        format_size(f.read_bytes),
        f.writes,
        format_size(f.write_bytes),
        f.ssd_requests,
        f.hdd_requests
    );
    if let Some(p) = &f.policy {
        o += &format!("  policy {p}\n");
    }
    if let Some(n) = &f.note {
        o += &format!("  {n}\n");
    }
    if let Some(sp) = &f.split {
        o += &format!(
            "  chunks of {}: {} on the SSD ({} dirty); {} on the SSD, {} on the HDD only\n",
            format_size(sp.chunk),
            sp.ssd_chunks,
            sp.dirty_chunks,
            format_size(sp.ssd_bytes),
            format_size(sp.hdd_only_bytes)
        );
        let ratio = if sp.reads == 0 { 0.0 } else { sp.ssd_reads as f64 / sp.reads as f64 };
        o += &format!("  SSD hit ratio: {} of {} read requests served by the SSD\n", pct(ratio), sp.reads);
        o += &format!("  split: {}\n", sp.why);
        if !sp.hottest.is_empty() {
            o += "  hottest chunks (index, counter, tier):";
            for (i, c, on_ssd) in &sp.hottest {
                o += &format!(" {i}:{c}:{}", if *on_ssd { "ssd" } else { "hdd" });
            }
            o += "\n";
        }
    }
    o
}

fn print(s: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(s.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        r => Ok(r?),
    }
}

pub fn run(a: &StatsArgs) -> Result<ExitCode> {
    if let Some(path) = &a.file {
        use std::os::unix::fs::MetadataExt;
        let mnt = mount_of(path)?;
        let ino = std::fs::symlink_metadata(path).with_context(|| format!("{}", path.display()))?.ino();
        let Response::File(f) = ask(&mnt, &Request::File { ino })? else { bail!("unexpected answer") };
        print(&if a.json { serde_json::to_string_pretty(&f)? + "\n" } else { render_file(&f) })?;
        return Ok(ExitCode::SUCCESS);
    }
    let mnt = resolve_mount(a.mountpoint.as_deref())?;
    loop {
        let Response::Status(r) = ask(&mnt, &Request::Status { top: a.top })? else { bail!("unexpected answer") };
        let text = if a.json { serde_json::to_string_pretty(&r)? + "\n" } else { render_status(&r) };
        if a.watch {
            print(&format!("\x1b[H\x1b[2J{text}"))?;
            std::thread::sleep(std::time::Duration::from_millis(a.interval_ms.max(100)));
        } else {
            print(&text)?;
            return Ok(ExitCode::SUCCESS);
        }
    }
}

/// The last five minutes, hour and day, one line each.
fn history_lines(h: &[tierfs_core::stats::history::WindowReport]) -> String {
    let mut o = String::new();
    for w in h {
        let label = match w.span_secs {
            300 => "last 5 min".to_string(),
            3600 => "last hour".to_string(),
            86_400 => "last day".to_string(),
            s => format!("last {s} s"),
        };
        let t = &w.totals;
        let observed =
            if w.covered_secs < w.span_secs { format!(" (mounted {} s ago)", w.covered_secs) } else { String::new() };
        o += &format!(
            "  {label:<11} {} of {} requests by the SSD; {} from the SSD, {} from the HDD; {} moves ({}){observed}\n",
            pct(w.ssd_hit_ratio),
            t.reqs[0] + t.reqs[1],
            format_size(t.bytes[0]),
            format_size(t.bytes[1]),
            t.moves,
            format_size(t.bytes_moved),
        );
    }
    o
}

/// The HDD's idleness: since when nobody (its disk's counters) and tierfs
/// used it, its wake-ups and what woke it, the quiet mode's held work.
fn hdd_lines(h: &tierfs_core::report::HddReport) -> String {
    let secs = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{}s", s.round() as u64));
    let mut o = String::new();
    if !h.quiet && h.disk.is_none() {
        return o;
    }
    o += &format!(
        "HDD{}: idle {} (disk), {} (tierfs's requests); {} wake-ups in the last day, {} since the mount (asleep after {}s){}\n",
        h.disk.as_deref().map(|d| format!(" ({d})")).unwrap_or_default(),
        secs(h.disk_idle_secs),
        secs(h.tierfs_idle_secs),
        h.wakeups_day,
        h.wakeups_total,
        h.idle_after_secs,
        if h.quiet { "" } else { "   (quiet mode off)" }
    );
    if h.quiet {
        o += &format!(
            "  quiet: {}; {} files held on the SSD ({} of {}){}\n",
            match h.open {
                Some(why) => format!("held work may go ({})", why.label()),
                None => "held work waits".to_string(),
            },
            h.held_files,
            format_size(h.held_bytes),
            format_size(h.hold_limit),
            h.window.as_deref().map(|w| format!(", window {w} UTC")).unwrap_or_default()
        );
    }
    for w in h.wakes.iter().rev().take(5) {
        o += &format!(
            "  woken after {}s by {} ({}) of {}\n",
            w.after_secs,
            w.op,
            w.call,
            w.path.as_deref().unwrap_or("(no path)")
        );
    }
    o
}
