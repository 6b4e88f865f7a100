//! Tattach and Tclunk: binding fids to an export's root, and releasing them.

use std::sync::Arc;

use wasm9p_proto::consts::NOFID;
use wasm9p_proto::{Errno, Message, Rattach, Rclunk, Tattach, Tclunk};

use super::seen::stat_node;
use super::xattr;
use crate::connection::Connection;
use crate::fid::{Fid, Node, Open};
use crate::stat;

pub(super) fn attach(s: &Connection, t: Tattach) -> Result<Message, Errno> {
    if t.afid != NOFID {
        return Err(Errno::EBADF);
    }
    let exports = &s.shared.exports;
    // The export named, and the directory inside it when the aname goes further.
    let (export, inside) = if t.aname.is_empty() {
        match exports.as_slice() {
            [only] => (only, None),
            _ => return Err(Errno::ENOENT),
        }
    } else if let Some(whole) = exports.iter().find(|e| e.matches(&t.aname)) {
        (whole, None)
    } else {
        // A directory inside an export: the longest export prefix that names one.
        exports
            .iter()
            .filter_map(|e| e.below(&t.aname).map(|rest| (e, Some(rest))))
            .min_by_key(|(_, rest)| rest.map_or(0, str::len))
            .ok_or(Errno::ENOENT)?
    };
    if !s.shared.may_attach(export, &s.peer) {
        return Err(Errno::EACCES);
    }
    let export = match inside {
        None => export.clone(),
        Some(rest) => Arc::new(export.subdir(rest)?),
    };
    let export = &export;
    let node = Node::root(export);
    let qid = stat::qid(&stat_node(export, &node)?, export.root_dev);
    let uid = match t.n_uname {
        u32::MAX => rustix::process::geteuid().as_raw(),
        uid => uid,
    };
    s.fids
        .insert(t.fid, Fid::new(export.clone(), node, qid, uid))?;
    Ok(Rattach { qid }.into())
}

pub(super) fn clunk(s: &Connection, t: Tclunk) -> Result<Message, Errno> {
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
