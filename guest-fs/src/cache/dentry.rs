//! Dentries: what a name in a directory is (a qid), or that it is missing.

use std::time::Instant;

use wasm9p_proto::Qid;

use super::{bump, DentryRef, Entry, Key, MountCache};

/// What the cache knows about a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The name exists, with this qid.
    Found(Qid),
    /// The name is known to be missing (a live negative dentry): ENOENT without an RPC.
    Missing,
    /// Not known: ask the server.
    Unknown,
}

impl MountCache {
    /// What is known about `name` in directory `dir` (by qid path).
    pub fn lookup(&self, dir: u64, name: &str) -> Lookup {
        self.lookup_at(dir, name, Instant::now())
    }

    pub(crate) fn lookup_at(&self, dir: u64, name: &str, now: Instant) -> Lookup {
        let key = DentryRef { dir, name };
        match self.store.get(&key) {
            Some(Entry::Positive(qid)) => {
                bump(&self.counters.dentry_hits);
                Lookup::Found(qid)
            }
            Some(Entry::Negative { expires }) if expires.is_none_or(|t| now < t) => {
                bump(&self.counters.negative_hits);
                Lookup::Missing
            }
            Some(Entry::Negative { .. }) => {
                // Expired: forget it so it no longer takes room.
                self.store.remove(&key);
                bump(&self.counters.dentry_misses);
                Lookup::Unknown
            }
            _ => {
                bump(&self.counters.dentry_misses);
                Lookup::Unknown
            }
        }
    }

    /// Records that `name` in `dir` exists with `qid` (replacing a negative entry).
    pub fn insert_dentry(&self, dir: u64, name: &str, qid: Qid) {
        self.store.insert(
            Key::Dentry {
                dir,
                name: name.into(),
            },
            Entry::Positive(qid),
        );
    }

    /// Forgets whatever is known about `name` in `dir`: called for every local unlink,
    /// rmdir, rename (both names), create, mkdir, symlink, link and mknod. A symlink's
    /// cached target and a file's cached attributes go with its dentry, so a cached
    /// target never outlives its link.
    pub fn forget(&self, dir: u64, name: &str) {
        if let Some((_, Entry::Positive(qid))) = self.store.remove(&DentryRef { dir, name }) {
            self.forget_symlink(qid.path);
            self.forget_attr(qid.path);
        }
    }
}
