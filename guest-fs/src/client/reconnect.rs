//! Reconnecting a session whose connection dropped ([`ClientConfig::reconnect`]).
//!
//! With reconnect on, the session keeps a *recipe* for every fid the server has bound:
//! the attach it hangs from (export name), its path below that root, the qid it had,
//! and the flags it was opened with. Recipes follow what the replies say (attach, walk,
//! lopen, lcreate; renames and unlinks through this session rewrite or retire them;
//! clunk and remove drop them when sent).
//!
//! When the connection is lost:
//! - Requests in flight are sorted at once. Those that only look (walk, getattr, read,
//!   readdir, readlink, statfs, lopen, attach) stay pending and are sent again on the
//!   new connection. Every other one, writes first of all, fails with EIO right away:
//!   the server may or may not have done it, and a write it did not acknowledge is
//!   reported, never silently lost. A clunk in flight counts as done (the server
//!   forgot every fid with the connection).
//! - New calls wait (at most the session timeout) for the outcome; so does a call that
//!   was waiting for a free slot when the connection went and gets one (freed by a
//!   failed write) before its fids are restored.
//! - A supervisor task connects again (backoff 50 ms doubling to 1 s) until the session
//!   timeout has passed since the loss, then gives up: the session is dead as without
//!   reconnect. On a new connection it negotiates the version (the msize must not
//!   shrink), attaches every root again and walks every fid back to its path under its
//!   own number, checking that the walk ends at the same qid path (a file replaced by
//!   another of the same name is not silently substituted), and reopens the open ones
//!   with their flags less `O_CREAT | O_EXCL | O_TRUNC`. Only then do the retried and
//!   the new requests go out.
//! - A fid that cannot be restored (its file was unlinked, replaced, or is an xattr
//!   fid) is *stale*: every request on it fails with ESTALE without reaching the
//!   server, until it is clunked.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wasm9p_proto::consts::{open, MAXWELEM, NOFID, NOTAG, VERSION_9P2000_L};
use wasm9p_proto::transport::BoxStream;
use wasm9p_proto::{
    encode_frame, Addr, Errno, FrameDecoder, Message, Qid, Tattach, Tclunk, Tlopen, Tversion, Twalk,
};

use super::config::{ClientConfig, ConnectError};

/// The session as its supervisor sees it: what [`supervise`] reads of it and does to
/// it. The session's shared state implements it; this module knows nothing else of
/// the session.
pub(crate) trait Supervised: Send + Sync + 'static {
    /// The session's configuration (the timeout bounds the whole reconnect).
    fn config(&self) -> &ClientConfig;
    /// The msize in use: a new connection must grant at least as much.
    fn msize(&self) -> u32;
    /// Whether the owner is going away ([`super::Session::close`]): no reconnect then.
    fn is_closing(&self) -> bool;
    /// Every fid to restore, with its recipe, in an order where roots come first.
    fn plan(&self) -> Vec<(u32, Recipe)>;
    /// Takes `wire` as the session's connection, `restored` the fids bound on it.
    fn resume(self: Arc<Self>, wire: Wire, restored: &[u32]);
    /// Gives up: the session is dead, every call fails with EIO.
    fn kill(&self, why: &str);
}

/// What a reply to a request changes in the fid table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Effect {
    /// Nothing.
    #[default]
    None,
    /// `fid` is the root of export `aname`.
    Attach { fid: u32, aname: String },
    /// `newfid` is `fid` walked through `names` (if the walk completes).
    Walk {
        fid: u32,
        newfid: u32,
        names: Vec<String>,
    },
    /// `fid` is open with `flags`.
    Open { fid: u32, flags: u32 },
    /// `fid` now names the new file `name` in itself, open with `flags`.
    Create { fid: u32, name: String, flags: u32 },
    /// `oldname` in `olddir` is now `newname` in `newdir`.
    Rename {
        olddir: u32,
        oldname: String,
        newdir: u32,
        newname: String,
    },
    /// The file `fid` names is now `name` in `dir`.
    Move { fid: u32, dir: u32, name: String },
    /// `name` in `dir` is gone.
    Unlink { dir: u32, name: String },
    /// `fid` is bound but cannot be restored (an xattr fid).
    Unreplayable { fid: u32 },
}

impl Effect {
    /// The effect a successful reply to `msg` has.
    pub(crate) fn of(msg: &Message) -> Effect {
        match msg {
            Message::Tattach(t) => Effect::Attach {
                fid: t.fid,
                aname: t.aname.clone(),
            },
            Message::Twalk(t) => Effect::Walk {
                fid: t.fid,
                newfid: t.newfid,
                names: t.wnames.clone(),
            },
            Message::Tlopen(t) => Effect::Open {
                fid: t.fid,
                flags: t.flags,
            },
            Message::Tlcreate(t) => Effect::Create {
                fid: t.fid,
                name: t.name.clone(),
                flags: t.flags,
            },
            Message::Trenameat(t) => Effect::Rename {
                olddir: t.olddirfid,
                oldname: t.oldname.clone(),
                newdir: t.newdirfid,
                newname: t.newname.clone(),
            },
            Message::Trename(t) => Effect::Move {
                fid: t.fid,
                dir: t.dfid,
                name: t.name.clone(),
            },
            Message::Tunlinkat(t) => Effect::Unlink {
                dir: t.dirfd,
                name: t.name.clone(),
            },
            Message::Txattrwalk(t) => Effect::Unreplayable { fid: t.newfid },
            Message::Txattrcreate(t) => Effect::Unreplayable { fid: t.fid },
            _ => Effect::None,
        }
    }
}

/// Whether `msg` may be sent again on a new connection when its reply was lost: it
/// changes nothing on the server (or, for lopen and attach, nothing a second time).
pub(crate) fn retryable(msg: &Message) -> bool {
    matches!(
        msg,
        Message::Twalk(_)
            | Message::Tgetattr(_)
            | Message::Tread(_)
            | Message::Treaddir(_)
            | Message::Treadlink(_)
            | Message::Tstatfs(_)
            | Message::Tlopen(_)
            | Message::Tattach(_)
    )
}

/// The fids a request uses (not those it binds), which must be live on the server.
pub(crate) fn fids_used(msg: &Message) -> [Option<u32>; 2] {
    match msg {
        Message::Tstatfs(t) => [Some(t.fid), None],
        Message::Tlopen(t) => [Some(t.fid), None],
        Message::Tlcreate(t) => [Some(t.fid), None],
        Message::Tsymlink(t) => [Some(t.fid), None],
        Message::Tmknod(t) => [Some(t.dfid), None],
        Message::Trename(t) => [Some(t.fid), Some(t.dfid)],
        Message::Treadlink(t) => [Some(t.fid), None],
        Message::Tgetattr(t) => [Some(t.fid), None],
        Message::Tsetattr(t) => [Some(t.fid), None],
        Message::Txattrwalk(t) => [Some(t.fid), None],
        Message::Txattrcreate(t) => [Some(t.fid), None],
        Message::Treaddir(t) => [Some(t.fid), None],
        Message::Tfsync(t) => [Some(t.fid), None],
        Message::Tlock(t) => [Some(t.fid), None],
        Message::Tgetlock(t) => [Some(t.fid), None],
        Message::Tlink(t) => [Some(t.dfid), Some(t.fid)],
        Message::Tmkdir(t) => [Some(t.dfid), None],
        Message::Trenameat(t) => [Some(t.olddirfid), Some(t.newdirfid)],
        Message::Tunlinkat(t) => [Some(t.dirfd), None],
        Message::Twalk(t) => [Some(t.fid), None],
        Message::Tread(t) => [Some(t.fid), None],
        Message::Twrite(t) => [Some(t.fid), None],
        Message::Tremove(t) => [Some(t.fid), None],
        _ => [None, None],
    }
}

/// How to bind one fid again.
#[derive(Clone, Debug)]
pub(crate) struct Recipe {
    /// The attach fid this one hangs from (itself for a root).
    root: u32,
    /// For a root: the export name.
    aname: Option<String>,
    /// Names from the root.
    path: Vec<String>,
    /// The qid the fid had: a restored fid must name the same file.
    qid: Qid,
    /// Open flags, once opened.
    open: Option<u32>,
    /// False once the fid cannot be restored (unlinked, xattr).
    replayable: bool,
    /// The connection the fid is bound on.
    epoch: u64,
}

/// Recipes for every fid bound on the server.
#[derive(Debug, Default)]
pub(crate) struct Recipes {
    map: HashMap<u32, Recipe>,
}

impl Recipes {
    /// A request is being sent: clunk and remove retire their fid now (even if the
    /// connection drops before the reply, the server no longer has it).
    pub(crate) fn on_send(&mut self, msg: &Message) {
        match msg {
            Message::Tclunk(t) => self.map.remove(&t.fid),
            Message::Tremove(t) => self.map.remove(&t.fid),
            _ => None,
        };
    }

    /// Whether `fid` is bound on connection `epoch`.
    pub(crate) fn bound(&self, fid: u32, epoch: u64) -> bool {
        self.map.get(&fid).is_some_and(|r| r.epoch == epoch)
    }

    /// Fids whose recipe says they cannot be restored, or that are bound on an older
    /// connection: requests on them would reach a server that does not know them.
    pub(crate) fn stale(&self, epoch: u64) -> usize {
        self.map.values().filter(|r| r.epoch != epoch).count()
    }

    /// Records what a successful `reply` on connection `epoch` did.
    pub(crate) fn apply(&mut self, effect: Effect, reply: &Message, epoch: u64) {
        match (effect, reply) {
            (Effect::Attach { fid, aname }, Message::Rattach(r)) => {
                self.map.insert(
                    fid,
                    Recipe {
                        root: fid,
                        aname: Some(aname),
                        path: Vec::new(),
                        qid: r.qid,
                        open: None,
                        replayable: true,
                        epoch,
                    },
                );
            }
            (Effect::Walk { fid, newfid, names }, Message::Rwalk(r))
                if r.wqids.len() == names.len() =>
            {
                let recipe = match self.map.get(&fid) {
                    Some(parent) => Recipe {
                        root: parent.root,
                        aname: None,
                        path: joined(&parent.path, &names),
                        qid: r.wqids.last().copied().unwrap_or(parent.qid),
                        open: None,
                        replayable: parent.replayable,
                        epoch,
                    },
                    None => unreplayable(newfid, epoch),
                };
                self.map.insert(newfid, recipe);
            }
            (Effect::Open { fid, flags }, Message::Rlopen(_)) => {
                if let Some(r) = self.map.get_mut(&fid) {
                    r.open = Some(flags);
                }
            }
            (Effect::Create { fid, name, flags }, Message::Rlcreate(reply)) => {
                if let Some(r) = self.map.get_mut(&fid) {
                    r.path = joined(&r.path, &[name]);
                    r.qid = reply.qid;
                    r.open = Some(flags);
                }
            }
            (
                Effect::Rename {
                    olddir,
                    oldname,
                    newdir,
                    newname,
                },
                Message::Rrenameat(_),
            ) => {
                if let (Some(from), Some(to)) =
                    (self.child(olddir, oldname), self.child(newdir, newname))
                {
                    self.rebase(from, to);
                }
            }
            (Effect::Move { fid, dir, name }, Message::Rrename(_)) => {
                let from = self.map.get(&fid).map(|r| (r.root, r.path.clone()));
                if let (Some(from), Some(to)) = (from, self.child(dir, name)) {
                    self.rebase(from, to);
                }
            }
            (Effect::Unlink { dir, name }, Message::Runlinkat(_)) => {
                if let Some((root, gone)) = self.child(dir, name) {
                    for r in self.map.values_mut() {
                        if r.root == root && r.path.starts_with(&gone) {
                            r.replayable = false;
                        }
                    }
                }
            }
            (Effect::Unreplayable { fid }, _) => {
                self.map.insert(fid, unreplayable(fid, epoch));
            }
            _ => {}
        }
    }

    /// `(root, path)` of `name` in the directory `dir`.
    fn child(&self, dir: u32, name: String) -> Option<(u32, Vec<String>)> {
        let d = self.map.get(&dir)?;
        Some((d.root, joined(&d.path, &[name])))
    }

    /// Every fid at or under `from` is now at or under `to`.
    fn rebase(&mut self, from: (u32, Vec<String>), to: (u32, Vec<String>)) {
        for r in self.map.values_mut() {
            if r.root == from.0 && r.path.starts_with(&from.1) {
                let rest = r.path.split_off(from.1.len());
                r.root = to.0;
                r.path = to.1.iter().cloned().chain(rest).collect();
            }
        }
    }

    /// What to restore, roots first (every other fid walks from its root).
    pub(crate) fn plan(&self) -> Vec<(u32, Recipe)> {
        let mut plan: Vec<(u32, Recipe)> = self
            .map
            .iter()
            .filter(|(_, r)| r.replayable)
            .map(|(fid, r)| (*fid, r.clone()))
            .collect();
        plan.sort_by_key(|(fid, r)| (r.aname.is_none(), r.path.len(), *fid));
        plan
    }

    /// Marks the fids restored on connection `epoch`.
    pub(crate) fn restored(&mut self, fids: &[u32], epoch: u64) {
        for fid in fids {
            if let Some(r) = self.map.get_mut(fid) {
                r.epoch = epoch;
            }
        }
    }
}

fn unreplayable(fid: u32, epoch: u64) -> Recipe {
    Recipe {
        root: fid,
        aname: None,
        path: Vec::new(),
        qid: Qid::default(),
        open: None,
        replayable: false,
        epoch,
    }
}

/// `base` followed by `names`, with `.` dropped and `..` taken back lexically (a walk
/// never follows symlinks, and `..` at the root stays there).
fn joined(base: &[String], names: &[String]) -> Vec<String> {
    let mut path = base.to_vec();
    for name in names {
        match name.as_str() {
            "." | "" => {}
            ".." => {
                path.pop();
            }
            _ => path.push(name.clone()),
        }
    }
    path
}

/// One request at a time over a connection no task reads yet: the version exchange
/// and the restoring of fids.
pub(crate) struct Wire {
    stream: BoxStream,
    decoder: FrameDecoder,
    buf: BytesMut,
}

impl Wire {
    pub(crate) fn new(stream: BoxStream, msize: u32) -> Wire {
        Wire {
            stream,
            decoder: FrameDecoder::new(msize),
            buf: BytesMut::new(),
        }
    }

    /// Sends `msg` and waits for its reply: Rlerror is [`WireError::Refused`]; a
    /// failed connection, a reply that does not decode or one of the wrong type or tag
    /// is [`WireError::Broken`].
    pub(crate) async fn rpc(&mut self, tag: u16, msg: Message) -> Result<Message, WireError> {
        let mut frame = BytesMut::new();
        encode_frame(tag, &msg, &mut frame);
        self.stream
            .write_all(&frame)
            .await
            .map_err(|e| WireError::Broken(e.to_string()))?;
        loop {
            match self.decoder.decode(&mut self.buf) {
                Ok(Some(frame)) if frame.tag == tag => {
                    return match frame.body {
                        Ok(Message::Rlerror(e)) => Err(WireError::Refused(Errno(e.ecode))),
                        Ok(m) if m.type_id() == msg.type_id() + 1 => Ok(m),
                        Ok(m) => Err(WireError::Broken(format!("unexpected {}", m.name()))),
                        Err(e) => Err(WireError::Broken(e.to_string())),
                    };
                }
                Ok(Some(frame)) => {
                    return Err(WireError::Broken(format!(
                        "reply with unknown tag {}",
                        frame.tag
                    )))
                }
                Ok(None) => {}
                Err(e) => return Err(WireError::Broken(e.to_string())),
            }
            self.buf.reserve(4096);
            match self.stream.read_buf(&mut self.buf).await {
                Ok(0) => return Err(WireError::Broken("connection closed".into())),
                Ok(_) => {}
                Err(e) => return Err(WireError::Broken(e.to_string())),
            }
        }
    }

    /// The version exchange: asks `msize`, returns what the server granted after
    /// checking it speaks 9P2000.L and granted at least 4096 and at most `msize`.
    pub(crate) async fn version(&mut self, msize: u32) -> Result<u32, ConnectError> {
        let msg = Tversion {
            msize,
            version: VERSION_9P2000_L.into(),
        };
        let reply = match self.rpc(NOTAG, msg.into()).await {
            Ok(Message::Rversion(r)) => r,
            Ok(_) => unreachable!("rpc checks the reply type"),
            Err(WireError::Refused(e)) => {
                return Err(ConnectError::Handshake(format!("server refused: {e}")))
            }
            Err(WireError::Broken(why)) => return Err(ConnectError::Handshake(why)),
        };
        if reply.version != VERSION_9P2000_L {
            return Err(ConnectError::UnknownVersion(reply.version));
        }
        if reply.msize < wasm9p_proto::consts::MIN_MSIZE {
            return Err(ConnectError::MsizeTooSmall(reply.msize));
        }
        if reply.msize > msize {
            return Err(ConnectError::MsizeTooLarge {
                granted: reply.msize,
                asked: msize,
            });
        }
        self.decoder.set_max_size(reply.msize);
        Ok(reply.msize)
    }

    /// The stream and whatever was read past the last reply.
    pub(crate) fn into_parts(self) -> (BoxStream, FrameDecoder, BytesMut) {
        (self.stream, self.decoder, self.buf)
    }
}

/// Why one exchange on a [`Wire`] failed.
#[derive(Debug)]
pub(crate) enum WireError {
    /// The server answered Rlerror.
    Refused(Errno),
    /// The connection failed or the server sent nonsense.
    Broken(String),
}

/// The connection of session `weak` dropped at `lost`: connect to `addr` again and
/// restore the fids, or give up once the session timeout has passed.
pub(crate) async fn supervise<S: Supervised>(
    weak: Weak<S>,
    addr: Addr,
    lost: Instant,
    why: String,
) {
    let mut backoff = Duration::from_millis(50);
    let mut last = why;
    loop {
        let Some(session) = weak.upgrade() else {
            return;
        };
        let deadline = lost + session.config().timeout;
        let left = deadline.saturating_duration_since(Instant::now());
        if session.is_closing() || left.is_zero() {
            session.kill(&format!(
                "{last}; gave up reconnecting to {addr} after {:.1} s",
                lost.elapsed().as_secs_f64()
            ));
            return;
        }
        match tokio::time::timeout(left, restore(&*session, &addr)).await {
            Ok(Ok((wire, fids))) => {
                tracing::warn!(
                    "9p session to {addr} restored after {} ms ({} fids)",
                    lost.elapsed().as_millis(),
                    fids.len()
                );
                session.resume(wire, &fids);
                return;
            }
            Ok(Err(Restore::Fatal(why))) => {
                session.kill(&format!("reconnecting to {addr}: {why}"));
                return;
            }
            Ok(Err(Restore::Again(why))) => last = why,
            Err(_) => last = "reconnecting timed out".into(),
        }
        drop(session);
        tokio::time::sleep(backoff.min(left)).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

enum Restore {
    /// Worth another try (nothing listening yet, connection cut).
    Again(String),
    /// Will not get better (another protocol, a smaller msize).
    Fatal(String),
}

/// Connects, negotiates and restores every replayable fid; returns the connection and
/// the fids restored.
async fn restore<S: Supervised>(session: &S, addr: &Addr) -> Result<(Wire, Vec<u32>), Restore> {
    let config = session.config();
    let msize = session.msize();
    let stream = config
        .dialer
        .connect(addr, config.timeout)
        .await
        .map_err(|e| Restore::Again(e.to_string()))?;
    let mut wire = Wire::new(stream, config.msize.max(msize));
    let granted = wire.version(msize).await.map_err(|e| {
        if e.should_retry() {
            Restore::Again(e.to_string())
        } else {
            Restore::Fatal(e.to_string())
        }
    })?;
    if granted < msize {
        return Err(Restore::Fatal(format!(
            "server now grants msize {granted}, less than the {msize} in use"
        )));
    }
    let plan = session.plan();
    let mut restored = Vec::with_capacity(plan.len());
    for (fid, recipe) in plan {
        match restore_fid(&mut wire, config, fid, &recipe).await {
            Ok(true) => restored.push(fid),
            Ok(false) => {
                tracing::debug!(
                    "9p: fid {fid} ({}) cannot be restored",
                    recipe.path.join("/")
                );
            }
            Err(why) => return Err(Restore::Again(why)),
        }
    }
    Ok((wire, restored))
}

/// Binds `fid` again as `recipe` says: `Ok(false)` when the server refuses or the
/// file is not the one it was, `Err` when the connection failed.
async fn restore_fid(
    wire: &mut Wire,
    config: &ClientConfig,
    fid: u32,
    recipe: &Recipe,
) -> Result<bool, String> {
    let outcome = async {
        let qid = if let Some(aname) = &recipe.aname {
            let msg = Tattach {
                fid,
                afid: NOFID,
                uname: config.uname.clone(),
                aname: aname.clone(),
                n_uname: config.n_uname,
            };
            match wire.rpc(0, msg.into()).await? {
                Message::Rattach(r) => r.qid,
                _ => unreachable!("rpc checks the reply type"),
            }
        } else {
            walk_in_place(wire, recipe.root, fid, &recipe.path).await?
        };
        if qid.path != recipe.qid.path || qid.ty != recipe.qid.ty {
            return Err(WireError::Refused(Errno::ESTALE));
        }
        if let Some(flags) = recipe.open {
            let flags = flags & !(open::CREAT | open::EXCL | open::TRUNC);
            wire.rpc(0, Tlopen { fid, flags }.into()).await?;
        }
        Ok(())
    }
    .await;
    match outcome {
        Ok(()) => Ok(true),
        Err(WireError::Broken(why)) => Err(why),
        Err(WireError::Refused(_)) => {
            // The fid may be bound (a walk that reached another file, an open that
            // failed); a server that never bound it answers the clunk with an error.
            match wire.rpc(0, Tclunk { fid }.into()).await {
                Err(WireError::Broken(why)) => Err(why),
                _ => Ok(false),
            }
        }
    }
}

/// Walks `root` through `path` to `fid` (16 names per Twalk, then in place), and
/// returns the qid it ends at.
async fn walk_in_place(
    wire: &mut Wire,
    root: u32,
    fid: u32,
    path: &[String],
) -> Result<Qid, WireError> {
    let mut from = root;
    let mut qid = None;
    let mut chunks: Vec<&[String]> = path.chunks(MAXWELEM).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    for chunk in chunks {
        let msg = Twalk {
            fid: from,
            newfid: fid,
            wnames: chunk.to_vec(),
        };
        match wire.rpc(0, msg.into()).await? {
            Message::Rwalk(r) if r.wqids.len() == chunk.len() => {
                qid = r.wqids.last().copied().or(qid);
            }
            _ => return Err(WireError::Refused(Errno::ENOENT)),
        }
        from = fid;
    }
    match qid {
        Some(qid) => Ok(qid),
        // A walk of no names: the root's own qid.
        None => match wire
            .rpc(
                0,
                wasm9p_proto::Tgetattr {
                    fid,
                    request_mask: 0,
                }
                .into(),
            )
            .await?
        {
            Message::Rgetattr(r) => Ok(r.qid),
            _ => unreachable!("rpc checks the reply type"),
        },
    }
}

/// A frame kept for sending again: the head (or whole frame) and the payload.
pub(crate) type Frame = (Bytes, Option<Bytes>);
