//! A mount's cache policy: what it caches, and how long it believes what it caches.
//!
//! One value, built once from the mount's options ([`Policy::of`]), kept
//! by the mount's [`MountCache`](super::MountCache) and read from there by the cache
//! (which answers are still believed, whether directory versions are recorded) and by
//! the 9p backend (what to keep, when to check, when an open may skip the server)
//! alike. Every question about revalidation is a method here, so it is answered in
//! one place.

use std::time::Duration;

use crate::mount_options::{CacheMode, NinepOptions, Trust};

/// What a mount caches and how long it believes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    mode: CacheMode,
    trust: Trust,
    symlink_cache: bool,
    nocto: bool,
}

impl Default for Policy {
    /// `cache=loose`, believed forever: what a bare [`MountCache`](super::MountCache)
    /// assumes.
    fn default() -> Self {
        Policy::new(CacheMode::LOOSE_MODE, Trust::Forever)
    }
}

impl Policy {
    /// The policy of a mount with these options: its mode, its
    /// [`trust`](NinepOptions::trust), `symlink_cache` and `nocto`.
    pub fn of(options: &NinepOptions) -> Policy {
        Policy::new(options.cache, options.trust())
            .caching_symlinks(options.symlink_cache)
            .nocto(options.nocto)
    }

    /// The policy of `mode` believing what it caches for `trust`, with symlink targets
    /// cached (where metadata is) and opens close-to-open.
    pub fn new(mode: CacheMode, trust: Trust) -> Policy {
        Policy {
            mode,
            trust,
            symlink_cache: true,
            nocto: false,
        }
    }

    /// The same with `symlink_cache=` as given.
    pub fn caching_symlinks(self, symlink_cache: bool) -> Policy {
        Policy {
            symlink_cache,
            ..self
        }
    }

    /// The same with `nocto` as given.
    pub fn nocto(self, nocto: bool) -> Policy {
        Policy { nocto, ..self }
    }

    /// The cache mode.
    pub fn mode(&self) -> CacheMode {
        self.mode
    }

    /// How long a cached answer is believed.
    pub fn trust(&self) -> Trust {
        self.trust
    }

    /// Dentries, attributes and listings are cached (META).
    pub fn metadata(&self) -> bool {
        self.mode.has(CacheMode::META)
    }

    /// File pages are cached (FILE).
    pub fn pages(&self) -> bool {
        self.mode.has(CacheMode::FILE)
    }

    /// Symbolic link targets are cached: metadata is, and `symlink_cache=on`.
    pub fn symlinks(&self) -> bool {
        self.metadata() && self.symlink_cache
    }

    /// Cached answers are believed for a window only, and checked with the server
    /// past it.
    pub fn checks(&self) -> bool {
        self.trust != Trust::Forever
    }

    /// Anything is believed beyond the use that fetched it: not a zero window (where
    /// every use asks again, so fetching ahead of a use buys nothing).
    pub fn believes_between_uses(&self) -> bool {
        !matches!(self.trust, Trust::For(window) if window.is_zero())
    }

    /// A read-only open that asks the server fetches the file's attributes with it:
    /// metadata is cached, and believed beyond one use.
    pub fn attrs_with_opens(&self) -> bool {
        self.metadata() && self.believes_between_uses()
    }

    /// An open may believe the file's cached version instead of asking the server:
    /// trusted forever (loose), or `nocto`.
    pub fn opens_believe(&self) -> bool {
        !self.checks() || self.nocto
    }

    /// How long a file kept open believes its version before it asks again (`None`:
    /// forever, or close-to-open only with a zero window).
    pub fn recheck_after(&self) -> Option<Duration> {
        match self.trust {
            Trust::For(window) if !window.is_zero() => Some(window),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_question_follows_the_mode_and_the_window() {
        let loose = Policy::default();
        assert!(loose.metadata() && loose.pages() && loose.symlinks());
        assert!(!loose.checks() && loose.believes_between_uses() && loose.opens_believe());
        assert_eq!(loose.recheck_after(), None);

        let every_use = Policy::new(CacheMode(0x3), Trust::For(Duration::ZERO));
        assert!(every_use.metadata() && every_use.checks());
        assert!(!every_use.believes_between_uses() && !every_use.opens_believe());
        assert!(!every_use.attrs_with_opens() && loose.attrs_with_opens());
        assert_eq!(every_use.recheck_after(), None);

        let window = Duration::from_millis(500);
        let revalidating = Policy::new(CacheMode::LOOSE_MODE, Trust::For(window)).nocto(true);
        assert!(revalidating.checks() && revalidating.believes_between_uses());
        assert!(revalidating.opens_believe());
        assert_eq!(revalidating.recheck_after(), Some(window));

        let none = Policy::new(CacheMode::NONE, Trust::Forever).caching_symlinks(true);
        assert!(!none.metadata() && !none.pages() && !none.symlinks());
        let no_links = Policy::default().caching_symlinks(false);
        assert!(no_links.metadata() && !no_links.symlinks());
    }

    #[test]
    fn a_mounts_policy_is_made_of_its_options() {
        let parse = |text: &str| {
            let pairs = text.split(',').map(|kv| match kv.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (kv, None),
            });
            Policy::of(&NinepOptions::parse(pairs).unwrap())
        };
        assert_eq!(parse("cache=loose"), Policy::default());
        let window = Duration::from_millis(250);
        assert_eq!(
            parse("cache=loose,revalidate=250,nocto,symlink_cache=off"),
            Policy::new(CacheMode::LOOSE_MODE, Trust::For(window))
                .nocto(true)
                .caching_symlinks(false)
        );
        let every_use = parse("cache=0x3");
        assert!(every_use.checks() && !every_use.believes_between_uses());
    }
}
