//! Tsymlink, Treadlink, Tlink.

use rustix::fs::AtFlags;
use wasm9p_proto::{Errno, Message, Rlink, Rreadlink, Rsymlink, Tlink, Treadlink, Tsymlink};

use super::{check_name, stat_in, sys, writable};
use crate::session::Session;
use crate::stat;

/// Longest symlink target accepted (Linux PATH_MAX - 1).
const TARGET_MAX: usize = 4095;

pub(super) fn symlink(s: &Session, t: Tsymlink) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    writable(&fid)?;
    check_name(&t.name)?;
    if t.symtgt.is_empty() || t.symtgt.contains('\0') {
        return Err(Errno::EINVAL);
    }
    if t.symtgt.len() > TARGET_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    let dir = fid.dir()?;
    // The target is stored as text; this server never follows it.
    rustix::fs::symlinkat(t.symtgt.as_str(), &*dir, t.name.as_str()).map_err(sys)?;
    let qid = stat::qid(&stat_in(&dir, &t.name)?, fid.export.root_dev);
    Ok(Rsymlink { qid }.into())
}

pub(super) fn readlink(s: &Session, t: Treadlink) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    let node = fid.node();
    let target =
        rustix::fs::readlinkat(&*node.parent, node.name.as_str(), Vec::new()).map_err(sys)?;
    let target = target.into_string().map_err(|_| Errno::EILSEQ)?;
    Ok(Rreadlink { target }.into())
}

pub(super) fn link(s: &Session, t: Tlink) -> Result<Message, Errno> {
    let dfid = s.fids.get(t.dfid)?;
    let fid = s.fids.get(t.fid)?;
    writable(&dfid)?;
    check_name(&t.name)?;
    if fid.qid.is_dir() {
        return Err(Errno::EPERM);
    }
    let dir = dfid.dir()?;
    let node = fid.node();
    // linkat without AT_SYMLINK_FOLLOW links the symlink itself, never its target.
    rustix::fs::linkat(
        &*node.parent,
        node.name.as_str(),
        &*dir,
        t.name.as_str(),
        AtFlags::empty(),
    )
    .map_err(sys)?;
    Ok(Rlink {}.into())
}
