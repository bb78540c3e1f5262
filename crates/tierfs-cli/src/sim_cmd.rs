//! `tierfs sim`: a trace replayed through a policy at virtual time
//! (`tierfs_sim::sim`).

use crate::args::SimArgs;
use anyhow::{anyhow, bail, Context, Result};
use std::process::ExitCode;
use tierfs_bench::sweep::{Arch, Row};
use tierfs_bench::workload;
use tierfs_core::config::{format_size, parse_duration, parse_size};
use tierfs_core::policy::PolicyKind;
use tierfs_sim::sim::{self, Config};

/// The simulator's settings for a policy, SSD size and device models.
pub fn config(
    policy: &str,
    interval: Option<&str>,
    ssd_capacity: u64,
    emulate: (tierfs_core::device::Profile, tierfs_core::device::Profile, u64),
) -> Result<Config> {
    let kind = PolicyKind::parse(policy).ok_or_else(|| {
        anyhow!(
            "unknown policy {policy:?} (one of: {})",
            PolicyKind::ALL.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
        )
    })?;
    if let Some(why) = sim::unsupported(kind) {
        bail!(why);
    }
    let mut cfg = Config::new(kind, ssd_capacity);
    if let Some(i) = interval {
        cfg.params.interval = crate::mount_cmd::parse_interval(i)?;
    }
    (cfg.ssd, cfg.hdd, cfg.cache) = emulate;
    Ok(cfg)
}

pub fn run(a: &SimArgs) -> Result<ExitCode> {
    let cap = parse_size(&a.ssd_capacity).map_err(|e| anyhow!("--ssd-capacity: {e}"))?;
    let emulate = crate::mount_cmd::parse_emulate(&a.emulate, a.profiles.as_deref())?;
    let mut cfg = config(&a.policy, a.interval.as_deref(), cap, emulate)?;
    cfg.type_aware = a.type_aware;
    cfg.duration = a.duration.as_deref().map(parse_duration).transpose().map_err(|e| anyhow!("--duration: {e}"))?;
    cfg.overhead = a.overhead.as_deref().map(parse_duration).transpose().map_err(|e| anyhow!("--overhead: {e}"))?;
    let (meta, records) = sim::load(&a.trace)?;
    let r = sim::replay(&cfg, &meta, &records).with_context(|| format!("replaying {}", a.trace.display()))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(ExitCode::SUCCESS);
    }
    let w = &r.report;
    println!("trace:      {} ({})", a.trace.display(), w.workload);
    println!(
        "tiers:      SSD {} of {}, HDD {}, modelled cache {} each; policy {}{}",
        format_size(cap),
        cfg.ssd.name,
        cfg.hdd.name,
        format_size(cfg.cache),
        a.policy,
        if a.type_aware { " with the trace's per-directory policies" } else { "" }
    );
    println!(
        "run:        {} operations in {:.3} s of virtual time = {:.1} ops/s{}",
        w.ops,
        w.secs,
        w.ops_per_sec,
        if r.trace_exhausted { " (the trace ended before the duration)" } else { "" }
    );
    let l = &w.latency;
    println!("operations: latency p50 {} µs, p90 {} µs, p99 {} µs, max {} µs", l.p50_us, l.p90_us, l.p99_us, l.max_us);
    let l = &r.request_latency;
    println!(
        "requests:   {}, latency p50 {} µs, p99 {} µs, mean {} µs; {:.1} % served by the SSD",
        r.requests,
        l.p50_us,
        l.p99_us,
        l.mean_us,
        r.ssd_hit_ratio * 100.0
    );
    println!("moves:      {} ({} evictions), {} moved", r.moves, r.evictions, format_size(r.bytes_moved));
    println!("devices:    SSD busy {:.3} s, HDD busy {:.3} s", r.ssd_busy_secs, r.hdd_busy_secs);
    println!(
        "overhead:   {:.1} µs per request outside the devices ({})",
        r.overhead_us,
        if a.overhead.is_some() { "--overhead" } else { "the trace's own" }
    );
    Ok(ExitCode::SUCCESS)
}

/// `tierfs bench sweep --sim`: each workload of the preset recorded once
/// (kept in `traces`, reused when there) and every run of the preset
/// replayed in the simulator. Rows as the live sweep writes them.
pub fn sweep(runner: &tierfs_bench::sweep::Runner<'_>, traces: &std::path::Path) -> Result<Vec<Row>> {
    use tierfs_bench::sweep::Progress as P;
    let preset = runner.preset;
    std::fs::create_dir_all(traces).with_context(|| format!("{}", traces.display()))?;
    let emulate = crate::mount_cmd::parse_emulate(&preset.emulation(), None)?;
    let total = preset.runs();
    let mut done = 0;
    let mut rows = Vec::new();
    for (wname, archs) in &preset.plan {
        let p = preset.params_for(wname);
        let w = workload::by_name(wname, p).ok_or_else(|| anyhow!("unknown workload {wname}"))?;
        let warm = (!preset.warmup.is_zero()).then(|| workload::by_name(wname, preset.warmup_params(wname))).flatten();
        let path = traces.join(format!(
            "{wname}-scale{}-seed{}-{}ms-warm{}ms.trace",
            p.scale,
            p.seed,
            p.duration.as_millis(),
            preset.warmup.as_millis()
        ));
        if !path.exists() {
            (runner.progress)(P::Run { done, total, label: &format!("{wname}: recording its trace") });
            runner
                .record_trace(w.as_ref(), warm.as_deref(), &path)
                .with_context(|| format!("recording {wname} for the simulator"))?;
        }
        // Read once, replayed for every run.
        let (meta, records) = sim::load(&path)?;
        let mut one = |arch: &Arch, pct: u32, cap: u64, ws: u64| -> Result<Option<Row>> {
            let label = if pct == 0 { arch.label.clone() } else { format!("{} at {pct}%", arch.label) };
            (runner.progress)(P::Run { done, total, label: &format!("{wname}: {label} (simulated)") });
            done += 1;
            if !arch.extra.is_empty() {
                (runner.progress)(P::Finished {
                    done,
                    total,
                    line: &format!("{wname}: {label}: not simulated (mount options {:?})", arch.extra),
                });
                return Ok(None);
            }
            let mut cfg = match config(&arch.policy, arch.interval.as_deref(), cap, emulate.clone()) {
                Ok(c) => c,
                Err(e) => {
                    (runner.progress)(P::Finished { done, total, line: &format!("{wname}: {label}: {e}") });
                    return Ok(None);
                }
            };
            cfg.type_aware = arch.type_aware;
            cfg.duration = w.time_bounded().then_some(p.duration);
            let r = sim::replay(&cfg, &meta, &records).with_context(|| format!("replaying {}", path.display()))?;
            let mut report = r.report.clone();
            report.workload = wname.clone();
            if !w.time_bounded() {
                report.txn_time_secs = Some(report.secs);
            }
            let row = Row {
                workload: wname.clone(),
                arch: arch.label.clone(),
                pct,
                ssd_capacity: if pct == 0 { 0 } else { cap },
                working_set: if ws == 0 { r.bytes_held } else { ws },
                ssd_hit_ratio: r.ssd_hit_ratio,
                moves: r.total_moves,
                evictions: r.total_evictions,
                bytes_moved: r.total_bytes_moved,
                run_hit_ratio: Some(r.ssd_hit_ratio),
                hdd_busy_secs: Some(r.hdd_busy_secs),
                run_moves: Some(tierfs_bench::sweep::RunMoves {
                    moves: r.moves,
                    evictions: r.evictions,
                    bytes_moved: r.bytes_moved,
                    hdd_requests: r.hdd_requests,
                }),
                report,
            };
            let line = format!("{wname}: {label}: {:.0} ops/s (simulated)", row.report.ops_per_sec);
            (runner.progress)(P::Finished { done, total, line: &line });
            Ok(Some(row))
        };
        let hdd = one(&Arch::plain("hdd-only"), 0, 0, w.working_set().unwrap_or(0))?
            .ok_or_else(|| anyhow!("the HDD-only run was not simulated"))?;
        let ws = hdd.working_set.max(1);
        rows.push(hdd);
        rows.extend(one(&Arch::plain("ssd-only"), 0, u64::MAX / 4, ws)?);
        for arch in archs {
            for &pct in &preset.sizes {
                rows.extend(one(arch, pct, ws * pct as u64 / 100, ws)?);
            }
        }
    }
    Ok(rows)
}
