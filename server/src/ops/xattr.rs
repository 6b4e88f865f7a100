//! Txattrwalk and Txattrcreate: extended attributes read and written through a fid.
//!
//! Reading: Txattrwalk binds `newfid` to a snapshot of the value (or of the name list
//! when the name is empty), which the client reads with Tread. Writing: Txattrcreate
//! turns a fid into a buffer of `attr_size` bytes filled by Twrite and applied on Tclunk
//! (size 0 with XATTR_REPLACE removes the attribute, as Linux's removexattr sends it).

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use bytes::{Bytes, BytesMut};
use rustix::fs::{Mode, OFlags, XattrFlags};
use wasm9p_proto::consts::{LISTINGS_FILL_XATTR, ORDERED_XATTR};
use wasm9p_proto::{Errno, Message, Rxattrcreate, Rxattrwalk, Txattrcreate, Txattrwalk};

use super::names::writable;
use crate::connection::Connection;
use crate::errors::sys;
use crate::fid::{Fid, Open, XattrReservation};

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
    // Only a regular file or a directory is opened: never a device's or a FIFO's bytes
    // (their xattrs are not served). An `O_PATH` descriptor says which it is without
    // opening it, and is reopened through its `/proc/self/fd` link (the same inode,
    // whatever the name holds by then).
    let path = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let handle =
        rustix::fs::openat(&*node.parent, node.name.as_str(), path, Mode::empty()).map_err(sys)?;
    let st = rustix::fs::fstat(&handle).map_err(sys)?;
    if !crate::security::mappable(st.st_mode) {
        return Ok(None);
    }
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let link = format!("/proc/self/fd/{}", handle.as_raw_fd());
    rustix::fs::open(link.as_str(), flags, Mode::empty())
        .map(Some)
        .map_err(sys)
}

/// A name list without the names a mapped export keeps for itself.
fn without_reserved(list: &[u8]) -> Vec<u8> {
    list.split_inclusive(|b| *b == 0)
        .filter(|name| !crate::security::reserved(&String::from_utf8_lossy(name)))
        .flatten()
        .copied()
        .collect()
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

pub(super) fn xattrwalk(s: &Connection, t: Txattrwalk) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    if t.name.contains('\0') {
        return Err(Errno::EINVAL);
    }
    let mapped = fid.export.security_model == crate::security::SecurityModel::MappedXattr;
    if mapped && crate::security::reserved(&t.name) {
        // The model's own (see `security`).
        return Err(Errno::ENODATA);
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
            Some(fd) if mapped && t.name.is_empty() => {
                Bytes::from(without_reserved(&read_value(&fd, "")?))
            }
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

pub(super) fn xattrcreate(s: &Connection, t: Txattrcreate) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    writable(&fid)?;
    if t.name.is_empty() || t.name.contains('\0') {
        return Err(Errno::EINVAL);
    }
    if t.attr_size > XATTR_SIZE_MAX {
        return Err(Errno::E2BIG);
    }
    if fid.export.security_model == crate::security::SecurityModel::MappedXattr
        && crate::security::reserved(&t.name)
    {
        return Err(Errno::EACCES);
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
