//! Requests on a node's attributes: getattr, setattr, access, statfs.

use std::sync::Arc;

use fuser::{FileHandle, INodeNo, ReplyAttr, ReplyEmpty, ReplyStatfs, TimeOrNow};
use wasm9p_guest_fs::backend::SetAttr;
use wasm9p_proto::Errno;

use crate::convert::set_time;
use crate::{NamespaceFs, TTL};

pub(crate) fn getattr(fs: &NamespaceFs, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
    // By path; a node whose name is gone (the kernel asks for it when an open
    // file of it is fstat'ed, without saying which) through one of its open
    // files. (A 9p mount's getattr sends what open files buffer first, so the
    // size includes every write the kernel was told is done.)
    let handle = || {
        let files = fs.files.lock().unwrap();
        fh.and_then(|fh| files.get(&fh.0))
            .or_else(|| files.values().find(|f| f.ino == ino.0))
            .map(|f| Arc::clone(&f.file))
    };
    let by_node = fs.rt.block_on(fs.at_node(ino.0, async || {
        let (_, at) = fs.locate(ino.0).await?;
        let attr = fs.ns.getattr_at(&at).await?;
        Ok(fs.attr(ino.0, at.node.kind, &attr))
    }));
    let result = match by_node {
        Err(Errno::ESTALE) => match handle() {
            Some(file) => fs.rt.block_on(fs.handle_attr(ino.0, &*file)),
            None => Err(Errno::ESTALE),
        },
        other => other,
    };
    match result {
        Ok(attr) => reply.attr(&TTL, &attr),
        Err(e) => reply.error(fs.refused(e)),
    }
}

#[allow(clippy::too_many_arguments)] // the request as fuser hands it over
pub(crate) fn setattr(
    fs: &NamespaceFs,
    ino: INodeNo,
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    size: Option<u64>,
    atime: Option<TimeOrNow>,
    mtime: Option<TimeOrNow>,
    fh: Option<FileHandle>,
    reply: ReplyAttr,
) {
    if mode.is_some() || uid.is_some() || gid.is_some() {
        fs.set_id_clear.lock().unwrap().remove(&ino.0);
    }
    let change = SetAttr {
        mode: mode.map(|m| m & 0o7777),
        uid,
        gid,
        size,
        atime: set_time(atime),
        mtime: set_time(mtime),
    };
    let result = fs.rt.block_on(async {
        let file = fh.and_then(|fh| fs.file(fh).ok());
        let mut rest = change.clone();
        // ftruncate: through the open file, which works after an unlink too. (A
        // truncate by name goes to the namespace, whose 9p mounts send what open
        // files buffer first, keeping any error for those files' own close.)
        if let (Some(size), Some(file)) = (size, &file) {
            file.set_len(size).await?;
            rest.size = None;
        }
        let path: Result<String, Errno> = fs.path(ino);
        if rest != SetAttr::default() {
            let named: &str = path.as_deref().map_err(|e| *e)?;
            fs.ns.setattr(named, &rest, false).await?;
        }
        match (path, &file) {
            (Ok(path), _) => {
                let (at, attr) = fs.stat(&path).await?;
                Ok(fs.attr(ino.0, at.node.kind, &attr))
            }
            (Err(_), Some(file)) => fs.handle_attr(ino.0, &**file).await,
            (Err(e), None) => Err(e),
        }
    });
    match result {
        Ok(attr) => reply.attr(&TTL, &attr),
        Err(e) => reply.error(fs.refused(e)),
    }
}

pub(crate) fn statfs(fs: &NamespaceFs, ino: INodeNo, reply: ReplyStatfs) {
    match fs
        .path(ino)
        .and_then(|p| fs.rt.block_on(fs.holding(async || fs.ns.statfs(&p).await)))
    {
        Ok(s) => reply.statfs(
            s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize,
        ),
        // Between mounts (a virtual directory) there is no file system to ask.
        Err(Errno::EISDIR) => reply.statfs(0, 0, 0, 0, 0, 4096, 255, 4096),
        Err(e) => reply.error(fs.refused(e)),
    }
}

pub(crate) fn access(fs: &NamespaceFs, ino: INodeNo, reply: ReplyEmpty) {
    // Permissions are the kernel's (default_permissions); existence is ours.
    let result = fs.path(ino).and_then(|p| {
        fs.rt
            .block_on(fs.holding(async || fs.stat(&p).await))
            .map(drop)
    });
    fs.empty(reply, result);
}
