//! A token bucket for the migration rate. Pure: the time comes in, the
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
}
