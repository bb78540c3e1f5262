//! A workload in the simulator without a mount or a trace file: its
//! generator runs on a `tierfs_bench::stream::Model` in a thread of its
//! own, as the sweep runs it on a mount (the preparation, the warm-up, the
//! measured run), and the simulator replays the streams as they come. A
//! time-bounded run goes on until the simulator has the run's length of
//! virtual time, so a 30-minute run costs what its requests cost to
//! simulate, not 30 minutes of recording.

use crate::sim::{replay_streams, Config, SimReport};
use std::io;
use std::path::Path;
use std::time::Duration;
use tierfs_bench::stream::{hung_up, Cost, Model};
use tierfs_bench::workload::{by_name, Fs, Params};
use tierfs_core::trace::{Meta, PHASE_MEASURE, PHASE_PREPARE, PHASE_WARMUP};

/// One run of a workload.
#[derive(Clone, Debug)]
pub struct Run {
    /// The workload's name (`tierfs_bench::workload::NAMES`).
    pub workload: String,
    /// Its settings; a time-bounded run's length is the simulator's
    /// (`Config::duration`), not `duration` here.
    pub params: Params,
    /// A warm-up first: its settings, and how long it lasts at least (it
    /// idles the rest when its operations are done sooner).
    pub warmup: Option<(Params, Duration)>,
    /// What a request costs outside the devices.
    pub cost: Cost,
}

/// Where the model puts the workload.
const ROOT: &str = "/workload";

/// Simulates `run` as `cfg` says (with the workload's per-directory
/// policies if `cfg.type_aware`).
pub fn simulate(cfg: &Config, run: &Run) -> io::Result<SimReport> {
    let unknown = || io::Error::new(io::ErrorKind::InvalidInput, format!("unknown workload {}", run.workload));
    // Measured until the simulator has enough: no end of its own.
    let w = by_name(&run.workload, Params { duration: Duration::MAX, ops_per_file: None, ..run.params })
        .ok_or_else(unknown)?;
    let warm = match &run.warmup {
        Some((p, least)) => Some((by_name(&run.workload, *p).ok_or_else(unknown)?, *least)),
        None => None,
    };
    let root = Path::new(ROOT);
    let (m, rx) = Model::new(root, run.cost, 64);
    // The model marks where each run starts its clock.
    let mut meta = Meta { source: format!("workload:{}", run.workload), run_clock: true, ..Meta::default() };
    if cfg.type_aware {
        // Made before the preparation, as the sweep sets their policies.
        for (sub, policy) in w.type_aware() {
            let dir = root.join(sub);
            m.create_dir_all(&dir)?;
            meta.policies
                .push((m.dir_id(&dir).ok_or_else(|| io::Error::other("a directory the model lost"))?, policy.into()));
        }
    }
    let marks_per_op = w.marks_per_op();
    let generator = std::thread::Builder::new().name("tierfs-sim-gen".into()).spawn(move || {
        let r = (|| -> io::Result<()> {
            m.phase(PHASE_PREPARE)?;
            w.prepare(&m, root)?;
            if let Some((warm, least)) = warm {
                m.phase(PHASE_WARMUP)?;
                let t = m.start();
                warm.run(&m, root)?;
                m.idle(least.saturating_sub(m.elapsed(t)));
            }
            m.phase(PHASE_MEASURE)?;
            w.run(&m, root)?;
            m.flush()
        })();
        // The channel closes with the model: the replay's end of input.
        drop(m);
        r
    })?;
    let report = replay_streams(cfg, &meta, marks_per_op, rx);
    match generator.join() {
        Err(_) => Err(io::Error::other(format!("the {} generator panicked", run.workload))),
        Ok(Err(e)) if !hung_up(&e) => Err(e),
        Ok(_) => report,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierfs_core::policy::PolicyKind;

    fn run(workload: &str) -> Run {
        Run {
            workload: workload.into(),
            params: Params { scale: 0.004, seed: 42, duration: Duration::from_secs(5), ops_per_file: None },
            warmup: Some((
                Params { scale: 0.004, seed: 1042, duration: Duration::from_secs(3), ops_per_file: Some(5) },
                Duration::from_secs(3),
            )),
            cost: Cost::default(),
        }
    }

    fn cfg(policy: PolicyKind, cap: u64) -> Config {
        let mut c = Config::new(policy, cap);
        c.duration = Some(Duration::from_secs(2));
        c
    }

    #[test]
    fn a_generated_run_is_the_same_every_time() {
        let a = simulate(&cfg(PolicyKind::DynamicHotDst, 4 << 20), &run("mixed")).unwrap();
        let b = simulate(&cfg(PolicyKind::DynamicHotDst, 4 << 20), &run("mixed")).unwrap();
        assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
        assert!(a.report.ops > 0 && !a.trace_exhausted, "{a:?}");
    }

    #[test]
    fn the_mixed_halves_run_side_by_side_not_one_after_the_other() {
        // On an SSD big enough for everything a request costs mostly its
        // time outside the devices, and two clients issue twice the
        // requests one does.
        let rate = |w: &str| {
            let r = simulate(&cfg(PolicyKind::SsdOnly, u64::MAX / 4), &run(w)).unwrap();
            r.requests as f64 / r.report.secs
        };
        let (mixed, one) = (rate("mixed"), rate("fileserver"));
        assert!(mixed > 1.6 * one, "mixed {mixed:.0} requests/s, the file server alone {one:.0}");
    }

    #[test]
    fn a_transaction_bound_workload_runs_to_its_end() {
        let mut c = cfg(PolicyKind::HddOnly, 0);
        c.duration = None;
        let r = simulate(&c, &run("mail")).unwrap();
        // 80 000 transactions scaled by 0.004, each two marks.
        assert_eq!(r.report.ops, 320);
        assert!(r.report.secs > 0.0);
    }

    #[test]
    fn postmark_cannot_be_generated() {
        let e = simulate(&cfg(PolicyKind::HddOnly, 0), &run("postmark")).unwrap_err();
        assert!(e.to_string().contains("postmark"), "{e}");
    }
}
