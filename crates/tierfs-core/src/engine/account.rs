//! The SSD space account: how many bytes of the SSD each file takes, and
//! reservations for what is being written or copied there. Pure: the
//! engine keeps it behind a mutex and the volume tells it, synchronously,
//! every change (see [`crate::vfs::Hooks`]).
//!
//! A file's charge is what its SSD copy really occupies (allocated bytes,
//! as `du` counts them) as last measured, plus the reservations of
//! operations in flight. Removing a file drops exactly its charge, so the
//! total is always the sum of the charges: nothing can leak from it.

use crate::state::ns::Ino;
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Charge {
    /// Bytes the file's SSD copy occupied when last measured.
    settled: u64,
    /// Bytes reserved by operations in flight.
    pending: u64,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct SsdAccount {
    limit: u64,
    used: u64,
    files: HashMap<Ino, Charge>,
}

impl SsdAccount {
    /// An empty account with the most bytes the SSD may hold.
    pub fn new(limit: u64) -> Self {
        SsdAccount { limit, used: 0, files: HashMap::new() }
    }

    /// The most bytes the SSD may hold.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes charged, reservations included.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Bytes free under the limit.
    pub fn free(&self) -> u64 {
        self.limit.saturating_sub(self.used)
    }

    /// Files with a charge.
    pub fn files(&self) -> usize {
        self.files.len()
    }

    /// What one file is charged.
    pub fn charge(&self, ino: Ino) -> u64 {
        self.files.get(&ino).map(|c| c.settled + c.pending).unwrap_or(0)
    }

    /// Reserves `bytes` for `ino` if they fit under the limit.
    pub fn try_reserve(&mut self, ino: Ino, bytes: u64) -> bool {
        if bytes == 0 {
            return true;
        }
        if self.used.saturating_add(bytes) > self.limit {
            return false;
        }
        self.force_reserve(ino, bytes);
        true
    }

    /// Reserves `bytes` for `ino` even past the limit (the SSD really has
    /// room and nothing could be evicted: better over the limit than a
    /// failed write).
    pub fn force_reserve(&mut self, ino: Ino, bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.files.entry(ino).or_default().pending += bytes;
        self.used += bytes;
    }

    /// Gives back a reservation that was not used.
    pub fn unreserve(&mut self, ino: Ino, bytes: u64) {
        self.settle_with(ino, bytes, None);
    }

    /// An operation that reserved `reserved` bytes is done, and the file's
    /// SSD copy now occupies `now` bytes.
    pub fn settle(&mut self, ino: Ino, reserved: u64, now: u64) {
        self.settle_with(ino, reserved, Some(now));
    }

    fn settle_with(&mut self, ino: Ino, reserved: u64, now: Option<u64>) {
        let Some(c) = self.files.get_mut(&ino) else {
            if let Some(n) = now.filter(|n| *n > 0) {
                self.files.insert(ino, Charge { settled: n, pending: 0 });
                self.used += n;
            }
            return;
        };
        let before = c.settled + c.pending;
        c.pending -= reserved.min(c.pending);
        if let Some(n) = now {
            c.settled = n;
        }
        let after = c.settled + c.pending;
        self.used = self.used - before + after;
        if after == 0 {
            self.files.remove(&ino);
        }
    }

    /// The file takes no SSD space any more: its whole charge goes.
    /// Returns what it was charged.
    pub fn forget(&mut self, ino: Ino) -> u64 {
        let c = self.files.remove(&ino).unwrap_or_default();
        let total = c.settled + c.pending;
        self.used -= total;
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reservations_settle_to_what_the_file_occupies() {
        let mut a = SsdAccount::new(100);
        assert!(a.try_reserve(1, 60));
        assert!(!a.try_reserve(2, 50), "over the limit");
        a.settle(1, 60, 40);
        assert_eq!((a.used(), a.charge(1)), (40, 40));
        assert!(a.try_reserve(2, 50));
        a.unreserve(2, 50);
        assert_eq!(a.used(), 40);
        assert_eq!(a.files(), 1, "an unused reservation leaves nothing behind");
        a.force_reserve(3, 500);
        assert_eq!(a.free(), 0);
        assert_eq!(a.forget(3), 500);
        assert_eq!(a.forget(1), 40);
        assert_eq!((a.used(), a.files()), (0, 0));
    }

    #[test]
    fn a_removed_file_takes_its_reservations_with_it() {
        // A write to an open, unlinked file reserved space after the file
        // was forgotten; its last close forgets it again.
        let mut a = SsdAccount::new(1000);
        a.settle(7, 0, 300);
        assert!(a.try_reserve(7, 100));
        a.forget(7);
        assert!(a.try_reserve(7, 50));
        a.settle(7, 50, 350);
        a.forget(7);
        assert_eq!(a.used(), 0);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Reserve(Ino, u64),
        Force(Ino, u64),
        Unreserve(Ino, u64),
        Settle(Ino, u64, u64),
        Forget(Ino),
    }

    fn op() -> impl Strategy<Value = Op> {
        let ino = 1..6u64;
        let n = 0..300u64;
        prop_oneof![
            (ino.clone(), n.clone()).prop_map(|(i, b)| Op::Reserve(i, b)),
            (ino.clone(), n.clone()).prop_map(|(i, b)| Op::Force(i, b)),
            (ino.clone(), n.clone()).prop_map(|(i, b)| Op::Unreserve(i, b)),
            (ino.clone(), n.clone(), n).prop_map(|(i, r, b)| Op::Settle(i, r, b)),
            ino.prop_map(Op::Forget),
        ]
    }

    proptest! {
        /// Against a model that keeps (settled, pending) per file: the total
        /// is always their sum, reservations never pass the limit unless
        /// forced, and a forgotten file is charged nothing.
        #[test]
        fn the_total_is_always_the_sum_of_the_charges(ops in proptest::collection::vec(op(), 0..200)) {
            let mut a = SsdAccount::new(1000);
            let mut model: HashMap<Ino, (u64, u64)> = HashMap::new();
            for o in ops {
                let total: u64 = model.values().map(|(s, p)| s + p).sum();
                match o {
                    Op::Reserve(i, b) => {
                        let fits = b == 0 || total + b <= 1000;
                        prop_assert_eq!(a.try_reserve(i, b), fits);
                        if fits && b > 0 {
                            model.entry(i).or_default().1 += b;
                        }
                    }
                    Op::Force(i, b) => {
                        a.force_reserve(i, b);
                        model.entry(i).or_default().1 += b;
                    }
                    Op::Unreserve(i, b) => {
                        a.unreserve(i, b);
                        if let Some(c) = model.get_mut(&i) {
                            c.1 -= b.min(c.1);
                        }
                    }
                    Op::Settle(i, r, b) => {
                        a.settle(i, r, b);
                        let c = model.entry(i).or_default();
                        c.1 -= r.min(c.1);
                        c.0 = b;
                    }
                    Op::Forget(i) => {
                        a.forget(i);
                        model.remove(&i);
                    }
                }
                model.retain(|_, (s, p)| *s + *p > 0);
                let total: u64 = model.values().map(|(s, p)| s + p).sum();
                prop_assert_eq!(a.used(), total);
                prop_assert_eq!(a.files(), model.len());
                for (i, (s, p)) in &model {
                    prop_assert_eq!(a.charge(*i), s + p);
                }
            }
        }
    }
}
