//! The 9P2000.L shell every export is served through: one connection's frames read,
//! its session rules kept, its requests bounded and flushed, its replies written. What
//! a request does is the export's ([`Served`]): a host directory (`crate::directory`)
//! or a file system of numbered nodes (`crate::nodes::serve`).
//!
//! Rules kept here, for both: Tversion comes first (anything before it is EPROTO; an
//! msize below [`MIN_MSIZE`] is EINVAL; an msize over the server's is lowered to it)
//! and resets the session; a body that fails to decode gets Rlerror EINVAL for its
//! tag, an unknown type EOPNOTSUPP, an R-message EINVAL, and the connection goes on; a
//! frame whose length is wrong or over msize closes this connection only (one log
//! line); at most [`MAX_INFLIGHT_PER_CONNECTION`] requests run at once, counted until
//! their reply is queued for the writer (the reader stops reading beyond that), and a
//! tenant's requests within its own share too; Rflush for a tag is sent only after
//! that tag's reply, if any, and a Tflush is never itself waited for (one naming its
//! own tag would wait for ever).
//!
//! An export answers a request either at once on the reader (its
//! reply is encoded into a batch written when the reader runs out of complete frames,
//! and the next frame is read only after it, so every request sees what the inline
//! requests before it did; [`Served::answer_now`]), or later ([`Served::answer_later`]: the request is known
//! as running, for Tflush, until it hands its reply to [`Later::reply`]). Replies of
//! later requests go through one writer task that batches them into vectored writes,
//! read and readdir payloads from their own buffers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, WriteHalf};
use tokio::sync::Mutex as AsyncMutex;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use wasm9p_proto::consts::{MIN_MSIZE, VERSION_9P2000_L, VERSION_UNKNOWN};
use wasm9p_proto::transport::{write_segments, BoxStream};
use wasm9p_proto::{
    encode_frame, encode_frame_head, DecodeError, Errno, Frame, FrameDecoder, Message, Rflush,
    Rlerror, Rversion,
};

use crate::shared::MAX_INFLIGHT_PER_CONNECTION;

/// What one kind of export does with a connection's requests.
pub(crate) trait Served: Send + Sync + 'static {
    /// A Tversion was answered: every fid goes; `msize` is the msize granted for
    /// 9P2000.L, `None` for a version the server does not speak or a Tversion refused
    /// (the msize stays as it was).
    fn version(&self, msize: Option<u32>);

    /// Before each request (the directory export follows changed access rules here).
    fn before_request(&self) {}

    /// Answers `msg` on the reader, before the next frame is read, when it is cheap
    /// enough; else gives it back to be answered later.
    fn answer_now(&self, msg: Message) -> Now;

    /// Runs `msg` however the export runs its longer requests; its answer goes to
    /// `later`.
    fn answer_later(self: &Arc<Self>, msg: Message, later: Later);

    /// The share of requests in flight the connection's tenant draws on, if it has one.
    fn tenant_requests(&self) -> Option<Arc<Semaphore>> {
        None
    }

    /// The connection is over (its requests are answered or dropped).
    fn closed(&self);
}

/// What [`Served::answer_now`] did with a request.
pub(crate) enum Now {
    /// Answered.
    Answered(Result<Message, Errno>),
    /// Given back, for [`Served::answer_later`].
    Later(Message),
}

/// A request's places in flight: its connection's, and its tenant's when it has one.
struct Permit {
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

/// The requests of a connection answered later, by tag: set to `true` once their reply
/// is queued.
#[derive(Default)]
struct Running(Mutex<HashMap<u16, watch::Receiver<bool>>>);

impl Running {
    fn lock(&self) -> MutexGuard<'_, HashMap<u16, watch::Receiver<bool>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Where a request answered later sends its answer (see [`Served::answer_later`]).
pub(crate) struct Later {
    tag: u16,
    tx: ReplySender,
    permit: Permit,
    done: watch::Sender<bool>,
    running: Arc<Running>,
}

impl Later {
    /// Queues the answer for the writer; the request stops counting as running.
    pub(crate) fn reply(self, answer: Result<Message, Errno>) {
        let Later {
            tag,
            tx,
            permit,
            done,
            running,
        } = self;
        send(&tx, tag, answer.unwrap_or_else(error_reply), permit);
        let mut inflight = running.lock();
        // The tag may have been used again by a request after this one.
        if inflight
            .get(&tag)
            .is_some_and(|rx| rx.same_channel(&done.subscribe()))
        {
            inflight.remove(&tag);
        }
        drop(inflight);
        let _ = done.send(true);
    }
}

/// Where replies go. Replies produced on the reader task are encoded into `inline` and
/// written in one batch when the reader runs out of complete frames; replies of
/// requests answered later go through `tx` to the writer task.
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

/// One connection's session, as the reader keeps it.
struct Session<S> {
    served: Arc<S>,
    /// The largest msize the server grants.
    max_msize: u32,
    /// Whether a Tversion of 9P2000.L was answered (nothing else is served before).
    versioned: bool,
    running: Arc<Running>,
}

/// Serves one connection on `stream` for `served`, whose peer is `peer` (for the log),
/// granting an msize of at most `max_msize`, until the peer goes away or sends a frame
/// that cannot be read.
pub(crate) async fn run<S: Served>(served: Arc<S>, stream: BoxStream, peer: &str, max_msize: u32) {
    let (mut reader, writer) = tokio::io::split(stream);
    let writer: SharedWriter = Arc::new(AsyncMutex::new(writer));
    let (tx, rx) = mpsc::unbounded_channel();
    let writer_task = tokio::spawn(write_loop(writer.clone(), rx));
    let mut inline = BytesMut::with_capacity(64 * 1024);
    let tenant = served.tenant_requests();
    let mut session = Session {
        served: served.clone(),
        max_msize,
        versioned: false,
        running: Arc::default(),
    };
    let permits = Arc::new(Semaphore::new(MAX_INFLIGHT_PER_CONNECTION));
    let mut decoder = FrameDecoder::new(max_msize);
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
                        Some(t) => match t.clone().acquire_owned().await {
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
                    session.frame(&mut decoder, &mut out, frame, permit);
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
    drop(session);
    // Pending requests finish and their replies are written (or dropped if the peer is
    // gone); then every fid of the connection is released.
    let _ = writer_task.await;
    let _ = writer.lock().await.shutdown().await;
    served.closed();
    tracing::debug!("{peer}: closed");
}

impl<S: Served> Session<S> {
    fn frame(
        &mut self,
        decoder: &mut FrameDecoder,
        out: &mut Outbox<'_>,
        frame: Frame,
        permit: Permit,
    ) {
        let Frame { tag, ty, body } = frame;
        self.served.before_request();
        let msg = match body {
            Ok(msg) if msg.is_request() => msg,
            Ok(_) => return out.now(tag, error_reply(Errno::EINVAL)),
            Err(DecodeError::UnknownType(_)) => {
                return out.now(tag, error_reply(Errno::EOPNOTSUPP))
            }
            Err(e) => {
                let name = Message::type_name(ty).unwrap_or("?");
                tracing::debug!("tag {tag}: undecodable {name} body: {e}");
                return out.now(tag, error_reply(Errno::EINVAL));
            }
        };
        match msg {
            Message::Tversion(t) => {
                // A new version aborts the session: every fid goes.
                let reply = if t.msize < MIN_MSIZE {
                    // Refused: the fids go all the same, the version spoken stays.
                    self.served.version(None);
                    error_reply(Errno::EINVAL)
                } else {
                    let msize = t.msize.min(self.max_msize);
                    self.versioned = t.version.starts_with(VERSION_9P2000_L);
                    let version = if self.versioned {
                        decoder.set_max_size(msize);
                        self.served.version(Some(msize));
                        VERSION_9P2000_L
                    } else {
                        self.served.version(None);
                        VERSION_UNKNOWN
                    };
                    Rversion {
                        msize,
                        version: version.into(),
                    }
                    .into()
                };
                out.now(tag, reply)
            }
            _ if !self.versioned => out.now(tag, error_reply(Errno::EPROTO)),
            Message::Tflush(flush) => match self.running.lock().get(&flush.oldtag).cloned() {
                // Nothing running under that tag. Its reply, if any, is either among the
                // reader's own encoded replies or already in the writer's queue (a
                // request queues its reply before it stops counting as running). Hand
                // the reader's replies to the queue too, then Rflush behind them: it can
                // overtake neither.
                None => {
                    if !out.inline.is_empty() {
                        let _ = out.tx.send(Reply::Encoded(out.inline.split().freeze()));
                    }
                    send(out.tx, tag, Rflush {}.into(), permit)
                }
                // Running: its reply goes through the writer task, so Rflush follows it
                // there once it is queued.
                Some(mut done) => {
                    let tx = out.tx.clone();
                    tokio::spawn(async move {
                        let _ = done.wait_for(|finished| *finished).await;
                        send(&tx, tag, Rflush {}.into(), permit);
                    });
                }
            },
            msg => match self.served.answer_now(msg) {
                // Queued before the next frame is read, so a later Tflush finds it done.
                Now::Answered(reply) => out.now(tag, reply.unwrap_or_else(error_reply)),
                Now::Later(msg) => self.later(msg, tag, out, permit),
            },
        }
    }

    /// Starts `msg` as a request answered later, known as running until it replies.
    fn later(&mut self, msg: Message, tag: u16, out: &mut Outbox<'_>, permit: Permit) {
        let (done, done_rx) = watch::channel(false);
        self.running.lock().insert(tag, done_rx);
        let later = Later {
            tag,
            tx: out.tx.clone(),
            permit,
            done,
            running: self.running.clone(),
        };
        self.served.answer_later(msg, later);
    }
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
