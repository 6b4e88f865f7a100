//! Checking what a 9p mount caches against the server, when its [`Trust`] is a window.
//!
//! Every walk goes through [`NinepFs::walk_path`], which records the qid version of
//! each directory the walk passed ([`MountCache::dir_seen`]): a walk to a header
//! confirms the names cached in every directory above it for free. What is still
//! unconfirmed when it is needed is checked by [`NinepFs::check_dir`]: one Tgetattr of
//! the root, or one Twalk to any other directory (its Rwalk carries the version), for
//! all the names cached in it; concurrent checks of one directory share one request.
//!
//! [`Trust`]: crate::mount_options::Trust
//! [`MountCache::dir_seen`]: crate::cache::MountCache::dir_seen

use wasm9p_proto::consts::qid;
use wasm9p_proto::{Errno, Qid, Rgetattr};

use super::NinepFs;
use crate::cache::{Asked, Seen};
use crate::client::{Walk, WalkError};
use crate::node::Node;

/// A stand-in for the qid version of a server that sends none: changes whenever the
/// file's size, mtime or ctime do (never 0, the "no version" value).
pub(super) fn content_stamp(a: &Rgetattr) -> u32 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (a.size, a.mtime_sec, a.mtime_nsec, a.ctime_sec, a.ctime_nsec).hash(&mut h);
    (h.finish() as u32) | 1
}

/// The version to key a file's pages by: its qid's, or its attributes' stamp when the
/// server keeps no versions.
pub(super) fn version_of(a: &Rgetattr) -> u32 {
    match a.qid.version {
        0 => content_stamp(a),
        v => v,
    }
}

impl NinepFs {
    /// Walks `names` from the root, recording the versions of the directories passed.
    pub(super) async fn walk_path(&self, names: &[String]) -> Result<Walk, WalkError> {
        let asked = self.cache.asking();
        let result = self.root.walk(names).await;
        let qids = match &result {
            Ok(walk) => &walk.qids,
            Err(e) => &e.qids,
        };
        self.record_dirs(qids, asked);
        result
    }

    pub(super) fn record_dirs(&self, qids: &[Qid], asked: Asked) {
        for q in qids.iter().filter(|q| q.ty & qid::DIR != 0) {
            self.cache.dir_seen(q.path, q.version, asked);
        }
    }

    /// How an answer about a name in `dir`, fetched by walking `names` (the path to
    /// the name), was learnt: the directory's version from the walk itself when it
    /// passed the directory (else `before`, read before the walk was sent).
    pub(super) fn seen_in(dir: &Node, qids: &[Qid], names: usize, before: Seen) -> Seen {
        match names.checked_sub(2) {
            // A name in the root, which has no qid of its own in a walk.
            None => before,
            Some(i) => Seen {
                asked: before.asked,
                dir_version: qids
                    .get(i)
                    .filter(|q| q.path == dir.id)
                    .map_or(0, |q| q.version),
            },
        }
    }

    /// What to tag an answer about `dir`'s names with, read before asking.
    pub(super) fn seen_before(&self, dir: &Node) -> Seen {
        self.cache.seen_now(dir.id)
    }

    /// Asks the server for directory `dir`'s qid version now, and records it (0: the
    /// server keeps none, or the path names another directory now).
    pub(super) async fn check_dir(&self, dir: &Node, names: &[String]) -> Result<u32, Errno> {
        self.dir_checks
            .run(dir.id, || async {
                let asked = self.cache.asking();
                let q = if names.is_empty() {
                    self.root.getattr().await?.qid
                } else {
                    // The walk's qid carries the version; the fid goes at once.
                    self.walk_path(names).await.map_err(|e| e.errno)?.fid.qid
                };
                self.cache.dir_seen(q.path, q.version, asked);
                let version = if q.path == dir.id { q.version } else { 0 };
                // A complete listing read under another version is out of date.
                self.cache.complete_seen_at(dir.id, version);
                Ok(version)
            })
            .await
    }
}
