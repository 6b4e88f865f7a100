//! The session: handshake, tag pool, starting calls, cancellation. The connection under
//! it (reader and writer tasks, replies, losing it) is `link`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use wasm9p_proto::consts::{MIN_MSIZE, NOTAG};
use wasm9p_proto::transport::BoxStream;
use wasm9p_proto::{encode_frame, encode_frame_head, Addr, Errno, Message, Tclunk, Tflush};

use super::config::{ClientConfig, ConnectError, ReconnectStats, RpcCounts};
use super::fid_pool::FidPool;
use super::learned::Learned;
use super::reconnect::{self, Effect, Recipes, Wire};

mod link;

/// How long [`Session::close`] waits for the requests in flight to be answered.
pub const CLOSE_DRAIN: Duration = Duration::from_millis(500);

/// A 9P2000.L client session; cheap to clone, usable from any task or thread.
#[derive(Clone, Debug)]
pub struct Session {
    inner: Arc<Inner>,
}

/// What a session's clones share. Its fields are this module's (and `link`'s): the
/// rest of the client goes through [`Session`]'s methods.
#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    /// Where to connect again (sessions from [`Session::connect`] with reconnect on).
    addr: Option<Addr>,
    /// Set while a lost connection is being restored: new calls wait.
    reconnecting: AtomicBool,
    /// Wakes the calls waiting for a reconnect.
    link_changed: Notify,
    /// Wakes clunks waiting for Rflushes ([`Inner::flushes_answered`]).
    flushes_done: Notify,
    reconnects: AtomicU64,
    retried: AtomicU64,
    failed: AtomicU64,
    stale_fids: AtomicU64,
    permits: Arc<Semaphore>,
    msize: u32,
    config: ClientConfig,
    runtime: Handle,
    fids: Mutex<FidPool>,
    counts: RpcCounts,
    /// Set by [`Session::close`]: the owner is going away with its runtime.
    closing: AtomicBool,
    /// Tclunks of dropped fids not yet answered, sent or about to be (what
    /// [`Session::close`] waits for, with the requests in `pending`).
    clunks_on_the_way: AtomicUsize,
    /// What the server promised and refused, and the flights sent (`learned`).
    learned: Learned,
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
        /// The one fid it works on, where a flush of it must hold back that fid's
        /// Tclunk alone ([`request_fid`]); `None`: every Tclunk waits for its flush.
        fid: Option<u32>,
    },
    /// The caller went away and a Tflush was sent; the tag stays reserved until Rflush.
    Abandoned,
    /// A Tflush for tag `old`, a request on `fid` (as [`Pending::Waiting::fid`]).
    Flush { old: u16, fid: Option<u32> },
}

/// The fid of a request that works on one open fid and may run on the server for a
/// while (reads, writes, listings, attributes, syncs, locks): a Tclunk of any other fid
/// need not wait for its flush. `None` for the rest (walks bind a second fid, links
/// and renames name two), whose flushes hold back every Tclunk.
fn request_fid(msg: &Message) -> Option<u32> {
    Some(match msg {
        Message::Tread(t) => t.fid,
        Message::Twrite(t) => t.fid,
        Message::Treaddir(t) => t.fid,
        Message::Tgetattr(t) => t.fid,
        Message::Tsetattr(t) => t.fid,
        Message::Tlopen(t) => t.fid,
        Message::Treadlink(t) => t.fid,
        Message::Tfsync(t) => t.fid,
        Message::Tlock(t) => t.fid,
        Message::Tgetlock(t) => t.fid,
        Message::Tstatfs(t) => t.fid,
        _ => return None,
    })
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
        let stream = config
            .dialer
            .connect(addr, config.timeout)
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
            flushes_done: Notify::new(),
            reconnects: AtomicU64::new(0),
            retried: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            stale_fids: AtomicU64::new(0),
            permits: Arc::new(Semaphore::new(config.max_inflight.max(1))),
            msize,
            runtime: Handle::current(),
            fids: Mutex::new(FidPool::default()),
            counts: RpcCounts::new(),
            closing: AtomicBool::new(false),
            clunks_on_the_way: AtomicUsize::new(0),
            learned: Learned::default(),
            config,
        });
        inner.spawn_link(wire, out_rx, 0);
        Ok(Session { inner })
    }

    /// The negotiated msize.
    pub fn msize(&self) -> u32 {
        self.inner.msize
    }

    /// How this session was configured.
    pub(crate) fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// What this session learned of its server (`learned`).
    pub(crate) fn learned(&self) -> &Learned {
        &self.inner.learned
    }

    /// A fid number for a new fid, or EMFILE when none is left.
    pub(crate) fn alloc_fid(&self) -> Result<u32, Errno> {
        self.inner.alloc_fid()
    }

    /// Gives `fid`'s number back without a Tclunk (the server does not have it bound).
    pub(crate) fn free_fid(&self, fid: u32) {
        self.inner.free_fid(fid);
    }

    /// Clunks `fid` and returns the server's answer; the number is free again (or
    /// retired, when no answer came) either way.
    pub(crate) async fn clunk(&self, fid: u32) -> Result<(), Errno> {
        // Not before a flushed request on this fid has left the server (see there).
        self.inner.flushes_answered(fid).await;
        let result = self.call(Tclunk { fid }.into()).await;
        self.inner.clunked(fid, &result);
        result.map(drop)
    }

    /// Clunks `fid` on the session's runtime, for a fid dropped (or frees its number at
    /// once if the session is dead or closing: the server forgets it with the
    /// connection). The number is reused only once the server has answered; until then
    /// the clunk is counted, for [`Session::close`] to wait for.
    pub(crate) fn clunk_in_background(&self, fid: u32) {
        let inner = &self.inner;
        if inner.is_dead() || inner.is_closing() {
            inner.free_fid(fid);
            return;
        }
        inner.clunks_on_the_way.fetch_add(1, Ordering::AcqRel);
        let session = self.clone();
        inner.runtime.spawn(async move {
            session.inner.flushes_answered(fid).await;
            let result = session.call_once_connected(Tclunk { fid }.into()).await;
            session.inner.clunked(fid, &result);
            session
                .inner
                .clunks_on_the_way
                .fetch_sub(1, Ordering::AcqRel);
        });
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
    /// bound on the server): not reused on this connection, free again after a
    /// reconnect.
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
    ///
    /// Then waits, on this thread and for [`CLOSE_DRAIN`] at most, until the requests
    /// already sent (the Tclunks of fids dropped before, most often) are answered, so
    /// that the connection closes with nothing in flight. A server answering on a
    /// connection its client has closed gets EPIPE, or the client's reset; one that
    /// does not ignore SIGPIPE (diod 1.0.24 started by hand, not by systemd) dies of
    /// it, under its other clients. It does not wait for a session on a
    /// current-thread runtime (whose tasks run only while it is driven), during a
    /// reconnect, or for a dead connection.
    pub fn close(&self) {
        self.inner.closing.store(true, Ordering::Relaxed);
        self.inner.wait_answered(CLOSE_DRAIN);
    }

    /// Sends one request and waits for its reply; Rlerror becomes `Err`.
    pub(crate) async fn call(&self, msg: Message) -> Result<Message, Errno> {
        self.start(msg).await?.wait().await
    }

    /// Like [`Session::call`], but waits out a reconnect however long it takes (the
    /// supervisor gives up within the session timeout, and the session dies): for a
    /// Tclunk, whose ETIMEDOUT must mean "sent, not answered", never "not sent".
    pub(crate) async fn call_once_connected(&self, msg: Message) -> Result<Message, Errno> {
        while self.inner.until_connected().await.is_err() {}
        self.call(msg).await
    }

    /// Sends one request; the returned handle waits for the reply. Starting several
    /// before waiting pipelines them.
    pub(crate) async fn start(&self, mut msg: Message) -> Result<Call, Errno> {
        self.inner.until_connected().await?;
        let permits = self.inner.permits.clone();
        let mut permit = permits.acquire_owned().await.map_err(|_| Errno::EIO)?;
        loop {
            match self.start_with(msg, permit) {
                Started::Sent(call) => return call,
                // The connection went while this call waited for its permit: wait for
                // the fids to be restored, then check them again.
                Started::NotYet(again, back) => {
                    self.inner.until_connected().await?;
                    (msg, permit) = (again, back);
                }
            }
        }
    }

    /// Like [`Session::start`], but `None` instead of waiting when the session is at
    /// its in-flight limit. A caller that already holds calls must use this for more:
    /// waiting for a permit while holding some can deadlock every such caller.
    pub(crate) fn try_start(&self, msg: Message) -> Option<Result<Call, Errno>> {
        if self.inner.reconnecting.load(Ordering::Acquire) {
            return None;
        }
        match self.inner.permits.clone().try_acquire_owned() {
            Ok(permit) => match self.start_with(msg, permit) {
                Started::Sent(call) => Some(call),
                Started::NotYet(..) => None,
            },
            Err(tokio::sync::TryAcquireError::NoPermits) => None,
            Err(tokio::sync::TryAcquireError::Closed) => Some(Err(Errno::EIO)),
        }
    }

    fn start_with(&self, msg: Message, permit: OwnedSemaphorePermit) -> Started {
        let (tx, rx) = oneshot::channel();
        let mut st = lock(&self.inner.state);
        if st.dead {
            return Started::Sent(Err(Errno::EIO));
        }
        let epoch = st.epoch;
        let reconnecting = st.next_out.is_some();
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
                if stale && reconnecting {
                    // A reconnect is under way and has not restored the fids yet.
                    return Started::NotYet(msg, permit);
                }
                if stale {
                    return Started::Sent(Err(Errno::ESTALE));
                }
                // Even if no tag is left to send it: a clunk that fails here has its
                // number retired until a reconnect, which must not restore the fid.
                recipes.on_send(&msg);
                (reconnect::retryable(&msg), Effect::of(&msg))
            }
        };
        let Some(tag) = st.alloc_tag() else {
            return Started::Sent(Err(Errno::EAGAIN));
        };
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
                fid: request_fid(&msg),
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
        Started::Sent(Ok(call))
    }
}

/// What [`Session::start_with`] did with a request.
enum Started {
    /// Sent (or refused for good).
    Sent(Result<Call, Errno>),
    /// Not sent: it uses a fid that a reconnect under way may yet restore. The
    /// request and its permit come back, to try again once the reconnect is over.
    NotYet(Message, OwnedSemaphorePermit),
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
    fn alloc_fid(&self) -> Result<u32, Errno> {
        self.fids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .alloc()
            .ok_or(Errno::EMFILE)
    }

    /// The Tclunk of `fid` ended with `result`: any answer (an error too: the server
    /// forgets a fid whatever its clunk answers) or a dead session frees the number; no
    /// answer, or no tag to send it with, retires it until the next reconnect.
    fn clunked(&self, fid: u32, result: &Result<Message, Errno>) {
        // (`state` before `fids`, as `resume` takes them.)
        let dead = self.is_dead();
        let mut pool = self.fids.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Err(Errno::ETIMEDOUT | Errno::EAGAIN) if !dead => pool.lose(fid),
            _ => pool.free(fid),
        }
    }

    fn free_fid(&self, fid: u32) {
        self.fids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .free(fid);
    }

    fn is_dead(&self) -> bool {
        lock(&self.state).dead
    }

    fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    /// Sleeps until no request is in flight and no Tclunk on its way (or `limit` has
    /// passed, or waiting cannot help): see [`Session::close`].
    fn wait_answered(&self, limit: Duration) {
        // A current-thread runtime runs the clunks only while someone drives it, maybe
        // this very thread.
        if self.runtime.runtime_flavor() == RuntimeFlavor::CurrentThread {
            return;
        }
        let deadline = Instant::now() + limit;
        loop {
            let quiet = {
                let st = lock(&self.state);
                st.dead || st.pending.is_empty()
            } && self.clunks_on_the_way.load(Ordering::Acquire) == 0;
            if quiet || self.reconnecting.load(Ordering::Acquire) || Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits until every Tflush sent for a request on `fid` (or on fids not known, see
    /// [`request_fid`]) is answered, or the session is gone, or the configured timeout
    /// has passed. A request flushed on a fid may still be running on the server until
    /// its Rflush; a Tclunk of that fid must not overtake it, since a server may free
    /// the fid under the request (diod does, and crashes). Clunks wait here; without
    /// such flushes in flight this is one look at the state.
    async fn flushes_answered(&self, fid: u32) {
        let deadline = tokio::time::Instant::now() + self.config.timeout;
        loop {
            let notified = self.flushes_done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let st = lock(&self.state);
                let flushing = st.pending.values().any(
                    |p| matches!(p, Pending::Flush { fid: f, .. } if f.is_none_or(|f| f == fid)),
                );
                if st.dead || !flushing {
                    return;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return;
            }
        }
    }

    /// The caller of request `id` under `tag` went away: flush it, keeping the tag
    /// until Rflush. If it was answered meanwhile, its tag is free and may already
    /// carry another request, which must be left alone.
    fn abandon(&self, tag: u16, id: u64) {
        let mut st = lock(&self.state);
        let (epoch, fid) = match st.pending.get(&tag) {
            Some(Pending::Waiting {
                call, epoch, fid, ..
            }) if *call == id => (*epoch, *fid),
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
        st.pending
            .insert(flush_tag, Pending::Flush { old: tag, fid });
        self.counts.bump(108);
        let mut frame = BytesMut::new();
        encode_frame(flush_tag, &Tflush { oldtag: tag }.into(), &mut frame);
        let _ = st.out.send((frame.freeze(), None));
    }
}
