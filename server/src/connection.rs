//! One connection's state, as the request handlers (`crate::ops`) and the directory
//! export's side of the shell (`crate::directory`) share it: its peer, its fids, the
//! msize granted, and the access rules it last followed. It imports neither of them.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use wasm9p_proto::transport::Peer;

use crate::fid::FidTable;
use crate::shared::Shared;
use crate::tenants::Tenant;

/// Per-connection state shared by the request tasks.
#[derive(Debug)]
pub(crate) struct Connection {
    pub shared: Arc<Shared>,
    /// Who is at the other end (what attach rules decide by).
    pub peer: Peer,
    pub fids: FidTable,
    pub msize: AtomicU32,
    /// Bytes of xattr values announced and not yet set (see `XattrReservation`).
    pub xattr_pending: Arc<AtomicUsize>,
    /// The access rules' generation this connection's fids were last checked against.
    rules_seen: AtomicU64,
    /// The peer's tenant, where access rules make peers tenants: its data requests run
    /// in its turn on the data threads (`crate::scheduler`).
    pub(crate) tenant: Option<Arc<Tenant>>,
}

impl Connection {
    /// A new connection of `peer`, a member of `tenant` if it has one.
    pub(crate) fn new(shared: Arc<Shared>, peer: Peer, tenant: Option<Arc<Tenant>>) -> Self {
        Connection {
            msize: AtomicU32::new(shared.msize),
            rules_seen: AtomicU64::new(shared.rules_generation()),
            shared,
            peer,
            fids: FidTable::counted(tenant.clone()),
            xattr_pending: Arc::default(),
            tenant,
        }
    }

    /// If the access rules changed since this connection last looked, releases the
    /// fids of exports the peer may no longer use.
    pub(crate) fn follow_rules(&self) {
        let now = self.shared.rules_generation();
        if self.rules_seen.swap(now, Ordering::AcqRel) != now {
            self.fids
                .revoke(|fid| self.shared.allowed(&fid.export, &self.peer));
        }
    }

    /// The msize granted.
    pub fn msize(&self) -> u32 {
        self.msize.load(Ordering::Relaxed)
    }
}
