//! Negative dentries: names known to be missing, for `negtimeout`.

use std::time::{Duration, Instant};

use super::{Entry, Key, MountCache};
use crate::mount_options::NegTimeout;

impl MountCache {
    /// Records that `name` in `dir` is missing, for the mount's `negtimeout` (nothing is
    /// recorded when negative caching is off).
    pub fn insert_negative(&self, dir: u64, name: &str) {
        match self.negtimeout {
            NegTimeout::Off => {}
            NegTimeout::UntilEvicted => self.put_negative(dir, name, None),
            NegTimeout::For(ttl) => self.insert_negative_ttl(dir, name, ttl),
        }
    }

    /// Records that `name` in `dir` is missing for `ttl`.
    pub fn insert_negative_ttl(&self, dir: u64, name: &str, ttl: Duration) {
        self.put_negative(dir, name, Instant::now().checked_add(ttl));
    }

    fn put_negative(&self, dir: u64, name: &str, expires: Option<Instant>) {
        self.store.insert(
            Key::Dentry {
                dir,
                name: name.into(),
            },
            Entry::Negative { expires },
        );
    }
}
