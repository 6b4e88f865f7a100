//! `memory`: a tmpfs. Everything is answered on the calling thread; its futures are
//! always ready.

use std::collections::{BTreeMap, HashMap};
use std::future::ready;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use wasm9p_proto::Errno;

use super::{
    Attr, Backend, BoxFuture, Entry, Kind, NewNode, Node, OpenFile, OpenFlags, SetAttr, StatFs,
};

/// Largest file a memory mount holds (64 MiB): a guest cannot make the host allocate
/// without bound by writing at a huge offset.
pub const MAX_FILE_SIZE: u64 = 64 << 20;

#[derive(Debug)]
enum Data {
    Dir(BTreeMap<String, u64>),
    File(Vec<u8>),
    Symlink(Arc<str>),
}

#[derive(Debug)]
struct Inode {
    data: Data,
    mode: u32,
    nlink: u64,
    mtime: (u64, u32),
    atime: (u64, u32),
    ctime: (u64, u32),
}

impl Inode {
    fn kind(&self) -> Kind {
        match self.data {
            Data::Dir(_) => Kind::Dir,
            Data::File(_) => Kind::File,
            Data::Symlink(_) => Kind::Symlink,
        }
    }
}

#[derive(Debug)]
struct Table {
    inodes: HashMap<u64, Inode>,
    next: u64,
}

/// An in-memory filesystem.
#[derive(Debug)]
pub struct MemoryFs {
    table: Arc<Mutex<Table>>,
}

const ROOT: u64 = 1;

fn now() -> (u64, u32) {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs(), d.subsec_nanos())
}

impl Default for MemoryFs {
    fn default() -> Self {
        let mut inodes = HashMap::new();
        inodes.insert(
            ROOT,
            Inode {
                data: Data::Dir(BTreeMap::new()),
                mode: 0o755,
                nlink: 2,
                mtime: now(),
                atime: now(),
                ctime: now(),
            },
        );
        MemoryFs {
            table: Arc::new(Mutex::new(Table {
                inodes,
                next: ROOT + 1,
            })),
        }
    }
}

impl Table {
    fn get(&self, id: u64) -> Result<&Inode, Errno> {
        self.inodes.get(&id).ok_or(Errno::ESTALE)
    }

    fn dir(&self, id: u64) -> Result<&BTreeMap<String, u64>, Errno> {
        match &self.get(id)?.data {
            Data::Dir(entries) => Ok(entries),
            _ => Err(Errno::ENOTDIR),
        }
    }

    fn dir_mut(&mut self, id: u64) -> Result<&mut BTreeMap<String, u64>, Errno> {
        match &mut self.inodes.get_mut(&id).ok_or(Errno::ESTALE)?.data {
            Data::Dir(entries) => Ok(entries),
            _ => Err(Errno::ENOTDIR),
        }
    }

    fn node(&self, id: u64) -> Result<Node, Errno> {
        Ok(Node::new(id, self.get(id)?.kind()))
    }

    fn lookup(&self, dir: u64, name: &str) -> Result<Node, Errno> {
        let id = *self.dir(dir)?.get(name).ok_or(Errno::ENOENT)?;
        self.node(id)
    }

    fn add(&mut self, dir: u64, name: &str, data: Data, mode: u32) -> Result<Node, Errno> {
        if self.dir(dir)?.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        let id = self.next;
        self.next += 1;
        let is_dir = matches!(data, Data::Dir(_));
        self.inodes.insert(
            id,
            Inode {
                data,
                mode: mode & 0o7777,
                nlink: if is_dir { 2 } else { 1 },
                mtime: now(),
                atime: now(),
                ctime: now(),
            },
        );
        self.dir_mut(dir)?.insert(name.to_owned(), id);
        self.touch(dir);
        self.node(id)
    }

    fn touch(&mut self, id: u64) {
        if let Some(inode) = self.inodes.get_mut(&id) {
            inode.mtime = now();
            inode.ctime = inode.mtime;
        }
    }

    fn read(&self, id: u64, offset: u64, len: usize) -> Result<Bytes, Errno> {
        match &self.get(id)?.data {
            Data::File(data) => {
                let start = (offset.min(data.len() as u64)) as usize;
                let end = start.saturating_add(len).min(data.len());
                Ok(Bytes::copy_from_slice(&data[start..end]))
            }
            Data::Dir(_) => Err(Errno::EISDIR),
            Data::Symlink(_) => Err(Errno::EINVAL),
        }
    }

    /// Writes at `offset`, or at the end when `None` (append).
    fn write(&mut self, id: u64, offset: Option<u64>, data: &[u8]) -> Result<usize, Errno> {
        let inode = self.inodes.get_mut(&id).ok_or(Errno::ESTALE)?;
        let Data::File(contents) = &mut inode.data else {
            return Err(Errno::EISDIR);
        };
        let offset = offset.unwrap_or(contents.len() as u64);
        let end = offset.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
        if end > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        if contents.len() < end as usize {
            contents.resize(end as usize, 0);
        }
        contents[offset as usize..end as usize].copy_from_slice(data);
        inode.mtime = now();
        inode.ctime = inode.mtime;
        Ok(data.len())
    }

    /// Adds `delta` to a directory's link count (a subdirectory's `..` counts).
    fn adjust_nlink(&mut self, id: u64, delta: i64) {
        if let Some(inode) = self.inodes.get_mut(&id) {
            inode.nlink = inode.nlink.saturating_add_signed(delta);
        }
    }

    /// Drops one link to `id`, freeing it when none is left.
    fn unref(&mut self, id: u64) {
        if let Some(inode) = self.inodes.get_mut(&id) {
            inode.nlink = inode
                .nlink
                .saturating_sub(if matches!(inode.data, Data::Dir(_)) {
                    2
                } else {
                    1
                });
            if inode.nlink == 0 {
                self.inodes.remove(&id);
            }
        }
    }
}

impl MemoryFs {
    /// An empty filesystem.
    pub fn new() -> MemoryFs {
        MemoryFs::default()
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn unlink_now(&self, dir: u64, name: &str, dir_only: bool) -> Result<(), Errno> {
        let mut t = self.table();
        let id = *t.dir(dir)?.get(name).ok_or(Errno::ENOENT)?;
        match (&t.get(id)?.data, dir_only) {
            (Data::Dir(entries), true) if !entries.is_empty() => return Err(Errno::ENOTEMPTY),
            (Data::Dir(_), true) => {}
            (Data::Dir(_), false) => return Err(Errno::EISDIR),
            (_, true) => return Err(Errno::ENOTDIR),
            (_, false) => {}
        }
        let was_dir = matches!(t.get(id)?.data, Data::Dir(_));
        t.dir_mut(dir)?.remove(name);
        t.touch(dir);
        t.unref(id);
        if was_dir {
            t.adjust_nlink(dir, -1); // its ".." no longer links here
        }
        Ok(())
    }

    fn rename_now(&self, from_dir: u64, from: &str, to_dir: u64, to: &str) -> Result<(), Errno> {
        let mut t = self.table();
        let id = *t.dir(from_dir)?.get(from).ok_or(Errno::ENOENT)?;
        t.dir(to_dir)?;
        let moving_dir = matches!(t.get(id)?.data, Data::Dir(_));
        if moving_dir && is_under(&t, to_dir, id) {
            return Err(Errno::EINVAL); // a directory into itself
        }
        // As Linux checks first: a target that is an ancestor of the source.
        if let Some(&old) = t.dir(to_dir)?.get(to) {
            if old != id && matches!(t.get(old)?.data, Data::Dir(_)) && is_under(&t, from_dir, old)
            {
                return Err(Errno::ENOTEMPTY);
            }
        }
        if let Some(&old) = t.dir(to_dir)?.get(to) {
            if old == id {
                return Ok(());
            }
            match (&t.get(old)?.data, moving_dir) {
                (Data::Dir(e), true) if !e.is_empty() => return Err(Errno::ENOTEMPTY),
                (Data::Dir(_), false) => return Err(Errno::EISDIR),
                (_, true) if !matches!(t.get(old)?.data, Data::Dir(_)) => {
                    return Err(Errno::ENOTDIR)
                }
                _ => {}
            }
            if matches!(t.get(old)?.data, Data::Dir(_)) {
                t.adjust_nlink(to_dir, -1);
            }
            t.unref(old);
        }
        t.dir_mut(from_dir)?.remove(from);
        t.dir_mut(to_dir)?.insert(to.to_owned(), id);
        if moving_dir {
            t.adjust_nlink(from_dir, -1);
            t.adjust_nlink(to_dir, 1);
        }
        t.touch(from_dir);
        t.touch(to_dir);
        Ok(())
    }
}

/// Whether directory `dir` is `ancestor` or below it.
fn is_under(t: &Table, dir: u64, ancestor: u64) -> bool {
    // Directories have one parent; walk every directory looking for the chain. Memory
    // mounts are small, and this only runs for directory renames.
    let mut current = dir;
    for _ in 0..4096 {
        if current == ancestor {
            return true;
        }
        let parent = t.inodes.iter().find_map(|(id, inode)| match &inode.data {
            Data::Dir(entries) if entries.values().any(|v| *v == current) => Some(*id),
            _ => None,
        });
        match parent {
            Some(p) if p != current => current = p,
            _ => return false,
        }
    }
    false
}

impl Backend for MemoryFs {
    fn root(&self) -> Node {
        Node::new(ROOT, Kind::Dir)
    }

    fn lookup_cached(&self, dir: &Node, name: &str) -> Option<Result<Node, Errno>> {
        Some(self.table().lookup(dir.id, name))
    }

    fn lookup<'a>(&'a self, dir: &'a Node, name: &'a str) -> BoxFuture<'a, Result<Node, Errno>> {
        Box::pin(ready(self.table().lookup(dir.id, name)))
    }

    fn readlink_cached(&self, link: &Node) -> Option<Arc<str>> {
        match &self.table().get(link.id).ok()?.data {
            Data::Symlink(target) => Some(target.clone()),
            _ => None,
        }
    }

    fn readlink<'a>(&'a self, link: &'a Node) -> BoxFuture<'a, Result<Arc<str>, Errno>> {
        Box::pin(ready(self.readlink_cached(link).ok_or(Errno::EINVAL)))
    }

    fn getattr<'a>(&'a self, node: &'a Node) -> BoxFuture<'a, Result<Attr, Errno>> {
        Box::pin(ready(self.table().attr(node.id)))
    }

    fn readdir<'a>(
        &'a self,
        dir: &'a Node,
        cookie: u64,
    ) -> BoxFuture<'a, Result<Vec<Entry>, Errno>> {
        let t = self.table();
        let result = t.dir(dir.id).map(|entries| {
            // Names are kept sorted: entry i resumes at cookie i + 1.
            entries
                .iter()
                .enumerate()
                .skip(usize::try_from(cookie).unwrap_or(usize::MAX))
                .filter_map(|(i, (name, id))| {
                    let kind = t.get(*id).ok()?.kind();
                    Some(Entry {
                        name: name.clone(),
                        kind,
                        id: *id,
                        cookie: i as u64 + 1,
                    })
                })
                .collect()
        });
        Box::pin(ready(result))
    }

    fn make<'a>(
        &'a self,
        dir: &'a Node,
        name: &'a str,
        what: NewNode<'a>,
    ) -> BoxFuture<'a, Result<Node, Errno>> {
        let mut t = self.table();
        let made = match what {
            NewNode::Dir { mode } => {
                let made = t.add(dir.id, name, Data::Dir(BTreeMap::new()), mode);
                if made.is_ok() {
                    if let Some(parent) = t.inodes.get_mut(&dir.id) {
                        parent.nlink += 1;
                    }
                }
                made
            }
            NewNode::File { mode, exclusive } => match t.lookup(dir.id, name) {
                Ok(_) if exclusive => Err(Errno::EEXIST),
                Ok(node) if node.kind == Kind::Dir => Err(Errno::EISDIR),
                Ok(node) => Ok(node),
                Err(Errno::ENOENT) => t.add(dir.id, name, Data::File(Vec::new()), mode),
                Err(e) => Err(e),
            },
            NewNode::Symlink { target } => {
                t.add(dir.id, name, Data::Symlink(Arc::from(target)), 0o777)
            }
            // Nothing here is a FIFO, socket or device.
            NewNode::Special { .. } => Err(Errno::EPERM),
        };
        Box::pin(ready(made))
    }

    fn unlink<'a>(
        &'a self,
        dir: &'a Node,
        name: &'a str,
        dir_only: bool,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(ready(self.unlink_now(dir.id, name, dir_only)))
    }

    fn rename<'a>(
        &'a self,
        from_dir: &'a Node,
        from: &'a str,
        to_dir: &'a Node,
        to: &'a str,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(ready(self.rename_now(from_dir.id, from, to_dir.id, to)))
    }

    fn setattr<'a>(
        &'a self,
        node: &'a Node,
        attr: &'a SetAttr,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        let result = (|| {
            let mut t = self.table();
            let inode = t.inodes.get_mut(&node.id).ok_or(Errno::ESTALE)?;
            if let Some(size) = attr.size {
                resize(&mut inode.data, size)?;
            }
            if let Some(mode) = attr.mode {
                inode.mode = mode & 0o7777;
            }
            if let Some(mtime) = attr.mtime {
                inode.mtime = mtime.map(|(s, n)| (s, n as u32)).unwrap_or_else(now);
            }
            if let Some(atime) = attr.atime {
                inode.atime = atime.map(|(s, n)| (s, n as u32)).unwrap_or_else(now);
            }
            inode.ctime = now();
            Ok(())
        })();
        Box::pin(ready(result))
    }

    fn link<'a>(
        &'a self,
        target: &'a Node,
        dir: &'a Node,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        let result = (|| {
            let mut t = self.table();
            if matches!(t.get(target.id)?.data, Data::Dir(_)) {
                return Err(Errno::EPERM);
            }
            if t.dir(dir.id)?.contains_key(name) {
                return Err(Errno::EEXIST);
            }
            t.dir_mut(dir.id)?.insert(name.to_owned(), target.id);
            if let Some(inode) = t.inodes.get_mut(&target.id) {
                inode.nlink += 1;
            }
            t.touch(dir.id);
            Ok(())
        })();
        Box::pin(ready(result))
    }

    fn statfs<'a>(&'a self, _node: &'a Node) -> BoxFuture<'a, Result<StatFs, Errno>> {
        let t = self.table();
        let used: u64 = t
            .inodes
            .values()
            .map(|i| match &i.data {
                Data::File(d) => d.len() as u64,
                _ => 0,
            })
            .sum();
        let bsize = 4096u64;
        let blocks = MAX_FILE_SIZE / bsize * 16;
        let free = blocks.saturating_sub(used.div_ceil(bsize));
        let files = 1 << 20;
        Box::pin(ready(Ok(StatFs {
            bsize: bsize as u32,
            blocks,
            bfree: free,
            bavail: free,
            files,
            ffree: files.saturating_sub(t.inodes.len() as u64),
            namelen: 255,
        })))
    }

    fn open<'a>(
        &'a self,
        file: &'a Node,
        flags: OpenFlags,
    ) -> BoxFuture<'a, Result<Box<dyn OpenFile>, Errno>> {
        let result = (|| {
            let mut t = self.table();
            match &mut t.inodes.get_mut(&file.id).ok_or(Errno::ESTALE)?.data {
                Data::File(contents) => {
                    if flags.truncate && flags.write {
                        contents.clear();
                    }
                }
                Data::Dir(_) => return Err(Errno::EISDIR),
                Data::Symlink(_) => return Err(Errno::ELOOP),
            }
            let open: Box<dyn OpenFile> = Box::new(MemFile {
                table: self.table.clone(),
                id: file.id,
                flags,
            });
            Ok(open)
        })();
        Box::pin(ready(result))
    }

    fn read_at<'a>(
        &'a self,
        file: &'a Node,
        offset: u64,
        len: usize,
    ) -> BoxFuture<'a, Result<Bytes, Errno>> {
        Box::pin(ready(self.table().read(file.id, offset, len)))
    }

    fn write_at<'a>(
        &'a self,
        file: &'a Node,
        offset: u64,
        data: Bytes,
    ) -> BoxFuture<'a, Result<usize, Errno>> {
        Box::pin(ready(self.table().write(file.id, Some(offset), &data)))
    }
}

/// An open memory file: every operation is immediate, nothing is buffered.
struct MemFile {
    table: Arc<Mutex<Table>>,
    id: u64,
    flags: OpenFlags,
}

impl MemFile {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Table {
    /// Attributes of inode `id`.
    fn attr(&self, id: u64) -> Result<Attr, Errno> {
        self.get(id).map(|i| Attr {
            mode: i.mode,
            // An in-memory file belongs to whoever runs the host.
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
            special: None,
            rdev: 0,
            size: match &i.data {
                Data::File(d) => d.len() as u64,
                Data::Symlink(s) => s.len() as u64,
                Data::Dir(e) => e.len() as u64,
            },
            nlink: i.nlink,
            ino: id,
            mtime: i.mtime,
            atime: i.atime,
            ctime: i.ctime,
        })
    }
}

/// Truncates or extends file contents (EISDIR for a directory).
fn resize(data: &mut Data, size: u64) -> Result<(), Errno> {
    let Data::File(contents) = data else {
        return Err(Errno::EISDIR);
    };
    if size > MAX_FILE_SIZE {
        return Err(Errno::EFBIG);
    }
    contents.resize(size as usize, 0);
    Ok(())
}

impl OpenFile for MemFile {
    fn read_at<'a>(&'a self, offset: u64, len: usize) -> BoxFuture<'a, Result<Bytes, Errno>> {
        let result = if self.flags.read {
            self.table().read(self.id, offset, len)
        } else {
            Err(Errno::EBADF)
        };
        Box::pin(ready(result))
    }

    fn write_at<'a>(&'a self, offset: u64, data: Bytes) -> BoxFuture<'a, Result<usize, Errno>> {
        let result = match self.flags {
            OpenFlags { write: false, .. } => Err(Errno::EBADF),
            OpenFlags { append: true, .. } => self.table().write(self.id, None, &data),
            _ => self.table().write(self.id, Some(offset), &data),
        };
        Box::pin(ready(result))
    }

    fn flush<'a>(&'a self) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(ready(Ok(())))
    }

    fn fsync<'a>(&'a self, _datasync: bool) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(ready(Ok(())))
    }

    fn size<'a>(&'a self) -> BoxFuture<'a, Result<u64, Errno>> {
        let t = self.table();
        let result = match t.get(self.id).map(|i| &i.data) {
            Ok(Data::File(d)) => Ok(d.len() as u64),
            Ok(_) => Err(Errno::EINVAL),
            Err(e) => Err(e),
        };
        Box::pin(ready(result))
    }

    fn getattr<'a>(&'a self) -> BoxFuture<'a, Result<Attr, Errno>> {
        Box::pin(ready(self.table().attr(self.id)))
    }

    fn set_len<'a>(&'a self, size: u64) -> BoxFuture<'a, Result<(), Errno>> {
        let result = if self.flags.write {
            let mut t = self.table();
            match t.inodes.get_mut(&self.id) {
                Some(inode) => resize(&mut inode.data, size).map(|()| inode.ctime = now()),
                None => Err(Errno::ESTALE),
            }
        } else {
            Err(Errno::EINVAL)
        };
        Box::pin(ready(result))
    }
}
