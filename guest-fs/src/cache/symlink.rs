//! Symlink targets, valid for the qid version they were read at.

use std::sync::Arc;
use std::time::Instant;

use wasm9p_proto::Qid;

use super::{bump, Asked, Entry, Key, MountCache};

impl MountCache {
    /// The cached target of symlink `qid`, if it was read at this same qid version (and,
    /// for a server that keeps no versions, is still young enough). A changed version
    /// drops the entry: the link was replaced or changed.
    pub fn symlink(&self, qid: Qid) -> Option<Arc<str>> {
        if let Some(target) = self.peek_symlink(qid) {
            bump(&self.counters.symlink_hits);
            return Some(target);
        }
        self.store.remove(&Key::Symlink(qid.path));
        bump(&self.counters.symlink_misses);
        None
    }

    /// What [`Self::symlink`] would answer, uncounted and leaving the cache as it is.
    pub fn peek_symlink(&self, qid: Qid) -> Option<Arc<str>> {
        match self.store.get(&Key::Symlink(qid.path)) {
            Some(Entry::Symlink {
                version,
                target,
                at,
                ..
            }) if version == qid.version && (version != 0 || self.young(at, Instant::now())) => {
                Some(target)
            }
            _ => None,
        }
    }

    /// Caches the target of symlink `qid`, read just now.
    pub fn insert_symlink(&self, qid: Qid, target: Arc<str>) {
        self.insert_symlink_read(qid, target, qid.version, self.asking());
    }

    /// Caches the target of symlink `qid` (as the node has it), read from the link at
    /// qid version `read_at` (the walk's) by a request made when `asked` (unless the
    /// link was removed or replaced through this mount since).
    pub fn insert_symlink_read(&self, qid: Qid, target: Arc<str>, read_at: u32, asked: Asked) {
        self.answered(asked, qid.path, || {
            if let Some(shared) = &self.shared {
                shared.keep_link((qid.path, read_at), &target);
            }
            self.store.insert(
                Key::Symlink(qid.path),
                Entry::Symlink {
                    version: qid.version,
                    target,
                    at: asked.at,
                    read_at,
                },
            )
        });
    }

    /// Drops the cached target of the symlink with qid path `path`, as a change to it.
    pub fn forget_symlink(&self, path: u64) {
        self.changing(path, || self.store.remove(&Key::Symlink(path)));
    }
}
