//! What a [`NodeFs`] is: file systems of numbered nodes, their attributes, entries and
//! the changes asked of them (the module above says how they are served).

use bytes::Bytes;
use wasm9p_proto::Errno;

pub use wasm9p_proto::BoxFuture;

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

/// A file system of numbered nodes, served by [`super::serve`]. Names given to it are single
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
    /// Says file `node` was opened for reading only, before any read (which a client
    /// with the file's pages cached may never send): for a file system that records
    /// what is used. Nothing, unless it says otherwise.
    fn opened_for_reading(&self, _node: u64) {}
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
