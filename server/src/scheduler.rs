//! Tenants' data requests, lent the server's data threads by tenant in turn.
//!
//! Without access rules every request runs on the async workers: metadata inline on its
//! connection's reader task, data (reads, writes, fsyncs, listings) as a task of its
//! own. Where rules make peers tenants, each tenant's connections run on its own I/O
//! thread (`crate::io_thread`), metadata inline on their readers as before; a data
//! request there would hold up the tenant's other requests for as long as a cold disk
//! takes, and tenants' data requests would compete for CPUs unchecked. So a tenant's
//! data requests run here instead:
//!
//! - on [`data_threads`] threads of their own, one process-wide set, each at a lower
//!   CPU priority (nice +[`DATA_NICE`]) than the I/O threads: a metadata request that
//!   wakes its tenant's thread finds a CPU it may take from a data thread;
//! - from one queue per tenant, the tenants with work taken in turn, one request each:
//!   a tenant with 32 reads queued and one with a single read get the threads alike,
//!   whatever their queues' lengths.
//!
//! A request's reply and its Tflush bookkeeping are the caller's, inside the job.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// How much lower the data threads' CPU priority is than the rest of the server's.
pub const DATA_NICE: i32 = 5;

/// A data request, ready to run.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// Who a job is for: the tenant's address (its `Arc`'s), which is the tenant while
/// one of its connections lives.
pub(crate) type TenantKey = usize;

/// The queues: each tenant's jobs, and the tenants that have some, in turn.
#[derive(Default)]
struct Queues {
    jobs: HashMap<TenantKey, VecDeque<Job>>,
    turn: VecDeque<TenantKey>,
}

impl Queues {
    fn push(&mut self, tenant: TenantKey, job: Job) {
        let queue = self.jobs.entry(tenant).or_default();
        if queue.is_empty() {
            self.turn.push_back(tenant);
        }
        queue.push_back(job);
    }

    /// The next job: the first tenant's in turn, which then goes to the back of the
    /// line if it has more.
    fn pop(&mut self) -> Option<Job> {
        let tenant = self.turn.pop_front()?;
        let queue = self.jobs.get_mut(&tenant)?;
        let job = queue.pop_front();
        if queue.is_empty() {
            self.jobs.remove(&tenant);
        } else {
            self.turn.push_back(tenant);
        }
        job
    }
}

struct Scheduler {
    queues: Mutex<Queues>,
    ready: Condvar,
}

/// How many data threads: one per CPU, at least two.
pub fn data_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().max(2))
}

fn scheduler() -> &'static Arc<Scheduler> {
    static SCHEDULER: OnceLock<Arc<Scheduler>> = OnceLock::new();
    SCHEDULER.get_or_init(|| {
        let scheduler = Arc::new(Scheduler {
            queues: Mutex::default(),
            ready: Condvar::new(),
        });
        for i in 0..data_threads() {
            let scheduler = scheduler.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("9p-data-{i}"))
                .spawn(move || {
                    // The thread's own priority (Linux's nice is per thread). Failing
                    // leaves it at the server's: fair turns still hold.
                    let _ = rustix::process::setpriority_process(None, DATA_NICE);
                    run(&scheduler)
                });
            if let Err(e) = spawned {
                tracing::warn!("cannot start a data thread: {e}");
            }
        }
        scheduler
    })
}

fn run(scheduler: &Scheduler) {
    loop {
        let job = {
            let mut queues = scheduler.queues.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(job) = queues.pop() {
                    break job;
                }
                queues = scheduler
                    .ready
                    .wait(queues)
                    .unwrap_or_else(|e| e.into_inner());
            }
        };
        // A job that panics loses its own reply only (its connection's permit goes
        // with it); the thread serves on.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
    }
}

/// Starts the data threads if they are not running yet. Called before a tenant's I/O
/// thread starts: a thread takes its spawner's name until it sets its own, so data
/// threads first started from a tenant's thread (at its first data request) would
/// show as `wasm9p-tenant` for a moment (`ps -L`, `/proc/PID/task/*/comm`).
pub(crate) fn start() {
    scheduler();
}

/// Queues `job` for `tenant`; it runs on a data thread in the tenant's turn.
pub(crate) fn submit(tenant: TenantKey, job: Job) {
    let scheduler = scheduler();
    scheduler
        .queues
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(tenant, job);
    scheduler.ready.notify_one();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_take_turns_whatever_their_queues_lengths() {
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut queues = Queues::default();
        for i in 0..4 {
            let order = order.clone();
            queues.push(
                1,
                Box::new(move || order.lock().unwrap().push(format!("a{i}"))),
            );
        }
        for i in 0..2 {
            let order = order.clone();
            queues.push(
                2,
                Box::new(move || order.lock().unwrap().push(format!("b{i}"))),
            );
        }
        while let Some(job) = queues.pop() {
            job();
        }
        assert_eq!(*order.lock().unwrap(), ["a0", "b0", "a1", "b1", "a2", "a3"]);
        assert!(queues.jobs.is_empty() && queues.turn.is_empty());
    }

    #[test]
    fn submitted_jobs_run_on_the_data_threads() {
        let (tx, rx) = std::sync::mpsc::channel();
        for i in 0..8 {
            let tx = tx.clone();
            submit(
                7,
                Box::new(move || {
                    let name = std::thread::current().name().map(String::from);
                    tx.send((i, name)).unwrap();
                }),
            );
        }
        let mut seen: Vec<_> = (0..8)
            .map(|_| rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap())
            .collect();
        seen.sort();
        for (i, (n, name)) in seen.into_iter().enumerate() {
            assert_eq!(n, i);
            assert!(name.unwrap().starts_with("9p-data-"));
        }
    }
}
