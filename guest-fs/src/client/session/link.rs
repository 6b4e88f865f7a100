//! The connection under a session: its reader and writer tasks, the routing of replies,
//! and what happens when the connection goes (the session dies, or with reconnect on,
//! requests in flight are sorted and a supervisor connects again; see `reconnect`).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::mpsc;
use wasm9p_proto::transport::{write_segments, BoxStream};
use wasm9p_proto::{Errno, FrameDecoder, Message, Rclunk};

use super::{lock, Inner, Pending};
use crate::client::config::ClientConfig;
use crate::client::reconnect::{self, Recipe, Recipes, Supervised, Wire};

impl Inner {
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
            Some(Pending::Flush { old, .. }) => {
                st.pending.remove(&old);
                st.free_tag(old);
                st.free_tag(tag);
                drop(st);
                self.flushes_done.notify_waiters();
                Ok(())
            }
        }
    }

    /// The connection is gone: every waiter gets EIO now, later calls get it at once.
    pub(super) fn kill(&self, why: &str) {
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
        self.flushes_done.notify_waiters();
    }

    /// Starts the reader and writer tasks of connection `epoch`.
    pub(super) fn spawn_link(
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
    pub(super) async fn until_connected(&self) -> Result<(), Errno> {
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

    /// A new connection `wire` is up and `restored` fids are bound on it: mark them,
    /// send again what was waiting for it, start its tasks and let new calls through.
    fn resume(self: &Arc<Self>, wire: Wire, restored: &[u32]) {
        let mut st = lock(&self.state);
        let epoch = st.epoch;
        let Some(out) = st.next_out.take() else {
            return;
        };
        let recipes = st.recipes.get_or_insert_with(Recipes::default);
        recipes.restored(restored, epoch);
        // Numbers whose clunk went unanswered were bound on the old connection only.
        self.fids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .reclaim_lost();
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
    pub(super) fn lost(self: &Arc<Self>, epoch: u64, why: String) {
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

impl Supervised for Inner {
    fn config(&self) -> &ClientConfig {
        &self.config
    }

    fn msize(&self) -> u32 {
        self.msize
    }

    fn is_closing(&self) -> bool {
        Inner::is_closing(self)
    }

    fn plan(&self) -> Vec<(u32, Recipe)> {
        // Reconnect is on whenever a supervisor runs, so there are recipes.
        let mut st = lock(&self.state);
        st.recipes.get_or_insert_with(Recipes::default).plan()
    }

    fn resume(self: Arc<Self>, wire: Wire, restored: &[u32]) {
        Inner::resume(&self, wire, restored);
    }

    fn kill(&self, why: &str) {
        Inner::kill(self, why);
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
