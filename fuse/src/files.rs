//! Requests on open files: open, read, write, flush, release, fsync, fallocate; and
//! the set-user-ID and set-group-ID bits a write clears.

use std::sync::Arc;

use bytes::Bytes;
use fuser::{
    Errno as FuseErrno, FileHandle, INodeNo, ReplyData, ReplyEmpty, ReplyOpen, ReplyWrite, Request,
    WriteFlags,
};
use wasm9p_guest_fs::backend::{OpenFile, OpenFlags, SetAttr};
use wasm9p_proto::Errno;

use crate::{FileEntry, NamespaceFs, FILE_OPEN};

pub(crate) fn open(fs: &NamespaceFs, ino: INodeNo, flags: fuser::OpenFlags, reply: ReplyOpen) {
    let result = fs.path(ino).and_then(|path| {
        let flags = NamespaceFs::open_flags(flags.0);
        let file = fs
            .rt
            .block_on(fs.holding(async || fs.ns.open(&path, flags).await))?;
        Ok(fs.keep(ino.0, file))
    });
    match result {
        Ok(fh) => reply.opened(FileHandle(fh), FILE_OPEN),
        Err(e) => reply.error(fs.refused(e)),
    }
}

pub(crate) fn read(fs: &NamespaceFs, fh: FileHandle, offset: u64, size: u32, reply: ReplyData) {
    let result = fs.file(fh).and_then(|file| {
        fs.rt
            .block_on(async { file.read_at(offset, size as usize).await })
    });
    match result {
        Ok(data) => reply.data(&data),
        Err(e) => reply.error(fs.refused(e)),
    }
}

#[allow(clippy::too_many_arguments)] // the request as fuser hands it over
pub(crate) fn write(
    fs: &NamespaceFs,
    req: &Request,
    ino: INodeNo,
    fh: FileHandle,
    offset: u64,
    data: &[u8],
    write_flags: WriteFlags,
    reply: ReplyWrite,
) {
    let result = fs.file(fh).and_then(|file| {
        let data = Bytes::copy_from_slice(data);
        fs.rt.block_on(async {
            if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
                fs.clear_set_id(req, ino.0, &*file).await?;
            }
            file.write_at(offset, data).await
        })
    });
    match result {
        Ok(n) => reply.written(n as u32),
        Err(e) => reply.error(fs.refused(e)),
    }
}

pub(crate) fn flush(fs: &NamespaceFs, fh: FileHandle, reply: ReplyEmpty) {
    let result = fs
        .file(fh)
        .and_then(|file| fs.rt.block_on(async { file.flush().await }));
    fs.empty(reply, result);
}

pub(crate) fn release(fs: &NamespaceFs, fh: FileHandle, reply: ReplyEmpty) {
    let entry = fs.files.lock().unwrap().remove(&fh.0);
    let result = match entry {
        Some(f) => fs.rt.block_on(f.file.flush()),
        None => Err(Errno::EBADF),
    };
    fs.empty(reply, result);
}

pub(crate) fn fsync(fs: &NamespaceFs, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
    let result = fs
        .file(fh)
        .and_then(|file| fs.rt.block_on(async { file.fsync(datasync).await }));
    fs.empty(reply, result);
}

pub(crate) fn fallocate(
    fs: &NamespaceFs,
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
    let result = fs.file(fh).and_then(|file| {
        fs.rt.block_on(async {
            let end = offset.checked_add(length).ok_or(Errno::EFBIG)?;
            if file.size().await? < end {
                file.set_len(end).await?;
            }
            Ok(())
        })
    });
    fs.empty(reply, result);
}

impl NamespaceFs {
    pub(crate) fn open_flags(flags: i32) -> OpenFlags {
        let acc = flags & libc::O_ACCMODE;
        OpenFlags {
            read: acc == libc::O_RDONLY || acc == libc::O_RDWR,
            write: acc == libc::O_WRONLY || acc == libc::O_RDWR,
            truncate: flags & libc::O_TRUNC != 0,
            append: flags & libc::O_APPEND != 0,
        }
    }

    /// Before a write by a process without CAP_FSETID (the kernel says so with
    /// FUSE_WRITE_KILL_SUIDGID): the file loses its set-user-ID bit, and its
    /// set-group-ID bit where group execution is allowed, as a write on a local
    /// Linux file system does. The server cannot do it (it writes as its own user),
    /// nor the kernel (direct I/O leaves it to us). Asked once per node until its mode
    /// or owner changes through the mount, so a stream of writes costs one look.
    pub(crate) async fn clear_set_id(
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

    pub(crate) fn keep(&self, ino: u64, file: Box<dyn OpenFile>) -> u64 {
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
