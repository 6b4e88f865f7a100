//! What several mounts share, for servers that promise a qid names one content for
//! ever: file pages, and what is known of the nodes (dentries, negative or not,
//! listings, attributes, symlink targets).
//!
//! A mount's cache is its own: another mount of the same server cannot tell whether
//! its qid (path, version) still means what the first one learnt. Some servers can
//! promise it. A build worker's action input roots do (`wasm9p_remote`'s layer: a
//! node of the tree is numbered by a hash of its path and digest, and versioned by the
//! digest, and a directory the action changes moves to another version), and every
//! action is a mount of its own. What is kept here, keyed by qid (path, version), lets
//! the next mount read a file an earlier one read without a Tread, and look up, list,
//! stat and read links of what an earlier one did without a Twalk, a Treaddir, a
//! Tgetattr or a Treadlink.
//!
//! The promise is the `fixed` test the owner gives, asked of each (path, version): the
//! server's own rule (a worker's: a node of the tree, not one the action made, at a
//! version the action did not change it to). What a mount learnt is shared only under
//! the version the server gave with it (a directory's names: the version its walk or
//! open reported; a file's attributes: their own qid; a link's target: the version
//! its fid was walked at), and only if that version is fixed; a page only if it is of
//! generation 0 in its mount (not changed through it: see
//! [`MountCache::generation`](super::MountCache::generation)). A mount asks here only
//! about a node it has not changed itself (`MountCache::unchanged_here`): its own
//! node's qid version may be older than its change.
//!
//! One bound in bytes for all of it, as a mount's cache has; the pages are copies,
//! never the replies they came in.

use std::sync::Arc;

use bytes::Bytes;
use wasm9p_proto::{Qid, Rgetattr};

use super::readdir::Listing;

/// Bookkeeping bytes charged per entry on top of its data.
const OVERHEAD: u64 = 64;

type Fixed = dyn Fn(u64, u32) -> bool + Send + Sync;

/// What is kept, by the qid (path, version) it is about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    /// Page `index` of a file.
    Page(u64, u32, u64),
    /// A name in a directory.
    Name(u64, u32, Box<str>),
    /// A directory's listing.
    Listing(u64, u32),
    /// A node's attributes.
    Attr(u64, u32),
    /// A symlink's target.
    Link(u64, u32),
}

#[derive(Clone)]
enum Value {
    Page(Bytes),
    /// The name's qid; `None`: missing.
    Name(Option<Qid>),
    Listing(Listing),
    Attr(Arc<Rgetattr>),
    Link(Arc<str>),
}

#[derive(Clone)]
struct Weigh;

impl quick_cache::Weighter<Key, Value> for Weigh {
    fn weight(&self, key: &Key, value: &Value) -> u64 {
        let key = match key {
            Key::Name(_, _, name) => name.len() as u64,
            _ => 0,
        };
        let value = match value {
            Value::Page(page) => page.len() as u64,
            Value::Name(_) => 24,
            Value::Listing(entries) => entries.iter().map(|e| e.name.len() as u64 + 40).sum(),
            Value::Attr(_) => std::mem::size_of::<Rgetattr>() as u64,
            Value::Link(target) => target.len() as u64,
        };
        OVERHEAD + key + value
    }
}

/// Pages and metadata of fixed contents, shared by the mounts given them (see the
/// module docs).
pub struct SharedCache {
    kept: quick_cache::sync::Cache<Key, Value, Weigh>,
    fixed: Box<Fixed>,
}

impl std::fmt::Debug for SharedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCache")
            .field("entries", &self.kept.len())
            .field("bytes", &self.kept.weight())
            .finish()
    }
}

/// What [`SharedCache`] holds (its hits are counted by each mount:
/// [`CacheStats::shared_page_hits`](super::CacheStats::shared_page_hits) and
/// [`CacheStats::shared_metadata_hits`](super::CacheStats::shared_metadata_hits)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharedCacheStats {
    /// Pages and metadata entries held.
    pub entries: u64,
    /// The bytes they take.
    pub bytes: u64,
}

impl SharedCache {
    /// At most `bytes` of pages and metadata, of the qids `fixed(path, version)` says
    /// never change.
    pub fn new(bytes: u64, fixed: impl Fn(u64, u32) -> bool + Send + Sync + 'static) -> Self {
        let estimated = (bytes / (16 << 10)).clamp(16, 1 << 20) as usize;
        SharedCache {
            kept: quick_cache::sync::Cache::with_weighter(estimated, bytes, Weigh),
            fixed: Box::new(fixed),
        }
    }

    /// Whether the server promises that `(path, version)` never changes.
    pub(super) fn fixed(&self, path: u64, version: u32) -> bool {
        (self.fixed)(path, version)
    }

    /// Keeps `value` under `key` (about `(path, version)`), if that qid is fixed.
    fn keep(&self, (path, version): (u64, u32), key: Key, value: impl FnOnce() -> Value) {
        if self.fixed(path, version) && !self.kept.contains_key(&key) {
            self.kept.insert(key, value());
        }
    }

    /// Page `index` of the file `path` at `version`, if it is held.
    pub(super) fn page(&self, path: u64, version: u32, index: u64) -> Option<Bytes> {
        match self.kept.get(&Key::Page(path, version, index))? {
            Value::Page(page) => Some(page),
            _ => None,
        }
    }

    /// Keeps a copy of `data`, page `index` of `path` at `version`, if that qid is
    /// fixed and the page not held yet.
    pub(super) fn keep_page(&self, path: u64, version: u32, index: u64, data: &Bytes) {
        let key = Key::Page(path, version, index);
        self.keep((path, version), key, || {
            Value::Page(Bytes::copy_from_slice(data))
        });
    }

    /// What directory `dir` (at its qid version) has under `name`: `Some(None)` for
    /// missing, `None` when nothing is held.
    pub(super) fn name(&self, dir: Qid, name: &str) -> Option<Option<Qid>> {
        match self
            .kept
            .get(&Key::Name(dir.path, dir.version, name.into()))?
        {
            Value::Name(found) => Some(found),
            _ => None,
        }
    }

    /// Keeps what directory `dir` at `version` has under `name` (`None`: missing): a
    /// node only at a fixed version of its own too (a fixed directory keeps its names,
    /// but a child the mount changed has another version under the same name).
    pub(super) fn keep_name(&self, (dir, version): (u64, u32), name: &str, found: Option<Qid>) {
        if found.is_some_and(|q| !self.fixed(q.path, q.version)) {
            return;
        }
        let key = Key::Name(dir, version, name.into());
        self.keep((dir, version), key, || Value::Name(found));
    }

    /// Directory `dir`'s whole listing, if held.
    pub(super) fn listing(&self, dir: Qid) -> Option<Listing> {
        match self.kept.get(&Key::Listing(dir.path, dir.version))? {
            Value::Listing(entries) => Some(entries),
            _ => None,
        }
    }

    /// Keeps directory `dir`'s whole listing, read at `version`.
    pub(super) fn keep_listing(&self, (dir, version): (u64, u32), entries: &Listing) {
        let key = Key::Listing(dir, version);
        self.keep((dir, version), key, || Value::Listing(entries.clone()));
    }

    /// The attributes of the node with `qid`, if held.
    pub(super) fn attr(&self, qid: Qid) -> Option<Arc<Rgetattr>> {
        match self.kept.get(&Key::Attr(qid.path, qid.version))? {
            Value::Attr(attr) => Some(attr),
            _ => None,
        }
    }

    /// Keeps attributes (under their own qid).
    pub(super) fn keep_attr(&self, attr: &Arc<Rgetattr>) {
        let (path, version) = (attr.qid.path, attr.qid.version);
        self.keep((path, version), Key::Attr(path, version), || {
            Value::Attr(attr.clone())
        });
    }

    /// The target of the symlink with `qid`, if held.
    pub(super) fn link(&self, qid: Qid) -> Option<Arc<str>> {
        match self.kept.get(&Key::Link(qid.path, qid.version))? {
            Value::Link(target) => Some(target),
            _ => None,
        }
    }

    /// Keeps the target of the symlink `path`, read at `version`.
    pub(super) fn keep_link(&self, (path, version): (u64, u32), target: &Arc<str>) {
        self.keep((path, version), Key::Link(path, version), || {
            Value::Link(target.clone())
        });
    }

    /// What it holds now.
    pub fn stats(&self) -> SharedCacheStats {
        SharedCacheStats {
            entries: self.kept.len() as u64,
            bytes: self.kept.weight(),
        }
    }
}

/// A mount's side: what another mount learnt, about a node this one never changed,
/// taken into this mount's cache as if learnt now (and counted).
impl super::MountCache {
    /// What directory `dir` (as this mount knows its qid) has under `name`, if another
    /// mount learnt it: `Some(None)` for missing.
    pub fn shared_lookup(&self, dir: Qid, name: &str) -> Option<Option<Qid>> {
        let shared = self.shared.as_ref()?;
        if !self.unchanged_here(dir.path) {
            return None;
        }
        let found = shared.name(dir, name)?;
        let seen = self.asking().seen(dir.version);
        match found {
            Some(qid) => self.insert_dentry_seen(dir.path, name, qid, seen),
            None => self.insert_negative_seen(dir.path, name, seen),
        }
        super::bump(&self.counters.shared_metadata_hits);
        Some(found)
    }

    /// The attributes of the node with `qid`, if another mount fetched them and this
    /// one never changed it.
    pub fn shared_attr(&self, qid: Qid) -> Option<Arc<Rgetattr>> {
        let shared = self.shared.as_ref()?;
        if !self.unchanged_here(qid.path) || self.generation(qid.path) != 0 {
            return None;
        }
        let attr = shared.attr(qid)?;
        self.confirm_attr(attr.clone(), self.asking());
        super::bump(&self.counters.shared_metadata_hits);
        Some(attr)
    }

    /// The target of the symlink with `qid`, if another mount read it.
    pub fn shared_link(&self, qid: Qid) -> Option<Arc<str>> {
        let shared = self.shared.as_ref()?;
        if !self.unchanged_here(qid.path) {
            return None;
        }
        let target = shared.link(qid)?;
        self.insert_symlink_read(qid, target.clone(), qid.version, self.asking());
        super::bump(&self.counters.shared_metadata_hits);
        Some(target)
    }

    /// Directory `dir`'s whole listing, if another mount read it.
    pub fn shared_listing(&self, dir: Qid) -> Option<Listing> {
        let shared = self.shared.as_ref()?;
        if !self.unchanged_here(dir.path) {
            return None;
        }
        let listing = shared.listing(dir)?;
        self.insert_readdir(dir.path, listing.clone(), self.asking().seen(dir.version));
        super::bump(&self.counters.shared_metadata_hits);
        Some(listing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qid(path: u64, version: u32) -> Qid {
        Qid {
            ty: 0,
            version,
            path,
        }
    }

    #[test]
    fn only_fixed_qids_are_kept_and_the_bound_holds() {
        let shared = SharedCache::new(4 * (OVERHEAD + 1000), |path, version| {
            path < 100 && version % 2 == 1
        });
        let page = Bytes::from(vec![7u8; 1000]);
        shared.keep_page(1, 3, 0, &page);
        shared.keep_page(1, 4, 0, &page); // a version the server may change
        shared.keep_page(200, 3, 0, &page); // a node it may change
        assert_eq!(shared.page(1, 3, 0).as_deref(), Some(&page[..]));
        assert_eq!(shared.page(1, 4, 0), None);
        assert_eq!(shared.page(200, 3, 0), None);
        assert_eq!(shared.page(1, 5, 0), None, "another version of the file");
        for index in 0..64 {
            shared.keep_page(2, 1, index, &page);
        }
        let stats = shared.stats();
        assert!(stats.bytes <= 4 * (OVERHEAD + 1000), "{stats:?}");
        assert!(stats.entries <= 4, "{stats:?}");
    }

    #[test]
    fn names_attributes_and_links_are_kept_by_the_version_they_were_learnt_at() {
        let shared = SharedCache::new(1 << 20, |path, version| path < 100 && version % 2 == 1);
        shared.keep_name((1, 3), "a.h", Some(qid(10, 5)));
        shared.keep_name((1, 3), "gone.h", None);
        shared.keep_name((1, 4), "b.h", Some(qid(11, 5))); // a changed directory
        shared.keep_name((1, 3), "c.h", Some(qid(12, 6))); // a changed file
        assert_eq!(shared.name(qid(1, 3), "a.h"), Some(Some(qid(10, 5))));
        assert_eq!(shared.name(qid(1, 3), "gone.h"), Some(None));
        assert_eq!(shared.name(qid(1, 3), "b.h"), None, "not learnt");
        assert_eq!(shared.name(qid(1, 4), "b.h"), None, "not fixed");
        assert_eq!(shared.name(qid(1, 5), "a.h"), None, "another version");
        assert_eq!(
            shared.name(qid(1, 3), "c.h"),
            None,
            "a child at a changed version"
        );
        let attr = Arc::new(Rgetattr {
            qid: qid(10, 5),
            size: 42,
            ..Rgetattr::default()
        });
        shared.keep_attr(&attr);
        assert_eq!(shared.attr(qid(10, 5)).map(|a| a.size), Some(42));
        assert_eq!(shared.attr(qid(10, 7)), None);
        shared.keep_link((12, 1), &Arc::from("../lib"));
        assert_eq!(shared.link(qid(12, 1)).as_deref(), Some("../lib"));
        assert_eq!(shared.link(qid(12, 3)), None);
        shared.keep_link((300, 1), &Arc::from("made/by/the/action"));
        assert_eq!(shared.link(qid(300, 1)), None);
    }
}
