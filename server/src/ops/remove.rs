//! Trename, Trenameat, Tunlinkat, Tremove.

use rustix::fs::AtFlags;
use wasm9p_proto::consts::AT_REMOVEDIR;
use wasm9p_proto::{
    Errno, Message, Rremove, Rrename, Rrenameat, Runlinkat, Tremove, Trename, Trenameat, Tunlinkat,
};

use super::{check_name, child, sys, writable};
use crate::session::Session;

pub(super) fn rename(s: &Session, t: Trename) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    let dfid = s.fids.get(t.dfid)?;
    writable(&fid)?;
    check_name(&t.name)?;
    let node = fid.node();
    if node.is_root() {
        return Err(Errno::EBUSY);
    }
    let dir = dfid.dir()?;
    rustix::fs::renameat(&*node.parent, node.name.as_str(), &*dir, t.name.as_str()).map_err(sys)?;
    // The fid follows its file to the new place.
    fid.set_node(child(&dfid, dir, &t.name));
    Ok(Rrename {}.into())
}

pub(super) fn renameat(s: &Session, t: Trenameat) -> Result<Message, Errno> {
    let old = s.fids.get(t.olddirfid)?;
    let new = s.fids.get(t.newdirfid)?;
    writable(&old)?;
    check_name(&t.oldname)?;
    check_name(&t.newname)?;
    let (old_dir, new_dir) = (old.dir()?, new.dir()?);
    rustix::fs::renameat(&*old_dir, t.oldname.as_str(), &*new_dir, t.newname.as_str())
        .map_err(sys)?;
    Ok(Rrenameat {}.into())
}

pub(super) fn unlinkat(s: &Session, t: Tunlinkat) -> Result<Message, Errno> {
    let fid = s.fids.get(t.dirfd)?;
    writable(&fid)?;
    check_name(&t.name)?;
    let dir = fid.dir()?;
    let flags = if t.flags & AT_REMOVEDIR != 0 {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    rustix::fs::unlinkat(&*dir, t.name.as_str(), flags).map_err(sys)?;
    Ok(Runlinkat {}.into())
}

pub(super) fn remove(s: &Session, t: Tremove) -> Result<Message, Errno> {
    // Tremove clunks the fid whether or not the removal succeeds.
    let fid = s.fids.remove(t.fid)?;
    writable(&fid)?;
    let node = fid.node();
    if node.is_root() {
        return Err(Errno::EBUSY);
    }
    let flags = if fid.qid.is_dir() {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    rustix::fs::unlinkat(&*node.parent, node.name.as_str(), flags).map_err(sys)?;
    Ok(Rremove {}.into())
}
