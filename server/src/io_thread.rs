//! A tenant's I/O thread: where the readers and writers of its connections run, and
//! with them its metadata requests (which run on the reader, see `session`).
//!
//! Why a thread per tenant and not the shared async workers: a tenant streaming large
//! reads keeps those workers busy writing its replies, and the kernel's scheduler
//! lets a thread that has been running wait behind others when it wakes. Another
//! tenant's request that lands on such a worker waits with it: on 2 CPUs, a
//! walk+getattr+clunk took 2-4 ms at p99 while a neighbour streamed, 6-10x its time
//! alone (BENCHMARKS §9). A tenant's own thread sleeps while its tenant is idle, so
//! when that tenant's request arrives the scheduler runs it at once, whatever the
//! neighbours do; B's p99 while A streams then stays at what it is alone.
//!
//! - One thread per tenant with a connection open, a tokio current-thread runtime
//!   started with the tenant's first connection served this way and stopped when the
//!   tenant goes (its last connection closed, its last data request done). A tenant
//!   with many connections has them all on its one thread: opening connections buys
//!   no more threads.
//! - Connections reach it from the accept loop untied from the accepting runtime
//!   ([`wasm9p_proto::transport::Listener::accept_detached`]) and are registered with
//!   this thread's own I/O driver, so a reply or request wakes this thread directly.
//! - Data requests still run on the data threads, tenants in turn (`scheduler`); their
//!   replies come back here to be written.
//! - Without access rules there are no tenants and every connection is a task on the
//!   server's async workers, as for an embedded server's in-process pipe.
//! - At most [`crate::ServerConfig::max_tenant_threads`] run at once (a thread costs
//!   about 32 KiB, and many peers could otherwise spend the host's threads): a tenant
//!   that finds none free has its connections served on the async workers, as without
//!   rules, and gets a thread of its own with a later connection once one is free.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

/// How many I/O threads may run at once, and how many do.
#[derive(Debug)]
pub(crate) struct Slots {
    taken: AtomicUsize,
    max: usize,
    /// Whether running out was logged (once per server).
    said_full: AtomicBool,
}

impl Slots {
    pub fn new(max: usize) -> Arc<Slots> {
        Arc::new(Slots {
            taken: AtomicUsize::new(0),
            max,
            said_full: AtomicBool::new(false),
        })
    }

    fn take(self: &Arc<Self>) -> Option<Slot> {
        self.taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(self.clone()))
    }
}

/// One I/O thread's place among [`Slots`], given back when dropped.
#[derive(Debug)]
struct Slot(Arc<Slots>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.taken.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A running I/O thread; dropping it stops the thread's runtime, and with it any task
/// still there.
#[derive(Debug)]
pub(crate) struct IoThread {
    runtime: Handle,
    /// Dropped with the thread's owner: the runtime then stops.
    _stop: oneshot::Sender<()>,
    _slot: Slot,
}

impl IoThread {
    /// Starts a thread named `wasm9p-tenant` running a runtime of its own, if `slots`
    /// has one free (`None`, logged the first time, if not).
    pub fn start(slots: &Arc<Slots>) -> io::Result<Option<IoThread>> {
        let Some(slot) = slots.take() else {
            if !slots.said_full.swap(true, Ordering::AcqRel) {
                tracing::warn!(
                    "all {} tenant threads are taken: tenants beyond them share the async \
                     workers (--max-tenant-threads)",
                    slots.max
                );
            }
            return Ok(None);
        };
        let runtime = Builder::new_current_thread().enable_all().build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
        Ok(Some(IoThread {
            runtime: handle,
            _stop: stop,
            _slot: slot,
        }))
    }

    /// Runs `task` on this thread.
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        drop(self.runtime.spawn(task));
    }
}

/// The name of every I/O thread (what `ps -L` and `/proc/PID/task/*/comm` show).
pub const THREAD_NAME: &str = "wasm9p-tenant";

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_task_runs_on_the_thread_and_the_thread_ends_when_dropped() {
        let slots = Slots::new(1);
        let thread = IoThread::start(&slots).unwrap().unwrap();
        assert!(
            IoThread::start(&slots).unwrap().is_none(),
            "a second thread past the bound"
        );
        let (tx, rx) = std::sync::mpsc::channel();
        thread.spawn(async move {
            let me = std::thread::current();
            tx.send((me.id(), me.name().map(str::to_owned))).unwrap();
            // A task still waiting when the thread stops is dropped, not leaked.
            std::future::pending::<()>().await;
        });
        let (id, name) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_ne!(id, std::thread::current().id());
        assert_eq!(name.as_deref(), Some(THREAD_NAME));
        let running = || {
            std::fs::read_dir("/proc/self/task")
                .unwrap()
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|comm| comm.trim_end() == THREAD_NAME)
                .count()
        };
        assert!(running() >= 1);
        let before = running();
        drop(thread);
        let deadline = Instant::now() + Duration::from_secs(10);
        while running() >= before && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(running() < before, "the thread outlived its owner");
        assert!(
            IoThread::start(&slots).unwrap().is_some(),
            "its slot was given back"
        );
    }
}
