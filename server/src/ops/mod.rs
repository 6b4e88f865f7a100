//! Request handlers, one module per operation family. Each takes the session and a
//! request and returns the reply or a Linux errno (sent as Rlerror).

mod attr;
mod dir;
mod io;
mod link;
mod lock;
mod modes;
mod remove;
mod session;
mod walk;
mod xattr;

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

use cap_std::fs::Dir;
use rustix::fs::{AtFlags, Stat};
use wasm9p_proto::consts::mode::{S_IFDIR, S_IFMT, S_IFREG};
use wasm9p_proto::consts::NAME_MAX;
use wasm9p_proto::{Errno, Message, Qid};

use crate::export::Export;
use crate::fid::{Fid, Node};
use crate::security::{self, At};
use crate::session::Session;

/// Runs one request.
pub(crate) fn handle(s: &Session, msg: Message) -> Result<Message, Errno> {
    use Message as M;
    match msg {
        M::Tattach(t) => session::attach(s, t),
        M::Tauth(_) => Err(Errno::ENOENT),
        M::Tclunk(t) => session::clunk(s, t),
        M::Twalk(t) => walk::walk(s, t),
        M::Tgetattr(t) => attr::getattr(s, t),
        M::Tsetattr(t) => attr::setattr(s, t),
        M::Tstatfs(t) => attr::statfs(s, t),
        M::Tlopen(t) => io::lopen(s, t),
        M::Tlcreate(t) => io::lcreate(s, t),
        M::Tread(t) => io::read(s, t),
        M::Twrite(t) => io::write(s, t),
        M::Tfsync(t) => io::fsync(s, t),
        M::Treaddir(t) => dir::readdir(s, t),
        M::Tmkdir(t) => dir::mkdir(s, t),
        M::Tmknod(t) => dir::mknod(s, t),
        M::Tsymlink(t) => link::symlink(s, t),
        M::Treadlink(t) => link::readlink(s, t),
        M::Tlink(t) => link::link(s, t),
        M::Trename(t) => remove::rename(s, t),
        M::Trenameat(t) => remove::renameat(s, t),
        M::Tunlinkat(t) => remove::unlinkat(s, t),
        M::Tremove(t) => remove::remove(s, t),
        M::Txattrwalk(t) => xattr::xattrwalk(s, t),
        M::Txattrcreate(t) => xattr::xattrcreate(s, t),
        M::Tlock(t) => lock::lock(s, t),
        M::Tgetlock(t) => lock::getlock(s, t),
        // Tversion and Tflush are handled by the session loop; replies never get here.
        _ => Err(Errno::EOPNOTSUPP),
    }
}

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

/// A rustix errno as a 9P errno (both are Linux values).
pub(crate) fn sys(e: rustix::io::Errno) -> Errno {
    Errno(e.raw_os_error() as u32)
}

/// A std I/O error as a 9P errno.
pub(crate) fn ioerr(e: std::io::Error) -> Errno {
    Errno::from(&e)
}

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
