//! File attributes (Rgetattr), by qid path.

use std::sync::Arc;
use std::time::Instant;

use wasm9p_proto::Rgetattr;

use super::{bump, Asked, Entry, Key, MountCache};

impl MountCache {
    /// Cached attributes of the file with qid path `path`, if still believed.
    pub fn attr(&self, path: u64) -> Option<Arc<Rgetattr>> {
        match self.peek_attr(path) {
            Some(attr) => {
                bump(&self.counters.attr_hits);
                Some(attr)
            }
            None => {
                bump(&self.counters.attr_misses);
                None
            }
        }
    }

    /// Cached attributes still believed, without counting a hit or a miss (for
    /// sizing a read).
    pub fn peek_attr(&self, path: u64) -> Option<Arc<Rgetattr>> {
        match self.store.get(&Key::Attr(path)) {
            Some(Entry::Attr { attr, at }) if self.young(at, Instant::now()) => Some(attr),
            _ => None,
        }
    }

    /// Cached attributes however old, to be confirmed by the file's qid.
    pub fn unconfirmed_attr(&self, path: u64) -> Option<Arc<Rgetattr>> {
        match self.store.get(&Key::Attr(path)) {
            Some(Entry::Attr { attr, .. }) => Some(attr),
            _ => None,
        }
    }

    /// Caches attributes (keyed by their own qid path) the server gave for a request
    /// made when `asked` (unless the file changed through this mount since).
    pub fn insert_attr(&self, attr: Rgetattr, asked: Asked) {
        self.confirm_attr(Arc::new(attr), asked);
    }

    /// Caches attributes known to be current when `asked` (fetched by that request, or
    /// confirmed by a qid with the same version it brought), unless the file changed
    /// through this mount since.
    pub fn confirm_attr(&self, attr: Arc<Rgetattr>, asked: Asked) {
        let path = attr.qid.path;
        self.answered(asked, path, || {
            if let Some(shared) = &self.shared {
                shared.keep_attr(&attr);
            }
            self.store
                .insert(Key::Attr(path), Entry::Attr { attr, at: asked.at })
        });
    }

    /// Drops cached attributes of qid path `path` (after setattr, write, link...), as
    /// a change to the file.
    pub fn forget_attr(&self, path: u64) {
        self.changing(path, || self.store.remove(&Key::Attr(path)));
    }
}
