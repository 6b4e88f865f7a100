//! `wasm9p mount`: the namespace (its 9p, bind and embedded mounts, with their caches)
//! served to the host kernel through FUSE, so that ordinary programs, and real
//! filesystem test suites, use our client and caches without v9fs.
//!
//! Design:
//! - The kernel names files by node id; the namespace by path. [`inodes::Inodes`] maps
//!   one to the other (a file's hard links share its id, so they show as one inode) and
//!   keeps paths current across renames; an unlinked file's id
//!   lives on for its open handles, without a path: fstat and ftruncate go through
//!   an open file of it, calls that need a name get ESTALE.
//! - Every request is answered on the FUSE worker thread that read it (four workers),
//!   by running the namespace operation to completion on the mounts' tokio runtime
//!   (`Handle::block_on`). Cache hits complete without suspending.
//! - Entry and attribute lifetimes given to the kernel are zero: every lookup and
//!   getattr comes to the namespace, whose cache modes decide what is asked of the
//!   server. Files are opened for direct I/O, so the namespace's page cache is the only
//!   one (see [`FILE_OPEN`]).
//! - Open files are the namespace's [`OpenFile`]s (write-back and readahead as the
//!   mount's mode says), flushed on `flush` (every close) and `release`; an error a
//!   buffered write met is reported by the close that flushes it.
//! - Symlinks are resolved by the kernel, as with any filesystem: a relative target
//!   stays inside the mount, an absolute one means the host's root.

mod convert;
mod inodes;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use fuser::{
    Errno as FuseErrno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, LockOwner, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use wasm9p_guest_fs::backend::{Attr, Kind, OpenFile, OpenFlags, SetAttr, Special};
use wasm9p_guest_fs::namespace::{Location, Namespace};
use wasm9p_proto::Errno;

use convert::{file_type, fuse_errno, fuse_rdev, identity, name_str, set_time, time};
use inodes::Inodes;

/// How long the kernel may keep an entry or attributes: not at all (see the module
/// docs).
const TTL: Duration = Duration::ZERO;

/// FUSE worker threads.
const WORKERS: usize = 4;

/// Files are opened for direct I/O: every read and write comes to the namespace, whose
/// page cache (per the mount's mode) is the only one. With the kernel's page cache in
/// front as well, a page read through one open file could stay stale after a partial
/// write through another (fsx found it); the kernel still maps files (shared mappings
/// where it supports FUSE_DIRECT_IO_ALLOW_MMAP, private ones always).
const FILE_OPEN: FopenFlags = FopenFlags::FOPEN_DIRECT_IO;

/// An open directory: a snapshot of its entries taken at opendir (`.` and `..` first).
struct DirHandle {
    entries: Vec<(String, FileType, u64)>,
}

/// An open file and the node it belongs to.
struct FileEntry {
    ino: u64,
    file: Arc<dyn OpenFile>,
}

/// The namespace as a FUSE filesystem.
pub struct NamespaceFs {
    ns: Arc<Namespace>,
    rt: tokio::runtime::Handle,
    inodes: Mutex<Inodes>,
    files: Mutex<HashMap<u64, FileEntry>>,
    dirs: Mutex<HashMap<u64, DirHandle>>,
    next_fh: std::sync::atomic::AtomicU64,
    /// Nodes known to have no set-user-ID or set-group-ID bit for a write to clear
    /// (see [`NamespaceFs::clear_set_id`]); a node leaves it with every setattr of
    /// its mode or owner.
    set_id_clear: Mutex<std::collections::HashSet<u64>>,
}

impl NamespaceFs {
    /// Serves `ns`, running its operations on `rt`. Files show the owners their mount
    /// reports.
    pub fn new(ns: Arc<Namespace>, rt: tokio::runtime::Handle) -> Self {
        NamespaceFs {
            // The kernel bounds the paths processes pass, not the ones joined here from
            // the mount's root down to where a process stands.
            ns: Arc::new(Namespace::clone(&ns).without_path_max()),
            rt,
            inodes: Mutex::new(Inodes::default()),
            files: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: std::sync::atomic::AtomicU64::new(1),
            set_id_clear: Mutex::new(std::collections::HashSet::new()),
        }
    }

    fn path(&self, ino: INodeNo) -> Result<String, Errno> {
        self.inodes.lock().unwrap().path(ino.0).ok_or(Errno::ESTALE)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<String, Errno> {
        Ok(inodes::child(&self.path(parent)?, name_str(name)?))
    }

    fn fh(&self) -> u64 {
        self.next_fh
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    fn file(&self, fh: FileHandle) -> Result<Arc<dyn OpenFile>, Errno> {
        let files = self.files.lock().unwrap();
        files
            .get(&fh.0)
            .map(|f| Arc::clone(&f.file))
            .ok_or(Errno::EBADF)
    }

    fn attr(&self, ino: u64, kind: Kind, a: &Attr) -> FileAttr {
        FileAttr {
            ino: INodeNo(ino),
            size: a.size,
            blocks: a.size.div_ceil(512),
            atime: time(a.atime),
            mtime: time(a.mtime),
            ctime: time(a.ctime),
            crtime: time(a.ctime),
            kind: file_type(kind, a),
            perm: (a.mode & 0o7777) as u16,
            nlink: a.nlink.min(u64::from(u32::MAX)) as u32,
            // Owners as the mount reports them (a 9p server's numbers, the host's for
            // bind), so the kernel's default_permissions checks true attributes.
            uid: a.uid,
            gid: a.gid,
            rdev: fuse_rdev(a.rdev),
            blksize: 4096,
            flags: 0,
        }
    }

    /// Resolves `path` (not following a final symlink) and returns its attributes.
    async fn stat(&self, path: &str) -> Result<(Location, Attr), Errno> {
        let at = self.ns.resolve(path, false).await?;
        let attr = self.ns.getattr_at(&at).await?;
        Ok((at, attr))
    }

    /// Attributes of an open file, through its handle (so also once its name is gone).
    async fn handle_attr(&self, ino: u64, file: &dyn OpenFile) -> Result<FileAttr, Errno> {
        Ok(self.attr(ino, Kind::File, &file.getattr().await?))
    }

    /// Answers a lookup-like request: the attributes of `path`, under a node id the
    /// kernel now holds one more reference to.
    /// The owner a file made for `req` is handed to, as a local file system would
    /// have made it: `None` unless this process is root and `req` comes from another
    /// user or group (the mount's server makes every file as its own user).
    fn owner_for(req: &Request) -> Option<SetAttr> {
        let (uid, gid) = (req.uid(), req.gid());
        let me = rustix::process::geteuid().as_raw();
        let my_group = rustix::process::getegid().as_raw();
        (me == 0 && (uid, gid) != (me, my_group)).then(|| SetAttr {
            uid: Some(uid),
            gid: Some(gid),
            ..SetAttr::default()
        })
    }

    /// Hands the file just made at `path` to the user that asked for it
    /// ([`Self::owner_for`]); a mount that keeps no owners (a plugin) leaves it be.
    /// `follow`: the file is what a final symlink at `path` points at (an `O_CREAT`
    /// open through a dangling link makes its target), not the link.
    async fn give_to(&self, req: &Request, path: &str, follow: bool) -> Result<(), Errno> {
        let Some(owner) = Self::owner_for(req) else {
            return Ok(());
        };
        match self.ns.setattr(path, &owner, follow).await {
            Err(Errno::EOPNOTSUPP) => Ok(()),
            other => other,
        }
    }

    fn entry(&self, path: Result<String, Errno>, reply: ReplyEntry) {
        let result = path.and_then(|path| {
            let (at, attr) = self.rt.block_on(self.stat(&path))?;
            Ok(self.found(&path, at, &attr))
        });
        match result {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(self.refused(e)),
        }
    }

    /// `path` led to `at`: the node id for it, one more kernel reference to it, and
    /// the location kept for its next lookups (see [`inodes`]).
    fn found(&self, path: &str, at: Location, attr: &Attr) -> FileAttr {
        let kind = at.node.kind;
        let mut inodes = self.inodes.lock().unwrap();
        let ino = inodes.remember(path, identity(&at));
        inodes.hold(ino, path, at);
        drop(inodes);
        self.attr(ino, kind, attr)
    }

    /// Where node `ino` is: the location it holds, or its path resolved again (and
    /// then held). With the path it is known by.
    async fn locate(&self, ino: u64) -> Result<(String, Location), Errno> {
        let (path, held) = {
            let inodes = self.inodes.lock().unwrap();
            (inodes.path(ino).ok_or(Errno::ESTALE)?, inodes.held(ino))
        };
        if let Some(at) = held {
            return Ok((path, at));
        }
        let at = self.ns.resolve(&path, false).await?;
        self.inodes.lock().unwrap().hold(ino, &path, at.clone());
        Ok((path, at))
    }

    fn empty(&self, reply: ReplyEmpty, result: Result<(), Errno>) {
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(self.refused(e)),
        }
    }

    /// The kernel's errno for `e`. The server out of fids (EMFILE): every node gives
    /// back the fid it holds, so that the next requests have them.
    fn refused(&self, e: Errno) -> FuseErrno {
        if e == Errno::EMFILE {
            self.inodes.lock().unwrap().release_held();
        }
        fuse_errno(e)
    }

    /// `op`, which changes nothing until it has its fids; if the server has none
    /// left for it, every node gives back what it holds, and `op` runs again once
    /// the server has had the fids back (their Tclunks are on their way: a few tries,
    /// a second at most).
    async fn holding<T>(&self, op: impl AsyncFn() -> Result<T, Errno>) -> Result<T, Errno> {
        let mut result = op().await;
        if result.as_ref().is_err_and(|e| *e == Errno::EMFILE) {
            self.inodes.lock().unwrap().release_held();
            let mut pause = Duration::from_millis(2);
            while result.as_ref().is_err_and(|e| *e == Errno::EMFILE)
                && pause < Duration::from_secs(1)
            {
                tokio::time::sleep(pause).await;
                pause *= 2;
                result = op().await;
            }
        }
        result
    }

    /// `op` on where node `ino` is ([`Self::locate`]), through [`Self::holding`]; a
    /// location gone stale (its fid not restored after a reconnect: ESTALE) is let go,
    /// and `op` runs again on the node's path resolved afresh.
    async fn at_node<T>(
        &self,
        ino: u64,
        op: impl AsyncFn() -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        match self.holding(&op).await {
            Err(Errno::ESTALE) if self.inodes.lock().unwrap().let_go(ino) => {
                self.holding(&op).await
            }
            other => other,
        }
    }

    /// A lookup: `name` walked to from where `parent` is (one name), its attributes.
    async fn look_up(&self, parent: u64, name: &str) -> Result<FileAttr, Errno> {
        let (path, at, attr) = self
            .at_node(parent, async || {
                let (dir_path, dir) = self.locate(parent).await?;
                let at = self.ns.lookup_at(&dir, name).await?;
                let attr = self.ns.getattr_at(&at).await?;
                Ok((inodes::child(&dir_path, name), at, attr))
            })
            .await?;
        Ok(self.found(&path, at, &attr))
    }

    fn open_flags(flags: i32) -> OpenFlags {
        let acc = flags & libc::O_ACCMODE;
        OpenFlags {
            read: acc == libc::O_RDONLY || acc == libc::O_RDWR,
            write: acc == libc::O_WRONLY || acc == libc::O_RDWR,
            truncate: flags & libc::O_TRUNC != 0,
            append: flags & libc::O_APPEND != 0,
        }
    }

    /// Unlinks a file (or, with `dir_only`, removes a directory); its node id loses
    /// its path.
    fn remove(&self, parent: INodeNo, name: &OsStr, dir_only: bool) -> Result<(), Errno> {
        let path = self.child(parent, name)?;
        self.rt.block_on(self.ns.unlink(&path, dir_only))?;
        self.inodes.lock().unwrap().unlinked(&path);
        Ok(())
    }

    /// Before a write by a process without CAP_FSETID (the kernel says so with
    /// FUSE_WRITE_KILL_SUIDGID): the file loses its set-user-ID bit, and its
    /// set-group-ID bit where group execution is allowed, as a write on a local
    /// Linux file system does. The server cannot do it (it writes as its own user),
    /// nor the kernel (direct I/O leaves it to us). Asked once per node until its mode
    /// or owner changes through the mount, so a stream of writes costs one look.
    async fn clear_set_id(
        &self,
        req: &Request,
        ino: u64,
        file: &dyn OpenFile,
    ) -> Result<(), Errno> {
        if self.set_id_clear.lock().unwrap().contains(&ino) {
            return Ok(());
        }
        let attr = file.getattr().await?;
        let mode = attr.mode;
        let mut kill = mode & libc::S_ISUID;
        // Set-group-ID without group execution marks a file for mandatory locking
        // and stays, unless the writer is not in the file's group (Linux 6).
        if mode & libc::S_IXGRP != 0 || !in_group(req, attr.gid) {
            kill |= mode & libc::S_ISGID;
        }
        if kill != 0 {
            // By name: an unlinked file keeps its bits (nobody can run it by a name).
            if let Ok(path) = self.path(INodeNo(ino)) {
                let change = SetAttr {
                    mode: Some(mode & 0o7777 & !kill),
                    ..SetAttr::default()
                };
                self.ns.setattr(&path, &change, false).await?;
            }
        }
        // Remembered only with no bit left that another writer might clear.
        if (mode & !kill) & (libc::S_ISUID | libc::S_ISGID) == 0 {
            self.set_id_clear.lock().unwrap().insert(ino);
        }
        Ok(())
    }

    fn keep(&self, ino: u64, file: Box<dyn OpenFile>) -> u64 {
        let fh = self.fh();
        self.files.lock().unwrap().insert(
            fh,
            FileEntry {
                ino,
                file: Arc::from(file),
            },
        );
        fh
    }
}

impl NamespaceFs {
    /// Makes `name` in `parent` by `make`, gives it to the caller (see
    /// [`NamespaceFs::give_to`]) and replies with its entry: what mknod, mkdir and
    /// symlink share.
    fn make(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        reply: ReplyEntry,
        make: impl AsyncFnOnce(&str) -> Result<(), Errno>,
    ) {
        let path = self.child(parent, name).and_then(|path| {
            self.rt.block_on(async {
                make(&path).await?;
                self.give_to(req, &path, false).await?;
                Ok(path)
            })
        });
        self.entry(path, reply);
    }
}

/// Whether the process behind `req` is in group `gid`: its own group, or one of its
/// supplementary groups (from /proc; a process gone by then counts as not).
fn in_group(req: &Request, gid: u32) -> bool {
    if req.gid() == gid {
        return true;
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", req.pid()));
    status.ok().is_some_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Groups:"))
            .is_some_and(|g| g.split_whitespace().any(|g| g.parse() == Ok(gid)))
    })
}

impl Filesystem for NamespaceFs {
    fn init(&mut self, _req: &Request, config: &mut fuser::KernelConfig) -> std::io::Result<()> {
        // Optional: kernels before 6.6 do not offer it (shared mmap is then ENODEV).
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        Ok(())
    }

    fn destroy(&mut self) {
        // Unmounted: whatever is still buffered goes out now.
        let files: Vec<_> = self.files.lock().unwrap().drain().collect();
        for (_, f) in files {
            let _ = self.rt.block_on(f.file.flush());
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let result = name_str(name).and_then(|name| self.rt.block_on(self.look_up(parent.0, name)));
        match result {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(self.refused(e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let mut inodes = self.inodes.lock().unwrap();
        inodes.forget(ino.0, nlookup);
        if inodes.path(ino.0).is_none() {
            self.set_id_clear.lock().unwrap().remove(&ino.0);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        // By path; a node whose name is gone (the kernel asks for it when an open
        // file of it is fstat'ed, without saying which) through one of its open
        // files. (A 9p mount's getattr sends what open files buffer first, so the
        // size includes every write the kernel was told is done.)
        let handle = || {
            let files = self.files.lock().unwrap();
            fh.and_then(|fh| files.get(&fh.0))
                .or_else(|| files.values().find(|f| f.ino == ino.0))
                .map(|f| Arc::clone(&f.file))
        };
        let by_node = self.rt.block_on(self.at_node(ino.0, async || {
            let (_, at) = self.locate(ino.0).await?;
            let attr = self.ns.getattr_at(&at).await?;
            Ok(self.attr(ino.0, at.node.kind, &attr))
        }));
        let result = match by_node {
            Err(Errno::ESTALE) => match handle() {
                Some(file) => self.rt.block_on(self.handle_attr(ino.0, &*file)),
                None => Err(Errno::ESTALE),
            },
            other => other,
        };
        match result {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(self.refused(e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if mode.is_some() || uid.is_some() || gid.is_some() {
            self.set_id_clear.lock().unwrap().remove(&ino.0);
        }
        let change = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: set_time(atime),
            mtime: set_time(mtime),
        };
        let result = self.rt.block_on(async {
            let file = fh.and_then(|fh| self.file(fh).ok());
            let mut rest = change.clone();
            // ftruncate: through the open file, which works after an unlink too. (A
            // truncate by name goes to the namespace, whose 9p mounts send what open
            // files buffer first, keeping any error for those files' own close.)
            if let (Some(size), Some(file)) = (size, &file) {
                file.set_len(size).await?;
                rest.size = None;
            }
            let path: Result<String, Errno> = self.path(ino);
            if rest != SetAttr::default() {
                let named: &str = path.as_deref().map_err(|e| *e)?;
                self.ns.setattr(named, &rest, false).await?;
            }
            match (path, &file) {
                (Ok(path), _) => {
                    let (at, attr) = self.stat(&path).await?;
                    Ok(self.attr(ino.0, at.node.kind, &attr))
                }
                (Err(_), Some(file)) => self.handle_attr(ino.0, &**file).await,
                (Err(e), None) => Err(e),
            }
        });
        match result {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(self.refused(e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.path(ino).and_then(|p| {
            self.rt
                .block_on(self.holding(async || self.ns.readlink(&p).await))
        }) {
            Ok(target) => reply.data(target.as_bytes()),
            Err(e) => reply.error(self.refused(e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        // Regular files and special files: device nodes where the mount's server makes
        // them (an export in a mapped security model, or passthrough allowing devices;
        // else EPERM). The kernel's rdev is Linux's new encoding, which rustix's
        // major/minor read as they read a 64-bit dev_t (for majors below 4096 and
        // minors below 2^20, all Linux gives FUSE).
        let perm = mode & !umask & 0o7777;
        self.make(
            req,
            parent,
            name,
            reply,
            async |path| match Special::from_mode(mode) {
                None if mode & libc::S_IFMT == libc::S_IFREG => {
                    self.ns.create(path, perm, true).await.map(drop)
                }
                Some(special) => {
                    let rdev = u64::from(rdev);
                    self.ns.mknod(path, special, perm, rdev).await.map(drop)
                }
                None => Err(Errno::EINVAL),
            },
        );
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.make(req, parent, name, reply, async |path| {
            self.ns.mkdir(path, mode & !umask & 0o7777).await.map(drop)
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.empty(reply, self.remove(parent, name, false));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.empty(reply, self.remove(parent, name, true));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.make(req, parent, link_name, reply, async |path| {
            let target = target.to_str().ok_or(Errno::EINVAL)?;
            self.ns.symlink(target, path).await.map(drop)
        });
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        // RENAME_NOREPLACE and RENAME_EXCHANGE have no 9P2000.L equivalent.
        if flags.bits() != 0 {
            return reply.error(FuseErrno::EINVAL);
        }
        let result = self.child(parent, name).and_then(|from| {
            let to = self.child(newparent, newname)?;
            self.rt.block_on(self.ns.rename(&from, &to))?;
            self.inodes.lock().unwrap().renamed(&from, &to);
            Ok(())
        });
        self.empty(reply, result);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let path = self.path(ino).and_then(|from| {
            let to = self.child(newparent, newname)?;
            self.rt.block_on(self.ns.link(&from, &to, false))?;
            Ok(to)
        });
        self.entry(path, reply);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: fuser::OpenFlags, reply: ReplyOpen) {
        let result = self.path(ino).and_then(|path| {
            let flags = Self::open_flags(flags.0);
            let file = self
                .rt
                .block_on(self.holding(async || self.ns.open(&path, flags).await))?;
            Ok(self.keep(ino.0, file))
        });
        match result {
            Ok(fh) => reply.opened(FileHandle(fh), FILE_OPEN),
            Err(e) => reply.error(self.refused(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let result = self.file(fh).and_then(|file| {
            self.rt
                .block_on(async { file.read_at(offset, size as usize).await })
        });
        match result {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(self.refused(e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let result = self.file(fh).and_then(|file| {
            let data = Bytes::copy_from_slice(data);
            self.rt.block_on(async {
                if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                    self.clear_set_id(req, ino.0, &*file).await?;
                }
                file.write_at(offset, data).await
            })
        });
        match result {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(self.refused(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let result = self
            .file(fh)
            .and_then(|file| self.rt.block_on(async { file.flush().await }));
        self.empty(reply, result);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let entry = self.files.lock().unwrap().remove(&fh.0);
        let result = match entry {
            Some(f) => self.rt.block_on(f.file.flush()),
            None => Err(Errno::EBADF),
        };
        self.empty(reply, result);
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let result = self
            .file(fh)
            .and_then(|file| self.rt.block_on(async { file.fsync(datasync).await }));
        self.empty(reply, result);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: fuser::OpenFlags, reply: ReplyOpen) {
        let result = self.path(ino).and_then(|path| {
            let listing = self
                .rt
                .block_on(self.holding(async || self.ns.readdir(&path).await))?;
            let mut entries = vec![
                (".".to_string(), FileType::Directory, ino.0),
                ("..".to_string(), FileType::Directory, ino.0),
            ];
            entries.extend(
                listing
                    .into_iter()
                    .filter(|e| e.name != "." && e.name != "..")
                    .map(|e| (e.name, file_type(e.kind, &Attr::default()), e.id.max(2))),
            );
            let fh = self.fh();
            self.dirs.lock().unwrap().insert(fh, DirHandle { entries });
            Ok(fh)
        });
        match result {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(self.refused(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let dirs = self.dirs.lock().unwrap();
        let Some(dir) = dirs.get(&fh.0) else {
            return reply.error(FuseErrno::EBADF);
        };
        for (i, (name, kind, id)) in dir.entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*id), i as u64 + 1, *kind, name) {
                break; // the kernel's buffer is full; it asks again from here
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: fuser::OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs.lock().unwrap().remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let result = self.path(ino).and_then(|p| {
            self.rt.block_on(async {
                let dir = self.ns.resolve(&p, false).await?;
                self.ns.sync_dir_at(&dir).await
            })
        });
        self.empty(reply, result);
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        match self.path(ino).and_then(|p| {
            self.rt
                .block_on(self.holding(async || self.ns.statfs(&p).await))
        }) {
            Ok(s) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize,
            ),
            // Between mounts (a virtual directory) there is no file system to ask.
            Err(Errno::EISDIR) => reply.statfs(0, 0, 0, 0, 0, 4096, 255, 4096),
            Err(e) => reply.error(self.refused(e)),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        // Permissions are the kernel's (default_permissions); existence is ours.
        let result = self.path(ino).and_then(|p| {
            self.rt
                .block_on(self.holding(async || self.stat(&p).await))
                .map(drop)
        });
        self.empty(reply, result);
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: fuser::ReplyXattr,
    ) {
        // Not served (yet): ENOSYS makes the kernel stop asking and answer EOPNOTSUPP.
        reply.error(FuseErrno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: fuser::ReplyXattr) {
        reply.error(FuseErrno::ENOSYS);
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        // Not a terminal, and no file ioctls (isatty asks on every open by stdio).
        reply.error(FuseErrno::ENOTTY);
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        // Mode 0 only: the file grows to cover the range (9P cannot reserve space, so
        // nothing is promised beyond the size); punching holes and the rest: EOPNOTSUPP.
        if mode != 0 {
            return reply.error(FuseErrno::EOPNOTSUPP);
        }
        let result = self.file(fh).and_then(|file| {
            self.rt.block_on(async {
                let end = offset.checked_add(length).ok_or(Errno::EFBIG)?;
                if file.size().await? < end {
                    file.set_len(end).await?;
                }
                Ok(())
            })
        });
        self.empty(reply, result);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let result = self.child(parent, name).and_then(|path| {
            self.rt.block_on(async {
                let exclusive = flags & libc::O_EXCL != 0;
                let existed = Self::owner_for(req).is_some()
                    && !exclusive
                    && self.ns.resolve(&path, true).await.is_ok();
                let at = self
                    .ns
                    .create(&path, mode & !umask & 0o7777, exclusive)
                    .await?;
                if !existed {
                    self.give_to(req, &path, true).await?;
                }
                let file = self.ns.open_at(&at, Self::open_flags(flags)).await?;
                let attr = self.ns.getattr_at(&at).await?;
                let ino = self.inodes.lock().unwrap().remember(&path, identity(&at));
                let fh = self.keep(ino, file);
                Ok((self.attr(ino, Kind::File, &attr), fh))
            })
        });
        match result {
            Ok((attr, fh)) => reply.created(&TTL, &attr, Generation(0), FileHandle(fh), FILE_OPEN),
            Err(e) => reply.error(self.refused(e)),
        }
    }
}

/// Mount options and worker threads for serving `fs` at a mount point.
pub fn config(read_only: bool, allow_other: bool) -> fuser::Config {
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("wasm9p".into()),
        fuser::MountOption::Subtype("wasm9p".into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
    ];
    if read_only {
        config.mount_options.push(fuser::MountOption::RO);
    }
    if allow_other {
        // Safe with default_permissions: the kernel checks every user's access.
        config.acl = fuser::SessionACL::All;
    }
    config.n_threads = Some(WORKERS);
    config.clone_fd = true;
    config
}
