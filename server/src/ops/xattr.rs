//! Txattrwalk and Txattrcreate: extended attributes read and written through a fid.
//!
//! Reading: Txattrwalk binds `newfid` to a snapshot of the value (or of the name list
//! when the name is empty), which the client reads with Tread. Writing: Txattrcreate
//! turns a fid into a buffer of `attr_size` bytes filled by Twrite and applied on Tclunk
//! (size 0 with XATTR_REPLACE removes the attribute, as Linux's removexattr sends it).

use std::os::fd::{AsFd, OwnedFd};

use bytes::{Bytes, BytesMut};
use rustix::fs::{Mode, OFlags, XattrFlags};
use wasm9p_proto::consts::{LISTINGS_FILL_XATTR, ORDERED_XATTR};
use wasm9p_proto::{Errno, Message, Rxattrcreate, Rxattrwalk, Txattrcreate, Txattrwalk};

use super::{sys, writable};
use crate::fid::{Fid, Open, XattrReservation};
use crate::session::Session;

/// Largest xattr value or name list handled (Linux XATTR_SIZE_MAX).
pub(crate) const XATTR_SIZE_MAX: u64 = 64 * 1024;
const XATTR_CREATE: u32 = 1;
const XATTR_REPLACE: u32 = 2;

/// A descriptor to ask about xattrs, or `None` for a symlink (which has none we serve).
fn xattr_fd(fid: &Fid) -> Result<Option<OwnedFd>, Errno> {
    if let Open::File(file) = &*fid.open_state() {
        return file
            .as_fd()
            .try_clone_to_owned()
            .map(Some)
            .map_err(|e| Errno::from(&e));
    }
    let node = fid.node();
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    match rustix::fs::openat(&*node.parent, node.name.as_str(), flags, Mode::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(rustix::io::Errno::LOOP) => Ok(None),
        Err(e) => Err(sys(e)),
    }
}

fn read_value(fd: &OwnedFd, name: &str) -> Result<Bytes, Errno> {
    let size = if name.is_empty() {
        rustix::fs::flistxattr_query(fd).map_err(sys)?
    } else {
        rustix::fs::fgetxattr_query(fd, name).map_err(sys)?
    };
    if size as u64 > XATTR_SIZE_MAX {
        return Err(Errno::E2BIG);
    }
    let mut buf = vec![0u8; size];
    let n = if name.is_empty() {
        rustix::fs::flistxattr(fd, &mut buf[..]).map_err(sys)?
    } else {
        rustix::fs::fgetxattr(fd, name, &mut buf[..]).map_err(sys)?
    };
    buf.truncate(n);
    Ok(Bytes::from(buf))
}

pub(super) fn xattrwalk(s: &Session, t: Txattrwalk) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    if t.name.contains('\0') {
        return Err(Errno::EINVAL);
    }
    let value = if t.name == ORDERED_XATTR || t.name == LISTINGS_FILL_XATTR {
        // Promises clients ask for (see the constants' docs). In order: true of every
        // connection, whose reader runs metadata requests one after the other and
        // starts a data request only once those before it are done. Listings filled:
        // a Treaddir is packed until its next entry does not fit (`dir::readdir`), and
        // names longer than `MAX_ENTRY_NAME` are never listed (`dir::list`).
        Bytes::new()
    } else {
        match xattr_fd(&fid)? {
            Some(fd) => read_value(&fd, &t.name)?,
            None if t.name.is_empty() => Bytes::new(),
            None => return Err(Errno::ENODATA),
        }
    };
    let size = value.len() as u64;
    let reader = fid.clone_unopened();
    *reader.open_state() = Open::XattrRead(value);
    if t.newfid == t.fid {
        s.fids.replace(t.fid, reader);
    } else {
        s.fids.insert(t.newfid, reader)?;
    }
    Ok(Rxattrwalk { size }.into())
}

pub(super) fn xattrcreate(s: &Session, t: Txattrcreate) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    writable(&fid)?;
    if t.name.is_empty() || t.name.contains('\0') {
        return Err(Errno::EINVAL);
    }
    if t.attr_size > XATTR_SIZE_MAX {
        return Err(Errno::E2BIG);
    }
    let mut open = fid.open_state();
    if !matches!(*open, Open::None) {
        return Err(Errno::EINVAL);
    }
    let reserved = XattrReservation::claim(&s.xattr_pending, t.attr_size as usize)?;
    *open = Open::XattrWrite {
        name: t.name,
        size: t.attr_size,
        flags: t.flags,
        // Grows with the data actually written, never ahead of it.
        value: BytesMut::new(),
        _reserved: reserved,
    };
    Ok(Rxattrcreate {}.into())
}

/// Applies a finished Txattrcreate (called from Tclunk).
pub(crate) fn commit(
    fid: &Fid,
    name: &str,
    size: u64,
    flags: u32,
    value: &[u8],
) -> Result<(), Errno> {
    if value.len() as u64 != size {
        return Err(Errno::EINVAL);
    }
    let fd = xattr_fd(fid)?.ok_or(Errno::EPERM)?;
    if size == 0 && flags & XATTR_REPLACE != 0 {
        return rustix::fs::fremovexattr(&fd, name).map_err(sys);
    }
    let mut xflags = XattrFlags::empty();
    if flags & XATTR_CREATE != 0 {
        xflags |= XattrFlags::CREATE;
    }
    if flags & XATTR_REPLACE != 0 {
        xflags |= XattrFlags::REPLACE;
    }
    rustix::fs::fsetxattr(&fd, name, value, xflags).map_err(sys)
}
