//! Negative dentries: names known to be missing, for `negtimeout`.

use std::time::{Duration, Instant};

use super::{Entry, Key, MountCache, Seen};
use crate::mount_options::NegTimeout;

impl MountCache {
    /// Records that `name` in `dir` is missing, for the mount's `negtimeout` (nothing is
    /// recorded when negative caching is off), learnt with the directory's version
    /// unknown.
    pub fn insert_negative(&self, dir: u64, name: &str) {
        self.insert_negative_seen(dir, name, Seen::now(0));
    }

    /// Records that `name` in `dir` is missing, learnt as `seen` says.
    pub fn insert_negative_seen(&self, dir: u64, name: &str, seen: Seen) {
        match self.negtimeout {
            NegTimeout::Off => {}
            NegTimeout::UntilEvicted => self.put_negative(dir, name, None, seen),
            NegTimeout::For(ttl) => self.put_negative(dir, name, seen.at.checked_add(ttl), seen),
        }
    }

    /// Records that `name` in `dir` is missing for `ttl`.
    pub fn insert_negative_ttl(&self, dir: u64, name: &str, ttl: Duration) {
        self.put_negative(dir, name, Instant::now().checked_add(ttl), Seen::now(0));
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
    }
}
