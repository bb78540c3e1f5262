//! The real postmark (Debian's `postmark`), configured as in Loris §V-C1
//! and scaled like the built-in mail workload.

use super::{Fs, Params, Report, Workload};
use std::io::{self, Write};
use std::path::Path;
use std::process::{Command, Stdio};

/// See the module documentation.
pub struct PostmarkReal {
    /// Settings.
    pub p: Params,
}

/// Reads "N seconds of transactions (M per second)" from postmark's output.
pub fn parse(out: &str) -> Option<(f64, f64)> {
    let line = out.lines().find(|l| l.contains("seconds of transactions"))?;
    let secs: f64 = line.split_whitespace().next()?.parse().ok()?;
    let rate: f64 = line.split('(').nth(1)?.split_whitespace().next()?.parse().ok()?;
    Some((secs, rate))
}

impl Workload for PostmarkReal {
    fn name(&self) -> &'static str {
        "postmark"
    }
    fn working_set(&self) -> Option<u64> {
        // Its files, 4 to 28 KB, 16 KB on average; it deletes them at the end.
        Some(self.p.scaled(40_000, 10) * (16 << 10))
    }
    fn time_bounded(&self) -> bool {
        false
    }
    fn prepare(&self, fs: &dyn Fs, _dir: &Path) -> io::Result<()> {
        // postmark creates its own files, inside the measured run, and
        // reports the transaction time apart.
        external(fs)
    }
    fn run(&self, fs: &dyn Fs, dir: &Path) -> io::Result<Report> {
        external(fs)?;
        let files = self.p.scaled(40_000, 10);
        let txns = self.p.scaled(80_000, 20);
        let script = format!(
            "set location {}\nset number {files}\nset transactions {txns}\nset size 4096 28672\nset read 4096\nset write 4096\nset subdirectories 10\nset seed {}\nset report terse\nrun\nquit\n",
            dir.display(),
            self.p.seed
        );
        let t = std::time::Instant::now();
        let mut child =
            Command::new("postmark").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
        child.stdin.as_mut().expect("piped").write_all(script.as_bytes())?;
        let out = child.wait_with_output()?;
        let wall = t.elapsed().as_secs_f64();
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(io::Error::other(format!("postmark failed: {}", String::from_utf8_lossy(&out.stderr))));
        }
        // postmark's own clock counts whole seconds, too coarse for runs
        // of seconds: its report only proves the run completed, and the
        // run is timed here, file creation and deletion included.
        parse(&text)
            .or_else(|| parse_terse(&text))
            .ok_or_else(|| io::Error::other(format!("cannot read postmark's output: {text}")))?;
        Ok(Report {
            workload: self.name().into(),
            ops: txns,
            secs: wall,
            ops_per_sec: txns as f64 / wall,
            txn_time_secs: Some(wall),
            files,
            ..Report::default()
        })
    }
}

/// postmark is a program of its own: its requests reach a real file
/// system only.
fn external(fs: &dyn Fs) -> io::Result<()> {
    if fs.is_model() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "postmark is a program of its own: its requests cannot be generated, only recorded on a mount",
        ));
    }
    Ok(())
}

/// The terse report (`set report terse`): one line of numbers, total
/// seconds, transaction seconds, transactions per second, then the rates
/// of each operation.
fn parse_terse(out: &str) -> Option<(f64, f64)> {
    out.lines().map(|l| l.trim_start_matches("pm>").trim()).find_map(|l| {
        let n: Vec<f64> = l.split_whitespace().map(|t| t.parse().ok()).collect::<Option<Vec<f64>>>()?;
        (n.len() >= 3).then(|| (n[1], n[2]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_postmarks_report() {
        let out = "Time:\n\t12 seconds total\n\t10 seconds of transactions (8000 per second)\n";
        assert_eq!(parse(out), Some((10.0, 8000.0)));
        assert_eq!(parse("nothing"), None);
        let terse = "pm>Deleting subdirectories...Done\n1 1 320.00 316.00 160.00 156.00 169.00 151.00 316.00 152.00 164.00 3112615.00 5898372.00\npm>\n";
        assert_eq!(parse_terse(terse), Some((1.0, 320.0)));
        assert_eq!(parse_terse("PostMark v1.51 : 8/14/01\n"), None);
    }
}
