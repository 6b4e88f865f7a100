//! File attributes (Rgetattr), by qid path.

use std::sync::Arc;

use wasm9p_proto::Rgetattr;

use super::{bump, Entry, Key, MountCache};

impl MountCache {
    /// Cached attributes of the file with qid path `path`.
    pub fn attr(&self, path: u64) -> Option<Arc<Rgetattr>> {
        match self.store.get(&Key::Attr(path)) {
            Some(Entry::Attr(attr)) => {
                bump(&self.counters.attr_hits);
                Some(attr)
            }
            _ => {
                bump(&self.counters.attr_misses);
                None
            }
        }
    }

    /// Cached attributes, without counting a hit or a miss (for sizing a read).
    pub fn peek_attr(&self, path: u64) -> Option<Arc<Rgetattr>> {
        match self.store.get(&Key::Attr(path)) {
            Some(Entry::Attr(attr)) => Some(attr),
            _ => None,
        }
    }

    /// Caches attributes (keyed by their own qid path).
    pub fn insert_attr(&self, attr: Rgetattr) {
        self.store
            .insert(Key::Attr(attr.qid.path), Entry::Attr(Arc::new(attr)));
    }

    /// Drops cached attributes of qid path `path` (after setattr, write, link...).
    pub fn forget_attr(&self, path: u64) {
        self.store.remove(&Key::Attr(path));
    }
}
