//! Where a node id is in the namespace (a held location, or its path resolved
//! again), the attributes the kernel is given, and how an errno reaches it (a server
//! out of fids gets them back from every node).

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::Duration;

use fuser::{
    Errno as FuseErrno, FileAttr, FileHandle, Generation, INodeNo, ReplyEmpty, ReplyEntry,
};
use wasm9p_guest_fs::backend::{Attr, Kind, OpenFile};
use wasm9p_guest_fs::namespace::Location;
use wasm9p_proto::Errno;

use crate::convert::{file_type, fuse_errno, fuse_rdev, identity, name_str, time};
use crate::{inodes, NamespaceFs, TTL};

impl NamespaceFs {
    pub(crate) fn path(&self, ino: INodeNo) -> Result<String, Errno> {
        self.inodes.lock().unwrap().path(ino.0).ok_or(Errno::ESTALE)
    }

    pub(crate) fn child(&self, parent: INodeNo, name: &OsStr) -> Result<String, Errno> {
        Ok(inodes::child(&self.path(parent)?, name_str(name)?))
    }

    pub(crate) fn fh(&self) -> u64 {
        self.next_fh
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn file(&self, fh: FileHandle) -> Result<Arc<dyn OpenFile>, Errno> {
        let files = self.files.lock().unwrap();
        files
            .get(&fh.0)
            .map(|f| Arc::clone(&f.file))
            .ok_or(Errno::EBADF)
    }

    pub(crate) fn attr(&self, ino: u64, kind: Kind, a: &Attr) -> FileAttr {
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
    pub(crate) async fn stat(&self, path: &str) -> Result<(Location, Attr), Errno> {
        let at = self.ns.resolve(path, false).await?;
        let attr = self.ns.getattr_at(&at).await?;
        Ok((at, attr))
    }

    /// Attributes of an open file, through its handle (so also once its name is gone).
    pub(crate) async fn handle_attr(
        &self,
        ino: u64,
        file: &dyn OpenFile,
    ) -> Result<FileAttr, Errno> {
        Ok(self.attr(ino, Kind::File, &file.getattr().await?))
    }

    pub(crate) fn entry(&self, path: Result<String, Errno>, reply: ReplyEntry) {
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
    pub(crate) fn found(&self, path: &str, at: Location, attr: &Attr) -> FileAttr {
        let kind = at.node.kind;
        let mut inodes = self.inodes.lock().unwrap();
        let ino = inodes.remember(path, identity(&at));
        inodes.hold(ino, path, at);
        drop(inodes);
        self.attr(ino, kind, attr)
    }

    /// Where node `ino` is: the location it holds, or its path resolved again (and
    /// then held). With the path it is known by.
    pub(crate) async fn locate(&self, ino: u64) -> Result<(String, Location), Errno> {
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

    pub(crate) fn empty(&self, reply: ReplyEmpty, result: Result<(), Errno>) {
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(self.refused(e)),
        }
    }

    /// The kernel's errno for `e`. The server out of fids (EMFILE): every node gives
    /// back the fid it holds, so that the next requests have them.
    pub(crate) fn refused(&self, e: Errno) -> FuseErrno {
        if e == Errno::EMFILE {
            self.inodes.lock().unwrap().release_held();
        }
        fuse_errno(e)
    }

    /// `op`, which changes nothing until it has its fids; if the server has none
    /// left for it, every node gives back what it holds, and `op` runs again once
    /// the server has had the fids back (their Tclunks are on their way: a few tries,
    /// a second at most).
    pub(crate) async fn holding<T>(
        &self,
        op: impl AsyncFn() -> Result<T, Errno>,
    ) -> Result<T, Errno> {
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
    pub(crate) async fn at_node<T>(
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
    pub(crate) async fn look_up(&self, parent: u64, name: &str) -> Result<FileAttr, Errno> {
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
}
