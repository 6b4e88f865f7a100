//! The streams of `wasi:filesystem@0.3.0`: a file's bytes read into a `stream<u8>`, a
//! `stream<u8>` written into a file, and a directory's listing as a
//! `stream<directory-entry>`. Each reports how it ended on a oneshot channel, which
//! becomes the `future<result<_, error-code>>` the guest awaits.
//!
//! A file operation is polled with the stream's own waker: a page-cache hit (or a
//! write the write-back buffer takes) completes in the same poll, and bytes go straight
//! into the guest's buffer; a miss returns `Pending` and wakes the guest's read or
//! write when the server answers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use tokio::sync::oneshot;
use wasm9p_guest_fs::backend::{Entry, OpenFile};
use wasm9p_guest_fs::namespace::Namespace;
use wasm9p_proto::Errno;
use wasmtime::component::{
    Destination, Source, StreamConsumer, StreamProducer, StreamResult, VecBuffer,
};
use wasmtime::StoreContextMut;

use super::bindings::wasi::filesystem::types::{DirectoryEntry, ErrorCode};
use super::codes::{descriptor_type, error_code};
use crate::p2::Descriptor;

/// Most bytes one read asks the file for.
const MAX_READ: usize = 1 << 20;
/// What a read asks for when the reader is the host (which gives no size).
const HOST_READ: usize = 64 << 10;
/// Most bytes one write hands the file.
const MAX_WRITE: usize = 1 << 20;
/// Most entries a listing hands over in one read when the reader gives no size.
const HOST_ENTRIES: usize = 64;

type Pending<T, E = Errno> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

/// How a stream ended, for its future.
type Outcome = oneshot::Sender<Result<(), ErrorCode>>;

fn code(e: Errno) -> ErrorCode {
    error_code(crate::p2::errors::error_code(e))
}

/// Sends how the stream ended, once.
fn finish(outcome: &mut Option<Outcome>, result: Result<(), ErrorCode>) {
    if let Some(tx) = outcome.take() {
        let _ = tx.send(result);
    }
}

/// `read-via-stream`: a file's bytes from an offset to its end.
pub(super) struct Reader {
    file: Arc<dyn OpenFile>,
    pos: u64,
    /// A read waiting for the server.
    pending: Option<Pending<Bytes>>,
    /// Bytes a read brought that did not fit the reader's buffer.
    carry: Bytes,
    outcome: Option<Outcome>,
}

impl Reader {
    pub(super) fn new(file: Arc<dyn OpenFile>, pos: u64, outcome: Outcome) -> Reader {
        Reader {
            file,
            pos,
            pending: None,
            carry: Bytes::new(),
            outcome: Some(outcome),
        }
    }
}

impl<D> StreamProducer<D> for Reader {
    type Item = u8;
    type Buffer = VecBuffer<u8>;

    fn poll_produce<'a>(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut store: StoreContextMut<'a, D>,
        dst: Destination<'a, Self::Item, Self::Buffer>,
        finishing: bool,
    ) -> Poll<wasmtime::Result<StreamResult>> {
        let want = dst.remaining(&mut store);
        if want == Some(0) {
            // A readiness probe: a read is always worth trying.
            return Poll::Ready(Ok(StreamResult::Completed));
        }
        let me = &mut *self;
        if me.carry.is_empty() {
            let size = want.unwrap_or(HOST_READ).min(MAX_READ);
            let read = me.pending.get_or_insert_with(|| {
                let (file, pos) = (me.file.clone(), me.pos);
                Box::pin(async move { file.read_at(pos, size).await })
            });
            let result = match read.as_mut().poll(cx) {
                Poll::Pending if finishing => {
                    // The read is abandoned; nothing of it reached the guest.
                    me.pending = None;
                    return Poll::Ready(Ok(StreamResult::Cancelled));
                }
                other => ready!(other),
            };
            me.pending = None;
            match result {
                Ok(data) if data.is_empty() => {
                    finish(&mut me.outcome, Ok(()));
                    return Poll::Ready(Ok(StreamResult::Dropped));
                }
                Ok(data) => {
                    me.pos += data.len() as u64;
                    me.carry = data;
                }
                Err(e) => {
                    finish(&mut me.outcome, Err(code(e)));
                    return Poll::Ready(Ok(StreamResult::Dropped));
                }
            }
        }
        let mut direct = dst.as_direct(store, me.carry.len());
        let room = direct.remaining();
        let n = room.len().min(me.carry.len());
        room[..n].copy_from_slice(&me.carry[..n]);
        direct.mark_written(n);
        let _ = me.carry.split_to(n);
        Poll::Ready(Ok(StreamResult::Completed))
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        finish(&mut self.outcome, Ok(()));
    }
}

/// `write-via-stream` (from an offset on) and `append-via-stream` (each write at the
/// file's end).
pub(super) struct Writer {
    file: Arc<dyn OpenFile>,
    /// Where the next write goes; `None` appends.
    pos: Option<u64>,
    /// A write the file has not taken yet, and how many bytes it carries.
    pending: Option<(Pending<()>, usize)>,
    outcome: Option<Outcome>,
}

impl Writer {
    pub(super) fn new(file: Arc<dyn OpenFile>, pos: Option<u64>, outcome: Outcome) -> Writer {
        Writer {
            file,
            pos,
            pending: None,
            outcome: Some(outcome),
        }
    }

    /// The whole of `data` written at `pos` (or at the end), short writes resumed.
    fn write(&self, data: Bytes) -> Pending<()> {
        let (file, pos) = (self.file.clone(), self.pos);
        Box::pin(async move {
            let mut at = match pos {
                Some(at) => at,
                None => file.size().await?,
            };
            let mut rest = data;
            while !rest.is_empty() {
                let n = file.write_at(at, rest.clone()).await?;
                if n == 0 {
                    return Err(Errno::EIO);
                }
                at += n as u64;
                let _ = rest.split_to(n.min(rest.len()));
            }
            Ok(())
        })
    }
}

impl<D> StreamConsumer<D> for Writer {
    type Item = u8;

    fn poll_consume(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        store: StoreContextMut<D>,
        src: Source<'_, Self::Item>,
        _finishing: bool,
    ) -> Poll<wasmtime::Result<StreamResult>> {
        let me = &mut *self;
        if me.pending.is_none() {
            let mut direct = src.as_direct(store);
            let data = direct.remaining();
            if data.is_empty() {
                return Poll::Ready(Ok(StreamResult::Completed));
            }
            let n = data.len().min(MAX_WRITE);
            let bytes = Bytes::copy_from_slice(&data[..n]);
            // The bytes are ours now: the guest's write completes when the file took
            // them (a cancelled write still finishes, as there is no telling the guest
            // how much of it reached the file).
            direct.mark_read(n);
            me.pending = Some((me.write(bytes), n));
        }
        let (write, n) = me.pending.as_mut().expect("a write is pending");
        let n = *n;
        let result = ready!(write.as_mut().poll(cx));
        me.pending = None;
        match result {
            Ok(()) => {
                if let Some(p) = &mut me.pos {
                    *p += n as u64;
                }
                Poll::Ready(Ok(StreamResult::Completed))
            }
            Err(e) => {
                finish(&mut me.outcome, Err(code(e)));
                Poll::Ready(Ok(StreamResult::Dropped))
            }
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        finish(&mut self.outcome, Ok(()));
    }
}

/// `read-directory`: the listing, read from the namespace at the first read (a cache
/// hit for a directory listed before), then handed out as the reader asks.
pub(super) struct Listing {
    ns: Arc<Namespace>,
    dir: Descriptor,
    loading: Option<Pending<Vec<Entry>, ErrorCode>>,
    entries: Option<std::vec::IntoIter<Entry>>,
    outcome: Option<Outcome>,
}

impl Listing {
    pub(super) fn new(ns: Arc<Namespace>, dir: Descriptor, outcome: Outcome) -> Listing {
        Listing {
            ns,
            dir,
            loading: None,
            entries: None,
            outcome: Some(outcome),
        }
    }
}

impl<D> StreamProducer<D> for Listing {
    type Item = DirectoryEntry;
    type Buffer = VecBuffer<DirectoryEntry>;

    fn poll_produce<'a>(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut store: StoreContextMut<'a, D>,
        mut dst: Destination<'a, Self::Item, Self::Buffer>,
        finishing: bool,
    ) -> Poll<wasmtime::Result<StreamResult>> {
        let want = dst.remaining(&mut store);
        if want == Some(0) {
            return Poll::Ready(Ok(StreamResult::Completed));
        }
        let me = &mut *self;
        if me.entries.is_none() {
            let load = me.loading.get_or_insert_with(|| {
                let (ns, dir) = (me.ns.clone(), me.dir.clone());
                Box::pin(async move {
                    dir.list(&ns)
                        .await
                        .map_err(|e| error_code(e.downcast().unwrap_or(crate::p2::ErrorCode::Io)))
                })
            });
            let result = match load.as_mut().poll(cx) {
                // The load is kept: a later read finds it done.
                Poll::Pending if finishing => return Poll::Ready(Ok(StreamResult::Cancelled)),
                other => ready!(other),
            };
            me.loading = None;
            match result {
                Ok(entries) => me.entries = Some(entries.into_iter()),
                Err(e) => {
                    finish(&mut me.outcome, Err(e));
                    return Poll::Ready(Ok(StreamResult::Dropped));
                }
            }
        }
        let entries = me.entries.as_mut().expect("the listing is loaded");
        let batch: Vec<DirectoryEntry> = entries
            .by_ref()
            .take(want.unwrap_or(HOST_ENTRIES))
            .map(|e| DirectoryEntry {
                type_: descriptor_type(e.kind),
                name: e.name,
            })
            .collect();
        let done = entries.len() == 0;
        dst.set_buffer(batch.into());
        if done {
            finish(&mut me.outcome, Ok(()));
            Poll::Ready(Ok(StreamResult::Dropped))
        } else {
            Poll::Ready(Ok(StreamResult::Completed))
        }
    }
}

impl Drop for Listing {
    fn drop(&mut self) {
        finish(&mut self.outcome, Ok(()));
    }
}
