//! Request handlers, one module per operation family. Each takes the session and a
//! request and returns the reply or a Linux errno (sent as Rlerror).

mod attr;
mod dir;
mod io;
mod link;
mod lock;
mod modes;
pub(crate) mod names;
mod remove;
mod seen;
mod session;
mod walk;
mod xattr;

use wasm9p_proto::{Errno, Message};

use crate::connection::Connection;

/// Runs one request.
pub(crate) fn handle(s: &Connection, msg: Message) -> Result<Message, Errno> {
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
