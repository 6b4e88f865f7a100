//! [`NodeFs`] for an [`ActionFs`]: the 9P server's view of an action's file system.

use bytes::Bytes;
use wasm9p_proto::Errno;
use wasm9p_server::nodes::{Attr, BoxFuture, Dirent, Kind, New, NodeFs};

use super::*;

impl NodeFs for ActionFs {
    fn root(&self) -> u64 {
        self.ids[self.tree.root()]
    }

    fn writable(&self) -> bool {
        true
    }

    fn lookup<'a>(&'a self, dir: u64, name: &'a str) -> BoxFuture<'a, Result<u64, Errno>> {
        Box::pin(async move {
            let layer = self.lock();
            self.find(&layer, dir, name)
        })
    }

    fn getattr(&self, node: u64) -> BoxFuture<'_, Result<Attr, Errno>> {
        Box::pin(async move {
            let layer = self.lock();
            let shown = layer.copied.get(&node).copied().unwrap_or(node);
            if let Some(made) = layer.made.get(&shown) {
                return Ok(match made {
                    Made::File {
                        size,
                        mode,
                        version,
                        mtime,
                        ..
                    } => Attr {
                        kind: Kind::File,
                        mode: *mode,
                        size: *size,
                        nlink: 1,
                        mtime_sec: mtime.0,
                        mtime_nsec: mtime.1,
                        version: *version,
                    },
                    Made::Dir {
                        entries,
                        mode,
                        version,
                        mtime,
                    } => Attr {
                        kind: Kind::Directory,
                        mode: *mode,
                        size: 4096,
                        nlink: 2 + entries.len() as u64,
                        mtime_sec: mtime.0,
                        mtime_nsec: mtime.1,
                        version: *version,
                    },
                    Made::Symlink { target } => Attr {
                        kind: Kind::Symlink,
                        mode: 0o777,
                        size: target.len() as u64,
                        nlink: 1,
                        mtime_sec: 0,
                        mtime_nsec: 0,
                        version: 1,
                    },
                });
            }
            let tree_node = self.tree_node(node).ok_or(Errno::ESTALE)?;
            Ok(match tree_node {
                TreeNode::File { digest, executable } => Attr {
                    kind: Kind::File,
                    mode: if *executable { 0o555 } else { 0o444 },
                    size: digest.size(),
                    nlink: 1,
                    mtime_sec: 0,
                    mtime_nsec: 0,
                    version: digest.prefix() as u32 | 1,
                },
                TreeNode::Dir { digest, entries } => Attr {
                    kind: Kind::Directory,
                    mode: 0o755,
                    size: 4096,
                    nlink: 2 + entries.len() as u64,
                    mtime_sec: 0,
                    mtime_nsec: 0,
                    version: self.version_of_tree(&layer, node, digest.prefix() as u32 | 1),
                },
                TreeNode::Symlink { target } => Attr {
                    kind: Kind::Symlink,
                    mode: 0o777,
                    size: target.len() as u64,
                    nlink: 1,
                    mtime_sec: 0,
                    mtime_nsec: 0,
                    version: 1,
                },
            })
        })
    }

    fn readlink(&self, node: u64) -> BoxFuture<'_, Result<String, Errno>> {
        Box::pin(async move {
            if let Some(TreeNode::Symlink { target }) = self.tree_node(node) {
                return Ok(target.clone());
            }
            match self.lock().made.get(&node) {
                Some(Made::Symlink { target }) => Ok(target.clone()),
                Some(_) => Err(Errno::EINVAL),
                None if self.by_id.contains_key(&node) => Err(Errno::EINVAL),
                None => Err(Errno::ESTALE),
            }
        })
    }

    fn opened_for_reading(&self, node: u64) {
        if matches!(self.tree_node(node), Some(TreeNode::File { .. })) {
            self.lock().mark_used(node);
        }
    }

    fn read(&self, node: u64, offset: u64, count: u32) -> BoxFuture<'_, Result<Bytes, Errno>> {
        Box::pin(async move {
            let (file, size) = {
                let layer = self.lock();
                let shown = layer.copied.get(&node).copied().unwrap_or(node);
                match layer.made.get(&shown) {
                    Some(Made::File { file, size, .. }) => (Some(file.clone()), *size),
                    Some(Made::Dir { .. }) => return Err(Errno::EISDIR),
                    Some(Made::Symlink { .. }) => return Err(Errno::EINVAL),
                    None => (None, 0),
                }
            };
            let (file, size) = match file {
                Some(file) => (file, size),
                None => match self.tree_node(node) {
                    Some(TreeNode::File { digest, .. }) => {
                        let digest = *digest;
                        {
                            let mut layer = self.lock();
                            if layer.read.insert(node) {
                                layer.bytes_of_files_read += digest.size();
                            }
                            layer.mark_used(node);
                        }
                        (self.blob(node, digest).await?, digest.size())
                    }
                    Some(TreeNode::Dir { .. }) => return Err(Errno::EISDIR),
                    Some(TreeNode::Symlink { .. }) => return Err(Errno::EINVAL),
                    None => return Err(Errno::ESTALE),
                },
            };
            if offset >= size {
                return Ok(Bytes::new());
            }
            let len = (size - offset).min(u64::from(count)) as usize;
            let mut buf = vec![0u8; len];
            let mut got = 0;
            while got < len {
                match file.read_at(&mut buf[got..], offset + got as u64) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) => return Err(Errno::from(&e)),
                }
            }
            buf.truncate(got);
            Ok(Bytes::from(buf))
        })
    }

    fn readdir(&self, dir: u64) -> BoxFuture<'_, Result<Vec<Dirent>, Errno>> {
        Box::pin(async move {
            let layer = self.lock();
            let entries = self.entries(&layer, dir)?;
            entries
                .into_iter()
                .map(|(name, node)| {
                    Ok(Dirent {
                        kind: self.kind(&layer, node)?,
                        name,
                        node,
                    })
                })
                .collect()
        })
    }

    fn write(&self, node: u64, offset: u64, data: Bytes) -> BoxFuture<'_, Result<u32, Errno>> {
        Box::pin(async move {
            let target = self.writable_file(node).await?;
            let mut layer = self.lock();
            let end = offset.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
            let Some(Made::File { file, size, .. }) = layer.made.get(&target) else {
                return Err(Errno::ESTALE);
            };
            let grows = end.saturating_sub(*size);
            let (file, old_size) = (file.clone(), *size);
            if layer.bytes + grows > self.limit {
                return Err(Errno::ENOSPC);
            }
            file.write_all_at(&data, offset)
                .map_err(|e| Errno::from(&e))?;
            layer.bytes += grows;
            if let Some(Made::File {
                size,
                version,
                mtime,
                ..
            }) = layer.made.get_mut(&target)
            {
                *size = old_size.max(end);
                *version = version.wrapping_add(2);
                *mtime = now();
            }
            Ok(data.len() as u32)
        })
    }

    fn set_size(&self, node: u64, new_size: u64) -> BoxFuture<'_, Result<(), Errno>> {
        Box::pin(async move {
            let target = self.writable_file(node).await?;
            let mut layer = self.lock();
            let Some(Made::File { file, size, .. }) = layer.made.get(&target) else {
                return Err(Errno::ESTALE);
            };
            let (file, old) = (file.clone(), *size);
            let bytes = layer.bytes - old.min(layer.bytes) + new_size;
            if new_size > old && bytes > self.limit {
                return Err(Errno::ENOSPC);
            }
            file.set_len(new_size).map_err(|e| Errno::from(&e))?;
            layer.bytes = bytes;
            if let Some(Made::File {
                size,
                version,
                mtime,
                ..
            }) = layer.made.get_mut(&target)
            {
                *size = new_size;
                *version = version.wrapping_add(2);
                *mtime = now();
            }
            Ok(())
        })
    }

    fn create<'a>(
        &'a self,
        dir: u64,
        name: &'a str,
        new: New<'a>,
    ) -> BoxFuture<'a, Result<u64, Errno>> {
        Box::pin(async move {
            let mut layer = self.lock();
            match self.find(&layer, dir, name) {
                Ok(_) => return Err(Errno::EEXIST),
                Err(Errno::ENOENT) => {}
                Err(e) => return Err(e),
            }
            let stamp = now();
            let made = match new {
                New::File(mode) => Made::File {
                    file: self.scratch_file(&mut layer)?,
                    size: 0,
                    mode: mode & 0o7777,
                    version: MADE_FILE_VERSION,
                    mtime: stamp,
                },
                New::Directory(mode) => Made::Dir {
                    entries: BTreeMap::new(),
                    mode: mode & 0o7777,
                    version: 1,
                    mtime: stamp,
                },
                New::Symlink(target) => Made::Symlink {
                    target: target.to_owned(),
                },
            };
            let id = next_made();
            layer.made.insert(id, made);
            self.link_in(&mut layer, dir, name, id);
            Ok(id)
        })
    }

    fn unlink<'a>(&'a self, dir: u64, name: &'a str) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(async move {
            let mut layer = self.lock();
            let node = self.find(&layer, dir, name)?;
            if self.kind(&layer, node)? == Kind::Directory
                && !self.entries(&layer, node)?.is_empty()
            {
                return Err(Errno::ENOTEMPTY);
            }
            self.unlink_from(&mut layer, dir, name);
            Ok(())
        })
    }

    fn rename<'a>(
        &'a self,
        from: u64,
        name: &'a str,
        to: u64,
        to_name: &'a str,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(async move {
            let mut layer = self.lock();
            let node = self.find(&layer, from, name)?;
            let moving_dir = self.kind(&layer, node)? == Kind::Directory;
            match self.find(&layer, to, to_name) {
                Ok(there) if there == node => return Ok(()),
                Ok(there) => {
                    let there_dir = self.kind(&layer, there)? == Kind::Directory;
                    match (moving_dir, there_dir) {
                        (false, true) => return Err(Errno::EISDIR),
                        (true, false) => return Err(Errno::ENOTDIR),
                        (true, true) if !self.entries(&layer, there)?.is_empty() => {
                            return Err(Errno::ENOTEMPTY)
                        }
                        _ => {}
                    }
                }
                Err(Errno::ENOENT) => {}
                Err(e) => return Err(e),
            }
            if moving_dir && self.holds(&layer, node, to) {
                return Err(Errno::EINVAL); // a directory into itself
            }
            self.unlink_from(&mut layer, from, name);
            self.link_in(&mut layer, to, to_name, node);
            Ok(())
        })
    }
}

impl ActionFs {
    /// Whether directory `dir` is `node` or below it.
    fn holds(&self, layer: &Layer, node: u64, dir: u64) -> bool {
        if node == dir {
            return true;
        }
        let Ok(entries) = self.entries(layer, node) else {
            return false;
        };
        entries.values().any(|child| {
            self.kind(layer, *child) == Ok(Kind::Directory) && self.holds(layer, *child, dir)
        })
    }
}
