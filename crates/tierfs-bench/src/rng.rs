//! Seeded randomness for the workloads: SplitMix64, Zipf and log-normal
//! sizes. Written here so a seed means the same sequence forever.

/// SplitMix64.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator with a fixed seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    /// Uniform in [lo, hi].
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    /// True with probability p.
    pub fn chance(&mut self, p: f64) -> bool {
        self.f64() < p
    }
    /// A standard normal deviate (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.f64().max(1e-12);
        let u2 = self.f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
    /// A file size with the given median, log-normally spread (sigma 0.7),
    /// kept within [median/8, median*8].
    pub fn size(&mut self, median: u64) -> u64 {
        let v = median as f64 * (0.7 * self.normal()).exp();
        (v.round() as u64).clamp((median / 8).max(1), median * 8)
    }
}

/// Draws ranks 0..n with probability proportional to 1/(rank+1)^s.
#[derive(Clone, Debug)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// A Zipf distribution over `n` items with exponent `s`.
    pub fn new(n: usize, s: f64) -> Self {
        let mut cdf = Vec::with_capacity(n);
        let mut sum = 0.0;
        for k in 1..=n {
            sum += 1.0 / (k as f64).powf(s);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        Zipf { cdf }
    }
    /// The probability of rank `k` (0 is the most likely).
    pub fn share(&self, k: usize) -> f64 {
        let below = if k == 0 { 0.0 } else { self.cdf.get(k - 1).copied().unwrap_or(1.0) };
        self.cdf.get(k).copied().unwrap_or(1.0) - below
    }
    /// One draw.
    pub fn sample(&self, r: &mut Rng) -> usize {
        let u = r.f64();
        self.cdf.partition_point(|c| *c < u).min(self.cdf.len().saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_and_in_range() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
            let x = a.range(3, 9);
            assert!((3..=9).contains(&x));
            b.range(3, 9);
        }
        let mut r = Rng::new(1);
        let mut sizes: Vec<u64> = (0..10_001).map(|_| r.size(32 << 10)).collect();
        sizes.sort();
        let median = sizes[5000];
        assert!((24 << 10..40 << 10).contains(&median), "median {median}");
    }

    #[test]
    fn zipf_prefers_low_ranks() {
        let z = Zipf::new(1000, 1.0);
        let mut r = Rng::new(3);
        let mut hits = vec![0u32; 1000];
        for _ in 0..100_000 {
            hits[z.sample(&mut r)] += 1;
        }
        assert!(hits[0] > hits[1] && hits[1] > hits[10] && hits[10] > hits[500]);
        // Rank 1 takes about 1/H(1000) = 13 % of the draws.
        assert!((12_000..15_000).contains(&hits[0]), "{}", hits[0]);
    }
}
