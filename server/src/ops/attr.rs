//! Tgetattr, Tsetattr, Tstatfs.

use std::os::fd::AsFd;

use cap_std::fs::Permissions;
use rustix::fs::{AtFlags, Mode, OFlags, Timespec, Timestamps, UTIME_NOW, UTIME_OMIT};
use wasm9p_proto::consts::{mode as m, setattr as valid};
use wasm9p_proto::{Errno, Message, Rsetattr, Rstatfs, Tgetattr, Tsetattr, Tstatfs};

use super::names::writable;
use super::seen::{stat_node, stat_open};
use crate::connection::Connection;
use crate::errors::{ioerr, sys};
use crate::fid::{Fid, Node, Open};
use crate::security::{self, Mapped};
use crate::stat;

pub(super) fn getattr(s: &Connection, t: Tgetattr) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    // An open file is asked through its descriptor: it may have been unlinked since.
    let export = &fid.export;
    let st = match &*fid.open_state() {
        Open::File(file) => Some(stat_open(export, file.as_fd(), &fid.node())?),
        Open::Dir { fd, .. } => Some(stat_open(export, fd, &fid.node())?),
        _ => None,
    };
    let st = match st {
        Some(st) => st,
        None => stat_node(export, &fid.node())?,
    };
    Ok(stat::rgetattr(&st, fid.export.root_dev).into())
}

fn timespec(set: bool, now: bool, sec: u64, nsec: u64) -> Timespec {
    match (set, now) {
        (true, _) => Timespec {
            tv_sec: sec as i64,
            tv_nsec: nsec as _,
        },
        (false, true) => Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_NOW,
        },
        (false, false) => Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_OMIT,
        },
    }
}

pub(super) fn setattr(s: &Connection, t: Tsetattr) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    writable(&fid)?;
    let node = fid.node();
    if t.valid & (valid::UID | valid::GID) != 0 {
        // -1 is chown's "leave it"; a client that asks to set it asks for nothing valid
        // (found by fuzzing: rustix refuses to make a Uid of it).
        let set_uid = t.valid & valid::UID != 0;
        let set_gid = t.valid & valid::GID != 0;
        if set_uid && t.uid == u32::MAX || set_gid && t.gid == u32::MAX {
            return Err(Errno::EINVAL);
        }
    }
    if fid.export.mapped() {
        mapped_owner_and_mode(&fid, &t)?;
    } else {
        host_owner_and_mode(&node, &t)?;
    }
    if t.valid & valid::SIZE != 0 {
        truncate(&fid, t.size)?;
    }
    if t.valid & (valid::ATIME | valid::MTIME) != 0 {
        let times = Timestamps {
            last_access: if t.valid & valid::ATIME != 0 {
                timespec(
                    t.valid & valid::ATIME_SET != 0,
                    true,
                    t.atime_sec,
                    t.atime_nsec,
                )
            } else {
                timespec(false, false, 0, 0)
            },
            last_modification: if t.valid & valid::MTIME != 0 {
                timespec(
                    t.valid & valid::MTIME_SET != 0,
                    true,
                    t.mtime_sec,
                    t.mtime_nsec,
                )
            } else {
                timespec(false, false, 0, 0)
            },
        };
        rustix::fs::utimensat(
            &*node.parent,
            node.name.as_str(),
            &times,
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(sys)?;
    }
    Ok(Rsetattr {}.into())
}

/// chmod and chown for real (passthrough).
fn host_owner_and_mode(node: &Node, t: &Tsetattr) -> Result<(), Errno> {
    if t.valid & valid::MODE != 0 {
        // cap-std's set_permissions resolves beneath the export, so even a node
        // replaced by a symlink since the walk cannot lead outside.
        use std::os::unix::fs::PermissionsExt;
        let perms = Permissions::from_std(std::fs::Permissions::from_mode(t.mode & 0o7777));
        node.parent
            .set_permissions(&node.name, perms)
            .map_err(ioerr)?;
    }
    if t.valid & (valid::UID | valid::GID) != 0 {
        let set_uid = t.valid & valid::UID != 0;
        let set_gid = t.valid & valid::GID != 0;
        let uid = set_uid.then(|| rustix::fs::Uid::from_raw(t.uid));
        let gid = set_gid.then(|| rustix::fs::Gid::from_raw(t.gid));
        rustix::fs::chownat(
            &*node.parent,
            node.name.as_str(),
            uid,
            gid,
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(sys)?;
    }
    Ok(())
}

/// chmod and chown in a mapped export: the attributes only, the file type kept.
fn mapped_owner_and_mode(fid: &Fid, t: &Tsetattr) -> Result<(), Errno> {
    if t.valid & (valid::MODE | valid::UID | valid::GID) == 0 {
        return Ok(());
    }
    let node = fid.node();
    let host = rustix::fs::statat(&*node.parent, node.name.as_str(), AtFlags::SYMLINK_NOFOLLOW)
        .map_err(sys)?;
    if !security::mappable(host.st_mode) {
        // A host symlink or special file cannot carry the attributes.
        return Err(Errno::EPERM);
    }
    let meta = fid.export.meta(&*node.parent, &node.name);
    // The type stays what the file shows as (a regular file may stand for another).
    let kind = match host.st_mode & m::S_IFMT {
        m::S_IFREG => meta.mode().map_or(m::S_IFREG, security::shown_type),
        dir => dir,
    };
    let mode = (t.valid & valid::MODE != 0).then_some(kind | (t.mode & 0o7777));
    meta.write(Mapped {
        mode,
        uid: (t.valid & valid::UID != 0).then_some(t.uid),
        gid: (t.valid & valid::GID != 0).then_some(t.gid),
        rdev: None,
    })?;
    if fid.export.metadata_files() {
        security::files::touch_ctime(&*node.parent, &node.name);
    }
    Ok(())
}

fn truncate(fid: &Fid, size: u64) -> Result<(), Errno> {
    if let Open::File(file) = &*fid.open_state() {
        // Through the open file (it may have been unlinked since). A descriptor open
        // only for reading cannot truncate (EINVAL/EBADF): then by name, below; any
        // other error (EFBIG, EIO, ...) is the answer.
        match rustix::fs::ftruncate(file.as_fd(), size) {
            Ok(()) => return Ok(()),
            Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::BADF => {}
            Err(e) => return Err(sys(e)),
        }
    }
    if fid.qid.is_dir() {
        return Err(Errno::EISDIR);
    }
    let node = fid.node();
    let flags = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let fd =
        rustix::fs::openat(&*node.parent, node.name.as_str(), flags, Mode::empty()).map_err(sys)?;
    rustix::fs::ftruncate(&fd, size).map_err(sys)
}

pub(super) fn statfs(s: &Connection, t: Tstatfs) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    let node = fid.node();
    let dir = if fid.qid.is_dir() {
        fid.dir()?
    } else {
        node.parent.clone()
    };
    let fs = rustix::fs::fstatfs(&*dir).map_err(sys)?;
    let vfs = rustix::fs::fstatvfs(&*dir).map_err(sys)?;
    Ok(Rstatfs {
        ty: fs.f_type as u32,
        bsize: vfs.f_bsize as u32,
        blocks: vfs.f_blocks,
        bfree: vfs.f_bfree,
        bavail: vfs.f_bavail,
        files: vfs.f_files,
        ffree: vfs.f_ffree,
        fsid: vfs.f_fsid,
        namelen: vfs.f_namemax as u32,
    }
    .into())
}
