//! `ninep`: a 9P mount, with the v9fs-style metadata caches in front of the client.
//!
//! Nodes are named by their path from the mount root (plus the qid they were found
//! with); a miss walks from the attached root with the whole path in one Twalk (16
//! names per message), so probing a missing header costs one round trip and creates no
//! fid on the server. With `cache=loose` (META), positive dentries, symlink targets and
//! attributes are kept in the mount's [`MountCache`]; negative dentries are kept for
//! `negtimeout` in any mode. Every local change drops the entries it makes stale
//! (create, mkdir, symlink, rename and unlink drop the names they touch; a write drops
//! the file's attributes). Concurrent misses for the same name share one walk.
//!
//! In the modes that cache no metadata (`none`, `readahead`, `mmap`), where every
//! lookup asks the server, a node keeps the fid its lookup walked to instead (as
//! v9fs keeps one per dentry; `NinepNode::held`): a path resolves as one Twalk of
//! one name per component, each from its parent's fid, and a stat of a node is one
//! Tgetattr on its own fid. The fid is clunked with the node's last copy.
//!
//! Open files ([`Backend::open`]) read through the mount's page cache (shared by every
//! open, keyed by qid version) when the mode has FILE, buffer writes when it has
//! WRITEBACK, and in loose mode reopen a file read before without any RPC (see
//! `file`). A stat or truncate by path first sends what open files still buffer.
//! A read-only open that must ask the server fetches the file's attributes with it; it,
//! a listing read cold, a stat and a link read go as one flight (the walk and what
//! follows on its fid) to a server that promises to start a connection's requests in
//! order (`flight`, `pipeline=on`).
//!
//! What the mount caches and how long it believes it is its [`Policy`] (its
//! [`Trust`](crate::mount_options::Trust), kept by its cache): forever in loose
//! mode, else for a window (`revalidate=MS`; every use in a metadata mode without
//! LOOSE). Past it, an answer about a name is checked by its directory's version
//! (`check`: one request confirms every name cached in a directory), attributes
//! and symlink targets by the file's qid, and an open always asks the server for the
//! file's version (close-to-open), keying its pages by it; a server that keeps no
//! versions (diod: 0) gets each answer fetched again after the window, and a file's
//! pages keyed by its attributes (size, mtime, ctime).
//! With `cache=fscache` the caches are also kept on disk for later processes, and
//! what comes from there is confirmed with the server before use (`store`).
//!
//! One file per concern: `lookup` (names, link targets, attributes), `edits` (making,
//! removing, renaming and linking names; setting attributes), `opens` (when an open
//! asks the server), `file` (an open file: pages, write-back), `flight` (requests sent
//! as one flight), `check` (confirming answers past the window), `complete` (listings
//! and complete directories), `store` (`cache=fscache`) and `deferred` (opens that
//! have not reached the server, opened there before a change takes their file). The backend's fields are
//! private to them; the namespace sees [`NinepFs::attach`], the [`Backend`] trait,
//! the counters and [`NinepFs::persist`].

mod check;
mod coalesce;
mod complete;
mod deferred;
mod edits;
mod file;
mod flight;
mod lookup;
mod opens;
mod store;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use wasm9p_proto::consts::open;
use wasm9p_proto::{Errno, Qid, Rgetattr};

use super::{Backend, BoxFuture, NewNode, OpenFile, OpenFlags, SetAttr};
use crate::cache::{CacheStats, Lookup, MountCache, Policy};
use crate::client::{Fid, ReconnectStats, Session};
use crate::mount_options::NinepOptions;
use crate::node::{Attr, Entry, Kind, Node, Special, StatFs};
use crate::path::SharedPath;
use coalesce::Coalesced;
use deferred::Deferrals;
use file::Writers;

/// A snapshot of a mount's counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountStats {
    /// Requests sent, by message name without its `T` (`"walk"`, `"read"`...).
    pub rpc: Vec<(&'static str, u64)>,
    /// All requests sent.
    pub rpc_total: u64,
    /// Lookups the server answered with "no such name" (each a Twalk that found
    /// nothing: what the negative cache saves).
    pub failed_walks: u64,
    /// Cache hits and misses.
    pub cache: CacheStats,
    /// Bytes held by the caches now (at most `cache_size`).
    pub cache_bytes: u64,
    /// What reconnecting did (`reconnect=on`; zero otherwise).
    pub reconnect: ReconnectStats,
    /// Flights sent (`pipeline=on`): cold opens (walk, open, attributes, first read),
    /// listings (walk, open, first entries), stats (walk, attributes) and link reads
    /// (walk, readlink), each with its walk.
    pub flights: u64,
    /// Requests of a flight the server refused while its walk succeeded, sent again
    /// after the walk's reply (0 on a server that keeps its promise of order).
    pub flight_retries: u64,
}

/// What a 9p node carries besides its id.
#[derive(Debug)]
struct NinepNode {
    path: SharedPath,
    qid: Qid,
    /// In a mode that caches no metadata, the fid its lookup walked to, kept while the
    /// node is (clunked with its last copy): its children are walked to from it, one
    /// name each, and its attributes asked through it, with no walk from the root (as
    /// the Linux kernel keeps a fid per dentry). Not opened: opens walk a fid of their
    /// own.
    held: Option<Arc<Fid>>,
}

/// A mounted 9P export.
pub struct NinepFs {
    root: Arc<Fid>,
    cache: Arc<MountCache>,
    failed_walks: AtomicU64,
    /// Lookups under way, by directory and name.
    lookups: Coalesced<(u64, String), Result<Qid, Errno>>,
    /// Lookups from a directory's kept fid under way (see [`NinepNode::held`]).
    held_lookups: Coalesced<(u64, String), Result<Arc<Fid>, Errno>>,
    /// Directory checks under way, by directory.
    dir_checks: Coalesced<u64, Result<u32, Errno>>,
    /// `complete_dirs=K` in a metadata mode: list a directory once it has sent K
    /// lookups to the server (see [`crate::cache`]'s complete directories).
    complete_after: Option<u32>,
    /// Lookups each directory has sent to the server (bounded: forgotten wholesale
    /// past [`MAX_COUNTED_DIRS`] directories).
    dir_misses: std::sync::Mutex<std::collections::HashMap<u64, u32>>,
    /// Listings being read, by directory.
    listings: Coalesced<u64, ()>,
    /// Directories' records being taken from the store on disk.
    store_loads: Coalesced<u64, ()>,
    /// The store's records confirmed together at its first use (`store`; not where
    /// nothing is believed between uses, as each would be confirmed again at its use).
    store_ahead: tokio::sync::OnceCell<()>,
    writers: Arc<Writers>,
    /// Opens not yet sent to the server, opened before a change takes their file.
    deferrals: Deferrals,
}

/// Most directories whose lookups are counted at once.
const MAX_COUNTED_DIRS: usize = 1 << 16;

impl std::fmt::Debug for NinepFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NinepFs")
            .field("root", &self.root)
            .field("cache", &self.cache)
            .finish()
    }
}

/// The node at `path` with qid `q`, keeping `held` (see [`NinepNode::held`]).
fn node_holding(path: SharedPath, q: Qid, held: Option<Arc<Fid>>) -> Node {
    Node {
        id: q.path,
        kind: Kind::of_qid(&q),
        handle: Some(Arc::new(NinepNode { path, qid: q, held })),
    }
}

fn node(path: SharedPath, q: Qid) -> Node {
    node_holding(path, q, None)
}

/// A node that keeps the fid `held`, at its qid.
fn held_node(path: SharedPath, held: Arc<Fid>) -> Node {
    node_holding(path, held.qid, Some(held))
}

fn parts(n: &Node) -> Result<&NinepNode, Errno> {
    n.handle
        .as_ref()
        .and_then(|h| h.downcast_ref::<NinepNode>())
        .ok_or(Errno::EINVAL)
}

fn child_path(dir: &Node, name: &str) -> Result<SharedPath, Errno> {
    Ok(parts(dir)?.path.join(name))
}

fn attr_of(a: &Rgetattr) -> Attr {
    Attr {
        mode: a.mode & 0o7777,
        special: Special::from_mode(a.mode),
        rdev: a.rdev,
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        nlink: a.nlink,
        ino: a.qid.path,
        mtime: (a.mtime_sec, a.mtime_nsec as u32),
        atime: (a.atime_sec, a.atime_nsec as u32),
        ctime: (a.ctime_sec, a.ctime_nsec as u32),
    }
}

impl NinepFs {
    /// Attaches to `aname` on `session` with these options.
    pub async fn attach(
        session: &Session,
        aname: &str,
        options: &NinepOptions,
    ) -> Result<NinepFs, Errno> {
        NinepFs::attach_sharing(session, aname, options, None).await
    }

    /// Like [`NinepFs::attach`], with the pages and metadata of fixed contents kept in
    /// `shared` too, for the other mounts given it (a server that promises what is
    /// fixed: see [`SharedCache`](crate::cache::SharedCache)).
    pub async fn attach_sharing(
        session: &Session,
        aname: &str,
        options: &NinepOptions,
        shared: Option<Arc<crate::cache::SharedCache>>,
    ) -> Result<NinepFs, Errno> {
        if !options.pipeline {
            session.without_flights();
        }
        let root = session.attach(aname).await?;
        let policy = Policy::of(options);
        let cache = MountCache::new(options.cache_size, options.negtimeout).with_policy(policy);
        let cache = store::with_store(cache, store::open_store(options, aname)).sharing(shared);
        cache.dir_seen(root.qid.path, root.qid.version, cache.asking());
        Ok(NinepFs {
            root: Arc::new(root),
            cache: Arc::new(cache),
            failed_walks: AtomicU64::new(0),
            lookups: Coalesced::default(),
            held_lookups: Coalesced::default(),
            dir_checks: Coalesced::default(),
            complete_after: options.complete_dirs.filter(|_| policy.metadata()),
            dir_misses: Default::default(),
            listings: Coalesced::default(),
            store_loads: Coalesced::default(),
            store_ahead: tokio::sync::OnceCell::new(),
            writers: Arc::default(),
            deferrals: Deferrals::default(),
        })
    }

    /// Whether nodes keep the fid their lookup walked to ([`NinepNode::held`]): in
    /// the modes that cache no metadata, where every lookup asks the server.
    fn keeps_fids(&self) -> bool {
        !self.policy().metadata()
    }

    /// The mount's cache counters.
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// Everything `--stats` prints for this mount: RPCs by message type, their total,
    /// the cache counters, and the bytes the caches hold.
    pub fn stats(&self) -> MountStats {
        let counts = self.session().counts();
        let (flights, flight_retries) = self.session().flights();
        MountStats {
            rpc: counts.snapshot(),
            rpc_total: counts.total(),
            failed_walks: self.failed_walks.load(Ordering::Relaxed),
            cache: self.cache.stats(),
            cache_bytes: self.cache.bytes(),
            reconnect: self.session().reconnects(),
            flights,
            flight_retries,
        }
    }

    /// What the mount caches and how long it believes it (kept by its cache).
    fn policy(&self) -> Policy {
        self.cache.policy()
    }

    /// The session under the mount (its RPC counts, live fids).
    pub fn session(&self) -> &Session {
        self.root.session()
    }
}

impl Drop for NinepFs {
    /// What the mount learnt goes to its store (`cache=fscache`).
    fn drop(&mut self) {
        let _ = self.persist(); // a failure was said once, by the store
    }
}

impl Backend for NinepFs {
    fn root(&self) -> Node {
        match self.keeps_fids() {
            true => held_node(SharedPath::root(), self.root.clone()),
            false => node(SharedPath::root(), self.root.qid),
        }
    }

    fn lookup_cached(&self, dir: &Node, name: &str) -> Option<Result<Node, Errno>> {
        let found = match self.cache.lookup(dir.id, name) {
            Lookup::Found(q) => Some(q),
            Lookup::Missing => None,
            Lookup::Unconfirmed { .. } => return None,
            // What another mount learnt of a directory this one never changed (a
            // server that promises fixed contents; see `SharedCache`).
            Lookup::Unknown if self.policy().metadata() => {
                self.cache.shared_lookup(parts(dir).ok()?.qid, name)?
            }
            Lookup::Unknown => return None,
        };
        Some(match found {
            Some(q) => child_path(dir, name).map(|path| node(path, q)),
            None => Err(Errno::ENOENT),
        })
    }

    fn lookup<'a>(&'a self, dir: &'a Node, name: &'a str) -> BoxFuture<'a, Result<Node, Errno>> {
        Box::pin(self.lookup_name(dir, name))
    }

    fn readlink_cached(&self, link: &Node) -> Option<Arc<str>> {
        if !self.policy().symlinks() {
            return None;
        }
        let qid = parts(link).ok()?.qid;
        self.cache
            .symlink(qid)
            .or_else(|| self.cache.stored_symlink(qid))
            .or_else(|| self.cache.shared_link(qid))
    }

    fn readlink<'a>(&'a self, link: &'a Node) -> BoxFuture<'a, Result<Arc<str>, Errno>> {
        Box::pin(self.read_link(link))
    }

    fn getattr<'a>(&'a self, n: &'a Node) -> BoxFuture<'a, Result<Attr, Errno>> {
        Box::pin(self.attributes(n))
    }

    fn readdir<'a>(
        &'a self,
        dir: &'a Node,
        cookie: u64,
    ) -> BoxFuture<'a, Result<Vec<Entry>, Errno>> {
        Box::pin(self.read_dir(dir, cookie))
    }

    fn make<'a>(
        &'a self,
        dir: &'a Node,
        name: &'a str,
        what: NewNode<'a>,
    ) -> BoxFuture<'a, Result<Node, Errno>> {
        Box::pin(self.make_node(dir, name, what))
    }

    fn sync_dir<'a>(&'a self, dir: &'a Node) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(async move {
            // The server fsyncs an open directory fid.
            let fid = self.walk(&parts(dir)?.path).await?;
            fid.lopen(open::RDONLY | open::DIRECTORY).await?;
            fid.fsync(false).await
        })
    }

    fn unlink<'a>(
        &'a self,
        dir: &'a Node,
        name: &'a str,
        dir_only: bool,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(self.remove(dir, name, dir_only))
    }

    fn rename<'a>(
        &'a self,
        from_dir: &'a Node,
        from: &'a str,
        to_dir: &'a Node,
        to: &'a str,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(self.move_name(from_dir, from, to_dir, to))
    }

    fn setattr<'a>(
        &'a self,
        node: &'a Node,
        attr: &'a SetAttr,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(self.set_attributes(node, attr))
    }

    fn link<'a>(
        &'a self,
        target: &'a Node,
        dir: &'a Node,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(self.hard_link(target, dir, name))
    }

    fn statfs<'a>(&'a self, node: &'a Node) -> BoxFuture<'a, Result<StatFs, Errno>> {
        Box::pin(async move {
            let s = self.walk(&parts(node)?.path).await?.statfs().await?;
            Ok(StatFs {
                bsize: s.bsize,
                blocks: s.blocks,
                bfree: s.bfree,
                bavail: s.bavail,
                files: s.files,
                ffree: s.ffree,
                namelen: s.namelen,
            })
        })
    }

    fn open<'a>(
        &'a self,
        file: &'a Node,
        flags: OpenFlags,
    ) -> BoxFuture<'a, Result<Box<dyn OpenFile>, Errno>> {
        Box::pin(self.open_node(file, flags))
    }

    fn read_at<'a>(
        &'a self,
        file: &'a Node,
        offset: u64,
        len: usize,
    ) -> BoxFuture<'a, Result<Bytes, Errno>> {
        Box::pin(async move {
            let fid = self.walk(&parts(file)?.path).await?;
            fid.lopen(open::RDONLY).await?;
            fid.read_at(offset, len).await
        })
    }

    fn write_at<'a>(
        &'a self,
        file: &'a Node,
        offset: u64,
        data: Bytes,
    ) -> BoxFuture<'a, Result<usize, Errno>> {
        Box::pin(async move {
            let fid = self.walk(&parts(file)?.path).await?;
            fid.lopen(open::WRONLY).await?;
            let len = data.len();
            let result = fid.write_all_at(offset, data).await;
            self.cache.forget_attr(file.id);
            self.cache.mark_written(file.id);
            result.map(|()| len)
        })
    }
}
