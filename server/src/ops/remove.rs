//! Trename, Trenameat, Tunlinkat, Tremove (in a mapped-file export, the metadata files
//! follow: `security::files`).

use cap_std::fs::Dir;
use rustix::fs::AtFlags;
use wasm9p_proto::consts::AT_REMOVEDIR;
use wasm9p_proto::{
    Errno, Message, Rremove, Rrename, Rrenameat, Runlinkat, Tremove, Trename, Trenameat, Tunlinkat,
};

use super::names::{check_name_in, child, writable};
use crate::connection::Connection;
use crate::errors::sys;
use crate::export::Export;
use crate::security::files;

pub(super) fn rename(s: &Connection, t: Trename) -> Result<Message, Errno> {
    let fid = s.fids.get(t.fid)?;
    let dfid = s.fids.get(t.dfid)?;
    writable(&fid)?;
    check_name_in(&fid.export, &t.name)?;
    let node = fid.node();
    if node.is_root() {
        return Err(Errno::EBUSY);
    }
    let dir = dfid.dir()?;
    rustix::fs::renameat(&*node.parent, node.name.as_str(), &*dir, t.name.as_str()).map_err(sys)?;
    if fid.export.metadata_files() {
        files::renamed(&*node.parent, &node.name, &*dir, &t.name);
    }
    // The fid follows its file to the new place.
    fid.set_node(child(&dfid, dir, &t.name));
    Ok(Rrename {}.into())
}

pub(super) fn renameat(s: &Connection, t: Trenameat) -> Result<Message, Errno> {
    let old = s.fids.get(t.olddirfid)?;
    let new = s.fids.get(t.newdirfid)?;
    writable(&old)?;
    check_name_in(&old.export, &t.oldname)?;
    check_name_in(&old.export, &t.newname)?;
    let (old_dir, new_dir) = (old.dir()?, new.dir()?);
    rustix::fs::renameat(&*old_dir, t.oldname.as_str(), &*new_dir, t.newname.as_str())
        .map_err(sys)?;
    if old.export.metadata_files() {
        files::renamed(&*old_dir, &t.oldname, &*new_dir, &t.newname);
    }
    Ok(Rrenameat {}.into())
}

pub(super) fn unlinkat(s: &Connection, t: Tunlinkat) -> Result<Message, Errno> {
    let fid = s.fids.get(t.dirfd)?;
    writable(&fid)?;
    check_name_in(&fid.export, &t.name)?;
    let dir = fid.dir()?;
    let flags = if t.flags & AT_REMOVEDIR != 0 {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    unlink(&fid.export, &dir, &t.name, flags)?;
    Ok(Runlinkat {}.into())
}

pub(super) fn remove(s: &Connection, t: Tremove) -> Result<Message, Errno> {
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
    unlink(&fid.export, &node.parent, &node.name, flags)?;
    Ok(Rremove {}.into())
}

/// Removes `name` in `dir`, and in a mapped-file export its metadata (a directory's
/// own metadata directory first).
fn unlink(export: &Export, dir: &Dir, name: &str, flags: AtFlags) -> Result<(), Errno> {
    let files = export.metadata_files();
    if files && flags.contains(AtFlags::REMOVEDIR) {
        files::removing_dir(dir, name);
    }
    rustix::fs::unlinkat(dir, name, flags).map_err(sys)?;
    if files {
        files::removed(dir, name);
    }
    Ok(())
}
