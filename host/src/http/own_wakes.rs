//! A connection's task that wakes itself while it runs is polled again at once,
//! instead of being rescheduled.
//!
//! A wasm guest and the response body it writes are futures of one task (the
//! connection's: see `super::instance`), so they wake one another while that task is
//! being polled: a WASI 0.3 guest's stream write wakes the body's reader, its store's
//! event loop wakes its own futures. tokio takes a task woken during its own poll for
//! one that yielded: it queues it behind the others and, to have it stolen, wakes an
//! idle worker (a futex or an eventfd write, a context switch on the other core, an IPI
//! in a virtual machine), for a task that would have gone on at once on this thread.
//!
//! [`OwnWakes`] polls its future with a waker of its own. A wake that comes while the
//! future is being polled on this thread (from it, or from another thread meanwhile)
//! is noted, and the future is polled again before [`OwnWakes::poll`] returns; a wake
//! that comes between polls is passed to the runtime's waker as it came. Two bounds
//! keep the task fair: at most [`AGAIN`] polls more in a row, and none once tokio's
//! cooperative budget is spent (a future out of budget wakes itself to yield, and then
//! the wake goes to the runtime, which runs the other tasks first).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// How many polls more a wake during a poll may cause, in a row.
const AGAIN: usize = 8;

/// `future`, polled again at once when it wakes itself (see the module's docs).
pub(crate) struct OwnWakes<F> {
    future: Pin<Box<F>>,
    noted: Arc<Noted>,
    waker: Waker,
}

/// What the wakers handed to the future share.
struct Noted {
    /// The future is being polled.
    polling: AtomicBool,
    /// It was woken since its poll began.
    woken: AtomicBool,
    /// The runtime's waker of the task, as of its latest poll.
    task: AtomicWaker,
}

impl Wake for Noted {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Noted first, then read: a poll that ends meanwhile sees the note (both are
        // `SeqCst`, against `polling` cleared before `woken` is taken).
        self.woken.store(true, Ordering::SeqCst);
        if !self.polling.load(Ordering::SeqCst) {
            self.task.wake();
        }
    }
}

impl<F: Future> OwnWakes<F> {
    pub(crate) fn new(future: F) -> Self {
        let noted = Arc::new(Noted {
            polling: AtomicBool::new(false),
            woken: AtomicBool::new(false),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(Arc::clone(&noted));
        OwnWakes {
            future: Box::pin(future),
            noted,
            waker,
        }
    }
}

impl<F: Future> Future for OwnWakes<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        this.noted.task.register(cx.waker());
        let mut inner = Context::from_waker(&this.waker);
        for _ in 0..=AGAIN {
            this.noted.woken.store(false, Ordering::SeqCst);
            this.noted.polling.store(true, Ordering::SeqCst);
            let polled = this.future.as_mut().poll(&mut inner);
            this.noted.polling.store(false, Ordering::SeqCst);
            if polled.is_ready() {
                return polled;
            }
            if !this.noted.woken.load(Ordering::SeqCst) {
                return Poll::Pending;
            }
            if !tokio::task::coop::has_budget_remaining() {
                break;
            }
        }
        // Woken still: the runtime polls it again after the others.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A future that wakes itself `times` times within its polls, then ends.
    struct WakesItself {
        times: usize,
        polls: Arc<AtomicUsize>,
    }

    impl Future for WakesItself {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.times == 0 {
                return Poll::Ready(());
            }
            self.times -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// Counts the wakes of the task's own waker.
    struct Counting(AtomicUsize);
    impl Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn polled_once(times: usize) -> (Poll<()>, usize, usize) {
        let polls = Arc::new(AtomicUsize::new(0));
        let mut future = OwnWakes::new(WakesItself {
            times,
            polls: Arc::clone(&polls),
        });
        let counting = Arc::new(Counting(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&counting));
        let polled = Pin::new(&mut future).poll(&mut Context::from_waker(&waker));
        (
            polled,
            polls.load(Ordering::SeqCst),
            counting.0.load(Ordering::SeqCst),
        )
    }

    #[test]
    fn a_wake_during_its_poll_polls_it_again_without_waking_the_task() {
        let (polled, polls, task_wakes) = polled_once(3);
        assert!(polled.is_ready());
        assert_eq!(polls, 4);
        assert_eq!(task_wakes, 0);
    }

    #[test]
    fn past_the_bound_the_task_is_woken_to_be_polled_after_the_others() {
        let (polled, polls, task_wakes) = polled_once(100);
        assert!(polled.is_pending());
        assert_eq!(polls, AGAIN + 1);
        assert_eq!(task_wakes, 1);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_wake_between_polls_reaches_the_task() {
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let waiting = tokio::spawn(OwnWakes::new(rx));
        tokio::task::yield_now().await;
        tx.send(7).unwrap();
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("the wake reached the task")
            .unwrap();
        assert_eq!(got.unwrap(), 7);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn wakes_from_another_thread_are_never_lost() {
        for _ in 0..2000 {
            let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
            let sender = std::thread::spawn(move || tx.send(1).unwrap());
            let got = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                tokio::spawn(OwnWakes::new(rx)),
            )
            .await
            .expect("no wake lost")
            .unwrap();
            assert_eq!(got.unwrap(), 1);
            sender.join().unwrap();
        }
    }
}
