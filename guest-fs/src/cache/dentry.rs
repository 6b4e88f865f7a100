//! Dentries: what a name in a directory is (a qid), or that it is missing.

use std::time::Instant;

use wasm9p_proto::Qid;

use super::{bump, DentryRef, Entry, Key, MountCache, Seen};

/// What the cache knows about a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The name exists, with this qid.
    Found(Qid),
    /// The name is known to be missing (a live negative dentry): ENOENT without an RPC.
    Missing,
    /// Not known: ask the server.
    Unknown,
    /// Known (`found`: the qid, `None`: missing) but past the trust window: true if
    /// the directory still has `dir_version` (when it is not 0), else ask the server.
    Unconfirmed {
        /// The answer as cached.
        found: Option<Qid>,
        /// The directory's version it was learnt under (0: none).
        dir_version: u32,
    },
}

impl Lookup {
    /// The qid, if the name is known to exist and believed now.
    pub fn found(self) -> Option<Qid> {
        match self {
            Lookup::Found(q) => Some(q),
            _ => None,
        }
    }
}

impl MountCache {
    /// What is known about `name` in directory `dir` (by qid path).
    pub fn lookup(&self, dir: u64, name: &str) -> Lookup {
        self.lookup_at(dir, name, Instant::now())
    }

    /// What is known about `name` in `dir`, counting nothing (a backend looking again
    /// at what a counted lookup left unconfirmed).
    pub fn peek_lookup(&self, dir: u64, name: &str) -> Lookup {
        self.classify(dir, name, Instant::now(), false)
    }

    pub(crate) fn lookup_at(&self, dir: u64, name: &str, now: Instant) -> Lookup {
        self.classify(dir, name, now, true)
    }

    fn classify(&self, dir: u64, name: &str, now: Instant, count: bool) -> Lookup {
        let bump = |counter| {
            if count {
                bump(counter)
            }
        };
        let key = DentryRef { dir, name };
        // What a dentry of its own says, else the directory's complete listing.
        let (found, seen, listed) = match self.store.get(&key) {
            Some(Entry::Positive { qid, seen }) => (Some(qid), seen, false),
            Some(Entry::Negative { expires, seen }) if expires.is_none_or(|t| now < t) => {
                (None, seen, false)
            }
            other => {
                if other.is_some() {
                    // An expired negative dentry: forget it so it no longer takes room.
                    self.store.remove(&key);
                }
                let answer = self.complete_answer(dir, name).filter(|(found, seen)| {
                    // "Missing" lives no longer than a negative dentry would.
                    found.is_some() || self.missing_still(seen.asked.at, now)
                });
                let Some((found, seen)) = answer else {
                    bump(&self.counters.dentry_misses);
                    return Lookup::Unknown;
                };
                (found, seen, true)
            }
        };
        if !self.believed(dir, seen, now) {
            bump(&self.counters.dentry_misses);
            return Lookup::Unconfirmed {
                found,
                dir_version: seen.dir_version,
            };
        }
        bump(match (listed, found) {
            (true, _) => &self.counters.listing_hits,
            (false, Some(_)) => &self.counters.dentry_hits,
            (false, None) => &self.counters.negative_hits,
        });
        found.map_or(Lookup::Missing, Lookup::Found)
    }

    /// Records that `name` in `dir` now exists with `qid` (replacing a negative
    /// entry), made so through this mount (a create, mkdir, symlink...): a change, with
    /// the directory's version after it unknown.
    pub fn insert_dentry(&self, dir: u64, name: &str, qid: Qid) {
        let seen = self.asking().seen(0);
        self.changing(dir, || self.put_dentry(dir, name, qid, seen));
    }

    /// Records that `name` in `dir` exists with `qid`, as the server answered a
    /// request made as `seen` says (unless `dir` changed through this mount since).
    pub fn insert_dentry_seen(&self, dir: u64, name: &str, qid: Qid, seen: Seen) {
        self.answered(seen.asked, dir, || self.put_dentry(dir, name, qid, seen));
    }

    pub(super) fn put_dentry(&self, dir: u64, name: &str, qid: Qid, seen: Seen) {
        self.store.insert(
            Key::Dentry {
                dir,
                name: name.into(),
            },
            Entry::Positive { qid, seen },
        );
        if let Some(shared) = &self.shared {
            shared.keep_name((dir, seen.dir_version), name, Some(qid));
        }
    }

    /// Forgets whatever is known about `name` in `dir`: called for every local unlink,
    /// rmdir, rename (both names), create, mkdir, symlink, link and mknod, as a change
    /// to `dir`. A symlink's cached target and a file's cached attributes go with its
    /// dentry, so a cached target never outlives its link.
    pub fn forget(&self, dir: u64, name: &str) {
        let (dentry, listed) = self.changing(dir, || {
            let dentry = match self.store.remove(&DentryRef { dir, name }) {
                Some((_, Entry::Positive { qid, .. })) => Some(qid),
                _ => None,
            };
            // A name a complete listing knows has no dentry of its own.
            let listed = self.complete_answer(dir, name).and_then(|(found, _)| found);
            (dentry, listed)
        });
        for qid in dentry.into_iter().chain(listed) {
            self.forget_symlink(qid.path);
            self.forget_attr(qid.path);
        }
    }
}
