//! An instance's life past its request: dropped (the default, a fresh instance per
//! request), or kept for the next one, as the operator chose ([`Reuse`]).
//!
//! Every request leases an instance ([`Lease`]): its store, its pool slot and its
//! place under `max_instances` (`Admitted`), from the request's start until the
//! response body is sent or gone. At the end, [`Lease::end`] decides:
//! - **kept**, when reuse is on, the instance has served fewer than [`Reuse::uses`]
//!   requests, and its request ended cleanly: the guest answered and returned (a 0.3
//!   guest's body stream closed), the response body went out whole without an error,
//!   no deadline passed, no trap, and the guest left no file of the namespace open.
//!   It waits in [`Idle`], newest first, for [`Reuse::idle`] at most;
//! - **dropped** otherwise: its store goes (the pool slot reset) on a task of its own,
//!   after the response has been written, and only then its place under
//!   `max_instances`. So a request admitted next always finds a slot: the slots in use
//!   are the instances leased (at most `max_instances`) and those kept, which a request
//!   takes before it makes a new one.
//!
//! A kept instance serves a request of the same program, on the same tier, only: a
//! reload or a move to the optimized tier leaves the kept ones of the version before to
//! be dropped as they come up, and an idle sweep drops those idle too long.
//!
//! What a reused instance sees of the requests before: its whole linear memory (globals,
//! the heap, whatever the guest left there), resources it kept (a file it opened and did
//! not close makes it not kept), and the time that passed. Nothing of another
//! instance's. Tenants that must not see each other's requests need one handler each,
//! or reuse off.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use wasmtime::Store;
use wasmtime_wasi_http::p2::bindings::Proxy;
use wasmtime_wasi_http::p3::bindings::Service;

use super::admission::Admitted;
use super::proxy::{Linked, RequestState};
use crate::engine::OnTier;

/// Whether, and how far, instances are reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reuse {
    /// The most requests one instance serves, one after the other (1: a fresh
    /// instance for every request, the default).
    pub uses: u32,
    /// The longest a kept instance waits for its next request before it is dropped.
    pub idle: Duration,
}

impl Default for Reuse {
    fn default() -> Reuse {
        Reuse {
            uses: 1,
            idle: Duration::from_secs(10),
        }
    }
}

/// The most requests [`Reuse::uses`] allows for one instance.
pub const MAX_USES: u32 = 1_000_000;

impl Reuse {
    /// Whether an instance may serve more than one request.
    pub fn on(&self) -> bool {
        self.uses > 1
    }
}

/// An instance's exports, once instantiated.
pub(crate) enum Instantiated {
    /// A 0.2 proxy.
    P2(Proxy),
    /// A 0.3 service.
    P3(Service),
}

/// The program an instance was made from, on its tier.
pub(crate) type Made = Arc<OnTier<Linked>>;

/// Instances kept between requests, newest last.
pub(crate) struct Idle {
    reuse: Reuse,
    kept: Mutex<Vec<Kept>>,
    /// Whether the sweep that drops instances idle too long runs.
    sweeping: AtomicBool,
    counts: Arc<ReuseCounts>,
}

/// What reuse did, for the metrics and `--stats`.
#[derive(Default)]
pub(crate) struct ReuseCounts {
    /// Requests served by an instance that had served one before.
    pub(crate) reused: AtomicU64,
    /// Instances kept now.
    pub(crate) idle: AtomicU64,
}

struct Kept {
    store: Store<RequestState>,
    instance: Instantiated,
    made: Made,
    served: u32,
    since: Instant,
}

impl Idle {
    pub(crate) fn new(reuse: Reuse, counts: Arc<ReuseCounts>) -> Arc<Idle> {
        Arc::new(Idle {
            reuse,
            kept: Mutex::new(Vec::new()),
            sweeping: AtomicBool::new(false),
            counts,
        })
    }

    /// The newest instance kept for `made`, if there is one; those kept for another
    /// program (a reload, the other tier) or idle too long that come up first are
    /// dropped on the way.
    fn take(&self, made: &Made) -> Option<Kept> {
        let mut stale = Vec::new();
        let found = {
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                match kept.pop() {
                    None => break None,
                    Some(k) if Arc::ptr_eq(&k.made, made) && !self.expired(&k) => break Some(k),
                    Some(k) => stale.push(k),
                }
            }
        };
        let gone = stale.len() as u64 + u64::from(found.is_some());
        self.counts.idle.fetch_sub(gone, Ordering::Relaxed);
        // Stale stores go outside the lock, and before the caller makes a new
        // instance in the slot one of them held.
        drop(stale);
        found
    }

    fn expired(&self, kept: &Kept) -> bool {
        kept.since.elapsed() >= self.reuse.idle
    }

    fn put(self: &Arc<Idle>, kept: Kept) {
        self.kept
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(kept);
        self.counts.idle.fetch_add(1, Ordering::Relaxed);
        if !self.sweeping.swap(true, Ordering::AcqRel) {
            self.sweep_on();
        }
    }

    /// Drops, every half of [`Reuse::idle`], the instances idle longer than it, on a
    /// task that ends with the handler.
    fn sweep_on(self: &Arc<Idle>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to sweep on: instances past their time are dropped as
            // requests come.
            self.sweeping.store(false, Ordering::Release);
            return;
        };
        let idle: Weak<Idle> = Arc::downgrade(self);
        let every = (self.reuse.idle / 2).max(Duration::from_millis(10));
        runtime.spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(idle) = idle.upgrade() else { return };
                idle.drop_expired();
            }
        });
    }

    fn drop_expired(&self) {
        let expired: Vec<Kept> = {
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            let (old, fresh): (Vec<Kept>, Vec<Kept>) =
                kept.drain(..).partition(|k| self.expired(k));
            *kept = fresh;
            old
        };
        self.counts
            .idle
            .fetch_sub(expired.len() as u64, Ordering::Relaxed);
    }
}

/// A request's instance: its store (and the instance in it, once made), its pool slot
/// and its place under `max_instances`, until [`Lease::end`].
pub(crate) struct Lease {
    pub(crate) store: Store<RequestState>,
    pub(crate) instance: Option<Instantiated>,
    made: Made,
    served: u32,
    admitted: Admitted,
    /// Where it goes back to, when reuse is on.
    idle: Option<Arc<Idle>>,
}

impl Lease {
    /// An instance for a request admitted as `admitted`: a kept one of `made`, if
    /// `idle` has one (its store is given back as it was), else a new store `fresh`
    /// makes (instantiated when the request starts).
    pub(crate) fn take(
        made: Made,
        admitted: Admitted,
        idle: Option<&Arc<Idle>>,
        fresh: impl FnOnce() -> Store<RequestState>,
    ) -> Lease {
        if let Some(kept) = idle.and_then(|idle| idle.take(&made)) {
            if let Some(idle) = idle {
                idle.counts.reused.fetch_add(1, Ordering::Relaxed);
            }
            return Lease {
                store: kept.store,
                instance: Some(kept.instance),
                made,
                served: kept.served,
                admitted,
                idle: idle.cloned(),
            };
        }
        Lease {
            store: fresh(),
            instance: None,
            made,
            served: 0,
            admitted,
            idle: idle.cloned(),
        }
    }

    /// Whether the instance served a request before this one.
    pub(crate) fn reused(&self) -> bool {
        self.instance.is_some() && self.served > 0
    }

    /// The end of the request: the instance kept, when reuse is on, the request
    /// `clean` (see the module docs) and the instance not yet at its last use; else
    /// dropped, on a task of its own when there is a runtime to run one (so that it
    /// costs the response nothing), and its place given back after it.
    pub(crate) fn end(self, clean: bool) {
        let Lease {
            store,
            instance,
            made,
            served,
            admitted,
            idle,
        } = self;
        let served = served + 1;
        match (idle, instance) {
            (Some(idle), Some(instance)) if clean && served < idle.reuse.uses => {
                idle.put(Kept {
                    store,
                    instance,
                    made,
                    served,
                    since: Instant::now(),
                });
                drop(admitted);
            }
            _ => {
                let gone = move || {
                    drop(store);
                    drop(admitted);
                };
                match tokio::runtime::Handle::try_current() {
                    Ok(runtime) => {
                        runtime.spawn(async move { gone() });
                    }
                    Err(_) => gone(),
                }
            }
        }
    }
}
