//! `tierfs bench devices`: modelled devices under the kernel (see
//! `tierfs_bench::devices`).

use crate::args::{DevicesCmd, DevicesUpArgs};
use crate::mount_cmd::{find_profile, known_profiles};
use anyhow::{bail, Context, Result};
use std::process::ExitCode;
use tierfs_bench::devices::{self, disk, Devices, Setup};
use tierfs_core::config::{format_size, parse_duration, parse_size};
use tierfs_core::device::Standby;

pub fn run(cmd: &DevicesCmd) -> Result<ExitCode> {
    match cmd {
        DevicesCmd::Up(a) => up(a),
        DevicesCmd::Down { dir } => {
            let done = devices::down(dir)?;
            for line in &done {
                println!("{line}");
            }
            if done.is_empty() {
                println!("nothing of the devices was up in {}", dir.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        DevicesCmd::Status { dir, json } => status(&Devices::load(dir)?, *json),
        DevicesCmd::Model { device, command, dir } => {
            let c = disk::Command::parse(command)
                .ok_or_else(|| anyhow::anyhow!("{command:?}: one of pause, resume, reset, spin-down"))?;
            Devices::load(dir)?.get(device)?.command(c)?;
            Ok(ExitCode::SUCCESS)
        }
        DevicesCmd::Serve { spec } => {
            let spec: disk::DiskSpec = serde_json::from_str(spec).context("--spec")?;
            disk::serve(&spec).with_context(|| format!("serving {}", spec.image.display()))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn up(a: &DevicesUpArgs) -> Result<ExitCode> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("setting up loop devices and file systems needs root");
    }
    let known = known_profiles(a.profiles.as_deref())?;
    let size = |s: &str, what: &str| parse_size(s).map_err(|e| anyhow::anyhow!("{what}: {e}"));
    let cache = size(&a.cache, "--cache")?;
    let standby = match &a.standby {
        Some(idle) => Some(Standby {
            idle: parse_duration(idle).map_err(|e| anyhow::anyhow!("--standby: {e}"))?,
            spinup: parse_duration(&a.spinup).map_err(|e| anyhow::anyhow!("--spinup: {e}"))?,
        }),
        None => None,
    };
    let mut setups = vec![
        Setup {
            name: "ssd".into(),
            profile: find_profile(&known, &a.ssd)?,
            size: size(&a.ssd_size, "--ssd-size")?,
            cache,
            standby: None,
        },
        Setup {
            name: "hdd".into(),
            profile: find_profile(&known, &a.hdd)?,
            size: size(&a.hdd_size, "--hdd-size")?,
            cache,
            standby,
        },
    ];
    if let Some(only) = &a.only {
        setups.retain(|s| &s.name == only);
        if setups.is_empty() {
            bail!("--only: ssd or hdd, not {only:?}");
        }
    }
    let bin = std::env::current_exe()?;
    let d = devices::up(&a.dir, &setups, &bin)?;
    for u in &d.devices {
        let cache =
            if u.cache == 0 { "no drive cache".to_string() } else { format!("drive cache {}", format_size(u.cache)) };
        let standby = match u.standby {
            Some(s) => format!(", standby after {:?} idle (spin-up {:?})", s.idle, s.spinup),
            None => String::new(),
        };
        println!(
            "{}: {} on {} (direct I/O), ext4 on {}, {}, {cache}{standby}",
            u.name,
            u.profile,
            u.loop_dev.display(),
            u.mount.display(),
            format_size(u.size)
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn status(d: &Devices, json: bool) -> Result<ExitCode> {
    let all = d.stats()?;
    if json {
        let v: Vec<serde_json::Value> = d
            .devices
            .iter()
            .zip(&all)
            .map(|(u, (m, b))| serde_json::json!({"device": u, "model": m, "block": b}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    for (u, (m, b)) in d.devices.iter().zip(&all) {
        println!(
            "{} ({}, {}){}: {} reads, {} writes, {} syncs through the model ({} read, {} written); {} at the media, busy {:.2} s; {} spin-ups, {:.1} s in standby{}",
            u.name,
            m.profile,
            u.loop_dev.display(),
            if m.paused { ", model paused" } else { "" },
            m.reads,
            m.writes,
            m.syncs,
            format_size(m.bytes_read),
            format_size(m.bytes_written),
            m.requests,
            m.busy_secs,
            m.spinups,
            m.standby_secs,
            if m.asleep { ", asleep now" } else { "" },
        );
        println!(
            "  block layer: {} reads ({} sectors), {} writes ({} sectors), {} flushes",
            b.reads, b.read_sectors, b.writes, b.write_sectors, b.flushes
        );
    }
    Ok(ExitCode::SUCCESS)
}
