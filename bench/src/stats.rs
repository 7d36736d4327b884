//! Small statistics helpers.

use std::time::Duration;

/// The `q`-quantile (0..=1) of `samples` (sorted in place), nearest rank.
pub(crate) fn quantile(samples: &mut [Duration], q: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort_unstable();
    let rank = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len());
    samples[rank - 1]
}

/// Jain's fairness index over per-worker counts: 1 = perfectly even, 1/n = one worker got all.
pub(crate) fn jain(counts: &[u64]) -> f64 {
    let n = counts.len() as f64;
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let squares: f64 = counts.iter().map(|&c| (c as f64) * (c as f64)).sum();
    if squares == 0.0 {
        0.0
    } else {
        sum * sum / (n * squares)
    }
}

/// Microseconds as a float, for reports.
pub(crate) fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_is_one_for_even_and_one_over_n_for_a_monopoly() {
        assert!((jain(&[5, 5, 5, 5]) - 1.0).abs() < 1e-9);
        assert!((jain(&[20, 0, 0, 0]) - 0.25).abs() < 1e-9);
    }

    #[test]
    fn quantiles_use_the_nearest_rank() {
        let mut s: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile(&mut s, 0.5), Duration::from_millis(50));
        assert_eq!(quantile(&mut s, 0.99), Duration::from_millis(99));
    }
}
