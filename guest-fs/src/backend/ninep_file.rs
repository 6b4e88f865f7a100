//! An open file on a 9p mount: readahead (FILE) and write-back (WRITEBACK).
//!
//! Readahead: reads that continue where the last one ended fetch more than asked, the
//! extra doubling up to [`MAX_READAHEAD`], as several msize requests in flight; reads
//! inside the fetched window are served without an RPC.
//!
//! Write-back: writes are buffered in a [`WriteBuffer`] and go out in msize pieces once a
//! piece is full, when the buffer passes [`WRITEBACK_LIMIT`], and on flush (close) and
//! fsync. An error a buffered write meets is kept and returned by the next flush or
//! fsync: it is never lost silently. A read through the same file flushes first, so
//! it sees what was written. Append-mode files are never buffered (only the server
//! knows where the end is).

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use wasm9p_proto::consts::{open, IOHDRSZ};
use wasm9p_proto::{Errno, Qid};

use super::{BoxFuture, OpenFile, OpenFlags};
use crate::cache::MountCache;
use crate::client::Fid;
use crate::mount_options::CacheMode;
use crate::writeback::WriteBuffer;

/// Most bytes read ahead of a sequential reader (2 MiB).
pub const MAX_READAHEAD: usize = 2 << 20;
/// Most bytes one open file buffers before writing everything out (8 MiB).
pub const WRITEBACK_LIMIT: usize = 8 << 20;

#[derive(Debug, Default)]
struct Window {
    start: u64,
    data: Bytes,
    /// Where a sequential reader's next read starts.
    next: u64,
    /// Bytes read ahead last time.
    ahead: usize,
    /// The window reaches the end of the file.
    eof: bool,
}

#[derive(Debug)]
struct WriteState {
    buffer: WriteBuffer,
    /// The first error a buffered write met, for the next flush to report.
    error: Option<Errno>,
}

pub(crate) struct NinepFile {
    fid: Arc<Fid>,
    qid: Qid,
    flags: OpenFlags,
    chunk: usize,
    cache: Arc<MountCache>,
    readahead: bool,
    window: Mutex<Window>,
    writeback: Option<tokio::sync::Mutex<WriteState>>,
}

impl NinepFile {
    pub(crate) async fn open(
        fid: Fid,
        qid: Qid,
        flags: OpenFlags,
        mode: CacheMode,
        cache: Arc<MountCache>,
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
        fid.lopen(p9).await?;
        let chunk = (fid.session().msize() - IOHDRSZ) as usize;
        let buffered = mode.has(CacheMode::WRITEBACK) && flags.write && !flags.append;
        Ok(NinepFile {
            fid: Arc::new(fid),
            qid,
            flags,
            chunk,
            cache,
            readahead: mode.has(CacheMode::FILE),
            window: Mutex::new(Window::default()),
            writeback: buffered.then(|| {
                tokio::sync::Mutex::new(WriteState {
                    buffer: WriteBuffer::new(chunk, WRITEBACK_LIMIT),
                    error: None,
                })
            }),
        })
    }

    fn window(&self) -> std::sync::MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(|e| e.into_inner())
    }

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

    async fn flush_buffer(&self) -> Result<(), Errno> {
        let Some(state) = &self.writeback else {
            return Ok(());
        };
        let mut state = state.lock().await;
        let pieces = state.buffer.drain();
        let sent = self.send(pieces).await;
        match state.error.take() {
            Some(earlier) => Err(earlier),
            None => sent,
        }
    }

    async fn read_uncached(&self, offset: u64, len: usize) -> Result<Bytes, Errno> {
        self.cache.count_page(false);
        self.fid.read_at(offset, len).await
    }
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
            if !self.readahead {
                return self.read_uncached(offset, len).await;
            }
            let ahead = {
                let mut w = self.window();
                let end = w.start + w.data.len() as u64;
                if offset >= w.start && (offset + len as u64 <= end || (w.eof && offset <= end)) {
                    let from = (offset - w.start) as usize;
                    let to = (from + len).min(w.data.len());
                    w.next = offset + (to - from) as u64;
                    self.cache.count_page(true);
                    return Ok(w.data.slice(from..to));
                }
                if offset == w.next {
                    (w.ahead * 2).clamp(self.chunk, MAX_READAHEAD)
                } else {
                    0
                }
            };
            let want = len + ahead;
            let data = self.read_uncached(offset, want).await?;
            let mut w = self.window();
            let served = len.min(data.len());
            *w = Window {
                start: offset,
                next: offset + served as u64,
                ahead,
                eof: data.len() < want,
                data: data.clone(),
            };
            Ok(data.slice(..served))
        })
    }

    fn write_at<'a>(&'a self, offset: u64, data: Bytes) -> BoxFuture<'a, Result<usize, Errno>> {
        Box::pin(async move {
            if !self.flags.write {
                return Err(Errno::EBADF);
            }
            let len = data.len();
            *self.window() = Window::default();
            self.cache.forget_attr(self.qid.path);
            match &self.writeback {
                Some(state) => {
                    let mut state = state.lock().await;
                    state.buffer.write(offset, &data);
                    let ready = state.buffer.take_ready();
                    if let Err(e) = self.send(ready).await {
                        state.error.get_or_insert(e);
                    }
                }
                None => self.fid.write_all_at(offset, data).await?,
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
            self.fid.fsync(datasync).await
        })
    }

    fn size<'a>(&'a self) -> BoxFuture<'a, Result<u64, Errno>> {
        Box::pin(async move {
            let on_server = self.fid.getattr().await?.size;
            let buffered = match &self.writeback {
                Some(state) => state.lock().await.buffer.end().unwrap_or(0),
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
        let Some(state) = self.writeback.as_mut() else {
            return;
        };
        let pieces = state.get_mut().buffer.drain();
        if pieces.is_empty() {
            return;
        }
        let fid = self.fid.clone();
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
