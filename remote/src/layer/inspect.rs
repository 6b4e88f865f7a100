//! Reading an action's outputs back once it has run, and making their parent
//! directories before it runs: a path resolved in the layer as it is now, and what a
//! node is ([`Inspected`]).

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::Arc;

use bytes::Bytes;

use wasm9p_proto::Errno;
use wasm9p_server::nodes::{Kind, New, NodeFs};

use super::{ActionFs, Made};
use crate::digest::Digest;
use crate::tree::TreeNode;

impl ActionFs {
    /// What is at `path` (from the root, `/`-separated, no `..`) now: its node, or
    /// ENOENT.
    pub fn resolve(&self, path: &str) -> Result<u64, Errno> {
        let layer = self.lock();
        let mut at = self.root();
        for name in path.split('/').filter(|n| !n.is_empty() && *n != ".") {
            at = self.find(&layer, at, name)?;
        }
        Ok(at)
    }

    /// What node `node` is now, to read back outputs: a file (its bytes' source), a
    /// directory (its entries) or a symlink (its target).
    pub fn inspect(&self, node: u64) -> Result<Inspected, Errno> {
        let layer = self.lock();
        let shown = layer.copied.get(&node).copied().unwrap_or(node);
        if let Some(made) = layer.made.get(&shown) {
            return Ok(match made {
                Made::File {
                    file, size, mode, ..
                } => Inspected::MadeFile {
                    file: file.clone(),
                    size: *size,
                    executable: mode & 0o111 != 0,
                },
                Made::Dir { entries, .. } => Inspected::Dir(entries.clone()),
                Made::Symlink { target } => Inspected::Symlink(target.clone()),
            });
        }
        match self.tree_node(node).ok_or(Errno::ESTALE)? {
            TreeNode::File { digest, executable } => Ok(Inspected::TreeFile {
                digest: *digest,
                executable: *executable,
            }),
            TreeNode::Dir { .. } => Ok(Inspected::Dir(self.entries(&layer, node)?)),
            TreeNode::Symlink { target } => Ok(Inspected::Symlink(target.clone())),
        }
    }

    /// Makes the directory at `path` and every one above it that is missing (the
    /// parents of an action's outputs, before it runs).
    pub async fn make_dirs(&self, path: &str) -> Result<(), Errno> {
        let mut at = self.root();
        for name in path.split('/').filter(|n| !n.is_empty() && *n != ".") {
            at = match self.lookup(at, name).await {
                Ok(node) => node,
                Err(Errno::ENOENT) => self.create(at, name, New::Directory(0o755)).await?,
                Err(e) => return Err(e),
            };
            if self.getattr(at).await?.kind != Kind::Directory {
                return Err(Errno::ENOTDIR);
            }
        }
        Ok(())
    }

    /// Writes `bytes` as a new file at `path` (its directories made first), as the
    /// action would have: what the worker writes for it (a Bazel test's `test.xml`).
    pub async fn write_file(&self, path: &str, bytes: Bytes) -> Result<(), Errno> {
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
        self.make_dirs(dir).await?;
        let dir = self.resolve(dir)?;
        let file = self.create(dir, name, New::File(0o644)).await?;
        let mut at = 0;
        while at < bytes.len() {
            let n = self.write(file, at as u64, bytes.slice(at..)).await?;
            if n == 0 {
                return Err(Errno::EIO);
            }
            at += n as usize;
        }
        Ok(())
    }
}

/// A node as [`ActionFs::inspect`] sees it.
#[derive(Debug)]
pub enum Inspected {
    /// A file of the input root, as it was.
    TreeFile {
        /// Its digest.
        digest: Digest,
        /// Its executable bit.
        executable: bool,
    },
    /// A file the action made (or wrote).
    MadeFile {
        /// Its bytes.
        file: Arc<File>,
        /// Its size.
        size: u64,
        /// Whether any execute bit is set.
        executable: bool,
    },
    /// A directory: its entries by name.
    Dir(BTreeMap<String, u64>),
    /// A symbolic link: its target.
    Symlink(String),
}
