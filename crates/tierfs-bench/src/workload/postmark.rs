//! The real postmark (Debian's `postmark`), configured as in Loris §V-C1
//! and scaled like the built-in mail workload.

use super::{Params, Report, Workload};
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
    fn prepare(&self, _dir: &Path) -> io::Result<()> {
        // postmark creates its own files, inside the measured run, and
        // reports the transaction time apart.
        Ok(())
    }
    fn run(&self, dir: &Path) -> io::Result<Report> {
        let files = self.p.scaled(40_000, 10);
        let txns = self.p.scaled(80_000, 20);
        let script = format!(
            "set location {}\nset number {files}\nset transactions {txns}\nset size 4096 28672\nset read 4096\nset write 4096\nset subdirectories 10\nset seed {}\nset report terse\nrun\nquit\n",
            dir.display(),
            self.p.seed
        );
        let mut child =
            Command::new("postmark").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
        child.stdin.as_mut().expect("piped").write_all(script.as_bytes())?;
        let out = child.wait_with_output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(io::Error::other(format!("postmark failed: {}", String::from_utf8_lossy(&out.stderr))));
        }
        let (secs, rate) = parse(&text)
            .or_else(|| parse_terse(&text, txns))
            .ok_or_else(|| io::Error::other(format!("cannot read postmark's output: {text}")))?;
        Ok(Report {
            workload: self.name().into(),
            ops: txns,
            secs,
            ops_per_sec: rate,
            txn_time_secs: Some(secs),
            files,
            ..Report::default()
        })
    }
}

/// The terse report: "Total time ...; transactions: N seconds" lines vary
/// between versions; fall back to the first number on a line mentioning
/// transactions.
fn parse_terse(out: &str, txns: u64) -> Option<(f64, f64)> {
    for l in out.lines() {
        let low = l.to_ascii_lowercase();
        if low.contains("transaction") {
            if let Some(n) = l.split(|c: char| !(c.is_ascii_digit() || c == '.')).find_map(|t| t.parse::<f64>().ok()) {
                if n > 0.0 {
                    return Some((n, txns as f64 / n));
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_postmarks_report() {
        let out = "Time:\n\t12 seconds total\n\t10 seconds of transactions (8000 per second)\n";
        assert_eq!(parse(out), Some((10.0, 8000.0)));
        assert_eq!(parse("nothing"), None);
    }
}
