//! Tlopen, Tlcreate, Tread, Twrite, Tfsync.

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;
use rustix::fs::{FileType, Mode, OFlags};
use wasm9p_proto::consts::{open as p9, IOHDRSZ};
use wasm9p_proto::{
    Data, Errno, Message, Rfsync, Rlcreate, Rlopen, Rread, Rwrite, Tfsync, Tlcreate, Tlopen, Tread,
    Twrite,
};

use super::{check_name, child, ioerr, stat_node, sys, writable};
use crate::fid::{Fid, Open};
use crate::session::Session;
use crate::stat;

/// 9P2000.L open flags (Linux generic values) we pass on, and their host equivalents.
/// Everything else (O_CREAT, O_EXCL outside lcreate, O_DIRECT, O_ASYNC, O_NOATIME,
/// O_CLOEXEC...) is dropped; O_NOFOLLOW and O_CLOEXEC are always added.
const PASSED_FLAGS: [(u32, OFlags); 7] = [
    (p9::TRUNC, OFlags::TRUNC),
    (p9::APPEND, OFlags::APPEND),
    (p9::NONBLOCK, OFlags::NONBLOCK),
    (p9::DSYNC, OFlags::DSYNC),
    (p9::SYNC, OFlags::SYNC),
    (p9::DIRECTORY, OFlags::DIRECTORY),
    (p9::LARGEFILE, OFlags::LARGEFILE),
];

fn host_flags(flags: u32) -> OFlags {
    let mut out = match flags & p9::ACCMODE {
        p9::WRONLY => OFlags::WRONLY,
        p9::RDWR => OFlags::RDWR,
        _ => OFlags::RDONLY,
    };
    for (bit, host) in PASSED_FLAGS {
        if flags & bit != 0 {
            out |= host;
        }
    }
    out | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY
}

fn wants_write(flags: u32) -> bool {
    flags & p9::ACCMODE != p9::RDONLY || flags & p9::TRUNC != 0
}

/// The iounit we announce: a whole msize minus the I/O header.
fn iounit(s: &Session) -> u32 {
    s.msize() - IOHDRSZ
}

pub(super) fn lopen(s: &Session, t: Tlopen) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    if !matches!(*fid.open_state(), Open::None) {
        return Err(Errno::EINVAL);
    }
    if wants_write(t.flags) {
        writable(&fid)?;
    }
    let node = fid.node();
    let st = stat_node(&node)?;
    let ft = FileType::from_raw_mode(st.st_mode);
    let mut flags = host_flags(t.flags);
    let open = match ft {
        FileType::Directory => {
            if wants_write(t.flags) {
                return Err(Errno::EISDIR);
            }
            let fd = rustix::fs::openat(
                &*node.parent,
                node.name.as_str(),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(sys)?;
            Open::Dir {
                fd: Arc::new(fd),
                listing: None,
            }
        }
        FileType::Symlink => return Err(Errno::ELOOP),
        other => {
            if other != FileType::RegularFile {
                // A FIFO or device must never block a server thread.
                flags |= OFlags::NONBLOCK;
            }
            let fd = rustix::fs::openat(&*node.parent, node.name.as_str(), flags, Mode::empty())
                .map_err(sys)?;
            Open::File(Arc::new(std::fs::File::from(fd)))
        }
    };
    *fid.open_state() = open;
    let qid = stat::qid(&st, fid.export.root_dev);
    Ok(Rlopen {
        qid,
        iounit: iounit(s),
    }
    .into())
}

pub(super) fn lcreate(s: &Session, t: Tlcreate) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    writable(&fid)?;
    check_name(&t.name)?;
    let dir = fid.dir()?;
    let mut flags = host_flags(t.flags) | OFlags::CREATE;
    if t.flags & p9::EXCL != 0 {
        flags |= OFlags::EXCL;
    }
    let mode = Mode::from_raw_mode(t.mode & 0o7777);
    let fd = rustix::fs::openat(&*dir, t.name.as_str(), flags, mode).map_err(sys)?;
    super::modes::exact(&fd, t.mode);
    let st = rustix::fs::fstat(&fd).map_err(sys)?;
    let qid = stat::qid(&st, fid.export.root_dev);
    // The fid now names the new, open file.
    let created = Fid::new(fid.export.clone(), child(&fid, dir, &t.name), qid);
    *created.open_state() = Open::File(Arc::new(std::fs::File::from(fd)));
    s.fids.replace(t.fid, created);
    Ok(Rlcreate {
        qid,
        iounit: iounit(s),
    }
    .into())
}

pub(super) fn read(s: &Session, t: Tread) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    let count = t.count.min(s.msize() - IOHDRSZ) as usize;
    let data = match &*fid.open_state() {
        Open::File(file) => Some(file.clone()),
        Open::XattrRead(value) => {
            let start = (t.offset.min(value.len() as u64)) as usize;
            let end = (start + count).min(value.len());
            return Ok(Rread {
                data: Data(value.slice(start..end)),
            }
            .into());
        }
        Open::Dir { .. } => return Err(Errno::EISDIR),
        _ => None,
    };
    let file = data.ok_or(Errno::EBADF)?;
    // Read straight into uninitialised capacity: no zeroing of up to 1 MiB per read.
    let mut buf = Vec::with_capacity(count);
    if count > 0 {
        rustix::io::pread(&*file, rustix::buffer::spare_capacity(&mut buf), t.offset)
            .map_err(sys)?;
    }
    Ok(Rread {
        data: Data(Bytes::from(buf)),
    }
    .into())
}

pub(super) fn write(s: &Session, t: Twrite) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    let mut open = fid.open_state();
    match &mut *open {
        Open::File(file) => {
            let file = file.clone();
            drop(open);
            let n = file.write_at(&t.data.0, t.offset).map_err(ioerr)?;
            Ok(Rwrite { count: n as u32 }.into())
        }
        Open::XattrWrite { size, value, .. } => {
            if t.offset != value.len() as u64 || value.len() as u64 + t.data.0.len() as u64 > *size
            {
                return Err(Errno::EINVAL);
            }
            value.extend_from_slice(&t.data.0);
            Ok(Rwrite {
                count: t.data.0.len() as u32,
            }
            .into())
        }
        _ => Err(Errno::EBADF),
    }
}

pub(super) fn fsync(s: &Session, t: Tfsync) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    match &*fid.open_state() {
        Open::File(file) if t.datasync.0 != 0 => file.sync_data().map_err(ioerr)?,
        Open::File(file) => file.sync_all().map_err(ioerr)?,
        Open::Dir { fd, .. } => rustix::fs::fsync(&**fd).map_err(sys)?,
        _ => return Err(Errno::EBADF),
    }
    Ok(Rfsync {}.into())
}
