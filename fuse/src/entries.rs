//! Requests on names: lookup and forget, making and removing files, links and
//! renames, readlink; and the owner a file made for another user is handed to.

use std::ffi::OsStr;
use std::path::Path;

use fuser::{
    Errno as FuseErrno, FileHandle, Generation, INodeNo, ReplyCreate, ReplyData, ReplyEmpty,
    ReplyEntry, Request,
};
use wasm9p_guest_fs::backend::{Kind, SetAttr, Special};
use wasm9p_proto::Errno;

use crate::convert::{identity, name_str};
use crate::{NamespaceFs, FILE_OPEN, TTL};

pub(crate) fn lookup(fs: &NamespaceFs, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
    let result = name_str(name).and_then(|name| fs.rt.block_on(fs.look_up(parent.0, name)));
    match result {
        Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
        Err(e) => reply.error(fs.refused(e)),
    }
}

pub(crate) fn forget(fs: &NamespaceFs, ino: INodeNo, nlookup: u64) {
    let mut inodes = fs.inodes.lock().unwrap();
    inodes.forget(ino.0, nlookup);
    if inodes.path(ino.0).is_none() {
        fs.set_id_clear.lock().unwrap().remove(&ino.0);
    }
}

pub(crate) fn readlink(fs: &NamespaceFs, ino: INodeNo, reply: ReplyData) {
    match fs.path(ino).and_then(|p| {
        fs.rt
            .block_on(fs.holding(async || fs.ns.readlink(&p).await))
    }) {
        Ok(target) => reply.data(target.as_bytes()),
        Err(e) => reply.error(fs.refused(e)),
    }
}

#[allow(clippy::too_many_arguments)] // the request as fuser hands it over
pub(crate) fn mknod(
    fs: &NamespaceFs,
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
    fs.make(
        req,
        parent,
        name,
        reply,
        async |path| match Special::from_mode(mode) {
            None if mode & libc::S_IFMT == libc::S_IFREG => {
                fs.ns.create(path, perm, true).await.map(drop)
            }
            Some(special) => {
                let rdev = u64::from(rdev);
                fs.ns.mknod(path, special, perm, rdev).await.map(drop)
            }
            None => Err(Errno::EINVAL),
        },
    );
}

pub(crate) fn mkdir(
    fs: &NamespaceFs,
    req: &Request,
    parent: INodeNo,
    name: &OsStr,
    mode: u32,
    umask: u32,
    reply: ReplyEntry,
) {
    fs.make(req, parent, name, reply, async |path| {
        fs.ns.mkdir(path, mode & !umask & 0o7777).await.map(drop)
    });
}

pub(crate) fn unlink(fs: &NamespaceFs, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
    fs.empty(reply, fs.remove(parent, name, false));
}

pub(crate) fn rmdir(fs: &NamespaceFs, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
    fs.empty(reply, fs.remove(parent, name, true));
}

pub(crate) fn symlink(
    fs: &NamespaceFs,
    req: &Request,
    parent: INodeNo,
    link_name: &OsStr,
    target: &Path,
    reply: ReplyEntry,
) {
    fs.make(req, parent, link_name, reply, async |path| {
        let target = target.to_str().ok_or(Errno::EINVAL)?;
        fs.ns.symlink(target, path).await.map(drop)
    });
}

pub(crate) fn rename(
    fs: &NamespaceFs,
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
    let result = fs.child(parent, name).and_then(|from| {
        let to = fs.child(newparent, newname)?;
        fs.rt.block_on(fs.ns.rename(&from, &to))?;
        fs.inodes.lock().unwrap().renamed(&from, &to);
        Ok(())
    });
    fs.empty(reply, result);
}

pub(crate) fn link(
    fs: &NamespaceFs,
    ino: INodeNo,
    newparent: INodeNo,
    newname: &OsStr,
    reply: ReplyEntry,
) {
    let path = fs.path(ino).and_then(|from| {
        let to = fs.child(newparent, newname)?;
        fs.rt.block_on(fs.ns.link(&from, &to, false))?;
        Ok(to)
    });
    fs.entry(path, reply);
}

#[allow(clippy::too_many_arguments)] // the request as fuser hands it over
pub(crate) fn create(
    fs: &NamespaceFs,
    req: &Request,
    parent: INodeNo,
    name: &OsStr,
    mode: u32,
    umask: u32,
    flags: i32,
    reply: ReplyCreate,
) {
    let result = fs.child(parent, name).and_then(|path| {
        fs.rt.block_on(async {
            let exclusive = flags & libc::O_EXCL != 0;
            let existed = NamespaceFs::owner_for(req).is_some()
                && !exclusive
                && fs.ns.resolve(&path, true).await.is_ok();
            let at = fs
                .ns
                .create(&path, mode & !umask & 0o7777, exclusive)
                .await?;
            if !existed {
                fs.give_to(req, &path, true).await?;
            }
            let file = fs.ns.open_at(&at, NamespaceFs::open_flags(flags)).await?;
            let attr = fs.ns.getattr_at(&at).await?;
            let ino = fs.inodes.lock().unwrap().remember(&path, identity(&at));
            let fh = fs.keep(ino, file);
            Ok((fs.attr(ino, Kind::File, &attr), fh))
        })
    });
    match result {
        Ok((attr, fh)) => reply.created(&TTL, &attr, Generation(0), FileHandle(fh), FILE_OPEN),
        Err(e) => reply.error(fs.refused(e)),
    }
}

impl NamespaceFs {
    /// Answers a lookup-like request: the attributes of `path`, under a node id the
    /// kernel now holds one more reference to.
    /// The owner a file made for `req` is handed to, as a local file system would
    /// have made it: `None` unless this process is root and `req` comes from another
    /// user or group (the mount's server makes every file as its own user).
    pub(crate) fn owner_for(req: &Request) -> Option<SetAttr> {
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
    pub(crate) async fn give_to(
        &self,
        req: &Request,
        path: &str,
        follow: bool,
    ) -> Result<(), Errno> {
        let Some(owner) = Self::owner_for(req) else {
            return Ok(());
        };
        match self.ns.setattr(path, &owner, follow).await {
            Err(Errno::EOPNOTSUPP) => Ok(()),
            other => other,
        }
    }

    /// Unlinks a file (or, with `dir_only`, removes a directory); its node id loses
    /// its path.
    pub(crate) fn remove(
        &self,
        parent: INodeNo,
        name: &OsStr,
        dir_only: bool,
    ) -> Result<(), Errno> {
        let path = self.child(parent, name)?;
        self.rt.block_on(self.ns.unlink(&path, dir_only))?;
        self.inodes.lock().unwrap().unlinked(&path);
        Ok(())
    }

    /// Makes `name` in `parent` by `make`, gives it to the caller (see
    /// [`NamespaceFs::give_to`]) and replies with its entry: what mknod, mkdir and
    /// symlink share.
    pub(crate) fn make(
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
