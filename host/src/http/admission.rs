//! How many instances run at once, and how many requests may wait for one.
//!
//! A request takes a permit of a semaphore with `max_instances` permits for as long as
//! its instance lives (past its response head, while the guest still writes the body).
//! Without a free permit it waits, if fewer than `queue` requests already wait, until
//! one is free or its deadline passes; past either bound it is refused (a 503).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Why a request got no instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Every instance busy and the queue full.
    QueueFull,
    /// It waited in the queue until its deadline.
    Waited,
}

/// The instances in flight and the queue before them.
pub(crate) struct Admission {
    instances: Arc<Semaphore>,
    max_instances: usize,
    queue: usize,
    waiting: AtomicUsize,
}

/// One request's place: held while its instance lives.
pub(crate) struct Admitted {
    _permit: OwnedSemaphorePermit,
}

impl Admission {
    pub(crate) fn new(max_instances: usize, queue: usize) -> Admission {
        Admission {
            instances: Arc::new(Semaphore::new(max_instances)),
            max_instances,
            queue,
            waiting: AtomicUsize::new(0),
        }
    }

    /// A place for one instance: at once, or after waiting in the queue until
    /// `deadline`.
    pub(crate) async fn enter(&self, deadline: Instant) -> Result<Admitted, Refused> {
        if let Ok(permit) = Arc::clone(&self.instances).try_acquire_owned() {
            return Ok(Admitted { _permit: permit });
        }
        // Take a place in the queue, unless it is full.
        let mut waiting = self.waiting.load(Ordering::Relaxed);
        loop {
            if waiting >= self.queue {
                return Err(Refused::QueueFull);
            }
            match self.waiting.compare_exchange_weak(
                waiting,
                waiting + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => waiting = now,
            }
        }
        let _place = Place(&self.waiting);
        let acquired =
            tokio::time::timeout_at(deadline.into(), Arc::clone(&self.instances).acquire_owned())
                .await;
        match acquired {
            Ok(Ok(permit)) => Ok(Admitted { _permit: permit }),
            // The semaphore is never closed; a timeout is the deadline.
            Ok(Err(_)) | Err(_) => Err(Refused::Waited),
        }
    }

    /// Instances running now.
    pub(crate) fn in_flight(&self) -> usize {
        self.max_instances - self.instances.available_permits()
    }

    /// Requests waiting now.
    pub(crate) fn queued(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }
}

/// A place in the queue, given back however the wait ends (the request's future may
/// also be dropped, when its client goes away).
struct Place<'a>(&'a AtomicUsize);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn past_the_instances_requests_queue_and_past_the_queue_they_are_refused() {
        let admission = Arc::new(Admission::new(1, 1));
        let far = Instant::now() + Duration::from_secs(60);
        let first = admission.enter(far).await.unwrap();
        assert_eq!(admission.in_flight(), 1);
        let queued = {
            let admission = Arc::clone(&admission);
            tokio::spawn(async move { admission.enter(far).await.map(|_| ()) })
        };
        while admission.queued() == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(admission.enter(far).await.err(), Some(Refused::QueueFull));
        drop(first);
        assert_eq!(queued.await.unwrap(), Ok(()));
        assert_eq!(admission.queued(), 0);
        assert_eq!(admission.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_request_waits_no_longer_than_its_deadline_and_leaves_the_queue() {
        let admission = Admission::new(1, 4);
        let _busy = admission
            .enter(Instant::now() + Duration::from_secs(60))
            .await
            .unwrap();
        let soon = Instant::now() + Duration::from_millis(20);
        assert_eq!(admission.enter(soon).await.err(), Some(Refused::Waited));
        assert_eq!(admission.queued(), 0);
    }
}
