//! A mount's caches: dentries (positive and negative), symlink targets, attributes,
//! directory listings and file pages, in one store bounded by `cache_size` bytes.
//!
//! One `quick_cache` store holds every kind of entry, weighed by the bytes it takes, so
//! `cache_size` is a hard bound on all of them together and eviction picks the coldest
//! entries whatever their kind. Each kind has its own small module with an explicit
//! API (`insert_negative_seen(dir, name, seen)`, `forget(dir, name)`, ...) and its own counters.
//!
//! Keys name files by qid path: a dentry is `(directory qid path, name)`, a symlink
//! target or an attribute set is a file's qid path. A name is either known to exist
//! (positive dentry, with its qid) or known to be missing (negative dentry, with an
//! expiry), never both: inserting one replaces the other.
//!
//! Lookups borrow their key (no allocation) and never wait on anything but a shard lock:
//! a hit is a hash lookup on the calling thread.
//!
//! What a mount caches and how long an answer is believed is its [`Policy`], kept here
//! and read by the backend too; its [`Trust`](crate::mount_options::Trust) (see the
//! `validity` module) is forever,
//! or for a window after it was last confirmed. Answers about the names in a directory
//! (dentries, negative or not, and its listing) carry the directory's qid version when
//! they were learnt, so one look at the directory's version confirms all of them at
//! once; what the server gives no version for (version 0: diod) is believed for the
//! window after it was fetched, and fetched again after it.
//!
//! What is stored is what the server answered or what a change through the mount made
//! true, and nothing else: an answer is stored only if what it is about has not been
//! changed through the mount since it was asked for, so a late reply never undoes a
//! change (see the `changes` module: every store of a server's answer takes the
//! [`Asked`] of its request). What is kept on disk for later processes
//! (`cache=fscache`) is [`fscache`]'s; pages and metadata shared with other mounts of a
//! server that promises fixed contents are [`SharedCache`]'s.

mod attr;
mod changes;
mod complete;
mod dentry;
pub mod fscache;
mod negative;
mod page;
mod policy;
mod readdir;
mod shared;
mod symlink;
mod validity;

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use quick_cache::{Equivalent, Weighter};
use wasm9p_proto::{Qid, Rgetattr};

pub use changes::Asked;
pub use complete::MAX_COMPLETE;
pub use dentry::Lookup;
pub use page::PAGE_SIZE;
pub use policy::Policy;
pub use shared::{SharedCache, SharedCacheStats};
pub use validity::Seen;

use crate::mount_options::NegTimeout;

/// Bookkeeping bytes charged per entry on top of its names and values.
const ENTRY_OVERHEAD: u64 = 64;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Key {
    Dentry {
        dir: u64,
        name: Box<str>,
    },
    Symlink(u64),
    Attr(u64),
    Readdir(u64),
    Page {
        path: u64,
        version: u32,
        generation: u64,
        index: u64,
    },
    Readable {
        path: u64,
        version: u32,
        generation: u64,
    },
    /// The last qid version seen of a directory.
    DirVersion(u64),
    /// A directory's complete listing, by name.
    Complete(u64),
}

/// A borrowed dentry key, so lookups do not allocate.
struct DentryRef<'a> {
    dir: u64,
    name: &'a str,
}

// Key and DentryRef must hash alike: a tag byte, then the fields.
impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            Key::Dentry { dir, name } => DentryRef { dir: *dir, name }.hash(state),
            Key::Symlink(path) => (1u8, *path).hash(state),
            Key::Attr(path) => (2u8, *path).hash(state),
            Key::Readdir(path) => (3u8, *path).hash(state),
            Key::Page {
                path,
                version,
                generation,
                index,
            } => (4u8, *path, *version, *generation, *index).hash(state),
            Key::Readable {
                path,
                version,
                generation,
            } => (5u8, *path, *version, *generation).hash(state),
            Key::DirVersion(path) => (6u8, *path).hash(state),
            Key::Complete(path) => (7u8, *path).hash(state),
        }
    }
}

impl Hash for DentryRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (0u8, self.dir, self.name).hash(state)
    }
}

impl Equivalent<Key> for DentryRef<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        matches!(key, Key::Dentry { dir, name } if *dir == self.dir && **name == *self.name)
    }
}

#[derive(Clone, Debug)]
enum Entry {
    /// The name exists, with this qid.
    Positive { qid: Qid, seen: Seen },
    /// The name is missing until `expires` (`None`: until evicted).
    Negative {
        expires: Option<Instant>,
        seen: Seen,
    },
    /// A symlink's target, valid for the qid version it was read at.
    Symlink {
        version: u32,
        target: Arc<str>,
        at: Instant,
        /// The link's qid version the server gave when it was read (0: unknown), for
        /// the store on disk: `version` is the node's, which a listing leaves 0.
        read_at: u32,
    },
    /// A file's attributes, fetched (or last confirmed) `at`.
    Attr { attr: Arc<Rgetattr>, at: Instant },
    /// A directory's entries.
    Listing {
        entries: Arc<Vec<crate::node::Entry>>,
        seen: Seen,
    },
    /// A directory's every name, with its qid (`None`: too large to keep).
    Complete {
        names: Option<complete::Names>,
        seen: Seen,
    },
    /// A directory had this qid version when `asked` (confirming what is known of its
    /// names).
    DirVersion { version: u32, asked: Asked },
    /// A page of a file.
    Page(bytes::Bytes),
    /// The server let this mount open the file (at that qid version) for reading, when
    /// asked `at`; its pages are kept under version `pages`.
    Readable { pages: u32, at: Instant },
}

#[derive(Clone)]
struct ByteWeighter;

impl Weighter<Key, Entry> for ByteWeighter {
    fn weight(&self, key: &Key, entry: &Entry) -> u64 {
        let key_bytes = match key {
            Key::Dentry { name, .. } => name.len() as u64,
            _ => 0,
        };
        let entry_bytes = match entry {
            Entry::Symlink { target, .. } => target.len() as u64,
            // What each value keeps alive: the Arc's counts with an attribute set, a
            // listing's entries with their names, a page's own allocation (pages are
            // copied out of the replies they came in, see `insert_page`).
            Entry::Attr { .. } => std::mem::size_of::<Rgetattr>() as u64 + 16,
            Entry::Listing { entries, .. } => {
                let each = std::mem::size_of::<crate::node::Entry>() as u64;
                16 + entries
                    .iter()
                    .map(|e| e.name.len() as u64 + each)
                    .sum::<u64>()
            }
            Entry::Page(data) => data.len() as u64,
            Entry::Complete {
                names: Some(names), ..
            } => {
                let each = (std::mem::size_of::<Box<str>>() + std::mem::size_of::<Qid>()) as u64;
                // A hash map's slots are about one and a half times its entries.
                32 + names
                    .keys()
                    .map(|name| name.len() as u64 + each * 3 / 2)
                    .sum::<u64>()
            }
            _ => 0,
        };
        ENTRY_OVERHEAD + key_bytes + entry_bytes
    }
}

/// Hit and miss counters, with the names `--stats` prints.
#[derive(Debug, Default)]
pub struct CacheCounters {
    dentry_hits: AtomicU64,
    dentry_misses: AtomicU64,
    negative_hits: AtomicU64,
    symlink_hits: AtomicU64,
    symlink_misses: AtomicU64,
    attr_hits: AtomicU64,
    attr_misses: AtomicU64,
    page_hits: AtomicU64,
    page_misses: AtomicU64,
    shared_page_hits: AtomicU64,
    shared_metadata_hits: AtomicU64,
    readdir_hits: AtomicU64,
    revalidated: AtomicU64,
    listings_read: AtomicU64,
    listing_hits: AtomicU64,
}

/// A snapshot of [`CacheCounters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups answered by a positive dentry.
    pub dentry_hits: u64,
    /// Lookups the cache could not answer.
    pub dentry_misses: u64,
    /// Lookups answered by a negative dentry (no RPC for a missing name).
    pub negative_hits: u64,
    /// Symlink targets served from the cache.
    pub symlink_hits: u64,
    /// Symlink targets that had to be read.
    pub symlink_misses: u64,
    /// Attributes served from the cache.
    pub attr_hits: u64,
    /// Attributes that had to be fetched.
    pub attr_misses: u64,
    /// Reads served from pages already fetched (readahead).
    pub page_hits: u64,
    /// Reads that had to go to the server.
    pub page_misses: u64,
    /// Of the page hits, those from pages another mount read ([`SharedCache`]).
    pub shared_page_hits: u64,
    /// Lookups, listings, attributes and symlink targets another mount learnt
    /// ([`SharedCache`]), answered with no request (this mount's own cache had missed
    /// them: a lookup is also in `dentry_misses`, an attribute in `attr_misses`).
    pub shared_metadata_hits: u64,
    /// Directory listings served from the cache.
    pub readdir_hits: u64,
    /// Answers past their trust window that a check with the server confirmed, so they
    /// were served without being fetched again.
    pub revalidated: u64,
    /// Directory listings read to make a directory complete.
    pub listings_read: u64,
    /// Lookups answered by a complete directory's listing (present or missing).
    pub listing_hits: u64,
    /// `cache=fscache`: records and pages read from disk and used.
    pub persistent_hits: u64,
    /// `cache=fscache`: records found out of date, pages not on disk.
    pub persistent_misses: u64,
    /// `cache=fscache`: bytes the store takes on disk.
    pub persistent_bytes: u64,
    /// `cache=fscache`: requests sent to confirm what was read from disk.
    pub validations: u64,
    /// `cache=fscache`: of those, the ones sent together ahead of use.
    pub validated_ahead: u64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The metadata caches of one mount; shared by every guest on it.
pub struct MountCache {
    store: Arc<quick_cache::sync::Cache<Key, Entry, ByteWeighter>>,
    negtimeout: NegTimeout,
    policy: Policy,
    counters: CacheCounters,
    /// Qid paths of files changed through this mount (written, truncated), with how
    /// many changes each has had: their cached qid versions are stale, so opening them
    /// asks the server again, and pages are keyed by this count too, so a change
    /// through one open file makes every other open's pages of it miss. Sixteen bytes
    /// per file ever written; never evicted, as forgetting one would serve stale pages.
    written: std::sync::Mutex<std::collections::HashMap<u64, u64>>,
    /// Buffers of pages let go, reused by the next pages.
    pages: Arc<page::PagePool>,
    /// `cache=fscache`: where what is learnt is also kept, for later processes.
    persist: Option<Arc<crate::fscache::Store>>,
    /// Pages and metadata other mounts may read too ([`SharedCache`]).
    shared: Option<Arc<SharedCache>>,
    /// The change clock that keeps late answers out (see the `changes` module).
    changes: changes::Changes,
}

impl std::fmt::Debug for MountCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MountCache")
            .field("entries", &self.store.len())
            .field("bytes", &self.store.weight())
            .field("capacity", &self.store.capacity())
            .finish()
    }
}

impl MountCache {
    /// A cache holding at most `cache_size` bytes, with negative dentries living as
    /// `negtimeout` says, under the default policy (loose, trusted forever; see
    /// [`MountCache::with_policy`]).
    pub fn new(cache_size: u64, negtimeout: NegTimeout) -> MountCache {
        let estimated_items = (cache_size / (ENTRY_OVERHEAD + 16)).clamp(16, 1 << 20) as usize;
        MountCache {
            store: Arc::new(quick_cache::sync::Cache::with_weighter(
                estimated_items,
                cache_size,
                ByteWeighter,
            )),
            negtimeout,
            policy: Policy::default(),
            counters: CacheCounters::default(),
            written: Default::default(),
            pages: Default::default(),
            persist: None,
            shared: None,
            changes: Default::default(),
        }
    }

    /// The same cache, reading and keeping the pages and metadata of fixed contents
    /// in `shared` too, with the other mounts given it.
    pub fn sharing(mut self, shared: Option<Arc<SharedCache>>) -> MountCache {
        self.shared = shared;
        self
    }

    /// The same cache under `policy` (what it holds is believed as long as the
    /// policy's trust says).
    pub fn with_policy(mut self, policy: Policy) -> MountCache {
        self.policy = policy;
        self
    }

    /// The mount's cache policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Records that the file with qid path `path` was changed through this mount.
    pub fn mark_written(&self, path: u64) {
        self.changing(path, || {
            *self
                .written
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(path)
                .or_default() += 1;
        });
    }

    /// How many changes the file with qid path `path` has had through this mount (0:
    /// none): the generation its cached pages belong to.
    pub fn generation(&self, path: u64) -> u64 {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&path)
            .copied()
            .unwrap_or(0)
    }

    /// Bytes held now (never more than the capacity).
    pub fn bytes(&self) -> u64 {
        self.store.weight()
    }

    /// The `cache_size` bound.
    pub fn capacity(&self) -> u64 {
        self.store.capacity()
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }

    /// Counts a read served from fetched pages (`hit`) or sent to the server.
    pub fn count_page(&self, hit: bool) {
        bump(if hit {
            &self.counters.page_hits
        } else {
            &self.counters.page_misses
        });
    }

    /// The counters so far.
    pub fn stats(&self) -> CacheStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let store = self.persist.as_ref().map(|s| s.stats()).unwrap_or_default();
        CacheStats {
            dentry_hits: get(&c.dentry_hits),
            dentry_misses: get(&c.dentry_misses),
            negative_hits: get(&c.negative_hits),
            symlink_hits: get(&c.symlink_hits),
            symlink_misses: get(&c.symlink_misses),
            attr_hits: get(&c.attr_hits),
            attr_misses: get(&c.attr_misses),
            page_hits: get(&c.page_hits),
            page_misses: get(&c.page_misses),
            shared_page_hits: get(&c.shared_page_hits),
            shared_metadata_hits: get(&c.shared_metadata_hits),
            readdir_hits: get(&c.readdir_hits),
            revalidated: get(&c.revalidated),
            listings_read: get(&c.listings_read),
            listing_hits: get(&c.listing_hits),
            persistent_hits: store.hits,
            persistent_misses: store.misses,
            persistent_bytes: store.bytes,
            validations: store.validations,
            validated_ahead: store.validated_ahead,
        }
    }
}

#[cfg(test)]
mod tests;
