//! A plugin as a [`NodeFs`]: what `wasm9p_server::nodes::serve` speaks 9P2000.L in
//! front of, so that a plugin mount is a 9p mount like any other (the same namespace
//! rules, cache modes and `--stats` counters).

use std::sync::Arc;

use bytes::Bytes;
use wasm9p_proto::Errno;
use wasm9p_server::nodes::{Attr, BoxFuture, Dirent, Kind, New, NodeFs};

use super::bindings::exports::wasm9p::fs::backend;
use super::bindings::wasm9p::fs::types;
use super::PluginFs;

/// A plugin's nodes, served over 9P.
pub struct PluginNodes(pub Arc<PluginFs>);

fn kind_of(kind: types::Kind) -> Kind {
    match kind {
        types::Kind::File => Kind::File,
        types::Kind::Directory => Kind::Directory,
        types::Kind::Symlink => Kind::Symlink,
    }
}

/// A plugin's attributes; the qid version mixes the mtime and the size, so that pages
/// cached by a reader are dropped when the file changes.
fn attr_of(a: backend::Attr) -> Attr {
    Attr {
        kind: kind_of(a.kind),
        mode: a.mode,
        size: a.size,
        nlink: a.nlink,
        mtime_sec: a.mtime_sec,
        mtime_nsec: a.mtime_nsec,
        version: (a.mtime_sec as u32) ^ a.mtime_nsec ^ (a.size as u32),
    }
}

impl NodeFs for PluginNodes {
    fn root(&self) -> u64 {
        self.0.root()
    }

    fn writable(&self) -> bool {
        self.0.writable()
    }

    fn lookup<'a>(&'a self, dir: u64, name: &'a str) -> BoxFuture<'a, Result<u64, Errno>> {
        Box::pin(self.0.lookup(dir, name.to_owned()))
    }

    fn getattr(&self, node: u64) -> BoxFuture<'_, Result<Attr, Errno>> {
        Box::pin(async move { self.0.getattr(node).await.map(attr_of) })
    }

    fn readlink(&self, node: u64) -> BoxFuture<'_, Result<String, Errno>> {
        Box::pin(self.0.readlink(node))
    }

    fn read(&self, node: u64, offset: u64, count: u32) -> BoxFuture<'_, Result<Bytes, Errno>> {
        Box::pin(async move { self.0.read(node, offset, count).await.map(Bytes::from) })
    }

    fn readdir(&self, dir: u64) -> BoxFuture<'_, Result<Vec<Dirent>, Errno>> {
        Box::pin(async move {
            let entries = self.0.readdir(dir).await?;
            Ok(entries
                .into_iter()
                .map(|e| Dirent {
                    name: e.name,
                    node: e.node,
                    kind: kind_of(e.kind),
                })
                .collect())
        })
    }

    fn write(&self, node: u64, offset: u64, data: Bytes) -> BoxFuture<'_, Result<u32, Errno>> {
        Box::pin(self.0.write(node, offset, data.to_vec()))
    }

    fn set_size(&self, node: u64, size: u64) -> BoxFuture<'_, Result<(), Errno>> {
        Box::pin(self.0.set_size(node, size))
    }

    fn create<'a>(
        &'a self,
        dir: u64,
        name: &'a str,
        new: New<'a>,
    ) -> BoxFuture<'a, Result<u64, Errno>> {
        let (kind, mode, target) = match new {
            New::File(mode) => (types::Kind::File, mode, String::new()),
            New::Directory(mode) => (types::Kind::Directory, mode, String::new()),
            New::Symlink(target) => (types::Kind::Symlink, 0o777, target.to_owned()),
        };
        Box::pin(self.0.create(dir, name.to_owned(), kind, mode, target))
    }

    fn unlink<'a>(&'a self, dir: u64, name: &'a str) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(self.0.unlink(dir, name.to_owned()))
    }

    fn rename<'a>(
        &'a self,
        from: u64,
        name: &'a str,
        to: u64,
        to_name: &'a str,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(self.0.rename(from, name.to_owned(), to, to_name.to_owned()))
    }
}
