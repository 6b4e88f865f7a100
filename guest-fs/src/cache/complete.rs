//! Complete directories: a directory's whole listing, by name, so that every lookup
//! in it is answered here: present (with its qid) or missing.
//!
//! A backend reads the listing once a directory has sent it enough lookups (see
//! `complete_dirs=` in [`crate::mount_options`]). The listing is believed as the
//! mount's trust says, like a dentry: it carries the directory's qid version when it
//! was read, and one look at the directory confirms it whole. Changes made through the
//! mount keep it complete: a name created, linked or renamed here is added with its
//! qid, one removed or renamed away is taken out. A change the cache cannot follow (a
//! failed unlink, a rename of a name whose qid it does not know) drops the listing. A
//! directory with more than [`MAX_COMPLETE`] entries is not kept (a marker says so, so
//! it is not listed again and again).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use wasm9p_proto::Qid;

use super::{bump, Entry, Key, MountCache, Seen};

/// Most entries of a directory kept as a complete listing.
pub const MAX_COMPLETE: usize = 4096;

/// The names of a complete directory.
pub(super) type Names = Arc<HashMap<Box<str>, Qid>>;

impl MountCache {
    /// Records the whole listing of `dir` (names and qids, without `.` and `..`), read
    /// as `seen` says (unless `dir` changed through this mount since); a directory over
    /// [`MAX_COMPLETE`] is marked too large instead.
    pub fn insert_complete(&self, dir: u64, names: HashMap<Box<str>, Qid>, seen: Seen) {
        bump(&self.counters.listings_read);
        self.answered(seen.asked, dir, || self.put_complete(dir, names, seen));
    }

    pub(super) fn put_complete(&self, dir: u64, names: HashMap<Box<str>, Qid>, seen: Seen) {
        let names = (names.len() <= MAX_COMPLETE).then(|| Arc::new(names));
        self.store
            .insert(Key::Complete(dir), Entry::Complete { names, seen });
    }

    /// Marks `dir` as too large to keep complete (read as `seen` says).
    pub fn insert_too_large(&self, dir: u64, seen: Seen) {
        bump(&self.counters.listings_read);
        self.answered(seen.asked, dir, || {
            self.store
                .insert(Key::Complete(dir), Entry::Complete { names: None, seen })
        });
    }

    /// Whether anything is kept about `dir`'s completeness (a listing, believed or
    /// not, or the too-large marker): if not, a backend may read the listing.
    pub fn complete_known(&self, dir: u64) -> bool {
        self.store.get(&Key::Complete(dir)).is_some()
    }

    /// The complete listing's answer for `name` in `dir`: `Some(found, seen)` when a
    /// listing is kept (`found`: the qid, `None`: missing), as the lookup classifies it.
    pub(super) fn complete_answer(&self, dir: u64, name: &str) -> Option<(Option<Qid>, Seen)> {
        match self.store.get(&Key::Complete(dir)) {
            Some(Entry::Complete {
                names: Some(names),
                seen,
            }) => Some((names.get(name).copied(), seen)),
            _ => None,
        }
    }

    /// Counts a lookup answered by a complete listing.
    pub fn count_listing_hit(&self) {
        bump(&self.counters.listing_hits);
    }

    /// `name` now exists in `dir` with `qid`, made through this mount.
    pub fn complete_added(&self, dir: u64, name: &str, qid: Qid) {
        self.update_complete(dir, |names| {
            names.insert(name.into(), qid);
        });
    }

    /// `name` no longer exists in `dir`, removed through this mount.
    pub fn complete_removed(&self, dir: u64, name: &str) {
        self.update_complete(dir, |names| {
            names.remove(name);
        });
    }

    /// Drops `dir`'s listing: it changed in a way the cache cannot follow.
    pub fn complete_forget(&self, dir: u64) {
        self.changing(dir, || self.store.remove(&Key::Complete(dir)));
    }

    /// Drops `dir`'s listing if it is no longer believed: it could not be confirmed,
    /// so the next lookups read it again rather than walk name by name.
    pub fn complete_drop_if_stale(&self, dir: u64) {
        if let Some(Entry::Complete { seen, .. }) = self.store.get(&Key::Complete(dir)) {
            if !self.believed(dir, seen, Instant::now()) {
                self.store.remove(&Key::Complete(dir));
            }
        }
    }

    /// The directory `dir` was seen at `version`: a listing read under another one is
    /// out of date and goes (the next lookups read it again).
    pub fn complete_seen_at(&self, dir: u64, version: u32) {
        if let Some(Entry::Complete { seen, .. }) = self.store.get(&Key::Complete(dir)) {
            if seen.dir_version != version {
                self.store.remove(&Key::Complete(dir));
            }
        }
    }

    /// Applies `change` to a copy of `dir`'s listing, as one change to `dir` (no
    /// other change or answer lands between reading the listing and storing it back).
    /// The listing keeps the time it was read, under no version: the server's version
    /// moved with our change, so past the trust window the listing is read again
    /// rather than confirmed.
    fn update_complete(&self, dir: u64, change: impl FnOnce(&mut HashMap<Box<str>, Qid>)) {
        self.changing(dir, || {
            let Some(Entry::Complete {
                names: Some(names),
                seen,
            }) = self.store.get(&Key::Complete(dir))
            else {
                return;
            };
            let mut names = (*names).clone();
            change(&mut names);
            self.store.insert(
                Key::Complete(dir),
                Entry::Complete {
                    names: (names.len() <= MAX_COMPLETE).then(|| Arc::new(names)),
                    seen: seen.asked.seen(0),
                },
            );
        });
    }
}
