//! Names a client gives, and what a mutation first checks: one component that is not
//! `.` or `..` (nor a mapped-file export's metadata name), a writable export, the node
//! a name makes inside a directory fid.

use std::sync::Arc;

use cap_std::fs::Dir;
use wasm9p_proto::consts::NAME_MAX;
use wasm9p_proto::Errno;

use crate::export::Export;
use crate::fid::{Fid, Node};
use crate::security;

/// A name a client may create, rename to or look up: one component, not `.`/`..`.
pub(crate) fn check_name(name: &str) -> Result<(), Errno> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(Errno::EINVAL);
    }
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

/// EROFS for a mutation on a read-only export.
pub(crate) fn writable(fid: &Fid) -> Result<(), Errno> {
    if fid.read_only() {
        Err(Errno::EROFS)
    } else {
        Ok(())
    }
}

/// A name a client may create, rename to or look up in `export`: [`check_name`], and
/// not one a mapped-file export keeps its metadata under (EINVAL, as QEMU says).
pub(crate) fn check_name_in(export: &Export, name: &str) -> Result<(), Errno> {
    check_name(name)?;
    if export.metadata_files() && security::is_metadata_name(name) {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// The node `name` inside directory fid `dir_fid`.
pub(crate) fn child(dir_fid: &Fid, dir: Arc<Dir>, name: &str) -> Node {
    let mut path = dir_fid.node().path;
    path.push(name.to_owned());
    Node {
        parent: dir,
        name: name.to_owned(),
        path,
    }
}
