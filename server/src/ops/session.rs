//! Tattach and Tclunk: binding fids to an export's root, and releasing them.

use wasm9p_proto::consts::NOFID;
use wasm9p_proto::{Errno, Message, Rattach, Rclunk, Tattach, Tclunk};

use super::{stat_node, xattr};
use crate::fid::{Fid, Node, Open};
use crate::session::Session;
use crate::stat;

pub(super) fn attach(s: &Session, t: Tattach) -> Result<Message, Errno> {
    if t.afid != NOFID {
        return Err(Errno::EBADF);
    }
    let exports = &s.shared.exports;
    let export = if t.aname.is_empty() {
        match exports.as_slice() {
            [only] => only,
            _ => return Err(Errno::ENOENT),
        }
    } else {
        exports
            .iter()
            .find(|e| e.matches(&t.aname))
            .ok_or(Errno::ENOENT)?
    };
    let node = Node::root(export);
    let qid = stat::qid(&stat_node(&node)?, export.root_dev);
    s.fids.insert(t.fid, Fid::new(export.clone(), node, qid))?;
    Ok(Rattach { qid }.into())
}

pub(super) fn clunk(s: &Session, t: Tclunk) -> Result<Message, Errno> {
    let fid = s.fids.remove(t.fid)?;
    let open = std::mem::take(&mut *fid.open_state());
    if let Open::XattrWrite {
        name,
        size,
        flags,
        value,
        ..
    } = open
    {
        xattr::commit(&fid, &name, size, flags, &value)?;
    }
    Ok(Rclunk {}.into())
}
