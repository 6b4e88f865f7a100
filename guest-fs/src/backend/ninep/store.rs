//! `cache=fscache` for the 9p backend: opening the store at attach, confirming what it
//! kept before it is used, and writing it back (see [`crate::fscache`]).
//!
//! Confirmations cost one request and make no fid: a *probe* walks the path and then
//! one name more ([`PROBE`]), which stops the walk one short (under a file nothing can
//! be walked; under a directory the name does not exist), so the server answers with the
//! qids of the whole path and binds nothing (9P: a partial walk leaves newfid unbound).
//! The qids it gives also record every directory's version on the way, which confirms
//! their records for free.
//!
//! The probes for everything the store keeps go at once, when the host starts them
//! ([`NinepFs::confirm_store_in_background`]) or else at the store's first use
//! ([`NinepFs::confirm_ahead`], [`crate::fscache::ahead`]); what they leave out is
//! probed when used, one probe at a time.

use std::sync::Arc;
use std::time::Instant;

use wasm9p_proto::{Errno, Qid, Rgetattr};

use super::file::Source;
use super::{parts, NinepFs};
use crate::backend::{OpenFile, OpenFlags};
use crate::cache::{Asked, Lookup, MountCache};
use crate::fscache::Store;
use crate::mount_options::NinepOptions;
use crate::node::Node;

/// Probes of the burst ahead of use in flight at once.
const AHEAD_IN_FLIGHT: usize = 64;

/// The name a probe walks below its path; if it does exist, the walk gets a fid,
/// which goes at once, and the answer is the same.
const PROBE: &str = ".wasm9p-probe";

/// The store for a mount with these options (`aname` names it when no `cachetag` is
/// given), or `None` without `cache=fscache`, or when it cannot be used: said once.
pub(super) fn open_store(options: &NinepOptions, aname: &str) -> Option<Arc<Store>> {
    let o = options.fscache.as_ref()?;
    let tag = o.tag.clone().unwrap_or_else(|| format!("aname:{aname}"));
    match Store::open(&o.dir, &tag, o.size) {
        Ok(store) => Some(Arc::new(store)),
        Err(e) => {
            tracing::warn!(
                "cache=fscache: cannot use the store in {}: {e}; this mount keeps its cache in memory only",
                o.dir.display()
            );
            None
        }
    }
}

impl NinepFs {
    fn store(&self) -> Option<&Arc<Store>> {
        self.cache.persistent_store()
    }

    /// The qid `names` lead to now, by one probing walk (the root's by Tgetattr).
    pub(super) async fn probe(&self, names: &[String]) -> Result<Qid, Errno> {
        if names.is_empty() {
            let asked = self.cache.asking();
            let q = self.root.getattr().await?.qid;
            self.cache.dir_seen(q.path, q.version, asked);
            return Ok(q);
        }
        let qids = self.probe_qids(names).await?;
        match qids.len() == names.len() {
            true => qids.last().copied().ok_or(Errno::EIO),
            false => Err(Errno::ENOENT),
        }
    }

    /// The qids of as much of `names` as exists now, by one probing walk (fails only
    /// when the first name cannot be walked).
    async fn probe_qids(&self, names: &[String]) -> Result<Vec<Qid>, Errno> {
        let mut path = names.to_vec();
        path.push(PROBE.into());
        match self.walk_path(&path).await {
            Ok(mut walk) => {
                walk.qids.truncate(names.len());
                Ok(walk.qids)
            }
            Err(e) if !e.qids.is_empty() => Ok(e.qids),
            Err(e) => Err(e.errno),
        }
    }

    /// Starts confirming what the store keeps (`cache=fscache`) on the current tokio
    /// runtime, without waiting: a host calls it once the mount is made, so that the
    /// confirmations travel while it loads its guest (the guest's first use of the
    /// store then waits only for what is still out). Nothing without a store or
    /// outside a runtime.
    pub fn confirm_store_in_background(self: &Arc<Self>) {
        if self.store().is_none() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let fs = self.clone();
        drop(runtime.spawn(async move {
            if let Some(store) = fs.store() {
                fs.confirm_ahead(store).await;
            }
        }));
    }

    /// Confirms, the first time it is called, what the store keeps, in one burst of
    /// probes sent together ([`crate::fscache::ahead`]); later calls, and those made
    /// while the burst is out, wait for it. What it confirms is then used without a
    /// probe of its own: a directory's record by the version the burst recorded, a
    /// file's attributes and a symlink's target as [`Self::confirmed`] takes them in.
    async fn confirm_ahead(&self, store: &Store) {
        self.store_ahead
            .get_or_init(|| async {
                use futures_util::stream::{self, StreamExt};
                if !self.policy().believes_between_uses() {
                    return;
                }
                let probes = store.probes_ahead(self.root.qid.path, crate::fscache::MAX_AHEAD);
                if probes.is_empty() {
                    return;
                }
                store.count_validations_ahead(probes.len() as u64);
                tracing::debug!("cache=fscache: {} probes ahead of use", probes.len());
                let asked = self.cache.asking();
                let probing = probes.into_iter().map(|p| async move {
                    let qids = self.probe_qids(&p.names).await;
                    (p, qids)
                });
                let answers: Vec<_> = stream::iter(probing)
                    .buffer_unordered(AHEAD_IN_FLIGHT)
                    .collect()
                    .await;
                tracing::debug!(
                    "cache=fscache: {} probes answered in {:.1} ms",
                    answers.len(),
                    asked.at.elapsed().as_secs_f64() * 1e3
                );
                // The directories on the way were recorded by the walks themselves;
                // their attributes kept on disk are taken in once each.
                let mut dirs = std::collections::HashMap::new();
                for (probe, qids) in answers {
                    let Ok(qids) = qids else { continue };
                    let whole = qids.len() == probe.names.len();
                    let (last, on_the_way) = match (qids.split_last(), whole) {
                        (Some((last, before)), true) => (Some(last), before),
                        _ => (None, &qids[..]),
                    };
                    dirs.extend(on_the_way.iter().map(|q| (q.path, *q)));
                    if let Some(fresh) = last {
                        self.confirmed(probe.qid, *fresh, asked);
                    }
                }
                for fresh in dirs.into_values() {
                    let _ = self.cache.stored_attr(fresh, asked); // nothing, without a record
                }
            })
            .await;
    }

    /// What `dir`'s record on disk says of `name`, once the server has confirmed the
    /// directory is at the record's version (`None`: no record, or out of date).
    pub(super) async fn answer_from_store(
        &self,
        dir: &Node,
        name: &str,
    ) -> Option<Result<Qid, Errno>> {
        if !self.dir_from_store(dir, Some(name)).await {
            return None;
        }
        match self.cache.lookup(dir.id, name) {
            Lookup::Found(q) => Some(Ok(q)),
            Lookup::Missing => Some(Err(Errno::ENOENT)),
            _ => None,
        }
    }

    /// Takes in `dir`'s record from the store, if it has one (once per process, see
    /// `load_dir`); whether it had one. A caller that comes while another is taking
    /// the record in waits for it (the store still says it has one, and the load is
    /// coalesced), so that both find its names in the cache.
    pub(super) async fn dir_from_store(&self, dir: &Node, name: Option<&str>) -> bool {
        let Some(store) = self.store() else {
            return false;
        };
        self.confirm_ahead(store).await;
        if !store.has_dir(dir.id) {
            return false;
        }
        self.store_loads
            .run(dir.id, || self.load_dir(dir, name, store))
            .await;
        true
    }

    /// Takes in `dir`'s record if the directory is still at its version: known from a
    /// walk through it, else asked by probing `name` in it (the directory itself
    /// without one), which also confirms (or not) what the store keeps of `name`
    /// itself, so that opening it costs nothing more.
    async fn load_dir(&self, dir: &Node, name: Option<&str>, store: &Store) {
        let Some(record) = store.take_dir(dir.id) else {
            return;
        };
        let Ok(n) = parts(dir) else { return };
        let mut probed = None;
        // The directory's version, and when the request that told it was sent: the
        // record is taken in only if the directory has not changed through this mount
        // since (an answer that left before a change must not undo it).
        let (version, asked) = match self.cache.dir_version_believed(dir.id) {
            Some(seen) => seen,
            None if n.path.is_empty() => {
                store.count_validation();
                tracing::debug!("cache=fscache: probing {:?} on use", n.path.to_vec());
                let asked = self.cache.asking();
                (self.probe(&[]).await.map_or(0, |q| q.version), asked)
            }
            None => {
                store.count_validation();
                tracing::debug!("cache=fscache: probing {:?} on use", n.path.to_vec());
                let mut names = n.path.to_vec();
                names.extend(name.map(str::to_owned));
                let asked = self.cache.asking();
                let qids = self.probe_qids(&names).await.unwrap_or_default();
                let dir_at = n.path.len() - 1;
                if name.is_some() {
                    probed = qids.get(dir_at + 1).copied();
                }
                let version = match qids.get(dir_at) {
                    Some(q) if q.path == dir.id => q.version,
                    _ => 0,
                };
                (version, asked)
            }
        };
        if version != record.version {
            store.dir_out_of_date(dir.id, record.version);
            return;
        }
        store.count_hit();
        let node_qid = name.and_then(|name| record.names.get(name).copied().flatten());
        self.cache.load_dir(dir.id, record, asked);
        if let (Some(fresh), Some(node_qid)) = (probed, node_qid) {
            self.confirmed(node_qid, fresh, asked);
        }
    }

    /// A probe showed the file a node (with `node_qid`) names is at `fresh`: what the
    /// store keeps of it at that qid is cached (its attributes, its target).
    fn confirmed(&self, node_qid: Qid, fresh: Qid, asked: Asked) {
        let Some(store) = self.store() else { return };
        if node_qid.path != fresh.path {
            return;
        }
        let _ = self.cache.stored_attr(fresh, asked); // nothing, without a record
        if self.policy().symlinks() {
            if let Some(target) = store.link(fresh.path, fresh.version) {
                store.count_hit();
                self.cache
                    .insert_symlink_read(node_qid, target.into(), fresh.version, asked);
            }
        }
    }

    /// The attributes of `file` from the store, once one probe shows its qid has not
    /// moved since they were fetched.
    pub(super) async fn attr_from_store(&self, file: &Node) -> Option<Arc<Rgetattr>> {
        let store = self.store()?;
        store.file(file.id)?;
        self.confirm_ahead(store).await;
        if let Some(attr) = self.cache.peek_attr(file.id) {
            return Some(attr); // confirmed by the burst
        }
        let n = parts(file).ok()?;
        let asked = self.cache.asking();
        store.count_validation();
        tracing::debug!("cache=fscache: probing {:?} on use", n.path.to_vec());
        let fresh = self.probe(&n.path.to_vec()).await.ok()?;
        self.cache.stored_attr(fresh, asked)
    }

    /// A read-only open of `file` as loose mode defers it, when the store has the
    /// file's attributes, an earlier process opened it for reading at that qid, and
    /// one probe confirms it (none if a stat in this process did): its pages then come
    /// from the store (or the server, on a miss), and the next opens in this process
    /// are deferred without asking.
    pub(super) async fn open_from_store(
        &self,
        file: &Node,
        flags: OpenFlags,
        generation: u64,
    ) -> Option<Result<Box<dyn OpenFile>, Errno>> {
        let n = parts(file).ok()?;
        let store = self.store()?;
        let record = store.file(file.id)?;
        if !record.readable {
            return None; // its first open goes to the server, to answer as it would
        }
        self.confirm_ahead(store).await;
        let at = Instant::now();
        let qid = match self.cache.peek_attr(file.id) {
            // Confirmed in this process already (by a stat).
            Some(a) if a.qid == record.attr.qid => a.qid,
            _ => self.attr_from_store(file).await?.qid,
        };
        self.cache
            .insert_readable(n.qid.path, n.qid.version, generation, qid.version, at);
        let source = Source::Lazy {
            root: self.root.clone(),
            path: n.path.to_vec(),
        };
        Some(self.open_file(source, qid, flags).await)
    }

    /// The target of symlink `link` from the store, once one probe shows the link is
    /// the one it was read from (a node from a listing has no version to compare).
    pub(super) async fn link_from_store(&self, link: &Node) -> Option<Arc<str>> {
        let store = self.store()?;
        store.has_link(link.id).then_some(())?;
        self.confirm_ahead(store).await;
        let n = parts(link).ok()?;
        if let Some(target) = self.cache.peek_symlink(n.qid) {
            return Some(target); // confirmed by the burst
        }
        store.count_validation();
        tracing::debug!("cache=fscache: probing {:?} on use", n.path.to_vec());
        let asked = self.cache.asking();
        let fresh = self.probe(&n.path.to_vec()).await.ok()?;
        let target: Arc<str> = match store.link(fresh.path, fresh.version) {
            Some(target) if fresh.path == link.id => target.into(),
            _ => {
                store.link_out_of_date(link.id);
                return None;
            }
        };
        store.count_hit();
        self.cache
            .insert_symlink_read(n.qid, target.clone(), fresh.version, asked);
        Some(target)
    }

    /// Writes what this mount knows into its store (merged with what other processes
    /// wrote): done when the mount goes, and whenever a long-lived host wants it.
    pub fn persist(&self) -> std::io::Result<()> {
        match self.store() {
            Some(store) => store.flush(self.cache.snapshot()),
            None => Ok(()),
        }
    }
}

/// A mount cache persisting to `store`, if there is one.
pub(super) fn with_store(cache: MountCache, store: Option<Arc<Store>>) -> MountCache {
    match store {
        Some(store) => cache.persisting(store),
        None => cache,
    }
}
