//! `tierfs bench`: run one workload on a directory, or the whole sweep.

use crate::args::{BenchArgs, BenchCmd};
use crate::progress::Progress;
use anyhow::{bail, Context, Result};
use std::process::ExitCode;
use std::time::Instant;
use tierfs_bench::devices::Devices;
use tierfs_bench::report;
use tierfs_bench::sweep::{Length, Preset, Progress as SweepProgress, Runner};
use tierfs_bench::workload::{self, Params};
use tierfs_core::config::parse_duration;

fn machine() -> String {
    let uname = std::process::Command::new("uname")
        .arg("-srm")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().next().and_then(|l| l.split_whitespace().nth(1)).and_then(|k| k.parse::<u64>().ok()))
        .map(|k| format!("{:.1} GiB", k as f64 / 1048576.0))
        .unwrap_or_default();
    format!("{uname}, {cpus} cores, {mem}")
}

fn commit() -> String {
    let exe = std::env::current_exe().ok();
    let dir = exe.as_ref().and_then(|e| e.ancestors().find(|d| d.join(".git").exists())).map(|d| d.to_path_buf());
    let dir = dir.unwrap_or_else(|| ".".into());
    let git = |args: &[&str]| {
        std::process::Command::new("git").args(args).current_dir(&dir).output().ok().filter(|o| o.status.success())
    };
    let Some(head) =
        git(&["rev-parse", "--short", "HEAD"]).map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    else {
        return "unknown".into();
    };
    // Uncommitted changes to tracked files make the commit name a lie.
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|o| !o.stdout.is_empty());
    if dirty {
        format!("{head} with uncommitted changes")
    } else {
        head
    }
}

/// How a results folder was produced.
#[derive(serde::Serialize, serde::Deserialize)]
struct Meta {
    command: String,
    minutes: f64,
    machine: String,
    commit: String,
    preset: Preset,
    /// The modelled devices of a `--devices` sweep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    devices: Option<Devices>,
}

impl Meta {
    /// True if the figures come from the simulator (`bench sweep --sim`).
    fn is_simulated(&self) -> bool {
        self.command.split_whitespace().any(|w| w == "--sim")
    }
}

/// Writes the tables, charts, findings and README of a results folder from
/// its runs. `notes` holds one line "N: sentence" per expected finding
/// that does not hold, written after looking at the results.
fn render(out: &std::path::Path, rows: &[tierfs_bench::sweep::Row], meta: &Meta, notes: &str) -> Result<String> {
    std::fs::write(out.join("results.csv"), report::csv(rows))?;
    let table = report::markdown(rows);
    std::fs::write(out.join("table.md"), &table)?;
    for t in report::tables(rows) {
        std::fs::write(out.join(format!("chart-{}.svg", t.workload)), report::svg(&t))?;
    }
    let f = meta.preset.findings(rows);
    let fm = report::findings_markdown(&f, &report::parse_notes(notes));
    std::fs::write(out.join("findings.md"), &fm)?;
    let p = &meta.preset;
    // A peer has no hit ratio of its own.
    let hit = if rows.iter().filter(|r| !report::is_peer(&r.arch)).all(|r| r.run_hit_ratio.is_some()) {
        "hit in the tables: requests the SSD served over all requests in the measured run (`run_hit_ratio` in `results.csv`; `ssd_hit_ratio` counts from the mount, warm-up included)"
    } else {
        "hit in the tables: requests the SSD served over all requests since the mount, preparation and warm-up included (these results predate the run's own ratio)"
    };
    let repeats = rows.iter().map(|r| r.repeats.len()).max().unwrap_or(0);
    let hit = if repeats > 1 && meta.is_simulated() {
        format!("{hit}\n- each interval architecture simulated with the workload starting at {repeats} evenly spaced phases of its interval (on a mount, where the interval runs fall depends on when the workload starts), the run with the median throughput kept (`repeats` in `rows.json` lists every run's)")
    } else if repeats > 1 {
        format!("{hit}\n- each run made {repeats} times, the one with the median throughput kept (`repeats` in `rows.json` lists every run's)")
    } else {
        hit.to_string()
    };
    let charts: String = report::tables(rows).iter().map(|t| format!("![{0}](chart-{0}.svg)\n", t.workload)).collect();
    let reference = report::reference_markdown(rows);
    if let Some(r) = &reference {
        std::fs::write(out.join("reference.md"), r)?;
    }
    let reference = reference.map_or(String::new(), |r| {
        format!("## Against the optimum and the online cache policies\n\nEach run against the offline optimum (Belady's MIN with the option not to admit; exact where every file takes the same room), LRU, S3-FIFO and the best fixed set (the files that come back most, kept from their first access: the ceiling of ranking files by use on a trace whose popularity does not change), replayed over the same reads and writes at the same SSD capacity, with every move at once and for nothing (`tierfs_bench::reference`; also in `reference.md`).\n\n{r}")
    });
    let (title, how) = if meta.is_simulated() {
        (
            ", simulated",
            "- **simulated**: every figure comes from the simulator (`tierfs sim`), which runs each workload's generator on a model of the file system (or, with `--traces`, replays its recording) and its requests through the device models at virtual time; no mount ran. How far it agrees with a live sweep is in `fidelity.md`, where one was compared.\n",
        )
    } else {
        ("", "")
    };
    let readme = format!(
        "# tierfs sweep: preset {}{title}\n\nProduced by `{}` in {:.1} minutes; tables re-rendered from `rows.json` by `tierfs bench report <this folder>` (which merges `notes.md`).\n\n{how}- machine: {}\n- tierfs commit: {}\n{}\n- workloads at scale {} (mail {}), seed {}, {} s per time-bounded run after a {} s warm-up with the device models {}\n- SSD sizes: {:?} % of the working set measured by the HDD-only run\n- {hit}\n\nFiles: `results.csv` (every run), `table.md` (normalised to HDD-only and SSD-only), `chart-*.svg`, `findings.md`, `rows.json`, `meta.json`, `notes.md`.\n\n{reference}## Expected findings\n\n{fm}\n## Charts\n\n{charts}\n## Tables\n\n{table}",
        p.name,
        meta.command,
        meta.minutes,
        meta.machine,
        meta.commit,
        devices_line(meta),
        p.params.scale,
        p.mail_scale,
        p.params.seed,
        p.params.duration.as_secs(),
        p.warmup.as_secs(),
        if p.warmup_emulated { "on" } else { "paused" },
        p.sizes
    );
    std::fs::write(out.join("README.md"), readme)?;
    Ok(fm)
}

/// The README's line on the devices the runs ran on.
fn devices_line(meta: &Meta) -> String {
    let p = &meta.preset;
    let Some(d) = &meta.devices else {
        return format!(
            "- devices: SSD `{}`, HDD `{}`, modelled RAM cache of {} per device",
            p.ssd,
            p.hdd,
            tierfs_core::config::format_size(p.cache)
        );
    };
    let each: Vec<String> = d
        .devices
        .iter()
        .map(|u| {
            let cache = match u.cache {
                0 => "no drive cache".to_string(),
                c => format!("a drive cache of {}", tierfs_core::config::format_size(c)),
            };
            let standby = u.standby.map(|s| format!(", standby after {:?} (spin-up {:?})", s.idle, s.spinup));
            format!(
                "{} `{}` ({}, {cache}{})",
                u.name.to_uppercase(),
                u.profile,
                tierfs_core::config::format_size(u.size),
                standby.unwrap_or_default()
            )
        })
        .collect();
    format!(
        "- devices: modelled devices under the kernel (`tierfs bench devices up`): {}; each a loop device with direct I/O over a server that delays every request as its profile says, formatted ext4; no emulation in tierfs (`--io-mode userspace`, as emulated sweeps run)\n- each measured run starts with the two file systems' page cache dropped and the models reset, and ends with a write-back of both (syncfs), whose time counts in the run (`flush_secs` in `rows.json`)\n- tierfs's peers on the same devices: `hdd-alone` and `ssd-alone` (the workload in the ext4 itself), `mergerfs` (one pool over the HDD, `cache.files=off`), `mergerfs-cache` (mergerfs's tiered-cache recipe: a pool of the SSD and the HDD creating files on the SSD up to the run's SSD size, `benches/mergerfs-mover.sh` run every 2 s moving the files of oldest access time to a pool of the HDD while the SSD is over 80 % of that size)",
        each.join(", ")
    )
}

/// The runs of a results folder (its rows.json).
fn read_rows(dir: &std::path::Path) -> Result<Vec<tierfs_bench::sweep::Row>> {
    let f = dir.join("rows.json");
    Ok(serde_json::from_str(&std::fs::read_to_string(&f).with_context(|| format!("{}", f.display()))?)?)
}

pub fn run(a: &BenchArgs) -> Result<ExitCode> {
    match &a.cmd {
        BenchCmd::Workload { name, dir, scale, seed, duration, ops_per_file, json, no_prepare, trace, warmup } => {
            if *ops_per_file == Some(0) {
                bail!("--ops-per-file must be at least 1");
            }
            let p = Params {
                scale: *scale,
                seed: *seed,
                duration: parse_duration(duration).map_err(|e| anyhow::anyhow!("--duration: {e}"))?,
                ops_per_file: *ops_per_file,
            };
            let w = workload::by_name(name, p)
                .ok_or_else(|| anyhow::anyhow!("unknown workload {name:?} (one of: {})", workload::NAMES.join(", ")))?;
            std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
            if warmup.is_some() && trace.is_none() {
                bail!("--warmup goes with --trace");
            }
            if let Some(out) = trace {
                let mnt = crate::stats::mount_of(dir)?;
                let warm = match warmup {
                    Some(d) => {
                        let d = parse_duration(d).map_err(|e| anyhow::anyhow!("--warmup: {e}"))?;
                        workload::by_name(name, Params { seed: p.seed + 1000, duration: d, ..p })
                    }
                    None => None,
                };
                let note = format!("scale {scale}, seed {seed}, duration {duration}");
                let t = Instant::now();
                let (r, c) = tierfs_bench::capture::record(
                    &mnt,
                    dir,
                    w.as_ref(),
                    warm.as_deref().map(|w| (w, std::time::Duration::ZERO)),
                    *no_prepare,
                    out,
                    note,
                )
                .with_context(|| format!("recording {name} in {}", dir.display()))?;
                eprintln!(
                    "tierfs bench: {name} recorded in {:.1} s: {} records, {} operations in the measured run ({:.1} ops/s without emulation) in {}",
                    t.elapsed().as_secs_f64(),
                    c.records,
                    c.ops,
                    r.ops_per_sec,
                    out.display()
                );
                return Ok(ExitCode::SUCCESS);
            }
            let progress = Progress::new(None);
            if !no_prepare {
                let t = Instant::now();
                progress.phase(&format!("preparing {name}"), Length::Unknown);
                w.prepare(&workload::Real, dir).with_context(|| format!("preparing {name} in {}", dir.display()))?;
                progress.line(&format!("prepared {name} in {:.1} s", t.elapsed().as_secs_f64()));
            }
            let length = if w.time_bounded() { Length::Time(p.duration) } else { Length::Unknown };
            progress.phase(&format!("running {name}"), length);
            let r = w.run(&workload::Real, dir).with_context(|| format!("running {name} in {}", dir.display()));
            progress.finish();
            let r = r?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!("{name}: {} operations in {:.2} s = {:.1} ops/s", r.ops, r.secs, r.ops_per_sec);
                if let Some(t) = r.txn_time_secs {
                    println!("  transaction time {t:.2} s");
                }
                println!("  read {} bytes, wrote {} bytes, {} files", r.bytes_read, r.bytes_written, r.files);
                println!(
                    "  latency p50 {} µs, p90 {} µs, p99 {} µs, max {} µs",
                    r.latency.p50_us, r.latency.p90_us, r.latency.p99_us, r.latency.max_us
                );
            }
        }
        BenchCmd::Sweep { preset, out, work, only, arch, sizes, scale, sim, traces, repeat, phases, devices } => {
            if *sim && devices.is_some() {
                bail!("--devices runs live: the simulator has its own device models");
            }
            if *sim && *repeat > 1 {
                bail!("--repeat goes with live runs: the simulator gives the same figures every time");
            }
            if !*sim && phases.is_some() {
                bail!("--phases goes with --sim: a live run's phase is wherever its start puts it");
            }
            let mut p = Preset::named(preset).ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown preset {preset:?} (small, compare, full, extents, writeback, measured or blocks)"
                )
            })?;
            if p.simulated_only && !*sim {
                bail!("the {preset} preset replays block traces, which only the simulator does: add --sim");
            }
            let devs = devices.as_deref().map(Devices::load).transpose()?;
            if let Some(d) = &devs {
                // The devices' own models, not the preset's emulation.
                p.ssd = d.get("ssd")?.profile.clone();
                p.hdd = d.get("hdd")?.profile.clone();
                p.cache = d.get("hdd")?.cache;
                // The recipe's mover as often as the small preset's
                // interval policies run.
                p.with_peers(std::time::Duration::from_secs(2));
            }
            if !only.is_empty() {
                p.plan.retain(|(w, _)| only.contains(w));
                if p.plan.is_empty() {
                    bail!("--only names no workload of the preset");
                }
            }
            if !arch.is_empty() {
                for (_, archs) in &mut p.plan {
                    archs.retain(|a| arch.contains(&a.label));
                }
                p.plan.retain(|(_, archs)| !archs.is_empty());
                if p.plan.is_empty() {
                    bail!("--arch names no architecture the preset runs on these workloads");
                }
            }
            if !sizes.is_empty() {
                if let Some(bad) = sizes.iter().find(|&&s| s == 0 || s > 100) {
                    bail!("--sizes: {bad} is not a percentage between 1 and 100");
                }
                p.sizes = sizes.clone();
            }
            if let Some(scale) = *scale {
                if !(scale > 0.0 && scale <= 10.0) {
                    bail!("--scale: {scale} is not between 0 (excluded) and 10");
                }
                p.mail_scale *= scale / p.params.scale;
                p.params.scale = scale;
            }
            std::fs::create_dir_all(out)?;
            std::fs::create_dir_all(work)?;
            let bin = std::env::current_exe()?;
            let started = Instant::now();
            let bars = Progress::new(Some((p.runs() * *repeat as usize) as u64));
            let progress = |e: SweepProgress<'_>| match e {
                SweepProgress::Run { done, label, .. } => bars.step(done, label),
                SweepProgress::Phase { name, length } => bars.phase(name, length),
                SweepProgress::Finished { done, line, .. } => bars.finished(done, line),
            };
            let mut runner = Runner {
                bin,
                work: work.clone(),
                preset: &p,
                progress: &progress,
                prepared: Default::default(),
                repeat: *repeat as usize,
                devices: devs.as_ref(),
            };
            let rows = if *sim {
                crate::sim_cmd::sweep(&runner, traces.as_deref(), phases.unwrap_or(tierfs_sim::sim::DEFAULT_PHASES))
            } else {
                if traces.is_some() {
                    bail!("--traces goes with --sim");
                }
                runner.run().map_err(anyhow::Error::from)
            };
            bars.finish();
            let rows = rows?;
            let took = started.elapsed();
            eprintln!("sweep done in {:.1} min", took.as_secs_f64() / 60.0);
            let meta = Meta {
                command: format!("tierfs {}", std::env::args().skip(1).collect::<Vec<_>>().join(" ")),
                minutes: took.as_secs_f64() / 60.0,
                machine: machine(),
                commit: commit(),
                preset: p,
                devices: devs,
            };
            std::fs::write(out.join("meta.json"), serde_json::to_string_pretty(&meta)?)?;
            std::fs::write(out.join("rows.json"), serde_json::to_string_pretty(&rows)?)?;
            let notes = std::fs::read_to_string(out.join("notes.md")).unwrap_or_default();
            let fm = render(out, &rows, &meta, &notes)?;
            println!("{fm}");
            println!("results in {}", out.display());
        }
        BenchCmd::Fidelity { live, sim } => {
            let f = report::fidelity(&read_rows(live)?, &read_rows(sim)?);
            if f.is_empty() {
                bail!("the two folders have no run in common");
            }
            let text = format!(
                "# The simulator against the live sweep\n\nLive runs: `{}`; simulated runs: `{}`. Throughput in operations per second of the measured run.\n\n{}",
                live.display(),
                sim.display(),
                report::fidelity_markdown(&f)
            );
            std::fs::write(sim.join("fidelity.md"), &text)?;
            println!("{text}");
        }
        BenchCmd::Compare { first, second } => {
            let name = |d: &std::path::Path| d.file_name().map_or("?".into(), |n| n.to_string_lossy().into_owned());
            let (a, b) = (read_rows(first)?, read_rows(second)?);
            let notes = std::fs::read_to_string(first.join("comparison-notes.md")).unwrap_or_default();
            let (na, nb) = (name(first), name(second));
            let text = format!(
                "# `{}` against `{}`\n\nThe same preset in two sweeps: `{}` and `{}`. Re-rendered by `tierfs bench compare {} {}` (which merges `comparison-notes.md`).\n\n{}",
                first.display(),
                second.display(),
                first.display(),
                second.display(),
                first.display(),
                second.display(),
                report::compare_markdown(&a, &b, (&na, &nb), &report::parse_notes(&notes))
            );
            std::fs::write(first.join("comparison.md"), &text)?;
            println!("{text}");
        }
        BenchCmd::Devices { cmd } => return crate::devices_cmd::run(cmd),
        BenchCmd::Report { dir } => {
            let rows = read_rows(dir)?;
            let meta: Meta =
                serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).context("meta.json")?)?;
            let notes = std::fs::read_to_string(dir.join("notes.md")).unwrap_or_default();
            let fm = render(dir, &rows, &meta, &notes)?;
            println!("{fm}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
