//! `tierfs sim`: a trace replayed through a policy at virtual time
//! (`tierfs_sim::sim`).

use crate::args::SimArgs;
use anyhow::{anyhow, bail, Context, Result};
use std::process::ExitCode;
use tierfs_bench::blocks::{self, Blocks};
use tierfs_bench::reference::{opt::Method, Reference};
use tierfs_bench::sweep::{Arch, Row};
use tierfs_bench::workload;
use tierfs_core::config::{format_size, parse_duration, parse_size};
use tierfs_core::policy::PolicyKind;
use tierfs_sim::generate as sim_gen;
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
    cfg.aging = parse_duration(&a.aging).map_err(|e| anyhow!("--aging: {e}"))?;
    cfg.params.admission = crate::mount_cmd::parse_admission(a.admission.as_deref())?;
    cfg.params.aging = crate::mount_cmd::parse_aging_rule(a.aging_rule.as_deref())?;
    let (r, input) = match (&a.trace, &a.workload) {
        (Some(trace), _) => {
            let (meta, records) = sim::load(trace)?;
            let r = sim::replay(&cfg, &meta, &records).with_context(|| format!("replaying {}", trace.display()))?;
            (r, trace.display().to_string())
        }
        (None, Some(name)) => {
            if !(a.scale > 0.0 && a.scale <= 10.0) {
                bail!("--scale: {} is not between 0 (excluded) and 10", a.scale);
            }
            let p = workload::Params { scale: a.scale, seed: a.seed, ..workload::Params::default() };
            let w = workload::by_name(name, p)
                .ok_or_else(|| anyhow!("unknown workload {name:?} (one of: {})", workload::NAMES.join(", ")))?;
            if w.time_bounded() && cfg.duration.is_none() {
                cfg.duration = Some(std::time::Duration::from_secs(60));
            }
            let warmup = match &a.warmup {
                Some(d) => {
                    let d = parse_duration(d).map_err(|e| anyhow!("--warmup: {e}"))?;
                    Some((workload::Params { seed: a.seed + 1000, duration: d, ..p }, d))
                }
                None => None,
            };
            let run = sim_gen::Run { workload: name.clone(), params: p, warmup, cost: Default::default() };
            let r = sim_gen::simulate(&cfg, &run).with_context(|| format!("simulating {name}"))?;
            (r, format!("{name} generated at scale {}, seed {}", a.scale, a.seed))
        }
        (None, None) => bail!("--trace or --workload"),
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(ExitCode::SUCCESS);
    }
    let w = &r.report;
    println!("input:      {input} ({})", w.workload);
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
    if let Some(b) = &r.reference {
        print_reference(b, r.ssd_hit_ratio);
    }
    println!("moves:      {} ({} evictions), {} moved", r.moves, r.evictions, format_size(r.bytes_moved));
    println!("devices:    SSD busy {:.3} s, HDD busy {:.3} s", r.ssd_busy_secs, r.hdd_busy_secs);
    println!(
        "overhead:   {:.1} µs per request outside the devices ({})",
        r.overhead_us,
        match (a.overhead.is_some(), a.trace.is_some()) {
            (true, _) => "--overhead",
            (false, true) => "the trace's own",
            (false, false) => "the model's, on average",
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// The baselines of a replay, and how far its hit ratio `hit` is from
/// them.
fn print_reference(b: &Reference, hit: f64) {
    let o = &b.opt;
    let how = match o.method {
        Method::OneSize => "exact: every file takes the same room".to_string(),
        Method::BruteForce => "exact: every set of intervals tried".to_string(),
        Method::Bounds => format!("at most; a schedule found serves {:.1} %", o.best.hit_ratio() * 100.0),
    };
    println!(
        "optimum:    {:.1} % served by the SSD ({how}), {} copied to it",
        o.hit_ratio() * 100.0,
        format_size(o.best.bytes_admitted)
    );
    println!(
        "online:     LRU {:.1} % ({} copied), S3-FIFO {:.1} % ({} copied); moves at once and for nothing",
        b.lru.hit_ratio() * 100.0,
        format_size(b.lru.bytes_admitted),
        b.s3_fifo.hit_ratio() * 100.0,
        format_size(b.s3_fifo.bytes_admitted)
    );
    println!(
        "fixed set:  {:.1} % ({} copied): the files that come back most, as many as the SSD holds, never evicted",
        b.fixed.hit_ratio() * 100.0,
        format_size(b.fixed.bytes_admitted)
    );
    let of_opt = if o.hit_ratio() > 0.0 { format!("{:.1} %", hit / o.hit_ratio() * 100.0) } else { "-".into() };
    println!(
        "this:       {of_opt} of the optimum, {:+.1} points from the best online baseline",
        (hit - b.best_online()) * 100.0
    );
}

/// Where a simulated sweep's requests come from.
enum Requests {
    /// The generator runs for each run, on a model of the file system.
    Generated(sim_gen::Run),
    /// A recording made once on a mount without emulation.
    Recorded(tierfs_core::trace::Meta, Vec<tierfs_core::trace::Record>),
}

/// One simulated run: its row, or why it was not simulated.
fn simulate_one(
    req: &Requests,
    wname: &str,
    time_bounded: bool,
    duration: std::time::Duration,
    emulate: &(tierfs_core::device::Profile, tierfs_core::device::Profile, u64),
    phases: u32,
    (arch, pct, cap, ws): (&Arch, u32, u64, u64),
) -> Result<std::result::Result<Row, String>> {
    let mut cfg = match config(&arch.policy, arch.interval.as_deref(), cap, emulate.clone())
        .and_then(|cfg| with_options(cfg, &arch.extra))
    {
        Ok(c) => c,
        Err(e) => return Ok(Err(e.to_string())),
    };
    cfg.type_aware = arch.type_aware;
    cfg.duration = time_bounded.then_some(duration);
    // An interval policy at several phases of its interval, the median
    // kept (`sim::leads`).
    let mut rows = Vec::new();
    for lead in sim::leads(&cfg, phases) {
        cfg.lead = lead;
        rows.push(simulated_row(req, wname, time_bounded, &cfg, (arch, pct, cap, ws))?);
    }
    Ok(Ok(tierfs_bench::sweep::median_run(rows).ok_or_else(|| anyhow!("no run of {wname}"))?))
}

/// `cfg` with an architecture's mount options, those the simulator
/// models (`--admission`, `--aging-rule`, `--aging`); any other is
/// refused.
fn with_options(mut cfg: Config, extra: &[String]) -> Result<Config> {
    let mut it = extra.iter();
    while let Some(opt) = it.next() {
        let value = it.next().map(String::as_str);
        match (opt.as_str(), value) {
            ("--admission", Some(v)) => cfg.params.admission = crate::mount_cmd::parse_admission(Some(v))?,
            ("--aging-rule", Some(v)) => cfg.params.aging = crate::mount_cmd::parse_aging_rule(Some(v))?,
            ("--aging", Some(v)) => cfg.aging = parse_duration(v).map_err(|e| anyhow!("--aging: {e}"))?,
            _ => bail!("not simulated (mount options {extra:?})"),
        }
    }
    Ok(cfg)
}

/// One replay of a simulated run, as its row.
fn simulated_row(
    req: &Requests,
    wname: &str,
    time_bounded: bool,
    cfg: &Config,
    (arch, pct, cap, ws): (&Arch, u32, u64, u64),
) -> Result<Row> {
    let r = match req {
        Requests::Generated(run) => sim_gen::simulate(cfg, run).with_context(|| format!("simulating {wname}"))?,
        Requests::Recorded(meta, records) => {
            sim::replay(cfg, meta, records).with_context(|| format!("replaying the recording of {wname}"))?
        }
    };
    let mut report = r.report.clone();
    report.workload = wname.to_string();
    if !time_bounded {
        report.txn_time_secs = Some(report.secs);
    }
    Ok(Row {
        workload: wname.to_string(),
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
        repeats: Vec::new(),
        reference: r.reference,
        devices: None,
        mover: None,
        run_moves: Some(tierfs_bench::sweep::RunMoves {
            moves: r.moves,
            evictions: r.evictions,
            bytes_moved: r.bytes_moved,
            hdd_requests: r.hdd_requests,
            promotions: r.promotions,
            evacuations: r.evacuations,
            by_reason: r.by_reason.clone(),
        }),
        report,
    })
}

/// Where the simulated runs of workload `wname` take their requests
/// from: its generator, or (with `traces`) its recording there, made now
/// if missing.
fn workload_requests(
    runner: &tierfs_bench::sweep::Runner<'_>,
    traces: Option<&std::path::Path>,
    wname: &str,
    w: &dyn workload::Workload,
    done: &std::cell::Cell<usize>,
) -> Result<Requests> {
    let preset = runner.preset;
    let p = preset.params_for(wname);
    let warm = (!preset.warmup.is_zero()).then(|| preset.warmup_params(wname));
    Ok(match traces {
        None => Requests::Generated(sim_gen::Run {
            workload: wname.to_string(),
            params: p,
            warmup: warm.map(|wp| (wp, preset.warmup_least())),
            cost: Default::default(),
        }),
        Some(dir) => {
            let path = dir.join(format!(
                "{wname}-scale{}-seed{}-{}ms-warm{}ms{}.trace",
                p.scale,
                p.seed,
                p.duration.as_millis(),
                preset.warmup.as_millis(),
                preset.warmup_ops_per_file.map_or(String::new(), |k| format!("x{k}"))
            ));
            if !path.exists() {
                (runner.progress)(tierfs_bench::sweep::Progress::Run {
                    done: done.get(),
                    total: preset.runs(),
                    label: &format!("{wname}: recording its trace"),
                });
                let warm = warm.and_then(|wp| workload::by_name(wname, wp));
                runner
                    .record_trace(w, warm.as_deref(), &path)
                    .with_context(|| format!("recording {wname} for the simulator"))?;
            }
            let (meta, records) = sim::load(&path)?;
            Requests::Recorded(meta, records)
        }
    })
}

/// The block trace a preset's workload `wname` names: one of a preset of
/// block traces (the `blocks` preset), none of any other, whose `shifting`
/// is the workload generator of that name.
fn block_trace(preset: &tierfs_bench::sweep::Preset, wname: &str) -> Result<Option<Blocks>> {
    if !preset.simulated_only {
        return Ok(None);
    }
    let p = preset.params_for(wname);
    Blocks::by_name(wname, blocks::requests_in(p.duration), p.seed)
        .map(Some)
        .ok_or_else(|| anyhow!("unknown block trace {wname} (one of {})", blocks::NAMES.join(", ")))
}

/// `tierfs bench sweep --sim`: every run of the preset in the simulator,
/// the workload's generator running on a model of the file system for each
/// (or, with `traces`, each workload recorded once on a mount without
/// emulation, kept there and reused, and replayed). The runs of a workload
/// after its baselines go on as many threads as there are CPUs. Rows as
/// the live sweep writes them, in the preset's order.
pub fn sweep(
    runner: &tierfs_bench::sweep::Runner<'_>,
    traces: Option<&std::path::Path>,
    phases: u32,
) -> Result<Vec<Row>> {
    use tierfs_bench::sweep::Progress as P;
    let preset = runner.preset;
    if let Some(t) = traces {
        std::fs::create_dir_all(t).with_context(|| format!("{}", t.display()))?;
    }
    let emulate = crate::mount_cmd::parse_emulate(&preset.emulation(), None)?;
    let total = preset.runs();
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Runs finished, told to the progress display.
    let done = std::cell::Cell::new(0);
    let mut rows = Vec::new();
    for (wname, archs) in &preset.plan {
        let p = preset.params_for(wname);
        // A block trace is generated whole, replayed at its recorded times
        // and measured whole; a workload is generated as it runs (or
        // recorded once).
        let (req, time_bounded, working_set) = match block_trace(preset, wname)? {
            Some(b) => {
                let (meta, records) = tierfs_sim::synth::blocks(&b, blocks::FILE_SIZE);
                (Requests::Recorded(meta, records), false, None)
            }
            None => {
                let w = workload::by_name(wname, p).ok_or_else(|| anyhow!("unknown workload {wname}"))?;
                (workload_requests(runner, traces, wname, w.as_ref(), &done)?, w.time_bounded(), w.working_set())
            }
        };
        let one = |arch: &Arch, pct: u32, cap: u64, ws: u64| {
            simulate_one(&req, wname, time_bounded, p.duration, &emulate, phases, (arch, pct, cap, ws))
        };
        let label =
            |arch: &Arch, pct: u32| if pct == 0 { arch.label.clone() } else { format!("{} at {pct}%", arch.label) };
        let report = |arch: &Arch, pct: u32, r: std::result::Result<Row, String>| -> Option<Row> {
            done.set(done.get() + 1);
            let done = done.get();
            let line = match &r {
                Ok(row) => format!("{wname}: {}: {:.0} ops/s (simulated)", label(arch, pct), row.report.ops_per_sec),
                Err(why) => format!("{wname}: {}: {why}", label(arch, pct)),
            };
            (runner.progress)(P::Finished { done, total, line: &line });
            r.ok()
        };
        // The baselines first: the HDD-only run measures the working set.
        let hdd_arch = Arch::plain("hdd-only");
        (runner.progress)(P::Run { done: done.get(), total, label: &format!("{wname}: hdd-only (simulated)") });
        let hdd = match one(&hdd_arch, 0, 0, working_set.unwrap_or(0)) {
            Err(e)
                if e.chain().any(|c| {
                    c.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::Unsupported)
                }) =>
            {
                // A workload that is a program of its own (postmark).
                done.set(done.get() + 2 + archs.len() * preset.sizes.len());
                let line = format!("{wname}: not simulated: {e:#}");
                (runner.progress)(P::Finished { done: done.get(), total, line: &line });
                continue;
            }
            r => r?,
        };
        let hdd = report(&hdd_arch, 0, hdd).ok_or_else(|| anyhow!("the HDD-only run was not simulated"))?;
        let ws = hdd.working_set.max(1);
        rows.push(hdd);
        let ssd_arch = Arch::plain("ssd-only");
        let ssd = one(&ssd_arch, 0, u64::MAX / 4, ws)?;
        rows.extend(report(&ssd_arch, 0, ssd));
        // The other runs, on `workers` threads; their rows in the preset's
        // order.
        let jobs: Vec<(&Arch, u32)> =
            archs.iter().flat_map(|a| preset.sizes.iter().map(move |&pct| (a, pct))).collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let (tx, rx) = std::sync::mpsc::channel();
        let mut results: Vec<Option<std::result::Result<Row, String>>> = (0..jobs.len()).map(|_| None).collect();
        std::thread::scope(|s| -> Result<()> {
            for _ in 0..workers.min(jobs.len()) {
                let (tx, next, jobs, one) = (tx.clone(), &next, &jobs, &one);
                s.spawn(move || loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&(arch, pct)) = jobs.get(i) else { break };
                    let r = one(arch, pct, ws * pct as u64 / 100, ws);
                    let failed = r.is_err();
                    if tx.send((i, r)).is_err() || failed {
                        break;
                    }
                });
            }
            drop(tx);
            if let Some(&(arch, pct)) = jobs.first() {
                (runner.progress)(P::Run {
                    done: done.get(),
                    total,
                    label: &format!("{wname}: {} (simulated)", label(arch, pct)),
                });
            }
            for (i, r) in rx {
                let (arch, pct) = jobs[i];
                let r = r?;
                // Told as they finish; kept in order.
                results[i] = Some(r.clone());
                report(arch, pct, r);
            }
            Ok(())
        })?;
        rows.extend(results.into_iter().flatten().filter_map(|r| r.ok()));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierfs_bench::sweep::Preset;

    #[test]
    fn the_small_presets_shifting_workload_is_not_replaced_by_the_shifting_block_trace() {
        // The simulated sweep took every workload named as a block trace
        // for one, so the small and full presets' `shifting` workload ran
        // as the block trace (50 requests a second whatever serves them).
        for name in ["small", "full"] {
            let p = Preset::named(name).unwrap();
            assert!(p.plan.iter().any(|(w, _)| w == "shifting"), "{name}");
            assert!(block_trace(&p, "shifting").unwrap().is_none(), "{name}");
        }
        let p = Preset::named("blocks").unwrap();
        for w in blocks::NAMES {
            assert!(block_trace(&p, w).unwrap().is_some(), "{w}");
        }
        assert!(block_trace(&p, "webserver").is_err());
    }
}
