//! The worker's content store: blobs on local disk, named by digest, shared by every
//! action the worker runs (and by its restarts).
//!
//! - **Layout.** `DIR/blobs/AB/ABCD...` (the hash in hex, its first two digits a
//!   directory of their own); temporary files in `DIR/tmp/`.
//! - **Fetched once, verified.** [`ContentStore::get`] answers from disk, else fetches
//!   the blob (from the CAS, see [`Fetch`]), checks its bytes against the digest, and
//!   only then writes it: to a temporary file, synced, then renamed into place, so a
//!   file at a blob's name is always that whole blob, whatever crashed when. Callers
//!   asking for one blob at once share one fetch.
//! - **Bounded.** At most `limit` bytes stay: past it, the blobs used longest ago go
//!   (their use is counted in memory; at start, a file's mtime stands for it). A blob
//!   handed out as an open file stays readable after it goes from the directory. A
//!   single blob larger than the whole bound is fetched and handed out, then not kept.
//! - **Counted.** Blobs and bytes fetched, and hits, overall ([`ContentStore::stats`]),
//!   and for each caller through a [`Counted`] fetch of its own (an action's: the
//!   fetch it shared with another action is the other's).

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::digest::Digest;
use crate::BoxFuture;

/// Where the store fetches what it does not have.
pub trait Fetch: Send + Sync {
    /// The bytes of the blob `digest` (checked by the store).
    fn fetch(&self, digest: Digest) -> BoxFuture<'_, Result<Vec<u8>, FetchError>>;

    /// Told when the store answered a `get` through this without fetching (it had the
    /// blob, or another caller's fetch of it landed): for counting, see [`Counted`].
    fn had(&self, _digest: Digest) {}
}

impl<T: Fetch + ?Sized> Fetch for Arc<T> {
    fn fetch(&self, digest: Digest) -> BoxFuture<'_, Result<Vec<u8>, FetchError>> {
        (**self).fetch(digest)
    }

    fn had(&self, digest: Digest) {
        (**self).had(digest)
    }
}

/// A [`Fetch`] that counts what went through it: the blobs and bytes it fetched, and
/// the blobs the store had. One per action, so that actions running at once, whose
/// fetches the store shares, each count only their own (the store's [`StoreStats`] are
/// the whole worker's).
pub struct Counted<F> {
    inner: F,
    fetched: AtomicU64,
    fetched_bytes: AtomicU64,
    hits: AtomicU64,
}

impl<F: Fetch> Counted<F> {
    /// Counts what goes through `inner`.
    pub fn new(inner: F) -> Counted<F> {
        Counted {
            inner,
            fetched: AtomicU64::new(0),
            fetched_bytes: AtomicU64::new(0),
            hits: AtomicU64::new(0),
        }
    }

    /// Blobs fetched through it, and their bytes.
    pub fn fetched(&self) -> (u64, u64) {
        (
            self.fetched.load(Ordering::Relaxed),
            self.fetched_bytes.load(Ordering::Relaxed),
        )
    }

    /// Blobs asked for through it that the store had, or had fetched for another.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
}

impl<F: Fetch> Fetch for Counted<F> {
    fn fetch(&self, digest: Digest) -> BoxFuture<'_, Result<Vec<u8>, FetchError>> {
        Box::pin(async move {
            let bytes = self.inner.fetch(digest).await?;
            self.fetched.fetch_add(1, Ordering::Relaxed);
            self.fetched_bytes
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            Ok(bytes)
        })
    }

    fn had(&self, _digest: Digest) {
        self.hits.fetch_add(1, Ordering::Relaxed);
    }
}

/// Why a blob could not be had.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum FetchError {
    /// The CAS does not have it.
    #[error("the blob {0} is not in the CAS")]
    Missing(Digest),
    /// The CAS sent other bytes than the digest names.
    #[error("the CAS sent {got} for the blob {wanted}")]
    Corrupt {
        /// What was asked for.
        wanted: Digest,
        /// What the bytes sent are.
        got: Digest,
    },
    /// Talking to the CAS failed.
    #[error("fetching {digest}: {why}")]
    Unreachable {
        /// What was asked for.
        digest: Digest,
        /// What went wrong.
        why: String,
    },
    /// The store's disk failed.
    #[error("the content store: {0}")]
    Disk(String),
}

/// What the store has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Blobs fetched from the CAS.
    pub fetched: u64,
    /// Bytes fetched from the CAS.
    pub fetched_bytes: u64,
    /// Blobs asked for and found on disk.
    pub hits: u64,
    /// Bytes on disk now.
    pub bytes: u64,
}

#[derive(Default)]
struct Index {
    /// Blobs on disk: size and when last used (a counter).
    blobs: HashMap<Digest, (u64, u64)>,
    bytes: u64,
    clock: u64,
}

type Fetching = Arc<tokio::sync::OnceCell<Result<Arc<File>, FetchError>>>;

/// The content store (see the module docs).
pub struct ContentStore {
    dir: PathBuf,
    limit: u64,
    index: Mutex<Index>,
    fetching: Mutex<HashMap<Digest, Fetching>>,
    fetched: AtomicU64,
    fetched_bytes: AtomicU64,
    hits: AtomicU64,
    /// Names temporary files apart.
    next_tmp: AtomicU64,
}

impl std::fmt::Debug for ContentStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContentStore")
            .field("dir", &self.dir)
            .field("limit", &self.limit)
            .finish()
    }
}

impl ContentStore {
    /// The store in `dir` (made if missing), holding at most `limit` bytes: what an
    /// earlier run left there is counted and kept (within the bound); temporary files
    /// it left are removed.
    pub fn open(dir: &Path, limit: u64) -> std::io::Result<ContentStore> {
        std::fs::create_dir_all(dir.join("blobs"))?;
        let tmp = dir.join("tmp");
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp)?;
        let mut found = Vec::new();
        for shard in std::fs::read_dir(dir.join("blobs"))? {
            let shard = shard?;
            if !shard.file_type()?.is_dir() {
                continue;
            }
            for blob in std::fs::read_dir(shard.path())? {
                let blob = blob?;
                let meta = blob.metadata()?;
                let name = blob.file_name();
                let Some(digest) = name.to_str().and_then(|n| parse_name(n, meta.len())) else {
                    continue; // not ours
                };
                let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                found.push((used, digest, meta.len()));
            }
        }
        found.sort();
        let mut index = Index::default();
        for (_, digest, size) in found {
            index.clock += 1;
            index.bytes += size;
            index.blobs.insert(digest, (size, index.clock));
        }
        let store = ContentStore {
            dir: dir.to_owned(),
            limit,
            index: Mutex::new(index),
            fetching: Mutex::default(),
            fetched: AtomicU64::new(0),
            fetched_bytes: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            next_tmp: AtomicU64::new(0),
        };
        store.make_room(0);
        Ok(store)
    }

    /// Where the blob `digest` is kept.
    pub fn path(&self, digest: &Digest) -> PathBuf {
        let hex = digest.hex();
        self.dir.join("blobs").join(&hex[..2]).join(&hex)
    }

    /// Whether the blob `digest` is on disk.
    pub fn has(&self, digest: &Digest) -> bool {
        self.lock().blobs.contains_key(digest)
    }

    /// The blob `digest`, opened: from disk, else fetched through `from` (once, for
    /// everyone asking at the same time), verified and kept.
    pub async fn get(&self, digest: Digest, from: &dyn Fetch) -> Result<Arc<File>, FetchError> {
        if let Some(file) = self.open_kept(&digest) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            from.had(digest);
            return Ok(file);
        }
        let mut fetched_here = false;
        let cell = self
            .fetching
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(digest)
            .or_default()
            .clone();
        let result = cell
            .get_or_init(|| async {
                // Another caller's fetch may have landed just before this one began.
                if let Some(file) = self.open_kept(&digest) {
                    return Ok(file);
                }
                fetched_here = true;
                let bytes = from.fetch(digest).await?;
                let got = Digest::of(&bytes);
                if got != digest {
                    return Err(FetchError::Corrupt {
                        wanted: digest,
                        got,
                    });
                }
                self.fetched.fetch_add(1, Ordering::Relaxed);
                self.fetched_bytes
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                self.keep(digest, &bytes)
            })
            .await
            .clone();
        self.fetching
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&digest);
        if !fetched_here && result.is_ok() {
            from.had(digest);
        }
        result
    }

    /// Keeps `bytes` (already verified to be `digest`) on disk, making room first, and
    /// opens it; a blob larger than the whole bound is opened and not kept.
    fn keep(&self, digest: Digest, bytes: &[u8]) -> Result<Arc<File>, FetchError> {
        let disk = |e: std::io::Error| FetchError::Disk(e.to_string());
        let n = self.next_tmp.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .dir
            .join("tmp")
            .join(format!("{}-{}-{n}", std::process::id(), digest.hex()));
        let size = bytes.len() as u64;
        let written = File::create(&tmp).and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        });
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(disk(e));
        }
        if size > self.limit {
            let file = File::open(&tmp);
            let _ = std::fs::remove_file(&tmp);
            return file.map(Arc::new).map_err(disk);
        }
        self.make_room(size);
        let path = self.path(&digest);
        let placed = std::fs::create_dir_all(path.parent().expect("a shard directory"))
            .and_then(|()| std::fs::rename(&tmp, &path))
            .and_then(|()| File::open(&path));
        let file = match placed {
            Ok(file) => file,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(disk(e));
            }
        };
        let mut index = self.lock();
        index.clock += 1;
        let clock = index.clock;
        if index.blobs.insert(digest, (size, clock)).is_none() {
            index.bytes += size;
        }
        Ok(Arc::new(file))
    }

    /// The kept blob, opened, and counted as used now.
    fn open_kept(&self, digest: &Digest) -> Option<Arc<File>> {
        let mut index = self.lock();
        index.clock += 1;
        let clock = index.clock;
        let entry = index.blobs.get_mut(digest)?;
        entry.1 = clock;
        drop(index);
        match File::open(self.path(digest)) {
            Ok(file) => Some(Arc::new(file)),
            Err(_) => {
                // Removed behind the store's back: forget it, fetch it again.
                let mut index = self.lock();
                if let Some((size, _)) = index.blobs.remove(digest) {
                    index.bytes -= size;
                }
                None
            }
        }
    }

    /// Removes the blobs used longest ago until `more` bytes fit within the bound.
    fn make_room(&self, more: u64) {
        let mut index = self.lock();
        if index.bytes + more <= self.limit {
            return;
        }
        let mut by_age: Vec<(u64, Digest, u64)> = index
            .blobs
            .iter()
            .map(|(d, (size, used))| (*used, *d, *size))
            .collect();
        by_age.sort();
        for (_, digest, size) in by_age {
            if index.bytes + more <= self.limit {
                break;
            }
            let _ = std::fs::remove_file(self.path(&digest));
            index.blobs.remove(&digest);
            index.bytes -= size;
        }
    }

    /// What it has done so far.
    pub fn stats(&self) -> StoreStats {
        StoreStats {
            fetched: self.fetched.load(Ordering::Relaxed),
            fetched_bytes: self.fetched_bytes.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
            bytes: self.lock().bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The digest a blob's file name and size make, if it is one of ours.
fn parse_name(name: &str, size: u64) -> Option<Digest> {
    let proto = crate::apis::v2::Digest {
        hash: name.to_owned(),
        size_bytes: i64::try_from(size).ok()?,
    };
    Digest::from_proto(&proto).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CAS in memory that counts what it is asked for, and can lie.
    #[derive(Default)]
    struct Blobs {
        blobs: Mutex<HashMap<Digest, Vec<u8>>>,
        asked: AtomicU64,
    }

    impl Blobs {
        fn put(&self, bytes: &[u8]) -> Digest {
            let d = Digest::of(bytes);
            self.blobs.lock().unwrap().insert(d, bytes.to_vec());
            d
        }
    }

    impl Fetch for Blobs {
        fn fetch(&self, digest: Digest) -> BoxFuture<'_, Result<Vec<u8>, FetchError>> {
            Box::pin(async move {
                self.asked.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                self.blobs
                    .lock()
                    .unwrap()
                    .get(&digest)
                    .cloned()
                    .ok_or(FetchError::Missing(digest))
            })
        }
    }

    /// The whole blob, read by offset (a file handed to two callers is shared).
    fn read(f: Arc<File>) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let mut out = vec![0u8; f.metadata().unwrap().len() as usize];
        f.read_exact_at(&mut out, 0).unwrap();
        out
    }

    #[tokio::test]
    async fn callers_sharing_a_fetch_count_it_once_and_the_other_a_hit() {
        let dir = tempfile::tempdir().unwrap();
        let cas = Arc::new(Blobs::default());
        let d = cas.put(b"#define ANSWER 42\n");
        let store = ContentStore::open(dir.path(), 1 << 20).unwrap();
        let (one, two) = (Counted::new(cas.clone()), Counted::new(cas.clone()));
        let (a, b) = tokio::join!(store.get(d, &one), store.get(d, &two));
        assert_eq!(read(a.unwrap()), read(b.unwrap()));
        let (f1, f2) = (one.fetched(), two.fetched());
        assert_eq!(
            (f1.0 + f2.0, f1.1 + f2.1),
            (1, 18),
            "one fetch between them"
        );
        assert_eq!(one.hits() + two.hits(), 1, "the other shared it");
        let three = Counted::new(cas.clone());
        store.get(d, &three).await.unwrap();
        assert_eq!((three.fetched(), three.hits()), ((0, 0), 1), "kept: a hit");
        assert_eq!(store.stats().fetched, 1);
    }

    #[tokio::test]
    async fn a_blob_is_fetched_once_for_everyone_and_kept_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let cas = Blobs::default();
        let d = cas.put(b"int printf(const char *, ...);\n");
        let store = ContentStore::open(dir.path(), 1 << 20).unwrap();
        let (a, b) = tokio::join!(store.get(d, &cas), store.get(d, &cas));
        assert_eq!(read(a.unwrap()), read(b.unwrap()));
        assert_eq!(cas.asked.load(Ordering::Relaxed), 1, "one fetch for both");
        assert_eq!(store.stats().fetched, 1);
        drop(store);
        let again = ContentStore::open(dir.path(), 1 << 20).unwrap();
        assert!(again.has(&d));
        assert_eq!(
            read(again.get(d, &cas).await.unwrap()),
            b"int printf(const char *, ...);\n"
        );
        assert_eq!(
            cas.asked.load(Ordering::Relaxed),
            1,
            "nothing fetched again"
        );
        assert_eq!(again.stats().hits, 1);
    }

    #[tokio::test]
    async fn bytes_that_are_not_the_digest_and_missing_blobs_are_errors_and_nothing_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let cas = Blobs::default();
        let real = Digest::of(b"real");
        cas.blobs.lock().unwrap().insert(real, b"fake".to_vec());
        let store = ContentStore::open(dir.path(), 1 << 20).unwrap();
        assert!(matches!(
            store.get(real, &cas).await,
            Err(FetchError::Corrupt { .. })
        ));
        assert!(!store.has(&real));
        assert!(!store.path(&real).exists());
        let missing = Digest::of(b"nowhere");
        assert_eq!(
            store.get(missing, &cas).await.unwrap_err(),
            FetchError::Missing(missing)
        );
        assert_eq!(
            std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
            0,
            "no temporary file left"
        );
    }

    #[tokio::test]
    async fn the_store_keeps_within_its_bound_the_blobs_used_last() {
        let dir = tempfile::tempdir().unwrap();
        let cas = Blobs::default();
        let blobs: Vec<Digest> = (0..5u8).map(|i| cas.put(&[i; 1000])).collect();
        let store = ContentStore::open(dir.path(), 3000).unwrap();
        for d in &blobs[..3] {
            store.get(*d, &cas).await.unwrap();
        }
        // Use the first again: the second is now the oldest.
        store.get(blobs[0], &cas).await.unwrap();
        let held = store.get(blobs[3], &cas).await.unwrap();
        assert!(store.stats().bytes <= 3000, "{:?}", store.stats());
        assert!(store.has(&blobs[0]) && store.has(&blobs[3]));
        assert!(!store.has(&blobs[1]), "the one used longest ago went");
        // What was handed out stays readable whatever goes.
        store.get(blobs[4], &cas).await.unwrap();
        assert_eq!(read(held), vec![3u8; 1000]);
        // A blob larger than the whole bound is handed out, not kept.
        let big = cas.put(&[9u8; 5000]);
        assert_eq!(read(store.get(big, &cas).await.unwrap()).len(), 5000);
        assert!(!store.has(&big));
        assert!(store.stats().bytes <= 3000);
    }
}
