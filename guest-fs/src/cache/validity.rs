//! How long a cached answer is believed, and how an old one is confirmed.
//!
//! With [`Trust::Forever`] everything is believed until evicted. With
//! [`Trust::For`]`(window)` an answer is believed for `window` after it was fetched;
//! after that it is *unconfirmed*, and the backend checks it with the server before
//! using it:
//! - an answer about a name in a directory (a dentry, negative or not, or the
//!   directory's listing) records the directory's qid version it was learnt under
//!   ([`Seen::dir_version`], read before the request that fetched it, so a change in
//!   between only makes it look older). Whenever the backend sees the directory's
//!   version (a Tgetattr of it, or any Twalk through it: a walk returns a qid per
//!   name), it records it here ([`MountCache::dir_seen`]); an answer whose version is
//!   the one recorded less than `window` ago is believed again. So one check of a
//!   directory confirms every name cached in it;
//! - a server that keeps no versions sends 0 ([`Seen::dir_version`] 0): such answers
//!   are only ever believed for the window after they were fetched, then fetched again
//!   one by one;
//! - attributes are believed for the window after they were fetched (the backend may
//!   confirm them by the file's qid version, [`MountCache::confirm_attr`]); a symlink
//!   target while the link's qid version is the one it was read at, or for the window
//!   when that version is 0.

use std::time::{Duration, Instant};

use super::{Asked, Entry, Key, MountCache};
use crate::mount_options::Trust;

/// When an answer about a name was learnt, and the version its directory had then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    /// When the request that fetched it was sent.
    pub asked: Asked,
    /// The directory's qid version before that request (0: unknown, or a server that
    /// keeps no versions).
    pub dir_version: u32,
}

impl Asked {
    /// An answer about a directory's names, asked for then, under its version
    /// `dir_version`.
    pub fn seen(self, dir_version: u32) -> Seen {
        Seen {
            asked: self,
            dir_version,
        }
    }
}

/// Whether `at` is less than `window` before `now`.
pub(super) fn within(at: Instant, now: Instant, window: Duration) -> bool {
    now.saturating_duration_since(at) < window
}

impl MountCache {
    /// Records that directory `dir` had qid `version` when `asked` (the request that
    /// told was sent), where versions matter (a window, or a store on disk). Version 0
    /// says nothing and is not recorded.
    pub fn dir_seen(&self, dir: u64, version: u32, asked: Asked) {
        if version == 0 || !self.records_versions() {
            return;
        }
        self.store
            .insert(Key::DirVersion(dir), Entry::DirVersion { version, asked });
    }

    /// An answer about `dir`'s names asked for now, under the version last recorded
    /// for it: what a request about to be sent will learn.
    pub fn seen_now(&self, dir: u64) -> Seen {
        self.asking().seen(self.dir_version(dir))
    }

    /// The last version recorded for directory `dir` (0: none), to tag what a request
    /// about to be sent will learn about its names.
    pub fn dir_version(&self, dir: u64) -> u32 {
        match self.store.get(&Key::DirVersion(dir)) {
            Some(Entry::DirVersion { version, .. }) => version,
            _ => 0,
        }
    }

    /// Whether an answer about a name in `dir`, learnt as `seen` says, is believed at
    /// `now` without asking the server.
    pub(super) fn believed(&self, dir: u64, seen: Seen, now: Instant) -> bool {
        match self.policy.trust() {
            Trust::Forever => true,
            Trust::For(window) => {
                within(seen.asked.at, now, window)
                    || (seen.dir_version != 0
                        && matches!(self.store.get(&Key::DirVersion(dir)),
                            Some(Entry::DirVersion { version, asked })
                                if version == seen.dir_version && within(asked.at, now, window)))
            }
        }
    }

    /// Whether something fetched `at` is still believed at `now` on its age alone.
    pub(super) fn young(&self, at: Instant, now: Instant) -> bool {
        match self.policy.trust() {
            Trust::Forever => true,
            Trust::For(window) => within(at, now, window),
        }
    }

    /// Counts an unconfirmed answer that a check with the server confirmed.
    pub fn count_revalidated(&self) {
        super::bump(&self.counters.revalidated);
    }
}
