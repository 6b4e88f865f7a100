//! `input-stream` and `output-stream` over an open guest-fs file (what
//! `read-via-stream`, `write-via-stream` and `append-via-stream` return, and what the
//! preview1 adapter reads and writes files through).
//!
//! The non-blocking calls poll the file operation once: a page-cache hit or a write
//! into the write-back buffer completes then and there. An operation that has to wait
//! for the server is kept and finished by `ready` (the blocking calls await it).
//! Errors reach the guest as `last-operation-failed` carrying an `io::Error` with the
//! Linux errno, which `filesystem-error-code` turns into a code.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use wasm9p_guest_fs::backend::OpenFile;
use wasm9p_proto::Errno;
use wasmtime_wasi::p2::{InputStream, OutputStream, Pollable, StreamError, StreamResult};

/// Most bytes one read asks the file for.
const MAX_READ: usize = 1 << 20;
/// Most bytes a writer accepts at once.
const MAX_WRITE: usize = 1 << 20;

type Pending<T> = Pin<Box<dyn Future<Output = Result<T, Errno>> + Send>>;

fn poll_once<T>(f: &mut Pending<T>) -> Poll<Result<T, Errno>> {
    f.as_mut().poll(&mut Context::from_waker(Waker::noop()))
}

fn failed(e: Errno) -> StreamError {
    StreamError::LastOperationFailed(std::io::Error::from_raw_os_error(e.0 as i32).into())
}

/// Reads a file from an offset on.
pub(crate) struct FileReader {
    file: Arc<dyn OpenFile>,
    pos: u64,
    /// A read that did not finish at once, and for how many bytes.
    pending: Option<Pending<Bytes>>,
    /// What a finished read brought that nobody took yet.
    ready: Option<Result<Bytes, Errno>>,
}

impl FileReader {
    pub(crate) fn new(file: Arc<dyn OpenFile>, pos: u64) -> FileReader {
        FileReader {
            file,
            pos,
            pending: None,
            ready: None,
        }
    }

    fn start(&self, size: usize) -> Pending<Bytes> {
        let (file, pos) = (self.file.clone(), self.pos);
        Box::pin(async move { file.read_at(pos, size.min(MAX_READ)).await })
    }

    /// Hands out (at most `size` of) what was read, advancing the position.
    fn take(&mut self, result: Result<Bytes, Errno>, size: usize) -> StreamResult<Bytes> {
        let mut data = result.map_err(failed)?;
        if data.is_empty() && size > 0 {
            return Err(StreamError::Closed);
        }
        if data.len() > size {
            self.ready = Some(Ok(data.split_off(size)));
        }
        self.pos += data.len() as u64;
        Ok(data)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for FileReader {
    async fn ready(&mut self) {
        if self.ready.is_some() {
            return;
        }
        let mut read = match self.pending.take() {
            Some(read) => read,
            None => self.start(64 * 1024),
        };
        self.ready = Some((&mut read).await);
    }
}

#[wasmtime_wasi::async_trait]
impl InputStream for FileReader {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        if let Some(result) = self.ready.take() {
            return self.take(result, size);
        }
        if size == 0 {
            return Ok(Bytes::new());
        }
        let mut read = match self.pending.take() {
            Some(read) => read,
            None => self.start(size),
        };
        match poll_once(&mut read) {
            Poll::Ready(result) => self.take(result, size),
            Poll::Pending => {
                self.pending = Some(read);
                Ok(Bytes::new())
            }
        }
    }

    async fn blocking_read(&mut self, size: usize) -> StreamResult<Bytes> {
        if let Some(result) = self.ready.take() {
            return self.take(result, size);
        }
        let read = match self.pending.take() {
            Some(read) => read,
            None => self.start(size),
        };
        let result = read.await;
        self.take(result, size)
    }
}

/// Writes a file from an offset on, or always at its end (append).
pub(crate) struct FileWriter {
    file: Arc<dyn OpenFile>,
    /// Where the next write goes; `None` appends.
    pos: Option<u64>,
    /// A write that did not finish at once.
    pending: Option<Pending<()>>,
    /// The error a finished write met, for the next call to report.
    error: Option<Errno>,
}

impl FileWriter {
    pub(crate) fn at(file: Arc<dyn OpenFile>, pos: u64) -> FileWriter {
        FileWriter {
            file,
            pos: Some(pos),
            pending: None,
            error: None,
        }
    }

    pub(crate) fn appending(file: Arc<dyn OpenFile>) -> FileWriter {
        FileWriter {
            file,
            pos: None,
            pending: None,
            error: None,
        }
    }

    /// Polls the pending write once; whether it is done.
    fn settle(&mut self) -> bool {
        if let Some(write) = &mut self.pending {
            match poll_once(write) {
                Poll::Ready(result) => {
                    self.pending = None;
                    if let Err(e) = result {
                        self.error.get_or_insert(e);
                    }
                }
                Poll::Pending => return false,
            }
        }
        true
    }

    fn report(&mut self) -> StreamResult<()> {
        match self.error.take() {
            Some(e) => Err(failed(e)),
            None => Ok(()),
        }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for FileWriter {
    async fn ready(&mut self) {
        if let Some(write) = self.pending.take() {
            if let Err(e) = write.await {
                self.error.get_or_insert(e);
            }
        }
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for FileWriter {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        if !self.settle() {
            return Err(StreamError::trap(
                "write without permission from check-write",
            ));
        }
        self.report()?;
        if bytes.len() > MAX_WRITE {
            return Err(StreamError::trap("write larger than check-write allowed"));
        }
        let file = self.file.clone();
        let pos = self.pos;
        if let Some(p) = &mut self.pos {
            *p += bytes.len() as u64;
        }
        let mut write: Pending<()> = Box::pin(async move {
            let at = match pos {
                Some(at) => at,
                None => file.size().await?,
            };
            file.write_at(at, bytes).await.map(drop)
        });
        match poll_once(&mut write) {
            Poll::Ready(Ok(())) => Ok(()),
            Poll::Ready(Err(e)) => Err(failed(e)),
            Poll::Pending => {
                self.pending = Some(write);
                Ok(())
            }
        }
    }

    fn flush(&mut self) -> StreamResult<()> {
        // Writes reach the file (its write-back buffer, or the server) as they finish;
        // `ready` waits for the last one.
        self.settle();
        self.report()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        if !self.settle() {
            return Ok(0);
        }
        self.report()?;
        Ok(MAX_WRITE)
    }
}
