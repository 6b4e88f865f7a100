//! Prefetching an action's inputs from its kind's access profile (see `profiles`).
//!
//! - **What.** Each path of the profile is looked up in the action's own tree; the
//!   files found there whose blobs the content store lacks are fetched, at most
//!   [`MAX_PREFETCH_BYTES`] of them, first paths first.
//! - **How.** In groups of about [`GROUP_BYTES`], each one BatchReadBlobs (larger
//!   blobs go through ByteStream, as `Cas::read_blobs` does), [`GROUPS_AT_ONCE`]
//!   groups at a time, each blob put into the store through `ContentStore::get`. So a
//!   guest that reads a file whose prefetch is under way waits for that fetch rather
//!   than starting a second one, and a blob the guest fetched first is not fetched
//!   again.
//! - **When.** It runs on its own task beside the program's fetch and loading; the
//!   guest starts once it is done, so that the guest never waits on a file at a time
//!   for what one batch brings (the wait counts as the action's input fetch, not its
//!   execution). An action that fails before its guest starts stops it.
//! - **Never in the way of correctness.** A group whose batch fails
//!   (one blob gone from the CAS, say) fetches its blobs one by one, so that a guest
//!   waiting on one of them gets that blob or that blob's own error.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::OnceCell;

use crate::cas::Cas;
use crate::store::{ContentStore, Fetch, FetchError};
use crate::tree::{InputTree, TreeNode};
use crate::{BoxFuture, Digest};

/// Most bytes one action prefetches.
pub const MAX_PREFETCH_BYTES: u64 = 512 << 20;
/// About the bytes fetched in one group.
pub const GROUP_BYTES: u64 = 4 << 20;
/// Groups fetched at once.
pub const GROUPS_AT_ONCE: usize = 4;

/// The blobs to prefetch for `paths` in `tree`: files found there (symlinks on the
/// way followed) that `store` lacks, each once, first paths first, within the bound.
pub fn wanted(paths: &[String], tree: &InputTree, store: &ContentStore) -> Vec<Digest> {
    let mut seen = std::collections::HashSet::new();
    let mut bytes = 0;
    let mut out = Vec::new();
    for path in paths {
        let Some(index) = tree.resolve("", path) else {
            continue; // gone from this action's tree
        };
        let TreeNode::File { digest, .. } = &tree.node(index).0 else {
            continue; // no longer a file
        };
        if store.has(digest) || !seen.insert(*digest) {
            continue;
        }
        if bytes + digest.size() > MAX_PREFETCH_BYTES {
            continue;
        }
        bytes += digest.size();
        out.push(*digest);
    }
    out
}

/// What a prefetch fetched: blobs and bytes (blobs the guest fetched first, or the
/// store had, are not counted).
#[derive(Debug, Default)]
pub struct Tally {
    blobs: AtomicU64,
    bytes: AtomicU64,
}

impl Tally {
    /// Blobs fetched, and their bytes.
    pub fn fetched(&self) -> (u64, u64) {
        (
            self.blobs.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

/// Fetches `digests` into `store` from `cas` (see the module docs), counting what it
/// fetched in `tally`.
pub async fn prefetch(store: Arc<ContentStore>, tally: Arc<Tally>, cas: Cas, digests: Vec<Digest>) {
    futures_util::stream::iter(crate::cas::groups_of(digests, GROUP_BYTES))
        .map(|digests| {
            let store = store.clone();
            let group = Group {
                cas: cas.clone(),
                digests,
                fetched: OnceCell::new(),
                tally: tally.clone(),
            };
            async move {
                let gets = group.digests.iter().map(|d| store.get(*d, &group));
                // Errors are the reads' to report, when a guest makes them.
                let _ = futures_util::future::join_all(gets).await;
            }
        })
        .buffer_unordered(GROUPS_AT_ONCE)
        .collect::<Vec<()>>()
        .await;
}

/// One group's fetch: the first blob asked for fetches the whole group at once; each
/// blob is then taken from what came.
struct Group {
    cas: Cas,
    digests: Vec<Digest>,
    /// What the batch brought (`None`: it failed).
    fetched: OnceCell<Option<Mutex<HashMap<Digest, Bytes>>>>,
    tally: Arc<Tally>,
}

impl Fetch for Group {
    fn fetch(&self, digest: Digest) -> BoxFuture<'_, Result<Vec<u8>, FetchError>> {
        Box::pin(async move {
            let batch = self
                .fetched
                .get_or_init(|| async {
                    self.cas
                        .read_blobs(&self.digests)
                        .await
                        .ok()
                        .map(Mutex::new)
                })
                .await;
            let taken = batch
                .as_ref()
                .and_then(|b| b.lock().unwrap_or_else(|e| e.into_inner()).remove(&digest));
            let bytes = match taken {
                Some(bytes) => bytes.to_vec(),
                // The batch failed: this blob alone, for its own answer.
                None => self.cas.fetch(digest).await?,
            };
            self.tally.blobs.fetch_add(1, Ordering::Relaxed);
            self.tally
                .bytes
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            Ok(bytes)
        })
    }
}
