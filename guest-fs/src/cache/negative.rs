//! Negative dentries: names known to be missing, for `negtimeout`.

use std::time::Instant;

use super::{Entry, Key, MountCache, Seen};
use crate::mount_options::NegTimeout;

impl MountCache {
    /// Records that `name` in `dir` is missing, for the mount's `negtimeout` (nothing is
    /// recorded when negative caching is off), as the server answered just now with the
    /// directory's version unknown (the unit tests' shorthand).
    #[cfg(test)]
    pub(super) fn insert_negative(&self, dir: u64, name: &str) {
        self.insert_negative_seen(dir, name, self.asking().seen(0));
    }

    /// Records that `name` in `dir` is missing, as the server answered a request made
    /// as `seen` says (unless `dir` changed through this mount since).
    pub fn insert_negative_seen(&self, dir: u64, name: &str, seen: Seen) {
        self.answered(seen.asked, dir, || self.put_negative_seen(dir, name, seen));
    }

    pub(super) fn put_negative_seen(&self, dir: u64, name: &str, seen: Seen) {
        match self.negtimeout {
            NegTimeout::Off => {}
            NegTimeout::UntilEvicted => self.put_negative(dir, name, None, seen),
            NegTimeout::For(ttl) => {
                self.put_negative(dir, name, seen.asked.at.checked_add(ttl), seen)
            }
        }
    }

    /// Records that `name` in `dir` is missing for `ttl`, as the server answered
    /// just now (the unit tests' shorthand).
    #[cfg(test)]
    pub(super) fn insert_negative_ttl(&self, dir: u64, name: &str, ttl: std::time::Duration) {
        let asked = self.asking();
        let expires = Instant::now().checked_add(ttl);
        self.answered(asked, dir, || {
            self.put_negative(dir, name, expires, asked.seen(0))
        });
    }

    /// Whether "missing", learnt at `at` (from a complete listing), still stands at
    /// `now` under the mount's `negtimeout`, as a negative dentry learnt then would.
    pub(super) fn missing_still(&self, at: Instant, now: Instant) -> bool {
        match self.negtimeout {
            NegTimeout::Off => false,
            NegTimeout::UntilEvicted => true,
            NegTimeout::For(ttl) => at.checked_add(ttl).is_none_or(|end| now < end),
        }
    }

    fn put_negative(&self, dir: u64, name: &str, expires: Option<Instant>, seen: Seen) {
        self.store.insert(
            Key::Dentry {
                dir,
                name: name.into(),
            },
            Entry::Negative { expires, seen },
        );
        if let Some(shared) = &self.shared {
            shared.keep_name((dir, seen.dir_version), name, None);
        }
    }
}
