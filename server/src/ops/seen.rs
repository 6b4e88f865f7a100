//! Nodes as clients see them: `lstat` and `fstat` with a mapped export's owners, modes
//! and special files applied, qids of the type shown.

use std::os::fd::{AsFd, BorrowedFd};

use cap_std::fs::Dir;
use rustix::fs::{AtFlags, Stat};
use wasm9p_proto::consts::mode::{S_IFDIR, S_IFMT, S_IFREG};
use wasm9p_proto::{Errno, Qid};

use crate::errors::sys;
use crate::export::Export;
use crate::fid::Node;
use crate::security::{self, At};

/// `lstat` of a node as clients see it (mapped, in a mapped export): never follows a
/// final symlink.
pub(crate) fn stat_node(export: &Export, node: &Node) -> Result<Stat, Errno> {
    stat_in(export, &node.parent, &node.name)
}

/// `lstat` of `name` in `dir` as clients see it.
pub(crate) fn stat_in(export: &Export, dir: &Dir, name: &str) -> Result<Stat, Errno> {
    let mut st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(sys)?;
    if export.mapped() && security::mappable(st.st_mode) {
        security::apply(&mut st, export.meta(dir, name).mapped());
        hide_metadata_link(export, &mut st, dir.as_fd(), name);
    }
    Ok(st)
}

/// A mapped-file directory's link count without its hidden metadata directory.
fn hide_metadata_link(export: &Export, st: &mut Stat, dir: BorrowedFd<'_>, name: &str) {
    if export.metadata_files()
        && st.st_mode & S_IFMT == S_IFDIR
        && security::files::holds_metadata(dir, name)
    {
        st.st_nlink = st.st_nlink.saturating_sub(1);
    }
}

/// The qid of `name` in `dir` as clients see it: of a mapped file only its type
/// matters (a symlink kept as a regular file), so only its mode attribute is read.
pub(crate) fn qid_in(export: &Export, dir: &Dir, name: &str) -> Result<Qid, Errno> {
    let mut st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(sys)?;
    if export.mapped() && st.st_mode & S_IFMT == S_IFREG {
        if let Some(mode) = export.meta(dir, name).mode() {
            st.st_mode = security::shown_type(mode) | (st.st_mode & 0o7777);
        }
    }
    Ok(crate::stat::qid(&st, export.root_dev))
}

/// `fstat` of an open file or directory as clients see it, `node` being where it was
/// opened (mapped-file keeps metadata by name: it is the file's while the name still
/// leads to the same file).
pub(crate) fn stat_open(export: &Export, fd: impl AsFd, node: &Node) -> Result<Stat, Errno> {
    let mut st = rustix::fs::fstat(&fd).map_err(sys)?;
    if !export.mapped() || !security::mappable(st.st_mode) {
        return Ok(st);
    }
    hide_metadata_link(export, &mut st, fd.as_fd(), ".");
    let mapped = if export.metadata_files() {
        let named =
            rustix::fs::statat(&*node.parent, node.name.as_str(), AtFlags::SYMLINK_NOFOLLOW);
        match named {
            Ok(n) if (n.st_dev, n.st_ino) == (st.st_dev, st.st_ino) => {
                export.meta(&*node.parent, &node.name).mapped()
            }
            _ => return Ok(st),
        }
    } else {
        At::fd(export.security_model, &fd).mapped()
    };
    security::apply(&mut st, mapped);
    Ok(st)
}
