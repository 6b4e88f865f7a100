//! One connection: a reader that decodes frames and starts a task per request, and a
//! writer that batches replies onto the socket.
//!
//! Rules kept here: Tversion comes first and resets the session; a body that fails to
//! decode gets Rlerror for its tag and the connection goes on; a frame whose length is
//! wrong or over msize closes this connection only (one log line); at most
//! [`MAX_INFLIGHT_PER_CONNECTION`] requests run at once (the reader stops reading
//! beyond that); Rflush for a tag is sent only after that tag's reply, if any.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt, WriteHalf};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use wasm9p_proto::consts::{MIN_MSIZE, VERSION_9P2000_L, VERSION_UNKNOWN};
use wasm9p_proto::transport::BoxStream;
use wasm9p_proto::{
    encode_frame, DecodeError, Errno, Frame, FrameDecoder, Message, Rflush, Rlerror, Rversion,
};

use crate::fid::FidTable;
use crate::{Shared, MAX_INFLIGHT_PER_CONNECTION};

/// Per-connection state shared by the request tasks.
#[derive(Debug)]
pub(crate) struct Session {
    pub shared: Arc<Shared>,
    pub fids: FidTable,
    pub msize: AtomicU32,
    versioned: AtomicBool,
    inflight: Mutex<HashMap<u16, watch::Receiver<bool>>>,
}

struct Reply {
    tag: u16,
    msg: Message,
    _permit: Option<OwnedSemaphorePermit>,
}

type ReplySender = mpsc::UnboundedSender<Reply>;

fn error_reply(errno: Errno) -> Message {
    Rlerror { ecode: errno.0 }.into()
}

pub(crate) async fn run(shared: Arc<Shared>, stream: BoxStream, peer: String) {
    let (mut reader, writer) = tokio::io::split(stream);
    let (tx, rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_loop(writer, rx));
    let session = Arc::new(Session {
        msize: AtomicU32::new(shared.msize),
        shared: shared.clone(),
        fids: FidTable::default(),
        versioned: AtomicBool::new(false),
        inflight: Mutex::new(HashMap::new()),
    });
    let permits = Arc::new(Semaphore::new(MAX_INFLIGHT_PER_CONNECTION));
    let mut decoder = FrameDecoder::new(shared.msize);
    let mut buf = BytesMut::with_capacity(64 * 1024);
    tracing::debug!("{peer}: connected");
    'conn: loop {
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => {
                    let permit = match permits.clone().acquire_owned().await {
                        Ok(permit) => permit,
                        Err(_) => break 'conn,
                    };
                    handle_frame(&session, &mut decoder, &tx, frame, permit);
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("{peer}: {e}; closing the connection");
                    break 'conn;
                }
            }
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(64 * 1024);
        }
        match reader.read_buf(&mut buf).await {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                tracing::debug!("{peer}: read: {e}");
                break;
            }
        }
    }
    drop(tx);
    // Pending requests finish and their replies are written (or dropped if the peer is
    // gone); then every fid of the connection is released.
    let _ = writer.await;
    session.fids.clear();
    tracing::debug!("{peer}: closed");
}

fn handle_frame(
    session: &Arc<Session>,
    decoder: &mut FrameDecoder,
    tx: &ReplySender,
    frame: Frame,
    permit: OwnedSemaphorePermit,
) {
    let Frame { tag, ty, body } = frame;
    let msg = match body {
        Ok(msg) if msg.is_request() => msg,
        Ok(_) => return send(tx, tag, error_reply(Errno::EINVAL), permit),
        Err(DecodeError::UnknownType(_)) => {
            return send(tx, tag, error_reply(Errno::EOPNOTSUPP), permit)
        }
        Err(e) => {
            tracing::debug!(
                "tag {tag}: undecodable {} body: {e}",
                Message::type_name(ty).unwrap_or("?")
            );
            return send(tx, tag, error_reply(Errno::EINVAL), permit);
        }
    };
    match msg {
        Message::Tversion(t) => {
            // A new version aborts the session: every fid goes.
            session.fids.clear();
            let reply = if t.msize < MIN_MSIZE {
                error_reply(Errno::EINVAL)
            } else if t.version.starts_with(VERSION_9P2000_L) {
                let msize = t.msize.min(session.shared.msize);
                session.msize.store(msize, Ordering::Relaxed);
                decoder.set_max_size(msize);
                session.versioned.store(true, Ordering::Release);
                Rversion {
                    msize,
                    version: VERSION_9P2000_L.into(),
                }
                .into()
            } else {
                session.versioned.store(false, Ordering::Release);
                Rversion {
                    msize: t.msize.min(session.shared.msize),
                    version: VERSION_UNKNOWN.into(),
                }
                .into()
            };
            send(tx, tag, reply, permit)
        }
        _ if !session.versioned.load(Ordering::Acquire) => {
            send(tx, tag, error_reply(Errno::EPROTO), permit)
        }
        Message::Tflush(flush) => {
            let pending = session.inflight_lock().get(&flush.oldtag).cloned();
            let tx = tx.clone();
            tokio::spawn(async move {
                if let Some(mut done) = pending {
                    let _ = done.wait_for(|finished| *finished).await;
                }
                send(&tx, tag, Rflush {}.into(), permit);
            });
        }
        msg => {
            let (done_tx, done_rx) = watch::channel(false);
            session.inflight_lock().insert(tag, done_rx);
            let session = session.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let reply = crate::ops::handle(&session, msg).unwrap_or_else(error_reply);
                send(&tx, tag, reply, permit);
                let mut inflight = session.inflight_lock();
                if inflight
                    .get(&tag)
                    .is_some_and(|rx| rx.same_channel(&done_tx.subscribe()))
                {
                    inflight.remove(&tag);
                }
                drop(inflight);
                let _ = done_tx.send(true);
            });
        }
    }
}

impl Session {
    fn inflight_lock(&self) -> std::sync::MutexGuard<'_, HashMap<u16, watch::Receiver<bool>>> {
        self.inflight.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn msize(&self) -> u32 {
        self.msize.load(Ordering::Relaxed)
    }
}

fn send(tx: &ReplySender, tag: u16, msg: Message, permit: OwnedSemaphorePermit) {
    // A send error means the writer is gone with the connection; nothing to tell.
    let _ = tx.send(Reply {
        tag,
        msg,
        _permit: Some(permit),
    });
}

async fn write_loop(mut writer: WriteHalf<BoxStream>, mut rx: mpsc::UnboundedReceiver<Reply>) {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    while let Some(reply) = rx.recv().await {
        encode_frame(reply.tag, &reply.msg, &mut buf);
        drop(reply);
        // Batch whatever else is ready into the same write.
        while buf.len() < 1024 * 1024 {
            match rx.try_recv() {
                Ok(reply) => encode_frame(reply.tag, &reply.msg, &mut buf),
                Err(_) => break,
            }
        }
        if writer.write_all(&buf).await.is_err() || writer.flush().await.is_err() {
            // The peer is gone: keep draining so request tasks are not blocked.
            while rx.recv().await.is_some() {}
            return;
        }
        buf.clear();
    }
    let _ = writer.shutdown().await;
}
