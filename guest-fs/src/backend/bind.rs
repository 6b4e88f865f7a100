//! `bind`: a host directory, through cap-std (what `--dir HOST::GUEST` means).
//!
//! Nodes are paths relative to the bound directory; every host access is a cap-std call
//! on the directory handle, which cannot leave it whatever the path holds (symlinks are
//! resolved by the namespace, in the guest's terms, before they get here). Calls are
//! local system calls made on the calling thread: there is nothing to cache, and no
//! thread-pool hop either. This is the baseline a 9p mount is measured against.
//!
//! A path longer than the host takes in one call (a FUSE mount's, from the root of a
//! deep tree) is reached through the directories on its way, opened in turn.

use std::future::ready;
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use cap_fs_ext::{DirExt, SystemTimeSpec};
use cap_std::fs::{Dir, MetadataExt, OpenOptions, Permissions, PermissionsExt};
use wasm9p_proto::Errno;

use super::{
    Attr, Backend, BoxFuture, Entry, Kind, NewNode, Node, OpenFile, OpenFlags, SetAttr, Special,
    StatFs,
};

/// The [`Attr`] of host metadata: std's or cap-std's (the same method names, from two
/// `MetadataExt` traits).
macro_rules! attr_of {
    ($m:expr) => {
        Attr {
            mode: $m.mode() & 0o7777,
            special: super::Special::from_mode($m.mode()),
            rdev: $m.rdev(),
            uid: $m.uid(),
            gid: $m.gid(),
            size: $m.size(),
            nlink: $m.nlink(),
            ino: $m.ino(),
            mtime: ($m.mtime() as u64, $m.mtime_nsec() as u32),
            atime: ($m.atime() as u64, $m.atime_nsec() as u32),
            ctime: ($m.ctime() as u64, $m.ctime_nsec() as u32),
        }
    };
}

/// A bound host directory.
#[derive(Debug)]
pub struct BindFs {
    root: Dir,
    root_ino: u64,
}

fn errno(e: io::Error) -> Errno {
    Errno::from(&e)
}

/// The errno of a failed rustix call (the `*at` calls cap-std does not offer).
fn sys(e: rustix::io::Errno) -> Errno {
    errno(io::Error::from(e))
}

fn kind_of(ft: cap_std::fs::FileType) -> Kind {
    if ft.is_dir() {
        Kind::Dir
    } else if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_file() {
        Kind::File
    } else {
        Kind::Other
    }
}

fn path_of(node: &Node) -> Result<&Path, Errno> {
    node.handle
        .as_ref()
        .and_then(|h| h.downcast_ref::<PathBuf>())
        .map(PathBuf::as_path)
        .ok_or(Errno::EINVAL)
}

fn node(path: PathBuf, ino: u64, kind: Kind) -> Node {
    Node {
        id: ino,
        kind,
        handle: Some(Arc::new(path)),
    }
}

fn child(dir: &Node, name: &str) -> Result<PathBuf, Errno> {
    Ok(path_of(dir)?.join(name))
}

fn time_spec(t: Option<(u64, u64)>) -> SystemTimeSpec {
    match t {
        None => SystemTimeSpec::SymbolicNow,
        Some((sec, nsec)) => {
            let std = UNIX_EPOCH + Duration::new(sec, nsec as u32);
            SystemTimeSpec::from(cap_std::time::SystemTime::from_std(std))
        }
    }
}

/// Longest relative path handed to the host in one call (its PATH_MAX is 4,096):
/// the directories before the rest are opened on the way.
const HOST_PATH_MAX: usize = 4000;

/// The directory a host call is made in: the bound one, or one on the way down.
enum Base<'a> {
    Root(&'a Dir),
    Opened(Dir),
}

impl std::ops::Deref for Base<'_> {
    type Target = Dir;
    fn deref(&self) -> &Dir {
        match self {
            Base::Root(dir) => dir,
            Base::Opened(dir) => dir,
        }
    }
}

impl BindFs {
    /// Makes a FIFO or socket `name` in `dir`: the parent through cap-std (confined),
    /// the name by `mknodat` beneath it. A bind mount is the host directory itself: no
    /// device node is made in it (EPERM).
    fn mknod(&self, dir: &Node, name: &str, special: Special, mode: u32) -> Result<(), Errno> {
        if !matches!(special, Special::Fifo | Special::Socket) {
            return Err(Errno::EPERM);
        }
        let (base, rel) = self.at(path_of(dir)?)?;
        let parent = base.open_dir(self.dir_path(rel)).map_err(errno)?;
        let mode = rustix::fs::Mode::from_raw_mode(mode & 0o7777);
        let kind = rustix::fs::FileType::from_raw_mode(special.mode_bits());
        rustix::fs::mknodat(&parent, name, kind, mode, 0).map_err(sys)
    }

    /// Where to make a host call about `path`: the directory, and the path from it
    /// (at most [`HOST_PATH_MAX`] bytes).
    fn at<'p>(&self, path: &'p Path) -> Result<(Base<'_>, &'p Path), Errno> {
        let mut base = Base::Root(&self.root);
        let mut rest = path;
        while rest.as_os_str().len() > HOST_PATH_MAX {
            let mut way = PathBuf::new();
            for part in rest.components() {
                if way.as_os_str().len() + part.as_os_str().len() + 1 > HOST_PATH_MAX {
                    break;
                }
                way.push(part);
            }
            if way.as_os_str().is_empty() {
                return Err(Errno::ENAMETOOLONG);
            }
            base = Base::Opened(base.open_dir(&way).map_err(errno)?);
            rest = rest.strip_prefix(&way).map_err(|_| Errno::EINVAL)?;
        }
        Ok((base, rest))
    }

    /// Binds `host_dir` (opened with the process's ambient authority, once).
    pub fn open(host_dir: &Path) -> io::Result<BindFs> {
        let root = Dir::open_ambient_dir(host_dir, cap_std::ambient_authority())?;
        let root_ino = root.dir_metadata()?.ino();
        Ok(BindFs { root, root_ino })
    }

    fn stat(&self, path: &Path) -> Result<cap_std::fs::Metadata, Errno> {
        if path.as_os_str().is_empty() {
            self.root.dir_metadata().map_err(errno)
        } else {
            let (dir, path) = self.at(path)?;
            dir.symlink_metadata(path).map_err(errno)
        }
    }

    fn node_at(&self, path: PathBuf) -> Result<Node, Errno> {
        let m = self.stat(&path)?;
        Ok(node(path, m.ino(), kind_of(m.file_type())))
    }

    fn dir_path<'p>(&self, path: &'p Path) -> &'p Path {
        if path.as_os_str().is_empty() {
            Path::new(".")
        } else {
            path
        }
    }

    fn do_setattr(&self, path: &Path, attr: &SetAttr) -> Result<(), Errno> {
        if attr.uid.is_some() || attr.gid.is_some() {
            // chown, confined: the parent through cap-std, then one name not followed
            // (the namespace has already followed a final symlink if it was asked to).
            let uid = attr.uid.map(rustix::fs::Uid::from_raw);
            let gid = attr.gid.map(rustix::fs::Gid::from_raw);
            match (path.parent(), path.file_name()) {
                (Some(parent), Some(name)) => {
                    let (base, parent) = self.at(parent)?;
                    let dir = base.open_dir(self.dir_path(parent)).map_err(errno)?;
                    let nofollow = rustix::fs::AtFlags::SYMLINK_NOFOLLOW;
                    rustix::fs::chownat(&dir, name, uid, gid, nofollow).map_err(sys)?;
                }
                _ => {
                    let empty = rustix::fs::AtFlags::EMPTY_PATH;
                    rustix::fs::chownat(&self.root, "", uid, gid, empty).map_err(sys)?;
                }
            }
        }
        let (base, path) = self.at(path)?;
        if let Some(size) = attr.size {
            let file = base
                .open_with(path, OpenOptions::new().write(true))
                .map_err(errno)?;
            file.set_len(size).map_err(errno)?;
        }
        if let Some(mode) = attr.mode {
            base.set_permissions(self.dir_path(path), Permissions::from_mode(mode & 0o7777))
                .map_err(errno)?;
        }
        if attr.atime.is_some() || attr.mtime.is_some() {
            let atime = attr.atime.map(time_spec);
            let mtime = attr.mtime.map(time_spec);
            base.set_symlink_times(self.dir_path(path), atime, mtime)
                .map_err(errno)?;
        }
        Ok(())
    }

    fn do_open(&self, path: &Path, flags: OpenFlags) -> Result<Box<dyn OpenFile>, Errno> {
        let truncate = flags.truncate && flags.write;
        let mut options = OpenOptions::new();
        options
            .read(flags.read)
            .write(flags.write || flags.append)
            .truncate(truncate);
        // Rust's OpenOptions refuses append with truncate (EINVAL), which POSIX and
        // every other mount allow: truncate on open, then turn append on.
        options.append(flags.append && !truncate);
        let (base, path) = self.at(path)?;
        let file = base.open_with(path, &options).map_err(errno)?;
        if flags.append && truncate {
            let fl = rustix::fs::fcntl_getfl(&file).map_err(|e| errno(e.into()))?;
            rustix::fs::fcntl_setfl(&file, fl | rustix::fs::OFlags::APPEND)
                .map_err(|e| errno(e.into()))?;
        }
        if file.metadata().map_err(errno)?.is_dir() {
            return Err(Errno::EISDIR);
        }
        Ok(Box::new(BindFile {
            file: file.into_std(),
            flags,
        }))
    }
}

impl Backend for BindFs {
    fn root(&self) -> Node {
        node(PathBuf::new(), self.root_ino, Kind::Dir)
    }

    fn lookup_cached(&self, dir: &Node, name: &str) -> Option<Result<Node, Errno>> {
        // A local lookup is one system call: answer it here, never suspend.
        Some(child(dir, name).and_then(|p| self.node_at(p)))
    }

    fn lookup<'a>(&'a self, dir: &'a Node, name: &'a str) -> BoxFuture<'a, Result<Node, Errno>> {
        Box::pin(ready(child(dir, name).and_then(|p| self.node_at(p))))
    }

    fn readlink_cached(&self, link: &Node) -> Option<Arc<str>> {
        let (dir, path) = self.at(path_of(link).ok()?).ok()?;
        let target = dir.read_link_contents(path).ok()?;
        Some(Arc::from(target.to_str()?))
    }

    fn readlink<'a>(&'a self, link: &'a Node) -> BoxFuture<'a, Result<Arc<str>, Errno>> {
        let result = path_of(link).and_then(|p| {
            let (dir, p) = self.at(p)?;
            let target = dir.read_link_contents(p).map_err(errno)?;
            target.to_str().map(Arc::from).ok_or(Errno::EILSEQ)
        });
        Box::pin(ready(result))
    }

    fn getattr<'a>(&'a self, n: &'a Node) -> BoxFuture<'a, Result<Attr, Errno>> {
        let result = path_of(n).and_then(|p| self.stat(p)).map(|m| attr_of!(m));
        Box::pin(ready(result))
    }

    fn readdir<'a>(
        &'a self,
        dir: &'a Node,
        cookie: u64,
    ) -> BoxFuture<'a, Result<Vec<Entry>, Errno>> {
        let result = path_of(dir).and_then(|p| {
            let (dir, p) = self.at(p)?;
            let entries = dir.read_dir(self.dir_path(p)).map_err(errno)?;
            let mut out = Vec::new();
            for (i, entry) in entries.enumerate() {
                let entry = entry.map_err(errno)?;
                if (i as u64) < cookie {
                    continue;
                }
                let Ok(name) = entry.file_name().into_string() else {
                    continue;
                };
                let kind = entry.file_type().map(kind_of).unwrap_or(Kind::Other);
                let id = entry.metadata().map(|m| m.ino()).unwrap_or(0);
                out.push(Entry {
                    name,
                    kind,
                    id,
                    cookie: i as u64 + 1,
                });
            }
            Ok(out)
        });
        Box::pin(ready(result))
    }

    fn make<'a>(
        &'a self,
        dir: &'a Node,
        name: &'a str,
        what: NewNode<'a>,
    ) -> BoxFuture<'a, Result<Node, Errno>> {
        let result = child(dir, name).and_then(|p| {
            let (base, rel) = self.at(&p)?;
            match what {
                NewNode::Dir { mode } => {
                    let mut builder = cap_std::fs::DirBuilder::new();
                    cap_std::fs::DirBuilderExt::mode(&mut builder, mode & 0o7777);
                    base.create_dir_with(rel, &builder).map_err(errno)?;
                }
                NewNode::File { mode, exclusive } => {
                    let mut options = OpenOptions::new();
                    options.write(true);
                    if exclusive {
                        options.create_new(true);
                    } else {
                        options.create(true);
                    }
                    cap_std::fs::OpenOptionsExt::mode(&mut options, mode & 0o7777);
                    base.open_with(rel, &options).map_err(errno)?;
                }
                // The target is stored as text; the namespace resolves it in guest terms.
                NewNode::Symlink { target } => base.symlink_contents(target, rel).map_err(errno)?,
                NewNode::Special { special, mode, .. } => self.mknod(dir, name, special, mode)?,
            }
            self.node_at(p)
        });
        Box::pin(ready(result))
    }

    fn sync_dir<'a>(&'a self, dir: &'a Node) -> BoxFuture<'a, Result<(), Errno>> {
        let result = path_of(dir).and_then(|p| {
            use cap_fs_ext::OpenOptionsMaybeDirExt;
            // A readable descriptor of the directory (cap-std's Dir handles are
            // O_PATH, which fsync refuses).
            let (dir, p) = self.at(p)?;
            let opened = dir
                .open_with(
                    self.dir_path(p),
                    OpenOptions::new().read(true).maybe_dir(true),
                )
                .map_err(errno)?;
            opened.sync_all().map_err(errno)
        });
        Box::pin(ready(result))
    }

    fn unlink<'a>(
        &'a self,
        dir: &'a Node,
        name: &'a str,
        dir_only: bool,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        let result = child(dir, name).and_then(|p| {
            if dir_only {
                let (dir, rel) = self.at(&p)?;
                dir.remove_dir(rel).map_err(errno)
            } else {
                let m = self.stat(&p)?;
                if m.is_dir() {
                    return Err(Errno::EISDIR);
                }
                let (dir, rel) = self.at(&p)?;
                dir.remove_file_or_symlink(rel).map_err(errno)
            }
        });
        Box::pin(ready(result))
    }

    fn rename<'a>(
        &'a self,
        from_dir: &'a Node,
        from: &'a str,
        to_dir: &'a Node,
        to: &'a str,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        let result = (|| {
            let (a, b) = (child(from_dir, from)?, child(to_dir, to)?);
            let ((from, a), (to, b)) = (self.at(&a)?, self.at(&b)?);
            from.rename(a, &to, b).map_err(errno)
        })();
        Box::pin(ready(result))
    }

    fn setattr<'a>(&'a self, n: &'a Node, attr: &'a SetAttr) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(ready(path_of(n).and_then(|p| self.do_setattr(p, attr))))
    }

    fn link<'a>(
        &'a self,
        target: &'a Node,
        dir: &'a Node,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), Errno>> {
        let result = (|| {
            let (from, to) = (path_of(target)?, child(dir, name)?);
            let ((base, from), (dir, to)) = (self.at(from)?, self.at(&to)?);
            base.hard_link(from, &dir, to).map_err(errno)
        })();
        Box::pin(ready(result))
    }

    fn statfs<'a>(&'a self, _n: &'a Node) -> BoxFuture<'a, Result<StatFs, Errno>> {
        let result = rustix::fs::fstatvfs(&self.root)
            .map_err(|e| Errno(e.raw_os_error() as u32))
            .map(|s| StatFs {
                bsize: s.f_bsize as u32,
                blocks: s.f_blocks,
                bfree: s.f_bfree,
                bavail: s.f_bavail,
                files: s.f_files,
                ffree: s.f_ffree,
                namelen: s.f_namemax as u32,
            });
        Box::pin(ready(result))
    }

    fn open<'a>(
        &'a self,
        file: &'a Node,
        flags: OpenFlags,
    ) -> BoxFuture<'a, Result<Box<dyn OpenFile>, Errno>> {
        Box::pin(ready(path_of(file).and_then(|p| self.do_open(p, flags))))
    }

    fn read_at<'a>(
        &'a self,
        file: &'a Node,
        offset: u64,
        len: usize,
    ) -> BoxFuture<'a, Result<Bytes, Errno>> {
        let read = OpenFlags {
            read: true,
            ..Default::default()
        };
        let result = path_of(file).and_then(|p| self.do_open(p, read));
        Box::pin(async move { result?.read_at(offset, len).await })
    }

    fn write_at<'a>(
        &'a self,
        file: &'a Node,
        offset: u64,
        data: Bytes,
    ) -> BoxFuture<'a, Result<usize, Errno>> {
        let write = OpenFlags {
            write: true,
            ..Default::default()
        };
        let result = path_of(file).and_then(|p| self.do_open(p, write));
        Box::pin(async move { result?.write_at(offset, data).await })
    }
}

/// An open host file: reads and writes are immediate `pread`/`pwrite`.
struct BindFile {
    file: std::fs::File,
    flags: OpenFlags,
}

/// Largest single read served (a guest-controlled length must not make the host
/// allocate without bound).
const MAX_READ: usize = 16 << 20;

impl OpenFile for BindFile {
    fn read_at<'a>(&'a self, offset: u64, len: usize) -> BoxFuture<'a, Result<Bytes, Errno>> {
        let result = (|| {
            if !self.flags.read {
                return Err(Errno::EBADF);
            }
            let mut buf = vec![0u8; len.min(MAX_READ)];
            let mut filled = 0;
            while filled < buf.len() {
                match self
                    .file
                    .read_at(&mut buf[filled..], offset + filled as u64)
                {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(errno(e)),
                }
            }
            buf.truncate(filled);
            Ok(Bytes::from(buf))
        })();
        Box::pin(ready(result))
    }

    fn write_at<'a>(&'a self, offset: u64, data: Bytes) -> BoxFuture<'a, Result<usize, Errno>> {
        let result = if !self.flags.write && !self.flags.append {
            Err(Errno::EBADF)
        } else {
            self.file
                .write_all_at(&data, offset)
                .map(|()| data.len())
                .map_err(errno)
        };
        Box::pin(ready(result))
    }

    fn flush<'a>(&'a self) -> BoxFuture<'a, Result<(), Errno>> {
        Box::pin(ready(Ok(())))
    }

    fn fsync<'a>(&'a self, datasync: bool) -> BoxFuture<'a, Result<(), Errno>> {
        let result = if datasync {
            self.file.sync_data()
        } else {
            self.file.sync_all()
        };
        Box::pin(ready(result.map_err(errno)))
    }

    fn size<'a>(&'a self) -> BoxFuture<'a, Result<u64, Errno>> {
        Box::pin(ready(self.file.metadata().map(|m| m.len()).map_err(errno)))
    }

    fn getattr<'a>(&'a self) -> BoxFuture<'a, Result<Attr, Errno>> {
        use std::os::unix::fs::MetadataExt as _;
        let result = self.file.metadata().map_err(errno).map(|m| attr_of!(m));
        Box::pin(ready(result))
    }

    fn set_len<'a>(&'a self, size: u64) -> BoxFuture<'a, Result<(), Errno>> {
        let result = if self.flags.write {
            self.file.set_len(size).map_err(errno)
        } else {
            Err(Errno::EINVAL)
        };
        Box::pin(ready(result))
    }
}
