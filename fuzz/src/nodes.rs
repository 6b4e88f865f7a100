//! A writable file system of numbered nodes in memory, for the server target's
//! second export kind (what plugins and a build action's input root are served as):
//! the same tree as the directory export (`file`, `dir/sub/deep`, a symlink `escape`),
//! bounded so that no input can make it grow without end.

use std::collections::BTreeMap;
use std::sync::Mutex;

use bytes::Bytes;
use wasm9p_proto::Errno;
use wasm9p_server::nodes::{Attr, BoxFuture, Dirent, Kind, New, NodeFs};

/// Most bytes one file may hold, and most nodes the tree may have.
const MAX_FILE: u64 = 1 << 20;
const MAX_NODES: usize = 4096;

enum Body {
    File(Vec<u8>),
    Dir(BTreeMap<String, u64>),
    Symlink(String),
}

struct Node {
    body: Body,
    mode: u32,
    version: u32,
}

/// The tree (see the module docs).
pub struct MemoryNodes {
    nodes: Mutex<BTreeMap<u64, Node>>,
    next: Mutex<u64>,
}

const ROOT: u64 = 1;

impl MemoryNodes {
    /// The starting tree.
    pub fn new() -> MemoryNodes {
        let fs = MemoryNodes {
            nodes: Mutex::new(BTreeMap::new()),
            next: Mutex::new(ROOT + 1),
        };
        fs.insert(ROOT, Body::Dir(BTreeMap::new()), 0o755);
        fs.add(ROOT, "file", Body::File(b"some bytes".to_vec()), 0o644);
        let dir = fs.add(ROOT, "dir", Body::Dir(BTreeMap::new()), 0o755);
        let sub = fs.add(dir, "sub", Body::Dir(BTreeMap::new()), 0o755);
        fs.add(sub, "deep", Body::File(b"deep".to_vec()), 0o644);
        fs.add(ROOT, "escape", Body::Symlink("../../outside".into()), 0o777);
        fs
    }

    fn insert(&self, id: u64, body: Body, mode: u32) {
        let node = Node {
            body,
            mode,
            version: 0,
        };
        self.lock().insert(id, node);
    }

    fn add(&self, dir: u64, name: &str, body: Body, mode: u32) -> u64 {
        let id = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            *next += 1;
            *next
        };
        self.insert(id, body, mode);
        if let Some(Node {
            body: Body::Dir(entries),
            ..
        }) = self.lock().get_mut(&dir)
        {
            entries.insert(name.to_owned(), id);
        }
        id
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Node>> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn entries_of(nodes: &BTreeMap<u64, Node>, dir: u64) -> Result<&BTreeMap<String, u64>, Errno> {
        match &nodes.get(&dir).ok_or(Errno::ENOENT)?.body {
            Body::Dir(entries) => Ok(entries),
            _ => Err(Errno::ENOTDIR),
        }
    }

    fn file_of(nodes: &mut BTreeMap<u64, Node>, node: u64) -> Result<&mut Node, Errno> {
        let node = nodes.get_mut(&node).ok_or(Errno::ENOENT)?;
        match node.body {
            Body::File(_) => Ok(node),
            Body::Dir(_) => Err(Errno::EISDIR),
            Body::Symlink(_) => Err(Errno::EINVAL),
        }
    }
}

impl Default for MemoryNodes {
    fn default() -> Self {
        MemoryNodes::new()
    }
}

fn now<T: Send + 'static>(value: Result<T, Errno>) -> BoxFuture<'static, Result<T, Errno>> {
    Box::pin(async move { value })
}

impl NodeFs for MemoryNodes {
    fn root(&self) -> u64 {
        ROOT
    }

    fn writable(&self) -> bool {
        true
    }

    fn lookup<'a>(&'a self, dir: u64, name: &'a str) -> BoxFuture<'a, Result<u64, Errno>> {
        let nodes = self.lock();
        now(MemoryNodes::entries_of(&nodes, dir)
            .and_then(|e| e.get(name).copied().ok_or(Errno::ENOENT)))
    }

    fn getattr(&self, node: u64) -> BoxFuture<'_, Result<Attr, Errno>> {
        let nodes = self.lock();
        now(nodes.get(&node).ok_or(Errno::ENOENT).map(|n| {
            let (kind, size) = match &n.body {
                Body::File(bytes) => (Kind::File, bytes.len() as u64),
                Body::Dir(entries) => (Kind::Directory, entries.len() as u64),
                Body::Symlink(target) => (Kind::Symlink, target.len() as u64),
            };
            Attr {
                kind,
                mode: n.mode,
                size,
                nlink: 1,
                mtime_sec: 0,
                mtime_nsec: 0,
                version: n.version,
            }
        }))
    }

    fn readlink(&self, node: u64) -> BoxFuture<'_, Result<String, Errno>> {
        let nodes = self.lock();
        now(match nodes.get(&node).map(|n| &n.body) {
            Some(Body::Symlink(target)) => Ok(target.clone()),
            Some(_) => Err(Errno::EINVAL),
            None => Err(Errno::ENOENT),
        })
    }

    fn read(&self, node: u64, offset: u64, count: u32) -> BoxFuture<'_, Result<Bytes, Errno>> {
        let mut nodes = self.lock();
        now(
            MemoryNodes::file_of(&mut nodes, node).map(|n| match &n.body {
                Body::File(bytes) => {
                    let start = offset.min(bytes.len() as u64) as usize;
                    let end = (start + count as usize).min(bytes.len());
                    Bytes::copy_from_slice(&bytes[start..end])
                }
                _ => Bytes::new(),
            }),
        )
    }

    fn readdir(&self, dir: u64) -> BoxFuture<'_, Result<Vec<Dirent>, Errno>> {
        let nodes = self.lock();
        now(MemoryNodes::entries_of(&nodes, dir).map(|entries| {
            entries
                .iter()
                .map(|(name, &node)| Dirent {
                    name: name.clone(),
                    node,
                    kind: match nodes.get(&node).map(|n| &n.body) {
                        Some(Body::Dir(_)) => Kind::Directory,
                        Some(Body::Symlink(_)) => Kind::Symlink,
                        _ => Kind::File,
                    },
                })
                .collect()
        }))
    }

    fn write(&self, node: u64, offset: u64, data: Bytes) -> BoxFuture<'_, Result<u32, Errno>> {
        let mut nodes = self.lock();
        now(MemoryNodes::file_of(&mut nodes, node).and_then(|n| {
            let end = offset
                .checked_add(data.len() as u64)
                .filter(|&end| end <= MAX_FILE)
                .ok_or(Errno::EFBIG)?;
            if let Body::File(bytes) = &mut n.body {
                if bytes.len() < end as usize {
                    bytes.resize(end as usize, 0);
                }
                bytes[offset as usize..end as usize].copy_from_slice(&data);
            }
            n.version = n.version.wrapping_add(1);
            Ok(data.len() as u32)
        }))
    }

    fn set_size(&self, node: u64, size: u64) -> BoxFuture<'_, Result<(), Errno>> {
        let mut nodes = self.lock();
        now(MemoryNodes::file_of(&mut nodes, node).and_then(|n| {
            if size > MAX_FILE {
                return Err(Errno::EFBIG);
            }
            if let Body::File(bytes) = &mut n.body {
                bytes.resize(size as usize, 0);
            }
            n.version = n.version.wrapping_add(1);
            Ok(())
        }))
    }

    fn create<'a>(
        &'a self,
        dir: u64,
        name: &'a str,
        new: New<'a>,
    ) -> BoxFuture<'a, Result<u64, Errno>> {
        {
            let nodes = self.lock();
            if nodes.len() >= MAX_NODES {
                return now(Err(Errno::ENOSPC));
            }
            match MemoryNodes::entries_of(&nodes, dir) {
                Ok(entries) if entries.contains_key(name) => return now(Err(Errno::EEXIST)),
                Ok(_) => {}
                Err(e) => return now(Err(e)),
            }
        }
        let (body, mode) = match new {
            New::File(mode) => (Body::File(Vec::new()), mode),
            New::Directory(mode) => (Body::Dir(BTreeMap::new()), mode),
            New::Symlink(target) => (Body::Symlink(target.to_owned()), 0o777),
        };
        now(Ok(self.add(dir, name, body, mode & 0o7777)))
    }

    fn unlink<'a>(&'a self, dir: u64, name: &'a str) -> BoxFuture<'a, Result<(), Errno>> {
        let mut nodes = self.lock();
        let found = MemoryNodes::entries_of(&nodes, dir)
            .and_then(|e| e.get(name).copied().ok_or(Errno::ENOENT));
        let node = match found {
            Ok(node) => node,
            Err(e) => return now(Err(e)),
        };
        if let Some(Node {
            body: Body::Dir(entries),
            ..
        }) = nodes.get(&node)
        {
            if !entries.is_empty() {
                return now(Err(Errno::ENOTEMPTY));
            }
        }
        nodes.remove(&node);
        if let Some(Node {
            body: Body::Dir(entries),
            ..
        }) = nodes.get_mut(&dir)
        {
            entries.remove(name);
        }
        now(Ok(()))
    }

    fn rename<'a>(
        &'a self,
        from: u64,
        name: &'a str,
        to: u64,
        to_name: &'a str,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        let mut nodes = self.lock();
        let moved = MemoryNodes::entries_of(&nodes, from)
            .and_then(|e| e.get(name).copied().ok_or(Errno::ENOENT));
        let node = match (moved, MemoryNodes::entries_of(&nodes, to)) {
            (Ok(node), Ok(_)) => node,
            (Err(e), _) | (_, Err(e)) => return now(Err(e)),
        };
        // A directory may not move below itself (the tree would lose it).
        if node == to || below(&nodes, node, to) {
            return now(Err(Errno::EINVAL));
        }
        if let Some(Node {
            body: Body::Dir(entries),
            ..
        }) = nodes.get_mut(&from)
        {
            entries.remove(name);
        }
        let replaced = match nodes.get_mut(&to) {
            Some(Node {
                body: Body::Dir(entries),
                ..
            }) => entries.insert(to_name.to_owned(), node),
            _ => None,
        };
        if let Some(old) = replaced.filter(|&old| old != node) {
            nodes.remove(&old);
        }
        now(Ok(()))
    }
}

/// Whether `node` is found below the directory `dir`.
fn below(nodes: &BTreeMap<u64, Node>, dir: u64, node: u64) -> bool {
    let mut stack = vec![dir];
    let mut seen = 0;
    while let Some(d) = stack.pop() {
        seen += 1;
        if seen > MAX_NODES {
            return true;
        }
        if let Some(Node {
            body: Body::Dir(entries),
            ..
        }) = nodes.get(&d)
        {
            for &child in entries.values() {
                if child == node {
                    return true;
                }
                stack.push(child);
            }
        }
    }
    false
}
