//! `tierfs plan`: HybridStore's capacity planner (`tierfs_sim::plan`) over
//! a trace and a device catalogue.

use crate::args::PlanArgs;
use anyhow::{anyhow, Result};
use std::process::ExitCode;
use tierfs_core::config::{parse_duration, parse_size};
use tierfs_core::trace;
use tierfs_sim::classify::Classifier;
use tierfs_sim::plan::{self, Catalogue, Params};

pub fn run(a: &PlanArgs) -> Result<ExitCode> {
    let cat = match &a.devices {
        Some(p) => Catalogue::load(p).map_err(|e| anyhow!("--devices {e}"))?,
        None => Catalogue::example(),
    };
    let capacity = a.capacity.as_deref().map(parse_size).transpose().map_err(|e| anyhow!("--capacity: {e}"))?;
    let lifetime = parse_duration(&a.lifetime).map_err(|e| anyhow!("--lifetime: {e}"))?;
    let params = Params { lifetime_s: lifetime.as_secs_f64(), iops: a.iops, wear: !a.no_wear, alpha: a.alpha };
    let mut c = Classifier::default();
    for r in trace::open(&a.trace)? {
        c.push(&r?);
    }
    let w = c.finish(capacity).map_err(|e| anyhow!("{e}"))?;
    let plan = plan::plan(&w, &cat, &params)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        print!("{}", plan::render(&w, &params, &plan));
    }
    Ok(ExitCode::SUCCESS)
}
