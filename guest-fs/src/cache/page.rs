//! File pages, by (qid path, qid version, page index), shared by every open of a file,
//! and the marks of files the server let this mount open for reading.
//!
//! A page is valid for the qid version it was read at: once the file changes on the
//! server, opens see a new version and old pages are never served again (they age out
//! under the byte bound).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::{bump, Entry, Key, MountCache};
use crate::fscache::PageKey;

/// Bytes per page.
pub const PAGE_SIZE: usize = 64 * 1024;

impl MountCache {
    /// Page `index` of file `path` at `version`, after `generation` changes through
    /// this mount ([`MountCache::generation`]). A page shorter than [`PAGE_SIZE`] is the
    /// last one of the file.
    pub fn page(&self, path: u64, version: u32, generation: u64, index: u64) -> Option<Bytes> {
        match self.store.get(&Key::Page {
            path,
            version,
            generation,
            index,
        }) {
            Some(Entry::Page(data)) => {
                bump(&self.counters.page_hits);
                Some(data)
            }
            _ => {
                // Not changed through this mount: another mount's pages, or the store
                // on disk, may have it.
                let key = PageKey {
                    path,
                    version,
                    index,
                };
                let stored = match generation {
                    0 => self
                        .shared_page(path, version, index)
                        .or_else(|| self.stored_page(key)),
                    _ => None,
                };
                match stored {
                    Some(data) => {
                        bump(&self.counters.page_hits);
                        self.store.insert(
                            Key::Page {
                                path,
                                version,
                                generation,
                                index,
                            },
                            Entry::Page(data.clone()),
                        );
                        Some(data)
                    }
                    None => {
                        bump(&self.counters.page_misses);
                        None
                    }
                }
            }
        }
    }

    /// Page `index` of `path` at `version` from the pages shared with other mounts.
    fn shared_page(&self, path: u64, version: u32, index: u64) -> Option<Bytes> {
        let page = self.shared.as_ref()?.page(path, version, index)?;
        bump(&self.counters.shared_page_hits);
        Some(page)
    }

    /// Whether page `index` of `path` at `version` is held (counts nothing).
    pub fn has_page(&self, path: u64, version: u32, generation: u64, index: u64) -> bool {
        self.store.contains_key(&Key::Page {
            path,
            version,
            generation,
            index,
        })
    }

    /// Caches page `index` of file `path` at `version` and `generation`. A page kept
    /// as a slice of the server reply it came in would keep the whole reply (up to
    /// msize, and the read buffer it was cut from) alive for as long as it is cached,
    /// while only the page is charged to `cache_size`; so the cache moves it into a
    /// buffer of its own (`PagePool::own`). The slice is cached at once, so that the
    /// next read hits, and moved by a blocking task of the runtime when there is one
    /// (the copy, and the page faults of new memory, stay off the reader's path: done
    /// in line, they halved cold-read throughput); until then it pins its reply.
    pub fn insert_page(&self, path: u64, version: u32, generation: u64, index: u64, data: Bytes) {
        if generation == 0 {
            let key = PageKey {
                path,
                version,
                index,
            };
            self.persist_page(key, data.clone());
            if let Some(shared) = &self.shared {
                shared.keep_page(path, version, index, &data);
            }
        }
        let key = Key::Page {
            path,
            version,
            generation,
            index,
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) if data.len() == PAGE_SIZE => {
                self.store.insert(key.clone(), Entry::Page(data.clone()));
                let (store, pool) = (self.store.clone(), Arc::clone(&self.pages));
                drop(runtime.spawn_blocking(move || {
                    // Only if that very slice is still cached (not evicted, replaced or
                    // dropped by a change meanwhile).
                    let same = matches!(store.peek(&key),
                        Some(Entry::Page(held)) if held.as_ptr() == data.as_ptr());
                    if same {
                        let _ = store.replace(key, Entry::Page(pool.own(&data)), true);
                    }
                }));
            }
            _ => {
                self.store.insert(key, Entry::Page(self.pages.own(&data)));
            }
        }
    }

    /// Records that the server opened file `path` at `version` for reading through this
    /// mount after its `generation`-th change through the mount, and that its pages
    /// are kept under `pages`, so that a later read-only open of that version, with no
    /// change through the mount in between, may be deferred and read those pages.
    /// `at`: when the server was asked.
    pub fn insert_readable(
        &self,
        path: u64,
        version: u32,
        generation: u64,
        pages: u32,
        at: Instant,
    ) {
        self.store.insert(
            Key::Readable {
                path,
                version,
                generation,
            },
            Entry::Readable { pages, at },
        );
    }

    /// The version the pages of file `path` are kept under, and when the server was
    /// asked, if it was opened for reading at `version` since its `generation`-th
    /// change through this mount (counts nothing).
    pub fn readable(&self, path: u64, version: u32, generation: u64) -> Option<(u32, Instant)> {
        match self.store.get(&Key::Readable {
            path,
            version,
            generation,
        }) {
            Some(Entry::Readable { pages, at }) => Some((pages, at)),
            _ => None,
        }
    }

    /// Like [`MountCache::readable`], if the server was asked recently enough to be
    /// believed without asking again (always, when the trust is forever).
    pub fn readable_believed(&self, path: u64, version: u32, generation: u64) -> Option<u32> {
        self.readable(path, version, generation)
            .filter(|(_, at)| self.young(*at, Instant::now()))
            .map(|(pages, _)| pages)
    }
}

/// Page buffers given back by pages the cache let go, for the next pages to reuse.
/// Pages come and go by the thousand under the byte bound; taken from and given back to
/// the heap one by one they fragment it (a 64 MiB cache churned by a 1 GiB read held
/// 169 MB of RSS), recycled they do not. At most [`PagePool::KEPT`] buffers wait here.
#[derive(Debug, Default)]
pub(super) struct PagePool {
    free: std::sync::Mutex<Vec<Vec<u8>>>,
}

impl PagePool {
    /// Most buffers kept for reuse (4 MiB).
    const KEPT: usize = 64;

    /// Buffers waiting for reuse now.
    #[cfg(test)]
    pub(super) fn waiting(&self) -> usize {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// `data` in a buffer of its own, a recycled one if there is one.
    pub(super) fn own(self: &Arc<PagePool>, data: &[u8]) -> Bytes {
        if data.len() != PAGE_SIZE {
            // The short last page of a file: rare, and sized to fit.
            return Bytes::copy_from_slice(data);
        }
        let recycled = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut buf = recycled.unwrap_or_else(|| Vec::with_capacity(PAGE_SIZE));
        buf.clear();
        buf.extend_from_slice(data);
        Bytes::from_owner(PooledPage {
            buf,
            pool: Arc::clone(self),
        })
    }
}

/// A page's buffer, back to its pool when the last reference to the page goes.
struct PooledPage {
    buf: Vec<u8>,
    pool: Arc<PagePool>,
}

impl AsRef<[u8]> for PooledPage {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for PooledPage {
    fn drop(&mut self) {
        let mut free = self.pool.free.lock().unwrap_or_else(|e| e.into_inner());
        if free.len() < PagePool::KEPT {
            free.push(std::mem::take(&mut self.buf));
        }
    }
}
