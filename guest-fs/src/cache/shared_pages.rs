//! File pages shared by several mounts, for servers that promise a qid names one
//! content for ever.
//!
//! A mount's pages are its own: another mount of the same server cannot tell whether
//! its qid (path, version) still means the bytes the first one read. Some servers can
//! promise it. A build worker's action input roots do (`wasm9p_remote`'s layer: a
//! file of the tree is numbered by a hash of its path and digest, and versioned by the
//! digest), and every action is a mount of its own. Pages kept here, keyed by (qid
//! path, qid version, page index), let the next mount read a file an earlier one read
//! without a Tread, and without the server reading its store.
//!
//! The promise is the `fixed` test the owner gives, asked of each (path, version): the
//! server's own rule (a worker's: a node of the tree, not one the action made, at a
//! version the action did not change it to). A page is shared only if it is of
//! generation 0 in its mount (not changed through it: see
//! [`MountCache::generation`](super::MountCache::generation)) and its qid is fixed.
//! Bounded by bytes, as a mount's cache is; the pages are copies, never the replies
//! they came in.

use bytes::Bytes;

/// Bookkeeping bytes charged per page on top of its data.
const PAGE_OVERHEAD: u64 = 64;

type Fixed = dyn Fn(u64, u32) -> bool + Send + Sync;

/// Pages of fixed contents, shared by the mounts given them (see the module docs).
pub struct SharedPages {
    pages: quick_cache::sync::Cache<(u64, u32, u64), Bytes, PageWeighter>,
    fixed: Box<Fixed>,
}

impl std::fmt::Debug for SharedPages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedPages")
            .field("pages", &self.pages.len())
            .field("bytes", &self.pages.weight())
            .finish()
    }
}

#[derive(Clone)]
struct PageWeighter;

impl quick_cache::Weighter<(u64, u32, u64), Bytes> for PageWeighter {
    fn weight(&self, _: &(u64, u32, u64), page: &Bytes) -> u64 {
        PAGE_OVERHEAD + page.len() as u64
    }
}

/// What [`SharedPages`] holds (its hits are counted by each mount:
/// [`CacheStats::shared_page_hits`](super::CacheStats::shared_page_hits)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharedPagesStats {
    /// Pages held.
    pub pages: u64,
    /// The bytes they take.
    pub bytes: u64,
}

impl SharedPages {
    /// At most `bytes` of pages, of the qids `fixed(path, version)` says never change.
    pub fn new(bytes: u64, fixed: impl Fn(u64, u32) -> bool + Send + Sync + 'static) -> Self {
        let estimated = (bytes / (64 << 10)).clamp(16, 1 << 20) as usize;
        SharedPages {
            pages: quick_cache::sync::Cache::with_weighter(estimated, bytes, PageWeighter),
            fixed: Box::new(fixed),
        }
    }

    /// Page `index` of the file `path` at `version`, if it is held.
    pub(super) fn get(&self, path: u64, version: u32, index: u64) -> Option<Bytes> {
        self.pages.get(&(path, version, index))
    }

    /// Keeps a copy of `data`, page `index` of `path` at `version`, if that qid is
    /// fixed and the page not held yet.
    pub(super) fn insert(&self, path: u64, version: u32, index: u64, data: &Bytes) {
        if !(self.fixed)(path, version) || self.pages.contains_key(&(path, version, index)) {
            return;
        }
        let page = Bytes::copy_from_slice(data);
        self.pages.insert((path, version, index), page);
    }

    /// What it holds now.
    pub fn stats(&self) -> SharedPagesStats {
        SharedPagesStats {
            pages: self.pages.len() as u64,
            bytes: self.pages.weight(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_fixed_qids_are_kept_and_the_bound_holds() {
        let shared = SharedPages::new(4 * (PAGE_OVERHEAD + 1000), |path, version| {
            path < 100 && version % 2 == 1
        });
        let page = Bytes::from(vec![7u8; 1000]);
        shared.insert(1, 3, 0, &page);
        shared.insert(1, 4, 0, &page); // a version the server may change
        shared.insert(200, 3, 0, &page); // a node it may change
        assert_eq!(shared.get(1, 3, 0).as_deref(), Some(&page[..]));
        assert_eq!(shared.get(1, 4, 0), None);
        assert_eq!(shared.get(200, 3, 0), None);
        assert_eq!(shared.get(1, 5, 0), None, "another version of the file");
        for index in 0..64 {
            shared.insert(2, 1, index, &page);
        }
        let stats = shared.stats();
        assert!(stats.bytes <= 4 * (PAGE_OVERHEAD + 1000), "{stats:?}");
        assert!(stats.pages <= 4, "{stats:?}");
    }
}
