//! Tsymlink, Treadlink, Tlink.

use rustix::fs::{AtFlags, Mode, OFlags};
use wasm9p_proto::consts::mode as m;
use wasm9p_proto::{Errno, Message, Rlink, Rreadlink, Rsymlink, Tlink, Treadlink, Tsymlink};

use super::names::{check_name_in, writable};
use super::seen::{qid_in, stat_node};
use crate::connection::Connection;
use crate::errors::sys;
use crate::fid::Node;
use crate::security::{self, Mapped};

/// Longest symlink target accepted (Linux PATH_MAX - 1).
const TARGET_MAX: usize = 4095;

pub(super) fn symlink(s: &Connection, t: Tsymlink) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    writable(&fid)?;
    check_name_in(&fid.export, &t.name)?;
    if t.symtgt.is_empty() || t.symtgt.contains('\0') {
        return Err(Errno::EINVAL);
    }
    if t.symtgt.len() > TARGET_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    let dir = fid.dir()?;
    let export = &fid.export;
    if export.mapped() {
        // A regular file holding the target (see `security`).
        let set = Mapped {
            mode: Some(m::S_IFLNK | 0o777),
            uid: Some(fid.uid),
            gid: Some(t.gid),
            rdev: None,
        };
        security::make_file(
            export.security_model,
            &*dir,
            &t.name,
            set,
            t.symtgt.as_bytes(),
        )?;
    } else {
        // The target is stored as text; this server never follows it.
        rustix::fs::symlinkat(t.symtgt.as_str(), &*dir, t.name.as_str()).map_err(sys)?;
    }
    let qid = qid_in(export, &dir, &t.name)?;
    Ok(Rsymlink { qid }.into())
}

pub(super) fn readlink(s: &Connection, t: Treadlink) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    let node = fid.node();
    let target = if fid.export.mapped() && stored_as_file(&fid.export, &node)? {
        mapped_target(&node)?
    } else {
        rustix::fs::readlinkat(&*node.parent, node.name.as_str(), Vec::new())
            .map_err(sys)?
            .into_bytes()
    };
    let target = String::from_utf8(target).map_err(|_| Errno::EILSEQ)?;
    Ok(Rreadlink { target }.into())
}

/// Whether `node` is a symlink a mapped export keeps as a regular file (EINVAL when it
/// is no symlink at all, as readlink says).
fn stored_as_file(export: &crate::export::Export, node: &Node) -> Result<bool, Errno> {
    let st = stat_node(export, node)?;
    if st.st_mode & m::S_IFMT != m::S_IFLNK {
        return Err(Errno::EINVAL);
    }
    let host = rustix::fs::statat(&*node.parent, node.name.as_str(), AtFlags::SYMLINK_NOFOLLOW)
        .map_err(sys)?;
    Ok(host.st_mode & m::S_IFMT == m::S_IFREG)
}

/// A mapped symlink's target: the file's bytes (never more than a target may be).
fn mapped_target(node: &Node) -> Result<Vec<u8>, Errno> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd =
        rustix::fs::openat(&*node.parent, node.name.as_str(), flags, Mode::empty()).map_err(sys)?;
    let mut target = vec![0u8; TARGET_MAX + 1];
    let mut len = 0;
    while len < target.len() {
        match rustix::io::read(&fd, &mut target[len..]).map_err(sys)? {
            0 => break,
            n => len += n,
        }
    }
    if len == 0 || len > TARGET_MAX {
        return Err(Errno::EIO);
    }
    target.truncate(len);
    Ok(target)
}

pub(super) fn link(s: &Connection, t: Tlink) -> Result<Message, Errno> {
    let dfid = s.fids.get(t.dfid)?;
    let fid = s.fids.get(t.fid)?;
    writable(&dfid)?;
    check_name_in(&dfid.export, &t.name)?;
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
    if dfid.export.metadata_files() {
        security::files::linked(&*node.parent, &node.name, &*dir, &t.name);
    }
    Ok(Rlink {}.into())
}
