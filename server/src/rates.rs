//! Byte-rate caps per export: `--rate EXPORT=BYTES` bounds the bytes read and written
//! through an export, by all its clients together, to BYTES a second.
//!
//! A cap is a token bucket holding a tenth of a second's bytes (at least 1 MiB, so that
//! one read of the largest msize always fits). A read or write takes its bytes (a read
//! the count it asks for) when it arrives; if the bucket is short, the request owes the
//! difference and waits, without a thread, until the rate has paid it back; later
//! requests wait behind it, in order. Metadata requests are never held.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A cap as configured: the export's name or path, and its bytes a second.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateCap {
    /// The export, as `--allow` names it.
    pub export: String,
    /// Bytes a second, at least 1.
    pub bytes_per_second: u64,
}

/// One export's bucket.
#[derive(Debug)]
pub(crate) struct Bucket {
    rate: f64,
    burst: f64,
    /// Bytes available now (negative: owed), as of the instant beside them.
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    pub(crate) fn new(bytes_per_second: u64) -> Bucket {
        let rate = bytes_per_second.max(1) as f64;
        let burst = (rate / 10.0).max(f64::from(1u32 << 20));
        Bucket {
            rate,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Takes `bytes` at `now`; how long the request must wait before it runs.
    pub(crate) fn take(&self, bytes: u64, now: Instant) -> Duration {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, then) = *state;
        let refilled = (tokens + now.saturating_duration_since(then).as_secs_f64() * self.rate)
            .min(self.burst);
        let left = refilled - bytes as f64;
        *state = (left, now.max(then));
        if left >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-left / self.rate)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_burst_passes_then_requests_wait_what_the_rate_takes_to_pay_them() {
        let bucket = Bucket::new(10 * MIB); // burst: 1 MiB
        let t0 = Instant::now();
        assert_eq!(bucket.take(MIB, t0), Duration::ZERO, "the burst");
        // The next MiB is owed whole: a tenth of a second at 10 MiB/s.
        let wait = bucket.take(MIB, t0);
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-6, "{wait:?}");
        // One behind it waits for both.
        let wait = bucket.take(MIB, t0);
        assert!((wait.as_secs_f64() - 0.2).abs() < 1e-6, "{wait:?}");
        // Seconds later the debt is paid and the bucket full again (never fuller).
        let later = t0 + Duration::from_secs(5);
        assert_eq!(bucket.take(MIB, later), Duration::ZERO);
        assert!(bucket.take(MIB, later) > Duration::ZERO);
    }

    #[test]
    fn the_burst_is_a_tenth_of_a_second_and_at_least_a_mebibyte() {
        let t0 = Instant::now();
        let fast = Bucket::new(100 * MIB);
        assert_eq!(fast.take(10 * MIB, t0), Duration::ZERO);
        assert!(fast.take(1, t0) > Duration::ZERO);
        let slow = Bucket::new(1000);
        assert_eq!(slow.take(MIB, t0), Duration::ZERO);
        assert!(slow.take(1, t0) > Duration::ZERO);
    }
}
