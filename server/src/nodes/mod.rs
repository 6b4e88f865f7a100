//! Exports whose files are not host files: a 9P2000.L server in front of any
//! [`NodeFs`], a file system of numbered nodes (a plugin component's, a content-
//! addressed input root's).
//!
//! A host directory export (the rest of this crate) is served from file descriptors
//! (cap-std handles, `*at()` calls, io threads per tenant); a `NodeFs` knows nothing of
//! those: it answers lookups, attributes, listings, reads and changes by node number,
//! and [`serve`] speaks the protocol for it, over any transport stream (the in-process
//! duplex, a Unix socket, vsock). So a plugin mount and a build action's input root are
//! 9p mounts like any other, with the client's caches in front of them.
//!
//! What the protocol sees of a node: its qid path is the node number and its qid
//! version the [`Attr::version`] the file system gives (it must move when the file's
//! contents do, so that pages cached by a reader are dropped), its owner the user
//! running the server. What a `NodeFs` cannot express (ownership and permission
//! changes, setting times, xattrs, hard links, device nodes, locks) is EOPNOTSUPP:
//! saying "done" would be a lie.

mod serve;

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use wasm9p_proto::Errno;

pub use serve::serve;

/// Serves `fs` to every client of `listener` (a Unix socket, vsock, a hybrid vsock
/// socket, tcp), each connection in a task of its own, until the listener fails.
pub async fn serve_on(fs: std::sync::Arc<dyn NodeFs>, listener: wasm9p_proto::transport::Listener) {
    while let Ok((stream, _peer)) = listener.accept().await {
        tokio::spawn(serve(fs.clone(), stream));
    }
}

/// A future a [`NodeFs`] answers with.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
}

/// A node's attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    /// What it is.
    pub kind: Kind,
    /// Permission bits.
    pub mode: u32,
    /// Size in bytes.
    pub size: u64,
    /// Hard links.
    pub nlink: u64,
    /// Modification time: seconds.
    pub mtime_sec: u64,
    /// Modification time: nanoseconds.
    pub mtime_nsec: u32,
    /// The qid version: moves whenever the contents do.
    pub version: u32,
}

/// One entry of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dirent {
    /// Its name.
    pub name: String,
    /// Its node.
    pub node: u64,
    /// What it is.
    pub kind: Kind,
}

/// What [`NodeFs::create`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum New<'a> {
    /// An empty file with these permission bits.
    File(u32),
    /// An empty directory with these permission bits.
    Directory(u32),
    /// A symbolic link to this target.
    Symlink(&'a str),
}

/// A file system of numbered nodes, served by [`serve`]. Names given to it are single
/// components, never empty, `.`, `..` or holding `/` (the server checks them first).
pub trait NodeFs: Send + Sync + 'static {
    /// The root directory's node.
    fn root(&self) -> u64;
    /// Whether changes may be asked for (else every change is EROFS, unasked).
    fn writable(&self) -> bool;
    /// The node `name` in directory `dir`.
    fn lookup<'a>(&'a self, dir: u64, name: &'a str) -> BoxFuture<'a, Result<u64, Errno>>;
    /// A node's attributes.
    fn getattr(&self, node: u64) -> BoxFuture<'_, Result<Attr, Errno>>;
    /// A symlink's target.
    fn readlink(&self, node: u64) -> BoxFuture<'_, Result<String, Errno>>;
    /// Up to `count` bytes of a file from `offset` (fewer only at its end).
    fn read(&self, node: u64, offset: u64, count: u32) -> BoxFuture<'_, Result<Bytes, Errno>>;
    /// A directory's entries, without `.` and `..`.
    fn readdir(&self, dir: u64) -> BoxFuture<'_, Result<Vec<Dirent>, Errno>>;
    /// Writes `data` at `offset`: how many bytes were written.
    fn write(&self, node: u64, offset: u64, data: Bytes) -> BoxFuture<'_, Result<u32, Errno>>;
    /// Truncates or extends a file.
    fn set_size(&self, node: u64, size: u64) -> BoxFuture<'_, Result<(), Errno>>;
    /// Makes `name` in `dir`: EEXIST if it is there.
    fn create<'a>(
        &'a self,
        dir: u64,
        name: &'a str,
        new: New<'a>,
    ) -> BoxFuture<'a, Result<u64, Errno>>;
    /// Removes `name` from `dir` (a directory only if empty).
    fn unlink<'a>(&'a self, dir: u64, name: &'a str) -> BoxFuture<'a, Result<(), Errno>>;
    /// Moves `name` in `from` to `to_name` in `to`, replacing what is there as
    /// rename(2) does.
    fn rename<'a>(
        &'a self,
        from: u64,
        name: &'a str,
        to: u64,
        to_name: &'a str,
    ) -> BoxFuture<'a, Result<(), Errno>>;
}
