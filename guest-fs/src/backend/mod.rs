//! What a mount is made of: a [`Backend`] serving [`Node`]s.
//!
//! The namespace resolves paths by asking backends one name at a time. A backend that
//! caches answers [`Backend::lookup_cached`] / [`Backend::readlink_cached`] on the
//! calling thread without waiting; only when those return `None` does resolution await
//! the backend's asynchronous operation. So a path whose components are all cached is
//! resolved without touching the network or suspending.
//!
//! Backends: [`ninep::NinepFs`] (a 9P mount with the v9fs-style caches in front of the
//! client), [`bind::BindFs`] (a host directory through cap-std: the baseline the 9p
//! mounts are measured and checked against) and [`memory::MemoryFs`] (an in-memory
//! file system: the double the namespace's and the host's unit tests run on, so they
//! need neither a server nor a host directory; no `--mount` type makes one).

pub mod bind;
pub mod memory;
pub mod ninep;

use std::sync::Arc;

use bytes::Bytes;
use wasm9p_proto::Errno;

pub use wasm9p_proto::BoxFuture;

pub use crate::client::SetAttr;
pub use crate::node::{Attr, Entry, Kind, Node, Special, StatFs};

/// What [`Backend::make`] makes, with what each kind of node needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewNode<'a> {
    /// A directory.
    Dir {
        /// Its permission bits.
        mode: u32,
    },
    /// A regular file.
    File {
        /// Its permission bits.
        mode: u32,
        /// A name already taken is EEXIST; without it, a file already there is the
        /// answer (a directory there is EISDIR).
        exclusive: bool,
    },
    /// A symbolic link.
    Symlink {
        /// What it points to, stored verbatim.
        target: &'a str,
    },
    /// A FIFO, socket or device node. A backend that cannot make it answers EPERM (a
    /// 9p server makes device nodes only where its export allows, or keeps them
    /// mapped; see `wasm9p_server::security`).
    Special {
        /// Which kind.
        special: Special,
        /// Its permission bits.
        mode: u32,
        /// A device node's device (Linux's `dev_t`); 0 for the rest.
        rdev: u64,
    },
}

/// How a file is opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenFlags {
    /// For reading.
    pub read: bool,
    /// For writing.
    pub write: bool,
    /// Truncate to zero length on open.
    pub truncate: bool,
    /// Every write goes to the end.
    pub append: bool,
}

/// An open file. Writes may be buffered (write-back): [`OpenFile::flush`] sends them
/// and reports any error a buffered write met; close a file by flushing it, then
/// dropping it (a dropped file with unflushed data still sends it, but nobody hears
/// about an error then).
pub trait OpenFile: Send + Sync {
    /// Reads up to `len` bytes at `offset` (fewer at end of file).
    fn read_at<'a>(&'a self, offset: u64, len: usize) -> BoxFuture<'a, Result<Bytes, Errno>>;
    /// Writes `data` at `offset` (at the end in append mode); returns the count.
    fn write_at<'a>(&'a self, offset: u64, data: Bytes) -> BoxFuture<'a, Result<usize, Errno>>;
    /// Sends buffered writes; reports the first error any write met since the last flush.
    fn flush<'a>(&'a self) -> BoxFuture<'a, Result<(), Errno>>;
    /// Flushes, then asks the server to make the file durable.
    fn fsync<'a>(&'a self, datasync: bool) -> BoxFuture<'a, Result<(), Errno>>;
    /// The size as this file sees it, buffered writes included.
    fn size<'a>(&'a self) -> BoxFuture<'a, Result<u64, Errno>>;
    /// Attributes of the file through this open, so that they are there after the
    /// file's name is gone (`fstat`); the size includes buffered writes.
    fn getattr<'a>(&'a self) -> BoxFuture<'a, Result<Attr, Errno>>;
    /// Truncates or extends the file to `size` through this open, so that it works
    /// after the file's name is gone (`ftruncate`); EINVAL unless open for writing.
    fn set_len<'a>(&'a self, size: u64) -> BoxFuture<'a, Result<(), Errno>>;
}

/// A filesystem that can be mounted in a namespace.
pub trait Backend: Send + Sync + 'static {
    /// The root directory.
    fn root(&self) -> Node;

    /// `name` in `dir` if the answer is known without waiting (a cache hit, positive or
    /// negative); `None` means: call [`Backend::lookup`].
    fn lookup_cached(&self, _dir: &Node, _name: &str) -> Option<Result<Node, Errno>> {
        None
    }

    /// `name` in `dir`; ENOENT if missing, ENOTDIR if `dir` is not a directory.
    fn lookup<'a>(&'a self, dir: &'a Node, name: &'a str) -> BoxFuture<'a, Result<Node, Errno>>;

    /// The target of symlink `link` if known without waiting.
    fn readlink_cached(&self, _link: &Node) -> Option<Arc<str>> {
        None
    }

    /// The target of symlink `link`.
    fn readlink<'a>(&'a self, link: &'a Node) -> BoxFuture<'a, Result<Arc<str>, Errno>>;

    /// Attributes.
    fn getattr<'a>(&'a self, node: &'a Node) -> BoxFuture<'a, Result<Attr, Errno>>;

    /// Entries of a directory after `cookie` (0: from the start), without `.` and `..`,
    /// each carrying the cookie that resumes after it. It may return only some of the
    /// rest; an empty result is the end.
    fn readdir<'a>(
        &'a self,
        dir: &'a Node,
        cookie: u64,
    ) -> BoxFuture<'a, Result<Vec<Entry>, Errno>>;

    /// Makes `name` in `dir`: a directory, a regular file, a symlink or a special file,
    /// as [`NewNode`] says; EEXIST if the name is taken (but see [`NewNode::File`]).
    fn make<'a>(
        &'a self,
        dir: &'a Node,
        name: &'a str,
        what: NewNode<'a>,
    ) -> BoxFuture<'a, Result<Node, Errno>>;

    /// Removes `name`: a directory (must be empty) if `dir_only`, else a non-directory.
    fn unlink<'a>(
        &'a self,
        dir: &'a Node,
        name: &'a str,
        dir_only: bool,
    ) -> BoxFuture<'a, Result<(), Errno>>;

    /// Renames within this backend, replacing a compatible target as POSIX does.
    fn rename<'a>(
        &'a self,
        from_dir: &'a Node,
        from: &'a str,
        to_dir: &'a Node,
        to: &'a str,
    ) -> BoxFuture<'a, Result<(), Errno>>;

    /// Changes mode, owner, size or times.
    fn setattr<'a>(&'a self, node: &'a Node, attr: &'a SetAttr)
        -> BoxFuture<'a, Result<(), Errno>>;

    /// Makes `name` in `dir` a hard link to `target` (not a directory).
    fn link<'a>(
        &'a self,
        target: &'a Node,
        dir: &'a Node,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), Errno>>;

    /// Makes the directory `dir`'s entries durable (`fsync` of a directory). The
    /// default, for a backend with nothing durable below it (memory), has nothing to do.
    fn sync_dir<'a>(&'a self, _dir: &'a Node) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// Statistics of the file system holding `node`.
    fn statfs<'a>(&'a self, node: &'a Node) -> BoxFuture<'a, Result<StatFs, Errno>>;

    /// Opens a regular file.
    fn open<'a>(
        &'a self,
        file: &'a Node,
        flags: OpenFlags,
    ) -> BoxFuture<'a, Result<Box<dyn OpenFile>, Errno>>;

    /// Reads up to `len` bytes at `offset` (fewer at end of file).
    fn read_at<'a>(
        &'a self,
        file: &'a Node,
        offset: u64,
        len: usize,
    ) -> BoxFuture<'a, Result<Bytes, Errno>>;

    /// Writes `data` at `offset`; returns the count written.
    fn write_at<'a>(
        &'a self,
        file: &'a Node,
        offset: u64,
        data: Bytes,
    ) -> BoxFuture<'a, Result<usize, Errno>>;
}
