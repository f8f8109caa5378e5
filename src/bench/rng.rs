//! A small seeded random number generator (SplitMix64) for prompts and arrival times: the same
//! seed gives the same prompts on every host and in every rigrun version.
//!
//! Ours rather than `rand_xoshiro` + `rand_distr`, decided for that promise: the rust-random
//! crates allow "value-breaking" changes (same seed, other values) in every minor release, and
//! their range and distribution samplers are where such changes land, so a dependency update
//! could silently change every prompt of a seed. These 40 lines change only when we change
//! them, and the tests pin their output. Prompts use integer arithmetic only, so they are identical
//! on every platform; arrival gaps go through the platform's `ln`, which may differ in the last
//! bit (far below a nanosecond). SplitMix64's statistics are ample for token ids and gaps.

/// SplitMix64: fast, tiny state, good enough statistics for picking token ids and gaps.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`, decorrelated from generators of nearby seeds.
    pub fn new(seed: u64) -> Self {
        let mut rng = Rng(seed ^ 0x9E37_79B9_7F4A_7C15);
        rng.next_u64();
        rng
    }

    /// A generator for item `index` of stream `seed` (e.g. request `index`'s prompt).
    pub fn for_item(seed: u64, index: u64) -> Self {
        Self::new(seed.wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ index)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`n` ≥ 1); the modulo bias is negligible for the small `n` used here.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A uniform value in (0, 1]: never 0, so `ln` of it is finite.
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// An exponentially distributed value with mean `mean` (the gap between Poisson arrivals).
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -self.unit().ln() * mean
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_deterministic_and_spread() {
        let a: Vec<u64> = (0..4).map(|i| Rng::for_item(7, i).next_u64()).collect();
        let b: Vec<u64> = (0..4).map(|i| Rng::for_item(7, i).next_u64()).collect();
        assert_eq!(a, b);
        assert_ne!(a[0], a[1]);
        let mut rng = Rng::new(1);
        let values: Vec<f64> = (0..10_000).map(|_| rng.unit()).collect();
        assert!(values.iter().all(|v| *v > 0.0 && *v <= 1.0));
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
    }

    #[test]
    fn a_seed_gives_the_same_values_in_every_version() {
        // Changing these changes the prompts of every seed: say so in docs/bench.md if you must.
        let mut rng = Rng::new(42);
        let values = [rng.next_u64(), rng.next_u64(), rng.next_u64()];
        assert_eq!(
            values,
            [
                0x4752_6757_130f_9f52,
                0x581c_e1ff_0e4a_e394,
                0x09bc_585a_2448_23f2
            ]
        );
        let mut item = Rng::for_item(7, 3);
        let ids: Vec<u64> = (0..5).map(|_| item.below(29_000)).collect();
        assert_eq!(ids, [5731, 3363, 22694, 27894, 6701]);
        let gap = Rng::new(1).exponential(0.5);
        assert!((gap - 0.758_242_611_720_607_7).abs() < 1e-12, "{gap}");
    }

    #[test]
    fn exponential_has_the_asked_mean() {
        let mut rng = Rng::new(3);
        let n = 20_000;
        let mean = (0..n).map(|_| rng.exponential(0.25)).sum::<f64>() / n as f64;
        assert!((mean - 0.25).abs() < 0.01, "{mean}");
    }
}
