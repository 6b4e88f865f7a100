//! An action's file system: its input root ([`InputTree`]) with a writable layer over
//! it, as a [`NodeFs`] that `wasm9p_server::nodes::serve` speaks 9P2000.L for.
//!
//! - **The tree is read as it is.** A directory lists what its `Directory` message
//!   lists (plus what the action made in it, less what it removed); a file's bytes
//!   come from the worker's [`ContentStore`] on the first read of the file, fetched
//!   from the CAS if the store does not have them, and never before.
//! - **Node numbers and versions from the digests.** A node of the tree is numbered by
//!   a hash of its path, what it is and its digest (or target), so the same file at
//!   the same path has the same qid in every action (the client's caches know it); its
//!   qid version is the digest's first bytes. Nodes the action makes have numbers of
//!   their own (the top bit set, from a counter of the worker's, never reused) and
//!   versions that move with every change (even ones; the tree's nodes' are odd, and
//!   a tree directory the action changes moves to even versions too: so a tree node's
//!   qid names its bytes, names or target for ever, [`fixed_content`], and a worker
//!   may share its pages and metadata between actions).
//! - **The writable layer.** What the action makes (files, directories, symlinks) is
//!   kept in a scratch directory of its own: file bytes in files there, the rest in
//!   memory. A directory of the tree that gains or loses names keeps them beside its
//!   listing; a file of the tree that is written is copied up first (its bytes from
//!   the store). Renames move entries; nothing of the tree is ever changed.
//! - **Bounded.** The bytes written (copies up included) are at most the layer's
//!   `limit`: past it a write is ENOSPC.
//! - **Counted.** Files of the tree read, their bytes, and bytes fetched for them
//!   ([`ActionFs::stats`]): what the laziness of an input root is measured by; and
//!   which files were read, in order ([`ActionFs::paths_read`]), for access profiles.

mod inspect;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use wasm9p_proto::Errno;
use wasm9p_server::nodes::{Attr, BoxFuture, Dirent, Kind, New, NodeFs};

use crate::digest::Digest;
use crate::store::{ContentStore, Fetch, FetchError};
use crate::tree::{Index, InputTree, TreeNode};
pub use inspect::Inspected;

/// The top bit: nodes the action made.
const MADE: u64 = 1 << 63;

/// A made file's first version. Made files' versions are even (they move by 2), the
/// tree's files' odd (the digest's first bytes, with the low bit set): a tree file
/// copied up keeps its number but never meets its tree version again, so that
/// (number, odd version) names one content for ever ([`fixed_content`]).
const MADE_FILE_VERSION: u32 = 2;

/// Whether the node numbered `path` at qid `version` is a node of a tree as the tree
/// has it: the same bytes, names, attributes or target in every action, for ever (a
/// slot's shared cache keeps them across actions). Nodes an action made, files it
/// changed (copied up) and directories it changed (names added or removed) are not:
/// those have even versions.
pub fn fixed_content(path: u64, version: u32) -> bool {
    path & MADE == 0 && version & 1 == 1
}

/// Numbers of made nodes, worker-wide: never the same twice in one process, and
/// started from the clock, so not in the next either.
static NEXT_MADE: AtomicU64 = AtomicU64::new(0);

fn next_made() -> u64 {
    if NEXT_MADE.load(Ordering::Relaxed) == 0 {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            & !MADE;
        let _ = NEXT_MADE.compare_exchange(0, seed.max(1), Ordering::Relaxed, Ordering::Relaxed);
    }
    MADE | (NEXT_MADE.fetch_add(1, Ordering::Relaxed) & !MADE)
}

/// What an action's file system has done (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LayerStats {
    /// Files of the tree read.
    pub files_read: u64,
    /// Their sizes, added up.
    pub bytes_of_files_read: u64,
    /// Bytes written into the layer.
    pub bytes_written: u64,
}

/// The time a guest waited for the input files it read to be had (fetched, or opened
/// from the content store), summed; shared with whatever watches the guest.
#[derive(Clone, Debug, Default)]
pub struct FetchWaits(Arc<AtomicU64>);

impl FetchWaits {
    /// The waits so far.
    pub fn total(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }

    /// Counts one more wait.
    pub fn add(&self, waited: std::time::Duration) {
        let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_add(ns, Ordering::Relaxed);
    }
}

/// A node the action made.
#[derive(Debug)]
enum Made {
    File {
        file: Arc<File>,
        size: u64,
        mode: u32,
        version: u32,
        mtime: (u64, u32),
    },
    Dir {
        entries: BTreeMap<String, u64>,
        mode: u32,
        version: u32,
        mtime: (u64, u32),
    },
    Symlink {
        target: String,
    },
}

#[derive(Debug, Default)]
struct Layer {
    made: HashMap<u64, Made>,
    /// A tree directory's names made or moved in (over its listing).
    added: HashMap<u64, BTreeMap<String, u64>>,
    /// A tree directory's names removed or moved away.
    removed: HashMap<u64, HashSet<String>>,
    /// Tree files written: their copies, which stand for them from then on.
    copied: HashMap<u64, u64>,
    /// Changes made to tree directories (their versions move with them).
    changed: HashMap<u64, u32>,
    /// Tree files read (for the stats).
    read: HashSet<u64>,
    /// Tree files opened for reading or read, in the order of their first opens or
    /// reads (for access profiles: a file whose pages another action left in the
    /// worker's shared cache is opened, never read).
    used: HashSet<u64>,
    read_order: Vec<u64>,
    bytes_of_files_read: u64,
    /// Bytes the layer's files hold.
    bytes: u64,
    /// Names of scratch files.
    next_scratch: u64,
}

impl Layer {
    /// Notes the first use of tree file `node`, in order.
    fn mark_used(&mut self, node: u64) {
        if self.used.insert(node) {
            self.read_order.push(node);
        }
    }
}

/// An action's input root and writable layer (see the module docs).
pub struct ActionFs {
    tree: Arc<InputTree>,
    ids: Vec<u64>,
    by_id: HashMap<u64, Index>,
    store: Arc<ContentStore>,
    fetch: Arc<dyn Fetch>,
    scratch: PathBuf,
    limit: u64,
    layer: Mutex<Layer>,
    /// Blobs opened, by tree file.
    opened: Mutex<HashMap<u64, Arc<File>>>,
    /// Files of the tree whose bytes could not be had: (path, why).
    unfetched: Mutex<Vec<(String, FetchError)>>,
    /// The guest's waits for those it could.
    waits: FetchWaits,
}

impl std::fmt::Debug for ActionFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActionFs")
            .field("nodes", &self.tree.len())
            .field("scratch", &self.scratch)
            .finish()
    }
}

/// The number of the tree node at `path`: the first eight bytes of a SHA-256 of the
/// path and of what the node is. A stable hash, unlike `DefaultHasher`, whose output
/// Rust does not promise to keep: the same tree gets the same numbers in every worker
/// process and release, so qids a client kept stay right.
fn tree_id(node: &TreeNode, path: &str) -> u64 {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    h.update((path.len() as u64).to_le_bytes());
    h.update(path.as_bytes());
    match node {
        TreeNode::Dir { digest, .. } => {
            h.update([0]);
            h.update(digest.hex());
            h.update(digest.size().to_le_bytes());
        }
        TreeNode::File { digest, executable } => {
            h.update([1, u8::from(*executable)]);
            h.update(digest.hex());
            h.update(digest.size().to_le_bytes());
        }
        TreeNode::Symlink { target } => {
            h.update([2]);
            h.update(target.as_bytes());
        }
    }
    let sum = h.finalize();
    u64::from_le_bytes(sum[..8].try_into().expect("eight bytes")) & !MADE
}

fn errno_of(e: &FetchError) -> Errno {
    tracing::warn!("input root: {e}");
    Errno::EIO
}

fn now() -> (u64, u32) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs(), d.subsec_nanos())
}

impl ActionFs {
    /// The file system of `tree`, its files' bytes from `store` (fetched through
    /// `fetch`), what the action writes kept in `scratch` (a directory of its own,
    /// made if missing), at most `limit` bytes of it.
    pub fn new(
        tree: Arc<InputTree>,
        store: Arc<ContentStore>,
        fetch: Arc<dyn Fetch>,
        scratch: PathBuf,
        limit: u64,
    ) -> std::io::Result<ActionFs> {
        std::fs::create_dir_all(&scratch)?;
        let mut ids = Vec::with_capacity(tree.len());
        let mut by_id = HashMap::with_capacity(tree.len());
        for (index, node, path) in tree.iter() {
            let mut id = tree_id(node, path);
            // Two paths hashing alike (never seen; cheap to allow): the next free one.
            while id == 0 || by_id.contains_key(&id) {
                id = (id + 1) & !MADE;
            }
            by_id.insert(id, index);
            ids.push(id);
        }
        Ok(ActionFs {
            tree,
            ids,
            by_id,
            store,
            fetch,
            scratch,
            limit,
            layer: Mutex::default(),
            opened: Mutex::default(),
            unfetched: Mutex::default(),
            waits: FetchWaits::default(),
        })
    }

    /// The guest's waits for the files it read (see [`FetchWaits`]).
    pub fn fetch_waits(&self) -> FetchWaits {
        self.waits.clone()
    }

    /// The files of the input root whose bytes could not be had when read (the guest
    /// saw EIO): their paths and why. An action that met one failed for it, whatever
    /// the guest made of the error.
    pub fn unfetched(&self) -> Vec<(String, FetchError)> {
        self.unfetched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The paths of the tree files opened for reading or read so far, in the order of
    /// their first opens or reads.
    pub fn paths_read(&self) -> Vec<String> {
        let layer = self.lock();
        layer
            .read_order
            .iter()
            .filter_map(|id| self.by_id.get(id))
            .map(|i| self.tree.node(*i).1.clone())
            .collect()
    }

    /// What it has done so far.
    pub fn stats(&self) -> LayerStats {
        let layer = self.lock();
        LayerStats {
            files_read: layer.read.len() as u64,
            bytes_of_files_read: layer.bytes_of_files_read,
            bytes_written: layer.bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Layer> {
        self.layer.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn tree_node(&self, id: u64) -> Option<&TreeNode> {
        self.by_id.get(&id).map(|i| &self.tree.node(*i).0)
    }

    /// The node `name` in directory `dir` now, or ENOENT (ENOTDIR if `dir` is not one).
    fn find(&self, layer: &Layer, dir: u64, name: &str) -> Result<u64, Errno> {
        if let Some(Made::Dir { entries, .. }) = layer.made.get(&dir) {
            return entries.get(name).copied().ok_or(Errno::ENOENT);
        }
        let Some(TreeNode::Dir { entries, .. }) = self.tree_node(dir) else {
            return match layer.made.contains_key(&dir) || self.by_id.contains_key(&dir) {
                true => Err(Errno::ENOTDIR),
                false => Err(Errno::ESTALE),
            };
        };
        if let Some(id) = layer.added.get(&dir).and_then(|a| a.get(name)) {
            return Ok(*id);
        }
        if layer.removed.get(&dir).is_some_and(|r| r.contains(name)) {
            return Err(Errno::ENOENT);
        }
        entries.get(name).map(|i| self.ids[*i]).ok_or(Errno::ENOENT)
    }

    /// Every entry of directory `dir` now.
    fn entries(&self, layer: &Layer, dir: u64) -> Result<BTreeMap<String, u64>, Errno> {
        if let Some(Made::Dir { entries, .. }) = layer.made.get(&dir) {
            return Ok(entries.clone());
        }
        let Some(TreeNode::Dir { entries, .. }) = self.tree_node(dir) else {
            return Err(Errno::ENOTDIR);
        };
        let removed = layer.removed.get(&dir);
        let mut all: BTreeMap<String, u64> = entries
            .iter()
            .filter(|(name, _)| !removed.is_some_and(|r| r.contains(*name)))
            .map(|(name, i)| (name.clone(), self.ids[*i]))
            .collect();
        if let Some(added) = layer.added.get(&dir) {
            all.extend(added.iter().map(|(n, id)| (n.clone(), *id)));
        }
        Ok(all)
    }

    fn kind(&self, layer: &Layer, node: u64) -> Result<Kind, Errno> {
        let node = layer.copied.get(&node).copied().unwrap_or(node);
        match (layer.made.get(&node), self.tree_node(node)) {
            (Some(Made::File { .. }), _) | (_, Some(TreeNode::File { .. })) => Ok(Kind::File),
            (Some(Made::Dir { .. }), _) | (_, Some(TreeNode::Dir { .. })) => Ok(Kind::Directory),
            (Some(Made::Symlink { .. }), _) | (_, Some(TreeNode::Symlink { .. })) => {
                Ok(Kind::Symlink)
            }
            (None, None) => Err(Errno::ESTALE),
        }
    }

    /// Puts `id` at `name` in `dir` (replacing what was there).
    fn link_in(&self, layer: &mut Layer, dir: u64, name: &str, id: u64) {
        let stamp = now();
        match layer.made.get_mut(&dir) {
            Some(Made::Dir {
                entries,
                version,
                mtime,
                ..
            }) => {
                entries.insert(name.to_owned(), id);
                *version = version.wrapping_add(1);
                *mtime = stamp;
            }
            _ => {
                layer
                    .added
                    .entry(dir)
                    .or_default()
                    .insert(name.to_owned(), id);
                *layer.changed.entry(dir).or_default() += 1;
            }
        }
    }

    /// Takes `name` out of `dir`.
    fn unlink_from(&self, layer: &mut Layer, dir: u64, name: &str) {
        let stamp = now();
        match layer.made.get_mut(&dir) {
            Some(Made::Dir {
                entries,
                version,
                mtime,
                ..
            }) => {
                entries.remove(name);
                *version = version.wrapping_add(1);
                *mtime = stamp;
            }
            _ => {
                if let Some(added) = layer.added.get_mut(&dir) {
                    added.remove(name);
                }
                let in_tree = matches!(self.tree_node(dir),
                    Some(TreeNode::Dir { entries, .. }) if entries.contains_key(name));
                if in_tree {
                    layer
                        .removed
                        .entry(dir)
                        .or_default()
                        .insert(name.to_owned());
                }
                *layer.changed.entry(dir).or_default() += 1;
            }
        }
    }

    /// A new empty scratch file.
    fn scratch_file(&self, layer: &mut Layer) -> Result<Arc<File>, Errno> {
        layer.next_scratch += 1;
        let path = self.scratch.join(format!("f{}", layer.next_scratch));
        File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map(Arc::new)
            .map_err(|e| Errno::from(&e))
    }

    /// The blob of tree file `id`, opened (fetched first if need be).
    async fn blob(&self, id: u64, digest: Digest) -> Result<Arc<File>, Errno> {
        if let Some(file) = self
            .opened
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
        {
            return Ok(file.clone());
        }
        let waiting = std::time::Instant::now();
        let got = self.store.get(digest, &*self.fetch).await;
        self.waits.add(waiting.elapsed());
        let file = match got {
            Ok(file) => file,
            Err(e) => {
                let errno = errno_of(&e);
                let path = self.by_id.get(&id).map(|i| self.tree.node(*i).1.clone());
                self.unfetched
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((path.unwrap_or_default(), e));
                return Err(errno);
            }
        };
        self.opened
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, file.clone());
        Ok(file)
    }

    /// The made file that stands for file `node`: itself, its copy, or a copy made now
    /// of the tree file (its bytes read from the store).
    async fn writable_file(&self, node: u64) -> Result<u64, Errno> {
        if let Some(copy) = self.lock().copied.get(&node) {
            return Ok(*copy);
        }
        match self.tree_node(node) {
            Some(TreeNode::File { digest, executable }) => {
                let (digest, executable) = (*digest, *executable);
                let blob = self.blob(node, digest).await?;
                let mut layer = self.lock();
                if let Some(copy) = layer.copied.get(&node) {
                    return Ok(*copy);
                }
                if layer.bytes + digest.size() > self.limit {
                    return Err(Errno::ENOSPC);
                }
                let file = self.scratch_file(&mut layer)?;
                copy_file(&blob, &file, digest.size()).map_err(|e| Errno::from(&e))?;
                layer.bytes += digest.size();
                let copy = next_made();
                layer.made.insert(
                    copy,
                    Made::File {
                        file,
                        size: digest.size(),
                        mode: if executable { 0o755 } else { 0o644 },
                        version: MADE_FILE_VERSION,
                        mtime: now(),
                    },
                );
                layer.copied.insert(node, copy);
                Ok(copy)
            }
            Some(_) => Err(Errno::EISDIR),
            None => match self.lock().made.get(&node) {
                Some(Made::File { .. }) => Ok(node),
                Some(Made::Dir { .. }) => Err(Errno::EISDIR),
                Some(Made::Symlink { .. }) => Err(Errno::EINVAL),
                None => Err(Errno::ESTALE),
            },
        }
    }

    fn version_of_tree(&self, layer: &Layer, id: u64, base: u32) -> u32 {
        match layer.changed.get(&id) {
            // A changed directory: its version moves away from the digest's, to an
            // even one, so that it is never taken for the tree's (`fixed_content`).
            Some(n) => (base ^ n.wrapping_mul(0x9e37_79b9)) & !1,
            None => base,
        }
    }
}

/// Copies `size` bytes of `from` into `to`.
fn copy_file(from: &File, to: &File, size: u64) -> std::io::Result<()> {
    let mut buf = vec![0u8; 256 << 10];
    let mut at = 0u64;
    while at < size {
        let n = from.read_at(&mut buf, at)?;
        if n == 0 {
            break;
        }
        to.write_all_at(&buf[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

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

#[cfg(test)]
mod tests;
