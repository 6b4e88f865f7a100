//! The session: handshake, tag pool, the reader and writer tasks, cancellation.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use wasm9p_proto::consts::{DEFAULT_MSIZE, MIN_MSIZE, NOFID, NOTAG};
use wasm9p_proto::transport::{connect, write_segments, BoxStream};
use wasm9p_proto::{
    encode_frame, encode_frame_head, Addr, Errno, FrameDecoder, Message, Rattach, Rclunk, Tattach,
    Tflush,
};

use super::fid::{Fid, FidPool};
use super::reconnect::{self, Effect, Recipes, Wire};

/// How a session behaves.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The msize to ask for (the server may grant less, never less than 4096).
    pub msize: u32,
    /// User name sent in Tattach.
    pub uname: String,
    /// Numeric uid sent in Tattach (`n_uname`).
    pub n_uname: u32,
    /// How long one request may wait for its reply before it fails with ETIMEDOUT
    /// (and is flushed). Also bounds connecting and the version handshake.
    pub timeout: Duration,
    /// Most requests outstanding at once on the session.
    pub max_inflight: usize,
    /// Most Tread/Twrite in flight for one large read or write.
    pub io_depth: usize,
    /// When the connection drops, connect again and restore every fid (sessions made
    /// by [`Session::connect`] only), trying for at most `timeout`: see the module
    /// `reconnect` in the source for what is retried and what fails.
    pub reconnect: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            msize: DEFAULT_MSIZE,
            uname: std::env::var("USER").unwrap_or_else(|_| "root".into()),
            n_uname: rustix::process::getuid().as_raw(),
            timeout: Duration::from_secs(30),
            max_inflight: 64,
            io_depth: 4,
            reconnect: false,
        }
    }
}

/// Why a session could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The transport did not connect.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// Where.
        addr: String,
        /// Why.
        source: io::Error,
    },
    /// The server does not speak 9P2000.L.
    #[error("server speaks {0:?}, not 9P2000.L")]
    UnknownVersion(String),
    /// The server granted an msize below the protocol minimum.
    #[error("server granted msize {0}, below the minimum of 4096")]
    MsizeTooSmall(u32),
    /// The server granted more than was asked: a broken or hostile server.
    #[error("server granted msize {granted}, more than the {asked} asked for")]
    MsizeTooLarge {
        /// What the server answered.
        granted: u32,
        /// What we asked.
        asked: u32,
    },
    /// The version exchange failed (closed, timed out, or garbage).
    #[error("version handshake failed: {0}")]
    Handshake(String),
}

impl ConnectError {
    /// Whether trying again later may help (the server may come up or be reachable);
    /// a server that speaks the wrong protocol will not change by retrying.
    pub fn should_retry(&self) -> bool {
        matches!(
            self,
            ConnectError::Connect { .. } | ConnectError::Handshake(_)
        )
    }
}

/// Requests sent, by message type.
#[derive(Debug)]
pub struct RpcCounts([AtomicU64; 128]);

impl RpcCounts {
    fn bump(&self, ty: u8) {
        self.0[usize::from(ty / 2) % 128].fetch_add(1, Ordering::Relaxed);
    }

    /// `(name, count)` for every request type sent at least once, e.g. `("walk", 12)`.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        (0..128u8)
            .filter_map(|i| {
                let n = self.0[usize::from(i)].load(Ordering::Relaxed);
                let name = Message::type_name(i * 2)?;
                (n > 0).then(|| (&name[1..], n))
            })
            .collect()
    }

    /// All requests sent.
    pub fn total(&self) -> u64 {
        self.0.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

/// What reconnecting did so far ([`Session::reconnects`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReconnectStats {
    /// Connections restored after a loss.
    pub reconnects: u64,
    /// Requests sent again on a restored connection.
    pub retried: u64,
    /// Requests failed with EIO because the connection dropped under them and sending
    /// them again would not be safe (writes, creates, renames...).
    pub failed: u64,
    /// Fids that could not be restored (ESTALE from then on).
    pub stale_fids: u64,
}

/// A 9P2000.L client session; cheap to clone, usable from any task or thread.
#[derive(Clone, Debug)]
pub struct Session {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    state: Mutex<State>,
    /// Where to connect again (sessions from [`Session::connect`] with reconnect on).
    addr: Option<Addr>,
    /// Set while a lost connection is being restored: new calls wait.
    reconnecting: AtomicBool,
    /// Wakes the calls waiting for a reconnect.
    link_changed: Notify,
    reconnects: AtomicU64,
    retried: AtomicU64,
    failed: AtomicU64,
    pub(crate) stale_fids: AtomicU64,
    permits: Arc<Semaphore>,
    pub(crate) msize: u32,
    pub(crate) config: ClientConfig,
    pub(crate) runtime: Handle,
    pub(crate) fids: Mutex<FidPool>,
    counts: RpcCounts,
    /// Set once the server answered Trenameat / Tunlinkat with EOPNOTSUPP.
    pub(crate) no_renameat: AtomicBool,
    pub(crate) no_unlinkat: AtomicBool,
    /// Set by [`Session::close`]: the owner is going away with its runtime.
    closing: AtomicBool,
}

#[derive(Debug)]
struct State {
    /// Frames for the current connection's writer task: the frame (or its head) and a
    /// payload to follow it uncopied (see `encode_frame_head`).
    out: mpsc::UnboundedSender<reconnect::Frame>,
    /// The receiving end for the next connection's writer, while reconnecting.
    next_out: Option<mpsc::UnboundedReceiver<reconnect::Frame>>,
    /// Numbers connections: 0 for the first, one more per reconnect.
    epoch: u64,
    /// What every bound fid is, to restore it (with reconnect on).
    recipes: Option<Recipes>,
    pending: HashMap<u16, Pending>,
    free_tags: Vec<u16>,
    next_tag: u16,
    /// Numbers requests, for [`Pending::Waiting::call`].
    calls: u64,
    dead: bool,
}

#[derive(Debug)]
enum Pending {
    /// A caller waits for the reply of type `expect` (or Rlerror). `call` tells this
    /// request from a later one that reuses its tag once it is answered.
    Waiting {
        expect: u8,
        call: u64,
        tx: oneshot::Sender<Result<Message, Errno>>,
        /// The connection it was sent on.
        epoch: u64,
        /// With reconnect on: the frame, if it is safe to send again.
        retry: Option<reconnect::Frame>,
        /// With reconnect on: what its reply changes in the recipes.
        effect: Effect,
    },
    /// The caller went away and a Tflush was sent; the tag stays reserved until Rflush.
    Abandoned,
    /// A Tflush for tag `old`.
    Flush { old: u16 },
}

impl State {
    fn new(out: mpsc::UnboundedSender<reconnect::Frame>, reconnect: bool) -> State {
        State {
            out,
            next_out: None,
            epoch: 0,
            recipes: reconnect.then(Recipes::default),
            pending: HashMap::new(),
            free_tags: Vec::new(),
            next_tag: 0,
            calls: 0,
            dead: false,
        }
    }

    fn alloc_tag(&mut self) -> Option<u16> {
        if let Some(tag) = self.free_tags.pop() {
            return Some(tag);
        }
        if self.next_tag == NOTAG {
            return None;
        }
        self.next_tag += 1;
        Some(self.next_tag - 1)
    }

    fn free_tag(&mut self, tag: u16) {
        self.free_tags.push(tag);
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl Session {
    /// Connects to `addr` and negotiates the version and msize.
    pub async fn connect(addr: &Addr, config: ClientConfig) -> Result<Session, ConnectError> {
        let stream =
            connect(addr, config.timeout)
                .await
                .map_err(|source| ConnectError::Connect {
                    addr: addr.to_string(),
                    source,
                })?;
        let reconnect = config.reconnect.then(|| addr.clone());
        Session::open(stream, config, reconnect).await
    }

    /// Negotiates over an already connected stream (the in-process duplex, say). Such
    /// a session cannot reconnect: it does not know how to get another stream.
    pub async fn over(stream: BoxStream, config: ClientConfig) -> Result<Session, ConnectError> {
        Session::open(stream, config, None).await
    }

    async fn open(
        stream: BoxStream,
        config: ClientConfig,
        addr: Option<Addr>,
    ) -> Result<Session, ConnectError> {
        let asked = config.msize.max(MIN_MSIZE);
        let mut wire = Wire::new(stream, asked);
        let msize = tokio::time::timeout(config.timeout, wire.version(asked))
            .await
            .map_err(|_| ConnectError::Handshake("timed out".into()))??;
        let (out, out_rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            state: Mutex::new(State::new(out, addr.is_some())),
            addr,
            reconnecting: AtomicBool::new(false),
            link_changed: Notify::new(),
            reconnects: AtomicU64::new(0),
            retried: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            stale_fids: AtomicU64::new(0),
            permits: Arc::new(Semaphore::new(config.max_inflight.max(1))),
            msize,
            runtime: Handle::current(),
            fids: Mutex::new(FidPool::default()),
            counts: RpcCounts(std::array::from_fn(|_| AtomicU64::new(0))),
            no_renameat: AtomicBool::new(false),
            no_unlinkat: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            config,
        });
        inner.spawn_link(wire, out_rx, 0);
        Ok(Session { inner })
    }

    /// Attaches to export `aname`; the returned fid is its root.
    pub async fn attach(&self, aname: &str) -> Result<Fid, Errno> {
        let id = self.inner.alloc_fid()?;
        let fid = Fid::new(self.clone(), id, Default::default());
        let msg = Tattach {
            fid: id,
            afid: NOFID,
            uname: self.inner.config.uname.clone(),
            aname: aname.into(),
            n_uname: self.inner.config.n_uname,
        };
        match self.call(msg.into()).await {
            Ok(Message::Rattach(Rattach { qid })) => Ok(fid.with_qid(qid)),
            Ok(_) => Err(Errno::EIO),
            Err(e) => {
                fid.forget();
                Err(e)
            }
        }
    }

    /// The negotiated msize.
    pub fn msize(&self) -> u32 {
        self.inner.msize
    }

    /// Fid numbers in use, including those whose Tclunk is still on its way.
    pub fn live_fids(&self) -> usize {
        self.inner
            .fids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .live()
    }

    /// Fid numbers retired because their Tclunk was never answered (each may still be
    /// bound on the server; they are not reused).
    pub fn lost_fids(&self) -> usize {
        self.inner
            .fids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .lost()
    }

    /// Requests sent so far, by type.
    pub fn counts(&self) -> &RpcCounts {
        &self.inner.counts
    }

    /// What reconnecting did so far (all zero without reconnect).
    pub fn reconnects(&self) -> ReconnectStats {
        let i = &self.inner;
        ReconnectStats {
            reconnects: i.reconnects.load(Ordering::Relaxed),
            retried: i.retried.load(Ordering::Relaxed),
            failed: i.failed.load(Ordering::Relaxed),
            stale_fids: i.stale_fids.load(Ordering::Relaxed),
        }
    }

    /// Whether the connection is gone (every call now fails with EIO).
    pub fn is_dead(&self) -> bool {
        lock(&self.inner.state).dead
    }

    /// Says the session is being shut down with its owner (the process exits, the
    /// runtime is about to go): fids dropped from now on are not clunked one by one
    /// (the server releases them all when the connection closes), and losing the
    /// connection is expected rather than reported as a failure. Calls still work.
    pub fn close(&self) {
        self.inner.closing.store(true, Ordering::Relaxed);
    }

    /// Sends one request and waits for its reply; Rlerror becomes `Err`.
    pub(crate) async fn call(&self, msg: Message) -> Result<Message, Errno> {
        self.start(msg).await?.wait().await
    }

    /// Sends one request; the returned handle waits for the reply. Starting several
    /// before waiting pipelines them.
    pub(crate) async fn start(&self, msg: Message) -> Result<Call, Errno> {
        self.inner.until_connected().await?;
        let permits = self.inner.permits.clone();
        let permit = permits.acquire_owned().await.map_err(|_| Errno::EIO)?;
        self.start_with(msg, permit)
    }

    /// Like [`Session::start`], but `None` instead of waiting when the session is at
    /// its in-flight limit. A caller that already holds calls must use this for more:
    /// waiting for a permit while holding some can deadlock every such caller.
    pub(crate) fn try_start(&self, msg: Message) -> Option<Result<Call, Errno>> {
        if self.inner.reconnecting.load(Ordering::Acquire) {
            return None;
        }
        match self.inner.permits.clone().try_acquire_owned() {
            Ok(permit) => Some(self.start_with(msg, permit)),
            Err(tokio::sync::TryAcquireError::NoPermits) => None,
            Err(tokio::sync::TryAcquireError::Closed) => Some(Err(Errno::EIO)),
        }
    }

    fn start_with(&self, msg: Message, permit: OwnedSemaphorePermit) -> Result<Call, Errno> {
        let (tx, rx) = oneshot::channel();
        let mut st = lock(&self.inner.state);
        if st.dead {
            return Err(Errno::EIO);
        }
        let epoch = st.epoch;
        let checks_fids = self.inner.reconnects.load(Ordering::Relaxed) > 0;
        let (retry, effect) = match &mut st.recipes {
            None => (false, Effect::None),
            Some(recipes) => {
                // After a reconnect, a fid that was not restored would reach a server
                // that does not know it (or knows another file by its number).
                let stale = checks_fids
                    && reconnect::fids_used(&msg)
                        .into_iter()
                        .flatten()
                        .any(|fid| !recipes.bound(fid, epoch));
                if stale {
                    return Err(Errno::ESTALE);
                }
                recipes.on_send(&msg);
                (reconnect::retryable(&msg), Effect::of(&msg))
            }
        };
        let tag = st.alloc_tag().ok_or(Errno::EAGAIN)?;
        st.calls += 1;
        let id = st.calls;
        self.inner.counts.bump(msg.type_id());
        let mut frame = BytesMut::new();
        let payload = encode_frame_head(tag, &msg, &mut frame);
        let frame = (frame.freeze(), payload);
        st.pending.insert(
            tag,
            Pending::Waiting {
                expect: msg.type_id() + 1,
                call: id,
                tx,
                epoch,
                retry: retry.then(|| frame.clone()),
                effect,
            },
        );
        let sent = st.out.send(frame).is_ok();
        drop(st);
        let call = Call {
            inner: self.inner.clone(),
            tag,
            id,
            rx,
            done: false,
            _permit: permit,
        };
        if !sent {
            self.inner.kill("writer gone");
        }
        Ok(call)
    }
}

/// A request on the wire. Dropping it before the reply sends Tflush.
pub(crate) struct Call {
    inner: Arc<Inner>,
    tag: u16,
    id: u64,
    rx: oneshot::Receiver<Result<Message, Errno>>,
    done: bool,
    _permit: OwnedSemaphorePermit,
}

impl Call {
    /// Waits for the reply, at most the configured timeout (then ETIMEDOUT and Tflush).
    pub(crate) async fn wait(mut self) -> Result<Message, Errno> {
        match tokio::time::timeout(self.inner.config.timeout, &mut self.rx).await {
            Ok(Ok(result)) => {
                self.done = true;
                result
            }
            Ok(Err(_)) => {
                self.done = true;
                Err(Errno::EIO)
            }
            Err(_) => Err(Errno::ETIMEDOUT),
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if !self.done {
            self.inner.abandon(self.tag, self.id);
        }
    }
}

impl Inner {
    pub(crate) fn alloc_fid(&self) -> Result<u32, Errno> {
        self.fids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .alloc()
            .ok_or(Errno::EMFILE)
    }

    /// The Tclunk of `fid` ended with `result`: any answer (an error too: the server
    /// forgets a fid whatever its clunk answers) or a dead session frees the number; no
    /// answer retires it.
    pub(crate) fn clunked(&self, fid: u32, result: &Result<Message, Errno>) {
        let mut pool = self.fids.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Err(Errno::ETIMEDOUT) if !self.is_dead() => pool.lose(),
            _ => pool.free(fid),
        }
    }

    pub(crate) fn free_fid(&self, fid: u32) {
        self.fids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .free(fid);
    }

    pub(crate) fn is_dead(&self) -> bool {
        lock(&self.state).dead
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    /// The caller of request `id` under `tag` went away: flush it, keeping the tag
    /// until Rflush. If it was answered meanwhile, its tag is free and may already
    /// carry another request, which must be left alone.
    fn abandon(&self, tag: u16, id: u64) {
        let mut st = lock(&self.state);
        let epoch = match st.pending.get(&tag) {
            Some(Pending::Waiting { call, epoch, .. }) if *call == id => *epoch,
            _ => return,
        };
        if epoch != st.epoch {
            // Waiting to be sent again on a connection being restored: nothing of it
            // is on any live connection, so the tag is free at once.
            st.pending.remove(&tag);
            st.free_tag(tag);
            return;
        }
        st.pending.insert(tag, Pending::Abandoned);
        if st.dead {
            return;
        }
        let Some(flush_tag) = st.alloc_tag() else {
            return;
        };
        st.pending.insert(flush_tag, Pending::Flush { old: tag });
        self.counts.bump(108);
        let mut frame = BytesMut::new();
        encode_frame(flush_tag, &Tflush { oldtag: tag }.into(), &mut frame);
        let _ = st.out.send((frame.freeze(), None));
    }

    /// Routes one reply to whoever waits for it.
    fn deliver(
        &self,
        tag: u16,
        body: Result<Message, wasm9p_proto::DecodeError>,
        epoch: u64,
    ) -> Result<(), String> {
        let mut st = lock(&self.state);
        if st.epoch != epoch {
            return Err("connection replaced".into());
        }
        match st.pending.remove(&tag) {
            None => Err(format!("reply with unknown tag {tag}")),
            Some(Pending::Waiting {
                expect, tx, effect, ..
            }) => {
                st.free_tag(tag);
                if let (Some(recipes), Ok(reply)) = (&mut st.recipes, &body) {
                    if reply.type_id() == expect {
                        recipes.apply(effect, reply, epoch);
                    }
                }
                drop(st);
                let result = match body {
                    Ok(Message::Rlerror(e)) => Err(Errno(e.ecode)),
                    Ok(m) if m.type_id() == expect => Ok(m),
                    Ok(m) => {
                        tracing::warn!(
                            "9p: {} in reply to a request expecting type {expect}",
                            m.name()
                        );
                        Err(Errno::EIO)
                    }
                    Err(e) => {
                        tracing::warn!("9p: undecodable reply: {e}");
                        Err(Errno::EIO)
                    }
                };
                let _ = tx.send(result);
                Ok(())
            }
            Some(Pending::Abandoned) => {
                // The reply to a flushed request: the tag waits for Rflush.
                st.pending.insert(tag, Pending::Abandoned);
                Ok(())
            }
            Some(Pending::Flush { old }) => {
                st.pending.remove(&old);
                st.free_tag(old);
                st.free_tag(tag);
                Ok(())
            }
        }
    }

    /// The connection is gone: every waiter gets EIO now, later calls get it at once.
    pub(crate) fn kill(&self, why: &str) {
        let mut st = lock(&self.state);
        if st.dead {
            return;
        }
        st.dead = true;
        let pending = std::mem::take(&mut st.pending);
        drop(st);
        if self.is_closing() {
            tracing::debug!("9p session closed: {why}");
        } else {
            tracing::warn!("9p session lost: {why}");
        }
        for (_, p) in pending {
            if let Pending::Waiting { tx, .. } = p {
                let _ = tx.send(Err(Errno::EIO));
            }
        }
        self.permits.close();
        self.reconnecting.store(false, Ordering::Release);
        self.link_changed.notify_waiters();
    }

    /// Starts the reader and writer tasks of connection `epoch`.
    fn spawn_link(
        self: &Arc<Self>,
        wire: Wire,
        out: mpsc::UnboundedReceiver<reconnect::Frame>,
        epoch: u64,
    ) {
        let (stream, decoder, buf) = wire.into_parts();
        let (reader, writer) = tokio::io::split(stream);
        let weak = Arc::downgrade(self);
        tokio::spawn(read_loop(weak.clone(), reader, decoder, buf, epoch));
        tokio::spawn(write_loop(weak, writer, out, epoch));
    }

    /// Waits while a lost connection is being restored (at most the session timeout).
    async fn until_connected(&self) -> Result<(), Errno> {
        while self.reconnecting.load(Ordering::Acquire) {
            let changed = self.link_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if !self.reconnecting.load(Ordering::Acquire) {
                break;
            }
            if tokio::time::timeout(self.config.timeout, changed)
                .await
                .is_err()
            {
                return Err(Errno::ETIMEDOUT);
            }
        }
        // A session that gave up is dead: `start_with` says so.
        Ok(())
    }

    /// Runs `f` on the recipes (reconnect is on whenever a supervisor runs).
    pub(crate) fn with_recipes<T>(&self, f: impl FnOnce(&mut Recipes) -> T) -> T {
        let mut st = lock(&self.state);
        f(st.recipes.get_or_insert_with(Recipes::default))
    }

    /// A new connection `wire` is up and `restored` fids are bound on it: mark them,
    /// send again what was waiting for it, start its tasks and let new calls through.
    pub(crate) fn resume(self: &Arc<Self>, wire: Wire, restored: &[u32]) {
        let mut st = lock(&self.state);
        let epoch = st.epoch;
        let Some(out) = st.next_out.take() else {
            return;
        };
        let recipes = st.recipes.get_or_insert_with(Recipes::default);
        recipes.restored(restored, epoch);
        self.stale_fids
            .store(recipes.stale(epoch) as u64, Ordering::Relaxed);
        let mut failed = Vec::new();
        let mut resend = Vec::new();
        let tags: Vec<u16> = st.pending.keys().copied().collect();
        for tag in tags {
            let Some(Pending::Waiting {
                epoch: sent_on,
                retry: Some(frame),
                ..
            }) = st.pending.get_mut(&tag)
            else {
                continue;
            };
            if *sent_on == epoch {
                continue;
            }
            *sent_on = epoch;
            resend.push((tag, frame.clone()));
        }
        for (tag, frame) in resend {
            if st.out.send(frame).is_err() {
                failed.push(tag);
            }
            self.retried.fetch_add(1, Ordering::Relaxed);
        }
        for tag in failed {
            if let Some(Pending::Waiting { tx, .. }) = st.pending.remove(&tag) {
                st.free_tag(tag);
                let _ = tx.send(Err(Errno::EIO));
            }
        }
        self.reconnects.fetch_add(1, Ordering::Relaxed);
        self.spawn_link(wire, out, epoch);
        drop(st);
        self.reconnecting.store(false, Ordering::Release);
        self.link_changed.notify_waiters();
    }

    /// Connection `epoch` is gone. Without reconnect (or while closing) the session
    /// dies; otherwise requests in flight are sorted (see the `reconnect` module) and a
    /// supervisor connects again. Reports about an older connection are ignored.
    pub(crate) fn lost(self: &Arc<Self>, epoch: u64, why: String) {
        let mut st = lock(&self.state);
        if st.dead || st.epoch != epoch {
            return;
        }
        let addr = match &self.addr {
            Some(addr) if !self.is_closing() => addr.clone(),
            _ => {
                drop(st);
                return self.kill(&why);
            }
        };
        st.epoch += 1;
        self.reconnecting.store(true, Ordering::Release);
        let (out, next_out) = mpsc::unbounded_channel();
        st.out = out;
        st.next_out = Some(next_out);
        let mut failed = Vec::new();
        for (tag, p) in std::mem::take(&mut st.pending) {
            match p {
                Pending::Waiting { retry: Some(_), .. } => {
                    st.pending.insert(tag, p);
                }
                Pending::Waiting { expect, tx, .. } => {
                    st.free_tag(tag);
                    failed.push((expect, tx));
                }
                Pending::Abandoned | Pending::Flush { .. } => st.free_tag(tag),
            }
        }
        drop(st);
        let clunked = Message::Rclunk(Rclunk {});
        for (expect, tx) in failed {
            // A clunk is done: the server forgot every fid with the connection.
            let _ = tx.send(if expect == clunked.type_id() {
                Ok(clunked.clone())
            } else {
                self.failed.fetch_add(1, Ordering::Relaxed);
                Err(Errno::EIO)
            });
        }
        tracing::warn!("9p session lost: {why}; reconnecting to {addr}");
        tokio::spawn(reconnect::supervise(
            Arc::downgrade(self),
            addr,
            Instant::now(),
            why,
        ));
    }
}

async fn read_loop(
    inner: Weak<Inner>,
    mut reader: ReadHalf<BoxStream>,
    mut decoder: FrameDecoder,
    mut buf: BytesMut,
    epoch: u64,
) {
    let why = loop {
        match decoder.decode(&mut buf) {
            Ok(Some(frame)) => {
                let Some(session) = inner.upgrade() else {
                    return;
                };
                if let Err(why) = session.deliver(frame.tag, frame.body, epoch) {
                    break why;
                }
                continue;
            }
            Ok(None) => {}
            Err(e) => break e.to_string(),
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(64 * 1024);
        }
        match reader.read_buf(&mut buf).await {
            Ok(0) => break "connection closed by the server".to_string(),
            Ok(_) => {}
            Err(e) => break e.to_string(),
        }
    };
    if let Some(session) = inner.upgrade() {
        session.lost(epoch, why);
    }
}

async fn write_loop(
    inner: Weak<Inner>,
    mut writer: WriteHalf<BoxStream>,
    mut rx: mpsc::UnboundedReceiver<reconnect::Frame>,
    epoch: u64,
) {
    let mut segments: Vec<Bytes> = Vec::new();
    while let Some(first) = rx.recv().await {
        let mut batched = 0;
        let mut next = Some(first);
        while let Some((frame, payload)) = next.take() {
            batched += frame.len();
            segments.push(frame);
            if let Some(payload) = payload {
                batched += payload.len();
                segments.push(payload);
            }
            if batched < 1024 * 1024 {
                next = rx.try_recv().ok();
            }
        }
        if let Err(e) = write_segments(&mut writer, &mut segments).await {
            if let Some(session) = inner.upgrade() {
                session.lost(epoch, format!("write: {e}"));
            }
            return;
        }
    }
    // Every handle on the session is gone (or the connection was replaced): close our
    // side so the server lets go too.
    let _ = writer.shutdown().await;
}
