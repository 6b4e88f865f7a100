//! An open file on a 9p mount: readahead (FILE) and write-back (WRITEBACK).
//!
//! Lazy opens (loose mode): a read-only open of a file whose dentry, and so qid, is
//! cached, that the server let this mount open for reading at that qid before, and
//! that this mount has not changed, costs no RPC. The file is walked to and
//! opened on the server only when a read misses the page cache or its size is not in
//! the attribute cache, so a compiler reopening a header it has read before pays hash
//! lookups only (v9fs still sends Twalk, Tlopen and Tclunk for each open).
//!
//! Opens that check (a mode whose trust is a window, see `check`): the open
//! walks to the file for its version; if this mount opened that very version for
//! reading before, the Tlopen waits for the first read that misses the pages (so a
//! warm reopen costs one Twalk, and the Tclunk when it closes). With `revalidate=MS`
//! above 0, a file kept open for longer than MS asks for its version again (one
//! Tgetattr) before its next read of pages, and reads the new version's pages if it
//! moved.
//!
//! Attributes with the open (META): a read-only open that asks the server is opened
//! with its attributes (and first pages) by `flight`, so the `fstat` that
//! follows (a compiler's, of each header) is answered from the cache.
//!
//! Pages (FILE): reads go through the mount's page cache, shared by every open of the
//! file by every guest, keyed by the qid version the file was opened at. A miss fetches
//! the missing pages in one pipelined read (several msize requests in flight); a reader
//! that continues where its last read ended also gets pages read ahead, the extra
//! doubling up to [`MAX_READAHEAD`]. Once this open has written, it reads from the
//! server directly (its pages would be of the version before the write). A change
//! through any open of the file (write, truncate) moves the file to a new generation
//! of pages ([`MountCache::generation`]): the other opens' next reads miss, push out
//! what the writers still buffer, and fetch again, so two opens in one mount always
//! agree.
//!
//! Write-back: writes are buffered in a [`WriteBuffer`] and go out in msize pieces once a
//! piece is full, when the buffer passes [`WRITEBACK_LIMIT`], and on flush (close) and
//! fsync. An error a buffered write meets is kept and returned by the next flush or
//! fsync: it is never lost silently. A read through the same file flushes first, so
//! it sees what was written. Append-mode files are never buffered (only the server
//! knows where the end is).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use bytes::Bytes;
use wasm9p_proto::consts::{open, IOHDRSZ};
use wasm9p_proto::{Errno, Qid};

use super::check::version_of;
use super::deferred::{Deferrals, Deferred, OpenFid};
use crate::backend::{BoxFuture, OpenFile, OpenFlags, SetAttr};
use crate::cache::{MountCache, PAGE_SIZE};
use crate::client::Fid;
use crate::mount_options::CacheMode;
use crate::node::Attr;
use crate::writeback::WriteBuffer;

/// Most bytes read ahead of a sequential reader (2 MiB).
pub const MAX_READAHEAD: usize = 2 << 20;
/// Most bytes one open file buffers before writing everything out (8 MiB).
pub const WRITEBACK_LIMIT: usize = 8 << 20;

/// Where a sequential reader is.
#[derive(Debug, Default)]
struct Sequential {
    /// Where its next read starts.
    next: u64,
    /// Bytes read ahead last time.
    ahead: usize,
}

#[derive(Debug)]
struct WriteState {
    buffer: WriteBuffer,
    /// The first error a buffered write met, for the next flush to report.
    error: Option<Errno>,
}

/// The write-back side of an open file: its buffer and the fid it goes out through.
/// Shared with the mount's [`Writers`], so that a stat or truncate of the file by path
/// sends what is buffered first (as v9fs writes dirty pages back before a getattr).
pub(super) struct WriteBack {
    fid: Arc<Fid>,
    state: tokio::sync::Mutex<WriteState>,
}

impl WriteBack {
    /// Sends pieces; the first error wins.
    async fn send(&self, pieces: Vec<(u64, Bytes)>) -> Result<(), Errno> {
        let mut first = Ok(());
        for (offset, data) in pieces {
            if let Err(e) = self.fid.write_all_at(offset, data).await {
                first = first.and(Err(e));
            }
        }
        first
    }

    /// Sends everything buffered; returns the first error since the last flush.
    async fn flush(&self) -> Result<(), Errno> {
        let mut state = self.state.lock().await;
        let pieces = state.buffer.drain();
        let sent = self.send(pieces).await;
        match state.error.take() {
            Some(earlier) => Err(earlier),
            None => sent,
        }
    }

    /// Sends everything buffered for someone else (a stat by path); an error is kept
    /// for the file's own next flush or fsync to report.
    async fn push_out(&self) {
        let mut state = self.state.lock().await;
        let pieces = state.buffer.drain();
        if let Err(e) = self.send(pieces).await {
            state.error.get_or_insert(e);
        }
    }
}

/// The open files of a mount that buffer writes, by qid path.
#[derive(Default)]
pub(super) struct Writers(Mutex<HashMap<u64, Vec<Weak<WriteBack>>>>);

impl Writers {
    fn register(&self, file: u64, writer: &Arc<WriteBack>) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let list = map.entry(file).or_default();
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(writer));
    }

    /// Whether an open file of `file` buffers writes.
    pub(super) fn buffering(&self, file: u64) -> bool {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&file)
            .is_some_and(|list| list.iter().any(|w| w.strong_count() > 0))
    }

    /// Sends what every open file of `file` has buffered, before the server is asked
    /// about its size or told to change it.
    pub(super) async fn push_out(&self, file: u64) {
        let live: Vec<Arc<WriteBack>> = {
            let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
            let Some(list) = map.get_mut(&file) else {
                return;
            };
            list.retain(|w| w.strong_count() > 0);
            let live = list.iter().filter_map(Weak::upgrade).collect();
            if list.is_empty() {
                map.remove(&file);
            }
            live
        };
        for writer in live {
            writer.push_out().await;
        }
    }
}

/// Where an open file's fid comes from.
pub(super) enum Source {
    /// Walked to, to be opened now.
    Opened(Fid),
    /// Walked to and opened already (`flight`), its attributes and first pages
    /// cached.
    Ready(Fid),
    /// Walked to (the walk gave the version to check), to be opened read-only on
    /// first need.
    Walked(Fid),
    /// To walk to from the root (names from it) and open read-only on first need.
    Lazy { root: Arc<Fid>, path: Vec<String> },
}

/// For a file kept open in a mode that checks: when its version was last asked for.
struct Recheck {
    window: std::time::Duration,
    checked: Mutex<Instant>,
}

pub(super) struct NinepFile {
    open: Arc<OpenFid>,
    qid: Qid,
    /// The version pages are keyed by: the qid's at open, moved on by a recheck.
    version: AtomicU32,
    recheck: Option<Recheck>,
    flags: OpenFlags,
    chunk: usize,
    cache: Arc<MountCache>,
    sequential: Mutex<Sequential>,
    wrote: AtomicBool,
    writeback: Option<Arc<WriteBack>>,
    /// The mount's buffering writers, pushed out before pages of a file changed
    /// through this mount are fetched again.
    writers: Arc<Writers>,
}

impl NinepFile {
    pub(super) async fn open(
        source: Source,
        qid: Qid,
        flags: OpenFlags,
        cache: Arc<MountCache>,
        writers: &Arc<Writers>,
        deferrals: &Deferrals,
    ) -> Result<NinepFile, Errno> {
        let mut p9 = match (flags.read, flags.write) {
            (true, true) => open::RDWR,
            (false, true) => open::WRONLY,
            _ => open::RDONLY,
        };
        if flags.truncate && flags.write {
            p9 |= open::TRUNC;
        }
        if flags.append {
            p9 |= open::APPEND;
        }
        let read_only = !(flags.write || flags.truncate || flags.append);
        let open = match source {
            Source::Opened(fid) => {
                fid.lopen(p9).await?;
                OpenFid::ready(fid)
            }
            // Only read-only opens are deferred, or opened in a flight.
            _ if !read_only => return Err(Errno::EINVAL),
            Source::Ready(fid) => OpenFid::ready(fid),
            Source::Walked(fid) => OpenFid::deferred(Deferred::Open(Arc::new(fid))),
            Source::Lazy { root, path } => OpenFid::deferred(Deferred::Walk { root, path }),
        };
        if open.get().is_none() {
            deferrals.register(qid.path, &open);
        }
        let session = open.session();
        // A file kept open past the window asks for its version again before reading
        // pages (zero: close-to-open only, as v9fs: not a Tgetattr per read).
        let recheck = match cache.policy().recheck_after() {
            Some(window) if !open.by_path() => Some(Recheck {
                window,
                checked: Mutex::new(Instant::now()),
            }),
            _ => None,
        };
        let chunk = (session.msize() - IOHDRSZ) as usize;
        let buffered =
            cache.policy().mode().has(CacheMode::WRITEBACK) && flags.write && !flags.append;
        let writeback = buffered.then(|| {
            let fid = open.get().expect("writable opens are never lazy").clone();
            let writer = Arc::new(WriteBack {
                fid,
                state: tokio::sync::Mutex::new(WriteState {
                    buffer: WriteBuffer::new(chunk, WRITEBACK_LIMIT),
                    error: None,
                }),
            });
            writers.register(qid.path, &writer);
            writer
        });
        Ok(NinepFile {
            open,
            qid,
            version: AtomicU32::new(qid.version),
            recheck,
            flags,
            chunk,
            cache,
            sequential: Mutex::new(Sequential::default()),
            wrote: AtomicBool::new(false),
            writeback,
            writers: Arc::clone(writers),
        })
    }

    /// The fid, walking to the file and opening it first if this open was lazy.
    async fn fid(&self) -> Result<&Arc<Fid>, Errno> {
        self.open.fid().await
    }

    /// The version to key pages by; past the recheck window, asked of the server
    /// again (and the attributes it came with cached).
    async fn current_version(&self) -> Result<u32, Errno> {
        if let Some(recheck) = &self.recheck {
            let due = {
                let checked = recheck.checked.lock().unwrap_or_else(|e| e.into_inner());
                checked.elapsed() >= recheck.window
            };
            if due {
                let asked = self.cache.asking();
                let a = self.fid().await?.getattr().await?;
                self.version.store(version_of(&a), Ordering::Relaxed);
                *recheck.checked.lock().unwrap_or_else(|e| e.into_inner()) = asked.at;
                if self.cache.policy().metadata() && !self.wrote.load(Ordering::Relaxed) {
                    self.cache.insert_attr(a, asked);
                }
            }
        }
        Ok(self.version.load(Ordering::Relaxed))
    }

    /// The file's size as the attribute cache knows it (loose mode), uncounted.
    fn known_size(&self) -> Option<u64> {
        self.cache
            .policy()
            .metadata()
            .then(|| self.cache.peek_attr(self.qid.path).map(|a| a.size))
            .flatten()
    }

    fn sequential(&self) -> std::sync::MutexGuard<'_, Sequential> {
        self.sequential.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads through the shared page cache.
    async fn read_pages(&self, offset: u64, len: usize) -> Result<Bytes, Errno> {
        let (path, version) = (self.qid.path, self.current_version().await?);
        let generation = self.cache.generation(path);
        let page = PAGE_SIZE as u64;
        let first = offset / page;
        let last = (offset + len as u64 - 1) / page;
        let mut pages: Vec<Bytes> = Vec::with_capacity((last - first + 1) as usize);
        let mut missing = None;
        for index in first..=last {
            match self.cache.page(path, version, generation, index) {
                Some(data) => {
                    let short = data.len() < PAGE_SIZE;
                    pages.push(data);
                    if short {
                        break; // the end of the file
                    }
                }
                None => {
                    missing = Some(index);
                    break;
                }
            }
        }
        if let Some(from) = missing {
            if generation > 0 {
                // Changed through this mount: what other opens still buffer goes to
                // the server before its pages are read from there.
                self.writers.push_out(path).await;
            }
            let ahead = {
                let mut seq = self.sequential();
                seq.ahead = if offset == seq.next {
                    (seq.ahead * 2).clamp(self.chunk, MAX_READAHEAD)
                } else {
                    0
                };
                seq.ahead
            };
            let mut want =
                ((last - from + 1) as usize * PAGE_SIZE + ahead).next_multiple_of(PAGE_SIZE);
            if let Some(size) = self.known_size() {
                // Never ask past the end: those reads would come back empty and the
                // rest of their pipeline would have to be flushed.
                let left = size.saturating_sub(from * page) as usize;
                want = want.min(left.next_multiple_of(PAGE_SIZE).max(PAGE_SIZE));
            }
            let fid = self.fid().await?;
            let start = from * page;
            let mut replies = fid.read_replies_at(start, want, PAGE_SIZE).await?;
            let mut got: usize = replies.iter().map(Bytes::len).sum();
            // 9P lets a server answer a read with fewer bytes than asked before the end
            // of the file. A short page here would be taken for the end of the file
            // (and kept as such), so the rest is asked for again: only an empty reply,
            // or the size the attributes give, is the end.
            while got < want
                && self
                    .known_size()
                    .is_none_or(|size| start + (got as u64) < size)
            {
                let more = fid
                    .read_replies_at(start + got as u64, want - got, PAGE_SIZE)
                    .await?;
                let n: usize = more.iter().map(Bytes::len).sum();
                if n == 0 {
                    break;
                }
                got += n;
                replies.extend(more);
            }
            let mut index = from;
            for piece in carve_pages(replies) {
                self.cache
                    .insert_page(path, version, generation, index, piece.clone());
                if index <= last {
                    pages.push(piece);
                }
                index += 1;
            }
            if got < want && got.is_multiple_of(PAGE_SIZE) {
                // The file ends on a page boundary: remember the empty page after it.
                self.cache
                    .insert_page(path, version, generation, index, Bytes::new());
            }
        }
        // Assemble [offset, offset + len) from the pages, stopping at the end of file.
        let skip = (offset - first * page) as usize;
        let out = if pages.len() == 1 {
            let p = &pages[0];
            p.slice(skip.min(p.len())..(skip + len).min(p.len()))
        } else {
            let mut out = bytes::BytesMut::with_capacity(len);
            let mut skip = skip;
            for p in &pages {
                let from = skip.min(p.len());
                skip -= from;
                let take = (len - out.len()).min(p.len() - from);
                out.extend_from_slice(&p[from..from + take]);
                if p.len() < PAGE_SIZE || out.len() == len {
                    break;
                }
            }
            out.freeze()
        };
        self.sequential().next = offset + out.len() as u64;
        Ok(out)
    }

    async fn flush_buffer(&self) -> Result<(), Errno> {
        match &self.writeback {
            Some(writer) => writer.flush().await,
            None => Ok(()),
        }
    }

    async fn read_uncached(&self, offset: u64, len: usize) -> Result<Bytes, Errno> {
        self.cache.count_page(false);
        self.fid().await?.read_at(offset, len).await
    }
}

/// Cuts the server's replies into pages: slices of the replies themselves, for the read
/// that asked (the cache copies what it keeps, see `MountCache::insert_page`; requests
/// ask for whole pages, so none straddles two replies), copying only a page that does
/// (when msize is below a page). The last page may be short: the end of the file.
pub(super) fn carve_pages(replies: Vec<Bytes>) -> Vec<Bytes> {
    let mut pages = Vec::new();
    let mut straddling: Option<bytes::BytesMut> = None;
    for mut reply in replies {
        if let Some(partial) = straddling.as_mut() {
            let take = (PAGE_SIZE - partial.len()).min(reply.len());
            partial.extend_from_slice(&reply.split_to(take));
            if partial.len() == PAGE_SIZE {
                pages.extend(straddling.take().map(bytes::BytesMut::freeze));
            }
        }
        while reply.len() >= PAGE_SIZE {
            pages.push(reply.split_to(PAGE_SIZE));
        }
        if !reply.is_empty() {
            straddling = Some(bytes::BytesMut::from(&reply[..]));
        }
    }
    pages.extend(straddling.map(bytes::BytesMut::freeze));
    pages
}

impl OpenFile for NinepFile {
    fn read_at<'a>(&'a self, offset: u64, len: usize) -> BoxFuture<'a, Result<Bytes, Errno>> {
        Box::pin(async move {
            if !self.flags.read {
                return Err(Errno::EBADF);
            }
            self.flush_buffer().await?;
            if len == 0 {
                return Ok(Bytes::new());
            }
            if !self.cache.policy().pages() || self.wrote.load(Ordering::Relaxed) {
                return self.read_uncached(offset, len).await;
            }
            self.read_pages(offset, len).await
        })
    }

    fn write_at<'a>(&'a self, offset: u64, data: Bytes) -> BoxFuture<'a, Result<usize, Errno>> {
        Box::pin(async move {
            if !self.flags.write {
                return Err(Errno::EBADF);
            }
            let len = data.len();
            self.wrote.store(true, Ordering::Relaxed);
            self.cache.forget_attr(self.qid.path);
            self.cache.mark_written(self.qid.path);
            match &self.writeback {
                Some(writer) => {
                    let mut state = writer.state.lock().await;
                    state.buffer.write(offset, &data);
                    let ready = state.buffer.take_ready();
                    if let Err(e) = writer.send(ready).await {
                        state.error.get_or_insert(e);
                    }
                }
                None => self.fid().await?.write_all_at(offset, data).await?,
            }
            Ok(len)
        })
    }

    fn flush<'a>(&'a self) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(self.flush_buffer())
    }

    fn fsync<'a>(&'a self, datasync: bool) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(async move {
            self.flush_buffer().await?;
            self.fid().await?.fsync(datasync).await
        })
    }

    fn getattr<'a>(&'a self) -> BoxFuture<'a, Result<Attr, Errno>> {
        Box::pin(async move {
            // The attribute cache when metadata is cached and this open has not
            // changed the file (a lazy open stays lazy); else the server, through this
            // open's fid (it answers with fstat on its open file, so an unlinked file
            // still has attributes). Buffered writes extend the size.
            let unchanged = self.cache.policy().metadata() && !self.wrote.load(Ordering::Relaxed);
            let cached = unchanged.then(|| self.cache.attr(self.qid.path)).flatten();
            let a = match cached {
                Some(a) => a,
                None => {
                    // What other opens of the file buffer counts: send it first.
                    self.writers.push_out(self.qid.path).await;
                    let asked = self.cache.asking();
                    let a = Arc::new(self.fid().await?.getattr().await?);
                    if unchanged {
                        self.cache.confirm_attr(a.clone(), asked);
                    }
                    a
                }
            };
            let mut attr = super::attr_of(&a);
            if let Some(writer) = &self.writeback {
                let buffered = writer.state.lock().await.buffer.end().unwrap_or(0);
                attr.size = attr.size.max(buffered);
            }
            Ok(attr)
        })
    }

    fn set_len<'a>(&'a self, size: u64) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(async move {
            if !self.flags.write {
                return Err(Errno::EINVAL);
            }
            // Every buffered write of the file lands before the truncate, not after.
            self.flush_buffer().await?;
            self.writers.push_out(self.qid.path).await;
            self.wrote.store(true, Ordering::Relaxed);
            self.cache.mark_written(self.qid.path);
            let change = SetAttr {
                size: Some(size),
                ..SetAttr::default()
            };
            let result = self.fid().await?.setattr(&change).await;
            self.cache.forget_attr(self.qid.path);
            result
        })
    }

    fn size<'a>(&'a self) -> BoxFuture<'a, Result<u64, Errno>> {
        Box::pin(async move {
            let on_server = match self.known_size() {
                Some(size) if !self.wrote.load(Ordering::Relaxed) => size,
                _ => {
                    let asked = self.cache.asking();
                    let attr = self.fid().await?.getattr().await?;
                    let size = attr.size;
                    if self.cache.policy().metadata() && !self.wrote.load(Ordering::Relaxed) {
                        self.cache.insert_attr(attr, asked);
                    }
                    size
                }
            };
            let buffered = match &self.writeback {
                Some(writer) => writer.state.lock().await.buffer.end().unwrap_or(0),
                None => 0,
            };
            Ok(on_server.max(buffered))
        })
    }
}

impl Drop for NinepFile {
    fn drop(&mut self) {
        // Closed without a flush: still send what is buffered (nobody can hear an
        // error any more; the host flushes on close so that it can).
        let Some(writer) = self.writeback.as_ref() else {
            return;
        };
        let pieces = match writer.state.try_lock() {
            Ok(mut state) => state.buffer.drain(),
            Err(_) => return, // being pushed out by a stat right now
        };
        if pieces.is_empty() {
            return;
        }
        let fid = writer.fid.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    for (offset, data) in pieces {
                        if let Err(e) = fid.write_all_at(offset, data).await {
                            tracing::warn!("9p write-back after close failed: {e}");
                        }
                    }
                });
            }
            Err(_) => tracing::warn!(
                "9p write-back: file dropped outside a runtime, {} pieces lost",
                pieces.len()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(len: usize, seed: u8) -> Bytes {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn pages_are_cut_from_the_replies_and_straddling_ones_are_joined() {
        // Aligned replies (7 pages, then a short end): every page a slice of its reply.
        let (a, b) = (bytes(7 * PAGE_SIZE, 1), bytes(PAGE_SIZE + 100, 2));
        let pages = carve_pages(vec![a.clone(), b.clone()]);
        let lens: Vec<usize> = pages.iter().map(Bytes::len).collect();
        assert_eq!(lens, [vec![PAGE_SIZE; 8], vec![100]].concat());
        assert_eq!(pages[0].as_ptr(), a.as_ptr(), "no copy");
        assert_eq!(pages[7].as_ptr(), b.as_ptr(), "no copy");
        // Replies smaller than a page (a tiny msize): joined, bytes in order.
        let small: Vec<Bytes> = (0..5).map(|i| bytes(40_000, i)).collect();
        let pages = carve_pages(small.clone());
        let joined: Vec<u8> = pages.iter().flat_map(|p| p.iter().copied()).collect();
        let expected: Vec<u8> = small.iter().flat_map(|p| p.iter().copied()).collect();
        assert_eq!(joined, expected);
        let lens: Vec<usize> = pages.iter().map(Bytes::len).collect();
        assert_eq!(
            lens,
            [PAGE_SIZE, PAGE_SIZE, PAGE_SIZE, 200_000 - 3 * PAGE_SIZE]
        );
        assert!(carve_pages(Vec::new()).is_empty());
    }
}
