//! Time as a value. Statistics and policies never read a clock: they are
//! handed a [`Timestamp`]; only executors hold a [`Clock`].

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// From whole seconds.
    pub fn from_secs(s: u64) -> Self {
        Timestamp(s.saturating_mul(1_000_000_000))
    }
    /// From milliseconds.
    pub fn from_millis(ms: u64) -> Self {
        Timestamp(ms.saturating_mul(1_000_000))
    }
    /// Whole seconds.
    pub fn secs(self) -> u64 {
        self.0 / 1_000_000_000
    }
    /// Time elapsed since `earlier` (zero if `earlier` is later).
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
    /// This time plus `d`.
    pub fn plus(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(d.as_nanos().min(u64::MAX as u128) as u64))
    }
}

/// A source of time for executors.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The real wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Timestamp(d.as_nanos() as u64)
    }
}

/// Waits until `t`: sleeps while far, spins the last stretch (sleeping is
/// too coarse for the tens of microseconds an SSD request takes).
pub fn wait_until(clock: &dyn Clock, t: Timestamp) {
    loop {
        let now = clock.now();
        if now >= t {
            return;
        }
        let left = t.since(now);
        if left > Duration::from_micros(300) {
            std::thread::sleep(left - Duration::from_micros(150));
        } else {
            std::thread::yield_now();
        }
    }
}

/// A clock that moves only when told to; for tests and the simulator.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<Mutex<Timestamp>>);

impl ManualClock {
    /// A clock standing at `t`.
    pub fn new(t: Timestamp) -> Self {
        ManualClock(Arc::new(Mutex::new(t)))
    }
    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        let mut t = self.0.lock();
        *t = t.plus(d);
    }
    /// Sets the clock.
    pub fn set(&self, t: Timestamp) {
        *self.0.lock() = t;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.0.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(Timestamp::from_secs(10));
        assert_eq!(c.now().secs(), 10);
        c.advance(Duration::from_millis(1500));
        assert_eq!(c.now(), Timestamp(11_500_000_000));
        assert_eq!(c.now().since(Timestamp::from_secs(11)), Duration::from_millis(500));
        assert_eq!(Timestamp::from_secs(1).since(Timestamp::from_secs(2)), Duration::ZERO);
    }
}
