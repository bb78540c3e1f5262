//! `tierfs trace`: import a block trace, write a synthetic workload, show
//! what a trace holds. The format is `tierfs_core::trace`.

use crate::args::{TraceArgs, TraceCmd, TraceFormatArg};
use crate::stats::{ask, ask_within, resolve_mount, NoAnswer};
use anyhow::{anyhow, bail, Context, Result};
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tierfs_core::config::{format_size, parse_duration, parse_size};
use tierfs_core::report::{Request, Response};
use tierfs_core::trace::{self, Kind, Meta, Writer};
use tierfs_fuse::runtime;
use tierfs_sim::import::{self, Format};
use tierfs_sim::synth;

pub fn run(a: &TraceArgs) -> Result<ExitCode> {
    match &a.cmd {
        TraceCmd::Import { input, out, format, file_size } => {
            let file_size = parse_size(file_size).map_err(|e| anyhow!("--file-size: {e}"))?;
            import_cmd(input, out, *format, file_size)
        }
        TraceCmd::Synth { name, out, duration, span, file_size, seed } => {
            let size = |s: &Option<String>, default: &str, what: &str| {
                parse_size(s.as_deref().unwrap_or(default)).map_err(|e| anyhow!("--{what}: {e}"))
            };
            let blocks = tierfs_bench::blocks::NAMES.contains(&name.as_str());
            let duration = match duration {
                Some(d) => parse_duration(d).map_err(|e| anyhow!("--duration: {e}"))?,
                None if blocks => tierfs_bench::blocks::DURATION,
                None => Duration::from_secs(60),
            };
            let (meta, recs) = if blocks {
                if span.is_some() {
                    bail!("--span: {name} is a disk of {}", format_size(tierfs_bench::blocks::SPAN));
                }
                let file_size = match file_size {
                    Some(_) => size(file_size, "", "file-size")?,
                    None => tierfs_bench::blocks::FILE_SIZE,
                };
                let requests = tierfs_bench::blocks::requests_in(duration);
                let b = tierfs_bench::blocks::Blocks::by_name(name, requests, *seed)
                    .ok_or_else(|| anyhow!("no block workload {name:?}"))?;
                synth::blocks(&b, file_size)
            } else {
                let w = synth::by_name(name).ok_or_else(|| {
                    let names: Vec<_> = synth::table_iv().iter().map(|s| s.name).collect();
                    anyhow!(
                        "no synthetic workload {name:?} (there are {}, {})",
                        names.join(", "),
                        tierfs_bench::blocks::NAMES.join(", ")
                    )
                })?;
                let span = size(span, "1T", "span")?;
                let file_size = size(file_size, "1G", "file-size")?;
                let recs = w.generate(duration.as_nanos() as u64, span, file_size, *seed);
                let meta = Meta {
                    source: format!("synthetic:{}", w.name),
                    note: format!("seed {seed}"),
                    existing_size: Some(import::cut_size(file_size)),
                    ..Meta::default()
                };
                (meta, recs)
            };
            let n = write_records(out, &meta, &recs)?;
            eprintln!("tierfs trace: {n} records of {name} written to {}", out.display());
            Ok(ExitCode::SUCCESS)
        }
        TraceCmd::Show { trace, json } => show(trace, *json),
        TraceCmd::Record { mountpoint, out, duration, stop } => {
            let duration =
                duration.as_deref().map(parse_duration).transpose().map_err(|e| anyhow!("--duration: {e}"))?;
            record(mountpoint.as_deref(), out.as_deref(), duration, *stop)
        }
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// How long ending a recording may take: the daemon writes out the records
/// it holds and syncs the trace, which takes seconds at most; a daemon
/// that does not answer by then is stuck, and waiting on would hang the
/// command (and a script that runs it) for ever.
const STOP_WAIT: Duration = Duration::from_secs(60);

/// Ends the recording of `mnt`'s daemon and says where the trace is.
fn stop_recording(mnt: &Path, limit: Duration) -> Result<ExitCode> {
    match ask_within(mnt, &Request::Trace { out: None }, Some(limit)) {
        Ok(Response::Traced(r)) => {
            let again = if r.reordered > 0 { format!(", {} out of time order", r.reordered) } else { String::new() };
            eprintln!("tierfs trace: {} records in {}{again}", r.records, r.path);
            Ok(ExitCode::SUCCESS)
        }
        // `ask_within` turns the daemon's errors into `Err`.
        Ok(other) => bail!("unexpected answer: {other:?}"),
        Err(e) if e.downcast_ref::<NoAnswer>().is_some() => Err(e.context(format!(
            "the recording may still be running; end it with `tierfs trace record --stop {}` or by unmounting",
            mnt.display()
        ))),
        Err(e) => Err(e),
    }
}

fn record(mnt: Option<&Path>, out: Option<&Path>, duration: Option<Duration>, stop_only: bool) -> Result<ExitCode> {
    let mnt = resolve_mount(mnt)?;
    let stop = || stop_recording(&mnt, STOP_WAIT);
    if stop_only {
        return stop();
    }
    let out = out.ok_or_else(|| anyhow!("--out is required"))?;
    let out = runtime::absolute(out);
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_interrupt as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_interrupt as *const () as libc::sighandler_t);
        libc::signal(libc::SIGHUP, on_interrupt as *const () as libc::sighandler_t);
    }
    match ask(&mnt, &Request::Trace { out: Some(out.display().to_string()) })? {
        Response::Done => {}
        other => bail!("unexpected answer: {other:?}"),
    }
    let until = duration.map(|d| Instant::now() + d);
    eprintln!(
        "tierfs trace: recording {} into {} {}",
        mnt.display(),
        out.display(),
        if until.is_some() { "for the duration asked" } else { "until Ctrl-C" }
    );
    while !INTERRUPTED.load(Ordering::SeqCst) && until.is_none_or(|u| Instant::now() < u) {
        std::thread::sleep(Duration::from_millis(100));
    }
    // A second Ctrl-C ends this command at once (`--stop` ends the recording then).
    // SAFETY: restoring the default disposition has no preconditions.
    unsafe {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
    stop()
}

/// The trace writer buffers: no `BufWriter` is needed under it.
fn create(out: &Path) -> Result<std::fs::File> {
    std::fs::File::create(out).with_context(|| format!("cannot create {}", out.display()))
}

fn write_records(out: &Path, meta: &Meta, recs: &[trace::Record]) -> Result<u64> {
    let mut w = Writer::new(create(out)?, meta)?;
    for r in recs {
        w.push(r)?;
    }
    let n = w.records();
    w.finish()?.sync_all()?;
    Ok(n)
}

fn import_cmd(input: &Path, out: &Path, format: Option<TraceFormatArg>, file_size: u64) -> Result<ExitCode> {
    let mut reader: Box<dyn BufRead> = if input == Path::new("-") {
        Box::new(BufReader::new(std::io::stdin()))
    } else {
        let f = std::fs::File::open(input).with_context(|| format!("cannot open {}", input.display()))?;
        Box::new(BufReader::with_capacity(1 << 20, f))
    };
    let format = match format {
        Some(TraceFormatArg::Msr) => Format::Msr,
        Some(TraceFormatArg::Blkparse) => Format::Blkparse,
        None => {
            let buf = reader.fill_buf()?;
            let text = String::from_utf8_lossy(&buf[..buf.len().min(4096)]);
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            Format::detect(first)
                .ok_or_else(|| anyhow!("cannot tell the format of {} from {first:?}: give --format", input.display()))?
        }
    };
    let name = input.file_name().map_or_else(|| "stdin".into(), |n| n.to_string_lossy().into_owned());
    let outf = create(out)?;
    let done = import::import(reader, format, file_size, &name, outf)
        .with_context(|| format!("importing {}", input.display()))
        .and_then(|s| match s.requests {
            0 => Err(anyhow!("{} holds no reads or writes in the {} format", input.display(), format.name())),
            _ => Ok(s),
        });
    let s = match done {
        Ok(s) => s,
        Err(e) => {
            // No half-written trace is left behind to be mistaken for a whole one.
            let _ = std::fs::remove_file(out);
            return Err(e);
        }
    };
    eprintln!(
        "tierfs trace: {} requests from {} disks as {} files of {} ({} records, {} lines skipped) in {}",
        s.requests,
        s.disks,
        s.files,
        format_size(file_size),
        s.records,
        s.skipped,
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn show(path: &Path, json: bool) -> Result<ExitCode> {
    let r = trace::open(path)?;
    let meta = r.meta().clone();
    let version = r.version();
    let mut kinds = [0u64; Kind::ALL.len()];
    let (mut read, mut written, mut last) = (0u64, 0u64, 0u64);
    let mut files = HashSet::new();
    let mut dirs = HashSet::new();
    for rec in r {
        let rec = rec?;
        kinds[rec.kind as usize] += 1; // Kind::ALL's order
        match rec.kind {
            Kind::Read => read = read.saturating_add(rec.len),
            Kind::Write => written = written.saturating_add(rec.len),
            _ => {}
        }
        if !rec.kind.is_mark() {
            files.insert(rec.file);
            dirs.insert(rec.dir);
        }
        last = rec.time_ns;
    }
    let secs = last as f64 / 1e9;
    if json {
        let counts: serde_json::Map<String, serde_json::Value> =
            Kind::ALL.iter().zip(kinds).map(|(n, k)| (n.name().to_string(), k.into())).collect();
        let v = serde_json::json!({
            "format_version": version, "source": meta.source, "note": meta.note,
            "records": counts, "files": files.len(), "directories": dirs.len(),
            "bytes_read": read, "bytes_written": written, "seconds": secs,
            "existing_size": meta.existing_size,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("trace:     {} (format {version})", path.display());
    println!("source:    {}", meta.source);
    if !meta.note.is_empty() {
        println!("note:      {}", meta.note);
    }
    println!("length:    {secs:.3} s");
    if let Some(size) = meta.existing_size {
        println!("existing:  the files it does not create exist before it, {} each", format_size(size));
    }
    println!("files:     {} in {} directories", files.len(), dirs.len());
    println!("read:      {} in {} requests", format_size(read), kinds[0]);
    println!("written:   {} in {} requests", format_size(written), kinds[1]);
    let other: Vec<String> =
        Kind::ALL.iter().zip(kinds).skip(2).filter(|(_, k)| *k > 0).map(|(n, k)| format!("{k} {}", n.name())).collect();
    if !other.is_empty() {
        println!("other:     {}", other.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Removes the socket file however the test ends.
    struct Unlink(std::path::PathBuf);

    impl Drop for Unlink {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn stopping_a_recording_gives_up_on_a_daemon_that_never_answers() {
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        let sock = runtime::socket_path(&mnt);
        std::fs::create_dir_all(sock.parent().unwrap()).unwrap();
        let _ = std::fs::remove_file(&sock);
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let _unlink = Unlink(sock);
        // Takes the request and answers nothing until the client gave up
        // (or 3 s passed), like a stuck daemon.
        let (gave_up, wait) = std::sync::mpsc::channel::<()>();
        let held = std::thread::spawn(move || {
            let (conn, _) = listener.accept().unwrap();
            let _ = wait.recv_timeout(Duration::from_secs(3));
            drop(conn);
        });
        let start = Instant::now();
        let err = stop_recording(&mnt, Duration::from_millis(300)).unwrap_err();
        let waited = start.elapsed();
        gave_up.send(()).unwrap();
        held.join().unwrap();
        let msg = format!("{err:#}");
        assert!(waited < Duration::from_secs(2), "gave up only after {waited:?}");
        assert!(err.downcast_ref::<NoAnswer>().is_some(), "{msg}");
        assert!(msg.contains("did not answer within"), "{msg}");
        assert!(msg.contains("--stop"), "the message says how to end the recording: {msg}");
    }

    #[test]
    fn stopping_without_a_daemon_does_not_claim_a_recording_runs() {
        let dir = tempfile::tempdir().unwrap();
        let err = stop_recording(&dir.path().join("mnt"), Duration::from_millis(300)).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("no tierfs daemon answers"), "{msg}");
        assert!(!msg.contains("may still be running"), "{msg}");
    }
}
