//! What every connection of one server shares (the exports, the access rules and
//! their generation, the tenants, the byte-rate buckets, the refusals logged), and the
//! bounds each connection is held to. Below the connections and the request handlers.

use std::sync::Arc;

use wasm9p_proto::transport::Peer;

use crate::access::PeerMatch;
use crate::export::Export;
use crate::{rates, tenants};

/// Most fids one connection may hold at once; the next attach or walk gets EMFILE.
/// Each fid may pin a directory handle, so this also bounds file descriptors.
pub const MAX_FIDS_PER_CONNECTION: usize = 16 * 1024;
/// Most requests one connection may have in flight; further frames wait to be read.
pub const MAX_INFLIGHT_PER_CONNECTION: usize = 256;

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) exports: Vec<Arc<Export>>,
    pub(crate) msize: u32,
    /// Per export (in the order of `exports`), the peers that may attach it; `None`:
    /// no rules, everyone may. Replaced whole by [`Server::set_rules`].
    pub(crate) access: std::sync::RwLock<Arc<Option<Vec<Vec<PeerMatch>>>>>,
    /// Bumped at every [`Server::set_rules`]: sessions then check the fids they hold.
    pub(crate) rules_generation: std::sync::atomic::AtomicU64,
    /// Each peer identity's shared bounds, for connections made while access rules
    /// are in force.
    pub(crate) tenants: tenants::Tenants,
    /// Refusals already logged, by peer and export (bounded: once full, refusals are
    /// logged only at debug level).
    pub(crate) refused: std::sync::Mutex<std::collections::HashSet<(String, String)>>,
    /// Per export (in the order of `exports`), its byte-rate cap's bucket; empty when
    /// no export is capped, so that uncapped reads look nothing up.
    pub(crate) rates: Vec<Option<Arc<rates::Bucket>>>,
}

/// Most refusals remembered for logging once.
const MAX_REFUSALS_LOGGED: usize = 4096;

impl Shared {
    /// The byte-rate cap's bucket of the export `export` is (or is inside), if capped.
    pub(crate) fn bucket(&self, export: &Export) -> Option<&Arc<rates::Bucket>> {
        let i = self.exports.iter().position(|e| export.within(e))?;
        self.rates.get(i)?.as_ref()
    }

    /// Whether any export has a byte-rate cap.
    pub(crate) fn capped(&self) -> bool {
        !self.rates.is_empty()
    }

    /// Whether `peer` may attach `export` (one of `exports`, or a directory inside it
    /// given by its parent); a refusal is logged once per peer and export.
    pub(crate) fn may_attach(&self, export: &Export, peer: &Peer) -> bool {
        let allowed = self.allowed(export, peer);
        if !allowed {
            let key = (peer.name.clone(), export.name.clone());
            let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
            if refused.len() < MAX_REFUSALS_LOGGED && refused.insert(key) {
                tracing::warn!(
                    "{}: may not attach {} ({}): refused",
                    peer.name,
                    export.name,
                    export.path.display()
                );
            } else {
                tracing::debug!("{}: may not attach {}: refused", peer.name, export.name);
            }
        }
        allowed
    }

    /// Whether the rules now let `peer` use `export` (or a directory inside it).
    pub(crate) fn allowed(&self, export: &Export, peer: &Peer) -> bool {
        let access = self
            .access
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some(access) = access.as_ref() else {
            return true;
        };
        self.exports
            .iter()
            .zip(access)
            .find(|(e, _)| export.within(e))
            .is_some_and(|(_, peers)| peers.iter().any(|p| p.matches(peer)))
    }

    /// The tenant a new connection of `peer` joins (none without rules, or for a peer
    /// known by nothing); `Err` when that tenant has all the connections it may.
    pub(crate) fn join(&self, peer: &Peer) -> Result<Option<tenants::Membership>, tenants::Full> {
        let rules = self
            .access
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        match rules {
            true => self.tenants.join(peer),
            false => Ok(None),
        }
    }

    pub(crate) fn rules_generation(&self) -> u64 {
        self.rules_generation
            .load(std::sync::atomic::Ordering::Acquire)
    }
}
