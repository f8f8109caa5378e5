//! `--jitter`: a random delay of known size before each request reaches the engine, so that
//! repeated measurements against the sim vary as a real host's do, by a stated amount, and the
//! statistics built on them can be checked against the true value.
//!
//! Each delay is uniform on (0, 2 × mean]: its mean is the stated `mean`, its standard deviation
//! mean / √3. The n-th request of a seed waits the same in every run, so runs can be repeated
//! exactly.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::bench::rng::Rng;

/// The delays of one sim process, in the order requests arrive.
#[derive(Debug)]
pub struct Jitter {
    mean: Duration,
    seed: u64,
    next: AtomicU64,
}

impl Jitter {
    pub fn new(mean: Duration, seed: u64) -> Jitter {
        Jitter {
            mean,
            seed,
            next: AtomicU64::new(0),
        }
    }

    /// The delay of the next request.
    pub fn next_delay(&self) -> Duration {
        nth_delay(self.mean, self.seed, self.next.fetch_add(1, Ordering::Relaxed))
    }
}

/// The delay of request `index` of stream `seed`.
fn nth_delay(mean: Duration, seed: u64, index: u64) -> Duration {
    mean.mul_f64(2.0 * Rng::for_item(seed, index).unit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::stats::Estimate;

    #[test]
    fn delays_are_seeded_and_average_the_stated_mean() {
        let mean = Duration::from_millis(20);
        let a = Jitter::new(mean, 7);
        let b = Jitter::new(mean, 7);
        let first: Vec<Duration> = (0..5).map(|_| a.next_delay()).collect();
        assert_eq!(first, (0..5).map(|_| b.next_delay()).collect::<Vec<_>>());
        assert_ne!(first[0], Jitter::new(mean, 8).next_delay());
        let delays: Vec<f64> = (0..20_000)
            .map(|i| nth_delay(mean, 1, i).as_secs_f64() * 1e3)
            .collect();
        assert!(delays.iter().all(|d| *d > 0.0 && *d <= 40.0));
        let s = Estimate::of(&delays).unwrap();
        assert!((s.mean - 20.0).abs() < 0.2, "{}", s.mean);
        // Uniform on (0, 40]: sd = 40 / √12.
        assert!((s.sd - 40.0 / 12f64.sqrt()).abs() < 0.2, "{}", s.sd);
    }

    /// What `repeat: 5` of a point of 4 requests at C=1 sees: each repetition's mean TTFT is a
    /// fixed service time plus the mean of its 4 delays, so the true mean TTFT is the service
    /// time plus the stated mean. Over 2,000 seeds the 95% interval of the repetitions must cover
    /// it about 95% of the time (binomial sd 0.5%: 93.5–96.5% allowed).
    #[test]
    fn the_interval_of_repeated_points_covers_the_true_value_at_its_stated_rate() {
        let (mean, service_ms, requests, repetitions) = (Duration::from_millis(20), 48.8, 4, 5);
        let truth = service_ms + 20.0;
        let seeds = 2_000;
        let covered = (0..seeds)
            .filter(|&seed| {
                let jitter = Jitter::new(mean, seed);
                let means: Vec<f64> = (0..repetitions)
                    .map(|_| {
                        let ttft: f64 = (0..requests)
                            .map(|_| service_ms + jitter.next_delay().as_secs_f64() * 1e3)
                            .sum();
                        ttft / requests as f64
                    })
                    .collect();
                let s = Estimate::of(&means).unwrap();
                (s.mean - truth).abs() <= s.ci95.unwrap()
            })
            .count();
        let rate = covered as f64 / seeds as f64;
        assert!((0.935..=0.965).contains(&rate), "covered {rate}");
    }
}
