//! Directory listings, by directory qid path.

use std::sync::Arc;
use std::time::Instant;

use super::{bump, Entry, Key, MountCache, Seen};
use crate::node;

/// A cached listing.
pub type Listing = Arc<Vec<node::Entry>>;

impl MountCache {
    /// The cached listing of directory `dir`, if still believed.
    pub fn readdir(&self, dir: u64) -> Option<Listing> {
        match self.store.get(&Key::Readdir(dir)) {
            Some(Entry::Listing { entries, seen }) if self.believed(dir, seen, Instant::now()) => {
                bump(&self.counters.readdir_hits);
                Some(entries)
            }
            _ => None,
        }
    }

    /// The cached listing of `dir` however old, with the directory version it was
    /// read under (for a check to confirm).
    pub fn unconfirmed_readdir(&self, dir: u64) -> Option<(Listing, u32)> {
        match self.store.get(&Key::Readdir(dir)) {
            Some(Entry::Listing { entries, seen }) => Some((entries, seen.dir_version)),
            _ => None,
        }
    }

    /// Caches the whole listing of directory `dir`, read as `seen` says (unless `dir`
    /// changed through this mount since).
    pub fn insert_readdir(&self, dir: u64, entries: Listing, seen: Seen) {
        self.answered(seen.asked, dir, || self.put_readdir(dir, entries, seen));
    }

    pub(super) fn put_readdir(&self, dir: u64, entries: Listing, seen: Seen) {
        if let Some(shared) = &self.shared {
            shared.keep_listing((dir, seen.dir_version), &entries);
        }
        self.store
            .insert(Key::Readdir(dir), Entry::Listing { entries, seen });
    }

    /// Drops what is cached about directory `dir` itself (listing and attributes):
    /// called whenever a name in it is created, removed or renamed, as a change to it.
    pub fn dir_changed(&self, dir: u64) {
        self.changing(dir, || {
            self.store.remove(&Key::Readdir(dir));
            self.store.remove(&Key::Attr(dir));
        });
    }
}
