//! An action's `ExecutedActionMetadata`: when the worker took it, fetched its inputs,
//! ran it and uploaded its outputs, as Bazel's execution log, its profile and
//! BuildGrid's records show them.
//!
//! Inputs are fetched in two ways here. What the worker needs before the guest starts
//! (the `Action`, the `Command`, the `Directory` messages, the program) is fetched
//! first; the files the guest reads are fetched lazily, while it runs, when it first
//! reads them. The REAPI's phases follow one another, so the worker lays its measured
//! durations out in its order:
//! - **input fetch**: from the worker's start, the eager fetches, plus the time the
//!   guest waited for lazy ones, summed;
//! - **execution**: the program's loading and the guest's run, less those waits;
//! - **output upload**: collecting the outputs and uploading them.
//!
//! Each duration is what was measured; the lazy waits are counted once, in the fetch.
//! The phases end no later than the worker's completion, which is the real clock's.
//! The queued time is the scheduler's to say (a lease does not carry it): left unset.

use std::time::{Duration, Instant, SystemTime};

use crate::apis::v2;

/// What the worker measured of one action.
#[derive(Clone, Copy, Debug)]
pub struct Timeline {
    /// When the worker took the lease, on the real clock.
    pub worker_start: SystemTime,
    /// The same moment, on the monotonic clock.
    pub started: Instant,
    /// Fetching what the guest needs before it starts.
    pub eager_fetch: Duration,
    /// Loading the program and running the guest, the lazy waits included.
    pub execution: Duration,
    /// The guest's waits for the files it read, summed.
    pub lazy_fetch: Duration,
    /// Collecting and uploading the outputs.
    pub upload: Duration,
}

impl Timeline {
    /// A timeline starting now.
    pub fn start() -> Timeline {
        Timeline {
            worker_start: SystemTime::now(),
            started: Instant::now(),
            eager_fetch: Duration::ZERO,
            execution: Duration::ZERO,
            lazy_fetch: Duration::ZERO,
            upload: Duration::ZERO,
        }
    }

    /// The metadata of an action `worker` has just finished (see the module docs).
    pub fn metadata(&self, worker: &str) -> v2::ExecutedActionMetadata {
        let at = |since_start: Duration| Some(timestamp(self.worker_start + since_start));
        let lazy = self.lazy_fetch.min(self.execution);
        let fetched = self.eager_fetch + lazy;
        let executed = fetched + (self.execution - lazy);
        let uploaded = executed + self.upload;
        let completed = self.started.elapsed().max(uploaded);
        v2::ExecutedActionMetadata {
            worker: worker.to_owned(),
            worker_start_timestamp: at(Duration::ZERO),
            input_fetch_start_timestamp: at(Duration::ZERO),
            input_fetch_completed_timestamp: at(fetched),
            execution_start_timestamp: at(fetched),
            execution_completed_timestamp: at(executed),
            output_upload_start_timestamp: at(executed),
            output_upload_completed_timestamp: at(uploaded),
            worker_completed_timestamp: at(completed),
            virtual_execution_duration: Some(duration(self.execution - lazy)),
            ..Default::default()
        }
    }
}

fn duration(d: Duration) -> crate::apis::protobuf::Duration {
    crate::apis::protobuf::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

fn timestamp(at: SystemTime) -> crate::apis::protobuf::Timestamp {
    let since = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    crate::apis::protobuf::Timestamp {
        seconds: since.as_secs() as i64,
        nanos: since.subsec_nanos() as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nanos(t: &Option<crate::apis::protobuf::Timestamp>) -> i128 {
        let t = t.as_ref().expect("every timestamp is set");
        i128::from(t.seconds) * 1_000_000_000 + i128::from(t.nanos)
    }

    #[test]
    fn the_phases_follow_each_other_with_the_lazy_waits_in_the_fetch() {
        let started = Instant::now() - Duration::from_millis(900);
        let timeline = Timeline {
            worker_start: SystemTime::now() - Duration::from_millis(900),
            started,
            eager_fetch: Duration::from_millis(100),
            execution: Duration::from_millis(500),
            lazy_fetch: Duration::from_millis(200),
            upload: Duration::from_millis(50),
        };
        let m = timeline.metadata("w1");
        assert_eq!(m.worker, "w1");
        let order = [
            &m.worker_start_timestamp,
            &m.input_fetch_start_timestamp,
            &m.input_fetch_completed_timestamp,
            &m.execution_start_timestamp,
            &m.execution_completed_timestamp,
            &m.output_upload_start_timestamp,
            &m.output_upload_completed_timestamp,
            &m.worker_completed_timestamp,
        ]
        .map(nanos);
        assert!(order.windows(2).all(|w| w[0] <= w[1]), "{order:?}");
        let ms = |a: usize, b: usize| (order[b] - order[a]) / 1_000_000;
        assert_eq!(ms(1, 2), 300, "eager fetch and the lazy waits");
        assert_eq!(ms(3, 4), 300, "the execution without the waits");
        assert_eq!(ms(5, 6), 50);
        assert!(ms(0, 7) >= 900, "completion is the real clock's");
        assert_eq!(
            m.virtual_execution_duration,
            Some(crate::apis::protobuf::Duration {
                seconds: 0,
                nanos: 300_000_000
            })
        );
        assert!(m.queued_timestamp.is_none(), "the scheduler's to say");
    }

    #[test]
    fn waits_longer_than_the_run_never_make_time_go_backwards() {
        let mut timeline = Timeline::start();
        timeline.execution = Duration::from_millis(10);
        timeline.lazy_fetch = Duration::from_millis(40);
        let m = timeline.metadata("w");
        assert!(nanos(&m.execution_start_timestamp) <= nanos(&m.execution_completed_timestamp));
        assert_eq!(
            nanos(&m.input_fetch_completed_timestamp) - nanos(&m.input_fetch_start_timestamp),
            10_000_000
        );
    }
}
