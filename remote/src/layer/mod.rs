//! An action's file system: its input root ([`InputTree`]) with a writable layer over
//! it, as a [`NodeFs`](wasm9p_server::nodes::NodeFs) that `wasm9p_server::nodes::serve`
//! speaks 9P2000.L for.
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
//!
//! Files: `mod.rs` ([`ActionFs`], its stats and its reads of the tree), `ids.rs` (node
//! numbers and versions), `overlay.rs` (the writable layer), `node_fs.rs` (the
//! [`NodeFs`](wasm9p_server::nodes::NodeFs) implementation), `inspect.rs`
//! ([`Inspected`]).

mod ids;
mod inspect;
mod node_fs;
mod overlay;

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use wasm9p_proto::Errno;
use wasm9p_server::nodes::Kind;

use crate::digest::Digest;
use crate::store::{ContentStore, Fetch, FetchError};
use crate::tree::{Index, InputTree, TreeNode};
pub use ids::fixed_content;
pub use inspect::Inspected;

use ids::{next_made, tree_id, MADE, MADE_FILE_VERSION};
use overlay::{copy_file, now, Layer, Made};

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

fn errno_of(e: &FetchError) -> Errno {
    tracing::warn!("input root: {e}");
    Errno::EIO
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

#[cfg(test)]
mod tests;
