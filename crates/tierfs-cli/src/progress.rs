//! Progress bars for the commands that run long (the sweep, a workload's
//! preparation, an unmount that writes the write-back areas back). They are
//! drawn on stderr only when it is a terminal; otherwise the commands print
//! one plain line per finished step, and nothing while a step runs.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tierfs_bench::sweep::Length;

/// How often the bars are redrawn and the phase's position read.
const TICK: Duration = Duration::from_millis(100);

/// Bar template.
const OVERALL: &str = "[{bar:30}] {pos}/{len} runs, {elapsed} so far  {msg}";
/// Bar template.
const TIMED: &str = "  {msg:<28} [{bar:30}] {elapsed} of ~{duration}";
/// Bar template.
const BYTES: &str = "  {msg:<28} [{bar:30}] {bytes} of ~{total_bytes}, ~{eta} left";
/// Bar template.
const SPINNER: &str = "  {msg:<28} {spinner} {elapsed}, {bytes} written";
/// Bar template.
const MANUAL: &str = "  {msg:<28} [{bar:30}] {bytes} of {total_bytes}, ~{eta} left";

/// Whether progress bars are drawn.
pub fn drawn() -> bool {
    std::io::stderr().is_terminal()
}

/// A bar's look; the templates are constants (checked by the tests).
fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar())
}

/// The phase, whatever a panicking holder left (only bars).
fn lock(m: &Mutex<Option<Phase>>) -> MutexGuard<'_, Option<Phase>> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The phase shown under the overall bar, and where its position comes from.
struct Phase {
    bar: ProgressBar,
    /// What the position counts.
    source: Source,
}

#[derive(Clone, Copy)]
enum Source {
    /// Milliseconds since it started.
    Elapsed(Instant),
    /// Bytes the workload generators wrote since it started.
    Written(u64),
    /// Set by the caller.
    Manual,
}

/// An optional overall bar (steps with an estimate of the time left) over
/// the bar of the step's current phase.
pub struct Progress {
    multi: MultiProgress,
    overall: Option<ProgressBar>,
    phase: Arc<Mutex<Option<Phase>>>,
    stop: Arc<AtomicBool>,
    ticker: Option<std::thread::JoinHandle<()>>,
    started: Instant,
}

impl Progress {
    /// Bars for `steps` steps (None: phases only).
    pub fn new(steps: Option<u64>) -> Self {
        let target = if drawn() { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
        let multi = MultiProgress::with_draw_target(target);
        let overall = steps.map(|n| {
            let b = multi.add(ProgressBar::new(n));
            b.set_style(style(OVERALL));
            b
        });
        let phase: Arc<Mutex<Option<Phase>>> = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = drawn().then(|| {
            let (phase, stop) = (phase.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    if let Some(p) = lock(&phase).as_ref() {
                        match p.source {
                            Source::Elapsed(t) => p.bar.set_position(t.elapsed().as_millis() as u64),
                            Source::Written(at) => {
                                p.bar.set_position(tierfs_bench::workload::bytes_written().saturating_sub(at))
                            }
                            Source::Manual => {}
                        }
                        p.bar.tick();
                    }
                    std::thread::sleep(TICK);
                }
            })
        });
        Progress { multi, overall, phase, stop, ticker, started: Instant::now() }
    }

    /// The time the steps left should take, at the mean pace of the
    /// `done` ones (None before the first or after the last).
    fn left(&self, done: usize) -> Option<Duration> {
        let total = self.overall.as_ref()?.length()?;
        let left = total.checked_sub(done as u64).filter(|&l| l > 0 && done > 0)?;
        Some(self.started.elapsed().mul_f64(left as f64 / done as f64))
    }

    /// " (~3m20s left)", or nothing.
    fn left_text(&self, done: usize) -> String {
        self.left(done).map(|d| format!(" (~{} left)", fmt_secs(d.as_secs()))).unwrap_or_default()
    }

    /// A step starts: `done` steps are finished.
    pub fn step(&self, done: usize, what: &str) {
        if let Some(b) = &self.overall {
            b.set_position(done as u64);
            b.set_message(format!("{what}{}", self.left_text(done)));
        }
    }

    /// A step ended with `line`: printed above the bars (on its own line
    /// when they are not drawn).
    pub fn finished(&self, done: usize, line: &str) {
        match &self.overall {
            Some(b) => {
                b.set_position(done as u64);
                self.line(&format!("[{done}/{}] {line}{}", b.length().unwrap_or(0), self.left_text(done)));
            }
            None => self.line(line),
        }
    }

    /// A line of text above the bars.
    pub fn line(&self, text: &str) {
        if drawn() {
            let _ = self.multi.println(text);
        } else {
            eprintln!("{text}");
        }
    }

    /// The current phase is now `name`, as long as `length` says.
    pub fn phase(&self, name: &str, length: Length) {
        let (bar, source) = match length {
            Length::Time(d) => {
                let b = ProgressBar::new(d.as_millis() as u64);
                b.set_style(style(TIMED));
                (b, Source::Elapsed(Instant::now()))
            }
            Length::Bytes(n) => {
                let b = ProgressBar::new(n);
                b.set_style(style(BYTES));
                (b, Source::Written(tierfs_bench::workload::bytes_written()))
            }
            Length::Unknown => {
                let b = ProgressBar::new_spinner();
                b.set_style(style(SPINNER));
                (b, Source::Written(tierfs_bench::workload::bytes_written()))
            }
        };
        bar.set_message(name.to_string());
        let bar = self.multi.add(bar);
        if let Some(old) = lock(&self.phase).replace(Phase { bar, source }) {
            old.bar.finish_and_clear();
            self.multi.remove(&old.bar);
        }
    }

    /// A phase whose position the caller sets, out of `total`, in bytes.
    pub fn manual(&self, name: &str, total: u64) {
        let bar = self.multi.add(ProgressBar::new(total));
        bar.set_style(style(MANUAL));
        bar.set_message(name.to_string());
        if let Some(old) = lock(&self.phase).replace(Phase { bar, source: Source::Manual }) {
            old.bar.finish_and_clear();
            self.multi.remove(&old.bar);
        }
    }

    /// Sets the manual phase's position.
    pub fn set(&self, pos: u64) {
        if let Some(p) = lock(&self.phase).as_ref() {
            p.bar.set_position(pos);
        }
    }

    /// Removes the bars.
    pub fn finish(mut self) {
        self.clear();
    }

    fn clear(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
        if let Some(p) = lock(&self.phase).take() {
            p.bar.finish_and_clear();
        }
        if let Some(b) = &self.overall {
            b.finish_and_clear();
        }
        let _ = self.multi.clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

/// "42s", "3m20s", "1h05m".
pub fn fmt_secs(s: u64) -> String {
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_parses() {
        for t in [OVERALL, TIMED, BYTES, SPINNER, MANUAL] {
            assert!(ProgressStyle::with_template(t).is_ok(), "{t}");
        }
    }

    #[test]
    fn times_left_read_well() {
        assert_eq!([42, 200, 3900].map(fmt_secs), ["42s", "3m20s", "1h05m"]);
    }

    #[test]
    fn without_a_terminal_nothing_is_drawn_and_steps_still_finish() {
        // The tests' stderr is captured: not a terminal.
        assert!(!drawn());
        let p = Progress::new(Some(3));
        p.step(0, "a");
        p.phase("preparing", Length::Unknown);
        p.phase("measuring", Length::Time(Duration::from_secs(1)));
        p.manual("writing back", 10);
        p.set(5);
        p.finished(1, "a: 10 ops/s");
        p.finish();
    }
}
