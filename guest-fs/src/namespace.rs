//! The guest's namespace: a mount table and path resolution inside it.
//!
//! Paths resolve component by component: the longest mount point that is a prefix of
//! the path so far wins; `.` stays; `..` goes back up the path actually taken and stops
//! at the namespace root; symlinks (relative and absolute) are read and resolved *in
//! the guest namespace*, never on the host, at most [`MAX_SYMLINK_HOPS`] of them
//! (then ELOOP). Errors are where POSIX puts them: ENOENT for a missing component,
//! ENOTDIR for a non-directory in the middle (or before a trailing `/`), EXDEV for a
//! rename across mounts, EROFS for any change on a read-only mount, EBUSY for removing
//! or renaming a mount point.
//!
//! Mount points need no directory in the mount above them: components that only lead
//! to mount points are read-only virtual directories.
//!
//! Each lookup first asks the backend's cache on the calling thread
//! ([`Backend::lookup_cached`]); only a miss awaits. So resolving a path whose
//! components are cached never suspends and never touches the network.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use wasm9p_proto::Errno;

use crate::backend::{
    Attr, Backend, Entry, Kind, NewNode, Node, OpenFile, OpenFlags, SetAttr, Special, StatFs,
};
use crate::path::SharedPath;

/// Most symlinks followed while resolving one path (Linux's MAXSYMLINKS).
pub const MAX_SYMLINK_HOPS: usize = 40;
/// Longest name of one path component (Linux NAME_MAX; the protocol's constant).
pub use wasm9p_proto::consts::NAME_MAX;
/// Longest path accepted (Linux PATH_MAX).
pub const PATH_MAX: usize = 4096;

/// One mount.
#[derive(Clone)]
pub struct Mount {
    /// Where, as path components from the namespace root (empty: the root itself).
    pub path: Vec<String>,
    /// What is mounted.
    pub backend: Arc<dyn Backend>,
    /// Refuse every change with EROFS.
    pub read_only: bool,
    /// Unmounted: no path reaches it any more, but locations resolved before (open
    /// directories) still use its backend.
    pub detached: bool,
}

/// Where a path led: a node of some mount, or a virtual directory between mounts.
#[derive(Clone, Debug)]
pub struct Location {
    /// Index of the mount, `None` for a virtual directory.
    pub mount: Option<usize>,
    /// The node (for a virtual directory, a stand-in with kind `Dir`).
    pub node: Node,
    /// The path taken, from the namespace root.
    pub path: SharedPath,
}

impl Location {
    /// `rel` under this location as an absolute guest path (`/a/b/rel`), for the WASI
    /// `*-at` calls: built from the path this location was resolved to, so a directory
    /// descriptor keeps naming the directory it opened even if a symlink that led
    /// there changes.
    pub fn join(&self, rel: &str) -> String {
        format!("/{}/{rel}", self.path.to_vec().join("/"))
    }

    /// Whether it is a directory.
    pub fn is_dir(&self) -> bool {
        self.node.kind == Kind::Dir
    }
}

/// A mount table. Cloning it is cheap (the backends are shared): a guest that mounts
/// at run time gets its own copy.
#[derive(Clone)]
pub struct Namespace {
    mounts: Vec<Mount>,
    /// Longest path accepted ([`PATH_MAX`] unless [`Namespace::without_path_max`]).
    path_max: usize,
}

impl Default for Namespace {
    fn default() -> Self {
        Namespace {
            mounts: Vec::new(),
            path_max: PATH_MAX,
        }
    }
}

fn components(path: &str, path_max: usize) -> Result<Vec<String>, Errno> {
    if path.len() > path_max {
        return Err(Errno::ENAMETOOLONG);
    }
    if path.contains('\0') {
        return Err(Errno::EINVAL);
    }
    let mut parts: Vec<String> = path
        .split('/')
        .filter(|c| !c.is_empty())
        .map(String::from)
        .collect();
    if parts.iter().any(|c| c.len() > NAME_MAX) {
        return Err(Errno::ENAMETOOLONG);
    }
    // A trailing slash demands a directory (and follows a final symlink).
    if path.ends_with('/') && !parts.is_empty() {
        parts.push(".".into());
    }
    Ok(parts)
}

impl Namespace {
    /// An empty namespace.
    pub fn new() -> Namespace {
        Namespace::default()
    }

    /// This namespace, taking paths of any length (each name still at most
    /// [`NAME_MAX`]), for a caller that joins them from names checked one by one: a
    /// FUSE mount, whose kernel bounds what a process passes by PATH_MAX but not the
    /// path from the mount's root to where the process stands.
    pub fn without_path_max(mut self) -> Namespace {
        self.path_max = usize::MAX;
        self
    }

    /// Mounts `backend` at `path` (absolute). EEXIST if something is mounted there.
    pub fn mount(
        &mut self,
        path: &str,
        backend: Arc<dyn Backend>,
        read_only: bool,
    ) -> Result<usize, Errno> {
        if !path.starts_with('/') {
            return Err(Errno::EINVAL);
        }
        let parts = components(path, self.path_max)?;
        if parts.iter().any(|c| c == "." || c == "..") {
            return Err(Errno::EINVAL);
        }
        if self.live().any(|m| m.path == parts) {
            return Err(Errno::EEXIST);
        }
        self.mounts.push(Mount {
            path: parts,
            backend,
            read_only,
            detached: false,
        });
        Ok(self.mounts.len() - 1)
    }

    /// Unmounts mount `index` (as [`Namespace::mount`] returned it): paths no longer
    /// reach it; what was opened or resolved through it before keeps working. Indices
    /// of the other mounts do not change.
    pub fn detach(&mut self, index: usize) -> Result<(), Errno> {
        match self.mounts.get_mut(index) {
            Some(m) if !m.detached => {
                m.detached = true;
                Ok(())
            }
            _ => Err(Errno::EINVAL),
        }
    }

    /// The mounts paths can reach.
    fn live(&self) -> impl Iterator<Item = &Mount> {
        self.mounts.iter().filter(|m| !m.detached)
    }

    /// The mounts, in the order they were made.
    pub fn mounts(&self) -> &[Mount] {
        &self.mounts
    }

    /// Every mount point as a guest path (`/`, `/usr`, ...), sorted, each once: what
    /// a WASI host preopens.
    pub fn mount_points(&self) -> Vec<String> {
        let mut points: Vec<String> = self
            .live()
            .map(|m| format!("/{}", m.path.join("/")))
            .collect();
        points.sort();
        points.dedup();
        points
    }

    fn mount_at(&self, path: &SharedPath) -> Option<usize> {
        self.mounts
            .iter()
            .position(|m| !m.detached && path.equals(&m.path))
    }

    fn leads_to_mount(&self, path: &SharedPath) -> bool {
        self.live()
            .any(|m| m.path.len() > path.len() && path.is_prefix_of(&m.path))
    }

    fn mount_root(&self, index: usize, path: SharedPath) -> Location {
        Location {
            mount: Some(index),
            node: self.mounts[index].backend.root(),
            path,
        }
    }

    fn virtual_dir(path: SharedPath) -> Location {
        Location {
            mount: None,
            node: Node::new(u64::MAX, Kind::Dir),
            path,
        }
    }

    fn root(&self) -> Location {
        let root = SharedPath::root();
        match self.mount_at(&root) {
            Some(m) => self.mount_root(m, root),
            None => Self::virtual_dir(root),
        }
    }

    /// `name` in the directory `dir`, not following it if it is a symlink: what a
    /// caller that walks one name at a time (FUSE) asks. On a mount that keeps fids
    /// (`cache=none` 9p), the walk is of this one name from `dir`'s fid.
    pub async fn lookup_at(&self, dir: &Location, name: &str) -> Result<Location, Errno> {
        if !dir.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
            return Err(Errno::EINVAL);
        }
        self.lookup(dir, name).await
    }

    async fn lookup(&self, dir: &Location, name: &str) -> Result<Location, Errno> {
        let path = dir.path.join(name);
        if let Some(m) = self.mount_at(&path) {
            return Ok(self.mount_root(m, path));
        }
        let Some(m) = dir.mount else {
            return if self.leads_to_mount(&path) {
                Ok(Self::virtual_dir(path))
            } else {
                Err(Errno::ENOENT)
            };
        };
        let backend = &self.mounts[m].backend;
        let found = match backend.lookup_cached(&dir.node, name) {
            Some(result) => result,
            None => backend.lookup(&dir.node, name).await,
        };
        match found {
            Ok(node) => Ok(Location {
                mount: Some(m),
                node,
                path,
            }),
            Err(Errno::ENOENT) if self.leads_to_mount(&path) => Ok(Self::virtual_dir(path)),
            Err(e) => Err(e),
        }
    }

    async fn readlink_at(&self, link: &Location) -> Result<Arc<str>, Errno> {
        let m = link.mount.ok_or(Errno::EINVAL)?;
        let backend = &self.mounts[m].backend;
        match backend.readlink_cached(&link.node) {
            Some(target) => Ok(target),
            None => backend.readlink(&link.node).await,
        }
    }

    /// Resolves `path` (relative paths start at the root too). With `follow`, a final
    /// symlink is followed; symlinks in the middle always are.
    pub async fn resolve(&self, path: &str, follow: bool) -> Result<Location, Errno> {
        let mut remaining: VecDeque<String> = components(path, self.path_max)?.into();
        let mut ancestors: Vec<Location> = Vec::new();
        let mut current = self.root();
        let mut hops = 0;
        while let Some(name) = remaining.pop_front() {
            if !current.is_dir() {
                return Err(Errno::ENOTDIR);
            }
            match name.as_str() {
                "." => continue,
                ".." => {
                    // Back along the path taken; at the root, stay there.
                    if let Some(parent) = ancestors.pop() {
                        current = parent;
                    }
                    continue;
                }
                _ => {}
            }
            let next = self.lookup(&current, &name).await?;
            if next.node.kind == Kind::Symlink && (follow || !remaining.is_empty()) {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(Errno::ELOOP);
                }
                let target = self.readlink_at(&next).await?;
                if target.is_empty() {
                    return Err(Errno::ENOENT);
                }
                for part in components(&target, self.path_max)?.into_iter().rev() {
                    remaining.push_front(part);
                }
                if target.starts_with('/') {
                    ancestors.clear();
                    current = self.root();
                }
                continue;
            }
            ancestors.push(std::mem::replace(&mut current, next));
        }
        Ok(current)
    }

    /// Checks that `rel`, resolved from the directory `base`, stays beneath it: `EPERM`
    /// if a `..` (written, or in a symlink's target) climbs above `base`, or a
    /// symlink's target is absolute; with `follow`, a final symlink counts too. This is
    /// the confinement a capability-based WASI host (cap-std's) gives a directory
    /// descriptor, for the WASI versions that check it. A path that fails otherwise
    /// (a missing component, a file in the middle, a loop) passes: the operation on it
    /// reports its own error.
    pub async fn stays_beneath(
        &self,
        base: &Location,
        rel: &str,
        follow: bool,
    ) -> Result<(), Errno> {
        let mut remaining: VecDeque<String> = components(rel, self.path_max)?.into();
        let mut depth = 0usize;
        let mut current = base.clone();
        let mut ancestors: Vec<Location> = Vec::new();
        let mut hops = 0;
        while let Some(name) = remaining.pop_front() {
            if !current.is_dir() {
                return Ok(());
            }
            match name.as_str() {
                "." => continue,
                ".." if depth == 0 => return Err(Errno::EPERM),
                ".." => {
                    depth -= 1;
                    current = ancestors.pop().expect("one ancestor per level of depth");
                    continue;
                }
                _ => {}
            }
            let Ok(next) = self.lookup(&current, &name).await else {
                return Ok(());
            };
            if next.node.kind == Kind::Symlink && (follow || !remaining.is_empty()) {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Ok(());
                }
                let Ok(target) = self.readlink_at(&next).await else {
                    return Ok(());
                };
                if target.starts_with('/') {
                    return Err(Errno::EPERM);
                }
                for part in components(&target, self.path_max)?.into_iter().rev() {
                    remaining.push_front(part);
                }
                continue;
            }
            depth += 1;
            ancestors.push(std::mem::replace(&mut current, next));
        }
        Ok(())
    }

    /// The directory that holds the last component of `path`, and that component:
    /// what create, mkdir, symlink, unlink and rename work on.
    pub async fn resolve_parent(&self, path: &str) -> Result<(Location, String), Errno> {
        let mut parts = components(path, self.path_max)?;
        if parts.last().is_some_and(|p| p == ".") && path.ends_with('/') {
            parts.pop(); // "dir/" names "dir" itself here
        }
        let name = parts.pop().ok_or(Errno::EBUSY)?; // the root has no parent
        if name == "." || name == ".." {
            return Err(Errno::EINVAL);
        }
        let parent = self.resolve(&format!("/{}", parts.join("/")), true).await?;
        if !parent.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        Ok((parent, name))
    }

    /// The backend of a location that may change, or EROFS.
    fn writable(&self, at: &Location) -> Result<&Arc<dyn Backend>, Errno> {
        match at.mount {
            Some(m) if !self.mounts[m].read_only => Ok(&self.mounts[m].backend),
            _ => Err(Errno::EROFS),
        }
    }

    fn is_mount_point(&self, dir: &Location, name: &str) -> bool {
        let path = dir.path.join(name);
        self.mount_at(&path).is_some() || self.leads_to_mount(&path)
    }

    /// Creates a directory.
    pub async fn mkdir(&self, path: &str, mode: u32) -> Result<Location, Errno> {
        let (dir, name) = self.resolve_parent(path).await?;
        if self.is_mount_point(&dir, &name) {
            return Err(Errno::EEXIST);
        }
        let node = self
            .writable(&dir)?
            .make(&dir.node, &name, NewNode::Dir { mode })
            .await?;
        Ok(Location {
            mount: dir.mount,
            node,
            path: dir.path.join(&name),
        })
    }

    /// Creates (or, unless `exclusive`, opens) a regular file; a final symlink to an
    /// existing file is followed as `open(O_CREAT)` does.
    pub async fn create(&self, path: &str, mode: u32, exclusive: bool) -> Result<Location, Errno> {
        let mut path = path.to_owned();
        for _ in 0..=MAX_SYMLINK_HOPS {
            // One walk to the parent and one lookup of the name, whatever happens next.
            let (dir, name) = self.resolve_parent(&path).await?;
            match self.lookup(&dir, &name).await {
                Ok(_) if exclusive => return Err(Errno::EEXIST),
                Ok(found) if found.node.kind == Kind::Symlink => {
                    // O_CREAT follows a final symlink, dangling or not, as Linux does.
                    let target = self.readlink_at(&found).await?;
                    path = if target.starts_with('/') {
                        target.to_string()
                    } else {
                        format!("/{}/{}", dir.path.to_vec().join("/"), target)
                    };
                    continue;
                }
                Ok(found) if found.is_dir() => return Err(Errno::EISDIR),
                Ok(found) if found.node.kind == Kind::File => return Ok(found),
                Ok(_) => return Err(Errno::EACCES), // a FIFO, socket or device
                Err(Errno::ENOENT) => {}
                Err(e) => return Err(e),
            }
            let node = self
                .writable(&dir)?
                .make(&dir.node, &name, NewNode::File { mode, exclusive })
                .await?;
            return Ok(Location {
                mount: dir.mount,
                node,
                path: dir.path.join(&name),
            });
        }
        Err(Errno::ELOOP)
    }

    /// Creates a FIFO, a Unix socket or (where the mount's backend makes them, see
    /// [`crate::backend::NewNode::Special`]) a device node `rdev` at `path`.
    pub async fn mknod(
        &self,
        path: &str,
        special: Special,
        mode: u32,
        rdev: u64,
    ) -> Result<Location, Errno> {
        let (dir, name) = self.resolve_parent(path).await?;
        if self.is_mount_point(&dir, &name) {
            return Err(Errno::EEXIST);
        }
        let node = self
            .writable(&dir)?
            .make(
                &dir.node,
                &name,
                NewNode::Special {
                    special,
                    mode,
                    rdev,
                },
            )
            .await?;
        Ok(Location {
            mount: dir.mount,
            node,
            path: dir.path.join(&name),
        })
    }

    /// Creates a symlink at `path` holding `target`. A trailing slash on `path` asks for
    /// a directory, which a symlink is not: EEXIST if a directory is there, ENOTDIR if
    /// something else is, ENOENT if nothing is (as Linux's `symlinkat`).
    pub async fn symlink(&self, target: &str, path: &str) -> Result<(), Errno> {
        let (dir, name) = self.resolve_parent(path).await?;
        if self.is_mount_point(&dir, &name) {
            return Err(Errno::EEXIST);
        }
        if path.ends_with('/') {
            // A directory there is taken; anything else is ENOTDIR or ENOENT.
            self.trailing_slash_names_dir(path).await?;
            return Err(Errno::EEXIST);
        }
        self.writable(&dir)?
            .make(&dir.node, &name, NewNode::Symlink { target })
            .await
            .map(drop)
    }

    /// Removes a file or symlink (`dir_only == false`) or an empty directory. A
    /// trailing slash names a directory: unlinking `dir/` is EISDIR, `file/` ENOTDIR.
    pub async fn unlink(&self, path: &str, dir_only: bool) -> Result<(), Errno> {
        let (dir, name) = self.resolve_parent(path).await?;
        if self.is_mount_point(&dir, &name) {
            return Err(Errno::EBUSY);
        }
        if path.ends_with('/') {
            self.trailing_slash_names_dir(path).await?;
            if !dir_only {
                return Err(Errno::EISDIR);
            }
        }
        self.writable(&dir)?
            .unlink(&dir.node, &name, dir_only)
            .await
    }

    /// Renames within one mount; EXDEV across mounts. A trailing slash on either name
    /// demands that the source is a directory (ENOTDIR otherwise).
    pub async fn rename(&self, from: &str, to: &str) -> Result<(), Errno> {
        let (from_dir, from_name) = self.resolve_parent(from).await?;
        let (to_dir, to_name) = self.resolve_parent(to).await?;
        if from.ends_with('/') || to.ends_with('/') {
            let source = self.lookup(&from_dir, &from_name).await?;
            if !source.is_dir() {
                return Err(Errno::ENOTDIR);
            }
        }
        if self.is_mount_point(&from_dir, &from_name) || self.is_mount_point(&to_dir, &to_name) {
            return Err(Errno::EBUSY);
        }
        if from_dir.mount != to_dir.mount {
            return Err(Errno::EXDEV);
        }
        let backend = self.writable(&from_dir)?;
        backend
            .rename(&from_dir.node, &from_name, &to_dir.node, &to_name)
            .await
    }

    /// With `path` ending in `/`: Ok if it names a directory (a final symlink followed),
    /// ENOTDIR if it names something else.
    async fn trailing_slash_names_dir(&self, path: &str) -> Result<(), Errno> {
        match self.resolve(path, true).await {
            Ok(found) if found.is_dir() => Ok(()),
            Ok(_) => Err(Errno::ENOTDIR),
            Err(e) => Err(e),
        }
    }

    /// The target of the symlink at `path`.
    pub async fn readlink(&self, path: &str) -> Result<Arc<str>, Errno> {
        let link = self.resolve(path, false).await?;
        if link.node.kind != Kind::Symlink {
            return Err(Errno::EINVAL);
        }
        self.readlink_at(&link).await
    }

    fn backend_of(&self, at: &Location) -> Result<&Arc<dyn Backend>, Errno> {
        at.mount
            .map(|m| &self.mounts[m].backend)
            .ok_or(Errno::EISDIR)
    }

    /// Attributes of what `path` names (a final symlink followed with `follow`).
    pub async fn getattr(&self, path: &str, follow: bool) -> Result<Attr, Errno> {
        let at = self.resolve(path, follow).await?;
        self.getattr_at(&at).await
    }

    /// Attributes of a resolved location.
    pub async fn getattr_at(&self, at: &Location) -> Result<Attr, Errno> {
        match at.mount {
            Some(m) => self.mounts[m].backend.getattr(&at.node).await,
            None => Ok(Attr {
                mode: 0o555,
                uid: rustix::process::geteuid().as_raw(),
                gid: rustix::process::getegid().as_raw(),
                special: None,
                nlink: 2,
                ino: at.node.id,
                ..Attr::default()
            }),
        }
    }

    /// Changes attributes of what `path` names.
    pub async fn setattr(&self, path: &str, attr: &SetAttr, follow: bool) -> Result<(), Errno> {
        let at = self.resolve(path, follow).await?;
        self.setattr_at(&at, attr).await
    }

    /// Changes attributes of a resolved location.
    pub async fn setattr_at(&self, at: &Location, attr: &SetAttr) -> Result<(), Errno> {
        self.writable(at)?.setattr(&at.node, attr).await
    }

    /// Makes `to` a hard link to the file at `from` (to what a final symlink there
    /// points at with `follow`, to the symlink itself without); EXDEV across mounts.
    pub async fn link(&self, from: &str, to: &str, follow: bool) -> Result<(), Errno> {
        let target = self.resolve(from, follow).await?;
        if target.is_dir() {
            return Err(Errno::EPERM);
        }
        let (dir, name) = self.resolve_parent(to).await?;
        if self.is_mount_point(&dir, &name) {
            return Err(Errno::EEXIST);
        }
        if to.ends_with('/') {
            // A new name with a trailing slash asks for a directory (Linux's linkat).
            return Err(match self.lookup(&dir, &name).await {
                Ok(_) => Errno::EEXIST,
                Err(e) => e,
            });
        }
        if target.mount != dir.mount {
            return Err(Errno::EXDEV);
        }
        self.writable(&dir)?
            .link(&target.node, &dir.node, &name)
            .await
    }

    /// Makes a resolved directory's entries durable (nothing to do for a virtual
    /// directory between mounts).
    pub async fn sync_dir_at(&self, dir: &Location) -> Result<(), Errno> {
        if !dir.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        match dir.mount {
            Some(m) => self.mounts[m].backend.sync_dir(&dir.node).await,
            None => Ok(()),
        }
    }

    /// Statistics of the file system holding `path`.
    pub async fn statfs(&self, path: &str) -> Result<StatFs, Errno> {
        let at = self.resolve(path, true).await?;
        self.backend_of(&at)?.statfs(&at.node).await
    }

    /// Entries of the directory at `path` (mount points below it included).
    pub async fn readdir(&self, path: &str) -> Result<Vec<Entry>, Errno> {
        let dir = self.resolve(path, true).await?;
        if !dir.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let mut entries = Vec::new();
        if let Some(m) = dir.mount {
            let backend = &self.mounts[m].backend;
            let mut cookie = 0;
            loop {
                let batch = backend.readdir(&dir.node, cookie).await?;
                let Some(last) = batch.last() else { break };
                if last.cookie == cookie {
                    return Err(Errno::EIO); // a cookie that does not advance would loop
                }
                cookie = last.cookie;
                entries.extend(batch);
            }
        }
        // Mount points (and the virtual directories leading to them) directly below.
        for mount in self.live() {
            if mount.path.len() > dir.path.len() && dir.path.is_prefix_of(&mount.path) {
                let name = &mount.path[dir.path.len()];
                if !entries.iter().any(|e| &e.name == name) {
                    entries.push(Entry {
                        name: name.clone(),
                        kind: Kind::Dir,
                        id: u64::MAX,
                        cookie: u64::MAX,
                    });
                }
            }
        }
        Ok(entries)
    }

    /// Opens the regular file at `path` (following symlinks). Opening for writing on a
    /// read-only mount is EROFS.
    pub async fn open(&self, path: &str, flags: OpenFlags) -> Result<Box<dyn OpenFile>, Errno> {
        let file = self.resolve(path, true).await?;
        self.open_at(&file, flags).await
    }

    /// Opens a resolved regular file.
    pub async fn open_at(
        &self,
        file: &Location,
        flags: OpenFlags,
    ) -> Result<Box<dyn OpenFile>, Errno> {
        if file.is_dir() {
            return Err(Errno::EISDIR);
        }
        let backend = if flags.write || flags.truncate {
            self.writable(file)?
        } else {
            self.backend_of(file)?
        };
        backend.open(&file.node, flags).await
    }

    /// The whole contents of the file at `path`.
    pub async fn read(&self, path: &str) -> Result<Bytes, Errno> {
        let file = self.resolve(path, true).await?;
        let m = file.mount.ok_or(Errno::EISDIR)?;
        let backend = &self.mounts[m].backend;
        let size = backend.getattr(&file.node).await?.size as usize;
        backend.read_at(&file.node, 0, size).await
    }

    /// Creates or truncates nothing: writes `data` at `offset` of the file at `path`,
    /// creating it if missing.
    pub async fn write(&self, path: &str, offset: u64, data: Bytes) -> Result<usize, Errno> {
        let file = self.create(path, 0o644, false).await?;
        let backend = self.writable(&file)?;
        backend.write_at(&file.node, offset, data).await
    }
}

#[cfg(test)]
mod tests;
