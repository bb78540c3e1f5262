//! A workload's trace (`tierfs bench workload ... --trace FILE`, and the
//! simulated sweep): the generator runs on a tierfs mount that records what
//! it sees, and the trace gets the workload's own structure on top: where
//! the preparation, the warm-up and the measured run begin ([`Kind::Phase`]),
//! when each operation of the measured run ended ([`Kind::Op`]), the
//! directory tree, and the directories a type-aware configuration gives a
//! policy of their own. The simulator needs all of it to replay the run the
//! way the sweep measures it.

use crate::workload::{self, unix_ns, Workload};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use tierfs_core::report::{ask, Request, Response};
use tierfs_core::runtime;
use tierfs_core::trace::{self, Kind, Meta, Record, Writer, PHASE_MEASURE, PHASE_PREPARE, PHASE_WARMUP};

/// What a recorded workload trace holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Captured {
    /// Records written (marks included).
    pub records: u64,
    /// Operations of the measured run.
    pub ops: u64,
}

fn control(mnt: &Path, out: Option<&Path>) -> io::Result<Option<tierfs_core::engine::record::Recorded>> {
    let req = Request::Trace { out: out.map(|p| p.display().to_string()) };
    // An error answer is an `Err` already.
    match ask(&runtime::socket_path(mnt), &req)? {
        Response::Done => Ok(None),
        Response::Traced(r) => Ok(Some(r)),
        other => Err(io::Error::other(format!("unexpected answer {other:?}"))),
    }
}

/// Every directory below `root` (itself included) with its parent, as the
/// mount numbers them; the root's parent is itself.
fn tree(root: &Path) -> io::Result<Vec<[u64; 2]>> {
    let mut out = Vec::new();
    let top = std::fs::metadata(root)?.ino();
    out.push([top, top]);
    let mut stack = vec![(root.to_path_buf(), top)];
    while let Some((dir, ino)) = stack.pop() {
        for e in std::fs::read_dir(&dir)? {
            let e = e?;
            if e.file_name() == ".tierfs" || !e.file_type()?.is_dir() {
                continue;
            }
            let child = e.metadata()?.ino();
            out.push([child, ino]);
            stack.push((e.path(), child));
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Runs `w` (its preparation unless `prepared`, `warm` if given and then
/// idling until its duration has passed, then its measured run) in `dir`,
/// which is `mnt` or below it, while the tierfs mounted at `mnt` records,
/// and writes the trace to `out` (not on the mount). Returns the
/// workload's report and what the trace holds.
pub fn record(
    mnt: &Path,
    dir: &Path,
    w: &dyn Workload,
    warm: Option<(&dyn Workload, std::time::Duration)>,
    prepared: bool,
    out: &Path,
    note: String,
) -> io::Result<(workload::Report, Captured)> {
    let raw = PathBuf::from(format!("{}.raw", out.display()));
    control(mnt, Some(&raw))?;
    let mut phases = Vec::new();
    let run = (|| -> io::Result<(workload::Report, Vec<u64>)> {
        if !prepared {
            phases.push((unix_ns(), PHASE_PREPARE));
            w.prepare(&workload::Real, dir)?;
        }
        if let Some((warm, least)) = warm {
            phases.push((unix_ns(), PHASE_WARMUP));
            let t = std::time::Instant::now();
            warm.run(&workload::Real, dir)?;
            // As the sweep does: an interval policy acts in the warm-up
            // however soon its operations were done.
            std::thread::sleep(least.saturating_sub(t.elapsed()));
        }
        phases.push((unix_ns(), PHASE_MEASURE));
        workload::start_op_log();
        let r = w.run(&workload::Real, dir);
        let ops = workload::take_op_log();
        let r = r?;
        if ops.is_empty() && r.ops > 0 {
            return Err(io::Error::other(format!(
                "{}: its operations are not logged (an external program?), so its trace cannot be replayed",
                w.name()
            )));
        }
        Ok((r, ops))
    })();
    // The recording ends whatever happened.
    let stopped = control(mnt, None);
    let (report, ops) = match run.and_then(|r| stopped.map(|_| r)) {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_file(&raw);
            return Err(e);
        }
    };
    let dirs = tree(mnt)?;
    let mut policies = Vec::new();
    for (sub, policy) in w.type_aware() {
        if let Ok(m) = std::fs::metadata(dir.join(sub)) {
            policies.push((m.ino(), policy.to_string()));
        }
    }
    let captured = merge(&raw, out, w.name(), note, dirs, policies, &phases, &ops, report.ops);
    let _ = std::fs::remove_file(&raw);
    Ok((report, captured?))
}

/// Writes `out`: the records of the raw recording with the phase and
/// operation marks (Unix nanoseconds) put in at their times.
#[allow(clippy::too_many_arguments)]
fn merge(
    raw: &Path,
    out: &Path,
    name: &str,
    note: String,
    dirs: Vec<[u64; 2]>,
    policies: Vec<(u64, String)>,
    phases: &[(u64, u64)],
    ops: &[u64],
    counted: u64,
) -> io::Result<Captured> {
    let rd = trace::open(raw)?;
    let start = rd.meta().start_unix_ns.unwrap_or(0);
    let rel = |t: u64| t.saturating_sub(start);
    let mut marks: Vec<Record> = phases
        .iter()
        .map(|&(t, p)| Record { time_ns: rel(t), file: 0, dir: 0, kind: Kind::Phase, off: p, len: 0 })
        .chain(ops.iter().map(|&t| Record { time_ns: rel(t), file: 0, dir: 0, kind: Kind::Op, off: 0, len: 0 }))
        .collect();
    marks.sort_by_key(|r| r.time_ns);
    let meta = Meta {
        source: format!("workload:{name}"),
        start_unix_ns: Some(start),
        note,
        dirs,
        policies,
        ops: Some(counted),
        // The mount cannot see where the workload's clock starts.
        run_clock: false,
        // It creates its files.
        existing_size: None,
    };
    // Written aside and renamed: a trace that exists is whole (the
    // simulated sweep reuses the traces it finds).
    let tmp = PathBuf::from(format!("{}.tmp", out.display()));
    let f = std::fs::File::create(&tmp).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", tmp.display())))?;
    let mut w = Writer::new(io::BufWriter::new(f), &meta)?;
    let mut marks = marks.into_iter().peekable();
    for r in rd {
        let r = r?;
        // A mark at the same time as a request goes after it (an operation
        // ends after its last request).
        while let Some(m) = marks.next_if(|m| m.time_ns < r.time_ns) {
            w.push(&m)?;
        }
        w.push(&r)?;
    }
    for m in marks {
        w.push(&m)?;
    }
    let records = w.records();
    w.finish()?.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&tmp, out)?;
    Ok(Captured { records, ops: counted })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_go_between_the_requests_at_their_times() {
        let d = tempfile::tempdir().unwrap();
        let raw = d.path().join("raw");
        let meta = Meta { start_unix_ns: Some(1_000), ..Meta::default() };
        let mut w = Writer::new(std::fs::File::create(&raw).unwrap(), &meta).unwrap();
        for t in [10, 20, 30] {
            w.push(&Record::io(t, 5, 2, false, 0, 4096)).unwrap();
        }
        w.finish().unwrap();
        let out = d.path().join("t");
        let c =
            merge(&raw, &out, "x", String::new(), vec![[2, 2]], vec![], &[(1_005, PHASE_MEASURE)], &[1_020, 1_031], 2)
                .unwrap();
        assert_eq!(c, Captured { records: 6, ops: 2 });
        let rd = trace::open(&out).unwrap();
        assert_eq!(rd.meta().ops, Some(2));
        assert_eq!(rd.meta().dirs, vec![[2, 2]]);
        let kinds: Vec<(u64, Kind)> = rd.map(|r| r.unwrap()).map(|r| (r.time_ns, r.kind)).collect();
        assert_eq!(
            kinds,
            vec![
                (5, Kind::Phase),
                (10, Kind::Read),
                (20, Kind::Read),
                (20, Kind::Op),
                (30, Kind::Read),
                (31, Kind::Op)
            ]
        );
    }
}
