//! Directory listings, by directory qid path.

use std::sync::Arc;

use super::{bump, Entry, Key, MountCache};
use crate::backend;

impl MountCache {
    /// The cached listing of directory `dir`.
    pub fn readdir(&self, dir: u64) -> Option<Arc<Vec<backend::Entry>>> {
        match self.store.get(&Key::Readdir(dir)) {
            Some(Entry::Listing(entries)) => {
                bump(&self.counters.readdir_hits);
                Some(entries)
            }
            _ => None,
        }
    }

    /// Caches the whole listing of directory `dir`.
    pub fn insert_readdir(&self, dir: u64, entries: Arc<Vec<backend::Entry>>) {
        self.store
            .insert(Key::Readdir(dir), Entry::Listing(entries));
    }

    /// Drops what is cached about directory `dir` itself (listing and attributes):
    /// called whenever a name in it is created, removed or renamed.
    pub fn dir_changed(&self, dir: u64) {
        self.store.remove(&Key::Readdir(dir));
        self.forget_attr(dir);
    }
}
