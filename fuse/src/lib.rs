//! # wasm9p-fuse: a guest-fs namespace served to the host kernel through FUSE
//!
//! What `wasm9p mount` runs: the namespace (its 9p, bind and embedded mounts, with
//! their caches) at a host directory, so that ordinary programs, and real filesystem
//! test suites, use our client and caches without v9fs. It knows nothing of wasm: its
//! dependencies are guest-fs, the protocol's errnos, `fuser` and tokio.
//!
//! Where things are:
//! - this file: [`NamespaceFs`], [`config`], and the [`Filesystem`] impl, which
//!   answers the trivial requests itself and hands every other to its family's file;
//! - `entries`: names (lookup, forget, mknod, mkdir, symlink, link, unlink, rmdir,
//!   rename, create, readlink) and who a new file belongs to;
//! - `attrs`: getattr, setattr, access, statfs;
//! - `files`: open files (open, read, write, flush, release, fsync, fallocate) and the
//!   set-ID bits a write clears;
//! - `dirs`: opendir, readdir, releasedir, fsyncdir;
//! - `nodes`: where a node id is in the namespace (located, held, resolved again) and
//!   how an errno reaches the kernel;
//! - `inodes`: the node ids; `convert`: FUSE's types from guest-fs's.
//!
//! Design:
//! - The kernel names files by node id; the namespace by path. `inodes::Inodes` maps
//!   one to the other (a file's hard links share its id, so they show as one inode) and
//!   keeps paths current across renames; an unlinked file's id
//!   lives on for its open handles, without a path: fstat and ftruncate go through
//!   an open file of it, calls that need a name get ESTALE.
//! - Every request is answered on the FUSE worker thread that read it (four workers),
//!   by running the namespace operation to completion on the mounts' tokio runtime
//!   (`Handle::block_on`). Cache hits complete without suspending.
//! - Entry and attribute lifetimes given to the kernel are zero: every lookup and
//!   getattr comes to the namespace, whose cache modes decide what is asked of the
//!   server. Files are opened for direct I/O, so the namespace's page cache is the only
//!   one (see `FILE_OPEN`).
//! - Open files are the namespace's [`OpenFile`]s (write-back and readahead as the
//!   mount's mode says), flushed on `flush` (every close) and `release`; an error a
//!   buffered write met is reported by the close that flushes it.
//! - Symlinks are resolved by the kernel, as with any filesystem: a relative target
//!   stays inside the mount, an absolute one means the host's root.

mod attrs;
mod convert;
mod dirs;
mod entries;
mod files;
mod inodes;
mod nodes;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno as FuseErrno, FileHandle, FileType, Filesystem, FopenFlags, INodeNo, LockOwner,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use wasm9p_guest_fs::backend::OpenFile;
use wasm9p_guest_fs::namespace::Namespace;

use inodes::Inodes;

/// How long the kernel may keep an entry or attributes: not at all (see the module
/// docs).
const TTL: Duration = Duration::ZERO;

/// FUSE worker threads.
const WORKERS: usize = 4;

/// Files are opened for direct I/O: every read and write comes to the namespace, whose
/// page cache (per the mount's mode) is the only one. With the kernel's page cache in
/// front as well, a page read through one open file could stay stale after a partial
/// write through another (fsx found it); the kernel still maps files (shared mappings
/// where it supports FUSE_DIRECT_IO_ALLOW_MMAP, private ones always).
const FILE_OPEN: FopenFlags = FopenFlags::FOPEN_DIRECT_IO;

/// An open directory: a snapshot of its entries taken at opendir (`.` and `..` first).
struct DirHandle {
    entries: Vec<(String, FileType, u64)>,
}

/// An open file and the node it belongs to.
struct FileEntry {
    ino: u64,
    file: Arc<dyn OpenFile>,
}

/// The namespace as a FUSE filesystem.
pub struct NamespaceFs {
    ns: Arc<Namespace>,
    rt: tokio::runtime::Handle,
    inodes: Mutex<Inodes>,
    files: Mutex<HashMap<u64, FileEntry>>,
    dirs: Mutex<HashMap<u64, DirHandle>>,
    next_fh: std::sync::atomic::AtomicU64,
    /// Nodes known to have no set-user-ID or set-group-ID bit for a write to clear
    /// (see [`NamespaceFs::clear_set_id`]); a node leaves it with every setattr of
    /// its mode or owner.
    set_id_clear: Mutex<std::collections::HashSet<u64>>,
}

impl NamespaceFs {
    /// Serves `ns`, running its operations on `rt`. Files show the owners their mount
    /// reports.
    pub fn new(ns: Arc<Namespace>, rt: tokio::runtime::Handle) -> Self {
        NamespaceFs {
            // The kernel bounds the paths processes pass, not the ones joined here from
            // the mount's root down to where a process stands.
            ns: Arc::new(Namespace::clone(&ns).without_path_max()),
            rt,
            inodes: Mutex::new(Inodes::default()),
            files: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: std::sync::atomic::AtomicU64::new(1),
            set_id_clear: Mutex::new(std::collections::HashSet::new()),
        }
    }
}

impl Filesystem for NamespaceFs {
    fn init(&mut self, _req: &Request, config: &mut fuser::KernelConfig) -> std::io::Result<()> {
        // Optional: kernels before 6.6 do not offer it (shared mmap is then ENODEV).
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        Ok(())
    }

    fn destroy(&mut self) {
        // Unmounted: whatever is still buffered goes out now.
        let files: Vec<_> = self.files.lock().unwrap().drain().collect();
        for (_, f) in files {
            let _ = self.rt.block_on(f.file.flush());
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        entries::lookup(self, parent, name, reply)
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        entries::forget(self, ino, nlookup)
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        attrs::getattr(self, ino, fh, reply)
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        attrs::setattr(self, ino, mode, uid, gid, size, atime, mtime, fh, reply)
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        entries::readlink(self, ino, reply)
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        entries::mknod(self, req, parent, name, mode, umask, rdev, reply)
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        entries::mkdir(self, req, parent, name, mode, umask, reply)
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        entries::unlink(self, parent, name, reply)
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        entries::rmdir(self, parent, name, reply)
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        entries::symlink(self, req, parent, link_name, target, reply)
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        entries::rename(self, parent, name, newparent, newname, flags, reply)
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        entries::link(self, ino, newparent, newname, reply)
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: fuser::OpenFlags, reply: ReplyOpen) {
        files::open(self, ino, flags, reply)
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        files::read(self, fh, offset, size, reply)
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        files::write(self, req, ino, fh, offset, data, write_flags, reply)
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        files::flush(self, fh, reply)
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        files::release(self, fh, reply)
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        files::fsync(self, fh, datasync, reply)
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: fuser::OpenFlags, reply: ReplyOpen) {
        dirs::opendir(self, ino, reply)
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        dirs::readdir(self, fh, offset, reply)
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: fuser::OpenFlags,
        reply: ReplyEmpty,
    ) {
        dirs::releasedir(self, fh, reply)
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        dirs::fsyncdir(self, ino, reply)
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        attrs::statfs(self, ino, reply)
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        attrs::access(self, ino, reply)
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: fuser::ReplyXattr,
    ) {
        // Not served (yet): ENOSYS makes the kernel stop asking and answer EOPNOTSUPP.
        reply.error(FuseErrno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: fuser::ReplyXattr) {
        reply.error(FuseErrno::ENOSYS);
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        // Not a terminal, and no file ioctls (isatty asks on every open by stdio).
        reply.error(FuseErrno::ENOTTY);
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        files::fallocate(self, fh, offset, length, mode, reply)
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        entries::create(self, req, parent, name, mode, umask, flags, reply)
    }
}

/// Mount options and worker threads for serving `fs` at a mount point.
pub fn config(read_only: bool, allow_other: bool) -> fuser::Config {
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("wasm9p".into()),
        fuser::MountOption::Subtype("wasm9p".into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
    ];
    if read_only {
        config.mount_options.push(fuser::MountOption::RO);
    }
    if allow_other {
        // Safe with default_permissions: the kernel checks every user's access.
        config.acl = fuser::SessionACL::All;
    }
    config.n_threads = Some(WORKERS);
    config.clone_fd = true;
    config
}
