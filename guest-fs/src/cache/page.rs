//! File pages, by (qid path, qid version, page index), shared by every open of a file,
//! and the marks of files the server let this mount open for reading.
//!
//! A page is valid for the qid version it was read at: once the file changes on the
//! server, opens see a new version and old pages are never served again (they age out
//! under the byte bound).

use bytes::Bytes;

use super::{bump, Entry, Key, MountCache};

/// Bytes per page.
pub const PAGE_SIZE: usize = 64 * 1024;

impl MountCache {
    /// Page `index` of file `path` at `version`, after `generation` changes through
    /// this mount ([`MountCache::generation`]). A page shorter than [`PAGE_SIZE`] is the
    /// last one of the file.
    pub fn page(&self, path: u64, version: u32, generation: u64, index: u64) -> Option<Bytes> {
        match self.store.get(&Key::Page {
            path,
            version,
            generation,
            index,
        }) {
            Some(Entry::Page(data)) => {
                bump(&self.counters.page_hits);
                Some(data)
            }
            _ => {
                bump(&self.counters.page_misses);
                None
            }
        }
    }

    /// Whether page `index` of `path` at `version` is held (counts nothing).
    pub fn has_page(&self, path: u64, version: u32, generation: u64, index: u64) -> bool {
        self.store.contains_key(&Key::Page {
            path,
            version,
            generation,
            index,
        })
    }

    /// Caches page `index` of file `path` at `version` and `generation`.
    pub fn insert_page(&self, path: u64, version: u32, generation: u64, index: u64, data: Bytes) {
        self.store.insert(
            Key::Page {
                path,
                version,
                generation,
                index,
            },
            Entry::Page(data),
        );
    }

    /// Records that the server opened file `path` at `version` for reading through this
    /// mount after its `generation`-th change through the mount, so that a later
    /// read-only open of that version, with no change through the mount in between,
    /// may be deferred.
    pub fn insert_readable(&self, path: u64, version: u32, generation: u64) {
        self.store.insert(
            Key::Readable {
                path,
                version,
                generation,
            },
            Entry::Readable,
        );
    }

    /// Whether file `path` at `version` was opened for reading since its
    /// `generation`-th change through this mount (counts nothing).
    pub fn was_readable(&self, path: u64, version: u32, generation: u64) -> bool {
        self.store.contains_key(&Key::Readable {
            path,
            version,
            generation,
        })
    }
}
