//! Directory listings for the 9p backend: readdir, and complete directories (when to
//! read a directory's listing to answer lookups, and reading it; see the cache's
//! `complete` module for what is kept and how it stays exact).

use std::sync::Arc;

use wasm9p_proto::{Errno, Qid};

use super::{parts, NinepFs, MAX_COUNTED_DIRS};
use crate::cache::Lookup;
use crate::node::{Entry, Kind, Node};

fn rest_of(listing: &[Entry], cookie: u64) -> Vec<Entry> {
    listing
        .iter()
        .skip(usize::try_from(cookie).unwrap_or(usize::MAX))
        .cloned()
        .collect()
}

impl NinepFs {
    /// The answer of `dir`'s complete listing for `name`, reading the listing first
    /// if `dir` has now sent `complete_dirs` lookups to the server; `None` when there
    /// is no listing to ask (the name is walked).
    pub(super) async fn answer_from_listing(
        &self,
        dir: &Node,
        name: &str,
    ) -> Option<Result<Qid, Errno>> {
        let after = self.complete_after?;
        self.cache.complete_drop_if_stale(dir.id);
        if self.cache.complete_known(dir.id) {
            return None; // too large, or it holds no answer (a "missing" that expired)
        }
        let sent = {
            let mut counts = self.dir_misses.lock().unwrap_or_else(|e| e.into_inner());
            if counts.len() >= MAX_COUNTED_DIRS {
                counts.clear();
            }
            let n = counts.entry(dir.id).or_default();
            *n = n.saturating_add(1);
            *n - 1
        };
        if sent < after {
            return None;
        }
        self.listings.run(dir.id, || self.read_complete(dir)).await;
        let answer = match self.cache.peek_lookup(dir.id, name) {
            Lookup::Found(q) => Ok(q),
            Lookup::Missing => Err(Errno::ENOENT),
            _ => return None,
        };
        self.cache.count_listing_hit();
        Some(answer)
    }

    /// Reads `dir`'s whole listing into the cache as a complete directory (or marks
    /// it too large); on any error nothing is recorded and lookups walk as before.
    async fn read_complete(&self, dir: &Node) {
        let Ok(n) = parts(dir) else { return };
        let mut seen = self.seen_before(dir);
        let Ok((fid, mut first)) = self.open_dir(&n.path, true).await else {
            return;
        };
        if !n.path.is_empty() {
            if fid.qid.path != dir.id {
                // The path leads to another directory now (renamed behind the mount):
                // its names are not this directory's.
                return;
            }
            seen.dir_version = fid.qid.version;
        }
        let mut names = std::collections::HashMap::new();
        let mut offset = 0;
        loop {
            let batch = match first.take() {
                Some(batch) => batch,
                None => match fid.entries(offset, u32::MAX).await {
                    Ok(batch) => batch,
                    Err(_) => return,
                },
            };
            let Ok(next) = batch.next_cookie(offset) else {
                return;
            };
            offset = next;
            let end = batch.end || batch.entries.is_empty();
            for e in batch.entries {
                if e.name != "." && e.name != ".." {
                    names.insert(Box::<str>::from(e.name), e.qid);
                }
            }
            if names.len() > crate::cache::MAX_COMPLETE {
                self.cache.insert_too_large(dir.id, seen);
                return;
            }
            if end {
                break;
            }
        }
        self.cache.insert_complete(dir.id, names, seen);
    }
}

impl NinepFs {
    /// A directory's entries from `cookie` on: from the cached listing (confirmed by
    /// the directory's version past the window) in the metadata modes, which read and
    /// keep the whole listing; else one Treaddir from the server's own cookie.
    pub(super) async fn read_dir(&self, dir: &Node, cookie: u64) -> Result<Vec<Entry>, Errno> {
        let path = parts(dir)?.path.to_vec();
        if self.policy().metadata() {
            self.dir_from_store(dir, None).await;
            if let Some(listing) = self.cache.readdir(dir.id) {
                return Ok(rest_of(&listing, cookie));
            }
            if let Some(listing) = self.cache.shared_listing(parts(dir)?.qid) {
                return Ok(rest_of(&listing, cookie));
            }
            if let Some((listing, version)) = self.cache.unconfirmed_readdir(dir.id) {
                if version != 0 && self.check_dir(dir, &path).await == Ok(version) {
                    self.cache.count_revalidated();
                    return Ok(rest_of(&listing, cookie));
                }
            }
        }
        let mut seen = self.seen_before(dir);
        // The flight's entries are from cookie 0: of use to a listing read whole, or
        // read from its start.
        let from_start = self.policy().metadata() || cookie == 0;
        let (fid, mut first) = self.open_dir(&parts(dir)?.path, from_start).await?;
        if !path.is_empty() {
            seen.dir_version = if fid.qid.path == dir.id {
                fid.qid.version
            } else {
                0
            };
        }
        if self.policy().metadata() {
            // Cache the whole listing; cookies index it.
            let entries: Vec<Entry> = fid
                .readdir_all_after(first)
                .await?
                .into_iter()
                .filter(|e| e.name != "." && e.name != "..")
                .enumerate()
                .map(|(i, e)| Entry {
                    kind: Kind::of_qid(&e.qid),
                    id: e.qid.path,
                    name: e.name,
                    cookie: i as u64 + 1,
                })
                .collect();
            let listing = Arc::new(entries);
            self.cache.insert_readdir(dir.id, listing.clone(), seen);
            return Ok(rest_of(&listing, cookie));
        }
        // Uncached: one Treaddir from the server's own cookie (the flight's, from 0),
        // skipping "." and "..".
        let mut offset = cookie;
        loop {
            let batch = match first.take() {
                Some(batch) => batch,
                None => fid.entries(offset, u32::MAX).await?,
            };
            offset = batch.next_cookie(offset)?;
            let end = batch.end || batch.entries.is_empty();
            let entries: Vec<Entry> = batch
                .entries
                .into_iter()
                .filter(|e| e.name != "." && e.name != "..")
                .map(|e| Entry {
                    kind: Kind::of_qid(&e.qid),
                    id: e.qid.path,
                    name: e.name,
                    cookie: e.offset,
                })
                .collect();
            if !entries.is_empty() || end {
                return Ok(entries);
            }
        }
    }
}
