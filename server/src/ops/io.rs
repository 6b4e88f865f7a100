//! Tlopen, Tlcreate, Tread, Twrite, Tfsync.

use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use wasm9p_proto::consts::{mode as m, open as p9, IOHDRSZ};
use wasm9p_proto::{
    Data, Errno, Message, Rfsync, Rlcreate, Rlopen, Rread, Rwrite, Tfsync, Tlcreate, Tlopen, Tread,
    Twrite,
};

use super::names::{check_name_in, child, writable};
use super::seen::{stat_in, stat_node, stat_open};
use crate::connection::Connection;
use crate::errors::{ioerr, sys};
use crate::fid::{Fid, Open};
use crate::security::{self, Mapped};
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
fn iounit(s: &Connection) -> u32 {
    s.msize() - IOHDRSZ
}

pub(super) fn lopen(s: &Connection, t: Tlopen) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    if !matches!(*fid.open_state(), Open::None) {
        return Err(Errno::EINVAL);
    }
    if wants_write(t.flags) {
        writable(&fid)?;
    }
    let node = fid.node();
    let export = &fid.export;
    let st = stat_node(export, &node)?;
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
        // The server never opens a device's bytes, nor a special file a mapped export
        // keeps as a regular one (see `security`).
        FileType::CharacterDevice | FileType::BlockDevice => return Err(Errno::EACCES),
        FileType::Fifo | FileType::Socket if export.mapped() => return Err(Errno::EACCES),
        other => {
            if other != FileType::RegularFile || export.allow_devices {
                // A FIFO must never block a server thread; and where device nodes
                // may be made, a name swapped for one since the stat must not open it.
                flags |= OFlags::NONBLOCK;
            }
            let fd = rustix::fs::openat(&*node.parent, node.name.as_str(), flags, Mode::empty())
                .map_err(sys)?;
            if export.allow_devices && !opened_type_is(&fd, other)? {
                return Err(Errno::EACCES);
            }
            Open::File(Arc::new(std::fs::File::from(fd)))
        }
    };
    *fid.open_state() = open;
    let qid = stat::qid(&st, export.root_dev);
    Ok(Rlopen {
        qid,
        iounit: iounit(s),
    }
    .into())
}

pub(super) fn lcreate(s: &Connection, t: Tlcreate) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    writable(&fid)?;
    check_name_in(&fid.export, &t.name)?;
    let dir = fid.dir()?;
    let export = &fid.export;
    let flags = host_flags(t.flags);
    let mapped = export.mapped();
    let mode = if mapped {
        security::HOST_FILE_MODE
    } else {
        t.mode & 0o7777
    };
    let create = flags | OFlags::CREATE | OFlags::EXCL;
    let fd = match rustix::fs::openat(&*dir, t.name.as_str(), create, Mode::from_raw_mode(mode)) {
        Ok(fd) => {
            if mapped {
                let owner = Mapped {
                    mode: Some(m::S_IFREG | (t.mode & 0o7777)),
                    uid: Some(fid.uid),
                    gid: Some(t.gid),
                    rdev: None,
                };
                if let Err(e) = export.meta_of_new(&fd, &*dir, &t.name).write(owner) {
                    let _ = rustix::fs::unlinkat(&*dir, t.name.as_str(), AtFlags::empty());
                    return Err(e);
                }
            } else {
                super::modes::exact(&fd, t.mode);
            }
            fd
        }
        // Without O_EXCL an existing file is opened, if it is a regular one.
        Err(rustix::io::Errno::EXIST) if t.flags & p9::EXCL == 0 => {
            let existing = stat_in(export, &dir, &t.name)?;
            match FileType::from_raw_mode(existing.st_mode) {
                FileType::RegularFile => {}
                FileType::Directory => return Err(Errno::EISDIR),
                FileType::Symlink => return Err(Errno::ELOOP),
                _ => return Err(Errno::EACCES),
            }
            let fd = rustix::fs::openat(
                &*dir,
                t.name.as_str(),
                flags | OFlags::NONBLOCK,
                Mode::empty(),
            )
            .map_err(sys)?;
            if !opened_type_is(&fd, FileType::RegularFile)? {
                return Err(Errno::EACCES);
            }
            fd
        }
        Err(e) => return Err(sys(e)),
    };
    let made = child(&fid, dir, &t.name);
    let st = stat_open(export, &fd, &made)?;
    let qid = stat::qid(&st, export.root_dev);
    // The fid now names the new, open file.
    let created = Fid::new(fid.export.clone(), made, qid, fid.uid);
    *created.open_state() = Open::File(Arc::new(std::fs::File::from(fd)));
    s.fids.replace(t.fid, created);
    Ok(Rlcreate {
        qid,
        iounit: iounit(s),
    }
    .into())
}

/// Whether what `fd` opened is of type `ft` on the host (a name may have been swapped
/// between a stat and the open).
fn opened_type_is(fd: &impl AsFd, ft: FileType) -> Result<bool, Errno> {
    let st = rustix::fs::fstat(fd).map_err(sys)?;
    Ok(FileType::from_raw_mode(st.st_mode) == ft)
}

pub(super) fn read(s: &Connection, t: Tread) -> Result<Message, Errno> {
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

pub(super) fn write(s: &Connection, t: Twrite) -> Result<Message, Errno> {
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

pub(super) fn fsync(s: &Connection, t: Tfsync) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    match &*fid.open_state() {
        Open::File(file) if t.datasync.0 != 0 => file.sync_data().map_err(ioerr)?,
        Open::File(file) => file.sync_all().map_err(ioerr)?,
        Open::Dir { fd, .. } => rustix::fs::fsync(&**fd).map_err(sys)?,
        _ => return Err(Errno::EBADF),
    }
    Ok(Rfsync {}.into())
}
