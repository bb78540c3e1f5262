//! The migrator's pacing: a token bucket for the migration rate, the
//! tokens of `measured`, and the busy gate. Pure: the time comes in, the
//! wait goes out; the caller sleeps.

use crate::clock::Timestamp;
use std::time::Duration;

/// Bytes per second with a burst allowance; rate 0 means unlimited.
#[derive(Clone, Debug)]
pub struct RateLimiter {
    rate: u64,
    burst: u64,
    tokens: f64,
    last: Option<Timestamp>,
}

impl RateLimiter {
    /// A limiter of `rate` bytes per second (0: unlimited), allowing bursts
    /// of `burst` bytes.
    pub fn new(rate: u64, burst: u64) -> Self {
        RateLimiter { rate, burst, tokens: burst as f64, last: None }
    }

    /// Takes `bytes` at time `now` and returns how long to wait before
    /// they may go. Waiting is owed, not refused: large requests go through
    /// and make later ones wait.
    pub fn take(&mut self, now: Timestamp, bytes: u64) -> Duration {
        if self.rate == 0 {
            return Duration::ZERO;
        }
        if let Some(last) = self.last {
            let refill = now.since(last).as_secs_f64() * self.rate as f64;
            self.tokens = (self.tokens + refill).min(self.burst as f64);
        }
        self.last = Some(now);
        self.tokens -= bytes as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate as f64)
        }
    }
}

/// Wu-Reddy's migration tokens: `rate` per second, at most `burst`
/// saved up; a move spends one. Pure: the time comes in.
#[derive(Clone, Debug)]
pub struct Tokens {
    rate: f64,
    burst: f64,
    level: f64,
    last: Option<Timestamp>,
}

impl Tokens {
    /// A bucket filling at `rate` tokens per second, holding at most
    /// `burst` (at least one); it starts empty.
    pub fn new(rate: f64, burst: f64) -> Self {
        Tokens { rate: rate.max(0.0), burst: burst.max(1.0), level: 0.0, last: None }
    }

    /// Whole tokens available at `now`.
    pub fn available(&mut self, now: Timestamp) -> u32 {
        if let Some(last) = self.last {
            self.level = (self.level + now.since(last).as_secs_f64() * self.rate).min(self.burst);
        }
        self.last = Some(now.max(self.last.unwrap_or(now)));
        self.level.floor() as u32
    }

    /// Spends `n` tokens (no more than are available).
    pub fn spend(&mut self, n: u32) {
        self.level = (self.level - n as f64).max(0.0);
    }
}

/// The shortest span a busy gate measures the request rate over: shorter
/// spans (an engine tick that came early) are added to the next one.
pub const BUSY_SPAN: Duration = Duration::from_millis(50);

/// How long the request rate must stay under the busy rate before a busy
/// mount is idle again: a workload's short pauses (a client between two
/// steps, a request thread held up for a tick) do not let the queued moves
/// out in a burst.
pub const IDLE_AFTER: Duration = Duration::from_millis(500);

/// Hystor's data mover reorganizes the layout "during idle periods" so
/// that it does not get in the way of the foreground jobs (§5.4.2). The
/// gate knows whether the mount is busy (at least `busy_rate` requests a
/// second over a span it was told of, until the rate stayed under that for
/// [`IDLE_AFTER`]) and, while it is, lets a background move start only
/// `1 / moves` seconds after the last one that cost something ended;
/// while idle it lets every move go. Pure: the time and the count of
/// requests served come in.
#[derive(Clone, Debug)]
pub struct BusyGate {
    busy_rate: f64,
    /// Between two starts while busy; `None`: no limit.
    interval: Option<Duration>,
    /// The last sample kept: its time and the count of requests then.
    sample: Option<(Timestamp, u64)>,
    busy: bool,
    /// While busy: since when the rate has stayed under the busy rate.
    idle_since: Option<Timestamp>,
    last_start: Option<Timestamp>,
}

impl BusyGate {
    /// A gate that calls the mount busy from `busy_rate` requests a
    /// second and then lets `moves` moves a second start (0: no limit,
    /// the gate is open).
    pub fn new(busy_rate: f64, moves: f64) -> Self {
        // A rate too small for a Duration is as good as none at all.
        let interval = (moves > 0.0).then(|| Duration::try_from_secs_f64(1.0 / moves).unwrap_or(Duration::MAX));
        BusyGate { busy_rate, interval, sample: None, busy: false, idle_since: None, last_start: None }
    }

    /// Takes the count of requests served so far, at `now`: the rate since
    /// the last sample (at least [`BUSY_SPAN`] ago) decides whether the
    /// mount is busy. A count that went back (a new volume) or a clock that
    /// stepped back starts the measurement again.
    pub fn sample(&mut self, now: Timestamp, served: u64) {
        if let Some((t, n)) = self.sample {
            if now >= t && served >= n {
                let span = now.since(t);
                if span < BUSY_SPAN {
                    return;
                }
                if (served - n) as f64 / span.as_secs_f64() >= self.busy_rate {
                    self.busy = true;
                    self.idle_since = None;
                } else if self.busy {
                    let since = *self.idle_since.get_or_insert(t);
                    if now.since(since) >= IDLE_AFTER {
                        self.busy = false;
                        self.idle_since = None;
                    }
                }
            }
        }
        self.sample = Some((now, served));
    }

    /// True if the mount is busy and moves are held back (never for a
    /// gate without a move limit).
    pub fn busy(&self) -> bool {
        self.busy && self.interval.is_some()
    }

    /// How long a background move must wait at `now` before it may start
    /// (zero: at once). A clock that stepped back behind the last start
    /// makes it wait one interval from now.
    pub fn wait(&mut self, now: Timestamp) -> Duration {
        let (true, Some(iv), Some(last)) = (self.busy, self.interval, self.last_start) else {
            return Duration::ZERO;
        };
        if now < last {
            self.last_start = Some(now);
            return iv;
        }
        iv.saturating_sub(now.since(last))
    }

    /// A background move that cost something (its copy, its syncs) ended
    /// at `now`: the next one waits from here.
    pub fn started(&mut self, now: Timestamp) {
        self.last_start = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_fill_at_their_rate_up_to_the_burst_and_moves_spend_them() {
        let mut t = Tokens::new(0.5, 3.0);
        let t0 = Timestamp::from_secs(1000);
        assert_eq!(t.available(t0), 0, "it starts empty");
        assert_eq!(t.available(t0.plus(Duration::from_secs(1))), 0, "half a token");
        assert_eq!(t.available(t0.plus(Duration::from_secs(2))), 1);
        t.spend(1);
        assert_eq!(t.available(t0.plus(Duration::from_secs(2))), 0);
        // A long idle time saves up at most the burst.
        assert_eq!(t.available(t0.plus(Duration::from_secs(3600))), 3);
        t.spend(5);
        assert_eq!(t.available(t0.plus(Duration::from_secs(3600))), 0, "never below zero");
        // A clock that steps back adds nothing.
        assert_eq!(t.available(t0), 0);
        assert_eq!(t.available(t0.plus(Duration::from_secs(3602))), 1);
    }

    #[test]
    fn keeps_the_rate_with_a_manual_clock() {
        let mut r = RateLimiter::new(1000, 500);
        let t0 = Timestamp::from_secs(100);
        assert_eq!(r.take(t0, 500), Duration::ZERO, "the burst goes at once");
        assert_eq!(r.take(t0, 1000), Duration::from_secs(1), "then it is owed");
        // One second later the debt is paid and nothing accumulated.
        let t1 = t0.plus(Duration::from_secs(1));
        assert_eq!(r.take(t1, 0), Duration::ZERO);
        assert_eq!(r.take(t1, 250), Duration::from_millis(250));
        // A long pause refills at most the burst.
        let t2 = t1.plus(Duration::from_secs(100));
        assert_eq!(r.take(t2, 500), Duration::ZERO);
        assert_eq!(r.take(t2, 100), Duration::from_millis(100));
    }

    #[test]
    fn zero_rate_is_unlimited() {
        let mut r = RateLimiter::new(0, 0);
        assert_eq!(r.take(Timestamp::from_secs(1), u64::MAX), Duration::ZERO);
    }

    /// Asks the gate as the migrator does: a move starts if it need not wait.
    fn start(g: &mut BusyGate, now: Timestamp) -> Duration {
        let wait = g.wait(now);
        if wait.is_zero() {
            g.started(now);
        }
        wait
    }

    #[test]
    fn the_busy_gate_spaces_moves_only_while_requests_come_fast() {
        let mut g = BusyGate::new(1000.0, 10.0);
        let t0 = Timestamp::from_secs(50);
        let ms = |n: u64| t0.plus(Duration::from_millis(n));
        g.sample(t0, 0);
        assert!(!g.busy(), "one sample measures nothing");
        // Idle: every move may start at once.
        for _ in 0..5 {
            assert_eq!(start(&mut g, t0), Duration::ZERO);
        }
        // 200 requests in 100 ms: 2 000 a second, busy.
        g.sample(ms(100), 200);
        assert!(g.busy());
        assert_eq!(start(&mut g, ms(100)), Duration::ZERO, "the last start was 100 ms ago");
        assert_eq!(start(&mut g, ms(130)), Duration::from_millis(70));
        assert_eq!(start(&mut g, ms(199)), Duration::from_millis(1));
        assert_eq!(start(&mut g, ms(200)), Duration::ZERO);
        // A span shorter than BUSY_SPAN is added to the next.
        g.sample(ms(120), 200);
        assert!(g.busy());
        // 25 requests in the 100 ms since the kept sample: 250 a second.
        // Busy still: the rate must stay low for IDLE_AFTER, from 100 ms.
        g.sample(ms(200), 225);
        assert!(g.busy());
        g.sample(ms(400), 250);
        assert!(g.busy());
        // A busy span in between starts the idle time again.
        g.sample(ms(500), 1_000);
        g.sample(ms(900), 1_010);
        assert!(g.busy(), "idle for 400 ms only");
        g.sample(ms(1000), 1_020);
        assert!(!g.busy(), "idle for 500 ms");
        assert_eq!(start(&mut g, ms(1001)), Duration::ZERO);
        assert_eq!(start(&mut g, ms(1001)), Duration::ZERO, "no spacing while idle");
        // A count that went back (a new volume) only starts over.
        g.sample(ms(1100), 10);
        assert!(!g.busy());
        g.sample(ms(1200), 1_000_000);
        assert!(g.busy());
        // A clock that stepped back waits one interval at most.
        assert_eq!(start(&mut g, ms(1200)), Duration::ZERO);
        assert_eq!(start(&mut g, ms(10)), Duration::from_millis(100));
        assert_eq!(start(&mut g, ms(110)), Duration::ZERO);
    }

    #[test]
    fn a_busy_gate_without_a_move_limit_is_open() {
        let mut g = BusyGate::new(1.0, 0.0);
        let t0 = Timestamp::from_secs(5);
        g.sample(t0, 0);
        g.sample(t0.plus(Duration::from_secs(1)), 1_000);
        assert!(!g.busy(), "nothing is held back");
        for _ in 0..3 {
            assert_eq!(start(&mut g, t0.plus(Duration::from_secs(1))), Duration::ZERO);
        }
    }
}
