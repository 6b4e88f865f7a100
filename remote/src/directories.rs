//! The `Directory` messages a worker has read, by digest, for the actions after: a
//! build's actions share most of their input roots (the toolchain's files, the
//! sources' directories; only the levels above what changed differ), and a message
//! never changes under its digest, so what one action read the next need not ask the
//! CAS for again ([`crate::cas::Cas::directories`] takes what is here and reads the
//! rest).
//!
//! Bounded by the encoded size of what it keeps, at most `limit` bytes: past it, the
//! messages kept longest ago go first.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::apis::v2;
use crate::digest::Digest;

/// The worker's `Directory` messages, shared by its actions.
pub struct Directories {
    limit: u64,
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    by_digest: HashMap<Digest, v2::Directory>,
    /// Oldest first.
    order: VecDeque<Digest>,
    bytes: u64,
}

impl Directories {
    /// At most `limit` bytes of messages (their encoded size).
    pub fn new(limit: u64) -> Directories {
        Directories {
            limit,
            kept: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The message `digest`, if kept.
    pub fn get(&self, digest: &Digest) -> Option<v2::Directory> {
        self.lock().by_digest.get(digest).cloned()
    }

    /// Keeps `dir`, whose encoded bytes were checked to be `digest`; what was kept
    /// longest ago goes to make room. A message larger than the whole bound is not
    /// kept.
    pub fn keep(&self, digest: Digest, dir: v2::Directory) {
        let size = digest.size();
        if size > self.limit {
            return;
        }
        let mut kept = self.lock();
        if kept.by_digest.contains_key(&digest) {
            return;
        }
        while kept.bytes + size > self.limit {
            let Some(oldest) = kept.order.pop_front() else {
                break;
            };
            if kept.by_digest.remove(&oldest).is_some() {
                kept.bytes -= oldest.size();
            }
        }
        kept.by_digest.insert(digest, dir);
        kept.order.push_back(digest);
        kept.bytes += size;
    }

    /// How many are kept, and their bytes.
    #[cfg(test)]
    fn len_and_bytes(&self) -> (usize, u64) {
        let kept = self.lock();
        (kept.by_digest.len(), kept.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn dir(name: &str) -> (Digest, v2::Directory) {
        let d = v2::Directory {
            files: vec![v2::FileNode {
                name: name.to_owned(),
                ..Default::default()
            }],
            ..Default::default()
        };
        (Digest::of(&d.encode_to_vec()), d)
    }

    #[test]
    fn kept_messages_are_found_by_digest_and_the_oldest_go_past_the_bound() {
        let (da, a) = dir("a.h");
        let (db, b) = dir("b.h");
        let (dc, c) = dir("c.h");
        // Room for two of these (all the same size).
        let cache = Directories::new(da.size() * 2);
        cache.keep(da, a.clone());
        cache.keep(db, b.clone());
        cache.keep(da, a.clone()); // again: no second copy
        assert_eq!(cache.len_and_bytes(), (2, da.size() * 2));
        assert_eq!(cache.get(&da), Some(a));
        cache.keep(dc, c.clone());
        assert_eq!(cache.get(&da), None, "the oldest went");
        assert_eq!(cache.get(&db), Some(b));
        assert_eq!(cache.get(&dc), Some(c));
        assert_eq!(cache.len_and_bytes(), (2, da.size() * 2));
    }

    #[test]
    fn a_message_larger_than_the_bound_is_not_kept() {
        let (d, m) = dir("x.h");
        let cache = Directories::new(d.size() - 1);
        cache.keep(d, m);
        assert_eq!(cache.get(&d), None);
        assert_eq!(cache.len_and_bytes(), (0, 0));
    }
}
