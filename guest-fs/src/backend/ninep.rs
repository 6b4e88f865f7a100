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
//! Open files ([`Backend::open`]) read through the mount's page cache (shared by every
//! open, keyed by qid version) when the mode has FILE, buffer writes when it has
//! WRITEBACK, and in loose mode reopen a file read before without any RPC (see
//! `ninep_file`). A stat or truncate by path first sends what open files still buffer.
//! A read-only open that must ask the server fetches the file's attributes with it; it,
//! a listing read cold, a stat and a link read go as one flight (the walk and what
//! follows on its fid) to a server that promises to start a connection's requests in
//! order (`ninep_flight`, `pipeline=on`).
//!
//! How long cached answers are believed is the mount's [`Trust`]: forever in loose
//! mode, else for a window (`revalidate=MS`; every use in a metadata mode without
//! LOOSE). Past it, an answer about a name is checked by its directory's version
//! (`ninep_check`: one request confirms every name cached in a directory), attributes
//! and symlink targets by the file's qid, and an open always asks the server for the
//! file's version (close-to-open), keying its pages by it; a server that keeps no
//! versions (diod: 0) gets each answer fetched again after the window, and a file's
//! pages keyed by its attributes (size, mtime, ctime).
//! With `cache=fscache` the caches are also kept on disk for later processes, and
//! what comes from there is confirmed with the server before use (`ninep_store`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use wasm9p_proto::consts::{open, AT_REMOVEDIR};
use wasm9p_proto::{Errno, Qid, Rgetattr};

use super::flights::Flights;
use super::ninep_check::content_stamp;
use super::ninep_file::{NinepFile, Source, Writers};
use super::{Attr, Backend, BoxFuture, Entry, Kind, Node, OpenFile, OpenFlags, SetAttr, StatFs};
use crate::cache::{CacheStats, Lookup, MountCache};
use crate::client::{Fid, ReconnectStats, Session};
use crate::mount_options::{CacheMode, NinepOptions, Trust};
use crate::path::SharedPath;

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
pub(super) struct NinepNode {
    pub(super) path: SharedPath,
    pub(super) qid: Qid,
}

/// A mounted 9P export.
pub struct NinepFs {
    pub(super) root: Arc<Fid>,
    pub(super) cache: Arc<MountCache>,
    pub(super) mode: CacheMode,
    pub(super) meta: bool,
    /// `meta` and `symlink_cache=on`.
    pub(super) symlinks: bool,
    /// The cache's trust is a window: what is older gets checked.
    pub(super) checks: bool,
    /// `nocto`: opens believe a file's version for the window, like the rest.
    nocto: bool,
    /// A read-only open that asks the server fetches the file's attributes with it
    /// (`open_in_flight`): metadata is cached, and believed for more than one use.
    pub(super) opens_with_attrs: bool,
    failed_walks: AtomicU64,
    /// Lookups in flight, by directory and name.
    inflight: Flights<(u64, String), Result<Qid, Errno>>,
    /// Directory checks in flight, by directory.
    pub(super) dir_checks: Flights<u64, Result<u32, Errno>>,
    /// `complete_dirs=K` in a metadata mode: list a directory once it has sent K
    /// lookups to the server (see [`crate::cache`]'s complete directories).
    pub(super) complete_after: Option<u32>,
    /// Lookups each directory has sent to the server (bounded: forgotten wholesale
    /// past [`MAX_COUNTED_DIRS`] directories).
    pub(super) dir_misses: std::sync::Mutex<std::collections::HashMap<u64, u32>>,
    /// Listings being read, by directory.
    pub(super) listings: Flights<u64, ()>,
    /// Directories' records being taken from the store on disk.
    pub(super) store_loads: Flights<u64, ()>,
    /// The store's records confirmed together at its first use (`ninep_store`).
    pub(super) store_ahead: tokio::sync::OnceCell<()>,
    /// Whether they may be: not when nothing is believed for any time
    /// (`revalidate=0`), as each would be confirmed again at its use.
    pub(super) confirms_ahead: bool,
    pub(super) writers: Arc<Writers>,
}

/// Most directories whose lookups are counted at once.
pub(super) const MAX_COUNTED_DIRS: usize = 1 << 16;

impl std::fmt::Debug for NinepFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NinepFs")
            .field("root", &self.root)
            .field("cache", &self.cache)
            .finish()
    }
}

fn node(path: SharedPath, q: Qid) -> Node {
    Node {
        id: q.path,
        kind: Kind::of_qid(&q),
        handle: Some(Arc::new(NinepNode { path, qid: q })),
    }
}

pub(super) fn parts(n: &Node) -> Result<&NinepNode, Errno> {
    n.handle
        .as_ref()
        .and_then(|h| h.downcast_ref::<NinepNode>())
        .ok_or(Errno::EINVAL)
}

fn child_path(dir: &Node, name: &str) -> Result<SharedPath, Errno> {
    Ok(parts(dir)?.path.join(name))
}

pub(super) fn attr_of(a: &Rgetattr) -> Attr {
    Attr {
        mode: a.mode & 0o7777,
        special: super::Special::from_mode(a.mode),
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
        if !options.pipeline {
            session.without_flights();
        }
        let root = session.attach(aname).await?;
        let trust = options.trust();
        let cache = MountCache::new(options.cache_size, options.negtimeout).trusting(trust);
        let cache =
            super::ninep_store::with_store(cache, super::ninep_store::open_store(options, aname));
        cache.dir_seen(root.qid.path, root.qid.version, cache.asking());
        Ok(NinepFs {
            root: Arc::new(root),
            cache: Arc::new(cache),
            mode: options.cache,
            meta: options.cache.has(CacheMode::META),
            symlinks: options.cache.has(CacheMode::META) && options.symlink_cache,
            checks: trust != Trust::Forever,
            nocto: options.nocto,
            opens_with_attrs: options.cache.has(CacheMode::META)
                && !matches!(trust, Trust::For(window) if window.is_zero()),
            failed_walks: AtomicU64::new(0),
            inflight: Flights::default(),
            dir_checks: Flights::default(),
            complete_after: options
                .complete_dirs
                .filter(|_| options.cache.has(CacheMode::META)),
            dir_misses: Default::default(),
            listings: Flights::default(),
            store_loads: Flights::default(),
            store_ahead: tokio::sync::OnceCell::new(),
            confirms_ahead: !matches!(trust, Trust::For(window) if window.is_zero()),
            writers: Arc::default(),
        })
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

    /// The session under the mount (its RPC counts, live fids).
    pub fn session(&self) -> &Session {
        self.root.session()
    }

    pub(super) async fn walk(&self, path: &SharedPath) -> Result<Fid, Errno> {
        self.walk_path(&path.to_vec())
            .await
            .map(|w| w.fid)
            .map_err(|e| e.errno)
    }

    /// One walk for a dentry miss, shared by everyone missing the same name at once.
    async fn lookup_remote(&self, dir: &Node, name: &str) -> Result<Qid, Errno> {
        self.inflight
            .run((dir.id, name.to_owned()), || async {
                let path = child_path(dir, name)?.to_vec();
                let before = self.seen_before(dir);
                match self.walk_path(&path).await {
                    Ok(walk) => {
                        let q = walk.qids.last().copied().ok_or(Errno::EIO)?;
                        if self.meta {
                            let seen = Self::seen_in(dir, &walk.qids, path.len(), before);
                            self.cache.insert_dentry_seen(dir.id, name, q, seen);
                        }
                        Ok(q)
                    }
                    Err(e) => {
                        if e.errno == Errno::ENOENT {
                            self.failed_walks.fetch_add(1, Ordering::Relaxed);
                        }
                        // Cache the absence only of this very name, not of a parent
                        // that vanished meanwhile.
                        if e.errno == Errno::ENOENT && e.index + 1 == path.len() {
                            let seen = Self::seen_in(dir, &e.qids, path.len(), before);
                            self.cache.insert_negative_seen(dir.id, name, seen);
                        }
                        Err(e.errno)
                    }
                }
            })
            .await
    }

    /// An answer about `name` in `dir` past the trust window, confirmed if the
    /// directory still has the version it was learnt under.
    async fn confirm_lookup(&self, dir: &Node, name: &str) -> Option<Result<Qid, Errno>> {
        let Lookup::Unconfirmed { found, dir_version } = self.cache.peek_lookup(dir.id, name)
        else {
            return None;
        };
        if dir_version == 0 {
            return None;
        }
        let names = parts(dir).ok()?.path.to_vec();
        if self.check_dir(dir, &names).await.ok()? != dir_version {
            return None;
        }
        self.cache.count_revalidated();
        Some(found.ok_or(Errno::ENOENT))
    }

    /// A name was created or replaced locally: drop what was known, record the new.
    fn created(&self, dir: &Node, name: &str, q: Qid) {
        self.cache.forget(dir.id, name);
        self.cache.dir_changed(dir.id); // its listing, mtime, and nlink for a new directory
        if self.meta {
            self.cache.insert_dentry(dir.id, name, q);
            self.cache.complete_added(dir.id, name, q);
            // Nothing is known of what is new (a listing kept under its qid path is
            // a removed directory's whose inode number the server reused).
            self.cache.complete_forget(q.path);
        }
    }
}

impl NinepFs {
    /// A read-only open of the node cached as `cached` (at `cached_generation`) that
    /// asked the server at `at` found the file at `qid`: the next open may not need
    /// to. Keyed as the next open will look it up: loose (and nocto), by the cached
    /// node's qid; checking, by the version the server gave. Made again after every
    /// walk: `at` says when the server was last asked.
    fn remember_readable(
        &self,
        cached: Qid,
        qid: Qid,
        deferrable: bool,
        cached_generation: u64,
        at: Instant,
    ) {
        if !(deferrable || self.checks) {
            return;
        }
        let (mark, generation) = match deferrable {
            true => (cached, cached_generation),
            false => (qid, self.cache.generation(qid.path)),
        };
        self.cache
            .insert_readable(mark.path, mark.version, generation, qid.version, at);
    }
}

impl Drop for NinepFs {
    /// What the mount learnt goes to its store (`cache=fscache`).
    fn drop(&mut self) {
        let _ = self.persist(); // a failure was said once, by the store
    }
}

impl NinepFs {
    pub(super) async fn open_file(
        &self,
        source: Source,
        qid: Qid,
        flags: OpenFlags,
    ) -> Result<Box<dyn OpenFile>, Errno> {
        let open = NinepFile::open(
            source,
            qid,
            flags,
            self.mode,
            self.cache.clone(),
            &self.writers,
        )
        .await?;
        Ok(Box::new(open))
    }
}

impl Backend for NinepFs {
    fn root(&self) -> Node {
        node(SharedPath::root(), self.root.qid)
    }

    fn lookup_cached(&self, dir: &Node, name: &str) -> Option<Result<Node, Errno>> {
        match self.cache.lookup(dir.id, name) {
            Lookup::Found(q) => Some(child_path(dir, name).map(|path| node(path, q))),
            Lookup::Missing => Some(Err(Errno::ENOENT)),
            Lookup::Unknown | Lookup::Unconfirmed { .. } => None,
        }
    }

    fn lookup<'a>(&'a self, dir: &'a Node, name: &'a str) -> BoxFuture<'a, Result<Node, Errno>> {
        Box::pin(async move {
            let confirmed = match self.checks {
                true => self.confirm_lookup(dir, name).await,
                false => None,
            };
            let q = match confirmed {
                Some(answer) => answer?,
                None => match self.answer_from_store(dir, name).await {
                    Some(answer) => answer?,
                    None => match self.answer_from_listing(dir, name).await {
                        Some(answer) => answer?,
                        None => self.lookup_remote(dir, name).await?,
                    },
                },
            };
            Ok(node(child_path(dir, name)?, q))
        })
    }

    fn readlink_cached(&self, link: &Node) -> Option<Arc<str>> {
        if !self.symlinks {
            return None;
        }
        let qid = parts(link).ok()?.qid;
        self.cache
            .symlink(qid)
            .or_else(|| self.cache.stored_symlink(qid))
    }

    fn readlink<'a>(&'a self, link: &'a Node) -> BoxFuture<'a, Result<Arc<str>, Errno>> {
        Box::pin(async move {
            let n = parts(link)?;
            if self.symlinks {
                if let Some(target) = self.link_from_store(link).await {
                    return Ok(target);
                }
            }
            let asked = self.cache.asking();
            let (fid, target) = self.readlink_in_flight(&n.path, asked).await?;
            let target: Arc<str> = Arc::from(target);
            if self.symlinks {
                let read_at = if fid.qid.path == n.qid.path {
                    fid.qid.version
                } else {
                    0
                };
                self.cache
                    .insert_symlink_read(n.qid, target.clone(), read_at, asked);
            }
            Ok(target)
        })
    }

    fn getattr<'a>(&'a self, n: &'a Node) -> BoxFuture<'a, Result<Attr, Errno>> {
        Box::pin(async move {
            if self.meta {
                if let Some(a) = self.cache.attr(n.id) {
                    return Ok(attr_of(&a));
                }
            }
            // Writes still buffered by open files count: send them first.
            self.writers.push_out(n.id).await;
            if let Some(a) = self.attr_from_store(n).await {
                return Ok(attr_of(&a));
            }
            let path = &parts(n)?.path;
            let asked = self.cache.asking();
            // Attributes past the window may be confirmed by the walk's qid alone;
            // else the walk and the Tgetattr go together (one flight, where it flies).
            let checkable = self.meta && self.checks && self.cache.unconfirmed_attr(n.id).is_some();
            if !checkable {
                let a = self.getattr_in_flight(path, asked).await?;
                let attr = attr_of(&a);
                if self.meta {
                    self.cache.insert_attr(a, asked);
                }
                return Ok(attr);
            }
            let fid = self.walk(path).await?;
            if self.meta && self.checks && !path.is_empty() {
                // Attributes past the window stand if the file's version has not moved
                // (the walk's qid says; a server without versions always sends 0).
                if let Some(old) = self.cache.unconfirmed_attr(n.id) {
                    if old.qid == fid.qid && fid.qid.version != 0 {
                        self.cache.count_revalidated();
                        self.cache.confirm_attr(old.clone(), asked);
                        return Ok(attr_of(&old));
                    }
                }
            }
            let a = fid.getattr().await?;
            let attr = attr_of(&a);
            if self.meta {
                self.cache.insert_attr(a, asked);
            }
            Ok(attr)
        })
    }

    fn readdir<'a>(
        &'a self,
        dir: &'a Node,
        cookie: u64,
    ) -> BoxFuture<'a, Result<Vec<Entry>, Errno>> {
        Box::pin(self.read_dir(dir, cookie))
    }

    fn mkdir<'a>(
        &'a self,
        dir: &'a Node,
        name: &'a str,
        mode: u32,
    ) -> BoxFuture<'a, Result<Node, Errno>> {
        Box::pin(async move {
            let q = self
                .walk(&parts(dir)?.path)
                .await?
                .mkdir(name, mode, 0)
                .await?;
            self.created(dir, name, q);
            Ok(node(child_path(dir, name)?, q))
        })
    }

    fn create<'a>(
        &'a self,
        dir: &'a Node,
        name: &'a str,
        mode: u32,
        exclusive: bool,
    ) -> BoxFuture<'a, Result<Node, Errno>> {
        Box::pin(async move {
            let mut fid = self.walk(&parts(dir)?.path).await?;
            let flags = open::RDWR | open::CREAT | if exclusive { open::EXCL } else { 0 };
            let q = fid.lcreate(name, flags, mode, 0).await?.qid;
            self.created(dir, name, q);
            Ok(node(child_path(dir, name)?, q))
        })
    }

    fn symlink<'a>(
        &'a self,
        dir: &'a Node,
        name: &'a str,
        target: &'a str,
    ) -> BoxFuture<'a, Result<Node, Errno>> {
        Box::pin(async move {
            let q = self
                .walk(&parts(dir)?.path)
                .await?
                .symlink(name, target, 0)
                .await?;
            self.created(dir, name, q);
            Ok(node(child_path(dir, name)?, q))
        })
    }

    fn sync_dir<'a>(&'a self, dir: &'a Node) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(async move {
            // The server fsyncs an open directory fid.
            let fid = self.walk(&parts(dir)?.path).await?;
            fid.lopen(open::RDONLY | open::DIRECTORY).await?;
            fid.fsync(false).await
        })
    }

    fn mknod<'a>(
        &'a self,
        dir: &'a Node,
        name: &'a str,
        special: super::Special,
        mode: u32,
        rdev: u64,
    ) -> BoxFuture<'a, Result<Node, Errno>> {
        Box::pin(async move {
            let (major, minor) = (rustix::fs::major(rdev), rustix::fs::minor(rdev));
            let q = self
                .walk(&parts(dir)?.path)
                .await?
                .mknod(name, special.mode_bits() | (mode & 0o7777), major, minor, 0)
                .await?;
            self.created(dir, name, q);
            Ok(node(child_path(dir, name)?, q))
        })
    }

    fn unlink<'a>(
        &'a self,
        dir: &'a Node,
        name: &'a str,
        dir_only: bool,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(async move {
            if self.meta && !matches!(self.cache.lookup(dir.id, name), Lookup::Found(_)) {
                // Learn which file goes, so that its cached attributes (reachable by
                // another hard link) can be dropped with it.
                let _ = self.lookup_remote(dir, name).await;
            }
            let fid = self.walk(&parts(dir)?.path).await?;
            let gone = match self.cache.peek_lookup(dir.id, name) {
                Lookup::Found(q) => Some(q),
                _ => None,
            };
            let result = fid
                .unlinkat(name, if dir_only { AT_REMOVEDIR } else { 0 })
                .await;
            // Whatever happened, what we knew about the name may be wrong now.
            self.cache.forget(dir.id, name);
            self.cache.dir_changed(dir.id);
            match result {
                Ok(()) => {
                    self.cache.complete_removed(dir.id, name);
                    // A removed directory's listing must not outlive it: a directory
                    // made later may get its inode number, and so its qid path.
                    if let Some(q) = gone {
                        self.cache.complete_forget(q.path);
                    }
                }
                Err(_) => self.cache.complete_forget(dir.id),
            }
            result
        })
    }

    fn rename<'a>(
        &'a self,
        from_dir: &'a Node,
        from: &'a str,
        to_dir: &'a Node,
        to: &'a str,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(async move {
            let a = self.walk(&parts(from_dir)?.path).await?;
            let b = self.walk(&parts(to_dir)?.path).await?;
            // What moves, if the cache knows: the listings then follow the move.
            let found = |dir: &Node, name: &str| match self.cache.peek_lookup(dir.id, name) {
                Lookup::Found(q) => Some(q),
                _ => None,
            };
            let moved = found(from_dir, from);
            // The target as the cache knows it: its qid, or known missing (`Some(None)`).
            let target = match self.cache.peek_lookup(to_dir.id, to) {
                Lookup::Found(q) => Some(Some(q)),
                Lookup::Missing => Some(None),
                _ => None,
            };
            let replaced = target.flatten();
            let result = a.renameat(from, &b, to).await;
            self.cache.forget(from_dir.id, from);
            self.cache.forget(to_dir.id, to);
            self.cache.dir_changed(from_dir.id);
            self.cache.dir_changed(to_dir.id);
            if let (Ok(()), Some(q)) = (&result, replaced) {
                self.cache.complete_forget(q.path); // a directory replaced is gone
            }
            match (&result, moved, target) {
                // Onto another name of the same file: POSIX changes nothing, both names
                // stay.
                (Ok(()), Some(q), Some(Some(t))) if t.path == q.path => {}
                // The source and the target known: the listings follow the move. (With
                // the target unknown it might be the same file: forget, below.)
                (Ok(()), Some(q), Some(_)) => {
                    self.cache.complete_removed(from_dir.id, from);
                    self.cache.complete_added(to_dir.id, to, q);
                }
                _ => {
                    self.cache.complete_forget(from_dir.id);
                    self.cache.complete_forget(to_dir.id);
                }
            }
            result
        })
    }

    fn setattr<'a>(
        &'a self,
        node: &'a Node,
        attr: &'a SetAttr,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(async move {
            // Buffered writes land before a truncate, not after it.
            self.writers.push_out(node.id).await;
            // A new size changes the content; new permissions or owner may change who
            // can open it: either way later opens go to the server again.
            if attr.size.is_some()
                || attr.mode.is_some()
                || attr.uid.is_some()
                || attr.gid.is_some()
            {
                self.cache.mark_written(node.id);
            }
            let result = self.walk(&parts(node)?.path).await?.setattr(attr).await;
            self.cache.forget_attr(node.id);
            result
        })
    }

    fn link<'a>(
        &'a self,
        target: &'a Node,
        dir: &'a Node,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(async move {
            let file = self.walk(&parts(target)?.path).await?;
            let dir_fid = self.walk(&parts(dir)?.path).await?;
            let result = dir_fid.link(&file, name).await;
            // The name is new and the target's link count changed.
            self.cache.forget(dir.id, name);
            self.cache.forget_attr(target.id);
            self.cache.dir_changed(dir.id);
            match &result {
                Ok(()) => self.cache.complete_added(dir.id, name, file.qid),
                Err(_) => self.cache.complete_forget(dir.id),
            }
            result
        })
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
        Box::pin(async move {
            let n = parts(file)?;
            let read_only = !(flags.write || flags.truncate || flags.append);
            let pages = self.mode.has(CacheMode::FILE);
            // Loose, a file opened for reading (or read) before through this mount at
            // the cached qid and not changed through it since: the cached qid stands,
            // and the server is asked only if a read misses the pages (see
            // `ninep_file`). A first open goes to the server, so that whatever open
            // may answer (EACCES, ENOENT...) comes from it; so does the first one after
            // each change through the mount (write, truncate, chmod, chown: the
            // generation moves on), and it makes the next ones deferrable again.
            // With `nocto` (and a window), the same within the window after the server
            // was last asked.
            let deferrable = self.meta && pages && read_only && (!self.checks || self.nocto);
            let cached_generation = self.cache.generation(n.qid.path);
            let lazy = match deferrable {
                true => self
                    .cache
                    .readable_believed(n.qid.path, n.qid.version, cached_generation)
                    .or_else(|| {
                        (!self.checks
                            && self
                                .cache
                                .has_page(n.qid.path, n.qid.version, cached_generation, 0))
                        .then_some(n.qid.version)
                    }),
                false => None,
            };
            if let Some(version) = lazy {
                let source = Source::Lazy {
                    root: self.root.clone(),
                    path: n.path.to_vec(),
                };
                let qid = Qid { version, ..n.qid };
                return self.open_file(source, qid, flags).await;
            }
            if deferrable {
                if let Some(open) = self.open_from_store(file, flags, cached_generation).await {
                    return open;
                }
            }
            // Everywhere else an open asks the server (close-to-open): the walk's qid is
            // fresh, and pages are keyed by the version it has now.
            let asked = self.cache.asking();
            if read_only && self.opens_in_flight(n.qid, cached_generation) {
                let (open, qid) = self.open_in_flight(&n.path, flags, asked).await?;
                self.remember_readable(n.qid, qid, deferrable, cached_generation, asked.at);
                return Ok(open);
            }
            let fid = self.walk(&n.path).await?;
            let mut qid = fid.qid;
            if qid.version == 0 && pages {
                // A server that keeps no versions (diod sends 0 for every file): pages
                // are keyed by what its attributes say of the contents now (as Linux's
                // ignoreqv), so an open that asks the server never reads the pages of
                // before a change there. What other opens of the file buffer goes out
                // first: the stamp, and the size cached with it, must count it.
                self.writers.push_out(qid.path).await;
                let a = fid.getattr().await?;
                qid.version = content_stamp(&a);
                if self.meta {
                    self.cache.insert_attr(a, asked);
                }
            } else if self.meta && self.checks {
                // Cached attributes stand only if the file is at the version they were
                // fetched at: a stale size would cut reads of a grown file short.
                match self.cache.unconfirmed_attr(qid.path) {
                    Some(old) if old.qid == qid => self.cache.confirm_attr(old, asked),
                    Some(_) => self.cache.forget_attr(qid.path),
                    None => {}
                }
            }
            let generation = self.cache.generation(qid.path);
            let opened_before = self.checks
                && read_only
                && pages
                && self
                    .cache
                    .readable(qid.path, qid.version, generation)
                    .is_some();
            let source = match opened_before {
                // Opened for reading at this very version before: the Tlopen waits
                // for the first read that misses the pages.
                true => Source::Walked(fid),
                false => Source::Opened(fid),
            };
            let open = self.open_file(source, qid, flags).await?;
            if read_only && pages {
                self.remember_readable(n.qid, qid, deferrable, cached_generation, asked.at);
            }
            if flags.truncate && flags.write {
                self.cache.forget_attr(file.id);
            }
            Ok(open)
        })
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
