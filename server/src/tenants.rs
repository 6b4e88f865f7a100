//! Limits per peer identity, where access rules make peers tenants: one tenant's many
//! connections, fids or requests in flight cannot take what the others need.
//!
//! A tenant is who the transport says the peer is (a tcp peer's address, whatever its
//! port; a Unix peer's uid and gid; a vsock CID) on one listener. Its connections share
//! one bound on fids and one on requests in flight, on top of each connection's own
//! ([`crate::MAX_FIDS_PER_CONNECTION`], [`crate::MAX_INFLIGHT_PER_CONNECTION`]); a
//! connection past the tenant's bound on connections is closed at once. Without access
//! rules (one client, or clients that trust each other) there are no tenants and only
//! the per-connection bounds hold. Connections known by nothing (in process) are no
//! tenant.
//!
//! A tenant's connections accepted by [`crate::Server::serve`] run on the tenant's own
//! I/O thread (`io_thread`), started with the first of them.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use tokio::sync::Semaphore;
use wasm9p_proto::transport::{Peer, PeerId};
use wasm9p_proto::Addr;

use crate::io_thread::{IoThread, Slots};

/// The bounds each tenant gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerLimits {
    /// Connections open at once.
    pub connections: usize,
    /// Fids held at once over all its connections.
    pub fids: usize,
    /// Requests in flight at once over all its connections.
    pub requests: usize,
}

impl Default for PeerLimits {
    fn default() -> Self {
        PeerLimits {
            connections: 256,
            fids: 64 * 1024,
            requests: 1024,
        }
    }
}

/// One tenant's shares, alive while one of its connections is.
#[derive(Debug)]
pub(crate) struct Tenant {
    connections: AtomicUsize,
    fids: AtomicUsize,
    /// Permits for requests in flight.
    pub requests: Arc<Semaphore>,
    limits: PeerLimits,
    /// Where its connections run, once one needs it.
    io: OnceLock<IoThread>,
    /// The server's I/O threads, which it may have one of.
    io_slots: Arc<Slots>,
    /// Held while the I/O thread starts, so that it starts once.
    io_starting: Mutex<()>,
}

impl Tenant {
    /// The tenant's I/O thread, started at the first call that finds one free (`None`:
    /// the server's are all taken).
    pub fn io_thread(&self) -> io::Result<Option<&IoThread>> {
        if let Some(thread) = self.io.get() {
            return Ok(Some(thread));
        }
        let _starting = self.io_starting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(thread) = self.io.get() {
            return Ok(Some(thread));
        }
        // The data threads its requests go to, started from here rather than from it.
        crate::scheduler::start();
        Ok(IoThread::start(&self.io_slots)?.map(|thread| self.io.get_or_init(|| thread)))
    }

    /// Takes a fid from the tenant's share; false when it is spent.
    pub fn take_fid(&self) -> bool {
        self.fids
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limits.fids).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives `n` fids back.
    pub fn give_fids(&self, n: usize) {
        let _ = self
            .fids
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |m| {
                Some(m.saturating_sub(n))
            });
    }
}

/// Why a connection joins no tenant: the tenant has all the connections it may.
#[derive(Debug)]
pub(crate) struct Full;

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("has all the connections a peer may")
    }
}

/// A connection's place in its tenant: gives the connection back when dropped.
#[derive(Debug)]
pub(crate) struct Membership(pub Arc<Tenant>);

impl Drop for Membership {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::AcqRel);
    }
}

type Key = (Option<Addr>, PeerId);

/// Every tenant with a connection open.
#[derive(Debug)]
pub(crate) struct Tenants {
    limits: PeerLimits,
    live: Mutex<HashMap<Key, Weak<Tenant>>>,
    io_slots: Arc<Slots>,
}

impl Tenants {
    /// Tenants with `limits` each, and at most `io_threads` I/O threads among them.
    pub fn new(limits: PeerLimits, io_threads: usize) -> Tenants {
        Tenants {
            limits,
            live: Mutex::default(),
            io_slots: Slots::new(io_threads),
        }
    }

    /// Counts a new connection of `peer` in its tenant: `Err` when the tenant has all
    /// the connections it may, `Ok(None)` for a peer known by nothing.
    pub fn join(&self, peer: &Peer) -> Result<Option<Membership>, Full> {
        if peer.id == PeerId::Unknown {
            return Ok(None);
        }
        let key = (peer.listener.clone(), peer.id.clone());
        let tenant = {
            let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
            live.retain(|_, t| t.strong_count() > 0);
            match live.get(&key).and_then(Weak::upgrade) {
                Some(t) => t,
                None => {
                    let t = Arc::new(Tenant {
                        connections: AtomicUsize::new(0),
                        fids: AtomicUsize::new(0),
                        requests: Arc::new(Semaphore::new(self.limits.requests)),
                        limits: self.limits,
                        io: OnceLock::new(),
                        io_slots: self.io_slots.clone(),
                        io_starting: Mutex::new(()),
                    });
                    live.insert(key, Arc::downgrade(&t));
                    t
                }
            }
        };
        let joined = tenant
            .connections
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limits.connections).then_some(n + 1)
            });
        match joined {
            Ok(_) => Ok(Some(Membership(tenant))),
            Err(_) => Err(Full),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(uid: u32) -> Peer {
        Peer {
            name: format!("uid {uid}"),
            listener: Some("unix:/run/9p.sock".parse().unwrap()),
            id: PeerId::Unix { uid, gid: uid },
        }
    }

    #[test]
    fn a_tenant_has_its_own_bounds_and_gets_them_back() {
        let tenants = Tenants::new(
            PeerLimits {
                connections: 2,
                fids: 3,
                requests: 4,
            },
            1,
        );
        let a1 = tenants.join(&user(1)).unwrap().unwrap();
        let a2 = tenants.join(&user(1)).unwrap().unwrap();
        assert!(tenants.join(&user(1)).is_err(), "a third connection");
        // Another tenant is not held back by the first.
        let b = tenants.join(&user(2)).unwrap().unwrap();
        assert!(Arc::ptr_eq(&a1.0, &a2.0) && !Arc::ptr_eq(&a1.0, &b.0));
        assert!((0..3).all(|_| a1.0.take_fid()));
        assert!(
            !a2.0.take_fid(),
            "fids are shared by the tenant's connections"
        );
        assert!(b.0.take_fid());
        a1.0.give_fids(1);
        assert!(a2.0.take_fid());
        assert_eq!(a1.0.requests.available_permits(), 4);
        drop(a1);
        assert!(
            tenants.join(&user(1)).unwrap().is_some(),
            "a connection came back"
        );
        assert!(tenants.join(&Peer::local("x")).unwrap().is_none());
    }
}
