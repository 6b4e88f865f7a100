//! One connection: a reader that decodes frames and starts a task per request, and a
//! writer that batches replies onto the socket, both on the async workers, or on the
//! tenant's I/O thread for a tenant's connection (`crate::io_thread`). A tenant's data
//! requests run on the data threads instead, in the tenant's turn (`crate::scheduler`).
//!
//! Rules kept here: Tversion comes first and resets the session; a body that fails to
//! decode gets Rlerror for its tag and the connection goes on; a frame whose length is
//! wrong or over msize closes this connection only (one log line); at most
//! [`MAX_INFLIGHT_PER_CONNECTION`] requests run at once (the reader stops reading
//! beyond that); Rflush for a tag is sent only after that tag's reply, if any.
//! Metadata requests run on the reader, each done before the next frame is read, so
//! every request sees what the metadata requests before it did: the promise a client
//! learns from `ORDERED_XATTR` and pipelines on (a Tlopen behind the Twalk that binds
//! its fid).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, WriteHalf};
use tokio::sync::Mutex as AsyncMutex;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use wasm9p_proto::consts::{MIN_MSIZE, VERSION_9P2000_L, VERSION_UNKNOWN};
use wasm9p_proto::transport::{write_segments, BoxStream, Peer};
use wasm9p_proto::{
    encode_frame, encode_frame_head, DecodeError, Errno, Frame, FrameDecoder, Message, Rflush,
    Rlerror, Rversion,
};

use crate::connection::Connection;
use crate::shared::{Shared, MAX_INFLIGHT_PER_CONNECTION};
use crate::tenants::Membership;

/// A request's places in flight: its connection's, and its tenant's when it has one.
pub(crate) struct Permit {
    _own: OwnedSemaphorePermit,
    _tenant: Option<OwnedSemaphorePermit>,
}

enum Reply {
    /// A reply to encode.
    Message {
        tag: u16,
        msg: Message,
        _permit: Option<Permit>,
    },
    /// Frames the reader had already encoded, handed over to keep their order.
    Encoded(Bytes),
}

type ReplySender = mpsc::UnboundedSender<Reply>;
type SharedWriter = Arc<AsyncMutex<WriteHalf<BoxStream>>>;

/// Where replies go. Replies produced on the reader task are encoded into `inline` and
/// written in one batch when the reader runs out of complete frames; replies of
/// requests running as their own tasks go through `tx` to the writer task.
struct Outbox<'a> {
    tx: &'a ReplySender,
    inline: &'a mut BytesMut,
}

impl Outbox<'_> {
    fn now(&mut self, tag: u16, msg: Message) {
        encode_frame(tag, &msg, self.inline);
    }
}

fn error_reply(errno: Errno) -> Message {
    Rlerror { ecode: errno.0 }.into()
}

/// Serves one connection of `who`, a member of `member`'s tenant if it has one (kept
/// until the connection's end).
pub(crate) async fn run(
    shared: Arc<Shared>,
    stream: BoxStream,
    who: Peer,
    member: Option<Membership>,
) {
    let peer = who.name.clone();
    let tenant = member.as_ref().map(|m| m.0.clone());
    let (mut reader, writer) = tokio::io::split(stream);
    let writer: SharedWriter = Arc::new(AsyncMutex::new(writer));
    let (tx, rx) = mpsc::unbounded_channel();
    let writer_task = tokio::spawn(write_loop(writer.clone(), rx));
    let mut inline = BytesMut::with_capacity(64 * 1024);
    let session = Arc::new(Connection::new(shared.clone(), who, tenant.clone()));
    let permits = Arc::new(Semaphore::new(MAX_INFLIGHT_PER_CONNECTION));
    let mut decoder = FrameDecoder::new(shared.msize);
    let mut buf = BytesMut::with_capacity(64 * 1024);
    tracing::debug!("{peer}: connected");
    'conn: loop {
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => {
                    let Ok(own) = permits.clone().acquire_owned().await else {
                        break 'conn;
                    };
                    // The tenant's share, which all its connections draw on.
                    let shared_permit = match &tenant {
                        Some(t) => match t.requests.clone().acquire_owned().await {
                            Ok(p) => Some(p),
                            Err(_) => break 'conn,
                        },
                        None => None,
                    };
                    let permit = Permit {
                        _own: own,
                        _tenant: shared_permit,
                    };
                    let mut out = Outbox {
                        tx: &tx,
                        inline: &mut inline,
                    };
                    handle_frame(&session, &mut decoder, &mut out, frame, permit);
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("{peer}: {e}; closing the connection");
                    break 'conn;
                }
            }
        }
        if !inline.is_empty() {
            let mut w = writer.lock().await;
            if w.write_all(&inline).await.is_err() || w.flush().await.is_err() {
                break;
            }
            inline.clear();
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
    if !inline.is_empty() {
        let _ = writer.lock().await.write_all(&inline).await;
    }
    drop(tx);
    // Pending requests finish and their replies are written (or dropped if the peer is
    // gone); then every fid of the connection is released.
    let _ = writer_task.await;
    let _ = writer.lock().await.shutdown().await;
    session.fids.clear();
    tracing::debug!("{peer}: closed");
}

fn handle_frame(
    session: &Arc<Connection>,
    decoder: &mut FrameDecoder,
    out: &mut Outbox<'_>,
    frame: Frame,
    permit: Permit,
) {
    let Frame { tag, ty, body } = frame;
    session.follow_rules();
    let msg = match body {
        Ok(msg) if msg.is_request() => msg,
        Ok(_) => return out.now(tag, error_reply(Errno::EINVAL)),
        Err(DecodeError::UnknownType(_)) => return out.now(tag, error_reply(Errno::EOPNOTSUPP)),
        Err(e) => {
            let name = Message::type_name(ty).unwrap_or("?");
            tracing::debug!("tag {tag}: undecodable {name} body: {e}");
            return out.now(tag, error_reply(Errno::EINVAL));
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
                let msize = t.msize.min(session.shared.msize);
                Rversion {
                    msize,
                    version: VERSION_UNKNOWN.into(),
                }
                .into()
            };
            out.now(tag, reply)
        }
        _ if !session.versioned.load(Ordering::Acquire) => out.now(tag, error_reply(Errno::EPROTO)),
        Message::Tflush(flush) => match session.inflight_lock().get(&flush.oldtag).cloned() {
            // Nothing running under that tag. Its reply, if any, is either among the
            // reader's own encoded replies or already in the writer's queue (a task
            // queues its reply before it stops counting as running). Hand the reader's
            // replies to the queue too, then Rflush behind them: it can overtake neither.
            None => {
                if !out.inline.is_empty() {
                    let _ = out.tx.send(Reply::Encoded(out.inline.split().freeze()));
                }
                send(out.tx, tag, Rflush {}.into(), permit)
            }
            // Running as a task: its reply goes through the writer task, so Rflush
            // follows it there once it is queued.
            Some(mut done) => {
                let tx = out.tx.clone();
                tokio::spawn(async move {
                    let _ = done.wait_for(|finished| *finished).await;
                    send(&tx, tag, Rflush {}.into(), permit);
                });
            }
        },
        msg if runs_inline(&msg) => {
            // Metadata operations are a syscall or two: running them here saves two task
            // hops per request, which is most of a round trip on loopback. Their reply is
            // queued before the next frame is read, so a later Tflush finds them done.
            let reply = crate::ops::handle(session, msg).unwrap_or_else(error_reply);
            out.now(tag, reply)
        }
        msg => {
            let (done_tx, done_rx) = watch::channel(false);
            session.inflight_lock().insert(tag, done_rx);
            let tenant = session.tenant.as_ref().map(|t| Arc::as_ptr(t) as usize);
            let wait = rate_wait(session, &msg);
            let session = session.clone();
            let tx = out.tx.clone();
            let job = move || {
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
            };
            let run = move || match tenant {
                Some(tenant) => crate::scheduler::submit(tenant, Box::new(job)),
                None => drop(tokio::spawn(async move { job() })),
            };
            match wait {
                // Over its export's byte rate: it runs when the rate has paid for it.
                Some(wait) if !wait.is_zero() => drop(tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    run();
                })),
                _ => run(),
            }
        }
    }
}

/// How long a read or write must wait for its export's byte-rate cap (`None`: its
/// export has none, or it moves no bytes).
fn rate_wait(session: &Connection, msg: &Message) -> Option<std::time::Duration> {
    if !session.shared.capped() {
        return None;
    }
    let (fid, bytes) = match msg {
        Message::Tread(t) => (t.fid, u64::from(t.count)),
        Message::Twrite(t) => (t.fid, t.data.0.len() as u64),
        _ => return None,
    };
    let fid = session.fids.get(fid).ok()?;
    let bucket = session.shared.bucket(&fid.export)?;
    Some(bucket.take(bytes, std::time::Instant::now()))
}

/// Whether a request is cheap enough to run on the connection's reader task. Data
/// transfers, fsync and directory listings may take long (a cold disk, a huge
/// directory) and run as their own tasks, so they overlap and can be flushed.
fn runs_inline(msg: &Message) -> bool {
    !matches!(
        msg,
        Message::Tread(_) | Message::Twrite(_) | Message::Tfsync(_) | Message::Treaddir(_)
    )
}

fn send(tx: &ReplySender, tag: u16, msg: Message, permit: Permit) {
    // A send error means the writer is gone with the connection; nothing to tell.
    let _ = tx.send(Reply::Message {
        tag,
        msg,
        _permit: Some(permit),
    });
}

async fn write_loop(writer: SharedWriter, mut rx: mpsc::UnboundedReceiver<Reply>) {
    let mut head = BytesMut::with_capacity(64 * 1024);
    let mut segments: Vec<Bytes> = Vec::new();
    while let Some(first) = rx.recv().await {
        // Batch whatever else is ready into the same (vectored) write; read and readdir
        // payloads go out from their own buffers, uncopied.
        let mut batched = 0;
        let mut next = Some(first);
        while let Some(reply) = next.take() {
            match &reply {
                Reply::Message { tag, msg, .. } => {
                    if let Some(payload) = encode_frame_head(*tag, msg, &mut head) {
                        batched += payload.len();
                        segments.push(head.split().freeze());
                        segments.push(payload);
                    }
                }
                Reply::Encoded(frames) => {
                    batched += frames.len();
                    head.extend_from_slice(frames);
                }
            }
            drop(reply);
            if batched + head.len() < 1024 * 1024 {
                next = rx.try_recv().ok();
            }
        }
        if !head.is_empty() {
            segments.push(head.split().freeze());
        }
        let mut w = writer.lock().await;
        if write_segments(&mut *w, &mut segments).await.is_err() {
            drop(w);
            // The peer is gone: keep draining so request tasks are not blocked.
            while rx.recv().await.is_some() {}
            return;
        }
    }
}
