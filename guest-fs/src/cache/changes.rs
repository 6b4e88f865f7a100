//! Late answers: the one rule that keeps an answer the server gave before a change
//! made through this mount from undoing that change when it arrives after it.
//!
//! Guest A asks the server about `/d` (a walk to a name in it, its listing, its
//! attributes); guest B creates `/d/x` through the same mount while A's reply is on
//! its way; the reply says `x` is missing. Stored, it would hide B's file for as long
//! as the cache believes it (a day, in loose mode). So:
//! - every request whose answer may be stored is tagged before it is sent with the
//!   mount's *change clock* ([`Asked`], from [`MountCache::asking`]);
//! - every change through the mount is applied to the cache under its *subject* (the
//!   qid path of the directory whose names changed, or of the file whose attributes or
//!   target did), which takes the next tick of the clock as the subject's last change
//!   ([`MountCache::changing`]);
//! - an answer is stored only if its subject has had no change since the answer was
//!   asked for, checked and stored in one step ([`MountCache::answered`]); otherwise
//!   it is dropped, and asked again when next needed.
//!
//! Nothing stale can be stored: a change's reply comes after the server made it, and
//! the change is recorded when that reply arrives, so an answer the server may have
//! given before the change was asked for before it was recorded. At worst an answer
//! that was in fact fresh is dropped. A subject's changes and the answers about it
//! take the same lock, so a change that edits what is stored (a complete listing
//! gaining a name) never interleaves with another change or an answer landing.
//!
//! Subjects share [`STRIPES`] locks, each with the clock of its last change: two
//! subjects in one stripe only make an answer dropped more often, never kept wrongly,
//! and the memory is fixed whatever the number of files. A cache hit takes no lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use super::MountCache;

/// Locks that subjects share (a power of two).
pub const STRIPES: usize = 1024;

/// When a request was sent: the time (for trust windows) and the mount's change clock
/// (for late answers). Made by [`MountCache::asking`] just before the request goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asked {
    /// When the request was sent.
    pub at: Instant,
    /// The change clock then: changes recorded later are newer than the answer.
    clock: u64,
}

/// The change clock and the stripes' last changes.
pub(super) struct Changes {
    clock: AtomicU64,
    last: Box<[Mutex<u64>]>,
}

impl Default for Changes {
    fn default() -> Self {
        Changes {
            clock: AtomicU64::new(0),
            last: (0..STRIPES).map(|_| Mutex::new(0)).collect(),
        }
    }
}

impl Changes {
    fn stripe(&self, subject: u64) -> MutexGuard<'_, u64> {
        // Qid paths are often small consecutive numbers: mix them before striping.
        let mixed = subject.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
        self.last[mixed as usize & (STRIPES - 1)]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

impl MountCache {
    /// Tags a request about to be sent: what it brings back is stored only as
    /// `answered` allows.
    pub fn asking(&self) -> Asked {
        Asked {
            at: Instant::now(),
            clock: self.changes.clock.load(Ordering::SeqCst),
        }
    }

    /// Applies `change` to what is cached about `subject` (a directory's names, a
    /// file's attributes or target) as a change made through this mount: answers
    /// asked for before it will not be stored over it.
    pub(super) fn changing<T>(&self, subject: u64, change: impl FnOnce() -> T) -> T {
        let mut last = self.changes.stripe(subject);
        *last = self.changes.clock.fetch_add(1, Ordering::SeqCst) + 1;
        change()
    }

    /// Whether no change to `subject` was ever made through this mount (a change to
    /// another subject of its stripe counts too: the answer errs towards "changed").
    pub(super) fn unchanged_here(&self, subject: u64) -> bool {
        *self.changes.stripe(subject) == 0
    }

    /// Stores an answer about `subject` asked for at `asked` (`store` does it), unless
    /// a change to the subject was made through this mount since: whether it was.
    pub(super) fn answered(&self, asked: Asked, subject: u64, store: impl FnOnce()) -> bool {
        let last = self.changes.stripe(subject);
        if *last > asked.clock {
            return false;
        }
        store();
        drop(last);
        true
    }
}

#[cfg(test)]
impl Asked {
    /// The same request, as if sent at `at` (for tests of trust windows).
    pub(super) fn sent_at(self, at: Instant) -> Asked {
        Asked { at, ..self }
    }
}
