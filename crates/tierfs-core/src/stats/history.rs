//! What the mount served and moved over the last five minutes, hour and
//! day, as bcache keeps its hit ratio (issue "run it like a real storage
//! service").
//!
//! Pure: [`History::observe`] is given the time and the running totals
//! (requests and bytes served per tier, moves, bytes moved), keeps what
//! each minute added in a ring of at most a day of minutes, and
//! [`History::window`] sums the minutes of a window. Windows are whole
//! minutes, the current one included, so "the last five minutes" covers
//! four to five minutes of time. The first observation is the baseline:
//! totals kept from before the mount are not counted as if they had all
//! happened in its first minute.

use crate::clock::Timestamp;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::time::Duration;

/// Minutes kept: a day.
pub const KEPT_MINUTES: u64 = 24 * 60;

/// Running totals, or what a span of time added to them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Requests served, indexed by tier (SSD, HDD).
    pub reqs: [u64; 2],
    /// Bytes served, indexed by tier.
    pub bytes: [u64; 2],
    /// Moves between the tiers (promotions, demotions, copies, drops).
    pub moves: u64,
    /// Bytes moved between the tiers.
    pub bytes_moved: u64,
}

impl Totals {
    /// What `self` added since `before`; a total that went back (the
    /// statistics were reset) counts from zero.
    fn since(&self, before: &Totals) -> Totals {
        let d = |now: u64, then: u64| if now >= then { now - then } else { now };
        Totals {
            reqs: [d(self.reqs[0], before.reqs[0]), d(self.reqs[1], before.reqs[1])],
            bytes: [d(self.bytes[0], before.bytes[0]), d(self.bytes[1], before.bytes[1])],
            moves: d(self.moves, before.moves),
            bytes_moved: d(self.bytes_moved, before.bytes_moved),
        }
    }

    fn add(&mut self, o: &Totals) {
        for i in 0..2 {
            self.reqs[i] = self.reqs[i].saturating_add(o.reqs[i]);
            self.bytes[i] = self.bytes[i].saturating_add(o.bytes[i]);
        }
        self.moves = self.moves.saturating_add(o.moves);
        self.bytes_moved = self.bytes_moved.saturating_add(o.bytes_moved);
    }

    /// The share of requests the SSD served (0 without requests).
    pub fn ssd_hit_ratio(&self) -> f64 {
        super::ssd_share(self.reqs)
    }
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct History {
    /// (minute since the epoch, what it added), oldest first.
    minutes: VecDeque<(u64, Totals)>,
    /// The totals at the last observation.
    last: Option<Totals>,
    /// When observing began.
    since: Option<Timestamp>,
}

/// One window as `tierfs stats` shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowReport {
    /// The window's length, seconds.
    pub span_secs: u64,
    /// Seconds of it the mount was observed (less than the span just after
    /// a mount).
    pub covered_secs: u64,
    /// What was served and moved in it.
    pub totals: Totals,
    /// Requests served by the SSD over all requests in it.
    pub ssd_hit_ratio: f64,
}

impl History {
    /// Notes the running `totals` at `now` (times before the last
    /// observation's minute count in that minute).
    pub fn observe(&mut self, now: Timestamp, totals: Totals) {
        let minute = now.secs() / 60;
        let Some(last) = self.last.replace(totals) else {
            self.since = Some(now);
            return;
        };
        let added = totals.since(&last);
        match self.minutes.back_mut() {
            Some((m, t)) if *m >= minute => t.add(&added),
            _ => self.minutes.push_back((minute, added)),
        }
        let oldest = minute.saturating_sub(KEPT_MINUTES - 1);
        while self.minutes.front().is_some_and(|(m, _)| *m < oldest) {
            self.minutes.pop_front();
        }
    }

    /// What the last `span` (whole minutes, the current one included, at
    /// most a day) added, at `now`.
    pub fn window(&self, now: Timestamp, span: Duration) -> WindowReport {
        let minute = now.secs() / 60;
        let n = (span.as_secs() / 60).clamp(1, KEPT_MINUTES);
        let first = (minute + 1).saturating_sub(n);
        let mut totals = Totals::default();
        for (_, t) in self.minutes.iter().rev().take_while(|(m, _)| *m >= first) {
            totals.add(t);
        }
        let covered = self.since.map_or(0, |s| now.secs().saturating_sub(s.secs())).min(span.as_secs());
        WindowReport { span_secs: span.as_secs(), covered_secs: covered, ssd_hit_ratio: totals.ssd_hit_ratio(), totals }
    }

    /// The last five minutes, hour and day.
    pub fn report(&self, now: Timestamp) -> Vec<WindowReport> {
        [5 * 60, 3600, 86_400].iter().map(|&s| self.window(now, Duration::from_secs(s))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(ssd: u64, hdd: u64) -> Totals {
        Totals { reqs: [ssd, hdd], bytes: [ssd * 4096, hdd * 4096], ..Totals::default() }
    }

    const T0: u64 = 1_000_000 * 60;

    fn at(secs: u64) -> Timestamp {
        Timestamp::from_secs(T0 + secs)
    }

    #[test]
    fn the_first_observation_is_the_baseline() {
        let mut h = History::default();
        h.observe(at(0), served(1000, 1000));
        assert_eq!(h.window(at(0), Duration::from_secs(300)).totals, Totals::default());
        h.observe(at(10), served(1030, 1010));
        let w = h.window(at(10), Duration::from_secs(300));
        assert_eq!(w.totals.reqs, [30, 10]);
        assert_eq!(w.ssd_hit_ratio, 0.75);
        assert_eq!(w.covered_secs, 10);
    }

    #[test]
    fn windows_hold_their_minutes_and_old_minutes_leave() {
        let mut h = History::default();
        let mut total = served(0, 0);
        h.observe(at(0), total);
        // Each minute of a day and a half, 3 SSD and 1 HDD request, and a
        // move every tenth minute.
        for m in 1..=(36 * 60) {
            total.reqs[0] += 3;
            total.reqs[1] += 1;
            if m % 10 == 0 {
                total.moves += 1;
                total.bytes_moved += 4096;
            }
            h.observe(at(m * 60), total);
        }
        let now = at(36 * 60 * 60);
        let five = h.window(now, Duration::from_secs(300));
        assert_eq!(five.totals.reqs, [15, 5], "five whole minutes");
        assert_eq!(five.ssd_hit_ratio, 0.75);
        assert_eq!(five.covered_secs, 300);
        let hour = h.window(now, Duration::from_secs(3600));
        assert_eq!((hour.totals.reqs, hour.totals.moves), ([180, 60], 6));
        let day = h.window(now, Duration::from_secs(86_400));
        assert_eq!((day.totals.reqs[0], day.totals.moves, day.totals.bytes_moved), (3 * 1440, 144, 144 * 4096));
        assert!(h.minutes.len() as u64 <= KEPT_MINUTES, "at most a day is kept");
        // A quiet hour: the five minutes are empty, the day is not.
        let later = at(37 * 60 * 60);
        h.observe(later, total);
        assert_eq!(h.window(later, Duration::from_secs(300)).totals, Totals::default());
        assert_eq!(h.window(later, Duration::from_secs(300)).ssd_hit_ratio, 0.0);
        assert_eq!(h.window(later, Duration::from_secs(86_400)).totals.reqs[0], 3 * (1440 - 60));
    }

    #[test]
    fn observations_within_a_minute_add_up_and_a_reset_counts_from_zero() {
        let mut h = History::default();
        h.observe(at(0), served(10, 10));
        h.observe(at(61), served(12, 10));
        h.observe(at(62), served(15, 11));
        h.observe(at(119), served(16, 11));
        assert_eq!(h.minutes.len(), 1);
        assert_eq!(h.window(at(119), Duration::from_secs(60)).totals.reqs, [6, 1]);
        // The totals went back (the statistics were reset): from zero.
        h.observe(at(130), served(2, 0));
        assert_eq!(h.window(at(130), Duration::from_secs(60)).totals.reqs, [2, 0]);
        assert_eq!(h.window(at(130), Duration::from_secs(300)).totals.reqs, [8, 1]);
        let r = h.report(at(130));
        assert_eq!(r.iter().map(|w| w.span_secs).collect::<Vec<_>>(), vec![300, 3600, 86_400]);
        assert!(r.iter().all(|w| w.covered_secs == 130 || w.covered_secs == w.span_secs));
    }
}
