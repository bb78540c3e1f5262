//! The inverse-bitmap counter (Loris eq. 1, from Hystor §4).
//!
//! A read or write touching N 4-KB pages adds `2^(6 - floor(log2 N))` to the
//! file's 32-bit counter (N ≥ 64 adds 1), so files read or written in small
//! pieces — small files, random access — get hot quickly and big sequential
//! transfers barely register. The counter saturates at `u32::MAX`.

/// Page size the weights are defined in.
pub const PAGE: u64 = 4096;

/// Weight of one request touching `pages` pages; 0 pages weighs nothing.
pub fn weight(pages: u64) -> u32 {
    if pages == 0 {
        return 0;
    }
    let log = 63 - pages.leading_zeros();
    if log >= 6 {
        1
    } else {
        1 << (6 - log)
    }
}

/// Pages of 4 KB touched by `len` bytes at `off`.
pub fn pages(off: u64, len: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    let end = off.saturating_add(len) - 1;
    end / PAGE - off / PAGE + 1
}

/// Pages of a whole file of `size` bytes (at least one).
pub fn whole_file_pages(size: u64) -> u64 {
    size.div_ceil(PAGE).max(1)
}

/// Adds the weight of a request to a counter, saturating.
pub fn bump(counter: u32, pages: u64) -> u32 {
    counter.saturating_add(weight(pages))
}

/// The aging rule: every aging period each counter is halved (a shift
/// right by one), so heat that is not renewed halves each period and an
/// idle file reaches zero after at most 32 periods.
pub fn age(counter: u32) -> u32 {
    counter >> 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn loris_equation_one() {
        assert_eq!(weight(1), 64);
        assert_eq!(weight(2), 32);
        assert_eq!(weight(3), 32);
        assert_eq!(weight(4), 16);
        assert_eq!(weight(63), 2);
        assert_eq!(weight(64), 1);
        assert_eq!(weight(65), 1);
        assert_eq!(weight(1000), 1);
        assert_eq!(weight(0), 0);
    }

    #[test]
    fn pages_spanned() {
        assert_eq!(pages(0, 4096), 1);
        assert_eq!(pages(1, 4096), 2);
        assert_eq!(pages(4095, 2), 2);
        assert_eq!(pages(0, 1 << 20), 256);
        assert_eq!(pages(0, 0), 0);
        assert_eq!(whole_file_pages(0), 1);
        assert_eq!(whole_file_pages(4097), 2);
    }

    #[test]
    fn saturates() {
        assert_eq!(bump(u32::MAX - 3, 1), u32::MAX);
        assert_eq!(bump(10, 1), 74);
    }

    proptest! {
        /// Eq. 1 against its definition with real logarithms.
        #[test]
        fn weight_matches_definition(n in 1u64..1_000_000) {
            let e = 6 - (n as f64).log2().floor() as i64;
            let want = if e <= 0 { 1 } else { 1u32 << e };
            prop_assert_eq!(weight(n), want);
        }

        /// More pages never weigh more.
        #[test]
        fn weight_is_monotone(a in 1u64..10_000, b in 1u64..10_000) {
            if a <= b { prop_assert!(weight(a) >= weight(b)); }
        }

        /// Aging never raises a counter and keeps the order of counters.
        #[test]
        fn aging_is_monotone(a: u32, b: u32) {
            prop_assert!(age(a) <= a);
            if a <= b { prop_assert!(age(a) <= age(b)); }
        }
    }
}
